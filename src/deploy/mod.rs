//! Deploy: observe the targets, plan against what is there, apply in graph order,
//! record what was applied.
//!
//! Stage: observe → plan → apply. Input: [`Compiled`](crate::compile::Compiled)
//! resources and a connector (SSH pool). Output: a [`Plan`] (baseline: observed),
//! an [`ApplyReport`], and the updated [`State`]. The CLI adds the prompt, the
//! lock and the progress display.

pub mod lock;
pub mod observe;
pub mod secrets;

use std::collections::HashSet;

use crate::apply::{self, ApplyOptions, ApplyReport, Outcome};
use crate::graph::ResourceGraph;
use crate::plan::diff::PlanInputs;
use crate::plan::state::State;
use crate::plan::{self, Action, Baseline, Plan};
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

/// Observes every target and diffs.
pub async fn live_plan<C: Connector>(
    graph: &ResourceGraph,
    connector: &C,
    inputs: PlanInputs,
    parallel: usize,
) -> LivePlan {
    let observation = observe(graph, connector, &inputs.cluster, parallel).await;
    let mut plan = plan::diff(graph, &observation.state, inputs);
    plan.baseline = Baseline::Observed;
    for change in &mut plan.changes {
        if let Some(reason) = observation.unreachable.get(&change.target) {
            change.reason = format!("host unreachable: {reason}");
        }
    }
    LivePlan { plan, unreachable: observation.unreachable }
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

/// Applies the plan's changes.
pub async fn apply<C: Connector>(
    graph: &ResourceGraph,
    plan: &Plan,
    connector: &C,
    options: &ApplyOptions,
) -> ApplyReport {
    let changes = changed_indexes(graph, plan);
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
