//! The inventory: where the hardware of a blueprint is and how to reach it.
//!
//! Stage: load. Input: a path. Output: [`LoadedInventory`] or diagnostics.

pub mod kubeadm;
pub mod schema;
pub mod secrets;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use schema::{Inventory, SecretRef, SwitchOs};

use crate::diagnostic::Diagnostics;
use crate::source::SourceFile;

/// An inventory with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedInventory {
    /// The typed inventory.
    pub inventory: Inventory,
    /// Its file, for diagnostics.
    pub source: SourceFile,
}

/// Loads the inventory at `path`, with the hosts of its cloud instances (the
/// `cloud.hosts_file` a deploy wrote) added to `hosts` where `hosts` does not list
/// them itself.
///
/// # Errors
/// Diagnostics for unreadable files, YAML errors, inline secrets and schema errors.
pub fn load(path: &Path) -> Result<LoadedInventory, Diagnostics> {
    let (mut inventory, source) = crate::yaml::load::<Inventory>(path)?;
    if let Some(hosts_file) = cloud_hosts_path(path, &inventory)
        && hosts_file.exists()
    {
        let (overlay, _) = crate::yaml::load::<CloudHosts>(&hosts_file)?;
        for (name, host) in overlay.hosts {
            inventory.hosts.entry(name).or_insert(host);
        }
    }
    Ok(LoadedInventory { inventory, source })
}

/// The hosts of a cluster's cloud instances, written by the API stage of a deploy
/// and read back with the inventory so the SSH stage reaches the instances.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CloudHosts {
    /// The cluster the instances belong to.
    pub cluster: String,
    /// Hosts by node name: the management interface's private address, rail MACs.
    pub hosts: BTreeMap<String, schema::Host>,
}

/// Where an inventory's cloud hosts are kept: `cloud.hosts_file` (relative to the
/// inventory's directory), else `<stem>.cloud-hosts.yaml` beside it; `None` without
/// a `cloud` section.
#[must_use]
pub fn cloud_hosts_path(inventory_path: &Path, inventory: &Inventory) -> Option<PathBuf> {
    let cloud = inventory.cloud.as_ref()?;
    let dir = inventory_path.parent().unwrap_or_else(|| Path::new("."));
    Some(match &cloud.hosts_file {
        Some(path) if path.is_absolute() => path.clone(),
        Some(path) => dir.join(path),
        None => {
            let stem = inventory_path.file_stem().map_or_else(|| "inventory".into(), |s| s.to_string_lossy());
            dir.join(format!("{stem}.cloud-hosts.yaml"))
        }
    })
}
