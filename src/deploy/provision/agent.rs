//! The deploy agent's RAM disk: the OS image's own kernel and initramfs, with a
//! small cpio archive appended that replaces its `/init` by toolkit's agent
//! (`templates/provision/agent.sh`).
//!
//! Stage: IO (local files). Input: a [`BuiltImage`]. Output: [`AgentFiles`] (kernel
//! and initrd), cached beside the image. The image's initramfs (initramfs-tools,
//! `MODULES=most`, with udev and busybox) already carries the drivers of the machine
//! the OS will run on, so the agent sees the disks and NICs the installed OS will;
//! the kernel unpacks archives one after the other, a later file replacing an
//! earlier one, so appending is enough (no unpacking, no root).

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::image::BuiltImage;

/// The agent (busybox sh), compiled in.
pub const AGENT: &str = include_str!("../../../templates/provision/agent.sh");

/// udhcpc's hook that configures the lease, compiled in.
pub const UDHCPC: &str = include_str!("../../../templates/provision/udhcpc.sh");

/// What iPXE boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFiles {
    /// The kernel.
    pub kernel: PathBuf,
    /// The initramfs with the agent.
    pub initrd: PathBuf,
}

/// Why the agent could not be made.
#[derive(Debug, thiserror::Error)]
#[error("deploy agent: `{path}`: {source}")]
pub struct AgentError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |source| AgentError { path: path.to_owned(), source }
}

/// The kernel command line of a node's agent: the server it reports to, the MAC of
/// the NIC it uses and, when given, the static address and gateway it configures.
#[must_use]
pub fn cmdline(server: &str, mac: &str, address: Option<(ipnet::Ipv4Net, Option<std::net::Ipv4Addr>)>) -> String {
    let mut out = format!("console=tty0 console=ttyS0,115200 toolkit.server={server} toolkit.mac={mac}");
    if let Some((address, gateway)) = address {
        let _ = write!(out, " toolkit.ip={address}");
        if let Some(gateway) = gateway {
            let _ = write!(out, " toolkit.gateway={gateway}");
        }
    }
    out
}

/// The agent of `image`, made once per image and agent script.
///
/// # Errors
/// [`AgentError`] when a file cannot be read or written.
pub fn build(image: &BuiltImage, cache: &Path) -> Result<AgentFiles, AgentError> {
    let id = crate::compile::fields_sha256([image.id.as_str(), AGENT, UDHCPC]);
    let dir = cache.join("agents").join(&id[..16]);
    let initrd = dir.join("initrd.img");
    let files = AgentFiles { kernel: image.kernel.clone(), initrd: initrd.clone() };
    if initrd.is_file() {
        return Ok(files);
    }
    fs::create_dir_all(&dir).map_err(io(&dir))?;
    let mut bytes = fs::read(&image.initrd).map_err(io(&image.initrd))?;
    // The kernel looks for the next archive's magic on a 4-byte boundary.
    bytes.resize(bytes.len().div_ceil(512) * 512, 0);
    bytes.extend(cpio(&[
        ("toolkit", 0o040_755, b"".as_slice()),
        ("init", 0o100_755, AGENT.as_bytes()),
        ("toolkit/udhcpc.sh", 0o100_755, UDHCPC.as_bytes()),
    ]));
    let partial = dir.join("initrd.img.partial");
    let mut file = fs::File::create(&partial).map_err(io(&partial))?;
    file.write_all(&bytes).map_err(io(&partial))?;
    file.sync_all().map_err(io(&partial))?;
    fs::rename(&partial, &initrd).map_err(io(&initrd))?;
    Ok(files)
}

/// A `newc` cpio archive (what the kernel's initramfs unpacker reads) of
/// `(name, mode with file type, content)`, owned by root.
#[must_use]
pub fn cpio(entries: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut add = |inode: usize, name: &str, mode: u32, content: &[u8]| {
        let nlink = if mode & 0o040_000 != 0 { 2 } else { 1 };
        let _ = write!(
            out,
            "070701{inode:08X}{mode:08X}{:08X}{:08X}{nlink:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            0,
            0,
            1_700_000_000_u32,
            content.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.resize(out.len().div_ceil(4) * 4, 0);
        out.extend_from_slice(content);
        out.resize(out.len().div_ceil(4) * 4, 0);
    };
    for (index, (name, mode, content)) in entries.iter().enumerate() {
        add(index + 1, name, *mode, content);
    }
    add(0, "TRAILER!!!", 0, b"");
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gnu_cpio_lists_and_extracts_the_archive() {
        let dir = tempfile::tempdir().expect("tempdir");
        let archive = cpio(&[("toolkit", 0o040_755, b""), ("init", 0o100_755, b"#!/bin/sh\necho hi\n")]);
        assert_eq!(archive.len() % 512, 0);
        let path = dir.path().join("a.cpio");
        fs::write(&path, &archive).expect("writes");
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cd {} && cpio -idm --quiet < a.cpio && ls -l init && cat init", dir.path().display()))
            .output()
            .expect("cpio runs");
        if !output.status.success() && String::from_utf8_lossy(&output.stderr).contains("not found") {
            crate::testing::cannot_run("cpio is not installed: apt-get install cpio");
            return;
        }
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert!(text.starts_with("-rwxr-xr-x"), "{text}");
        assert!(text.ends_with("echo hi\n"), "{text}");
        assert!(dir.path().join("toolkit").is_dir());
    }

    #[test]
    fn the_command_line_names_server_mac_and_the_static_address_when_given() {
        let address = Some(("10.77.0.12/24".parse().expect("net"), Some("10.77.0.1".parse().expect("ip"))));
        assert_eq!(
            cmdline("http://10.77.0.1:8069", "52:54:00:77:00:12", address),
            "console=tty0 console=ttyS0,115200 toolkit.server=http://10.77.0.1:8069 toolkit.mac=52:54:00:77:00:12 \
             toolkit.ip=10.77.0.12/24 toolkit.gateway=10.77.0.1"
        );
        assert!(!cmdline("http://s", "m", None).contains("toolkit.ip"), "the site's DHCP gives the address");
    }

    #[test]
    fn the_agent_script_is_valid_sh() {
        for (name, script) in [("agent.sh", AGENT), ("udhcpc.sh", UDHCPC)] {
            let output = std::process::Command::new("sh").args(["-n", "-c", script]).output().expect("sh runs");
            assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        }
    }
}
