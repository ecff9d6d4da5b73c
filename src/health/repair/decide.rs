//! One pass of the repair service, as a decision: what to do with each node given what
//! Slurm shows now and what the service recorded. Level-triggered — nothing but the
//! observed state and the state file decide — so a service restarted anywhere (a
//! controller reboot mid-ladder) carries on where the state file says it was.
//!
//! Stage: health (pure). Input: the [`Policy`], the nodes as `scontrol show node -o`
//! shows them ([`Observed`]), the [`State`] and the time. Output: one [`Action`] per
//! node that needs one, in node order. The service on the controller
//! (`templates/health/toolkit-repair.py`) makes the same decisions; a test feeds both
//! the same cases so they cannot drift.
//!
//! Rules: a step acts only on a node that is drained and empty with toolkit's health
//! reason (`toolkit:health …`); any other reason (an operator's, a rollout's) is never
//! touched, and a node someone else takes over mid-ladder is let go. At most
//! `max_in_repair` nodes are in repair at once; a node that starts more than
//! `max_repairs_per_day` repairs in 24 h goes to RMA. A step is given `settle` seconds
//! for the node's own checks to pass and resume it; otherwise the next step is taken. A
//! step that could not run (no BMC) passes to the next at once; failed diagnostics go
//! to RMA at once. A step recorded but never taken (the service stopped in between) is
//! taken again.

use serde::{Deserialize, Serialize};

use super::state::{Outcome, State};
use super::{HEALTH_PREFIX, Policy, RMA_PREFIX};
use crate::blueprint::schema::RepairStep;

/// Seconds in the window of `max_repairs_per_day`.
pub const DAY_SECONDS: u64 = 86_400;

/// One node as `scontrol show node -o` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// Node name.
    pub node: String,
    /// `State=` (`IDLE+DRAIN`, `DOWN+DRAIN+REBOOT_ISSUED`, `MIXED+DRAIN`, `IDLE*+DRAIN`).
    pub state: String,
    /// `Reason=` without the `[user@time]` suffix; empty when none.
    #[serde(default)]
    pub reason: String,
}

impl Observed {
    /// DRAIN is set.
    #[must_use]
    pub fn drained(&self) -> bool {
        self.flags().any(|flag| flag == "DRAIN")
    }

    /// DRAIN is set and nothing runs: no job allocated, none completing (Slurm's
    /// `DRAINED`, which a DOWN+DRAIN node also is).
    #[must_use]
    pub fn drained_and_empty(&self) -> bool {
        self.drained() && !self.flags().any(|flag| matches!(flag, "ALLOCATED" | "MIXED" | "COMPLETING"))
    }

    fn flags(&self) -> impl Iterator<Item = &str> {
        // `IDLE*`: not responding; the marks after a base state are not flags.
        self.state.split('+').map(|flag| flag.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
    }

    /// Drained by toolkit's health checks: `(checks, detail)` of `toolkit:health <checks>: <detail>`.
    #[must_use]
    pub fn health_drain(&self) -> Option<(Vec<&str>, &str)> {
        let rest = self.reason.strip_prefix(HEALTH_PREFIX)?.strip_prefix(' ')?;
        let (checks, detail) = rest.split_once(':').unwrap_or((rest, ""));
        Some((checks.split(',').map(str::trim).filter(|c| !c.is_empty()).collect(), detail.trim()))
    }
}

/// What the service does with one node in this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Start the ladder of `check` at its first step.
    Start {
        /// Node.
        node: String,
        /// The failing check whose ladder runs.
        check: String,
        /// The health reason's detail.
        detail: String,
        /// The first step.
        step: RepairStep,
    },
    /// The step in progress did not bring the node back: take the next one.
    Next {
        /// Node.
        node: String,
        /// The step to take (never `rma`: that is [`Action::Rma`]).
        step: RepairStep,
    },
    /// Leave the node drained for a hardware ticket (`toolkit:rma <check>: <detail>`).
    Rma {
        /// Node.
        node: String,
        /// The check that sent it.
        check: String,
        /// The failure's detail.
        detail: String,
        /// Why now (`the ladder ended`, `flapping: …`, `diagnostics failed`).
        why: String,
    },
    /// The node's checks passed and it resumed itself: the repair is over.
    Resolved {
        /// Node.
        node: String,
    },
    /// Someone else holds the node now (another reason, or it was resumed by hand mid
    /// step and drained again): the service lets it go.
    Released {
        /// Node.
        node: String,
        /// What it saw.
        why: String,
    },
    /// Nothing to do yet, and why (still draining, the budget, a step settling).
    Wait {
        /// Node.
        node: String,
        /// Why.
        why: String,
    },
}

impl Action {
    /// The node the action is about.
    #[must_use]
    pub fn node(&self) -> &str {
        match self {
            Self::Start { node, .. }
            | Self::Next { node, .. }
            | Self::Rma { node, .. }
            | Self::Resolved { node }
            | Self::Released { node, .. }
            | Self::Wait { node, .. } => node,
        }
    }
}

/// The actions of one pass at `now` (seconds since the epoch), in node order.
#[must_use]
pub fn decide(policy: &Policy, observed: &[Observed], state: &State, now: u64) -> Vec<Action> {
    let mut nodes: Vec<&Observed> = observed.iter().collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let mut in_repair = state.nodes.len();
    let mut actions = Vec::new();
    for seen in nodes {
        let node = seen.node.clone();
        if let Some(entry) = state.nodes.get(&node) {
            actions.push(ongoing(policy, seen, entry, now));
            continue;
        }
        // RMA nodes stay as they are; anything not drained by toolkit's checks is not ours.
        if seen.reason.starts_with(RMA_PREFIX) || !seen.drained() {
            continue;
        }
        let Some((checks, detail)) = seen.health_drain() else { continue };
        let Some((check, ladder)) = checks.iter().find_map(|check| Some((*check, policy.ladder(check)?))) else {
            actions
                .push(Action::Wait { node, why: format!("no repair ladder for {}: left to people", checks.join(",")) });
            continue;
        };
        if !seen.drained_and_empty() {
            actions.push(Action::Wait { node, why: "draining: jobs still run".to_owned() });
            continue;
        }
        let recent =
            state.starts.get(&node).map_or(0, |starts| starts.iter().filter(|&&at| at + DAY_SECONDS > now).count());
        if recent >= policy.max_repairs_per_day as usize {
            let why =
                format!("flapping: {recent} repairs in 24 h (max_repairs_per_day {})", policy.max_repairs_per_day);
            actions.push(Action::Rma { node, check: check.to_owned(), detail: detail.to_owned(), why });
            continue;
        }
        if in_repair >= policy.max_in_repair as usize {
            let why = format!("budget: {in_repair} node(s) in repair (max_in_repair {})", policy.max_in_repair);
            actions.push(Action::Wait { node, why });
            continue;
        }
        in_repair += 1;
        let (check, detail) = (check.to_owned(), detail.to_owned());
        actions.push(match ladder.first() {
            Some(&step) if step != RepairStep::Rma => Action::Start { node, check, detail, step },
            _ => Action::Rma { node, check, detail, why: "the ladder has no step before rma".to_owned() },
        });
    }
    actions
}

/// A node the service is repairing.
fn ongoing(policy: &Policy, seen: &Observed, entry: &super::state::InRepair, now: u64) -> Action {
    let node = seen.node.clone();
    if !seen.drained() {
        return Action::Resolved { node };
    }
    if seen.health_drain().is_none() {
        let why = format!("drained by someone else: `{}`", seen.reason);
        return Action::Released { node, why };
    }
    let rma =
        |why: String| Action::Rma { node: node.clone(), check: entry.check.clone(), detail: entry.detail.clone(), why };
    // Recorded but never taken: the service stopped between writing the step and
    // taking it (a controller restart). Take it now rather than wait on a step that
    // never happened.
    if entry.steps.last().is_none_or(|record| record.step != entry.step) && seen.drained_and_empty() {
        return Action::Next { node, step: entry.step };
    }
    match entry.outcome {
        Outcome::Failed if entry.step == RepairStep::Diagnose => return rma("diagnostics failed".to_owned()),
        Outcome::Failed => {}
        Outcome::Running | Outcome::Passed => {
            if now < entry.since + policy.settle_seconds {
                let left = entry.since + policy.settle_seconds - now;
                return Action::Wait { node, why: format!("{} settling, {left} s left", entry.step.as_str()) };
            }
        }
    }
    // Only when empty: a node drained and given jobs back by hand is not acted on.
    if !seen.drained_and_empty() {
        return Action::Wait { node, why: "draining: jobs still run".to_owned() };
    }
    let ladder = policy.ladder(&entry.check).unwrap_or(&[]);
    let at = ladder.iter().position(|step| *step == entry.step).map_or(ladder.len(), |at| at + 1);
    match ladder.get(at) {
        Some(&step) if step != RepairStep::Rma => Action::Next { node, step },
        _ => rma(format!("the ladder ended: {} did not bring it back", entry.step.as_str())),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
pub(crate) mod tests;
