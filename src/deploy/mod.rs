//! Deploy: observe the targets, plan against what is there, apply in graph order,
//! record what was applied.
//!
//! Stage: observe → plan → apply. Input: [`Compiled`](crate::compile::Compiled)
//! resources, the state file of the last deploy and a connector (SSH pool).
//! Output: a [`Plan`] (baseline: observed; removals: what the state file records
//! and the blueprint no longer has), an [`ApplyReport`], and the updated
//! [`State`]. The CLI adds the prompt, the lock and the progress display.

pub mod api;
pub mod checks;
pub mod firmware;
pub mod health;
pub mod kube;
pub mod kubeadm;
pub mod lock;
pub mod observe;
pub mod ops;
pub mod provision;
pub mod reboot;
pub mod rma;
pub mod rollout;
#[cfg(test)]
mod scale_bench;
pub mod scheduler;
pub mod secrets;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::apply::{self, ApplyOptions, ApplyReport, Outcome};
use crate::graph::ResourceGraph;
use crate::plan::described::Described;
use crate::plan::diff::PlanInputs;
use crate::plan::removal::{Removal, Undo};
use crate::plan::state::State;
use crate::plan::{self, Action, Baseline, Change, Plan};
use crate::resource::Desired;
use crate::text::Text;
use crate::transport::Connector;

pub use observe::{Observation, observe};

/// A plan against the targets as they are now.
#[derive(Debug)]
pub struct LivePlan {
    /// The plan.
    pub plan: Plan,
    /// Hosts that could not be read (their resources plan as creates).
    pub unreachable: std::collections::BTreeMap<String, String>,
    /// Every resource's fingerprint, name and kind, for the state recorder.
    pub described: Described,
}

/// Observes every target and diffs. `api` is what the BMCs and the cloud report
/// ([`api::observe`]); a host whose power or instance is not in place yet is not
/// read over SSH: its resources plan as creates, applied after the API stage.
/// What `recorded` (the state file) has and the blueprint no longer has plans as
/// removals: the observed facts cover desired resources only.
pub async fn live_plan<C: Connector>(
    graph: &ResourceGraph,
    recorded: &State,
    connector: &C,
    inputs: PlanInputs,
    parallel: usize,
    api_observation: &api::ApiObservation,
    firmware: &BTreeMap<String, BTreeMap<String, String>>,
) -> LivePlan {
    let api_changes = api::changes(graph, api_observation);
    let pending = api::pending_hosts(&api_changes);
    let described = Described::of(graph);
    let observation = observe(graph, &described, connector, parallel, &pending).await;
    let mut plan = plan::diff::diff_observed(graph, &described, &observation.records, &observation.contents, inputs);
    drop(observation.records);
    plan.baseline = Baseline::Observed;
    let mut by_id: BTreeMap<Text, Change> = api_changes.into_iter().map(|change| (change.id.clone(), change)).collect();
    for change in &mut plan.changes {
        if let Some(api_change) = by_id.remove(change.id.as_str()) {
            *change = api_change;
        } else if let Some(reason) = observation.unreachable.get(change.target()) {
            change.reason = format!("host unreachable: {reason}").into();
        } else if pending.contains(change.target()) {
            change.reason = "host not up yet: applied after its power or instance".into();
        }
    }
    // What is left are removals (instances no longer in the blueprint).
    plan.changes.extend(by_id.into_values());
    // API objects are the API stage's: it plans their removal from what the API
    // reports. Only records of no desired resource (ids are unique in a graph) are
    // removals: when every record is of one, as on most runs, no set of ids is built.
    let recorded_desired =
        graph.resources.iter().filter(|resource| recorded.resources.contains_key(resource.id.as_str())).count();
    if recorded_desired < recorded.resources.len() {
        let desired: HashSet<&str, foldhash::fast::RandomState> =
            graph.resources.iter().map(|resource| resource.id.as_str()).collect();
        plan.changes.extend(plan::removal::changes(recorded, &desired, false));
    }
    plan.summary = plan::Summary::of(&plan.changes);
    plan.warnings = api::firmware_warnings(firmware, api_observation, &plan.changes);
    let mut unreachable = observation.unreachable;
    for (target, reason) in &api_observation.unreachable {
        unreachable.insert(format!("{target} (API)"), reason.clone());
    }
    LivePlan { plan, unreachable, described }
}

/// Indexes of the resources a plan changes (creates and updates, including
/// service restarts); removals are not in the graph ([`removals`]).
#[must_use]
pub fn changed_indexes(graph: &ResourceGraph, plan: &Plan) -> HashSet<usize> {
    let changing: HashSet<&str, foldhash::fast::RandomState> = plan
        .changes
        .iter()
        .filter(|change| matches!(change.action, Action::Create | Action::Update))
        .map(|change| change.id.as_str())
        .collect();
    // A rerun changes nothing: no id of the graph to look up.
    if changing.is_empty() {
        return HashSet::new();
    }
    graph
        .resources
        .iter()
        .enumerate()
        .filter(|(_, resource)| changing.contains(resource.id.as_str()))
        .map(|(index, _)| index)
        .collect()
}

/// How many changes a plan applies (creates and updates): the length of a progress bar.
#[must_use]
pub fn changed_indexes_count(plan: &Plan) -> usize {
    plan.changes.iter().filter(|change| matches!(change.action, Action::Create | Action::Update)).count()
}

/// The plan's removals with the undo `recorded` keeps for each, in the plan's
/// (reverse apply) order. A file or directory whose path another desired resource
/// on the same host now has (renamed, or moved between kinds) is not deleted.
#[must_use]
pub fn removals(graph: &ResourceGraph, plan: &Plan, recorded: &State) -> Vec<Removal> {
    // Most runs remove nothing: no index of every desired path for them.
    if !plan.changes.iter().any(|change| change.action == Action::Remove) {
        return Vec::new();
    }
    let desired_paths: HashSet<(&str, &str)> = graph
        .resources
        .iter()
        .filter_map(|resource| match &*resource.desired {
            Desired::File { path, .. } | Desired::Directory { path, .. } => Some((resource.target(), path.as_str())),
            _ => None,
        })
        .collect();
    plan.changes
        .iter()
        .filter(|change| change.action == Action::Remove)
        .map(|change| {
            let undo = recorded
                .resources
                .get(change.id.as_str())
                .and_then(|record| plan::removal::undo_of(&change.id, record))
                .filter(|undo| match undo {
                    Undo::DeleteFile { path } | Undo::DeleteDirectory { path } => {
                        !desired_paths.contains(&(change.target(), path.as_str()))
                    }
                    _ => true,
                });
            Removal { id: change.id.to_string(), target: change.target().to_string(), undo }
        })
        .collect()
}

/// Applies the plan's changes to the hosts over SSH (API objects are applied by
/// [`api::apply`], before), then undoes its removals with what `recorded` keeps
/// ([`apply::remove`]) — after the changes, so a service whose configuration
/// dropped a removed file has been restarted without it first. A cancelled or
/// aborted run removes nothing.
pub async fn apply<C: Connector>(
    graph: &ResourceGraph,
    plan: &Plan,
    recorded: &State,
    connector: &C,
    options: &ApplyOptions,
) -> ApplyReport {
    let mut changes = changed_indexes(graph, plan);
    changes.retain(|&index| !matches!(*graph.resources[index].desired, Desired::Api(_)));
    let mut report = apply::apply(graph, &changes, connector, options).await;
    if !report.cancelled && !report.aborted {
        let removals = removals(graph, plan, recorded);
        report.outcomes.extend(apply::remove::remove(&removals, connector, options).await);
    }
    report
}

/// The state after a run: every resource that is now as desired (applied, or a
/// no-op in the plan) is recorded, with its position in the apply order; failed
/// and skipped ones keep their old record. Resources gone from the blueprint are
/// forgotten once removed, or at once when nothing is run to remove them (left in
/// place); a removal that failed or did not run stays recorded, so a rerun retries.
#[must_use]
pub fn record(state: State, graph: &ResourceGraph, plan: &Plan, report: &ApplyReport) -> State {
    record_changed(state, graph, &Described::of(graph), plan, report).0
}

/// As [`record`], and whether any record changed: a deploy with nothing to do
/// leaves the state file as it was when the hosts confirm it (as Terraform keeps its
/// state when a refresh finds nothing new), which at thousands of nodes saves
/// writing a file of a hundred megabytes.
#[must_use]
pub fn record_changed(
    mut state: State,
    graph: &ResourceGraph,
    described: &Described,
    plan: &Plan,
    report: &ApplyReport,
) -> (State, bool) {
    let mut changed = false;
    let applied: HashSet<usize> = changed_indexes(graph, plan);
    let removals = removals(graph, plan, &state);
    // By graph index, looked up once per resource (a rollout records after every phase).
    let mut by_index: Vec<Option<&Outcome>> = vec![None; graph.resources.len()];
    for outcome in &report.outcomes {
        if let Some(slot) = by_index.get_mut(outcome.index) {
            *slot = Some(&outcome.outcome);
        }
    }
    for (rank, index) in graph.ordered().enumerate() {
        let resource = &graph.resources[index];
        let done = if applied.contains(&index) {
            by_index[index].is_some_and(|outcome| matches!(outcome, Outcome::Changed | Outcome::Unchanged))
        } else {
            true
        };
        if done {
            // 0 is "order unknown" (records from before orders were kept).
            changed |= state.record_fingerprinted(resource, &described.get(index).fingerprint, rank as u64 + 1);
        }
    }
    let removal_outcomes: HashMap<&str, &Outcome> = report
        .outcomes
        .iter()
        .filter(|outcome| outcome.index == apply::remove::NOT_IN_GRAPH)
        .map(|outcome| (outcome.id.as_str(), &outcome.outcome))
        .collect();
    for removal in removals {
        let removed = !removal.undo.as_ref().is_some_and(Undo::acts)
            || removal_outcomes.get(removal.id.as_str()).is_some_and(|outcome| outcome.is_success());
        if removed {
            changed |= state.forget(&removal.id);
        }
    }
    (state, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::fake::{FakeConnector, Script, fresh_debian};
    use crate::resource::api::{ApiDesired, PowerState};
    use crate::resource::{Desired, Resource, ResourceId, Target};

    fn target(name: &str) -> Target {
        Target::node(name)
    }

    /// Per host: its power (API) and a package that waits for it.
    fn graph(hosts: &[&str]) -> ResourceGraph {
        let mut resources = Vec::new();
        for host in hosts {
            let power = ApiDesired::Power { host: (*host).to_owned(), state: PowerState::On };
            let gate = ResourceId(power.id().into());
            resources.push(Resource::new(target(host), "system", Desired::Api(Box::new(power))));
            let package = Desired::Package { name: "munge".into() };
            resources.push(Resource::new(target(host), "munge", package).after([gate]));
        }
        crate::graph::build(resources).expect("graph")
    }

    #[tokio::test]
    async fn hosts_not_powered_on_are_not_read_over_ssh_and_api_objects_are_not_applied_over_ssh() {
        let graph = graph(&["n1", "n2"]);
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let observation = api::ApiObservation {
            observed: [("n1:power:system", "Off"), ("n2:power:system", "On")]
                .into_iter()
                .map(|(id, value)| (id.to_owned(), Some(value.to_owned())))
                .collect(),
            ..api::ApiObservation::default()
        };
        let live = live_plan(
            &graph,
            &State::empty("lab"),
            &connector,
            PlanInputs::default(),
            4,
            &observation,
            &BTreeMap::new(),
        )
        .await;
        assert_eq!(*connector.connects.lock().expect("connects"), ["n2"], "n1 is off: not read over SSH");
        assert!(live.unreachable.is_empty(), "{:?}", live.unreachable);
        let changes: Vec<(&str, Action, &str)> =
            live.plan.changes.iter().map(|c| (c.id.as_str(), c.action, c.reason.as_str())).collect();
        assert_eq!(
            changes,
            [
                ("n1:power:system", Action::Update, "Off → On"),
                ("n1:package:munge", Action::Create, "host not up yet: applied after its power or instance"),
                ("n2:power:system", Action::NoOp, "as desired"),
                ("n2:package:munge", Action::Create, "not applied yet"),
            ]
        );
        assert_eq!(live.plan.summary, plan::Summary { create: 2, update: 1, remove: 0, no_op: 1 });

        // The SSH stage applies the packages only; the power change is the API stage's.
        let options = ApplyOptions {
            parallel: 4,
            max_fail_percent: None,
            cancel: tokio_util::sync::CancellationToken::new(),
            events: None,
            backup: false,
            force: false,
        };
        let report = apply(&graph, &live.plan, &State::empty("lab"), &connector, &options).await;
        let outcomes: Vec<(&str, bool)> = report
            .outcomes
            .iter()
            .map(|outcome| (outcome.id.as_str(), matches!(outcome.outcome, Outcome::Changed)))
            .collect();
        assert!(outcomes.contains(&("n1:power:system", false)), "{outcomes:?}");
        assert!(outcomes.contains(&("n2:package:munge", true)), "{outcomes:?}");
    }

    /// A small root-owned file on `host`.
    fn file_on(host: &str, path: &str) -> Resource {
        Resource::new(
            target(host),
            path,
            Desired::File {
                path: path.into(),
                content: crate::resource::Content::new("x\n".into()),
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
                secret: false,
                check: None,
            },
        )
    }

    #[test]
    fn a_removal_is_forgotten_once_done_or_left_in_place_and_kept_when_it_failed() {
        let host = target("head");
        let file = |path: &str| file_on("head", path);
        let command = |name: &str, undo: Option<Vec<String>>| {
            let desired = Desired::Command {
                argv: vec!["true".into()],
                creates: None,
                unless: None,
                description: name.into(),
                undo,
                reads: None,
            };
            Resource::new(host.clone(), name, desired)
        };
        let mut state = State::empty("lab");
        let old = [
            file("/etc/slurm/slurm.conf"),
            file("/etc/slurm/topology.conf"),
            command("sacctmgr-account-team-b", Some(vec!["delete".into()])),
            command("bare", None),
            Resource::new(host.clone(), "slurmctld", Desired::Package { name: "slurmctld".into() }),
        ];
        for (rank, resource) in old.iter().enumerate() {
            state.record_at(resource, rank as u64 + 1);
        }
        let graph = crate::graph::build(vec![file("/etc/slurm/slurm.conf")]).expect("graph");
        let plan = plan::diff(&graph, &state, PlanInputs::default());
        assert_eq!(plan.summary.remove, 4);
        let outcome = |id: &str, outcome| apply::ResourceOutcome {
            index: apply::remove::NOT_IN_GRAPH,
            id: ResourceId(id.into()),
            target: "head".into(),
            outcome,
            elapsed_ms: 0,
        };
        let report = ApplyReport {
            outcomes: vec![
                outcome("head:command:sacctmgr-account-team-b", Outcome::Failed { error: "refused".into() }),
                outcome("head:file:/etc/slurm/topology.conf", Outcome::Changed),
            ],
            ..ApplyReport::default()
        };
        let after = record(state, &graph, &plan, &report);
        let mut kept: Vec<&str> = after.resources.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["head:command:sacctmgr-account-team-b", "head:file:/etc/slurm/slurm.conf"]);
        // The one still desired is recorded at its place in this run's order.
        assert_eq!(after.resources["head:file:/etc/slurm/slurm.conf"].order, 1);
        // A removal that did not run (cancelled run) stays recorded too.
        let mut state = State::empty("lab");
        state.record_at(&file("/etc/slurm/topology.conf"), 1);
        let plan = plan::diff(&graph, &state, PlanInputs::default());
        let after = record(state, &graph, &plan, &ApplyReport::default());
        assert!(after.resources.contains_key("head:file:/etc/slurm/topology.conf"));
    }

    /// Observed facts cover desired resources only: removals come from the state
    /// file, except API objects (the API stage plans those from the API).
    #[tokio::test]
    async fn a_live_plan_takes_its_removals_from_the_state_file() {
        let graph = graph(&["n1"]);
        let mut recorded = State::empty("lab");
        for resource in &graph.resources {
            recorded.record(resource);
        }
        recorded.record(&file_on("n1", "/etc/slurm/topology.conf"));
        let old_power = ApiDesired::Power { host: "n9".to_owned(), state: PowerState::On };
        recorded.record(&Resource::new(target("n9"), "system", Desired::Api(Box::new(old_power))));
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let observation = api::ApiObservation {
            observed: [("n1:power:system".to_owned(), Some("On".to_owned()))].into_iter().collect(),
            ..api::ApiObservation::default()
        };
        let live =
            live_plan(&graph, &recorded, &connector, PlanInputs::default(), 4, &observation, &BTreeMap::new()).await;
        let removals: Vec<(&str, &str)> = live
            .plan
            .changes
            .iter()
            .filter(|change| change.action == Action::Remove)
            .map(|change| (change.id.as_str(), change.reason.as_str()))
            .collect();
        assert_eq!(removals, [("n1:file:/etc/slurm/topology.conf", "no longer in the blueprint: delete")]);
        assert_eq!(live.plan.summary.remove, 1);
    }
}
