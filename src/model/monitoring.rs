//! What monitoring watches, derived from the model: the Prometheus host, one scrape
//! target per node and switch with the address Prometheus reaches it at, the rail
//! interfaces, the shared mounts and their client groups, GPU nodes, tenants.
//!
//! Stage: expand. Input: [`Model`] and (optionally) the inventory for addresses and
//! switch OS flavours. Output: [`MonitoringModel`], or `None` without a `monitoring`
//! section (or with `enabled: false`). Scrape targets are never listed by hand: a node
//! added to the blueprint is a target after the next deploy, a removed one is not.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::blueprint::schema::{self, Role};
use crate::inventory::{Inventory, SwitchOs};
use crate::model::Model;
use crate::topology::SwitchRole;

/// Port of prometheus-node-exporter.
pub const NODE_EXPORTER_PORT: u16 = 9100;
/// Port of prometheus-frr-exporter.
pub const FRR_EXPORTER_PORT: u16 = 9342;
/// Port of NVIDIA's DCGM exporter.
pub const DCGM_EXPORTER_PORT: u16 = 9400;

/// Everything the monitoring renderer lays out.
#[derive(Debug, Clone, Serialize)]
pub struct MonitoringModel {
    /// Cluster name (Prometheus' `cluster` external label).
    pub cluster: String,
    /// Host that runs Prometheus and Alertmanager.
    pub host: String,
    /// The blueprint's section, for intervals, retention and receivers.
    pub settings: schema::Monitoring,
    /// Every node, in blueprint order.
    pub nodes: Vec<ScrapeTarget>,
    /// Every switch of the fabric, in topology order.
    pub switches: Vec<ScrapeTarget>,
    /// Switches running FRR, scraped by the FRR exporter (RoCE fabrics only).
    pub frr_switches: Vec<ScrapeTarget>,
    /// Nodes with real GPUs (not the lab's fake devices), scraped by the DCGM exporter.
    pub gpu_nodes: Vec<ScrapeTarget>,
    /// Rail interfaces: (rail, netdev name) pairs over all node groups.
    pub rails: Vec<(u32, String)>,
    /// Shared filesystems: mount point and the node groups that mount it.
    pub mounts: Vec<(String, Vec<String>)>,
    /// Tenants and their guaranteed GPUs.
    pub tenants: Vec<(String, u32)>,
    /// Whether Slurm schedules the cluster (the Slurm view runs on its controller).
    pub slurm_controller: Option<String>,
}

/// One exporter endpoint's host: its name (the `instance` label) and address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScrapeTarget {
    /// Host or switch name.
    pub name: String,
    /// Address Prometheus connects to (inventory address, else the planned one).
    pub address: String,
    /// Node group, or the switch role (`leaf`, `spine`, `core`).
    pub group: String,
}

/// The monitoring model, or `None` when the blueprint deploys no monitoring.
#[must_use]
pub fn monitoring(model: &Model, inventory: Option<&Inventory>) -> Option<MonitoringModel> {
    let settings = model.blueprint.monitoring.as_ref().filter(|section| section.enabled)?;
    let controller = model.first_with(Role::Controller).map(|node| node.name.clone());
    let host =
        settings.host.clone().or_else(|| controller.clone()).or_else(|| model.nodes.first().map(|n| n.name.clone()))?;
    let nodes: Vec<ScrapeTarget> = model
        .nodes
        .iter()
        .map(|node| ScrapeTarget {
            name: node.name.clone(),
            address: inventory
                .and_then(|inventory| inventory.hosts.get(&node.name))
                .map_or_else(|| node.mgmt_address.to_string(), |host| host.address.clone()),
            group: model.groups.get(node.group).map_or_else(String::new, |group| group.name.clone()),
        })
        .collect();
    let switches: Vec<ScrapeTarget> = model
        .fabric
        .switches
        .iter()
        .map(|switch| ScrapeTarget {
            name: switch.name.clone(),
            address: inventory
                .and_then(|inventory| inventory.switches.get(&switch.name))
                .map_or_else(|| switch.name.clone(), |entry| entry.address.clone()),
            group: role_name(switch.role).to_owned(),
        })
        .collect();
    let roce = model.fabric.kind == schema::FabricKind::Roce;
    let frr_switches = switches
        .iter()
        .filter(|switch| {
            roce && inventory
                .and_then(|inventory| inventory.switches.get(&switch.name))
                .is_none_or(|entry| entry.os == SwitchOs::Frr)
        })
        .cloned()
        .collect();
    let gpu_nodes = model
        .nodes
        .iter()
        .zip(&nodes)
        .filter(|(node, _)| {
            model.groups.get(node.group).is_some_and(|group| group.gpu.is_some() && group.gpus_per_node > 0)
        })
        .filter(|(node, _)| {
            !inventory.and_then(|inventory| inventory.hosts.get(&node.name)).is_some_and(|host| host.fake_gpu_devices)
        })
        .map(|(_, target)| target.clone())
        .collect();
    let rails: BTreeSet<(u32, String)> =
        model.nodes.iter().flat_map(|node| node.rails.iter().map(|port| (port.rail, port.netdev.clone()))).collect();
    let mounts = model
        .filesystems
        .iter()
        .map(|filesystem| {
            let groups = filesystem
                .client_groups
                .iter()
                .filter_map(|index| model.groups.get(*index).map(|group| group.name.clone()))
                .collect();
            (filesystem.mount.clone(), groups)
        })
        .collect();
    let slurm = model.blueprint.scheduler.kind == schema::SchedulerKind::Slurm;
    Some(MonitoringModel {
        cluster: model.name.clone(),
        host,
        settings: settings.clone(),
        nodes,
        switches,
        frr_switches,
        gpu_nodes,
        rails: rails.into_iter().collect(),
        mounts,
        tenants: model.tenants.iter().map(|tenant| (tenant.name.clone(), tenant.guaranteed_gpus)).collect(),
        slurm_controller: if slurm { controller } else { None },
    })
}

fn role_name(role: SwitchRole) -> &'static str {
    match role {
        SwitchRole::Leaf => "leaf",
        SwitchRole::Spine => "spine",
        SwitchRole::Core => "core",
    }
}
