//! Rail-optimized leaf/spine(/core) sizing, as NVIDIA DGX SuperPOD builds it.
//!
//! Stage: expand. Input: node count, rails, radix, oversubscription. Output:
//! [`Sizing`]. The formulas (reference `fabric_scheduler.md` §1.5) reproduce the
//! published SuperPOD tables: whole scalable units are built even when nodes are
//! missing (NVIDIA's guidance), one leaf per (rail, SU); two tiers while the
//! leaves fit on one spine's ports, else pods of K/2 leaves under a core layer.

use serde::Serialize;
use thiserror::Error;

/// Why a fabric cannot be sized.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SizingError {
    /// Radix too small to have both down- and uplinks.
    #[error("a switch radix of `{radix}` leaves no port for uplinks at oversubscription `{ratio}`")]
    NoUplinks {
        /// Ports per switch.
        radix: u32,
        /// The ratio asked for.
        ratio: String,
    },
    /// More endpoints than a 3-tier fabric of this radix can connect.
    #[error("{leaves} leaves exceed what a 3-tier fabric of radix {radix} connects ({max} leaves)")]
    TooLarge {
        /// Leaves needed.
        leaves: u32,
        /// Ports per switch.
        radix: u32,
        /// Largest leaf count.
        max: u32,
    },
    /// Uplinks asked for do not fit.
    #[error("`{uplinks}` uplinks per leaf plus `{down}` node ports exceed the radix `{radix}`")]
    UplinksExceedRadix {
        /// Uplinks asked for.
        uplinks: u32,
        /// Downlinks in use.
        down: u32,
        /// Ports per switch.
        radix: u32,
    },
}

/// Inputs to sizing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizingInput {
    /// Nodes on the compute fabric.
    pub nodes: u32,
    /// Rails per node.
    pub rails: u32,
    /// Switch ports at NIC speed.
    pub radix: u32,
    /// Oversubscription down:up.
    pub oversubscription: (u32, u32),
    /// Uplinks per leaf, when set by the blueprint.
    pub uplinks_override: Option<u32>,
}

/// The computed fabric size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sizing {
    /// Nodes on the fabric.
    pub nodes: u32,
    /// Rails.
    pub rails: u32,
    /// Switch radix.
    pub radix: u32,
    /// Node ports per leaf = nodes per scalable unit.
    pub nodes_per_su: u32,
    /// Uplink ports per leaf.
    pub uplinks_per_leaf: u32,
    /// Scalable units built.
    pub scalable_units: u32,
    /// Leaf switches.
    pub leaves: u32,
    /// Spine switches.
    pub spines: u32,
    /// Core switches (3-tier only).
    pub cores: u32,
    /// 2 or 3.
    pub tiers: u32,
    /// Pods (3-tier: groups of leaves meshed to their own spines).
    pub pods: u32,
    /// Parallel links between one leaf and one spine.
    pub links_per_leaf_spine: u32,
    /// Node-to-leaf cables.
    pub node_leaf_cables: u64,
    /// Leaf-to-spine cables.
    pub leaf_spine_cables: u64,
    /// Spine-to-core cables.
    pub spine_core_cables: u64,
}

/// Parses `"2:1"` into `(2, 1)`.
#[must_use]
pub fn parse_ratio(text: &str) -> Option<(u32, u32)> {
    let (down, up) = text.split_once(':')?;
    let down = down.trim().parse().ok()?;
    let up = up.trim().parse().ok()?;
    (down > 0 && up > 0).then_some((down, up))
}

/// Sizes the fabric.
///
/// # Errors
/// [`SizingError`] when the radix cannot give the ratio or the fabric is too large.
pub fn size(input: SizingInput) -> Result<Sizing, SizingError> {
    let SizingInput { nodes, rails, radix, oversubscription: (down, up), uplinks_override } = input;
    // u64 throughout: ratios and radixes come from user input and must not overflow.
    let per_su_default =
        u32::try_from(u64::from(radix) * u64::from(down) / (u64::from(down) + u64::from(up))).unwrap_or(radix);
    let (nodes_per_su, uplinks) = match uplinks_override {
        Some(uplinks) => {
            let per_su = radix.saturating_sub(uplinks).min(per_su_default.max(1));
            if u64::from(uplinks) + u64::from(per_su) > u64::from(radix) || per_su == 0 {
                return Err(SizingError::UplinksExceedRadix { uplinks, down: per_su, radix });
            }
            (per_su, uplinks)
        }
        None => (per_su_default, radix - per_su_default),
    };
    if uplinks == 0 || nodes_per_su == 0 {
        return Err(SizingError::NoUplinks { radix, ratio: format!("{down}:{up}") });
    }
    let scalable_units = nodes.div_ceil(nodes_per_su).max(1);
    let leaves = scalable_units.saturating_mul(rails);
    let mut sizing = Sizing {
        nodes,
        rails,
        radix,
        nodes_per_su,
        uplinks_per_leaf: uplinks,
        scalable_units,
        leaves,
        spines: 0,
        cores: 0,
        tiers: 2,
        pods: 1,
        links_per_leaf_spine: 0,
        node_leaf_cables: u64::from(nodes) * u64::from(rails),
        leaf_spine_cables: u64::from(leaves) * u64::from(uplinks),
        spine_core_cables: 0,
    };
    if leaves <= radix {
        // Fewest spines that take every uplink and split each leaf's uplinks evenly.
        let needed = (u64::from(leaves) * u64::from(uplinks)).div_ceil(u64::from(radix));
        let needed = u32::try_from(needed).unwrap_or(u32::MAX).max(1);
        let spines = (needed..=uplinks).find(|s| uplinks % s == 0).unwrap_or(uplinks);
        sizing.spines = spines;
        sizing.links_per_leaf_spine = uplinks / spines;
        return Ok(sizing);
    }
    // Three tiers: pods of radix/2 leaves, each leaf meshed once to its pod's `uplinks` spines,
    // each spine with radix/2 ports down and radix/2 up to the cores.
    let half = radix / 2;
    let max_leaves = u32::try_from(u64::from(radix) * u64::from(half)).unwrap_or(u32::MAX);
    if half == 0 || leaves > max_leaves || uplinks > half {
        return Err(SizingError::TooLarge { leaves, radix, max: max_leaves });
    }
    let pods = leaves.div_ceil(half);
    let spines = pods * uplinks;
    sizing.tiers = 3;
    sizing.pods = pods;
    sizing.spines = spines;
    sizing.links_per_leaf_spine = 1;
    sizing.cores = (u64::from(spines) * u64::from(half)).div_ceil(u64::from(radix)).try_into().unwrap_or(u32::MAX);
    sizing.spine_core_cables = u64::from(spines) * u64::from(half);
    Ok(sizing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superpod(nodes: u32) -> Sizing {
        size(SizingInput { nodes, rails: 8, radix: 64, oversubscription: (1, 1), uplinks_override: None })
            .expect("sizes")
    }

    /// NVIDIA H100 SuperPOD RA, Table 4, and B200 RA architecture table.
    #[test]
    fn reproduces_published_superpod_counts() {
        // (nodes, leaves, spines, cores, node-leaf cables, leaf-spine cables, spine-core cables)
        let table = [
            (31, 8, 4, 0, 248, 256, 0),
            (63, 16, 8, 0, 504, 512, 0),
            (95, 24, 16, 0, 760, 768, 0),
            (127, 32, 16, 0, 1016, 1024, 0),
            (256, 64, 32, 0, 2048, 2048, 0),
            (512, 128, 128, 64, 4096, 4096, 4096),
            (1024, 256, 256, 128, 8192, 8192, 8192),
            (2048, 512, 512, 256, 16384, 16384, 16384),
        ];
        for (nodes, leaves, spines, cores, node_leaf, leaf_spine, spine_core) in table {
            let s = superpod(nodes);
            assert_eq!(
                (s.leaves, s.spines, s.cores, s.node_leaf_cables, s.leaf_spine_cables, s.spine_core_cables),
                (leaves, spines, cores, node_leaf, leaf_spine, spine_core),
                "{nodes} nodes"
            );
        }
    }

    #[test]
    fn one_su_has_eight_links_per_leaf_spine_pair() {
        let s = superpod(31);
        assert_eq!((s.scalable_units, s.nodes_per_su, s.links_per_leaf_spine, s.tiers), (1, 32, 8, 2));
    }

    #[test]
    fn oversubscription_moves_ports_from_up_to_down() {
        let s = size(SizingInput { nodes: 42, rails: 8, radix: 64, oversubscription: (2, 1), uplinks_override: None })
            .expect("sizes");
        assert_eq!((s.nodes_per_su, s.uplinks_per_leaf, s.scalable_units), (42, 22, 1));
        assert_eq!(22 % s.spines, 0, "uplinks split evenly over spines");
    }

    #[test]
    fn explicit_uplinks_size_a_lab() {
        let s =
            size(SizingInput { nodes: 4, rails: 2, radix: 32, oversubscription: (4, 1), uplinks_override: Some(1) })
                .expect("sizes");
        assert_eq!((s.leaves, s.spines, s.links_per_leaf_spine), (2, 1, 1));
    }

    #[test]
    fn too_large_for_three_tiers_is_an_error() {
        let error =
            size(SizingInput { nodes: 32_768, rails: 8, radix: 64, oversubscription: (1, 1), uplinks_override: None })
                .expect_err("too large");
        assert!(matches!(error, SizingError::TooLarge { .. }));
    }

    #[test]
    fn parses_ratios() {
        assert_eq!(parse_ratio("1:1"), Some((1, 1)));
        assert_eq!(parse_ratio(" 3 : 1 "), Some((3, 1)));
        assert_eq!(parse_ratio("0:1"), None);
        assert_eq!(parse_ratio("2"), None);
    }
}
