//! What monitoring watches, derived from the model: the Prometheus host, one scrape
//! target per node and switch with the address Prometheus reaches it at, the rail
//! interfaces, the shared mounts and their client groups, GPU nodes, tenants.
//!
//! Stage: expand. Input: [`Model`] and (optionally) the inventory for addresses and
//! switch OS flavours. Output: [`MonitoringModel`], or `None` without a `monitoring`
//! section (or with `enabled: false`). Scrape targets are never listed by hand: a node
//! added to the blueprint is a target after the next deploy, a removed one is not.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::blueprint::schema::{self, Role};
use crate::inventory::{Inventory, SwitchOs};
use crate::model::Model;
use crate::topology::SwitchRole;

/// Where node exporter's textfile collector reads `*.prom` files (Debian's
/// `prometheus-node-exporter` default, `--collector.textfile.directory`).
pub const TEXTFILE_DIR: &str = "/var/lib/prometheus/node-exporter";
/// Port of Prometheus' web UI and HTTP API (the Debian package's default).
pub const PROMETHEUS_PORT: u16 = 9090;
/// Port of prometheus-node-exporter.
pub const NODE_EXPORTER_PORT: u16 = 9100;
/// Port of prometheus-frr-exporter.
pub const FRR_EXPORTER_PORT: u16 = 9342;
/// Port of NVIDIA's DCGM exporter.
pub const DCGM_EXPORTER_PORT: u16 = 9400;
/// Port of prometheus-ipmi-exporter (on the monitoring host, bound to localhost).
pub const IPMI_EXPORTER_PORT: u16 = 9290;
/// Port of the repair service's webhook on the Slurm controller (`monitoring.repair`).
pub const REPAIR_WEBHOOK_PORT: u16 = 9097;

/// The repair service's webhook URL on the controller at `address`.
#[must_use]
pub fn repair_webhook_url(address: &str) -> String {
    let host = if address.contains(':') { format!("[{address}]") } else { address.to_owned() };
    format!("http://{host}:{REPAIR_WEBHOOK_PORT}/alert")
}

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
    /// Nodes with real GPUs (not the lab's fake devices) and DCGM 4, where toolkit
    /// deploys the DCGM exporter and Prometheus scrapes it.
    pub gpu_nodes: Vec<ScrapeTarget>,
    /// The DCGM exporter of each of `gpu_nodes`, in the same order.
    pub dcgm_exporters: Vec<DcgmExporter>,
    /// Rail interfaces: (rail, netdev name) pairs over all node groups.
    pub rails: Vec<(u32, String)>,
    /// Shared filesystems: mount point and the node groups that mount it.
    pub mounts: Vec<(String, Vec<String>)>,
    /// Tenants and their guaranteed GPUs.
    pub tenants: Vec<(String, u32)>,
    /// Whether Slurm schedules the cluster (the Slurm view runs on its controller).
    pub slurm_controller: Option<String>,
    /// Where the cluster-scope checks run: the controller, else the monitoring host.
    pub cluster_checks_host: String,
    /// BGP sessions each FRR switch should have by the cabling plan: per switch (in
    /// `frr_switches` order), the number of links to each neighbour switch.
    pub bgp_plan: Vec<(String, BTreeMap<String, u32>)>,
    /// BMCs the IPMI exporter scrapes: the inventory's BMCs of the blueprint's nodes
    /// that have an `ipmi` interface, in blueprint order.
    pub bmcs: Vec<BmcTarget>,
}

/// One node's BMC as the IPMI exporter reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BmcTarget {
    /// The node the BMC belongs to (the `instance` label of its metrics).
    pub node: String,
    /// Address of its IPMI-over-LAN interface.
    pub address: String,
    /// FreeIPMI driver: `LAN_2_0` or `LAN`.
    pub driver: &'static str,
}

/// The DCGM exporter on one GPU node: what it is installed after and pinned to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DcgmExporter {
    /// Node name.
    pub node: String,
    /// The node's DCGM package (the exporter reads its host engine).
    pub dcgm_package: String,
    /// The exporter's package.
    pub package: &'static str,
    /// Its apt version pin, following DCGM's major (`4.*`).
    pub pin: String,
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

/// The node that runs Prometheus and Alertmanager, or `None` when the blueprint
/// deploys no monitoring: without the rest of the [`monitoring`] model, which is
/// ~0.1 s to make at 4,096 nodes.
#[must_use]
pub fn host(model: &Model) -> Option<String> {
    let settings = model.blueprint.monitoring.as_ref().filter(|section| section.enabled)?;
    let controller = || model.first_with(Role::Controller).map(|node| node.name.clone());
    settings.host.clone().or_else(controller).or_else(|| model.nodes.first().map(|n| n.name.clone()))
}

/// The monitoring model, or `None` when the blueprint deploys no monitoring.
#[must_use]
pub fn monitoring(model: &Model, inventory: Option<&Inventory>) -> Option<MonitoringModel> {
    let host = host(model)?;
    let settings = model.blueprint.monitoring.as_ref()?;
    let controller = model.first_with(Role::Controller).map(|node| node.name.clone());
    let hosts = model.nodes.iter().map(|node| {
        let known = inventory.and_then(|inventory| inventory.hosts.get(&node.name)).map(|host| host.address.as_str());
        let group = model.groups.get(node.group).map_or("", |group| group.name.as_str());
        (&node.name, known, node.mgmt_address.to_string(), group)
    });
    let nodes: Vec<ScrapeTarget> = hosts.map(scrape_target).collect();
    // A switch the inventory does not list is reached by its name.
    let fabric = model.fabric.switches.iter().map(|switch| {
        let known =
            inventory.and_then(|inventory| inventory.switches.get(&switch.name)).map(|entry| entry.address.as_str());
        (&switch.name, known, switch.name.clone(), role_name(switch.role))
    });
    let switches: Vec<ScrapeTarget> = fabric.map(scrape_target).collect();
    let roce = model.fabric.kind == schema::FabricKind::Roce;
    let frr_switches: Vec<ScrapeTarget> = switches
        .iter()
        .filter(|switch| {
            roce && inventory
                .and_then(|inventory| inventory.switches.get(&switch.name))
                .is_none_or(|entry| entry.os == SwitchOs::Frr)
        })
        .cloned()
        .collect();
    let (gpu_nodes, dcgm_exporters) = model
        .nodes
        .iter()
        .zip(&nodes)
        .filter(|(node, _)| {
            !inventory.and_then(|inventory| inventory.hosts.get(&node.name)).is_some_and(|host| host.fake_gpu_devices)
        })
        .filter_map(|(node, target)| {
            let group = model.groups.get(node.group).filter(|group| group.gpu.is_some() && group.gpus_per_node > 0)?;
            let stack = group.software.as_ref()?;
            let (package, pin) = stack.dcgm_exporter()?;
            let dcgm_package = stack.dcgm_package()?;
            Some((target.clone(), DcgmExporter { node: node.name.clone(), dcgm_package, package, pin }))
        })
        .unzip();
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
    let bgp_plan = bgp_plan(model, &frr_switches);
    let bmcs = inventory.map(|inventory| bmc_targets(model, inventory)).unwrap_or_default();
    let slurm = model.blueprint.scheduler.kind == schema::SchedulerKind::Slurm;
    Some(MonitoringModel {
        cluster: model.name.clone(),
        settings: settings.clone(),
        nodes,
        switches,
        frr_switches,
        gpu_nodes,
        dcgm_exporters,
        rails: rails.into_iter().collect(),
        mounts,
        tenants: model.tenants.iter().map(|tenant| (tenant.name.clone(), tenant.guaranteed_gpus)).collect(),
        cluster_checks_host: controller.clone().unwrap_or_else(|| host.clone()),
        slurm_controller: if slurm { controller } else { None },
        host,
        bgp_plan,
        bmcs,
    })
}

/// The BMCs with an IPMI interface, of nodes the blueprint has (a BMC of a node removed
/// from the blueprint is no longer scraped).
fn bmc_targets(model: &Model, inventory: &Inventory) -> Vec<BmcTarget> {
    model
        .nodes
        .iter()
        .filter_map(|node| {
            let bmc = inventory.bmcs.get(&node.name)?;
            let ipmi = bmc.ipmi.as_ref()?;
            let address = ipmi.address.clone().or_else(|| endpoint_host(&bmc.endpoint))?;
            Some(BmcTarget { node: node.name.clone(), address, driver: ipmi.driver.as_str() })
        })
        .collect()
}

/// The host of a Redfish endpoint URL (`https://10.0.0.5:8443/redfish` → `10.0.0.5`).
fn endpoint_host(endpoint: &str) -> Option<String> {
    let url = reqwest::Url::parse(endpoint).ok()?;
    url.host_str().map(|host| host.trim_start_matches('[').trim_end_matches(']').to_owned())
}

/// Links from each of `frr_switches` to each neighbour switch: one BGP session each.
fn bgp_plan(model: &Model, frr_switches: &[ScrapeTarget]) -> Vec<(String, BTreeMap<String, u32>)> {
    let switches = &model.fabric.switches;
    let index: std::collections::HashMap<&str, usize> =
        switches.iter().enumerate().map(|(index, switch)| (switch.name.as_str(), index)).collect();
    frr_switches
        .iter()
        .filter_map(|target| {
            let mut peers: BTreeMap<&str, u32> = BTreeMap::new();
            for port in model.fabric.ports_of(*index.get(target.name.as_str())?) {
                if let Some(peer) = switches.get(port.peer) {
                    *peers.entry(peer.name.as_str()).or_insert(0) += 1;
                }
            }
            Some((target.name.clone(), peers.into_iter().map(|(name, count)| (name.to_owned(), count)).collect()))
        })
        .collect()
}

/// A target at its inventory address when the inventory has one, else at `planned`.
fn scrape_target((name, known, planned, group): (&String, Option<&str>, String, &str)) -> ScrapeTarget {
    ScrapeTarget { name: name.clone(), address: known.map_or(planned, str::to_owned), group: group.to_owned() }
}

fn role_name(role: SwitchRole) -> &'static str {
    match role {
        SwitchRole::Leaf => "leaf",
        SwitchRole::Spine => "spine",
        SwitchRole::Core => "core",
    }
}
