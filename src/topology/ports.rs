//! Switch port names and each switch's fabric ports, from the cabling plan.
//!
//! Stage: expand (helpers read by render). Input: the cabling plan's links. Output: port
//! names and, per switch, its switch-to-switch ports in port order, which
//! [`super::plan`] keeps in the [`super::Fabric`] so every reader looks them up.
//!
//! Interface naming convention (switch configs and the container lab follow it):
//! - A switch port is `<prefix><number>`: the number is the cabling plan's (from 1),
//!   the prefix comes from the inventory (`port_prefix`, [`DEFAULT_PORT_PREFIX`] when
//!   absent). The lab's leaf0 reaches spine0 on `swp26` (ports 1–25 face nodes).
//! - A leaf's node ports (1..=`down_ports`) are one L2 segment carrying the leaf's
//!   host subnet, and the leaf's gateway address sits on one L3 interface on it:
//!   [`HOST_INTERFACE`] (`hosts`) on Linux/FRR switches — a bridge of the node ports
//!   on hardware, the leaf's interface on its rail network (renamed `hosts`) in the
//!   container lab — and the SVI `vlan<HOST_VLAN>` on Cumulus NVUE, whose node ports
//!   are access ports of that VLAN. One subnet per leaf keeps node addressing a
//!   single arithmetic rule; per-port /31s are out of scope.

use serde::Serialize;

use super::Link;

/// Port prefix when the inventory names none: Cumulus and most Linux switch OSes use `swp`.
pub const DEFAULT_PORT_PREFIX: &str = "swp";

/// Name of a leaf's host-facing L3 interface on Linux/FRR switches.
pub const HOST_INTERFACE: &str = "hosts";

/// VLAN of a leaf's node ports on switches that bridge them with an SVI (NVUE).
/// Each leaf is its own L2 domain, so every leaf can use the same number.
pub const HOST_VLAN: u16 = 100;

/// The name of port `port` (from 1) with `prefix`: `swp26`.
#[must_use]
pub fn port_name(prefix: &str, port: u32) -> String {
    format!("{prefix}{port}")
}

/// Longest interface name Linux accepts (`IFNAMSIZ` minus the NUL).
pub const MAX_INTERFACE_NAME: usize = 15;

/// Whether Linux accepts `name` for an interface and it is safe in paths and
/// scripts: 1–15 of ASCII letters, digits, `-`, `_`, `.`, and not `.` or `..`.
#[must_use]
pub fn is_interface_name(name: &str) -> bool {
    (1..=MAX_INTERFACE_NAME).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name != "."
        && name != ".."
}

/// Which way a fabric port leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Towards the spines or cores.
    Up,
    /// Towards the leaves or spines.
    Down,
}

/// One end of a switch-to-switch cable, seen from the switch it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FabricPort {
    /// Port number on this switch, from 1.
    pub port: u32,
    /// Index of the switch at the other end.
    pub peer: usize,
    /// Port number on the peer, from 1.
    pub peer_port: u32,
    /// Up or down the tree.
    pub direction: Direction,
}

/// Every switch's fabric ports, indexed like the fabric's switches, each switch's in
/// port order.
///
/// Made in one pass over the cables when the fabric is planned: renderers, validators
/// and monitoring all ask for a switch's ports, and a scan of every cable per switch
/// was quadratic in the fabric size (half a million cables at 32,768 nodes). Each
/// port end is kept as its cable's number (4 bytes, not a 24-byte [`FabricPort`]:
/// the index lives as long as the plan) and turned into a port when read.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    /// Where each switch's run of `ends` starts; one more entry than switches.
    starts: Vec<u32>,
    /// Cable numbers, grouped by switch, each group in port order.
    ends: Vec<u32>,
}

impl Index {
    pub(super) fn new(switches: usize, links: &[Link]) -> Self {
        // Every cable's ends are switches of the fabric: `plan` made both.
        let mut starts = vec![0_u32; switches + 1];
        for link in links {
            starts[link.lower + 1] += 1;
            starts[link.upper + 1] += 1;
        }
        for switch in 0..switches {
            starts[switch + 1] += starts[switch];
        }
        let mut filled = starts.clone();
        let mut ends = vec![0_u32; starts[switches] as usize];
        for (number, link) in links.iter().enumerate() {
            for end in [link.lower, link.upper] {
                ends[filled[end] as usize] = number as u32;
                filled[end] += 1;
            }
        }
        for switch in 0..switches {
            let run = &mut ends[starts[switch] as usize..starts[switch + 1] as usize];
            run.sort_by_key(|&number| port_at(&links[number as usize], switch).port);
        }
        Self { starts, ends }
    }

    /// The ports of switch `switch` (none past the last switch), in port order.
    pub(super) fn ports<'a>(
        &'a self,
        switch: usize,
        links: &'a [Link],
    ) -> impl ExactSizeIterator<Item = FabricPort> + 'a {
        let run = match (self.starts.get(switch), self.starts.get(switch + 1)) {
            (Some(&start), Some(&end)) => &self.ends[start as usize..end as usize],
            _ => &[],
        };
        run.iter().map(move |&number| port_at(&links[number as usize], switch))
    }
}

/// `link` seen from its end at switch `switch`.
fn port_at(link: &Link, switch: usize) -> FabricPort {
    if link.lower == switch {
        FabricPort { port: link.lower_port, peer: link.upper, peer_port: link.upper_port, direction: Direction::Up }
    } else {
        FabricPort { port: link.upper_port, peer: link.lower, peer_port: link.lower_port, direction: Direction::Down }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blueprint::schema::FabricKind;
    use crate::topology::{Fabric, FabricInput, SizingInput, plan};

    fn lab_like() -> Fabric {
        plan(&FabricInput {
            sizing: SizingInput { nodes: 4, rails: 2, radix: 32, oversubscription: (4, 1), uplinks_override: Some(1) },
            kind: FabricKind::Roce,
            link_speed_gbps: 200,
            switch_model: "frr-container",
            switch_mtu: 9216,
            host_mtu: 9000,
            roce: None,
            infiniband: None,
            rail_pool: "10.200.0.0/16".parse().expect("net"),
            loopback_pool: "10.255.0.0/24".parse().expect("net"),
            spine_asn: 4_200_000_000,
            leaf_asn_base: 4_200_000_100,
            core_asn: 4_199_999_999,
        })
        .expect("plans")
    }

    #[test]
    fn names_ports_by_prefix_and_number() {
        assert_eq!(port_name("swp", 26), "swp26");
        assert_eq!(port_name("eth", 1), "eth1");
    }

    #[test]
    fn each_cable_appears_once_at_each_end() {
        let fabric = lab_like();
        let leaf0: Vec<FabricPort> = fabric.ports_of(0).collect();
        assert_eq!(leaf0.len(), 1);
        assert_eq!(leaf0[0], FabricPort { port: 26, peer: 2, peer_port: 1, direction: Direction::Up });
        let spine0 = fabric.ports_of(2);
        assert_eq!(
            spine0.map(|p| (p.port, p.peer, p.peer_port, p.direction)).collect::<Vec<_>>(),
            vec![(1, 0, 26, Direction::Down), (2, 1, 26, Direction::Down)]
        );
        let total: usize = (0..fabric.switches.len()).map(|index| fabric.ports_of(index).len()).sum();
        assert_eq!(fabric.ports_of(fabric.switches.len()).len(), 0);
        assert_eq!(total, fabric.links.len() * 2);
    }
}
