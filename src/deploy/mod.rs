//! Deploy: observe the targets, plan against what is there, apply in graph order,
//! record what was applied.
//!
//! Stage: observe → plan → apply. Input: [`Compiled`](crate::compile::Compiled)
//! resources and a connector (SSH pool). Output: a [`Plan`] (baseline: observed),
//! an [`ApplyReport`], and the updated [`State`]. The CLI adds the prompt, the
//! lock and the progress display.

pub mod api;
pub mod lock;
pub mod observe;
pub mod reboot;
pub mod secrets;

use std::collections::{BTreeMap, HashSet};

use crate::apply::{self, ApplyOptions, ApplyReport, Outcome};
use crate::graph::ResourceGraph;
use crate::plan::diff::PlanInputs;
use crate::plan::state::State;
use crate::plan::{self, Action, Baseline, Change, Plan};
use crate::transport::Connector;

pub use observe::{Observation, observe};

/// A plan against the targets as they are now.
#[derive(Debug)]
pub struct LivePlan {
    /// The plan.
    pub plan: Plan,
    /// Hosts that could not be read (their resources plan as creates).
    pub unreachable: std::collections::BTreeMap<String, String>,
}

/// Observes every target and diffs. `api` is what the BMCs and the cloud report
/// ([`api::observe`]); a host whose power or instance is not in place yet is not
/// read over SSH: its resources plan as creates, applied after the API stage.
pub async fn live_plan<C: Connector>(
    graph: &ResourceGraph,
    connector: &C,
    inputs: PlanInputs,
    parallel: usize,
    api_observation: &api::ApiObservation,
    firmware: &BTreeMap<String, BTreeMap<String, String>>,
) -> LivePlan {
    let api_changes = api::changes(graph, api_observation);
    let pending = api::pending_hosts(&api_changes);
    let observation = observe(graph, connector, &inputs.cluster, parallel, &pending).await;
    let mut plan = plan::diff(graph, &observation.state, inputs);
    plan.baseline = Baseline::Observed;
    let mut by_id: BTreeMap<String, Change> =
        api_changes.into_iter().map(|change| (change.id.clone(), change)).collect();
    for change in &mut plan.changes {
        if let Some(api_change) = by_id.remove(&change.id) {
            *change = api_change;
        } else if let Some(reason) = observation.unreachable.get(&change.target) {
            change.reason = format!("host unreachable: {reason}");
        } else if pending.contains(&change.target) {
            "host not up yet: applied after its power or instance".clone_into(&mut change.reason);
        }
    }
    // What is left are removals (instances no longer in the blueprint).
    plan.changes.extend(by_id.into_values());
    plan.summary = plan::Summary::of(&plan.changes);
    plan.warnings = api::firmware_warnings(firmware, api_observation);
    let mut unreachable = observation.unreachable;
    for (target, reason) in &api_observation.unreachable {
        unreachable.insert(format!("{target} (API)"), reason.clone());
    }
    LivePlan { plan, unreachable }
}

/// Indexes of the resources a plan changes (creates and updates, including
/// service restarts); removals are not applied: the state forgets them.
#[must_use]
pub fn changed_indexes(graph: &ResourceGraph, plan: &Plan) -> HashSet<usize> {
    let changing: HashSet<&str> = plan
        .changes
        .iter()
        .filter(|change| matches!(change.action, Action::Create | Action::Update))
        .map(|change| change.id.as_str())
        .collect();
    graph
        .resources
        .iter()
        .enumerate()
        .filter(|(_, resource)| changing.contains(resource.id.as_str()))
        .map(|(index, _)| index)
        .collect()
}

/// Applies the plan's changes to the hosts over SSH (API objects are applied by
/// [`api::apply`], before).
pub async fn apply<C: Connector>(
    graph: &ResourceGraph,
    plan: &Plan,
    connector: &C,
    options: &ApplyOptions,
) -> ApplyReport {
    let mut changes = changed_indexes(graph, plan);
    changes.retain(|&index| !matches!(graph.resources[index].desired, crate::resource::Desired::Api(_)));
    apply::apply(graph, &changes, connector, options).await
}

/// The state after a run: every resource that is now as desired (applied, or a
/// no-op in the plan) is recorded; failed and skipped ones keep their old record;
/// resources gone from the blueprint are forgotten.
#[must_use]
pub fn record(mut state: State, graph: &ResourceGraph, plan: &Plan, report: &ApplyReport) -> State {
    let applied: HashSet<usize> = changed_indexes(graph, plan);
    for (index, resource) in graph.resources.iter().enumerate() {
        let done = if applied.contains(&index) {
            report
                .outcomes
                .iter()
                .find(|outcome| outcome.index == index)
                .is_some_and(|outcome| matches!(outcome.outcome, Outcome::Changed | Outcome::Unchanged))
        } else {
            true
        };
        if done {
            state.record(resource);
        }
    }
    for change in plan.changes.iter().filter(|change| change.action == Action::Remove) {
        state.forget(&change.id);
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::fake::{FakeConnector, Script, fresh_debian};
    use crate::bmc::PowerState;
    use crate::bmc::resources::ApiDesired;
    use crate::resource::{Desired, Resource, ResourceId, Target, TargetKind};

    fn target(name: &str) -> Target {
        Target { name: name.to_owned(), kind: TargetKind::Node }
    }

    /// Per host: its power (API) and a package that waits for it.
    fn graph(hosts: &[&str]) -> ResourceGraph {
        let mut resources = Vec::new();
        for host in hosts {
            let power = ApiDesired::Power { host: (*host).to_owned(), state: PowerState::On };
            let gate = ResourceId(power.id());
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
        let live = live_plan(&graph, &connector, PlanInputs::default(), 4, &observation, &BTreeMap::new()).await;
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
        };
        let report = apply(&graph, &live.plan, &connector, &options).await;
        let outcomes: Vec<(&str, bool)> = report
            .outcomes
            .iter()
            .map(|outcome| (outcome.id.as_str(), matches!(outcome.outcome, Outcome::Changed)))
            .collect();
        assert!(outcomes.contains(&("n1:power:system", false)), "{outcomes:?}");
        assert!(outcomes.contains(&("n2:package:munge", true)), "{outcomes:?}");
    }
}
