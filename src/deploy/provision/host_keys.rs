//! The SSH host key of each node toolkit installs: generated here before the node's
//! first boot, laid into its image, and pinned in known_hosts, so the first SSH
//! connection is already checked (no trust on first use).
//!
//! Stage: IO (local files, `ssh-keygen`). Input: the host-key directory and a node
//! name. Output: [`HostKey`] (the private half stays a 0600 file and a [`Secret`]).

use std::fmt;
use std::fs;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use russh::keys::PublicKey;
use thiserror::Error;

/// Why a host key could not be made or read.
#[derive(Debug, Error)]
pub enum HostKeyError {
    /// A file or directory could not be read or written.
    #[error("host key of `{node}`: `{path}`: {source}")]
    Io {
        /// The node.
        node: String,
        /// The path.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// `ssh-keygen` failed or is missing.
    #[error("host key of `{node}`: ssh-keygen: {message}")]
    Keygen {
        /// The node.
        node: String,
        /// What it said.
        message: String,
    },
    /// The public key file does not hold an OpenSSH public key.
    #[error("host key of `{node}`: `{path}` is not an OpenSSH public key")]
    Invalid {
        /// The node.
        node: String,
        /// The file.
        path: PathBuf,
    },
}

/// A private key's text: never printed.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// The OpenSSH private key text, for the node's overlay only.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Secret(…)")
    }
}

/// A node's ed25519 host key.
#[derive(Debug, Clone)]
pub struct HostKey {
    /// The private key (OpenSSH format).
    pub private: Secret,
    /// `ssh-ed25519 AAAA… toolkit@NODE`.
    pub public_line: String,
    /// The parsed public key.
    pub public: PublicKey,
}

/// The host key of `node` under `directory` (`NODE` and `NODE.pub`), made with
/// `ssh-keygen -t ed25519` the first time: a reinstalled node keeps its key, so
/// known_hosts stays right across reinstalls.
///
/// # Errors
/// [`HostKeyError`] naming the node and the file.
pub fn ensure(directory: &Path, node: &str) -> Result<HostKey, HostKeyError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| HostKeyError::Io { node: node.to_owned(), path, source }
    };
    let private_path = directory.join(node);
    let public_path = directory.join(format!("{node}.pub"));
    if !private_path.exists() {
        fs::create_dir_all(directory).map_err(io(directory))?;
        fs::set_permissions(directory, fs::Permissions::from_mode(0o700)).map_err(io(directory))?;
        // Generated beside its final name and renamed: a crash never leaves half a pair.
        let temporary = directory.join(format!(".{node}.new"));
        let _ = fs::remove_file(&temporary);
        let _ = fs::remove_file(temporary.with_extension("new.pub"));
        let output = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", &format!("toolkit@{node}"), "-f"])
            .arg(&temporary)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| HostKeyError::Keygen { node: node.to_owned(), message: source.to_string() })?;
        if !output.status.success() {
            return Err(HostKeyError::Keygen {
                node: node.to_owned(),
                message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        let temporary_public = PathBuf::from(format!("{}.pub", temporary.display()));
        fs::rename(&temporary_public, &public_path).map_err(io(&public_path))?;
        fs::rename(&temporary, &private_path).map_err(io(&private_path))?;
    }
    // ssh-keygen makes it 0600 already; a key copied in by hand may not be.
    let mut file = fs::OpenOptions::new().read(true).mode(0o600).open(&private_path).map_err(io(&private_path))?;
    fs::set_permissions(&private_path, fs::Permissions::from_mode(0o600)).map_err(io(&private_path))?;
    let mut private = String::new();
    std::io::Read::read_to_string(&mut file, &mut private).map_err(io(&private_path))?;
    let public_line = fs::read_to_string(&public_path).map_err(io(&public_path))?.trim().to_owned();
    let invalid = || HostKeyError::Invalid { node: node.to_owned(), path: public_path.clone() };
    let public = PublicKey::from_openssh(&public_line).map_err(|_| invalid())?;
    Ok(HostKey { private: Secret(private), public_line, public })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_private_and_kept() {
        let directory = tempfile::tempdir().expect("tempdir");
        let keys = directory.path().join("host-keys");
        let first = ensure(&keys, "node01").expect("made");
        assert!(first.public_line.starts_with("ssh-ed25519 "), "{}", first.public_line);
        assert!(first.private.expose().contains("OPENSSH PRIVATE KEY"));
        let mode = fs::metadata(keys.join("node01")).expect("private").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::metadata(&keys).expect("dir").permissions().mode() & 0o777, 0o700);
        let again = ensure(&keys, "node01").expect("read");
        assert_eq!(again.public_line, first.public_line);
        assert_ne!(ensure(&keys, "node02").expect("other").public_line, first.public_line);
        assert_eq!(format!("{:?}", first.private), "Secret(…)");
        assert!(!format!("{first:?}").contains("PRIVATE"));
    }
}
