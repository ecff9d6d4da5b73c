//! Apply: make the hosts match the plan, in dependency order, hosts in parallel.
//!
//! Stage: apply. Input: the [`ResourceGraph`](crate::graph::ResourceGraph), the
//! indexes of the resources to change, a [`Connector`](crate::transport::Connector)
//! and [`ApplyOptions`]. Output: an [`ApplyReport`] with one [`Outcome`] per resource.
//!
//! [`walker::apply`] schedules; [`ops`] performs one idempotent step per resource;
//! [`remove::remove`] undoes what left the blueprint.
//! A failure stops only what depends on it; a Ctrl-C stops starting new work and
//! the partial outcome is still reported.

pub mod ops;
pub mod remove;
pub mod walker;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
pub(crate) mod sim;

use std::collections::BTreeSet;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::resource::ResourceId;

pub use walker::apply;

/// Why a resource was not attempted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum SkipReason {
    /// A resource it depends on (directly or not) failed; `id` is the one that failed.
    Upstream {
        /// The failed resource (`failed_upstream` in JSON: `id` names the skipped one).
        #[serde(rename = "failed_upstream")]
        id: ResourceId,
    },
    /// The run was cancelled (Ctrl-C) before it started.
    Cancelled,
    /// Too many hosts failed (`max_fail_percent`) before its host started.
    Aborted,
    /// Its host waits for a wave of a rolling change that has not run (the rollout
    /// stopped first); the next deploy carries on.
    NotReached,
}

/// What happened to one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    /// The host was changed.
    Changed,
    /// Already as desired, or not part of this run's changes.
    Unchanged,
    /// The step failed.
    Failed {
        /// Why (never file contents).
        error: String,
    },
    /// Not attempted.
    Skipped {
        /// Why.
        #[serde(flatten)]
        reason: SkipReason,
    },
}

impl Outcome {
    /// Whether dependents may proceed.
    #[must_use]
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Changed | Self::Unchanged)
    }
}

/// One resource's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceOutcome {
    /// Index in the graph's resources ([`remove::NOT_IN_GRAPH`] for a removal).
    #[serde(skip)]
    pub index: usize,
    /// Resource id.
    pub id: ResourceId,
    /// Host or switch.
    pub target: String,
    /// What happened.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Time spent on its step, in milliseconds (0 when not attempted).
    pub elapsed_ms: u64,
}

/// Counts per outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Changed.
    pub changed: usize,
    /// Unchanged.
    pub unchanged: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
}

/// The outcome of a run: every resource, in graph order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ApplyReport {
    /// One per resource of the graph.
    pub outcomes: Vec<ResourceOutcome>,
    /// Ctrl-C (the cancellation token) stopped the run.
    pub cancelled: bool,
    /// `max_fail_percent` was exceeded and hosts not yet started were skipped.
    pub aborted: bool,
}

impl ApplyReport {
    /// Counts per outcome.
    #[must_use]
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for outcome in &self.outcomes {
            match outcome.outcome {
                Outcome::Changed => counts.changed += 1,
                Outcome::Unchanged => counts.unchanged += 1,
                Outcome::Failed { .. } => counts.failed += 1,
                Outcome::Skipped { .. } => counts.skipped += 1,
            }
        }
        counts
    }

    /// Targets with at least one failed resource.
    #[must_use]
    pub fn failed_targets(&self) -> BTreeSet<&str> {
        self.outcomes
            .iter()
            .filter(|outcome| matches!(outcome.outcome, Outcome::Failed { .. }))
            .map(|outcome| outcome.target.as_str())
            .collect()
    }

    /// Whether every resource succeeded.
    #[must_use]
    pub fn is_success(&self) -> bool {
        self.outcomes.iter().all(|outcome| outcome.outcome.is_success())
    }

    /// The outcome of the resource with `id`.
    #[must_use]
    pub fn outcome(&self, id: &str) -> Option<&Outcome> {
        self.outcomes.iter().find(|outcome| outcome.id.as_str() == id).map(|outcome| &outcome.outcome)
    }
}

/// How a run is bounded and stopped.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// At most this many steps (and connection attempts) at once, across hosts.
    pub parallel: usize,
    /// Stop starting new hosts once more than this percentage of the hosts with
    /// work have failed.
    pub max_fail_percent: Option<u8>,
    /// Cancelled → no new step starts; steps in flight finish.
    pub cancel: CancellationToken,
    /// Receives each resource's outcome as soon as it is known (progress display).
    pub events: Option<tokio::sync::mpsc::UnboundedSender<ResourceOutcome>>,
    /// Keep each replaced file beside it as `<path>.<UTC time>.toolkit-backup`.
    pub backup: bool,
    /// Undo what left the blueprint even where its undo refuses because it would
    /// lose work (a Slurm account with jobs: they are cancelled).
    pub force: bool,
}

impl Default for ApplyOptions {
    /// 64 in parallel, no failure limit, a fresh token, no events, no backups, no force.
    fn default() -> Self {
        Self {
            parallel: 64,
            max_fail_percent: None,
            cancel: CancellationToken::new(),
            events: None,
            backup: false,
            force: false,
        }
    }
}

/// Cancels `token` on the first Ctrl-C (SIGINT). The returned task ends then, or
/// when the runtime shuts down.
#[must_use = "dropping the handle does not stop the watcher; keep it to abort it"]
pub fn cancel_on_ctrl_c(token: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::select! {
            result = tokio::signal::ctrl_c() => {
                if result.is_ok() {
                    tracing::warn!("interrupted: finishing the steps in flight, starting no new ones");
                    token.cancel();
                }
            }
            () = token.cancelled() => {}
        }
    })
}
