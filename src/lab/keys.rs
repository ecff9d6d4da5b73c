//! The lab's SSH client key and known_hosts: what deploy needs to reach the lab the
//! way it reaches real machines, host keys checked.
//!
//! Stage: IO (local files and `ssh-keygen`). Input: paths (the inventory's
//! `identity_file` and `known_hosts`). Output: a key pair made once and reused, and a
//! known_hosts file written whole from the containers' host keys.

use std::fmt::Write as _;
use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::LabError;

/// The public key of the key pair at `identity` (`<identity>.pub`), made with
/// `ssh-keygen` (ed25519, no passphrase) when it does not exist yet.
///
/// # Errors
/// Missing `ssh-keygen`, or files that cannot be written or read.
pub fn ensure_key(identity: &Path, comment: &str) -> Result<String, LabError> {
    let public = public_path(identity);
    if !identity.exists() {
        if let Some(dir) = identity.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(LabError::io(dir))?;
        }
        let output = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
            .arg(identity)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    LabError::MissingTool { program: "ssh-keygen", hint: "apt-get install openssh-client" }
                } else {
                    LabError::io(identity)(source)
                }
            })?;
        if !output.status.success() {
            return Err(LabError::Tool {
                program: "ssh-keygen".to_owned(),
                message: super::docker::last_words(&output),
            });
        }
    }
    let text = fs::read_to_string(&public).map_err(LabError::io(&public))?;
    Ok(text.trim().to_owned())
}

/// `<identity>.pub`.
#[must_use]
pub fn public_path(identity: &Path) -> PathBuf {
    let mut name = identity.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// The `type key` part of a public key line (drops the comment), or `None` if it is not one.
#[must_use]
pub fn key_material(line: &str) -> Option<String> {
    let mut fields = line.split_whitespace();
    let kind = fields.next()?;
    let key = fields.next()?;
    (kind.starts_with("ssh-") || kind.starts_with("ecdsa-")).then(|| format!("{kind} {key}"))
}

/// known_hosts text: one line per address, in the given order.
#[must_use]
pub fn known_hosts(entries: &[(Ipv4Addr, String)]) -> String {
    let mut text = String::new();
    for (address, key) in entries {
        let _ = writeln!(text, "{address} {key}");
    }
    text
}

/// Writes `text` to `path` through a temporary file and a rename, so a reader never
/// sees half a file; `mode` is applied before the rename.
///
/// # Errors
/// When the directory or file cannot be written.
pub fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), LabError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(LabError::io(dir))?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    fs::write(&temporary, text).map_err(LabError::io(&temporary))?;
    fs::set_permissions(&temporary, fs::Permissions::from_mode(mode)).map_err(LabError::io(&temporary))?;
    fs::rename(&temporary, path).map_err(LabError::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_material_drops_the_comment() {
        assert_eq!(key_material("ssh-ed25519 AAAAC3 root@node01").as_deref(), Some("ssh-ed25519 AAAAC3"));
        assert_eq!(key_material("garbage"), None);
        assert_eq!(key_material("cat: No such file"), None);
    }

    #[test]
    fn known_hosts_has_one_line_per_address() {
        let text = known_hosts(&[
            (Ipv4Addr::new(10, 10, 0, 10), "ssh-ed25519 AAAA1".to_owned()),
            (Ipv4Addr::new(10, 10, 0, 11), "ssh-ed25519 AAAA2".to_owned()),
        ]);
        assert_eq!(text, "10.10.0.10 ssh-ed25519 AAAA1\n10.10.0.11 ssh-ed25519 AAAA2\n");
    }

    #[test]
    fn key_pair_is_made_once_and_reused() {
        if Command::new("ssh-keygen").arg("-?").output().is_err() {
            crate::testing::cannot_run("ssh-keygen is not installed: apt-get install openssh-client");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let identity = dir.path().join("lab/id_ed25519");
        let first = ensure_key(&identity, "test").expect("made");
        assert!(first.starts_with("ssh-ed25519 "), "{first}");
        assert_eq!(ensure_key(&identity, "test").expect("reused"), first);
    }
}
