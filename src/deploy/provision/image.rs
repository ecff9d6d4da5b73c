//! The OS image toolkit writes to a bare-metal node: a whole-disk raw image built
//! from the distribution's packages, cached by a hash of everything that goes in.
//!
//! Stage: IO (local: debootstrap, chroot, mkfs tools). Input: an [`ImageSpec`].
//! Output: a [`BuiltImage`]: `disk.img` (MBR: partition 1 a FAT ESP that boots BIOS
//! machines through syslinux and UEFI machines through a standalone GRUB at
//! `\EFI\BOOT\BOOTX64.EFI`, partition 2 the ext4 root made with `mke2fs -d`), its
//! size and SHA-256, and the kernel and initrd the deploy agent boots. No loop
//! device and no mount on the build host: every file system is made from a
//! directory or filled through mtools, so a build needs root only for debootstrap.
//!
//! The image is the same for every node (as Ironic's whole-disk images and
//! Warewulf's node images are): host name, network, keys come from the per-node
//! overlay the agent lays over it. It has no host keys, no machine-id, no
//! password; sshd takes keys only.

use std::fs::{self, File};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

/// The distribution an image is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Debian (`deb.debian.org`, debian-archive-keyring).
    Debian,
    /// Ubuntu (the site's mirror, ubuntu-keyring).
    Ubuntu,
}

/// Everything that decides an image's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSpec {
    /// Debian or Ubuntu.
    pub distribution: Distribution,
    /// Release code name (`bookworm`).
    pub suite: String,
    /// Package mirror.
    pub mirror: String,
    /// Kernel package.
    pub kernel_package: String,
    /// Packages beyond the base set.
    pub packages: Vec<String>,
    /// System locale.
    pub locale: String,
    /// Time zone.
    pub timezone: String,
    /// The user deploy logs in as (made in the image when not `root`).
    pub ssh_user: String,
}

/// What toolkit needs on every node it installs, beyond the caller's packages:
/// boot (kernel, systemd, udev, an initramfs with busybox for the deploy agent),
/// remote access (OpenSSH, sudo), and what deploy's probes run (python3, iproute2).
const BASE_PACKAGES: &[&str] = &[
    "systemd-sysv",
    // The system bus: systemd's own tools and Slurm's cgroup/v2 plugin (slurmd asks
    // systemd for its stepd scope over D-Bus and fails to start without it).
    "dbus",
    "udev",
    "kmod",
    "initramfs-tools",
    "busybox",
    "openssh-server",
    "sudo",
    "iproute2",
    "iputils-ping",
    "procps",
    "python3-minimal",
    "ca-certificates",
    "netbase",
    "locales",
    "tzdata",
    "cloud-guest-utils",
    "e2fsprogs",
];

/// Version of the recipe below: a change to how images are put together changes it,
/// so no cached image of the old recipe is taken for a new one.
const RECIPE: &str = "toolkit-os-image v1";

/// The ESP: the kernel and initrd (syslinux reads them from here), syslinux and GRUB.
const ESP_MIB: u64 = 256;
/// Where partition 1 starts (1 MiB, as every partitioning tool aligns it).
const FIRST_SECTOR: u64 = 2048;
const SECTOR: u64 = 512;
const MIB: u64 = 1 << 20;

impl ImageSpec {
    /// Every package the image gets, sorted and without duplicates.
    #[must_use]
    pub fn all_packages(&self) -> Vec<String> {
        let mut packages: Vec<String> = BASE_PACKAGES.iter().map(|name| (*name).to_owned()).collect();
        packages.push(self.kernel_package.clone());
        if self.distribution == Distribution::Ubuntu {
            // Ubuntu's minbase lacks the keyring debootstrap verified the archive with.
            packages.push("ubuntu-keyring".to_owned());
        }
        packages.extend(self.packages.iter().cloned());
        packages.sort();
        packages.dedup();
        packages
    }

    /// SHA-256 (hex) over the recipe version and every field: the cache key.
    #[must_use]
    pub fn hash(&self) -> String {
        let distribution = match self.distribution {
            Distribution::Debian => "debian",
            Distribution::Ubuntu => "ubuntu",
        };
        let packages = self.all_packages();
        let fields = [RECIPE, distribution, &self.suite, &self.mirror]
            .into_iter()
            .chain(packages.iter().map(String::as_str))
            .chain([self.locale.as_str(), &self.timezone, &self.ssh_user, PREPARE]);
        crate::compile::fields_sha256(fields)
    }

    /// The debootstrap command line that makes the root at `root`, `.deb`s kept in `debs`.
    #[must_use]
    pub fn debootstrap_args(&self, root: &Path, debs: &Path) -> Vec<String> {
        let mut args = vec![
            "--variant=minbase".to_owned(),
            format!("--include={}", self.all_packages().join(",")),
            format!("--cache-dir={}", debs.display()),
        ];
        if self.distribution == Distribution::Ubuntu {
            args.push("--components=main,universe".to_owned());
            args.push("--keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg".to_owned());
        }
        args.extend([self.suite.clone(), root.display().to_string(), self.mirror.clone()]);
        args
    }
}

/// A built image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuiltImage {
    /// The recipe hash ([`ImageSpec::hash`]).
    pub id: String,
    /// The whole-disk image.
    pub disk: PathBuf,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of its bytes (hex).
    pub sha256: String,
    /// The root file system's partition number.
    pub root_partition: u32,
    /// The root file system's UUID.
    pub root_uuid: String,
    /// The kernel of the image (also what the deploy agent boots).
    pub kernel: PathBuf,
    /// The image's own initramfs (the agent's initrd is made from it).
    pub initrd: PathBuf,
}

/// Why an image could not be built.
#[derive(Debug, Error)]
pub enum ImageError {
    /// A file or directory could not be read or written.
    #[error("OS image: `{path}`: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A build step failed.
    #[error("OS image: `{program}` failed: {message} (full log: `{log}`)")]
    Step {
        /// The program.
        program: String,
        /// Its last words.
        message: String,
        /// The build log.
        log: PathBuf,
    },
    /// A program the build needs is not installed.
    #[error("OS image: `{program}` is not installed: {hint}")]
    MissingTool {
        /// The program.
        program: String,
        /// How to get it.
        hint: &'static str,
    },
    /// The root holds no kernel.
    #[error("OS image: no kernel in `{0}` (is the kernel package right?)")]
    NoKernel(PathBuf),
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io { path: path.to_owned(), source }
}

/// `$XDG_CACHE_HOME/toolkit/os`, else `~/.cache/toolkit/os`, else `.toolkit/os`.
#[must_use]
pub fn default_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").filter(|value| !value.is_empty()).map(|home| PathBuf::from(home).join(".cache"))
        })
        .map_or_else(|| PathBuf::from(".toolkit/os"), |base| base.join("toolkit").join("os"))
}

/// The image of `spec` under `cache`, built when it is not there yet. Builds are
/// serialised by a lock file; a present image is returned without reading it.
///
/// # Errors
/// [`ImageError`] naming the failed step and its log.
pub fn build(spec: &ImageSpec, cache: &Path) -> Result<BuiltImage, ImageError> {
    let id = spec.hash();
    let dir = cache.join("images").join(&id[..16]);
    let manifest = dir.join("image.json");
    if let Some(built) = read_manifest(&manifest) {
        return Ok(built);
    }
    fs::create_dir_all(&dir).map_err(io(&dir))?;
    let lock_path = cache.join("build.lock");
    let lock = File::create(&lock_path).map_err(io(&lock_path))?;
    lock.lock().map_err(io(&lock_path))?;
    if let Some(built) = read_manifest(&manifest) {
        return Ok(built);
    }
    let log_path = dir.join("build.log");
    let mut log = File::create(&log_path).map_err(io(&log_path))?;
    let started = Instant::now();
    let work = dir.join("work");
    if work.exists() {
        fs::remove_dir_all(&work).map_err(io(&work))?;
    }
    fs::create_dir_all(&work).map_err(io(&work))?;
    let root = work.join("root");
    let debs = cache.join("debs").join(&spec.suite);
    fs::create_dir_all(&debs).map_err(io(&debs))?;
    let mut steps = Steps { log: &mut log, log_path: &log_path };
    debootstrap(spec, &root, &debs, &mut steps)?;
    let _ = writeln!(steps.log, "== debootstrap done after {:.0?}", started.elapsed());
    prepare_root(spec, &root, &mut steps)?;
    let built = assemble(&id, &root, &work, &dir, &mut steps)?;
    let _ = writeln!(steps.log, "== image built in {:.0?}: {} bytes", started.elapsed(), built.size_bytes);
    // The tree is 1 GB of what the image already holds.
    let _ = fs::remove_dir_all(&work);
    let json = serde_json::to_vec_pretty(&built).map_err(|error| io(&manifest)(std::io::Error::other(error)))?;
    crate::plan::state::write_atomic(&manifest, &json).map_err(io(&manifest))?;
    drop(lock);
    Ok(built)
}

fn read_manifest(path: &Path) -> Option<BuiltImage> {
    let built: BuiltImage = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    (built.disk.is_file() && built.kernel.is_file() && built.initrd.is_file()).then_some(built)
}

/// Runs build steps, each logged; a failure names the step and the log.
pub(super) struct Steps<'a> {
    pub(super) log: &'a mut File,
    pub(super) log_path: &'a Path,
}

impl Steps<'_> {
    pub(super) fn run(&mut self, mut command: Command, hint: &'static str) -> Result<String, ImageError> {
        let program = command.get_program().to_string_lossy().into_owned();
        let _ = writeln!(self.log, "$ {program} {}", shell_words(&command));
        let output = command.stdin(Stdio::null()).output().map_err(|error| {
            if error.kind() == std::io::ErrorKind::NotFound {
                ImageError::MissingTool { program: program.clone(), hint }
            } else {
                ImageError::Io { path: PathBuf::from(&program), source: error }
            }
        })?;
        let _ = self.log.write_all(&output.stdout);
        let _ = self.log.write_all(&output.stderr);
        if !output.status.success() {
            let text = String::from_utf8_lossy(&output.stderr);
            let text = if text.trim().is_empty() { String::from_utf8_lossy(&output.stdout) } else { text };
            let message =
                text.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" / ");
            return Err(ImageError::Step { program, message, log: self.log_path.to_owned() });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

fn shell_words(command: &Command) -> String {
    command.get_args().map(|arg| arg.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}

fn debootstrap(spec: &ImageSpec, root: &Path, debs: &Path, steps: &mut Steps<'_>) -> Result<(), ImageError> {
    // Daemons must not start while packages install: on the build host they would be
    // the host's daemons.
    let sbin = root.join("usr/sbin");
    fs::create_dir_all(&sbin).map_err(io(&sbin))?;
    let policy = sbin.join("policy-rc.d");
    fs::write(&policy, "#!/bin/sh\nexit 101\n").map_err(io(&policy))?;
    fs::set_permissions(&policy, fs::Permissions::from_mode(0o755)).map_err(io(&policy))?;
    let mut command = Command::new("debootstrap");
    command.args(spec.debootstrap_args(root, debs));
    steps.run(command, "apt-get install debootstrap, and run as root")?;
    Ok(())
}

/// What runs inside the new root before it becomes the image (see its comments).
pub const PREPARE: &str = include_str!("../../../templates/provision/prepare-image.sh");

fn prepare_root(spec: &ImageSpec, root: &Path, steps: &mut Steps<'_>) -> Result<(), ImageError> {
    let script = root.join("tmp/toolkit-prepare.sh");
    fs::write(&script, PREPARE).map_err(io(&script))?;
    let mut command = Command::new("chroot");
    command
        .arg(root)
        .args(["/bin/sh", "/tmp/toolkit-prepare.sh"])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("TOOLKIT_LOCALE", &spec.locale)
        .env("TOOLKIT_TIMEZONE", &spec.timezone)
        .env("TOOLKIT_USER", &spec.ssh_user);
    steps.run(command, "chroot is part of coreutils; run as root")?;
    fs::remove_file(&script).map_err(io(&script))?;
    Ok(())
}

/// The kernel and initrd files the root's `/vmlinuz` and `/initrd.img` point to.
fn boot_files(root: &Path) -> Result<(PathBuf, PathBuf), ImageError> {
    let boot = root.join("boot");
    let mut kernels: Vec<PathBuf> = fs::read_dir(&boot)
        .map_err(io(&boot))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("vmlinuz-")))
        .collect();
    kernels.sort();
    let kernel = kernels.pop().ok_or_else(|| ImageError::NoKernel(boot.clone()))?;
    let version = kernel.file_name().map(|name| name.to_string_lossy().trim_start_matches("vmlinuz-").to_owned());
    let initrd = boot.join(format!("initrd.img-{}", version.unwrap_or_default()));
    if !initrd.is_file() {
        return Err(ImageError::NoKernel(initrd));
    }
    Ok((kernel, initrd))
}

fn assemble(id: &str, root: &Path, work: &Path, dir: &Path, steps: &mut Steps<'_>) -> Result<BuiltImage, ImageError> {
    let (kernel_in_root, initrd_in_root) = boot_files(root)?;
    let kernel = dir.join("vmlinuz");
    let initrd = dir.join("initrd.img");
    fs::copy(&kernel_in_root, &kernel).map_err(io(&kernel))?;
    fs::copy(&initrd_in_root, &initrd).map_err(io(&initrd))?;
    // Fixed from the recipe hash: the same recipe gives the same file systems' ids.
    let root_uuid = format!("{}-{}-4{}-8{}-{}", &id[0..8], &id[8..12], &id[13..16], &id[17..20], &id[20..32]);
    let esp_id = id[32..40].to_ascii_uppercase();
    let esp_uuid = format!("{}-{}", &esp_id[..4], &esp_id[4..]);
    fs::write(
        root.join("etc/fstab"),
        format!(
            "# Written by toolkit's image build.\nUUID={root_uuid} / ext4 errors=remount-ro 0 1\n\
             UUID={esp_uuid} /boot/efi vfat umask=0077,nofail 0 2\n"
        ),
    )
    .map_err(io(&root.join("etc/fstab")))?;
    fs::create_dir_all(root.join("boot/efi")).map_err(io(&root.join("boot/efi")))?;
    let cmdline = format!("root=UUID={root_uuid} ro console=tty0 console=ttyS0,115200");

    // Partition 2: ext4 from the tree with a little room: the image stays small so
    // writing it is quick, and the node grows the partition and the file system to
    // its disk at boot (`toolkit-grow-root.service`, see prepare-image.sh).
    let used = tree_size(root)?;
    let root_bytes = ((used + used / 10 + 128 * MIB) / MIB + 1) * MIB;
    let root_image = work.join("root.ext4");
    let mut mke2fs = Command::new("mke2fs");
    mke2fs
        .args(["-q", "-t", "ext4", "-L", "root", "-U", &root_uuid, "-E", "root_owner=0:0", "-d"])
        .arg(root)
        .arg(&root_image)
        .arg(format!("{}k", root_bytes / 1024))
        .env("E2FSPROGS_FAKE_TIME", "1700000000");
    steps.run(mke2fs, "apt-get install e2fsprogs")?;

    // Partition 1: the ESP, filled through mtools.
    let esp = work.join("esp.vfat");
    let mut mkfs = Command::new("mkfs.vfat");
    mkfs.args(["-F", "32", "-n", "ESP", "-i", &esp_id, "-C"]).arg(&esp).arg((ESP_MIB * 1024).to_string());
    steps.run(mkfs, "apt-get install dosfstools")?;
    let syslinux_cfg = work.join("syslinux.cfg");
    fs::write(
        &syslinux_cfg,
        format!("DEFAULT linux\nTIMEOUT 0\nPROMPT 0\nLABEL linux\n  KERNEL /vmlinuz\n  INITRD /initrd.img\n  APPEND {cmdline}\n"),
    )
    .map_err(io(&syslinux_cfg))?;
    // UEFI: GRUB reads the kernel from the root file system through the `/vmlinuz`
    // and `/initrd.img` links Debian keeps current, so a kernel update boots.
    let grub_cfg = work.join("grub.cfg");
    fs::write(
        &grub_cfg,
        format!(
            "set timeout=0\nsearch --no-floppy --fs-uuid --set=root {root_uuid}\n\
             linux /vmlinuz {cmdline}\ninitrd /initrd.img\nboot\n"
        ),
    )
    .map_err(io(&grub_cfg))?;
    let grub_efi = work.join("BOOTX64.EFI");
    let mut grub = Command::new("grub-mkstandalone");
    grub.args(["-O", "x86_64-efi", "--modules=part_msdos part_gpt ext2 fat search search_fs_uuid linux normal", "-o"])
        .arg(&grub_efi)
        .arg(format!("boot/grub/grub.cfg={}", grub_cfg.display()));
    steps.run(grub, "apt-get install grub-efi-amd64-bin")?;
    let mtools = |args: &[&str], files: &[&Path]| {
        let mut command = Command::new(args[0]);
        command.arg("-i").arg(&esp).args(&args[1..]);
        for file in files {
            command.arg(file);
        }
        command
    };
    steps.run(mtools(&["mmd", "::/EFI", "::/EFI/BOOT", "::/syslinux"], &[]), "apt-get install mtools")?;
    for (file, to) in [
        (&kernel, "::/vmlinuz"),
        (&initrd, "::/initrd.img"),
        (&syslinux_cfg, "::/syslinux/syslinux.cfg"),
        (&grub_efi, "::/EFI/BOOT/BOOTX64.EFI"),
    ] {
        let mut command = mtools(&["mcopy"], &[file]);
        command.arg(to);
        steps.run(command, "apt-get install mtools")?;
    }
    let mut syslinux = Command::new("syslinux");
    syslinux.args(["--install", "--directory", "/syslinux"]).arg(&esp);
    steps.run(syslinux, "apt-get install syslinux syslinux-common")?;

    // The disk: an MBR with the ESP (type EF, active: BIOS boots it) and the root.
    let esp_sectors = ESP_MIB * MIB / SECTOR;
    let root_start = FIRST_SECTOR + esp_sectors;
    let root_sectors = root_bytes / SECTOR;
    let size_bytes = (root_start + root_sectors) * SECTOR + MIB;
    let disk = dir.join("disk.img");
    let partial = dir.join("disk.img.partial");
    let file = File::create(&partial).map_err(io(&partial))?;
    file.set_len(size_bytes).map_err(io(&partial))?;
    drop(file);
    let mut sfdisk = Command::new("sfdisk");
    sfdisk.arg("--quiet").arg("--no-reread").arg("--no-tell-kernel").arg(&partial);
    let table = format!(
        "label: dos\nlabel-id: 0x{}\nstart={FIRST_SECTOR}, size={esp_sectors}, type=ef, bootable\nstart={root_start}, size={root_sectors}, type=83\n",
        &id[40..48]
    );
    run_with_input(sfdisk, &table, steps)?;
    copy_into(&esp, &partial, FIRST_SECTOR * SECTOR)?;
    copy_into(&root_image, &partial, root_start * SECTOR)?;
    // syslinux's MBR code: the first 440 bytes, before the partition table.
    let mbr = Path::new("/usr/lib/syslinux/mbr/mbr.bin");
    let code = fs::read(mbr).map_err(|_| ImageError::MissingTool {
        program: mbr.display().to_string(),
        hint: "apt-get install syslinux-common",
    })?;
    let mut out = fs::OpenOptions::new().write(true).open(&partial).map_err(io(&partial))?;
    out.write_all(&code[..code.len().min(440)]).map_err(io(&partial))?;
    out.sync_all().map_err(io(&partial))?;
    drop(out);
    let sha256 = file_sha256(&partial)?;
    fs::rename(&partial, &disk).map_err(io(&disk))?;
    Ok(BuiltImage { id: id.to_owned(), disk, size_bytes, sha256, root_partition: 2, root_uuid, kernel, initrd })
}

fn run_with_input(mut command: Command, input: &str, steps: &mut Steps<'_>) -> Result<(), ImageError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let _ = writeln!(steps.log, "$ {program} {} <<EOF\n{input}EOF", shell_words(&command));
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|_| ImageError::MissingTool { program: program.clone(), hint: "apt-get install fdisk" })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).map_err(io(Path::new(&program)))?;
    }
    let output = child.wait_with_output().map_err(io(Path::new(&program)))?;
    let _ = steps.log.write_all(&output.stderr);
    if output.status.success() {
        Ok(())
    } else {
        Err(ImageError::Step {
            program,
            message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            log: steps.log_path.to_owned(),
        })
    }
}

/// Copies `from` into `to` at byte `offset`, leaving the rest of `to` as it is.
fn copy_into(from: &Path, to: &Path, offset: u64) -> Result<(), ImageError> {
    let mut source = File::open(from).map_err(io(from))?;
    let mut target = fs::OpenOptions::new().write(true).open(to).map_err(io(to))?;
    target.seek(SeekFrom::Start(offset)).map_err(io(to))?;
    std::io::copy(&mut source, &mut target).map_err(io(to))?;
    Ok(())
}

/// SHA-256 (hex) of a file's bytes.
///
/// # Errors
/// The file cannot be read.
pub fn file_sha256(path: &Path) -> Result<String, ImageError> {
    let mut file = File::open(path).map_err(io(path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer).map_err(io(path))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Bytes the files under `root` take (apparent sizes, plus a block per entry).
fn tree_size(root: &Path) -> Result<u64, ImageError> {
    let mut total = 0;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let metadata = entry.metadata().map_err(io(&entry.path()))?;
            total += metadata.len().div_ceil(4096) * 4096 + 256;
            if metadata.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn debian() -> ImageSpec {
        ImageSpec {
            distribution: Distribution::Debian,
            suite: "bookworm".to_owned(),
            mirror: "http://deb.debian.org/debian".to_owned(),
            kernel_package: "linux-image-amd64".to_owned(),
            packages: vec!["slurmd".to_owned(), "sudo".to_owned()],
            locale: "C.UTF-8".to_owned(),
            timezone: "Etc/UTC".to_owned(),
            ssh_user: "root".to_owned(),
        }
    }

    #[test]
    fn every_input_changes_the_hash() {
        let base = debian();
        let mut seen = std::collections::HashSet::from([base.hash()]);
        let edits: [fn(&mut ImageSpec); 7] = [
            |spec| spec.suite = "trixie".to_owned(),
            |spec| spec.mirror = "http://mirror.example/debian".to_owned(),
            |spec| spec.kernel_package = "linux-image-cloud-amd64".to_owned(),
            |spec| spec.packages.push("munge".to_owned()),
            |spec| spec.locale = "en_US.UTF-8".to_owned(),
            |spec| spec.timezone = "Europe/Paris".to_owned(),
            |spec| spec.ssh_user = "ops".to_owned(),
        ];
        for edit in edits {
            let mut spec = base.clone();
            edit(&mut spec);
            assert!(seen.insert(spec.hash()), "{spec:?}");
        }
        // Order and duplicates of the package list do not matter.
        let mut reordered = base.clone();
        reordered.packages = vec!["sudo".to_owned(), "slurmd".to_owned(), "slurmd".to_owned()];
        assert_eq!(reordered.hash(), base.hash());
    }

    #[test]
    fn debootstrap_lines_for_debian_and_ubuntu() {
        let args = debian().debootstrap_args(Path::new("/c/root"), Path::new("/c/debs"));
        assert_eq!(args[0], "--variant=minbase");
        assert!(args[1].starts_with("--include=") && args[1].contains("linux-image-amd64"), "{}", args[1]);
        assert!(args[1].contains("=busybox,") && args[1].contains(",slurmd,"), "{}", args[1]);
        assert_eq!(args[3..], ["bookworm", "/c/root", "http://deb.debian.org/debian"]);
        let ubuntu = ImageSpec {
            distribution: Distribution::Ubuntu,
            suite: "noble".to_owned(),
            mirror: "http://ubuntu.mirror.example/ubuntu".to_owned(),
            kernel_package: "linux-image-generic".to_owned(),
            ..debian()
        };
        let args = ubuntu.debootstrap_args(Path::new("/c/root"), Path::new("/c/debs"));
        assert!(args.contains(&"--components=main,universe".to_owned()), "{args:?}");
        assert!(args.contains(&"--keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg".to_owned()), "{args:?}");
        assert!(args[1].contains("ubuntu-keyring") && args[1].contains("linux-image-generic"), "{}", args[1]);
        assert_eq!(args[args.len() - 3..], ["noble", "/c/root", "http://ubuntu.mirror.example/ubuntu"]);
    }
}
