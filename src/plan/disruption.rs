//! Disruption classes and the rollout a plan implies.
//!
//! Stage: plan. Input: the [`ResourceGraph`], a [`Plan`] from the diff, the hosts the
//! scheduler can drain and the `--max-unavailable` budget. Output: the same plan with
//! a class on every change and a [`RolloutPlan`]: each host's worst class, and the
//! waves in which the hosts that must be empty are drained, changed and resumed.
//!
//! A change's class is what its renderer declared on the resource (a rail's netplan:
//! drain; a driver install: reboot), raised to `restart` for a daemon restarted in
//! place. A host's class is the worst of its changes. Pure and sync: the same plan
//! always gives the same waves, and `deploy` runs exactly those.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::agreement::Agreement;
use super::{Action, Change, Plan};
use crate::graph::ResourceGraph;
use crate::resource::{Desired, Disruption};

/// How many schedulable nodes may be out of service at once: a count, or a
/// percentage of the schedulable nodes rounded up (as Kubernetes' DaemonSet and the
/// GPU Operator round theirs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum MaxUnavailable {
    /// At most this many nodes.
    Count(usize),
    /// At most this percentage (1–100) of the schedulable nodes, at least one node.
    Percent(u8),
}

impl Default for MaxUnavailable {
    /// One node at a time: nothing is lost that a second wave could not recover.
    fn default() -> Self {
        Self::Count(1)
    }
}

/// Why a `--max-unavailable` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a valid max-unavailable: {reason}")]
pub struct MaxUnavailableError {
    value: String,
    reason: &'static str,
}

impl FromStr for MaxUnavailable {
    type Err = MaxUnavailableError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |reason| MaxUnavailableError { value: text.to_owned(), reason };
        let trimmed = text.trim();
        if let Some(number) = trimmed.strip_suffix('%') {
            let percent: u32 =
                number.trim().parse().map_err(|_| error("write a whole number of nodes (2) or a percentage (10%)"))?;
            return match percent {
                0 => Err(error("0% would never let a node drain; use at least 1%")),
                101.. => Err(error("more than 100% of the nodes cannot be unavailable")),
                _ => Ok(Self::Percent(percent as u8)),
            };
        }
        match trimmed.parse::<usize>() {
            Ok(0) => Err(error("0 would never let a node drain; use at least 1")),
            Ok(count) => Ok(Self::Count(count)),
            Err(_) => Err(error("write a whole number of nodes (2) or a percentage (10%)")),
        }
    }
}

impl TryFrom<String> for MaxUnavailable {
    type Error = MaxUnavailableError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<MaxUnavailable> for String {
    fn from(value: MaxUnavailable) -> Self {
        value.to_string()
    }
}

impl fmt::Display for MaxUnavailable {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(count) => write!(formatter, "{count}"),
            Self::Percent(percent) => write!(formatter, "{percent}%"),
        }
    }
}

impl MaxUnavailable {
    /// The number of nodes out of `total` schedulable ones; at least 1.
    #[must_use]
    pub fn nodes(self, total: usize) -> usize {
        match self {
            Self::Count(count) => count,
            Self::Percent(percent) => (total * usize::from(percent)).div_ceil(100),
        }
        .max(1)
    }
}

/// One host's class and the changes that give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDisruption {
    /// The worst class of the host's changes.
    pub class: Disruption,
    /// Ids of the changes of that class (the first few).
    pub because: Vec<String>,
    /// Whether the scheduler runs jobs on it, so it can be drained.
    pub schedulable: bool,
}

/// What a plan does to running work, host by host, and the waves it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutPlan {
    /// The budget as given.
    pub max_unavailable: MaxUnavailable,
    /// The budget in nodes, out of [`Self::schedulable_nodes`].
    pub budget: usize,
    /// Nodes the scheduler runs jobs on.
    pub schedulable_nodes: usize,
    /// Every host with a class above `none`.
    pub hosts: BTreeMap<String, HostDisruption>,
    /// Schedulable hosts that must be empty, in the waves they are drained in.
    pub waves: Vec<Vec<String>>,
    /// Node definitions slurmctld and the nodes must agree on that change, and the
    /// order each side takes (absent when none changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<Agreement>,
}

impl RolloutPlan {
    /// Hosts drained in the waves.
    pub fn drained_hosts(&self) -> impl Iterator<Item = &str> {
        self.waves.iter().flatten().map(String::as_str)
    }

    /// The class of `host` (`none` when it has no change that disrupts).
    #[must_use]
    pub fn class(&self, host: &str) -> Disruption {
        self.hosts.get(host).map_or(Disruption::None, |host| host.class)
    }

    /// One line for people: `4 nodes need drain: 4 waves of 1 (max-unavailable 1)`.
    #[must_use]
    pub fn summary(&self) -> Option<String> {
        let drained: Vec<&str> = self.drained_hosts().collect();
        if drained.is_empty() {
            return None;
        }
        let reboot = drained.iter().filter(|host| self.class(host) == Disruption::Reboot).count();
        let what = match reboot {
            0 => "drain".to_owned(),
            all if all == drained.len() => "drain and reboot".to_owned(),
            some => format!("drain ({some} of them a reboot)"),
        };
        let largest = self.waves.iter().map(Vec::len).max().unwrap_or(0);
        let size = if self.waves.iter().all(|wave| wave.len() == largest) {
            format!("{largest}")
        } else {
            format!("up to {largest}")
        };
        Some(format!(
            "{} node{} need{} {what}: {} wave{} of {size} (max-unavailable {})",
            drained.len(),
            plural(drained.len()),
            if drained.len() == 1 { "s" } else { "" },
            self.waves.len(),
            plural(self.waves.len()),
            self.max_unavailable
        ))
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// Ids named per host in [`HostDisruption::because`].
const BECAUSE_LIMIT: usize = 3;

/// Classes every change of `plan` and adds the rollout: hosts in `schedulable` (the
/// scheduler's compute nodes) whose class is drain or reboot go in waves of at most
/// `max_unavailable` nodes, in name order.
pub fn classify(
    graph: &ResourceGraph,
    plan: &mut Plan,
    schedulable: &BTreeSet<String>,
    max_unavailable: MaxUnavailable,
) {
    // A plan lists the graph's resources in its order, then its removals: the change
    // at a position is the resource at that position of the order (same id), and only
    // a plan made otherwise looks its resources up by id.
    let by_id: std::cell::OnceCell<HashMap<&str, usize, foldhash::fast::RandomState>> = std::cell::OnceCell::new();
    let agreement = agreement(plan);
    // A node whose new line slurmctld may learn only while it is empty: its own
    // slurm.conf, whose restart of slurmd reports the new definition, drains it.
    let waved: std::collections::HashSet<String, foldhash::fast::RandomState> = agreement
        .iter()
        .flat_map(Agreement::waved)
        .map(|node| format!("{node}:file:{}", crate::render::slurm::SLURM_CONF))
        .collect();
    // foldhash while the changes are read (one lookup per disruptive change, ~80,000
    // at 4,096 nodes); name order only for the rollout.
    let mut hosts: HashMap<&str, HostDisruption, foldhash::fast::RandomState> = HashMap::default();
    for (position, change) in plan.changes.iter_mut().enumerate() {
        let resource = graph
            .order
            .get(position)
            .map(|&index| &graph.resources[index as usize])
            .filter(|resource| resource.id.0 == change.id)
            .or_else(|| {
                let by_id = by_id.get_or_init(|| {
                    graph.resources.iter().enumerate().map(|(index, resource)| (resource.id.as_str(), index)).collect()
                });
                by_id.get(change.id.as_str()).map(|&index| &graph.resources[index])
            });
        change.disruption = change_class(change, resource.map(|resource| (&*resource.desired, resource.disruption)));
        if change.action == Action::Update && waved.contains(change.id.as_str()) {
            change.disruption = change.disruption.max(Disruption::Drain);
        }
        if change.disruption == Disruption::None {
            continue;
        }
        let host = hosts.entry(change.target()).or_insert_with(|| HostDisruption {
            class: Disruption::None,
            because: Vec::new(),
            schedulable: schedulable.contains(change.target()),
        });
        if change.disruption > host.class {
            host.class = change.disruption;
            host.because.clear();
        }
        if change.disruption == host.class && host.because.len() < BECAUSE_LIMIT {
            host.because.push(change.id.to_string());
        }
    }
    let hosts: BTreeMap<String, HostDisruption> =
        hosts.into_iter().map(|(name, host)| (name.to_owned(), host)).collect();
    let budget = max_unavailable.nodes(schedulable.len());
    let drained: Vec<String> = hosts
        .iter()
        .filter(|(_, host)| host.schedulable && host.class.needs_drain())
        .map(|(name, _)| name.clone())
        .collect();
    plan.rollout = Some(RolloutPlan {
        max_unavailable,
        budget,
        schedulable_nodes: schedulable.len(),
        hosts,
        waves: waves(drained, budget),
        agreement,
    });
}

/// What the controller's slurm.conf change does to the node definitions: read from its
/// diff (the old text is known from the state or the host). The controller is the host
/// of the `slurmctld` service.
fn agreement(plan: &Plan) -> Option<Agreement> {
    let controller = plan
        .changes
        .iter()
        .find(|change| change.kind() == "service" && change.name.as_str() == "slurmctld")?
        .target()
        .to_owned();
    let id = format!("{controller}:file:{}", crate::render::slurm::SLURM_CONF);
    let change = plan.changes.iter().find(|change| change.id.as_str() == id && change.action == Action::Update)?;
    Agreement::from_diff(&controller, &id, change.diff()?.as_str())
}

/// `hosts` in consecutive waves of at most `size`.
#[must_use]
pub fn waves(hosts: Vec<String>, size: usize) -> Vec<Vec<String>> {
    let size = size.max(1);
    let mut waves = Vec::with_capacity(hosts.len().div_ceil(size));
    let mut hosts = hosts.into_iter().peekable();
    while hosts.peek().is_some() {
        waves.push(hosts.by_ref().take(size).collect());
    }
    waves
}

/// The class of one change: what the renderer declared, and `restart` for a daemon
/// restarted in place (a reload is `none`).
fn change_class(change: &Change, resource: Option<(&Desired, Disruption)>) -> Disruption {
    if change.action == Action::NoOp {
        return Disruption::None;
    }
    let Some((desired, declared)) = resource else {
        // A removal: what it was is gone from the blueprint; removing a file or a
        // unit does not touch running jobs by itself.
        return Disruption::None;
    };
    let restart = match desired {
        Desired::Service { .. } if change.action == Action::Update && !change.reason.starts_with("reload") => {
            Disruption::Restart
        }
        _ => Disruption::None,
    };
    declared.max(restart)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::graph;
    use crate::plan::diff::{PlanInputs, diff};
    use crate::plan::state::State;
    use crate::resource::{Content, OnChange, Resource, ResourceId, Target};

    fn target(name: &str) -> Target {
        Target::node(name)
    }

    /// A root-owned 0644 file on node `host` whose change has `disruption`.
    pub(crate) fn file(host: &str, path: &str, text: &str, disruption: Disruption) -> Resource {
        Resource::new(
            target(host),
            path,
            Desired::File {
                path: path.to_owned(),
                content: Content::new(text.to_owned()),
                mode: 0o644,
                owner: "root".to_owned(),
                group: "root".to_owned(),
                secret: false,
                check: None,
            },
        )
        .disrupts(disruption)
    }

    fn service(host: &str, name: &str, watches: &str, on_change: OnChange) -> Resource {
        let file = ResourceId::new(host, "file", watches);
        Resource::new(
            target(host),
            name,
            Desired::Service {
                name: name.to_owned(),
                enabled: true,
                running: true,
                watches: crate::resource::watched([&file]),
                on_change,
            },
        )
        .after([file])
    }

    /// The cluster as deployed (`old`), then planned with `new` text in the files.
    fn planned(hosts: &[&str], new: &str, schedulable: &[&str], budget: &str) -> Plan {
        let resources = |text: &str| -> Vec<Resource> {
            let mut out = Vec::new();
            for host in hosts {
                out.push(file(host, "/etc/netplan/60-toolkit-rails.yaml", text, Disruption::Drain));
                out.push(file(host, "/etc/slurm/slurm.conf", text, Disruption::None));
                out.push(service(host, "slurmd", "/etc/slurm/slurm.conf", OnChange::Restart));
                out.push(file(host, "/etc/lldpd.d/toolkit.conf", "same", Disruption::None));
                out.push(service(host, "lldpd", "/etc/lldpd.d/toolkit.conf", OnChange::Reload));
            }
            out
        };
        let mut state = State::empty("lab");
        for resource in resources("old") {
            state.record(&resource);
        }
        let graph = graph::build(resources(new)).expect("graph");
        let mut plan = diff(&graph, &state, PlanInputs::default());
        let schedulable = schedulable.iter().map(|host| (*host).to_owned()).collect();
        classify(&graph, &mut plan, &schedulable, budget.parse().expect("budget"));
        plan
    }

    #[test]
    fn every_kind_of_change_gets_its_class() {
        let plan = planned(&["head", "node01"], "new", &["node01"], "1");
        let class = |id: &str| plan.changes.iter().find(|change| change.id == id).map(|change| change.disruption);
        assert_eq!(class("node01:file:/etc/netplan/60-toolkit-rails.yaml"), Some(Disruption::Drain));
        assert_eq!(class("node01:file:/etc/slurm/slurm.conf"), Some(Disruption::None));
        assert_eq!(class("node01:service:slurmd"), Some(Disruption::Restart));
        // Unchanged, and a reload would have been `none` anyway.
        assert_eq!(class("node01:service:lldpd"), Some(Disruption::None));
        let rollout = plan.rollout.as_ref().expect("rollout");
        assert_eq!(rollout.class("node01"), Disruption::Drain);
        assert_eq!(rollout.hosts["node01"].because, ["node01:file:/etc/netplan/60-toolkit-rails.yaml"]);
        // The head is no Slurm node: it cannot be drained, only changed.
        assert!(!rollout.hosts["head"].schedulable);
        assert_eq!(rollout.waves, [["node01"]]);
    }

    #[test]
    fn a_reload_is_none_and_a_restart_is_restart() {
        let reload = Change::new(
            "n:service:lldpd".into(),
            "lldpd".into(),
            Action::Update,
            "reload: `/etc/lldpd.d/toolkit.conf` changed".into(),
        );
        let unit = Desired::Service {
            name: "lldpd".into(),
            enabled: true,
            running: true,
            watches: Vec::new(),
            on_change: OnChange::Reload,
        };
        assert_eq!(change_class(&reload, Some((&unit, Disruption::None))), Disruption::None);
        let restart = Change { reason: "restart: `/etc/slurm/slurm.conf` changed".into(), ..reload.clone() };
        assert_eq!(change_class(&restart, Some((&unit, Disruption::None))), Disruption::Restart);
        // Declared classes win over a lesser one.
        assert_eq!(change_class(&restart, Some((&unit, Disruption::Drain))), Disruption::Drain);
        let removed = Change { action: Action::Remove, ..reload };
        assert_eq!(change_class(&removed, None), Disruption::None);
    }

    #[test]
    fn waves_respect_the_budget_and_say_so() {
        let nodes = ["node01", "node02", "node03", "node04"];
        let one = planned(&nodes, "new", &nodes, "1");
        let rollout = one.rollout.as_ref().expect("rollout");
        assert_eq!(rollout.waves, [["node01"], ["node02"], ["node03"], ["node04"]]);
        assert_eq!(rollout.summary().as_deref(), Some("4 nodes need drain: 4 waves of 1 (max-unavailable 1)"));
        let half = planned(&nodes, "new", &nodes, "50%");
        assert_eq!(half.rollout.as_ref().expect("rollout").waves, [["node01", "node02"], ["node03", "node04"]]);
        let three = planned(&nodes, "new", &nodes, "3");
        assert_eq!(
            three.rollout.as_ref().expect("rollout").summary().as_deref(),
            Some("4 nodes need drain: 2 waves of up to 3 (max-unavailable 3)")
        );
        let none = planned(&nodes, "old", &nodes, "1");
        assert_eq!(none.rollout.as_ref().expect("rollout").summary(), None);
    }

    #[test]
    fn max_unavailable_parses_counts_and_percentages_and_refuses_nonsense() {
        assert_eq!("2".parse(), Ok(MaxUnavailable::Count(2)));
        assert_eq!(" 5% ".parse(), Ok(MaxUnavailable::Percent(5)));
        assert_eq!(MaxUnavailable::Percent(5).nodes(4096), 205);
        assert_eq!(MaxUnavailable::Percent(1).nodes(4), 1, "rounded up, at least one");
        assert_eq!(MaxUnavailable::Count(3).nodes(0), 3);
        for (text, reason) in [
            ("0", "0 would never let a node drain"),
            ("0%", "0% would never let a node drain"),
            ("101%", "more than 100%"),
            ("two", "whole number"),
            ("-1", "whole number"),
        ] {
            let error = text.parse::<MaxUnavailable>().expect_err(text).to_string();
            assert!(error.contains(reason) && error.contains(&format!("`{text}`")), "{text}: {error}");
        }
        let json = serde_json::to_string(&MaxUnavailable::Percent(25)).expect("json");
        assert_eq!(json, r#""25%""#);
        assert_eq!(serde_json::from_str::<MaxUnavailable>(&json).expect("back"), MaxUnavailable::Percent(25));
    }
}
