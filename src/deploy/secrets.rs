//! Generated secrets: the munge key and the slurmdbd password are created once, on
//! the first deploy, where the inventory says they live (a file, mode 0600), and
//! read from there on every later run. Never printed.
//!
//! Stage: deploy (input). Input: the inventory. Output: files on the local disk.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use crate::inventory::{Inventory, SecretRef};

/// What was generated, by reference (never the value).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Generated(pub Vec<String>);

/// Creates the secret files the inventory names that do not exist yet.
/// References to environment variables are left to the user.
///
/// # Errors
/// When randomness or the file cannot be written.
pub fn ensure(inventory: &Inventory, base: &Path) -> std::io::Result<Generated> {
    let mut generated = Generated::default();
    let wanted = [
        // munge requires at least 32 bytes; 64 random bytes as hex text.
        (inventory.secrets.munge_key.as_ref(), 64),
        // slurmdbd.conf cannot quote every character: hex is always safe.
        (inventory.secrets.slurmdbd_password.as_ref(), 24),
    ];
    for (reference, bytes) in wanted {
        let Some(SecretRef::File(path)) = reference else { continue };
        let path = if path.is_absolute() { path.clone() } else { base.join(path) };
        if path.exists() {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut random = vec![0_u8; bytes];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        file.write_all(hex::encode(random).as_bytes())?;
        file.sync_all()?;
        generated.0.push(format!("file:{}", path.display()));
    }
    Ok(generated)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::inventory::schema::Secrets;

    #[test]
    fn generates_once_with_private_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inventory = Inventory {
            version: 1,
            defaults: crate::inventory::schema::Connection::default(),
            bastions: std::collections::BTreeMap::new(),
            hosts: std::collections::BTreeMap::new(),
            switches: std::collections::BTreeMap::new(),
            bmcs: std::collections::BTreeMap::new(),
            secrets: Secrets {
                munge_key: Some(SecretRef::File("lab/munge.key".into())),
                slurmdbd_password: Some(SecretRef::Env("NOT_GENERATED".into())),
                named: std::collections::BTreeMap::new(),
            },
            state_file: None,
            cloud: None,
            kubernetes: None,
            ssh: None,
            provisioning: None,
        };
        let first = ensure(&inventory, dir.path()).expect("generates");
        assert_eq!(first.0.len(), 1);
        let path = dir.path().join("lab/munge.key");
        let key = std::fs::read_to_string(&path).expect("reads");
        assert_eq!(key.len(), 128);
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        assert_eq!(ensure(&inventory, dir.path()).expect("idempotent"), Generated::default());
        assert_eq!(std::fs::read_to_string(&path).expect("reads"), key, "never regenerated");
    }
}
