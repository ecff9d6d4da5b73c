//! The deploy operation, as cargo's `ops`: one call runs a whole deploy of the SSH
//! stage — observe, plan, refuse a stale saved plan, take the cluster lock, roll the
//! changes out in waves (or apply them at once), record the state — and returns what
//! happened. The command line parses, calls [`deploy`] and prints.
//!
//! Stage: observe → plan → roll out → apply → state. Input: a [`Request`] (the
//! compiled graph, a connector, where the state lives, how to roll out) and a
//! [`Review`] that shows the plan and says whether to go ahead. Output: an
//! [`Outcome`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use thiserror::Error;

use super::rollout::{self, NodeHooks, RolloutOptions, RolloutReport};
use super::scheduler::Slurm;
use super::{LivePlan, api, live_plan, lock};
use crate::apply::ApplyOptions;
use crate::graph::ResourceGraph;
use crate::inventory::Inventory;
use crate::plan::described::Described;
use crate::plan::diff::PlanInputs;
use crate::plan::state::{State, StateError};
use crate::plan::{self, Action, MaxUnavailable, Plan};
use crate::text::Text;
use crate::transport::Connector;

/// Why a deploy could not run (a host's failure is an [`Outcome`], not an error).
#[derive(Debug, Error)]
pub enum DeployError {
    /// The state file could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The cluster lock is held or could not be taken.
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    /// The controller holding the lock cannot be reached.
    #[error("cannot reach the controller `{host}` to take the cluster lock: {reason}")]
    Controller {
        /// Controller.
        host: String,
        /// Why.
        reason: String,
    },
    /// A saved plan no longer matches the inputs or the hosts.
    #[error("{0}")]
    Stale(String),
    /// The review step failed (e.g. no terminal to ask on).
    #[error("{0}")]
    Review(String),
}

/// What the API stage contributes to the SSH stage's plan: the inventory whose BMCs
/// and cloud are read, and the firmware each host should run.
pub struct ApiInputs<'a> {
    /// The inventory.
    pub inventory: &'a Inventory,
    /// Firmware wanted, per host and component.
    pub firmware: &'a BTreeMap<String, BTreeMap<String, String>>,
}

/// The scheduler side of a deploy: who holds the lock and runs `scontrol`, which
/// nodes can be drained, and how.
pub struct Rollout<'a, H: NodeHooks> {
    /// The controller: lock holder and scheduler.
    pub controller: &'a str,
    /// Nodes the scheduler runs jobs on.
    pub schedulable: BTreeSet<String>,
    /// The budget the plan's waves are cut by.
    pub max_unavailable: MaxUnavailable,
    /// Timeouts, requeue, failures allowed.
    pub options: RolloutOptions,
    /// Reboots and post-change checks.
    pub hooks: &'a H,
}

/// One deploy.
pub struct Request<'a, C: Connector, H: NodeHooks> {
    /// What the hosts should be.
    pub graph: &'a ResourceGraph,
    /// Cluster name.
    pub cluster: &'a str,
    /// SSH.
    pub connector: &'a C,
    /// Identity of the inputs, recorded in the plan.
    pub inputs: PlanInputs,
    /// A plan saved by `toolkit plan --out`, applied only if still current.
    pub saved: Option<&'a Plan>,
    /// The state file.
    pub state_path: Option<&'a Path>,
    /// BMCs and cloud to read for the plan (none for `push`).
    pub api: Option<ApiInputs<'a>>,
    /// The scheduler and the rolling change (none for `push`: changes apply at once).
    pub rollout: Option<Rollout<'a, H>>,
    /// Parallelism, failure limit, Ctrl-C, progress.
    pub apply: ApplyOptions,
    /// Plan only.
    pub dry_run: bool,
}

/// Shows the plan and says whether to apply it.
pub trait Review {
    /// Called once with the plan and the hosts that could not be read; `Ok(false)`
    /// ends the deploy with nothing changed.
    ///
    /// # Errors
    /// When the user cannot be asked.
    fn review(&self, plan: &Plan, unreachable: &BTreeMap<String, String>) -> Result<bool, String>;
}

/// How a deploy ended.
#[derive(Debug)]
pub enum Outcome {
    /// `--dry-run`: the plan only.
    Planned(Plan),
    /// Nothing to change (the state was refreshed).
    NothingToDo(Plan),
    /// The review said no: nothing changed.
    Declined(Plan),
    /// Changes applied (or attempted).
    Applied {
        /// The plan that was applied.
        plan: Plan,
        /// What happened, host by host and node by node.
        report: RolloutReport,
    },
}

/// Runs one deploy of the SSH stage. The cluster lock is held from before the hosts
/// are read until the state is written (not for `--dry-run`).
///
/// # Errors
/// [`DeployError`] when the deploy could not start or its state could not be kept.
pub async fn deploy<C: Connector, H: NodeHooks>(
    request: Request<'_, C, H>,
    review: &dyn Review,
) -> Result<Outcome, DeployError> {
    let locked = match (&request.rollout, request.dry_run) {
        (Some(rollout), false) => {
            let session = request.connector.connect(rollout.controller).await.map_err(|error| {
                DeployError::Controller { host: rollout.controller.to_owned(), reason: error.to_string() }
            })?;
            lock::acquire(session.as_ref(), &lock::owner_description()).await?;
            Some(session)
        }
        _ => None,
    };
    let outcome = locked_deploy(&request, review, locked.as_deref()).await;
    if let Some(session) = locked
        && let Err(error) = lock::release(session.as_ref()).await
    {
        // The outcome matters more than a lock left behind (`toolkit unlock` removes it).
        tracing::warn!(%error, "could not release the cluster lock");
    }
    outcome
}

async fn locked_deploy<C: Connector, H: NodeHooks>(
    request: &Request<'_, C, H>,
    review: &dyn Review,
    controller: Option<&C::Executor>,
) -> Result<Outcome, DeployError> {
    let no_firmware = BTreeMap::new();
    let (observation, firmware) = match &request.api {
        Some(api) => {
            let mut observation = api::observe(request.graph, api.inventory, request.cluster, Path::new(".")).await;
            if let Some(rollout) = &request.rollout {
                observation.schedulable.clone_from(&rollout.schedulable);
            }
            (observation, api.firmware)
        }
        None => (api::ApiObservation::default(), &no_firmware),
    };
    let previous = match request.state_path {
        Some(path) => State::load(path, request.cluster)?,
        None => State::empty(request.cluster),
    };
    let LivePlan { mut plan, unreachable, described } = live_plan(
        request.graph,
        &previous,
        request.connector,
        request.inputs.clone(),
        request.apply.parallel,
        &observation,
        firmware,
    )
    .await;
    let mut unreachable = unreachable;
    plan.leave_out_absent(&mut unreachable);
    if let Some(rollout) = &request.rollout {
        plan::disruption::classify(request.graph, &mut plan, &rollout.schedulable, rollout.max_unavailable);
    }
    if let Some(saved) = request.saved {
        refuse_stale(saved, &plan).map_err(DeployError::Stale)?;
    }
    if request.dry_run {
        review.review(&plan, &unreachable).map_err(DeployError::Review)?;
        return Ok(Outcome::Planned(plan));
    }
    // A rollout left half way has nodes held drained even when nothing is to change.
    let carry_on = previous.rollout.as_ref().is_some_and(|rollout| rollout.in_flight().next().is_some());
    if !plan.summary.has_changes() && !carry_on {
        review.review(&plan, &unreachable).map_err(DeployError::Review)?;
        let (refreshed, changed) =
            super::record_changed(previous, request.graph, &described, &plan, &crate::apply::ApplyReport::default());
        write_state(request.state_path.filter(|_| changed), refreshed)?;
        return Ok(Outcome::NothingToDo(plan));
    }
    if !review.review(&plan, &unreachable).map_err(DeployError::Review)? {
        return Ok(Outcome::Declined(plan));
    }
    let report = apply(request, &plan, &described, previous, controller).await?;
    Ok(Outcome::Applied { plan, report })
}

/// The rollout with the controller's Slurm, or every change at once without one.
async fn apply<C: Connector, H: NodeHooks>(
    request: &Request<'_, C, H>,
    plan: &Plan,
    described: &Described,
    previous: State,
    controller: Option<&C::Executor>,
) -> Result<RolloutReport, DeployError> {
    let state_path = request.state_path;
    let mut save = |state: &State| -> Result<(), String> {
        write_state(state_path, state.clone()).map_err(|error| error.to_string())
    };
    if let (Some(rollout), Some(controller)) = (&request.rollout, controller) {
        let slurm = Slurm::new(controller);
        return Ok(rollout::run(
            request.graph,
            plan,
            request.connector,
            &slurm,
            rollout.hooks,
            &request.apply,
            &rollout.options,
            previous,
            &mut save,
        )
        .await);
    }
    let report = super::apply(request.graph, plan, &previous, request.connector, &request.apply).await;
    // A run whose changes were commands that always run (no guard) records nothing new.
    let (state, changed) = super::record_changed(previous, request.graph, described, plan, &report);
    write_state(state_path.filter(|_| changed), state)?;
    let report = RolloutReport { apply: report, ..RolloutReport::default() };
    Ok(report)
}

fn write_state(path: Option<&Path>, mut state: State) -> Result<(), StateError> {
    if let Some(path) = path {
        state.save(path)?;
    }
    drop_aside(state);
    Ok(())
}

/// Records from which freeing a state is left to a thread of its own.
const DROP_ASIDE: usize = 16_384;

/// Frees a large state off the deploy's way: at thousands of nodes its records are
/// hundreds of thousands of allocations, and the deploy has nothing to wait for
/// (a process that exits first leaves the freeing to the kernel).
fn drop_aside(state: State) {
    if state.resources.len() >= DROP_ASIDE {
        // Without a thread to spare, it is freed here.
        let _ = std::thread::Builder::new().name("drop-state".to_owned()).spawn(move || drop(state));
    }
}

/// A saved plan is applied only if planning again gives exactly the same changes
/// from the same inputs.
///
/// # Errors
/// What differs, for people.
pub fn refuse_stale(saved: &Plan, now: &Plan) -> Result<(), String> {
    if saved.blueprint_sha256 != now.blueprint_sha256 {
        return Err("the blueprint changed since this plan was made; run `toolkit plan` again".to_owned());
    }
    if saved.inventory_sha256 != now.inventory_sha256 {
        return Err("the inventory changed since this plan was made; run `toolkit plan` again".to_owned());
    }
    let pending = |plan: &Plan| -> BTreeMap<Text, (Action, Option<Text>)> {
        plan.changes
            .iter()
            .filter(|c| c.action != Action::NoOp)
            .map(|c| (c.id.clone(), (c.action, c.before().cloned())))
            .collect()
    };
    let (then, current) = (pending(saved), pending(now));
    if then != current {
        let differing: Vec<&Text> =
            then.keys().chain(current.keys()).filter(|id| then.get(*id) != current.get(*id)).take(5).collect();
        return Err(format!(
            "the hosts changed since this plan was made (for example {}); run `toolkit plan` again",
            differing.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::refuse_stale;
    use crate::plan::{Action, Baseline, Change, PLAN_FORMAT_VERSION, Plan, Summary};

    fn plan(blueprint: &str, before: Option<&str>) -> Plan {
        Plan {
            format_version: PLAN_FORMAT_VERSION,
            toolkit_version: "0".into(),
            cluster: "lab".into(),
            blueprint_sha256: blueprint.into(),
            inventory_sha256: Some("inv".into()),
            blueprint_path: None,
            inventory_path: None,
            baseline: Baseline::Observed,
            summary: Summary { update: 1, ..Summary::default() },
            changes: vec![Change {
                id: "node01:file:/etc/hosts".into(),
                name: "/etc/hosts".into(),
                action: Action::Update,
                reason: "content changed".into(),
                after: Some("sha256:new".into()),
                secret: false,
                disruption: crate::resource::Disruption::None,
                delta: crate::plan::Delta::new(before.map(Into::into), None, crate::plan::Values::default()),
            }],
            warnings: Vec::new(),
            rollout: None,
            spares: None,
        }
    }

    #[test]
    fn a_saved_plan_applies_only_to_the_inputs_and_hosts_it_was_made_from() {
        let saved = plan("bp1", Some("sha256:old"));
        assert!(refuse_stale(&saved, &plan("bp1", Some("sha256:old"))).is_ok());
        let edited = refuse_stale(&saved, &plan("bp2", Some("sha256:old"))).expect_err("blueprint changed");
        assert!(edited.contains("blueprint changed"));
        let drifted = refuse_stale(&saved, &plan("bp1", Some("sha256:someone-else"))).expect_err("host changed");
        assert!(drifted.contains("`node01:file:/etc/hosts`"), "{drifted}");
    }
}
