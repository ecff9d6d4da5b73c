//! SSH targets from an inventory: every host and switch with its connection
//! settings resolved.
//!
//! Stage: observe and apply (setup). Input: an
//! [`Inventory`](crate::inventory::schema::Inventory). Output: one [`SshTarget`] per
//! host and switch, keyed by the name resources use as their target. A setting on
//! the host wins over `defaults`; a bastion uses its own settings and `defaults`,
//! but never the default `proxy_jump` (it would jump through itself).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::TransportError;
use super::ssh::SshTarget;
use crate::inventory::schema::{Connection, Host, Inventory};

/// Where `~` points and who "the current user" is, passed in so the mapping is
/// pure and testable.
#[derive(Debug, Clone)]
pub struct LocalUser {
    /// Home directory, for `~/…` paths and the default `~/.ssh/known_hosts`.
    pub home: PathBuf,
    /// User name, the SSH user when the inventory names none (as OpenSSH does).
    pub name: String,
}

impl LocalUser {
    /// From `HOME` and `USER` (`/root` and `root` when unset).
    #[must_use]
    pub fn from_env() -> Self {
        Self {
            home: std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from),
            name: std::env::var("USER").unwrap_or_else(|_| "root".to_owned()),
        }
    }
}

/// Every host and switch of `inventory` as an [`SshTarget`].
///
/// # Errors
/// [`TransportError::InvalidArgument`] for a `proxy_jump` naming no bastion, or
/// bastions that jump through each other in a loop.
pub fn from_inventory(inventory: &Inventory, local: &LocalUser) -> Result<Vec<SshTarget>, TransportError> {
    let defaults = &inventory.defaults;
    let mut targets = Vec::with_capacity(inventory.hosts.len() + inventory.switches.len());
    for (name, host) in &inventory.hosts {
        let jump = host.proxy_jump.as_ref().or(defaults.proxy_jump.as_ref());
        targets.push(host_target(inventory, local, name, host, jump, &mut BTreeSet::new())?);
    }
    for (name, switch) in &inventory.switches {
        let as_host = Host {
            address: switch.address.clone(),
            port: switch.port,
            user: switch.user.clone(),
            sudo: None,
            identity_file: None,
            proxy_jump: None,
            rail_macs: std::collections::BTreeMap::new(),
            boot_macs: Vec::new(),
            fake_gpu_devices: false,
            vars: std::collections::BTreeMap::new(),
        };
        targets.push(host_target(
            inventory,
            local,
            name,
            &as_host,
            defaults.proxy_jump.as_ref(),
            &mut BTreeSet::new(),
        )?);
    }
    Ok(targets)
}

/// The host of the inventory's `provisioning.host`, if it names one: its own
/// settings, else `defaults` (a bastion too).
///
/// # Errors
/// As [`from_inventory`].
pub fn provisioning_target(inventory: &Inventory, local: &LocalUser) -> Result<Option<SshTarget>, TransportError> {
    let Some(on) = inventory.provisioning.as_ref().and_then(|network| network.host.as_ref()) else { return Ok(None) };
    let host = Host {
        address: on.address.clone(),
        port: on.port,
        user: on.user.clone(),
        sudo: None,
        identity_file: on.identity_file.clone(),
        proxy_jump: None,
        rail_macs: std::collections::BTreeMap::new(),
        boot_macs: Vec::new(),
        fake_gpu_devices: false,
        vars: std::collections::BTreeMap::new(),
    };
    let jump = inventory.defaults.proxy_jump.as_ref();
    host_target(inventory, local, &on.address, &host, jump, &mut BTreeSet::new()).map(Some)
}

fn host_target(
    inventory: &Inventory,
    local: &LocalUser,
    name: &str,
    host: &Host,
    jump: Option<&String>,
    visiting: &mut BTreeSet<String>,
) -> Result<SshTarget, TransportError> {
    let defaults: &Connection = &inventory.defaults;
    let proxy_jump = match jump {
        None => None,
        Some(bastion_name) => {
            let bastion = inventory.bastions.get(bastion_name).ok_or_else(|| TransportError::InvalidArgument {
                reason: format!("`{name}` jumps through `{bastion_name}`, which is not under `bastions`"),
            })?;
            if !visiting.insert(bastion_name.clone()) {
                return Err(TransportError::InvalidArgument {
                    reason: format!("bastion `{bastion_name}` jumps through itself (a proxy_jump loop)"),
                });
            }
            let target = host_target(inventory, local, bastion_name, bastion, bastion.proxy_jump.as_ref(), visiting)?;
            Some(Box::new(target))
        }
    };
    let known_hosts =
        defaults.known_hosts.as_deref().map_or_else(|| local.home.join(".ssh/known_hosts"), |path| expand(path, local));
    Ok(SshTarget {
        host: name.to_owned(),
        address: host.address.clone(),
        port: host.port.or(defaults.port).unwrap_or(22),
        user: host.user.clone().or_else(|| defaults.user.clone()).unwrap_or_else(|| local.name.clone()),
        identity_file: host
            .identity_file
            .as_deref()
            .or(defaults.identity_file.as_deref())
            .map(|path| expand(path, local)),
        known_hosts,
        proxy_jump,
        become_root: host.sudo.or(defaults.sudo).unwrap_or(false),
    })
}

/// `~/x` → `<home>/x`; other paths as they are.
fn expand(path: &Path, local: &LocalUser) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => local.home.join(rest),
        Err(_) => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> LocalUser {
        LocalUser { home: PathBuf::from("/home/ops"), name: "ops".to_owned() }
    }

    fn inventory(yaml: &str) -> Inventory {
        serde_norway::from_str(yaml).expect("inventory")
    }

    #[test]
    fn hosts_inherit_defaults_and_bastions_do_not_jump_through_themselves() {
        let inventory = inventory(
            "version: 1
defaults: { user: admin, become: true, proxy_jump: gateway, known_hosts: ~/.ssh/cluster_hosts, identity_file: ~/.ssh/id_ed25519 }
bastions:
  gateway: { address: bastion.example.com, user: jump, port: 2222 }
hosts:
  node01: { address: 10.0.0.1 }
  node02: { address: 10.0.0.2, user: root, become: false, port: 2200 }
switches:
  leaf0: { address: 10.0.1.1, os: frr, user: cumulus }
",
        );
        let targets = from_inventory(&inventory, &local()).expect("targets");
        let node01 = &targets[0];
        assert_eq!((node01.host.as_str(), node01.user.as_str(), node01.port), ("node01", "admin", 22));
        assert!(node01.become_root);
        assert_eq!(node01.known_hosts, PathBuf::from("/home/ops/.ssh/cluster_hosts"));
        assert_eq!(node01.identity_file.as_deref(), Some(Path::new("/home/ops/.ssh/id_ed25519")));
        let bastion = node01.proxy_jump.as_deref().expect("bastion");
        assert_eq!((bastion.host.as_str(), bastion.user.as_str(), bastion.port), ("gateway", "jump", 2222));
        assert!(bastion.proxy_jump.is_none());
        let node02 = &targets[1];
        assert_eq!((node02.user.as_str(), node02.port, node02.become_root), ("root", 2200, false));
        let leaf = &targets[2];
        assert_eq!((leaf.host.as_str(), leaf.user.as_str()), ("leaf0", "cumulus"));
        assert!(leaf.proxy_jump.is_some());
    }

    #[test]
    fn bare_inventory_uses_the_local_user_and_known_hosts() {
        let targets =
            from_inventory(&inventory("version: 1\nhosts:\n  n1: { address: 10.0.0.1 }\n"), &local()).expect("targets");
        assert_eq!(targets[0].user, "ops");
        assert_eq!(targets[0].known_hosts, PathBuf::from("/home/ops/.ssh/known_hosts"));
        assert_eq!(targets[0].identity_file, None);
        assert!(!targets[0].become_root);
    }

    #[test]
    fn unknown_and_looping_bastions_are_errors() {
        let unknown = inventory("version: 1\nhosts:\n  n1: { address: 10.0.0.1, proxy_jump: nowhere }\n");
        let message = from_inventory(&unknown, &local()).expect_err("unknown").to_string();
        assert!(message.contains("`nowhere`"), "{message}");
        let looping = inventory(
            "version: 1
bastions:
  a: { address: 10.0.9.1, proxy_jump: b }
  b: { address: 10.0.9.2, proxy_jump: a }
hosts:
  n1: { address: 10.0.0.1, proxy_jump: a }
",
        );
        let message = from_inventory(&looping, &local()).expect_err("loop").to_string();
        assert!(message.contains("loop"), "{message}");
    }
}
