//! The compute fabric: sizing, switches, cabling plan, IP plan and ASN plan.
//!
//! Stage: expand. Input: the blueprint's fabric and the nodes on it. Output:
//! [`Fabric`]. Names are `leaf<N>`, `spine<N>`, `core<N>` (0-based, global), so the
//! lab's `leaf0`, `leaf1`, `spine0` and a SuperPOD's 8 leaves follow one rule.
//! Leaf `N` serves rail `N % rails` of scalable unit `N / rails`; node `k` of an SU
//! is on port `k + 1` of each of its SU's leaves (port number = node slot: easy audit).

pub mod addressing;
pub mod cabling;
pub mod lldp;
pub mod ports;
pub mod qos;
pub mod sizing;

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::blueprint::schema::{FabricKind, InfinibandSpec, RoceQos};
use ports::FabricPort;
pub use sizing::{Sizing, SizingError, SizingInput, parse_ratio, size};

/// The compute fabric, fully planned.
#[derive(Debug, Clone, Serialize)]
pub struct Fabric {
    /// InfiniBand or RoCE.
    pub kind: FabricKind,
    /// Counts.
    pub sizing: Sizing,
    /// Link speed in Gb/s.
    pub link_speed_gbps: u32,
    /// Switch model.
    pub switch_model: String,
    /// Switch port MTU.
    pub switch_mtu: u32,
    /// Host rail MTU.
    pub host_mtu: u32,
    /// RoCE QoS (RoCE only).
    pub roce: Option<RoceQos>,
    /// InfiniBand settings (InfiniBand only).
    pub infiniband: Option<InfinibandSpec>,
    /// Every switch: leaves, then spines, then cores.
    pub switches: Vec<Switch>,
    /// Switch-to-switch cables (node-to-leaf cables are on the nodes' rail ports).
    pub links: Vec<Link>,
    /// Each switch's ends of `links`, indexed like `switches`: see [`Fabric::ports_of`].
    #[serde(skip)]
    ports: ports::Index,
}

/// Layer of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SwitchRole {
    /// Rail leaf: nodes below, spines above.
    Leaf,
    /// Spine.
    Spine,
    /// Core (3-tier fabrics).
    Core,
}

/// One switch.
#[derive(Debug, Clone, Serialize)]
pub struct Switch {
    /// Name (`leaf0`, `spine0`, `core0`).
    pub name: String,
    /// Layer.
    pub role: SwitchRole,
    /// Scalable unit (leaves).
    pub su: Option<u32>,
    /// Rail (leaves).
    pub rail: Option<u32>,
    /// Pod (3-tier leaves and spines).
    pub pod: Option<u32>,
    /// BGP ASN (RoCE): spines share one, cores share one, each leaf its own.
    pub asn: u32,
    /// Loopback address, also the BGP router id.
    pub loopback: Ipv4Addr,
    /// Host subnet of a leaf (its rail's nodes in its SU).
    pub host_subnet: Option<Ipv4Net>,
    /// Leaf address on the host subnet: the nodes' next hop.
    pub gateway: Option<Ipv4Addr>,
    /// Ports facing nodes (leaves) or lower switches.
    pub down_ports: u32,
}

/// Kind of switch-to-switch cable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    /// Leaf uplink to a spine.
    LeafSpine,
    /// Spine uplink to a core.
    SpineCore,
}

/// A cable between two switch ports; `lower` is the leaf (or spine) end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Link {
    /// Kind.
    pub kind: LinkKind,
    /// Index of the lower switch.
    pub lower: usize,
    /// Port on the lower switch, from 1.
    pub lower_port: u32,
    /// Index of the upper switch.
    pub upper: usize,
    /// Port on the upper switch, from 1.
    pub upper_port: u32,
}

impl Fabric {
    /// Switches of one layer.
    pub fn switches_with(&self, role: SwitchRole) -> impl Iterator<Item = (usize, &Switch)> {
        self.switches.iter().enumerate().filter(move |(_, s)| s.role == role)
    }

    /// Index of the leaf for (`su`, `rail`).
    #[must_use]
    pub fn leaf_index(&self, su: u32, rail: u32) -> usize {
        (su * self.sizing.rails + rail) as usize
    }

    /// The fabric ports of switch `index` (its ends of `links`), in port order; none
    /// for an index past the last switch.
    #[must_use]
    pub fn ports_of(&self, index: usize) -> impl ExactSizeIterator<Item = FabricPort> + '_ {
        self.ports.ports(index, &self.links)
    }
}

/// Everything needed to plan switches and cables.
#[derive(Debug, Clone)]
pub struct FabricInput<'a> {
    /// Sizing inputs.
    pub sizing: SizingInput,
    /// Fabric kind.
    pub kind: FabricKind,
    /// Link speed.
    pub link_speed_gbps: u32,
    /// Switch model.
    pub switch_model: &'a str,
    /// Switch MTU.
    pub switch_mtu: u32,
    /// Host MTU.
    pub host_mtu: u32,
    /// RoCE QoS.
    pub roce: Option<RoceQos>,
    /// InfiniBand settings.
    pub infiniband: Option<InfinibandSpec>,
    /// Rail pool.
    pub rail_pool: Ipv4Net,
    /// Loopback pool.
    pub loopback_pool: Ipv4Net,
    /// Spine ASN.
    pub spine_asn: u32,
    /// First leaf ASN.
    pub leaf_asn_base: u32,
    /// Core ASN.
    pub core_asn: u32,
}

/// Why a fabric cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Sizing failed.
    #[error(transparent)]
    Sizing(#[from] SizingError),
    /// A pool is too small.
    #[error(transparent)]
    Pool(#[from] addressing::PoolError),
}

/// Plans switches, ASNs, loopbacks, leaf subnets and switch-to-switch cables.
///
/// # Errors
/// [`PlanError`] when the fabric cannot be sized or a pool is too small.
pub fn plan(input: &FabricInput<'_>) -> Result<Fabric, PlanError> {
    let sizing = size(input.sizing)?;
    let total = (sizing.leaves + sizing.spines + sizing.cores) as usize;
    // Loopbacks start at the pool's second address: `.0` as a router id confuses people.
    let loopbacks = addressing::Pool::new(input.loopback_pool, 32, total + 1)?;
    let host_prefix = addressing::prefix_for_hosts(sizing.nodes_per_su + 1);
    let host_subnets = addressing::Pool::new(input.rail_pool, host_prefix, sizing.leaves as usize)?;

    let mut switches = Vec::with_capacity(total);
    let leaves_per_pod = (sizing.radix / 2).max(1);
    for leaf in 0..sizing.leaves {
        let subnet = host_subnets.subnet(leaf as usize);
        switches.push(Switch {
            name: format!("leaf{leaf}"),
            role: SwitchRole::Leaf,
            su: Some(leaf / sizing.rails),
            rail: Some(leaf % sizing.rails),
            pod: (sizing.tiers == 3).then_some(leaf / leaves_per_pod),
            asn: input.leaf_asn_base.saturating_add(leaf),
            loopback: loopbacks.address(switches.len() + 1),
            host_subnet: Some(subnet),
            gateway: Some(addressing::nth_host(subnet, 0)),
            down_ports: sizing.nodes_per_su,
        });
    }
    for spine in 0..sizing.spines {
        switches.push(Switch {
            name: format!("spine{spine}"),
            role: SwitchRole::Spine,
            su: None,
            rail: None,
            pod: (sizing.tiers == 3).then_some(spine / sizing.uplinks_per_leaf),
            asn: input.spine_asn,
            loopback: loopbacks.address(switches.len() + 1),
            host_subnet: None,
            gateway: None,
            down_ports: if sizing.tiers == 3 { sizing.radix / 2 } else { sizing.radix },
        });
    }
    for core in 0..sizing.cores {
        switches.push(Switch {
            name: format!("core{core}"),
            role: SwitchRole::Core,
            su: None,
            rail: None,
            pod: None,
            asn: input.core_asn,
            loopback: loopbacks.address(switches.len() + 1),
            host_subnet: None,
            gateway: None,
            down_ports: sizing.radix,
        });
    }
    let links = cable(&sizing);
    let ports = ports::Index::new(switches.len(), &links);
    Ok(Fabric {
        kind: input.kind,
        sizing,
        link_speed_gbps: input.link_speed_gbps,
        switch_model: input.switch_model.to_owned(),
        switch_mtu: input.switch_mtu,
        host_mtu: input.host_mtu,
        roce: input.roce,
        infiniband: input.infiniband.clone(),
        switches,
        links,
        ports,
    })
}

/// Leaf uplinks → spines, spine uplinks → cores (reference §1.6).
fn cable(sizing: &Sizing) -> Vec<Link> {
    let capacity = usize::try_from(sizing.leaf_spine_cables + sizing.spine_core_cables).unwrap_or(0);
    let mut links = Vec::with_capacity(capacity);
    let first_spine = sizing.leaves as usize;
    let first_core = first_spine + sizing.spines as usize;
    let per_pair = sizing.links_per_leaf_spine.max(1);
    for leaf in 0..sizing.leaves {
        for uplink in 0..sizing.uplinks_per_leaf {
            let (spine, spine_port) = if sizing.tiers == 2 {
                (uplink / per_pair, leaf * per_pair + uplink % per_pair + 1)
            } else {
                // Leaf meshed once to each spine of its pod; spine port = leaf's slot in the pod.
                let leaves_per_pod = sizing.radix / 2;
                let pod = leaf / leaves_per_pod;
                (pod * sizing.uplinks_per_leaf + uplink, leaf % leaves_per_pod + 1)
            };
            links.push(Link {
                kind: LinkKind::LeafSpine,
                lower: leaf as usize,
                lower_port: sizing.nodes_per_su + uplink + 1,
                upper: first_spine + spine as usize,
                upper_port: spine_port,
            });
        }
    }
    if sizing.tiers == 3 && sizing.cores > 0 {
        let half = sizing.radix / 2;
        for spine in 0..sizing.spines {
            for uplink in 0..half {
                // Spread each spine's uplinks over distinct cores, round robin.
                let slot = u64::from(spine) * u64::from(half) + u64::from(uplink);
                let core = (slot % u64::from(sizing.cores)) as usize;
                let core_port = u32::try_from(slot / u64::from(sizing.cores)).unwrap_or(u32::MAX) + 1;
                links.push(Link {
                    kind: LinkKind::SpineCore,
                    lower: first_spine + spine as usize,
                    lower_port: half + uplink + 1,
                    upper: first_core + core,
                    upper_port: core_port,
                });
            }
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn input(nodes: u32, rails: u32, radix: u32) -> FabricInput<'static> {
        FabricInput {
            sizing: SizingInput { nodes, rails, radix, oversubscription: (1, 1), uplinks_override: None },
            kind: FabricKind::Roce,
            link_speed_gbps: 400,
            switch_model: "sn5600",
            switch_mtu: 9216,
            host_mtu: 9000,
            roce: None,
            infiniband: None,
            rail_pool: "10.0.0.0/8".parse().expect("net"),
            loopback_pool: "172.16.0.0/16".parse().expect("net"),
            spine_asn: 4_200_000_000,
            leaf_asn_base: 4_200_000_100,
            core_asn: 4_199_999_999,
        }
    }

    fn assert_no_port_used_twice(fabric: &Fabric) {
        let mut used = HashSet::new();
        for link in &fabric.links {
            assert!(used.insert((link.lower, link.lower_port)), "lower port reused: {link:?}");
            assert!(used.insert((link.upper, link.upper_port)), "upper port reused: {link:?}");
            assert!(link.upper_port <= fabric.sizing.radix && link.lower_port <= fabric.sizing.radix);
        }
    }

    #[test]
    fn two_tier_cabling_uses_every_uplink_once() {
        let fabric = plan(&input(127, 8, 64)).expect("plans");
        assert_eq!(fabric.links.len(), 1024);
        assert_no_port_used_twice(&fabric);
        assert_eq!(fabric.switches[0].name, "leaf0");
        assert_eq!(fabric.switches[32].name, "spine0");
    }

    #[test]
    fn three_tier_cabling_uses_every_port_once() {
        let fabric = plan(&input(512, 8, 64)).expect("plans");
        assert_eq!(fabric.sizing.tiers, 3);
        assert_eq!(fabric.links.len(), 4096 + 4096);
        assert_no_port_used_twice(&fabric);
    }

    #[test]
    fn each_switch_s_ports_are_its_cable_ends_in_port_order() {
        for fabric in [plan(&input(127, 8, 64)).expect("plans"), plan(&input(512, 8, 64)).expect("plans")] {
            for index in 0..fabric.switches.len() {
                // What a scan of every cable finds for this switch.
                let mut scanned: Vec<(u32, usize, u32)> = fabric
                    .links
                    .iter()
                    .filter_map(|link| match index {
                        _ if link.lower == index => Some((link.lower_port, link.upper, link.upper_port)),
                        _ if link.upper == index => Some((link.upper_port, link.lower, link.lower_port)),
                        _ => None,
                    })
                    .collect();
                scanned.sort_unstable();
                let indexed: Vec<(u32, usize, u32)> =
                    fabric.ports_of(index).map(|port| (port.port, port.peer, port.peer_port)).collect();
                assert_eq!(indexed, scanned, "switch {}", fabric.switches[index].name);
                let up = fabric.ports_of(index).filter(|port| port.direction == ports::Direction::Up).count();
                let role = fabric.switches[index].role;
                assert_eq!(
                    up == 0,
                    role == SwitchRole::Core || (role == SwitchRole::Spine && fabric.sizing.tiers == 2)
                );
            }
        }
    }

    #[test]
    fn asns_follow_rfc7938() {
        let fabric = plan(&input(31, 8, 64)).expect("plans");
        let spine_asns: HashSet<u32> = fabric.switches_with(SwitchRole::Spine).map(|(_, s)| s.asn).collect();
        let leaf_asns: HashSet<u32> = fabric.switches_with(SwitchRole::Leaf).map(|(_, s)| s.asn).collect();
        assert_eq!(spine_asns.len(), 1, "spines share one ASN");
        assert_eq!(leaf_asns.len(), 8, "each leaf has its own ASN");
        assert!(spine_asns.is_disjoint(&leaf_asns));
    }

    #[test]
    fn leaf_subnets_do_not_overlap() {
        let fabric = plan(&input(127, 8, 64)).expect("plans");
        let subnets: Vec<Ipv4Net> = fabric.switches.iter().filter_map(|s| s.host_subnet).collect();
        for (i, a) in subnets.iter().enumerate() {
            for b in &subnets[i + 1..] {
                assert!(!a.contains(b) && !b.contains(a), "{a} overlaps {b}");
            }
        }
    }
}
