//! Spare nodes: which nodes of each compute group stand by out of the tenants'
//! partitions, and, once nodes went to RMA, which spare took whose place.
//!
//! Stage: expand (pure). Input: the [`Model`]'s nodes and the blueprint's
//! `node_groups[].spares`, plus the nodes sent to RMA ([`RmaRecord`], in the order they
//! went). Output: a [`Roster`], which the Slurm partitions and topology are rendered
//! from, and which `plan`, `status` and the repair service read.
//!
//! The roster is a function of the blueprint and the RMA records alone, not of a
//! stored assignment: replaying the records in order gives every swap again, so a
//! restarted controller or a laptop with an old state file computes the same partitions
//! as the repair service did. A repaired node returns as a spare (its stand-in keeps
//! serving: moving tenants' jobs back would be a second disruption for nothing).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Model, Node};
use crate::blueprint::schema::Role;

/// Name of the low-priority partition the spares on standby are in.
pub const SPARE_PARTITION: &str = "spare";

/// The start of the drain reason of a node whose repair ladder failed
/// (`toolkit:rma <check>: <detail>`): it waits for the vendor, and a spare serves.
pub const RMA_REASON_PREFIX: &str = "toolkit:rma";

/// The nodes in RMA among Slurm's drained nodes and their reasons, by name (Slurm does not
/// say in which order they went; the repair service's state does).
pub fn records_from_reasons<'a>(reasons: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<RmaRecord> {
    let mut nodes: Vec<&str> = reasons
        .into_iter()
        .filter(|(_, reason)| {
            reason.strip_prefix(RMA_REASON_PREFIX).is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
        .map(|(node, _)| node)
        .collect();
    nodes.sort_unstable();
    nodes.into_iter().map(|node| RmaRecord { node: node.to_owned(), returned: false }).collect()
}

/// One node sent to RMA (its ladder failed: drained with `toolkit:rma <check>: …`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RmaRecord {
    /// Node name.
    pub node: String,
    /// It came back repaired: it stands by as a spare now.
    #[serde(default)]
    pub returned: bool,
}

/// How close a spare is to the node whose place it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Locality {
    /// The same NVLink domain (rack): the only place where a job's NVLink peers are.
    NvlinkDomain,
    /// Cabled to the same rail leaves: no job sees a difference.
    Leaf,
    /// The same scalable unit: every rail leaf of the unit is one hop away.
    ScalableUnit,
    /// Elsewhere on the fabric (no spare of the unit was left): jobs spanning the
    /// failed node's unit now cross the spine.
    Fabric,
}

impl Locality {
    /// The words `plan` and `status` print.
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self {
            Self::NvlinkDomain => "same NVLink domain",
            Self::Leaf => "same leaf",
            Self::ScalableUnit => "same scalable unit",
            Self::Fabric => "another scalable unit",
        }
    }
}

/// A spare serving in place of a node in RMA (or of one that came back as a spare).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Swap {
    /// The node that went to RMA.
    pub failed: String,
    /// The spare that took its place in the partitions and the topology.
    pub spare: String,
    /// How close the spare is.
    pub locality: Locality,
    /// The failed node is back (and a spare now).
    pub returned: bool,
}

/// Who serves the tenants and who stands by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Roster {
    /// Spares standing by, in node order (indexes into [`Model::nodes`]).
    pub standby: Vec<usize>,
    /// Swaps in effect, in the order the nodes went to RMA.
    pub swaps: Vec<Swap>,
    /// Nodes in RMA that no spare could replace (they stay in their partitions, drained).
    pub unreplaced: Vec<String>,
    /// Nodes out of the tenants' partitions: spares standing by and nodes a spare replaced
    /// (indexes into [`Model::nodes`]).
    out_of_service: BTreeSet<usize>,
}

impl Roster {
    /// Whether the blueprint has spares or a swap happened: without, partitions are
    /// whole groups.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.out_of_service.is_empty() && self.swaps.is_empty()
    }

    /// Whether node `index` is in the tenants' partitions.
    #[must_use]
    pub fn serves(&self, index: usize) -> bool {
        !self.out_of_service.contains(&index)
    }

    /// Whether node `index` stands by as a spare.
    #[must_use]
    pub fn stands_by(&self, index: usize) -> bool {
        self.standby.contains(&index)
    }
}

/// The roster of `model` after `records`, in the order the nodes went to RMA. A record
/// naming no compute node is ignored (the repair service only sends compute nodes).
#[must_use]
pub fn roster(model: &Model, records: &[RmaRecord]) -> Roster {
    let mut standby: BTreeSet<usize> = initial_spares(model);
    let mut out_of_service: BTreeSet<usize> = standby.clone();
    let mut swaps = Vec::new();
    let mut unreplaced = Vec::new();
    let compute: BTreeSet<usize> = model.groups_with(Role::Compute).flat_map(|group| group.nodes.clone()).collect();
    for record in records {
        let Some(failed) = model.nodes.iter().position(|node| node.name == record.node) else { continue };
        if !compute.contains(&failed) {
            continue;
        }
        // A spare (on standby, or one that came back) failing only leaves the standby.
        if standby.remove(&failed) {
            if record.returned {
                standby.insert(failed);
            }
            continue;
        }
        if out_of_service.contains(&failed) {
            continue;
        }
        match select(model, failed, &standby) {
            Some((spare, locality)) => {
                standby.remove(&spare);
                out_of_service.remove(&spare);
                out_of_service.insert(failed);
                if record.returned {
                    standby.insert(failed);
                }
                swaps.push(Swap {
                    failed: record.node.clone(),
                    spare: model.nodes[spare].name.clone(),
                    locality,
                    returned: record.returned,
                });
            }
            None if !record.returned => unreplaced.push(record.node.clone()),
            None => {}
        }
    }
    Roster { standby: standby.into_iter().collect(), swaps, unreplaced, out_of_service }
}

/// The spare for node `failed` among `standby`: one of its group (the same hardware),
/// in its NVLink domain when it has one (only there are its NVLink peers), else on its
/// leaves, else in its scalable unit, else anywhere on the fabric. Ties go to the
/// lowest node index, so the choice is the same on every run.
#[must_use]
pub fn select(model: &Model, failed: usize, standby: &BTreeSet<usize>) -> Option<(usize, Locality)> {
    let node = &model.nodes[failed];
    let domain = nvlink_domain(model, failed);
    standby
        .iter()
        .copied()
        .filter(|&candidate| model.nodes[candidate].group == node.group && candidate != failed)
        .filter_map(|candidate| {
            let other = &model.nodes[candidate];
            let locality = match domain {
                Some(domain) if nvlink_domain(model, candidate) == Some(domain) => Locality::NvlinkDomain,
                // Outside its rack a node has none of the failed node's NVLink peers.
                Some(_) => return None,
                None if same_leaves(node, other) => Locality::Leaf,
                None if node.su == other.su => Locality::ScalableUnit,
                None => Locality::Fabric,
            };
            Some((candidate, locality))
        })
        .min_by_key(|&(candidate, locality)| (locality, candidate))
}

/// Each compute group's `spares` nodes: spread over its NVLink domains, else its scalable
/// units (the last node of each, from the last unit back, round after round), so every
/// rack or unit keeps a spare of its own as long as there are enough.
fn initial_spares(model: &Model) -> BTreeSet<usize> {
    let mut spares = BTreeSet::new();
    for group in model.groups_with(Role::Compute) {
        let Some(wanted) = model.blueprint.node_groups.iter().find(|g| g.name == group.name).map(|g| g.spares) else {
            continue;
        };
        let wanted = usize::try_from(wanted).unwrap_or(usize::MAX).min(group.nodes.len().saturating_sub(1));
        if wanted == 0 {
            continue;
        }
        // Units in node order, each with its nodes; a node's unit is its domain or its SU.
        let mut units: Vec<(UnitKey, Vec<usize>)> = Vec::new();
        for index in group.nodes.clone() {
            let key = nvlink_domain(model, index).map_or(UnitKey::Su(model.nodes[index].su), UnitKey::Domain);
            match units.iter_mut().find(|(unit, _)| *unit == key) {
                Some((_, members)) => members.push(index),
                None => units.push((key, vec![index])),
            }
        }
        let mut chosen = 0;
        'rounds: while chosen < wanted {
            let before = chosen;
            for (_, members) in units.iter_mut().rev() {
                if chosen == wanted {
                    break 'rounds;
                }
                // Keep one node of every unit in service.
                if members.len() > 1
                    && let Some(last) = members.pop()
                {
                    spares.insert(last);
                    chosen += 1;
                }
            }
            if chosen == before {
                break;
            }
        }
    }
    spares
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnitKey {
    Domain(usize),
    Su(u32),
}

fn nvlink_domain(model: &Model, index: usize) -> Option<usize> {
    model.nvlink_domains.iter().position(|domain| domain.nodes.contains(&index))
}

fn same_leaves(first: &Node, second: &Node) -> bool {
    !first.rails.is_empty()
        && first.rails.len() == second.rails.len()
        && first.rails.iter().zip(&second.rails).all(|(a, b)| a.leaf == b.leaf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(path: &str, edits: &[(&str, &str)]) -> Model {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut text = std::fs::read_to_string(root.join(path)).expect("reads");
        for (from, to) in edits {
            assert!(text.contains(from), "{path} no longer has `{from}`");
            text = text.replacen(from, to, 1);
        }
        let loaded = crate::blueprint::load::load_text(std::path::Path::new(path), text).expect("loads");
        crate::model::expand(&loaded.blueprint).expect("expands")
    }

    fn names(model: &Model, indexes: &[usize]) -> Vec<String> {
        indexes.iter().map(|&index| model.nodes[index].name.clone()).collect()
    }

    fn rma(node: &str) -> RmaRecord {
        RmaRecord { node: node.to_owned(), returned: false }
    }

    /// The lab's 4 nodes with one spare: one scalable unit, so the last node stands by.
    const LAB_SPARE: &[(&str, &str)] =
        &[("    hostname: \"node{index:02}\"\n", "    hostname: \"node{index:02}\"\n    spares: 1\n")];

    #[test]
    fn only_toolkits_rma_reasons_count() {
        let reasons = [
            ("node03", "toolkit:rma gpu-health: GPU 2 fell off the bus"),
            ("node01", "toolkit:health rail-links: rail1 down"),
            ("node02", "bad DIMM, ticket 4411"),
            ("node04", "toolkit:rmaX"),
        ];
        assert_eq!(records_from_reasons(reasons), [rma("node03")]);
    }

    #[test]
    fn without_spares_the_roster_is_empty_and_a_rma_replaces_nobody() {
        let lab = model("blueprints/lab.yaml", &[]);
        assert!(lab.roster.is_empty());
        let after = roster(&lab, &[rma("node02")]);
        assert_eq!(after.unreplaced, ["node02"]);
        assert!(after.swaps.is_empty() && after.serves(2), "an unreplaced node keeps its place");
    }

    #[test]
    fn a_spare_takes_the_place_of_a_node_in_rma_and_the_repaired_node_stands_by() {
        let lab = model("blueprints/lab.yaml", LAB_SPARE);
        assert_eq!(names(&lab, &lab.roster.standby), ["node04"]);
        let node02 = lab.nodes.iter().position(|node| node.name == "node02").expect("node02");
        let node04 = node02 + 2;

        let in_rma = roster(&lab, &[rma("node02")]);
        assert_eq!(
            in_rma.swaps,
            [Swap { failed: "node02".into(), spare: "node04".into(), locality: Locality::Leaf, returned: false }]
        );
        assert!(in_rma.standby.is_empty() && in_rma.serves(node04) && !in_rma.serves(node02));

        let back = roster(&lab, &[RmaRecord { node: "node02".into(), returned: true }]);
        assert_eq!(names(&lab, &back.standby), ["node02"], "the repaired node is the spare now");
        assert!(back.serves(node04) && !back.serves(node02), "its stand-in keeps serving");

        // A second failure finds the repaired node as its spare; a third finds none.
        let returned = RmaRecord { node: "node02".into(), returned: true };
        let second = roster(&lab, &[returned.clone(), rma("node01")]);
        assert_eq!((second.swaps[1].failed.as_str(), second.swaps[1].spare.as_str()), ("node01", "node02"));
        let third = roster(&lab, &[returned, rma("node01"), rma("node03")]);
        assert_eq!(third.unreplaced, ["node03"]);
        assert!(third.serves(node02 + 1), "node03, unreplaced, stays in its partitions");
    }

    #[test]
    fn a_spare_in_rma_leaves_the_standby_and_the_controller_is_never_a_spare() {
        let lab = model("blueprints/lab.yaml", LAB_SPARE);
        let after = roster(&lab, &[rma("node04"), rma("head"), rma("node01")]);
        assert!(after.standby.is_empty() && after.swaps.is_empty());
        assert_eq!(after.unreplaced, ["node01"], "node04 was the only spare");
    }

    #[test]
    fn spares_spread_over_scalable_units_and_replace_within_their_unit_first() {
        // 64 nodes in two scalable units of 32 (radix 64 at 1:1); two spares: the last node of each unit.
        let roce = model(
            "blueprints/h200-roce-64.yaml",
            &[("    count: 64\n", "    count: 64\n    spares: 2\n"), ("radix: 128", "radix: 64")],
        );
        let units: BTreeSet<u32> = roce.nodes.iter().filter(|n| !n.rails.is_empty()).map(|n| n.su).collect();
        assert_eq!(units.len(), 2, "this test needs two scalable units");
        let standby = names(&roce, &roce.roster.standby);
        let sus: Vec<u32> = roce.roster.standby.iter().map(|&index| roce.nodes[index].su).collect();
        assert_eq!(sus, [0, 1], "{standby:?}");
        // A node of unit 0 gets unit 0's spare, one of unit 1 gets unit 1's.
        let first_of =
            |su: u32| roce.nodes.iter().find(|n| n.su == su && !n.rails.is_empty()).expect("node").name.clone();
        let after = roster(&roce, &[rma(&first_of(1)), rma(&first_of(0))]);
        assert_eq!(after.swaps[0].spare, standby[1]);
        assert_eq!(after.swaps[1].spare, standby[0]);
        assert!(after.swaps.iter().all(|swap| swap.locality == Locality::Leaf), "{:?}", after.swaps);
        // With unit 0's spare gone, a second failure in unit 0 takes unit 1's: across the spine.
        let second_of_0 =
            roce.nodes.iter().filter(|n| n.su == 0 && !n.rails.is_empty()).nth(1).expect("node").name.clone();
        let crossed = roster(&roce, &[rma(&first_of(0)), rma(&second_of_0)]);
        assert_eq!(crossed.swaps[1].spare, standby[1]);
        assert_eq!(crossed.swaps[1].locality, Locality::Fabric);
    }

    #[test]
    fn in_an_nvlink_domain_only_a_spare_of_the_same_rack_will_do() {
        let nvl = model("blueprints/gb200-nvl72.yaml", &[]);
        let group = nvl.groups_with(Role::Compute).next().expect("compute group").name.clone();
        let text_edit = format!("  - name: {group}\n");
        let with_spares = model("blueprints/gb200-nvl72.yaml", &[(&text_edit, &format!("{text_edit}    spares: 2\n"))]);
        let domains: Vec<Option<usize>> =
            with_spares.roster.standby.iter().map(|&index| nvlink_domain(&with_spares, index)).collect();
        assert_eq!(domains.len(), 2);
        assert_ne!(domains[0], domains[1], "one spare per rack: {domains:?}");
        let rack_of_first = domains[0].expect("in a domain");
        let rack = &with_spares.nvlink_domains[rack_of_first];
        let failed = with_spares.nodes[rack.nodes[0]].name.clone();
        let after = roster(&with_spares, &[rma(&failed)]);
        assert_eq!(after.swaps[0].spare, with_spares.nodes[with_spares.roster.standby[0]].name);
        assert_eq!(after.swaps[0].locality, Locality::NvlinkDomain);
        // The rack's spare is used up: its next failure stays unreplaced rather than
        // borrowing the other rack's spare.
        let next = with_spares.nodes[rack.nodes[1]].name.clone();
        let again = roster(&with_spares, &[rma(&failed), rma(&next)]);
        assert_eq!(again.unreplaced, [next]);
    }
}
