//! The boot ISO a BMC inserts as virtual media: the deploy agent's kernel and
//! initrd with the node's kernel command line, bootable by BIOS (isolinux) and
//! UEFI (a standalone GRUB in an El Torito EFI image).
//!
//! Stage: IO (local files). Input: [`AgentFiles`] and the node's command line
//! (server URL, boot MAC and, where toolkit gives addresses, its static address:
//! with virtual media nothing answers DHCP). Output: an ISO path, cached by what
//! went into it. One ISO per node, as Ironic makes them: the address differs, and
//! an ISO is the agent's size (tens of MB), never the OS image's. It holds no
//! secret: the node's host key still comes over HTTP, to its address only.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::agent::AgentFiles;
#[cfg(test)]
use super::agent::cmdline;
use super::image::{ImageError, Steps, io};

/// isolinux from Debian's `isolinux` package, and the module it loads.
const ISOLINUX: &str = "/usr/lib/ISOLINUX/isolinux.bin";
const LDLINUX: &str = "/usr/lib/syslinux/modules/bios/ldlinux.c32";

/// A marker file GRUB finds the ISO by (the CD's device name differs by firmware).
const MARKER: &str = "toolkit-agent";

fn isolinux_cfg(cmdline: &str) -> String {
    format!(
        "DEFAULT agent\nPROMPT 0\nTIMEOUT 0\nLABEL agent\n  KERNEL /vmlinuz\n  INITRD /agent.img\n  APPEND {cmdline}\n"
    )
}

fn grub_cfg(cmdline: &str) -> String {
    format!(
        "set timeout=0\nsearch --no-floppy --file --set=root /{MARKER}\n\
         linux /vmlinuz {cmdline}\ninitrd /agent.img\nboot\n"
    )
}

/// The ISO booting `agent` with `cmdline`, built once under `cache/isos`.
///
/// # Errors
/// [`ImageError`]: a tool missing (with the package to install) or failing, or a
/// file that cannot be written.
pub fn build(agent: &AgentFiles, cmdline: &str, cache: &Path) -> Result<PathBuf, ImageError> {
    let kernel = agent.kernel.display().to_string();
    let initrd = agent.initrd.display().to_string();
    let id = crate::compile::fields_sha256([kernel.as_str(), initrd.as_str(), cmdline, ISOLINUX, MARKER]);
    let dir = cache.join("isos").join(&id[..16]);
    let iso = dir.join("boot.iso");
    if iso.is_file() {
        return Ok(iso);
    }
    let work = dir.join("work");
    if work.exists() {
        fs::remove_dir_all(&work).map_err(io(&work))?;
    }
    let tree = work.join("tree");
    fs::create_dir_all(tree.join("isolinux")).map_err(io(&tree))?;
    let log_path = dir.join("build.log");
    let mut log = File::create(&log_path).map_err(io(&log_path))?;
    let mut steps = Steps { log: &mut log, log_path: &log_path };

    for (from, to) in [
        (agent.kernel.as_path(), tree.join("vmlinuz")),
        (agent.initrd.as_path(), tree.join("agent.img")),
        (Path::new(ISOLINUX), tree.join("isolinux/isolinux.bin")),
        (Path::new(LDLINUX), tree.join("isolinux/ldlinux.c32")),
    ] {
        if !from.is_file() && from.starts_with("/usr/lib") {
            return Err(ImageError::MissingTool {
                program: from.display().to_string(),
                hint: "apt-get install isolinux syslinux-common",
            });
        }
        fs::copy(from, &to).map_err(io(&to))?;
    }
    let write = |path: PathBuf, text: String| fs::write(&path, text).map_err(io(&path));
    write(tree.join(MARKER), String::new())?;
    write(tree.join("isolinux/isolinux.cfg"), isolinux_cfg(cmdline))?;

    // UEFI: the El Torito EFI image is a small FAT file system with GRUB in it.
    let grub_cfg_path = work.join("grub.cfg");
    write(grub_cfg_path.clone(), grub_cfg(cmdline))?;
    let grub_efi = work.join("BOOTX64.EFI");
    let mut grub = Command::new("grub-mkstandalone");
    // Only the modules the script needs go in GRUB's memory disk: the whole set is
    // ~15 MB, this ~2 MB.
    let modules = "iso9660 search search_fs_file linux normal part_msdos part_gpt";
    grub.args(["-O", "x86_64-efi", &format!("--modules={modules}"), &format!("--install-modules={modules}"), "-o"])
        .arg(&grub_efi)
        .arg(format!("boot/grub/grub.cfg={}", grub_cfg_path.display()));
    steps.run(grub, "apt-get install grub-efi-amd64-bin")?;
    let efi = tree.join("efiboot.img");
    let mut mkfs = Command::new("mkfs.vfat");
    let grub_kib = fs::metadata(&grub_efi).map_err(io(&grub_efi))?.len().div_ceil(1024);
    mkfs.args(["-n", "EFIBOOT", "-C"]).arg(&efi).arg((grub_kib + 512).max(1440).to_string());
    steps.run(mkfs, "apt-get install dosfstools")?;
    let mut mkdir = Command::new("mmd");
    mkdir.arg("-i").arg(&efi).args(["::/EFI", "::/EFI/BOOT"]);
    steps.run(mkdir, "apt-get install mtools")?;
    let mut copy = Command::new("mcopy");
    copy.arg("-i").arg(&efi).arg(&grub_efi).arg("::/EFI/BOOT/BOOTX64.EFI");
    steps.run(copy, "apt-get install mtools")?;

    let partial = dir.join("boot.iso.partial");
    let mut xorriso = Command::new("xorriso");
    xorriso
        .args(["-as", "mkisofs", "-quiet", "-V", "TOOLKIT_AGENT", "-R", "-J", "-o"])
        .arg(&partial)
        .args(["-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat"])
        .args(["-no-emul-boot", "-boot-load-size", "4", "-boot-info-table"])
        .args(["-eltorito-alt-boot", "-e", "efiboot.img", "-no-emul-boot"])
        .arg(&tree);
    steps.run(xorriso, "apt-get install xorriso")?;
    fs::rename(&partial, &iso).map_err(io(&iso))?;
    let _ = fs::remove_dir_all(&work);
    Ok(iso)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ISO from stand-in kernel and initrd files: xorriso's own listing shows the
    /// BIOS and the UEFI boot entries and the files, and the same inputs reuse it.
    #[test]
    fn the_iso_boots_by_bios_and_uefi_and_is_built_once() {
        for (program, package) in
            [("xorriso", "xorriso"), ("grub-mkstandalone", "grub-efi-amd64-bin"), ("mcopy", "mtools")]
        {
            if Command::new(program).arg("--version").output().is_err() {
                crate::testing::cannot_run(&format!("{program} is not installed: apt-get install {package}"));
                return;
            }
        }
        if !Path::new(ISOLINUX).is_file() {
            crate::testing::cannot_run("isolinux is not installed: apt-get install isolinux");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let kernel = dir.path().join("vmlinuz");
        let initrd = dir.path().join("initrd.img");
        fs::write(&kernel, b"kernel").expect("writes");
        fs::write(&initrd, b"initrd").expect("writes");
        let agent = AgentFiles { kernel, initrd };
        let line = cmdline("http://10.77.0.1:8069", "52:54:00:77:00:12", None);
        let iso = build(&agent, &line, dir.path()).expect("builds");
        let report = Command::new("xorriso")
            .args(["-indev"])
            .arg(&iso)
            .args(["-report_el_torito", "plain", "-find", "/", "-type", "f"])
            .output()
            .expect("xorriso runs");
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(text.contains("El Torito boot img :   1  BIOS"), "{text}");
        assert!(text.contains("El Torito boot img :   2  UEFI"), "{text}");
        for file in ["/vmlinuz", "/agent.img", "/isolinux/isolinux.cfg", &format!("/{MARKER}")] {
            assert!(text.contains(&format!("'{file}'")), "{file} in {text}");
        }
        let modified = fs::metadata(&iso).and_then(|meta| meta.modified()).expect("mtime");
        let again = build(&agent, &line, dir.path()).expect("cached");
        assert_eq!(again, iso);
        assert_eq!(fs::metadata(&again).and_then(|meta| meta.modified()).expect("mtime"), modified);
        let other = build(&agent, &cmdline("http://10.77.0.1:8069", "52:54:00:77:00:11", None), dir.path())
            .expect("another node's");
        assert_ne!(other, iso, "another command line, another ISO");
    }
}
