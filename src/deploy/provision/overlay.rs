//! The files that make an installed image one node: host name, hosts, network by
//! MAC, resolver, the SSH host key toolkit generated and the key deploy logs in with.
//! The deploy agent unpacks them (busybox `tar`) over the root it just wrote.
//!
//! Stage: pure. Input: a [`NodeOverlay`]. Output: a POSIX ustar archive, written here
//! (a few files of root's: two dozen lines do it, no crate needed). The host's
//! private key is in it, so the archive is only ever served to that node's MAC.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::host_keys::HostKey;

/// One node's files.
#[derive(Debug, Clone)]
pub struct NodeOverlay {
    /// Host name.
    pub hostname: String,
    /// The MACs of its boot NIC candidates: the network config matches them.
    pub boot_macs: Vec<String>,
    /// Its address with prefix; `None` keeps DHCP (the site's DHCP gives it).
    pub address: Option<Ipv4Net>,
    /// Default gateway.
    pub gateway: Option<Ipv4Addr>,
    /// DNS servers.
    pub dns: Vec<Ipv4Addr>,
    /// The user deploy logs in as.
    pub ssh_user: String,
    /// Public keys allowed to log in as that user.
    pub authorized_keys: Vec<String>,
    /// The node's SSH host key.
    pub host_key: HostKey,
}

impl NodeOverlay {
    /// The files, as `(path without the leading /, mode, content)`.
    #[must_use]
    pub fn files(&self) -> Vec<(String, u32, Vec<u8>)> {
        let mut network = String::from("# Written by toolkit when it installed this node.\n[Match]\n");
        let _ = writeln!(network, "MACAddress={}", self.boot_macs.join(" "));
        network.push_str("\n[Network]\n");
        match self.address {
            Some(address) => {
                let _ = writeln!(network, "Address={address}");
                if let Some(gateway) = self.gateway {
                    let _ = writeln!(network, "Gateway={gateway}");
                }
            }
            None => network.push_str("DHCP=ipv4\n"),
        }
        for server in &self.dns {
            let _ = writeln!(network, "DNS={server}");
        }
        let mut hosts = String::from("127.0.0.1\tlocalhost\n");
        match self.address {
            Some(address) => {
                let _ = writeln!(hosts, "{}\t{}", address.addr(), self.hostname);
            }
            None => {
                let _ = writeln!(hosts, "127.0.1.1\t{}", self.hostname);
            }
        }
        hosts.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        let mut resolv = String::new();
        for server in &self.dns {
            let _ = writeln!(resolv, "nameserver {server}");
        }
        let mut keys = String::new();
        for key in &self.authorized_keys {
            let _ = writeln!(keys, "{}", key.trim());
        }
        let mut files = vec![
            ("etc/hostname".to_owned(), 0o644, format!("{}\n", self.hostname).into_bytes()),
            ("etc/hosts".to_owned(), 0o644, hosts.into_bytes()),
            ("etc/systemd/network/10-toolkit-boot.network".to_owned(), 0o644, network.into_bytes()),
            ("etc/resolv.conf".to_owned(), 0o644, resolv.into_bytes()),
            ("etc/ssh/ssh_host_ed25519_key".to_owned(), 0o600, self.host_key.private.expose().as_bytes().to_vec()),
            (
                "etc/ssh/ssh_host_ed25519_key.pub".to_owned(),
                0o644,
                format!("{}\n", self.host_key.public_line).into_bytes(),
            ),
            // Root-owned and outside the home: the image's sshd reads this too
            // (`AuthorizedKeysFile`), so no uid of the image is needed here.
            (format!("etc/ssh/authorized_keys/{}", self.ssh_user), 0o644, keys.into_bytes()),
        ];
        files.sort_by(|a, b| a.0.cmp(&b.0));
        files
    }

    /// The ustar archive of [`Self::files`], with their directories.
    #[must_use]
    pub fn tar(&self) -> Vec<u8> {
        let files = self.files();
        let mut directories: Vec<String> = Vec::new();
        for (path, _, _) in &files {
            let mut prefix = String::new();
            for part in path.split('/').collect::<Vec<_>>().iter().rev().skip(1).rev() {
                prefix = if prefix.is_empty() { (*part).to_owned() } else { format!("{prefix}/{part}") };
                if !directories.contains(&prefix) {
                    directories.push(prefix.clone());
                }
            }
        }
        let mut out = Vec::new();
        for directory in &directories {
            out.extend(header(&format!("{directory}/"), 0o755, 0, b'5'));
        }
        for (path, mode, content) in &files {
            out.extend(header(path, *mode, content.len() as u64, b'0'));
            out.extend_from_slice(content);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        // Two zero blocks end the archive.
        out.resize(out.len() + 1024, 0);
        out
    }
}

/// One ustar header block (names under 100 bytes: every path above is).
fn header(name: &str, mode: u32, size: u64, kind: u8) -> [u8; 512] {
    let mut block = [0_u8; 512];
    let put =
        |block: &mut [u8; 512], at: usize, text: &str| block[at..at + text.len()].copy_from_slice(text.as_bytes());
    put(&mut block, 0, name);
    put(&mut block, 100, &format!("{mode:07o}"));
    put(&mut block, 108, "0000000");
    put(&mut block, 116, "0000000");
    put(&mut block, 124, &format!("{size:011o}"));
    // A fixed time: the same node gives the same archive.
    put(&mut block, 136, &format!("{:011o}", 1_700_000_000_u64));
    block[156] = kind;
    put(&mut block, 257, "ustar");
    put(&mut block, 263, "00");
    put(&mut block, 265, "root");
    put(&mut block, 297, "root");
    // The checksum counts its own field as spaces.
    block[148..156].copy_from_slice(b"        ");
    let sum: u32 = block.iter().map(|&byte| u32::from(byte)).sum();
    put(&mut block, 148, &format!("{sum:06o}\0 "));
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::provision::host_keys;

    fn overlay(dir: &std::path::Path) -> NodeOverlay {
        NodeOverlay {
            hostname: "vm01".to_owned(),
            boot_macs: vec!["52:54:00:77:00:11".to_owned()],
            address: Some("10.77.0.11/24".parse().expect("net")),
            gateway: Some("10.77.0.1".parse().expect("ip")),
            dns: vec!["10.77.0.1".parse().expect("ip")],
            ssh_user: "root".to_owned(),
            authorized_keys: vec![
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFCPMrI2SKj10fXyBpN5Ch72Abulny65LL/Gj2f3yQZt op@laptop".to_owned(),
            ],
            host_key: host_keys::ensure(dir, "vm01").expect("host key"),
        }
    }

    #[test]
    fn gnu_tar_reads_back_every_file_with_its_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let overlay = overlay(dir.path());
        let archive = dir.path().join("overlay.tar");
        std::fs::write(&archive, overlay.tar()).expect("writes");
        let out = dir.path().join("root");
        std::fs::create_dir_all(&out).expect("mkdir");
        let status =
            std::process::Command::new("tar").arg("-xpf").arg(&archive).arg("-C").arg(&out).status().expect("tar runs");
        assert!(status.success());
        for (path, mode, content) in overlay.files() {
            let file = out.join(&path);
            assert_eq!(std::fs::read(&file).expect("extracted"), content, "{path}");
            let found = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).expect("meta").permissions());
            assert_eq!(found & 0o777, mode, "{path}");
        }
        let network = std::fs::read_to_string(out.join("etc/systemd/network/10-toolkit-boot.network")).expect("reads");
        assert!(network.contains("MACAddress=52:54:00:77:00:11\n"), "{network}");
        assert!(network.contains("Address=10.77.0.11/24\nGateway=10.77.0.1\n"), "{network}");
        assert!(std::fs::read_to_string(out.join("etc/hosts")).expect("hosts").contains("10.77.0.11\tvm01\n"));
    }

    #[test]
    fn without_an_address_the_node_keeps_dhcp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut overlay = overlay(dir.path());
        overlay.address = None;
        let files = overlay.files();
        let network = files.iter().find(|(path, _, _)| path.ends_with(".network")).expect("network");
        assert!(String::from_utf8_lossy(&network.2).contains("DHCP=ipv4"));
    }
}
