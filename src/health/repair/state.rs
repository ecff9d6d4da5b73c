//! The repair service's state file: what each node in repair is at (step, since when,
//! the steps taken), the nodes sent to RMA, when each node's repairs started (for the
//! daily budget) and the finished repairs with their time to repair. The service on
//! the controller writes it atomically (temporary file, rename) after every change;
//! `toolkit status` reads it over SSH.
//!
//! Stage: health (pure data). Input: the file's JSON. Output: [`State`], and the lines
//! `toolkit status` prints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::blueprint::schema::RepairStep;

/// The file's format version.
pub const VERSION: u32 = 1;

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// [`VERSION`].
    #[serde(default)]
    pub version: u32,
    /// Nodes in repair, by name.
    #[serde(default)]
    pub nodes: BTreeMap<String, InRepair>,
    /// Nodes left drained for a hardware ticket, by name.
    #[serde(default)]
    pub rma: BTreeMap<String, InRma>,
    /// When each node's repairs started (seconds since the epoch), the last day's.
    #[serde(default)]
    pub starts: BTreeMap<String, Vec<u64>>,
    /// Finished repairs, oldest first (the service keeps the last 1,000).
    #[serde(default)]
    pub history: Vec<Finished>,
}

/// One node on its ladder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InRepair {
    /// The check whose ladder runs.
    pub check: String,
    /// The health reason's detail when the repair started.
    pub detail: String,
    /// The step in progress.
    pub step: RepairStep,
    /// How that step went so far.
    pub outcome: Outcome,
    /// When the step was taken.
    pub since: u64,
    /// When Slurm drained the node (the reason's time).
    pub drained_at: u64,
    /// Every step taken, in order.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
}

/// How a step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Taken; the node's checks have not resumed it yet.
    Running,
    /// Ran and passed (diagnostics); waiting for the checks.
    Passed,
    /// Could not run or failed (no BMC, SSH refused, diagnostics failed).
    Failed,
}

/// One step taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step.
    pub step: RepairStep,
    /// When (seconds since the epoch).
    pub at: u64,
    /// How it went.
    pub outcome: Outcome,
    /// What the step's command said, shortened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// A node in RMA: what `toolkit:rma <check>: <detail>` says, and the ladder behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InRma {
    /// The check.
    pub check: String,
    /// The failure's detail.
    pub detail: String,
    /// Why it went to RMA.
    pub why: String,
    /// When.
    pub since: u64,
    /// When Slurm drained it.
    pub drained_at: u64,
    /// The steps taken before.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
}

/// A repair that ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// Node.
    pub node: String,
    /// The check.
    pub check: String,
    /// `resumed` (its checks passed), `rma`, or `released` (someone else took it).
    pub outcome: String,
    /// When Slurm drained it.
    pub drained_at: u64,
    /// When the repair ended.
    pub ended: u64,
    /// Drain → resume, for a resumed node: its time to repair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mttr_seconds: Option<u64>,
    /// The steps taken.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
}

impl State {
    /// `(node, what)` lines for `toolkit status`: nodes in repair with their step and
    /// since when, nodes in RMA with why.
    #[must_use]
    pub fn lines(&self, now: u64) -> Vec<(String, String)> {
        let mut lines = Vec::new();
        for (node, entry) in &self.nodes {
            let taken: Vec<&str> = entry.steps.iter().map(|record| record.step.as_str()).collect();
            let taken = if taken.is_empty() { String::new() } else { format!("; steps taken {}", taken.join(" → ")) };
            lines.push((
                node.clone(),
                format!(
                    "in repair for {}: {} ({}) for {} s{taken}",
                    entry.check,
                    entry.step.as_str(),
                    outcome_word(entry.outcome),
                    now.saturating_sub(entry.since),
                ),
            ));
        }
        for (node, entry) in &self.rma {
            lines.push((node.clone(), format!("RMA for {}: {} ({})", entry.check, entry.detail, entry.why)));
        }
        lines
    }
}

const fn outcome_word(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Running => "running",
        Outcome::Passed => "passed",
        Outcome::Failed => "failed",
    }
}
