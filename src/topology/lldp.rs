//! The cabling plan as the switches should see it over LLDP: which neighbour each
//! switch port should report, and the rule that names a reported neighbour the way
//! the plan names devices and ports. One place for both users: the `cabling`
//! validator (`toolkit validate`, all switches at once, a work order) and the cabling
//! check each switch runs from a timer (`render::monitoring::cabling_check`, one
//! switch, a verdict per port).
//!
//! Stage: expand (output view). Input: the [`Model`], the switches' port prefixes and
//! the nodes' rail MACs (from the inventory). Output: [`LldpPlan`].
//!
//! A remote node port is recognised by its name (lldpd sends the interface name as
//! the port description, and as the port id with `portidsubtype ifname`) or by the MAC
//! the inventory lists under `rail_macs`; a device by its system name, with or without
//! its domain. A leaf that bridges its node ports on one interface ([`HOST_INTERFACE`],
//! as the container lab does) reports every node on it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::cabling::cables;
use super::ports::{DEFAULT_PORT_PREFIX, HOST_INTERFACE, port_name};
use crate::inventory::schema::Inventory;
use crate::model::Model;

/// Port prefixes the inventory names, by switch.
#[must_use]
pub fn port_prefixes(inventory: &Inventory) -> BTreeMap<String, String> {
    inventory
        .switches
        .iter()
        .filter_map(|(name, switch)| switch.port_prefix.clone().map(|prefix| (name.clone(), prefix)))
        .collect()
}

/// Rail NIC MACs the inventory lists, by node and rail, lowercase.
#[must_use]
pub fn rail_macs(inventory: &Inventory) -> BTreeMap<String, BTreeMap<u32, String>> {
    inventory
        .hosts
        .iter()
        .filter(|(_, host)| !host.rail_macs.is_empty())
        .map(|(name, host)| {
            (name.clone(), host.rail_macs.iter().map(|(rail, mac)| (*rail, mac.to_lowercase())).collect())
        })
        .collect()
}

/// One end of a cable: a device and its port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct End {
    /// Node or switch name.
    pub device: String,
    /// Interface name (`swp1`, `rail0`).
    pub port: String,
}

impl End {
    /// `device` + `port`.
    #[must_use]
    pub fn new(device: &str, port: &str) -> Self {
        Self { device: device.to_owned(), port: port.to_owned() }
    }
}

impl fmt::Display for End {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} {}", self.device, self.port)
    }
}

/// A cable seen from one end: the local (switch) end and what is at the other end.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct View {
    /// The switch port the cable is seen from.
    pub local: End,
    /// The other end.
    pub remote: End,
}

impl View {
    /// A view from `local` to `remote`.
    #[must_use]
    pub fn new(local: End, remote: End) -> Self {
        Self { local, remote }
    }
}

impl fmt::Display for View {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} <-> {}", self.local, self.remote)
    }
}

/// An LLDP neighbour, as the `lldpctl-json` parser reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Neighbor {
    /// The switch's own interface the neighbour was seen on.
    pub local_interface: String,
    /// The neighbour's system name (host name, possibly with its domain).
    #[serde(default)]
    pub system_name: Option<String>,
    /// Chassis id (a MAC for lldpd).
    #[serde(default)]
    pub chassis_id: Option<String>,
    /// Port id (lldpd: the interface MAC by default, its name with `portidsubtype ifname`).
    #[serde(default)]
    pub port_id: Option<String>,
    /// Port description (lldpd: the interface name).
    #[serde(default)]
    pub port_description: Option<String>,
}

/// A device's port names: a node's rail netdevs one by one, a switch's as its prefix
/// and count (`swp1`–`swp128`). Serialized as a list or as `{"prefix", "count"}`: a
/// spine's plan names ~128 neighbouring switches, and their ports one by one were
/// ~16,000 names per spine (at 4,096 nodes ~1 GiB of a plan's memory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Ports {
    /// Each name.
    Named(BTreeSet<String>),
    /// `prefix` followed by 1 to `count`, as [`port_name`] writes them.
    Numbered {
        /// `swp`, `Ethernet`…
        prefix: String,
        /// The highest port number.
        count: u32,
    },
}

impl Ports {
    /// Whether `name` is one of them.
    #[must_use]
    pub fn contains(&self, name: &str) -> bool {
        match self {
            Self::Named(names) => names.contains(name),
            Self::Numbered { prefix, count } => name.strip_prefix(prefix.as_str()).is_some_and(|number| {
                // As `port_name` writes it: digits without a sign or a leading zero.
                !number.starts_with('0')
                    && number.bytes().all(|byte| byte.is_ascii_digit())
                    && number.parse::<u32>().is_ok_and(|number| (1..=*count).contains(&number))
            }),
        }
    }
}

/// The cabling plan, indexed for matching what switches report.
#[derive(Debug, Clone, Default)]
pub struct LldpPlan {
    /// Every planned cable from each switch end.
    pub views: Vec<View>,
    /// Port names of every device (nodes: rail netdevs; switches: fabric ports).
    pub ports: BTreeMap<String, Ports>,
    /// Rail MAC (lowercase) → node end.
    pub macs: BTreeMap<String, End>,
    /// Devices that are switches.
    pub switches: BTreeSet<String>,
}

impl LldpPlan {
    /// The plan of `model`; switch ports named with `port_prefixes` (by switch,
    /// [`DEFAULT_PORT_PREFIX`] when absent), node ports also known by `rail_macs` (by
    /// node and rail).
    #[must_use]
    pub fn new(
        model: &Model,
        port_prefixes: &BTreeMap<String, String>,
        rail_macs: &BTreeMap<String, BTreeMap<u32, String>>,
    ) -> Self {
        let prefix = |switch: &str| port_prefixes.get(switch).map_or(DEFAULT_PORT_PREFIX, String::as_str);
        let mut plan = Self::default();
        let radix = model.fabric.sizing.radix;
        for switch in &model.fabric.switches {
            let prefix = prefix(&switch.name);
            plan.switches.insert(switch.name.clone());
            plan.ports.insert(switch.name.clone(), Ports::Numbered { prefix: prefix.to_owned(), count: radix });
        }
        for node in &model.nodes {
            plan.ports
                .insert(node.name.clone(), Ports::Named(node.rails.iter().map(|port| port.netdev.clone()).collect()));
            for port in &node.rails {
                if let Some(mac) = rail_macs.get(&node.name).and_then(|macs| macs.get(&port.rail)) {
                    plan.macs.insert(mac.to_lowercase(), End::new(&node.name, &port.netdev));
                }
            }
        }
        for cable in cables(model) {
            let upper = End::new(&cable.dst_device, &port_name(prefix(&cable.dst_device), cable.dst_port));
            if cable.kind == "node-leaf" {
                plan.views.push(View::new(upper, End::new(&cable.src_device, &cable.src_port)));
            } else {
                let lower_port = cable
                    .src_port
                    .parse::<u32>()
                    .map_or_else(|_| cable.src_port.clone(), |number| port_name(prefix(&cable.src_device), number));
                let lower = End::new(&cable.src_device, &lower_port);
                plan.views.push(View::new(lower.clone(), upper.clone()));
                plan.views.push(View::new(upper, lower));
            }
        }
        plan
    }

    /// The cables `switch` reports, named as the plan names devices and ports.
    /// Neighbours on interfaces outside the fabric (management) are left out.
    #[must_use]
    pub fn observe(&self, switch: &str, neighbors: &[Neighbor]) -> Vec<View> {
        let fabric_ports = self.ports.get(switch);
        neighbors
            .iter()
            .filter(|neighbor| {
                neighbor.local_interface == HOST_INTERFACE
                    || fabric_ports.is_some_and(|ports| ports.contains(&neighbor.local_interface))
            })
            .map(|neighbor| View::new(End::new(switch, &neighbor.local_interface), self.remote_end(neighbor)))
            .collect()
    }

    /// The device and port at the other end of `neighbor`, named as the plan names
    /// them where it knows them. The switch's cabling check applies this same rule
    /// (`templates/monitoring/toolkit-cabling-check.py`) to the part of this plan its
    /// switch needs ([`LldpPlan::switch_plans`]); a test runs both on the same
    /// neighbours.
    #[must_use]
    pub fn remote_end(&self, neighbor: &Neighbor) -> End {
        // A port MAC the inventory lists names the node and its port at once.
        if let Some(end) = neighbor.port_id.as_deref().and_then(|id| self.macs.get(&id.to_lowercase())) {
            return end.clone();
        }
        let system = neighbor.system_name.as_deref().unwrap_or_default();
        let short = system.split('.').next().unwrap_or(system);
        let device = if self.ports.contains_key(system) {
            system.to_owned()
        } else if self.ports.contains_key(short) {
            short.to_owned()
        } else if !system.is_empty() {
            system.to_owned()
        } else {
            neighbor.chassis_id.clone().unwrap_or_else(|| "an unnamed device".to_owned())
        };
        let candidates = [&neighbor.port_description, &neighbor.port_id];
        let known = self.ports.get(&device);
        let port = candidates
            .iter()
            .filter_map(|candidate| candidate.as_deref())
            .find(|candidate| known.is_some_and(|ports| ports.contains(candidate)))
            .or(neighbor.port_description.as_deref())
            .or(neighbor.port_id.as_deref())
            .unwrap_or("?");
        End::new(&device, port)
    }

    /// What each switch needs to check its own ports, by switch: the planned
    /// neighbour of each of its ports, and the names and MACs of those neighbours only
    /// (a switch's share of the plan grows with its ports, not with the cluster).
    #[must_use]
    pub fn switch_plans(&self) -> BTreeMap<&str, SwitchPlan<'_>> {
        let shares = self.shares();
        shares.switches().into_iter().filter_map(|switch| Some((switch, shares.get(switch)?))).collect()
    }

    /// Each switch's share of the plan, made when asked for: at 32,768 nodes the
    /// shares of all ~10,000 switches at once were ~1.3 million planned ports. One
    /// pass over the plan indexes the views and MACs by device.
    #[must_use]
    pub fn shares(&self) -> Shares<'_> {
        let mut views_of: HashMap<&str, Vec<&View>, foldhash::fast::RandomState> = HashMap::default();
        for view in &self.views {
            views_of.entry(view.local.device.as_str()).or_default().push(view);
        }
        let mut macs_of: HashMap<&str, Vec<(&String, &End)>, foldhash::fast::RandomState> = HashMap::default();
        for (mac, end) in &self.macs {
            macs_of.entry(end.device.as_str()).or_default().push((mac, end));
        }
        Shares { plan: self, views_of, macs_of }
    }
}

/// Each switch's share of an [`LldpPlan`]: see [`LldpPlan::shares`].
#[derive(Debug)]
pub struct Shares<'a> {
    plan: &'a LldpPlan,
    /// Each switch's views, in plan order.
    views_of: HashMap<&'a str, Vec<&'a View>, foldhash::fast::RandomState>,
    /// Each device's rail MACs.
    macs_of: HashMap<&'a str, Vec<(&'a String, &'a End)>, foldhash::fast::RandomState>,
}

impl<'a> Shares<'a> {
    /// The switches with a share (with planned cables), in name order.
    #[must_use]
    pub fn switches(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = self.views_of.keys().copied().collect();
        names.sort_unstable();
        names
    }

    /// The share of `switch`; `None` for a switch without planned cables.
    #[must_use]
    pub fn get(&self, switch: &str) -> Option<SwitchPlan<'a>> {
        let (&switch, views) = self.views_of.get_key_value(switch)?;
        let mut plan = SwitchPlan {
            switch,
            bridge: None,
            grace: LLDP_GRACE_SECONDS,
            ports: Vec::with_capacity(views.len()),
            devices: BTreeMap::new(),
            macs: BTreeMap::new(),
        };
        let mut seen: HashSet<&str, foldhash::fast::RandomState> = HashSet::default();
        for view in views {
            plan.ports.push(PlannedPort { port: &view.local.port, expected: &view.remote });
            let device = view.remote.device.as_str();
            // A device's names and MACs once, however many cables reach it.
            if !seen.insert(device) {
                continue;
            }
            if !self.plan.switches.contains(device) {
                plan.bridge = Some(HOST_INTERFACE);
            }
            if let Some(ports) = self.plan.ports.get(device) {
                plan.devices.insert(device, ports);
            }
            for &(mac, end) in self.macs_of.get(device).map(Vec::as_slice).unwrap_or_default() {
                plan.macs.insert(mac, end);
            }
        }
        Some(plan)
    }
}

/// How long a neighbour that changed, or a port that lost its neighbour, may stay so
/// before the switch's cabling check fails it: two of lldpd's 30 s announce intervals,
/// so a peer that is booting (its lldpd announcing before its interfaces have their
/// final names) or a cable just moved is a warning, not a failure.
pub const LLDP_GRACE_SECONDS: u64 = 60;

/// One switch's share of the [`LldpPlan`], as its cabling check reads it (JSON):
/// borrowed from the plan, as it lives only to be written (at 32,768 nodes ~4,600
/// shares, each of its ports, ends and neighbours' names otherwise copied and freed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwitchPlan<'a> {
    /// The switch.
    pub switch: &'a str,
    /// On a leaf, the interface that stands for every node port when they are
    /// bridged ([`HOST_INTERFACE`]); none on a switch without node cables.
    pub bridge: Option<&'static str>,
    /// [`LLDP_GRACE_SECONDS`].
    pub grace: u64,
    /// Its planned ports, in plan order.
    pub ports: Vec<PlannedPort<'a>>,
    /// Port names of the devices planned at the other ends.
    pub devices: BTreeMap<&'a str, &'a Ports>,
    /// Their rail MACs (lowercase).
    pub macs: BTreeMap<&'a str, &'a End>,
}

/// A switch port and the neighbour the plan puts at its other end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedPort<'a> {
    /// The switch's interface (`swp3`).
    pub port: &'a str,
    /// The device and port at the other end.
    pub expected: &'a End,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Model {
        let loaded = crate::blueprint::load(std::path::Path::new("blueprints/lab.yaml")).expect("loads");
        crate::model::expand(&loaded.blueprint).expect("expands")
    }

    #[test]
    fn a_switch_s_ports_are_its_prefix_and_a_number_as_port_name_writes_it() {
        let ports = Ports::Numbered { prefix: "swp".to_owned(), count: 64 };
        for name in ["swp1", "swp9", "swp64", &port_name("swp", 17)] {
            assert!(ports.contains(name), "{name}");
        }
        for name in ["swp0", "swp65", "swp01", "swp+1", "swp", "swp1s0", "Ethernet1", "eth1", ""] {
            assert!(!ports.contains(name), "{name}");
        }
        assert_eq!(serde_json::to_string(&ports).expect("serializes"), r#"{"prefix":"swp","count":64}"#);
        let named = Ports::Named(["rail0".to_owned()].into());
        assert!(named.contains("rail0") && !named.contains("rail1"));
        assert_eq!(serde_json::to_string(&named).expect("serializes"), r#"["rail0"]"#);
    }

    #[test]
    fn a_leaf_needs_its_own_ports_and_their_neighbours_only() {
        let macs = [("node01".to_owned(), [(0, "02:42:0a:c8:00:02".to_owned())].into())].into();
        let plan = LldpPlan::new(&lab(), &BTreeMap::new(), &macs);
        let plans = plan.switch_plans();
        let leaf0 = &plans["leaf0"];
        let ports: Vec<String> = leaf0.ports.iter().map(|port| format!("{} {}", port.port, port.expected)).collect();
        assert_eq!(
            ports,
            ["swp1 node01 rail0", "swp2 node02 rail0", "swp3 node03 rail0", "swp4 node04 rail0", "swp26 spine0 swp1"]
        );
        assert_eq!(
            leaf0.devices.keys().copied().collect::<Vec<_>>(),
            ["node01", "node02", "node03", "node04", "spine0"]
        );
        assert_eq!(leaf0.macs.len(), 1);
        // leaf1 serves rail 1: node01's rail-0 MAC is not its business.
        // leaf1 knows node01's rail-0 MAC too: that cable on leaf1 is named as such.
        assert_eq!(plans["leaf1"].macs.len(), 1);
        assert!(plans["spine0"].macs.is_empty());
        assert_eq!((plans["leaf0"].bridge, plans["spine0"].bridge), (Some(HOST_INTERFACE), None));
        assert_eq!(plans["spine0"].ports.len(), 2);
    }
}
