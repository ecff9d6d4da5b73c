//! The lab's layout: which containers and Docker networks stand for the cluster's
//! nodes, switches, rails and cables, and which address each gets.
//!
//! Stage: expand (pure). Input: the [`Model`] and, optionally, the inventory (for the
//! switches' management addresses). Output: [`Layout`]. `lab up` creates exactly this;
//! tests check it offline.
//!
//! Interface order. Docker Engine names a container's interfaces `eth0`, `eth1`… at
//! every start in one order: networks that are not `--internal` first, sorted by name,
//! then internal ones (observed on Engine 20.10; `lab up` connects every network before
//! the first start so the first start already follows it). Fabric network names carry
//! a zero-padded ordinal so that order is meaningful: a node's rails in rail order, a
//! leaf's host network then its uplinks by port, a spine's links by port; management is
//! internal, so it is always the last interface.
//!
//! MAC addresses. Docker Engine 20.10 derives an interface's MAC from its IPv4 address
//! (`02:42` + the four bytes) and cannot be told another one on a second network. Every
//! address here is therefore fixed by the plan — cable networks too, whose subnets are
//! the top /29s of the blueprint's rail pool — so every MAC is known before `up`, and
//! the inventory can list them for deploy to name interfaces by ([`Layout::macs`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::inventory::Inventory;
use crate::model::Model;
use crate::topology::ports::HOST_INTERFACE;
use crate::topology::{SwitchRole, addressing};

use super::LabError;

/// Label put on every container and network a lab creates; its value is the cluster name.
pub const LABEL: &str = "toolkit.lab";

/// Prefix length of one cable network: Docker's gateway plus the two ends. Cable
/// networks take the top /29s of the rail pool: addresses no rail uses, distinct
/// between labs whose rail networks can coexist, and never configured (`up` removes them).
pub const LINK_PREFIX: u8 = 29;

/// More containers than this is not a lab for one machine.
pub const MAX_CONTAINERS: usize = 64;

/// Everything `lab up` creates for one cluster.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    /// Cluster name: the label value and the name prefix `tk-<cluster>-`.
    pub cluster: String,
    /// Networks, fabric ones first (in name order), management last.
    pub networks: Vec<Network>,
    /// Containers: nodes in model order, then switches.
    pub containers: Vec<Container>,
    /// Things worth telling the user (the inventory disagrees with the plan…).
    pub warnings: Vec<String>,
}

/// What a network stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum NetworkKind {
    /// The in-band management network: SSH from the host, deploy, Slurm control traffic.
    Management,
    /// One leaf's host subnet: the leaf and every node's NIC of that rail.
    Rail {
        /// The leaf.
        leaf: String,
        /// Its rail.
        rail: u32,
    },
    /// One switch-to-switch cable.
    Link {
        /// Lower end (leaf, or spine under a core).
        lower: String,
        /// Port on the lower switch.
        lower_port: u32,
        /// Upper end.
        upper: String,
        /// Port on the upper switch.
        upper_port: u32,
    },
}

/// One Docker network.
#[derive(Debug, Clone, Serialize)]
pub struct Network {
    /// Docker name, `tk-<cluster>-…`.
    pub name: String,
    /// What it stands for.
    pub kind: NetworkKind,
    /// Docker's IPAM subnet.
    pub subnet: Ipv4Net,
    /// Docker's gateway. On management it is the host's address on the bridge (how SSH
    /// from the host gets in); on fabric networks it is reserved but never configured.
    pub gateway: Ipv4Addr,
    /// `--internal`: nothing is forwarded between it and the outside world.
    pub internal: bool,
    /// MTU of the veth pairs: the switch MTU on the fabric, so deploy can set jumbo frames.
    pub mtu: u32,
}

impl Network {
    /// True for rails and cables, whose addresses deploy configures, not Docker.
    #[must_use]
    pub fn is_fabric(&self) -> bool {
        !matches!(self.kind, NetworkKind::Management)
    }
}

/// What a container stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A node of the blueprint (head, compute…).
    Node,
    /// A rail leaf switch.
    Leaf,
    /// A spine switch.
    Spine,
    /// A core switch.
    Core,
}

impl fmt::Display for Role {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Node => "node",
            Self::Leaf => "leaf",
            Self::Spine => "spine",
            Self::Core => "core",
        })
    }
}

/// One interface of a container: a network attachment.
#[derive(Debug, Clone, Serialize)]
pub struct Attachment {
    /// Index into [`Layout::networks`].
    pub network: usize,
    /// Docker's address for it (`--ip`); removed again on fabric networks.
    pub address: Ipv4Addr,
    /// The interface name Docker gives it (`eth0`…).
    pub interface: String,
    /// What the interface is on the real machine: `rail0`, `swp26`, `mgmt`.
    pub port: String,
    /// The name deploy gives the interface, as the inventory's `rail_macs` (nodes)
    /// and `port_macs` (switches) key it: `rail0`, `hosts` (a leaf's down ports),
    /// `swp26`. `None` for management, which keeps Docker's name.
    pub netdev: Option<String>,
    /// The address deploy is expected to configure on it, with prefix (rails only).
    pub planned: Option<String>,
    /// Where the other end is, for people.
    pub peer: String,
}

/// One container.
#[derive(Debug, Clone, Serialize)]
pub struct Container {
    /// Docker name, `tk-<cluster>-<host>`.
    pub name: String,
    /// Host name (the node's or switch's name).
    pub host: String,
    /// What it stands for.
    pub role: Role,
    /// Management address: SSH target, in the inventory.
    pub management: Ipv4Addr,
    /// Interfaces in the order Docker names them.
    pub attachments: Vec<Attachment>,
}

impl Layout {
    /// The interface map as text, one line per interface: what deploy needs to know.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut text = String::new();
        for container in &self.containers {
            let _ = writeln!(
                text,
                "{} ({}, {}) management {}",
                container.host, container.role, container.name, container.management
            );
            for attachment in &container.attachments {
                let network = &self.networks[attachment.network];
                let docker = attachment.address.to_string();
                let planned = attachment.planned.as_deref().unwrap_or("-");
                let _ = writeln!(
                    text,
                    "  {:<5} {:<26} port {:<12} deploy {:<16} docker {:<20} to {}",
                    attachment.interface, network.name, attachment.port, planned, docker, attachment.peer
                );
            }
        }
        for network in &self.networks {
            let _ = writeln!(
                text,
                "network {} subnet {} gateway {}{} mtu {}",
                network.name,
                network.subnet,
                network.gateway,
                if network.internal { " internal" } else { "" },
                network.mtu
            );
        }
        text
    }

    /// Every interface deploy names, as `(host, netdev, MAC)`, in container order:
    /// what the inventory's `rail_macs` and `port_macs` must say for this lab.
    #[must_use]
    pub fn macs(&self) -> Vec<(&str, &str, String)> {
        self.containers
            .iter()
            .flat_map(|container| {
                container.attachments.iter().filter_map(move |attachment| {
                    let netdev = attachment.netdev.as_deref()?;
                    Some((container.host.as_str(), netdev, docker_mac(attachment.address)))
                })
            })
            .collect()
    }
}

/// The MAC Docker Engine gives an interface with IPv4 address `address`:
/// `02:42:` and the address's four bytes in hex.
#[must_use]
pub fn docker_mac(address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("02:42:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// Docker name of a container.
#[must_use]
pub fn container_name(cluster: &str, host: &str) -> String {
    format!("tk-{cluster}-{host}")
}

/// Docker name of the management network.
#[must_use]
pub fn management_network(cluster: &str) -> String {
    format!("tk-{cluster}-mgmt")
}

/// Plans the lab for `model`; switch management addresses come from `inventory` when it lists them.
///
/// # Errors
/// [`LabError::Layout`] when names or addresses cannot work: a cluster name Docker
/// refuses, an address outside the management subnet or used twice, too many containers.
pub fn plan(model: &Model, inventory: Option<&Inventory>) -> Result<Layout, LabError> {
    let cluster = model.name.clone();
    if cluster.is_empty() || !cluster.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(LabError::Layout(format!(
            "cluster name `{cluster}` must be lowercase letters, digits and `-` to name containers"
        )));
    }
    let fabric = &model.fabric;
    let total = model.nodes.len() + fabric.switches.len();
    if total > MAX_CONTAINERS {
        return Err(LabError::Layout(format!(
            "the blueprint has {total} nodes and switches; the lab runs one container each and stops at {MAX_CONTAINERS}"
        )));
    }
    let management: Ipv4Net = model.blueprint.fabric.management.inband.subnet.parse().map_err(|_| {
        LabError::Layout(format!(
            "management subnet `{}` is not an IPv4 CIDR block",
            model.blueprint.fabric.management.inband.subnet
        ))
    })?;
    let mut warnings = Vec::new();
    let management_addresses = management_addresses(model, inventory, management, &mut warnings)?;

    // Fabric networks: one per leaf's host subnet, then one per cable.
    let leaves: Vec<(usize, &crate::topology::Switch)> = fabric.switches_with(SwitchRole::Leaf).collect();
    let fabric_count = leaves.len() + fabric.links.len();
    let width = digits(fabric_count.saturating_sub(1));
    let mut networks = Vec::with_capacity(fabric_count + 1);
    let mut leaf_network = BTreeMap::new();
    for &(index, leaf) in &leaves {
        let (Some(subnet), Some(gateway), Some(rail)) = (leaf.host_subnet, leaf.gateway, leaf.rail) else {
            continue;
        };
        let mut used: BTreeSet<Ipv4Addr> = BTreeSet::from([gateway]);
        used.extend(model.nodes.iter().flat_map(|n| &n.rails).filter(|r| r.leaf == index).map(|r| r.address));
        let docker_gateway = highest_free(subnet, &used).ok_or_else(|| {
            LabError::Layout(format!("host subnet `{subnet}` of `{}` has no address left for Docker", leaf.name))
        })?;
        leaf_network.insert(index, networks.len());
        networks.push(Network {
            name: format!("tk-{cluster}-f{:0width$}-{}", networks.len(), leaf.name),
            kind: NetworkKind::Rail { leaf: leaf.name.clone(), rail },
            subnet,
            gateway: docker_gateway,
            internal: false,
            mtu: fabric.switch_mtu,
        });
    }
    let link_subnets = link_subnets(model, &networks)?;
    let mut link_network = Vec::with_capacity(fabric.links.len());
    for (link, &subnet) in fabric.links.iter().zip(&link_subnets) {
        let (Some(lower), Some(upper)) = (fabric.switches.get(link.lower), fabric.switches.get(link.upper)) else {
            continue;
        };
        link_network.push((link, networks.len()));
        networks.push(Network {
            name: format!("tk-{cluster}-f{:0width$}-{}-{}", networks.len(), lower.name, upper.name),
            kind: NetworkKind::Link {
                lower: lower.name.clone(),
                lower_port: link.lower_port,
                upper: upper.name.clone(),
                upper_port: link.upper_port,
            },
            subnet,
            gateway: addressing::nth_host(subnet, 0),
            internal: false,
            mtu: fabric.switch_mtu,
        });
    }
    let management_index = networks.len();
    networks.push(Network {
        name: management_network(&cluster),
        kind: NetworkKind::Management,
        subnet: management,
        gateway: addressing::nth_host(management, 0),
        internal: true,
        mtu: 1500,
    });

    let mut containers = Vec::with_capacity(total);
    for node in &model.nodes {
        let mut attachments = Vec::with_capacity(node.rails.len() + 1);
        for rail in &node.rails {
            let Some(&network) = leaf_network.get(&rail.leaf) else { continue };
            let leaf = fabric.switches.get(rail.leaf).map_or("?", |s| s.name.as_str());
            attachments.push(Attachment {
                network,
                address: rail.address,
                interface: String::new(),
                port: rail.netdev.clone(),
                netdev: Some(rail.netdev.clone()),
                planned: Some(format!("{}/{}", rail.address, rail.prefix_len)),
                peer: format!("{leaf} {}", switch_port(inventory, leaf, rail.leaf_port)),
            });
        }
        containers.push(container(&cluster, &node.name, Role::Node, &management_addresses, attachments));
    }
    for (index, switch) in fabric.switches.iter().enumerate() {
        let mut attachments = Vec::new();
        if let (Some(&network), Some(gateway), Some(subnet)) =
            (leaf_network.get(&index), switch.gateway, switch.host_subnet)
        {
            attachments.push(Attachment {
                network,
                address: gateway,
                interface: String::new(),
                netdev: Some(HOST_INTERFACE.to_owned()),
                // One interface stands for all down ports: the Docker bridge is the
                // switch's ASIC, the interface its SVI carrying the nodes' gateway.
                port: format!("{prefix}1-{prefix}{}", switch.down_ports, prefix = port_prefix(inventory, &switch.name)),
                planned: Some(format!("{gateway}/{}", subnet.prefix_len())),
                peer: format!("nodes of rail {}", switch.rail.unwrap_or_default()),
            });
        }
        for &(link, network) in &link_network {
            let (own_port, end, peer_index, peer_port) = if link.lower == index {
                (link.lower_port, 1, link.upper, link.upper_port)
            } else if link.upper == index {
                (link.upper_port, 2, link.lower, link.lower_port)
            } else {
                continue;
            };
            let peer = fabric.switches.get(peer_index).map_or("?", |s| s.name.as_str());
            let port = switch_port(inventory, &switch.name, own_port);
            attachments.push(Attachment {
                network,
                address: addressing::nth_host(networks[network].subnet, end),
                interface: String::new(),
                netdev: Some(port.clone()),
                port,
                planned: None,
                peer: format!("{peer} {}", switch_port(inventory, peer, peer_port)),
            });
        }
        let role = match switch.role {
            SwitchRole::Leaf => Role::Leaf,
            SwitchRole::Spine => Role::Spine,
            SwitchRole::Core => Role::Core,
        };
        containers.push(container(&cluster, &switch.name, role, &management_addresses, attachments));
    }
    for container in &mut containers {
        let address = management_addresses.get(&container.host).copied().unwrap_or(Ipv4Addr::UNSPECIFIED);
        container.attachments.push(Attachment {
            network: management_index,
            address,
            interface: String::new(),
            port: "mgmt".to_owned(),
            netdev: None,
            planned: None,
            peer: "the host and every container".to_owned(),
        });
        order_like_docker(&mut container.attachments, &networks);
    }
    let mut layout = Layout { cluster, networks, containers, warnings };
    if let Some(inventory) = inventory {
        let macs = mac_warnings(model, inventory, &layout);
        layout.warnings.extend(macs);
    }
    Ok(layout)
}

/// One /[`LINK_PREFIX`] per cable: the last ones of the rail pool, in cable order,
/// clear of every rail network in `networks`.
fn link_subnets(model: &Model, networks: &[Network]) -> Result<Vec<Ipv4Net>, LabError> {
    let count = model.fabric.links.len();
    if count == 0 {
        return Ok(Vec::new());
    }
    let pool = crate::model::network::rail_pool(model).ok_or_else(|| {
        LabError::Layout(format!(
            "rail pool `{}` is not an IPv4 CIDR block",
            model.blueprint.fabric.compute.addressing.rail_pool
        ))
    })?;
    let blocks = pool.subnets(LINK_PREFIX).map_or(0, Iterator::count);
    let subnets: Vec<Ipv4Net> =
        pool.subnets(LINK_PREFIX).into_iter().flatten().skip(blocks.saturating_sub(count)).collect();
    let clear = subnets.iter().all(|cable| {
        networks.iter().all(|network| !network.subnet.contains(cable) && !cable.contains(&network.subnet))
    });
    if subnets.len() != count || !clear {
        return Err(LabError::Layout(format!(
            "rail pool {pool} has no room above its leaves' subnets for the lab's {count} cable networks \
             (/{LINK_PREFIX} each): give the blueprint a larger `rail_pool`"
        )));
    }
    Ok(subnets)
}

/// Where the inventory's interface MACs disagree with the lab's (deploy would then
/// look for interfaces that are not there).
fn mac_warnings(model: &Model, inventory: &Inventory, layout: &Layout) -> Vec<String> {
    let mut warnings = Vec::new();
    for (host, netdev, mac) in layout.macs() {
        let listed = if let Some(entry) = inventory.hosts.get(host) {
            let rail = model
                .nodes
                .iter()
                .find(|n| n.name == host)
                .and_then(|node| node.rails.iter().find(|rail| rail.netdev == netdev).map(|rail| rail.rail));
            rail.and_then(|rail| entry.rail_macs.get(&rail))
        } else if let Some(entry) = inventory.switches.get(host) {
            entry.port_macs.get(netdev)
        } else {
            continue;
        };
        match listed {
            Some(listed) if listed.eq_ignore_ascii_case(&mac) => {}
            Some(listed) => warnings.push(format!(
                "the inventory gives `{host}` {netdev} MAC {listed}, the lab's is {mac}: deploy will not find it"
            )),
            None => warnings.push(format!(
                "the inventory has no MAC for `{host}` {netdev} (the lab's is {mac}): deploy cannot name it"
            )),
        }
    }
    warnings
}

fn container(
    cluster: &str,
    host: &str,
    role: Role,
    management: &BTreeMap<String, Ipv4Addr>,
    attachments: Vec<Attachment>,
) -> Container {
    Container {
        name: container_name(cluster, host),
        host: host.to_owned(),
        role,
        management: management.get(host).copied().unwrap_or(Ipv4Addr::UNSPECIFIED),
        attachments,
    }
}

/// Sorts attachments the way Docker names interfaces at start (see the module doc)
/// and names them `eth0`, `eth1`….
fn order_like_docker(attachments: &mut [Attachment], networks: &[Network]) {
    attachments.sort_by(|a, b| {
        let (a, b) = (&networks[a.network], &networks[b.network]);
        (a.internal, &a.name).cmp(&(b.internal, &b.name))
    });
    for (index, attachment) in attachments.iter_mut().enumerate() {
        attachment.interface = format!("eth{index}");
    }
}

/// A switch port's name on the real switch (`swp26`): the inventory's prefix, or `swp`.
fn switch_port(inventory: Option<&Inventory>, switch: &str, port: u32) -> String {
    format!("{}{port}", port_prefix(inventory, switch))
}

fn port_prefix<'a>(inventory: Option<&'a Inventory>, switch: &str) -> &'a str {
    inventory.and_then(|i| i.switches.get(switch)).and_then(|s| s.port_prefix.as_deref()).unwrap_or("swp")
}

/// Management address of every container: nodes as the model plans; switches as the
/// inventory lists them, else from the top of the subnet down.
fn management_addresses(
    model: &Model,
    inventory: Option<&Inventory>,
    subnet: Ipv4Net,
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<String, Ipv4Addr>, LabError> {
    let docker_gateway = addressing::nth_host(subnet, 0);
    let mut by_host = BTreeMap::new();
    let mut owner: BTreeMap<Ipv4Addr, String> = BTreeMap::from([(docker_gateway, "Docker's gateway".to_owned())]);
    let mut claim = |owner: &mut BTreeMap<Ipv4Addr, String>, host: &str, address: Ipv4Addr| -> Result<(), LabError> {
        if !subnet.contains(&address) || address == subnet.network() || address == subnet.broadcast() {
            return Err(LabError::Layout(format!(
                "management address {address} of `{host}` is not a host address of {subnet}"
            )));
        }
        if let Some(previous) = owner.insert(address, host.to_owned()) {
            return Err(LabError::Layout(format!(
                "management address {address} is both `{previous}`'s and `{host}`'s"
            )));
        }
        by_host.insert(host.to_owned(), address);
        Ok(())
    };
    for node in &model.nodes {
        if let Some(listed) = inventory.and_then(|i| i.hosts.get(&node.name))
            && listed.address.parse::<Ipv4Addr>().ok() != Some(node.mgmt_address)
        {
            warnings.push(format!(
                "the inventory reaches `{}` at {}, the lab puts it at the planned {}",
                node.name, listed.address, node.mgmt_address
            ));
        }
        claim(&mut owner, &node.name, node.mgmt_address)?;
    }
    let mut unlisted = Vec::new();
    for switch in &model.fabric.switches {
        match inventory.and_then(|i| i.switches.get(&switch.name)) {
            Some(listed) => {
                let address = listed.address.parse::<Ipv4Addr>().map_err(|_| {
                    LabError::Layout(format!(
                        "the inventory's address `{}` of switch `{}` is not an IPv4 address; the lab needs one",
                        listed.address, switch.name
                    ))
                })?;
                claim(&mut owner, &switch.name, address)?;
            }
            None => unlisted.push(switch.name.as_str()),
        }
    }
    // Unlisted switches count down from the top, skipping whatever is taken.
    let mut candidate = u32::from(subnet.broadcast());
    for name in unlisted {
        let address = loop {
            candidate = candidate.saturating_sub(1);
            let address = Ipv4Addr::from(candidate);
            if candidate <= u32::from(docker_gateway) {
                return Err(LabError::Layout(format!("management subnet {subnet} has no address left for `{name}`")));
            }
            if !owner.contains_key(&address) {
                break address;
            }
        };
        claim(&mut owner, name, address)?;
    }
    Ok(by_host)
}

/// The highest usable address of `subnet` not in `used`.
fn highest_free(subnet: Ipv4Net, used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    let first = u32::from(subnet.network()).checked_add(1)?;
    let last = u32::from(subnet.broadcast()).checked_sub(1)?;
    (first..=last).rev().map(Ipv4Addr::from).find(|a| !used.contains(a))
}

fn digits(value: usize) -> usize {
    value.checked_ilog10().map_or(1, |d| d as usize + 1)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::Path;

    /// The layout of `blueprints/lab.yaml`, with or without its inventory.
    pub(crate) fn lab(inventory: bool) -> Result<Layout, LabError> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let blueprint = crate::blueprint::load(&root.join("blueprints/lab.yaml")).expect("lab blueprint loads");
        let model = crate::model::expand(&blueprint.blueprint).expect("lab blueprint expands");
        let inventory = inventory.then(|| {
            crate::inventory::load(&root.join("inventories/lab.yaml")).expect("lab inventory loads").inventory
        });
        plan(&model, inventory.as_ref())
    }

    #[test]
    fn lab_blueprint_layout() {
        let layout = lab(true).expect("plans");
        assert!(layout.warnings.is_empty(), "{:?}", layout.warnings);
        insta::assert_snapshot!(layout.describe());
    }

    #[test]
    fn switches_without_inventory_take_the_top_of_the_subnet() {
        let layout = lab(false).expect("plans");
        let management: BTreeMap<&str, String> =
            layout.containers.iter().map(|c| (c.host.as_str(), c.management.to_string())).collect();
        assert_eq!(management["leaf0"], "10.10.0.254");
        assert_eq!(management["leaf1"], "10.10.0.253");
        assert_eq!(management["spine0"], "10.10.0.252");
        assert_eq!(management["node01"], "10.10.0.11");
    }

    #[test]
    fn interface_order_follows_network_names_with_management_last() {
        let layout = lab(true).expect("plans");
        for container in &layout.containers {
            let names: Vec<(bool, &str)> = container
                .attachments
                .iter()
                .map(|a| (layout.networks[a.network].internal, layout.networks[a.network].name.as_str()))
                .collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(names, sorted, "{}", container.host);
            assert_eq!(container.attachments.last().map(|a| a.port.as_str()), Some("mgmt"));
        }
    }

    #[test]
    fn the_lab_inventory_lists_every_mac_the_lab_has() {
        let layout = lab(true).expect("plans");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let inventory = crate::inventory::load(&root.join("inventories/lab.yaml")).expect("loads").inventory;
        let macs = layout.macs();
        // 4 nodes × 2 rails, 2 leaves × (hosts + uplink), the spine's 2 ports.
        assert_eq!(macs.len(), 8 + 4 + 2, "{macs:?}");
        for (host, netdev, mac) in macs {
            let listed = match inventory.hosts.get(host) {
                Some(entry) => entry.rail_macs.get(&netdev.trim_start_matches("rail").parse().expect("railN")),
                None => inventory.switches[host].port_macs.get(netdev),
            };
            assert_eq!(listed, Some(&mac), "{host} {netdev}");
        }
        assert_eq!(docker_mac(Ipv4Addr::new(10, 200, 0, 2)), "02:42:0a:c8:00:02");
    }

    #[test]
    fn a_wrong_or_missing_mac_in_the_inventory_is_a_warning() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let blueprint = crate::blueprint::load(&root.join("blueprints/lab.yaml")).expect("loads");
        let model = crate::model::expand(&blueprint.blueprint).expect("expands");
        let mut inventory = crate::inventory::load(&root.join("inventories/lab.yaml")).expect("loads").inventory;
        inventory.hosts.get_mut("node02").expect("node02").rail_macs.insert(1, "02:42:0a:c8:00:99".to_owned());
        inventory.switches.get_mut("spine0").expect("spine0").port_macs.remove("swp2");
        let warnings = plan(&model, Some(&inventory)).expect("plans").warnings;
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("`node02` rail1 MAC 02:42:0a:c8:00:99, the lab's is 02:42:0a:c8:00:23"));
        assert!(warnings[1].contains("no MAC for `spine0` swp2"));
    }

    #[test]
    fn cable_networks_take_the_top_of_the_rail_pool_or_refuse_a_full_one() {
        let layout = lab(false).expect("plans");
        let cables: Vec<String> = layout
            .networks
            .iter()
            .filter(|n| matches!(n.kind, NetworkKind::Link { .. }))
            .map(|n| n.subnet.to_string())
            .collect();
        assert_eq!(cables, ["10.200.255.240/29", "10.200.255.248/29"]);
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(root.join("blueprints/lab.yaml")).expect("reads");
        // A /26 pool holds the two /27 leaf subnets and nothing more.
        let full = text.replace("rail_pool: 10.200.0.0/16", "rail_pool: 10.200.0.0/26");
        let blueprint = crate::blueprint::load::load_text(&root.join("lab.yaml"), full).expect("loads");
        let model = crate::model::expand(&blueprint.blueprint).expect("expands");
        let error = plan(&model, None).expect_err("no room for cables");
        assert!(error.to_string().contains("no room above its leaves' subnets"), "{error}");
    }

    #[test]
    fn digits_pad_ordinals() {
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
    }

    #[test]
    fn highest_free_skips_planned_addresses() {
        let subnet: Ipv4Net = "10.0.0.0/29".parse().expect("net");
        let used = BTreeSet::from([Ipv4Addr::new(10, 0, 0, 6)]);
        assert_eq!(highest_free(subnet, &used), Some(Ipv4Addr::new(10, 0, 0, 5)));
    }
}
