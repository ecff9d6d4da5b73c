//! The validator runner: which validators run on which subjects, the commands over
//! SSH in parallel with timeouts, the outputs parsed and measured, the thresholds
//! judged, and the second pass of pairwise tests.
//!
//! Stage: validate. Input: a [`Catalog`], the [`Model`], the [`Site`] and a
//! [`Connector`] (the SSH pool; a scripted fake in unit tests). Output: a
//! [`RunOutcome`]: one [`ValidatorResult`] per validator, in catalog order, and the
//! verdict each validator gave each node (for `--drain-failed`).
//!
//! One file per job, and this one holds the types they share (options, progress,
//! limits, the planned run and its outcome):
//! - `select` ([`plan`]) is pure: it selects validators (blueprint `acceptance`,
//!   `--only`), resolves threshold overrides, checks requirements and expands subjects.
//! - `execute` ([`execute()`]) runs one validator after another — so a storage test
//!   never shares a node with an NCCL test — and each validator's subjects in
//!   parallel, bounded. A command that cannot run, times out or prints what its parser
//!   cannot read is an `error` (no verdict on the hardware), never a `failed`.
//! - `judge` measures each subject's parsed output and compares it with its thresholds.
//!
//! [`Catalog`]: super::catalog::Catalog
//! [`Model`]: crate::model::Model
//! [`Site`]: super::subjects::Site
//! [`Connector`]: crate::transport::Connector

mod execute;
mod judge;
mod select;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::spec::{Severity, ValidatorSpec};
use super::subjects::Expansion;
use crate::results::{Comparison, ValidatorResult, Verdict};

pub use execute::{EVIDENCE_LINES, Hosts, execute};
#[cfg(test)]
use judge::measure;
pub use select::{plan, unmet};

/// What the user asked for on the command line.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// `--only`: run exactly these validators (even ones the blueprint skips).
    pub only: Option<BTreeSet<String>>,
    /// `--nodes`: restrict node subjects (and pairs) to these nodes.
    pub nodes: Option<BTreeSet<String>>,
    /// Subjects run at once within a validator.
    pub parallel: usize,
    /// Stops starting new subjects when cancelled (Ctrl-C).
    pub cancel: Option<CancellationToken>,
    /// Called as subjects finish.
    pub progress: Option<ProgressFn>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunOptions")
            .field("only", &self.only)
            .field("nodes", &self.nodes)
            .field("parallel", &self.parallel)
            .finish_non_exhaustive()
    }
}

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// What happened, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A validator starts on `subjects` subjects.
    Started {
        /// Validator id.
        id: String,
        /// Subjects to run.
        subjects: usize,
    },
    /// One subject's commands finished (its verdict comes with the validator's end).
    Ran {
        /// Validator id.
        id: String,
        /// Subject.
        subject: String,
    },
    /// A validator finished.
    Finished {
        /// Validator id.
        id: String,
        /// Its verdict.
        verdict: Verdict,
        /// Wall time.
        seconds: f64,
    },
}

/// Where a threshold's limit comes from, once overrides are applied.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitSource {
    /// The validator's number and its reference.
    Fixed {
        /// The limit.
        value: f64,
        /// Where it comes from.
        reference: String,
    },
    /// Computed from the model per subject.
    Derived(String),
    /// Another measurement of the same subject: its name and label.
    Measurement {
        /// The measurement's `name`.
        name: String,
        /// Its label, the provenance shown.
        label: String,
    },
    /// Set in the blueprint.
    Blueprint {
        /// The limit.
        value: f64,
        /// The key path (`acceptance.validators[0].thresholds.busbw`).
        key: String,
    },
}

/// A threshold ready to judge.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Measurement name.
    pub measurement: String,
    /// Comparison.
    pub comparison: Comparison,
    /// Limit source.
    pub source: LimitSource,
    /// What missing it means.
    pub severity: Severity,
}

/// What will happen to one validator.
#[derive(Debug)]
pub enum Disposition {
    /// It runs on these subjects.
    Run {
        /// The subjects.
        expansion: Expansion,
        /// Parameters after overrides.
        params: BTreeMap<String, f64>,
        /// Thresholds after overrides and `when`.
        limits: Vec<Limit>,
    },
    /// It does not apply (or the blueprint skips it): why.
    Skip(String),
    /// It cannot run at all (e.g. no controller): why.
    Fail(String),
}

/// One validator and what will happen to it.
#[derive(Debug)]
pub struct Planned<'a> {
    /// The validator.
    pub spec: &'a ValidatorSpec,
    /// What will happen.
    pub disposition: Disposition,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// One result per validator, in run order.
    pub validators: Vec<ValidatorResult>,
    /// The verdict each validator gave each node, where it can be attributed to the
    /// node (`node → validator id → passed | failed`).
    pub node_verdicts: BTreeMap<String, BTreeMap<String, Verdict>>,
}

#[cfg(test)]
mod tests;
