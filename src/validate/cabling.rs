//! The cabling check: LLDP neighbours seen by the switches against the cabling plan,
//! as a cable-level work order (swapped, moved, wrong, missing, extra), every cable
//! named by both of its ends.
//!
//! Stage: validate (pure). Input: the model's cabling plan as the switches should see
//! it ([`LldpPlan`]: expected neighbours and the rule that names what a switch
//! reports, shared with each switch's own cabling check) with the inventory's port
//! prefixes and rail MACs, and the neighbours `lldpctl -f json`
//! reported on each switch (the `lldpctl-json` parser's output). Output: a
//! [`CablingDiff`].
//!
//! A cable is seen from each switch it ends on: node cables from their leaf,
//! switch-to-switch cables from both switches; findings about the same cable seen
//! from both ends are reported once. A remote node port is recognised by its name
//! (lldpd sends the interface name as the port description) or by the MAC the
//! inventory lists under `rail_macs`. A leaf that bridges its node ports on one
//! interface ([`HOST_INTERFACE`], as the container lab does) reports every node on
//! it; those cables are matched by their node end only.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use super::subjects::Site;
use crate::model::Model;
use crate::topology::lldp::LldpPlan;
pub use crate::topology::lldp::{End, Neighbor, View};
use crate::topology::ports::HOST_INTERFACE;

/// The cable of `view` regardless of the end it is seen from.
fn cable(view: &View) -> (End, End) {
    if view.local <= view.remote {
        (view.local.clone(), view.remote.clone())
    } else {
        (view.remote.clone(), view.local.clone())
    }
}

/// One line of the work order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Two planned cables whose ends are exchanged.
    Swapped {
        /// One planned cable.
        first: View,
        /// The other.
        second: View,
    },
    /// A planned cable found in another port of the same or another switch.
    Moved {
        /// The planned cable.
        expected: View,
        /// Where its remote end was seen instead.
        found_at: End,
    },
    /// A port with something other than what the plan says.
    Wrong {
        /// The planned cable.
        expected: View,
        /// What the port sees instead.
        found: End,
    },
    /// A planned cable nobody sees.
    Missing {
        /// The planned cable.
        expected: View,
    },
    /// A cable the plan does not have.
    Extra {
        /// What was seen.
        observed: View,
    },
}

impl Finding {
    /// Switches (local ends) the finding concerns.
    #[must_use]
    pub fn switches(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        match self {
            Self::Swapped { first, second } => {
                out.insert(first.local.device.as_str());
                out.insert(second.local.device.as_str());
            }
            Self::Moved { expected, found_at } => {
                out.insert(expected.local.device.as_str());
                out.insert(found_at.device.as_str());
            }
            Self::Wrong { expected, .. } | Self::Missing { expected } => {
                out.insert(expected.local.device.as_str());
            }
            Self::Extra { observed } => {
                out.insert(observed.local.device.as_str());
            }
        }
        out
    }

    /// Every device the finding names (both ends of each cable involved): a switch's
    /// work order lists the findings that name it, including a switch-to-switch cable
    /// reported from the other end.
    #[must_use]
    pub fn devices(&self) -> BTreeSet<&str> {
        let ends: Vec<&End> = match self {
            Self::Swapped { first, second } => vec![&first.local, &first.remote, &second.local, &second.remote],
            Self::Moved { expected, found_at: other } | Self::Wrong { expected, found: other } => {
                vec![&expected.local, &expected.remote, other]
            }
            Self::Missing { expected } => vec![&expected.local, &expected.remote],
            Self::Extra { observed } => vec![&observed.local, &observed.remote],
        };
        ends.into_iter().map(|end| end.device.as_str()).collect()
    }

    /// The kind, as the work order says it.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Swapped { .. } => "swapped",
            Self::Moved { .. } => "moved",
            Self::Wrong { .. } => "wrong",
            Self::Missing { .. } => "missing",
            Self::Extra { .. } => "extra",
        }
    }

    fn cables(&self) -> Vec<(End, End)> {
        match self {
            Self::Swapped { first, second } => vec![cable(first), cable(second)],
            Self::Moved { expected, .. } | Self::Wrong { expected, .. } | Self::Missing { expected } => {
                vec![cable(expected)]
            }
            Self::Extra { observed } => vec![cable(observed)],
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Self::Swapped { .. } => 0,
            Self::Moved { .. } => 1,
            Self::Wrong { .. } => 2,
            Self::Missing { .. } => 3,
            Self::Extra { .. } => 4,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Swapped { first, second } => {
                let fix = if first.local.device == second.local.device {
                    format!("swap the plugs in {} and {}", first.local, second.local)
                } else if first.remote.device == second.remote.device {
                    format!("swap the plugs in {} and {}", first.remote, second.remote)
                } else {
                    format!("swap the cables in {} and {}", first.local, second.local)
                };
                write!(
                    formatter,
                    "swapped: {} has {} and {} has {}; the plan is {first} and {second}: {fix}",
                    first.local, second.remote, second.local, first.remote
                )
            }
            Self::Moved { expected, found_at } => {
                write!(formatter, "moved: the cable {expected} is in {found_at}: move it to {}", expected.local)
            }
            Self::Wrong { expected, found } => write!(
                formatter,
                "wrong: {} has {found}, the plan says {} (cable {expected})",
                expected.local, expected.remote
            ),
            Self::Missing { expected } => {
                write!(formatter, "missing: {expected} (no LLDP neighbour on {})", expected.local)
            }
            Self::Extra { observed } => write!(formatter, "extra: {observed} is not in the cabling plan"),
        }
    }
}

/// The plan against what was seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CablingDiff {
    /// Planned cables seen where they belong (from each switch that reported).
    pub verified: Vec<View>,
    /// The work order.
    pub findings: Vec<Finding>,
}

/// Reads the neighbours out of the `lldpctl-json` parser's output.
///
/// # Errors
/// When the value does not have the parser's shape.
pub fn neighbors(parsed: &serde_json::Value) -> Result<Vec<Neighbor>, String> {
    #[derive(Deserialize)]
    struct Parsed {
        neighbors: Vec<Neighbor>,
    }
    serde_json::from_value::<Parsed>(parsed.clone())
        .map(|parsed| parsed.neighbors)
        .map_err(|error| format!("the LLDP neighbours do not have the expected shape: {error}"))
}

/// The cabling plan, indexed for matching what switches report: the shared
/// [`LldpPlan`] (also what each switch's own cabling check reads), with the work
/// order on top.
#[derive(Debug, Clone, Default)]
pub struct CablingPlan {
    /// Expected neighbours and the naming rule.
    pub lldp: LldpPlan,
}

impl CablingPlan {
    /// The plan of `model`, with port names and MACs from the inventory.
    #[must_use]
    pub fn new(model: &Model, site: &Site) -> Self {
        Self { lldp: LldpPlan::new(model, &site.port_prefixes, &site.rail_macs) }
    }

    /// Every planned cable from each switch end.
    #[must_use]
    pub fn views(&self) -> &[View] {
        &self.lldp.views
    }

    /// The cables `switch` reports, named as the plan names devices and ports.
    #[must_use]
    pub fn observe(&self, switch: &str, neighbors: &[Neighbor]) -> Vec<View> {
        self.lldp.observe(switch, neighbors)
    }

    /// Compares what the switches in `seen` reported with the plan's cables that end
    /// on them.
    #[must_use]
    pub fn diff(&self, observed: &[View], seen: &BTreeSet<String>) -> CablingDiff {
        let expected: Vec<&View> = self.lldp.views.iter().filter(|view| seen.contains(&view.local.device)).collect();
        let by_remote: BTreeMap<&End, &View> = expected.iter().map(|view| (&view.remote, *view)).collect();
        // A bridged leaf reports its node cables on one interface: give each the port
        // the plan has for that node end on this leaf.
        let observed: Vec<View> = observed
            .iter()
            .map(|view| match by_remote.get(&view.remote) {
                Some(planned) if view.local.port == HOST_INTERFACE && planned.local.device == view.local.device => {
                    (*planned).clone()
                }
                _ => view.clone(),
            })
            .collect();
        let observed_set: BTreeSet<&View> = observed.iter().collect();
        let expected_set: BTreeSet<&View> = expected.iter().copied().collect();
        let mut diff = CablingDiff::default();
        let mut bad: Vec<&View> = Vec::new();
        for view in &expected {
            if observed_set.contains(view) {
                diff.verified.push((*view).clone());
            } else {
                bad.push(view);
            }
        }
        let mut unexplained: BTreeSet<&View> = observed.iter().filter(|view| !expected_set.contains(view)).collect();
        let mut handled: BTreeSet<&View> = BTreeSet::new();
        let mut findings = Vec::new();
        // Swaps: L1 sees R2 and L2 sees R1 for two planned cables L1-R1 and L2-R2.
        for (index, first) in bad.iter().enumerate() {
            if handled.contains(first) {
                continue;
            }
            let partner = bad[index + 1..].iter().find(|second| {
                !handled.contains(*second)
                    && unexplained.contains(&View::new(first.local.clone(), second.remote.clone()))
                    && unexplained.contains(&View::new(second.local.clone(), first.remote.clone()))
            });
            if let Some(second) = partner {
                unexplained.remove(&View::new(first.local.clone(), second.remote.clone()));
                unexplained.remove(&View::new(second.local.clone(), first.remote.clone()));
                handled.insert(*first);
                handled.insert(*second);
                findings.push(Finding::Swapped { first: (*first).clone(), second: (*second).clone() });
            }
        }
        // Moved: the planned remote end is seen on another port.
        for view in &bad {
            if handled.contains(view) {
                continue;
            }
            if let Some(seen_at) = unexplained.iter().find(|seen| seen.remote == view.remote).copied() {
                unexplained.remove(seen_at);
                handled.insert(*view);
                findings.push(Finding::Moved { expected: (*view).clone(), found_at: seen_at.local.clone() });
            }
        }
        // Wrong: the port sees something else.
        for view in &bad {
            if handled.contains(view) {
                continue;
            }
            handled.insert(*view);
            if let Some(seen_there) = unexplained.iter().find(|seen| seen.local == view.local).copied() {
                unexplained.remove(seen_there);
                findings.push(Finding::Wrong { expected: (*view).clone(), found: seen_there.remote.clone() });
            } else {
                findings.push(Finding::Missing { expected: (*view).clone() });
            }
        }
        findings.extend(unexplained.into_iter().map(|view| Finding::Extra { observed: view.clone() }));
        // A switch-to-switch cable is seen from both ends: keep the most specific
        // finding about each cable.
        findings.sort_by_key(Finding::rank);
        let mut covered: BTreeSet<(End, End)> = BTreeSet::new();
        for finding in findings {
            let cables = finding.cables();
            if cables.iter().all(|cable| covered.contains(cable)) {
                continue;
            }
            covered.extend(cables);
            diff.findings.push(finding);
        }
        diff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Model {
        let loaded = crate::blueprint::load(std::path::Path::new("blueprints/lab.yaml")).expect("loads");
        crate::model::expand(&loaded.blueprint).expect("expands")
    }

    fn neighbor(local: &str, system: &str, port: &str) -> Neighbor {
        Neighbor {
            local_interface: local.to_owned(),
            system_name: Some(system.to_owned()),
            chassis_id: Some("02:42:0a:0a:00:0b".to_owned()),
            port_id: None,
            port_description: Some(port.to_owned()),
        }
    }

    /// What every lab switch reports when cabled as planned (ports per the plan).
    fn as_planned(plan: &CablingPlan) -> BTreeMap<String, Vec<Neighbor>> {
        let mut by_switch: BTreeMap<String, Vec<Neighbor>> = BTreeMap::new();
        for view in plan.views() {
            by_switch.entry(view.local.device.clone()).or_default().push(neighbor(
                &view.local.port,
                &format!("{}.lab.internal", view.remote.device),
                &view.remote.port,
            ));
        }
        by_switch
    }

    fn run(plan: &CablingPlan, reports: &BTreeMap<String, Vec<Neighbor>>) -> CablingDiff {
        let observed: Vec<View> =
            reports.iter().flat_map(|(switch, neighbors)| plan.observe(switch, neighbors)).collect();
        plan.diff(&observed, &reports.keys().cloned().collect())
    }

    fn lines(diff: &CablingDiff) -> Vec<String> {
        diff.findings.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_lab_plan_has_node_and_switch_cables_from_each_end() {
        let plan = CablingPlan::new(&lab(), &Site::default());
        // 4 nodes x 2 rails seen from their leaves, 2 leaf-spine cables seen from both ends.
        assert_eq!(plan.views().len(), 8 + 4);
        assert!(plan.views().contains(&View::new(End::new("leaf0", "swp1"), End::new("node01", "rail0"))));
        assert!(plan.views().contains(&View::new(End::new("spine0", "swp2"), End::new("leaf1", "swp26"))));
        let diff = run(&plan, &as_planned(&plan));
        assert!(diff.findings.is_empty(), "{:?}", lines(&diff));
        assert_eq!(diff.verified.len(), 12);
    }

    #[test]
    fn two_nodes_with_swapped_rail_cables_name_both_cables() {
        let plan = CablingPlan::new(&lab(), &Site::default());
        let mut reports = as_planned(&plan);
        let leaf0 = reports.get_mut("leaf0").expect("leaf0");
        for neighbor in leaf0.iter_mut() {
            match neighbor.local_interface.as_str() {
                "swp1" => neighbor.system_name = Some("node02".to_owned()),
                "swp2" => neighbor.system_name = Some("node01".to_owned()),
                _ => {}
            }
        }
        let diff = run(&plan, &reports);
        assert_eq!(
            lines(&diff),
            ["swapped: leaf0 swp1 has node02 rail0 and leaf0 swp2 has node01 rail0; the plan is \
              leaf0 swp1 <-> node01 rail0 and leaf0 swp2 <-> node02 rail0: swap the plugs in leaf0 swp1 and leaf0 swp2"]
        );
        assert_eq!(diff.findings[0].switches().into_iter().collect::<Vec<_>>(), ["leaf0"]);
        assert_eq!(diff.verified.len(), 10);
    }

    #[test]
    fn one_node_with_its_two_rails_swapped_is_fixed_at_the_node() {
        let plan = CablingPlan::new(&lab(), &Site::default());
        let mut reports = as_planned(&plan);
        for (switch, wrong) in [("leaf0", "rail1"), ("leaf1", "rail0")] {
            for neighbor in reports.get_mut(switch).expect("leaf").iter_mut() {
                if neighbor.local_interface == "swp3" {
                    neighbor.port_description = Some(wrong.to_owned());
                }
            }
        }
        let diff = run(&plan, &reports);
        assert_eq!(diff.findings.len(), 1, "{:?}", lines(&diff));
        let line = &lines(&diff)[0];
        assert!(line.ends_with("swap the plugs in node03 rail0 and node03 rail1"), "{line}");
        assert_eq!(diff.findings[0].switches().into_iter().collect::<Vec<_>>(), ["leaf0", "leaf1"]);
    }

    #[test]
    fn missing_moved_wrong_and_extra_cables() {
        let plan = CablingPlan::new(&lab(), &Site::default());
        let mut reports = as_planned(&plan);
        let leaf0 = reports.get_mut("leaf0").expect("leaf0");
        leaf0.retain(|n| n.local_interface != "swp4"); // node04 rail0 unplugged
        for neighbor in leaf0.iter_mut() {
            if neighbor.local_interface == "swp2" {
                neighbor.local_interface = "swp9".to_owned(); // node02 rail0 in the wrong port
            }
            if neighbor.local_interface == "swp3" {
                neighbor.system_name = Some("storage7".to_owned()); // something else in node03's port
                neighbor.port_description = Some("eth4".to_owned());
            }
        }
        leaf0.push(neighbor("swp20", "mystery", "eth0"));
        leaf0.push(neighbor("eth2", "head", "eth0")); // management: not the fabric
        let diff = run(&plan, &reports);
        assert_eq!(
            lines(&diff),
            [
                "moved: the cable leaf0 swp2 <-> node02 rail0 is in leaf0 swp9: move it to leaf0 swp2",
                "wrong: leaf0 swp3 has storage7 eth4, the plan says node03 rail0 (cable leaf0 swp3 <-> node03 rail0)",
                "missing: leaf0 swp4 <-> node04 rail0 (no LLDP neighbour on leaf0 swp4)",
                "extra: leaf0 swp20 <-> mystery eth0 is not in the cabling plan",
            ]
        );
    }

    #[test]
    fn a_swapped_uplink_is_reported_once_though_both_switches_see_it() {
        let plan = CablingPlan::new(&lab(), &Site::default());
        let mut reports = as_planned(&plan);
        // The two leaf uplinks are exchanged at the spine.
        for neighbor in reports.get_mut("spine0").expect("spine0").iter_mut() {
            neighbor.system_name = Some(if neighbor.local_interface == "swp1" { "leaf1" } else { "leaf0" }.to_owned());
        }
        for (leaf, port) in [("leaf0", "swp2"), ("leaf1", "swp1")] {
            for neighbor in reports.get_mut(leaf).expect("leaf").iter_mut() {
                if neighbor.local_interface == "swp26" {
                    neighbor.port_description = Some(port.to_owned());
                }
            }
        }
        let diff = run(&plan, &reports);
        assert_eq!(diff.findings.len(), 1, "{:?}", lines(&diff));
        assert!(lines(&diff)[0].ends_with("swap the plugs in spine0 swp1 and spine0 swp2"), "{:?}", lines(&diff));
    }

    #[test]
    fn a_bridged_leaf_and_macs_from_the_inventory() {
        let model = lab();
        let mut site = Site::default();
        site.rail_macs.insert("node01".to_owned(), [(0, "02:42:0A:C8:00:02".to_owned())].into());
        let plan = CablingPlan::new(&model, &site);
        let mut reports = as_planned(&plan);
        for neighbor in reports.get_mut("leaf0").expect("leaf0").iter_mut() {
            if neighbor.local_interface.starts_with("swp") && neighbor.local_interface != "swp26" {
                neighbor.local_interface = HOST_INTERFACE.to_owned();
            }
            if neighbor.system_name.as_deref() == Some("node01.lab.internal")
                && neighbor.port_description.as_deref() == Some("rail0")
            {
                // Only the port MAC names the port (lldpd's default port id), in any case.
                neighbor.port_description = None;
                neighbor.port_id = Some("02:42:0A:c8:00:02".to_owned());
            }
        }
        let diff = run(&plan, &reports);
        assert!(diff.findings.is_empty(), "{:?}", lines(&diff));
        // A node whose rail 1 is plugged into leaf0's bridge is on the wrong rail.
        reports.get_mut("leaf0").expect("leaf0").push(neighbor(HOST_INTERFACE, "node02", "rail1"));
        reports.get_mut("leaf1").expect("leaf1").retain(|n| n.system_name.as_deref() != Some("node02.lab.internal"));
        let diff = run(&plan, &reports);
        assert_eq!(
            lines(&diff),
            ["moved: the cable leaf1 swp2 <-> node02 rail1 is in leaf0 hosts: move it to leaf1 swp2"]
        );
    }

    #[test]
    fn a_switch_that_did_not_report_is_not_checked() {
        let plan = CablingPlan::new(&lab(), &Site::default());
        let mut reports = as_planned(&plan);
        reports.remove("leaf1");
        let diff = run(&plan, &reports);
        assert!(diff.findings.is_empty(), "{:?}", lines(&diff));
        assert_eq!(diff.verified.len(), 4 + 3, "leaf0's 4 nodes and uplink, spine0's 2 ports");
    }

    #[test]
    fn neighbours_are_read_from_the_parser_output() {
        let parsed = serde_json::json!({ "neighbors": [{
            "local_interface": "swp1", "via": "LLDP", "system_name": "node01", "system_description": null,
            "chassis_id_type": "mac", "chassis_id": "aa", "port_id_type": "mac", "port_id": "bb",
            "port_description": "rail0", "management_addresses": [], "ttl": 120
        }]});
        let read = neighbors(&parsed).expect("reads");
        assert_eq!(read[0].port_description.as_deref(), Some("rail0"));
        assert!(neighbors(&serde_json::json!({ "nope": 1 })).is_err());
    }
}
