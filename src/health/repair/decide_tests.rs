use std::collections::BTreeMap;

use super::*;
use crate::health::repair::state::{InRepair, Outcome, State, StepRecord};
use crate::health::repair::{Policy, RMA_PREFIX};

use RepairStep::{Diagnose, PowerCycle, Reboot, Relink, Rma};

const NOW: u64 = 1_800_000_000;

pub(crate) fn policy() -> Policy {
    Policy {
        max_in_repair: 1,
        max_repairs_per_day: 3,
        interval_seconds: 30,
        settle_seconds: 600,
        diagnose: "true".to_owned(),
        ladders: BTreeMap::from([
            ("rail-links".to_owned(), vec![Relink, Reboot, PowerCycle, Diagnose, Rma]),
            ("gpu-inventory".to_owned(), vec![Reboot, PowerCycle, Diagnose, Rma]),
        ]),
        rails: BTreeMap::new(),
        bmcs: BTreeMap::new(),
    }
}

fn seen(node: &str, state: &str, reason: &str) -> Observed {
    Observed { node: node.to_owned(), state: state.to_owned(), reason: reason.to_owned() }
}

fn rail_down(node: &str) -> Observed {
    seen(node, "IDLE+DRAIN", "toolkit:health rail-links: rail1 down, MTU 9000 (planned up, MTU 9000)")
}

/// A node at `step`, taken at `since`, with `outcome`.
fn at(step: RepairStep, outcome: Outcome, since: u64) -> InRepair {
    InRepair {
        outcome,
        steps: vec![StepRecord { step, at: since, outcome, note: String::new() }],
        ..recorded(step, since)
    }
}

/// A node whose `step` was recorded at `since` but not taken yet.
fn recorded(step: RepairStep, since: u64) -> InRepair {
    InRepair {
        check: "rail-links".to_owned(),
        detail: "rail1 down".to_owned(),
        step,
        outcome: Outcome::Running,
        since,
        drained_at: since - 30,
        steps: vec![],
    }
}

fn with(node: &str, entry: InRepair) -> State {
    State { nodes: BTreeMap::from([(node.to_owned(), entry)]), ..State::default() }
}

fn start(node: &str, check: &str, detail: &str, step: RepairStep) -> Action {
    Action::Start { node: node.to_owned(), check: check.to_owned(), detail: detail.to_owned(), step }
}

fn next(node: &str, step: RepairStep) -> Action {
    Action::Next { node: node.to_owned(), step }
}

fn rma(node: &str, why: &str) -> Action {
    Action::Rma {
        node: node.to_owned(),
        check: "rail-links".to_owned(),
        detail: "rail1 down".to_owned(),
        why: why.to_owned(),
    }
}

fn wait(node: &str, why: &str) -> Action {
    Action::Wait { node: node.to_owned(), why: why.to_owned() }
}

/// Every case as (name, policy, observed, state, now, expected actions): the Rust
/// decision is checked against the expectation here, and the service's Python
/// decision against the same table (`resources::tests`).
/// One case: (name, policy, observed, state, now, expected actions).
pub(crate) type Case = (&'static str, Policy, Vec<Observed>, State, u64, Vec<Action>);

pub(crate) fn cases() -> Vec<Case> {
    let detail = "rail1 down, MTU 9000 (planned up, MTU 9000)";
    let mut overridden = policy();
    overridden.ladders.insert("rail-links".to_owned(), vec![Reboot, Diagnose, Rma]);
    let mut two = policy();
    two.max_in_repair = 2;
    let flapping = State {
        starts: BTreeMap::from([("node02".to_owned(), vec![NOW - 80_000, NOW - 40_000, NOW - 100])]),
        ..State::default()
    };
    let long_ago = State {
        starts: BTreeMap::from([("node02".to_owned(), vec![NOW - 90_000, NOW - 88_000, NOW - 87_000])]),
        ..State::default()
    };
    vec![
        // Ladder selection per check.
        (
            "a down rail starts with relink",
            policy(),
            vec![rail_down("node02")],
            State::default(),
            NOW,
            vec![start("node02", "rail-links", detail, Relink)],
        ),
        (
            "a missing GPU starts with a reboot",
            policy(),
            vec![seen("node02", "IDLE+DRAIN", "toolkit:health gpu-inventory: 7 GPUs (planned 8)")],
            State::default(),
            NOW,
            vec![start("node02", "gpu-inventory", "7 GPUs (planned 8)", Reboot)],
        ),
        (
            "the blueprint's ladder replaces the validator's",
            overridden,
            vec![rail_down("node02")],
            State::default(),
            NOW,
            vec![start("node02", "rail-links", detail, Reboot)],
        ),
        (
            "the first failing check with a ladder is repaired",
            policy(),
            vec![seen("node02", "IDLE+DRAIN", "toolkit:health mounts,gpu-inventory: /scratch missing")],
            State::default(),
            NOW,
            vec![start("node02", "gpu-inventory", "/scratch missing", Reboot)],
        ),
        (
            "a check without a ladder is left to people",
            policy(),
            vec![seen("node02", "IDLE+DRAIN", "toolkit:health mounts: /scratch missing")],
            State::default(),
            NOW,
            vec![wait("node02", "no repair ladder for mounts: left to people")],
        ),
        // Per attempt.
        (
            "a step is given its settle time",
            policy(),
            vec![rail_down("node02")],
            with("node02", at(Relink, Outcome::Running, NOW - 100)),
            NOW,
            vec![wait("node02", "relink settling, 500 s left")],
        ),
        (
            "a settled step that did not help leads to the next",
            policy(),
            vec![rail_down("node02")],
            with("node02", at(Relink, Outcome::Running, NOW - 600)),
            NOW,
            vec![next("node02", Reboot)],
        ),
        (
            "a reboot that never came back leads to the power cycle",
            policy(),
            vec![seen("node02", "DOWN*+DRAIN", "toolkit:health rail-links: rail1 down")],
            with("node02", at(Reboot, Outcome::Running, NOW - 601)),
            NOW,
            vec![next("node02", PowerCycle)],
        ),
        (
            "a step that could not run leads to the next at once",
            policy(),
            vec![rail_down("node02")],
            with("node02", at(PowerCycle, Outcome::Failed, NOW - 5)),
            NOW,
            vec![next("node02", Diagnose)],
        ),
        (
            "failed diagnostics go to RMA at once",
            policy(),
            vec![rail_down("node02")],
            with("node02", at(Diagnose, Outcome::Failed, NOW - 5)),
            NOW,
            vec![rma("node02", "diagnostics failed")],
        ),
        (
            "passed diagnostics wait for the checks, then RMA",
            policy(),
            vec![rail_down("node02")],
            with("node02", at(Diagnose, Outcome::Passed, NOW - 600)),
            NOW,
            vec![rma("node02", "the ladder ended: diagnose did not bring it back")],
        ),
        (
            "the node's checks resumed it",
            policy(),
            vec![seen("node02", "IDLE", "")],
            with("node02", at(Reboot, Outcome::Running, NOW - 50)),
            NOW,
            vec![Action::Resolved { node: "node02".to_owned() }],
        ),
        (
            "a step recorded but never taken is taken",
            policy(),
            vec![rail_down("node02")],
            with("node02", recorded(Reboot, NOW - 5)),
            NOW,
            vec![next("node02", Reboot)],
        ),
        (
            "a step taken, then the next recorded and not taken",
            policy(),
            vec![rail_down("node02")],
            with("node02", InRepair { step: PowerCycle, ..at(Reboot, Outcome::Running, NOW - 700) }),
            NOW,
            vec![next("node02", PowerCycle)],
        ),
        // Budgets.
        (
            "one node at a time",
            policy(),
            vec![rail_down("node02"), rail_down("node01")],
            State::default(),
            NOW,
            vec![
                start("node01", "rail-links", detail, Relink),
                wait("node02", "budget: 1 node(s) in repair (max_in_repair 1)"),
            ],
        ),
        (
            "a node in repair holds the slot",
            policy(),
            vec![rail_down("node01"), rail_down("node03")],
            with("node01", at(Reboot, Outcome::Running, NOW - 10)),
            NOW,
            vec![
                wait("node01", "reboot settling, 590 s left"),
                wait("node03", "budget: 1 node(s) in repair (max_in_repair 1)"),
            ],
        ),
        (
            "two at a time",
            two,
            vec![rail_down("node02"), rail_down("node01"), rail_down("node03")],
            State::default(),
            NOW,
            vec![
                start("node01", "rail-links", detail, Relink),
                start("node02", "rail-links", detail, Relink),
                wait("node03", "budget: 2 node(s) in repair (max_in_repair 2)"),
            ],
        ),
        (
            "a flapping node goes to RMA",
            policy(),
            vec![rail_down("node02")],
            flapping,
            NOW,
            vec![Action::Rma {
                node: "node02".to_owned(),
                check: "rail-links".to_owned(),
                detail: detail.to_owned(),
                why: "flapping: 3 repairs in 24 h (max_repairs_per_day 3)".to_owned(),
            }],
        ),
        (
            "repairs older than a day do not count",
            policy(),
            vec![rail_down("node02")],
            long_ago,
            NOW,
            vec![start("node02", "rail-links", detail, Relink)],
        ),
        // Hands off.
        (
            "an operator's drain is never touched",
            policy(),
            vec![seen("node03", "IDLE+DRAIN", "bad DIMM, ticket 4411"), seen("node04", "IDLE", "")],
            State::default(),
            NOW,
            vec![],
        ),
        (
            "a node taken over mid-ladder is let go",
            policy(),
            vec![seen("node02", "IDLE+DRAIN", "bad DIMM, ticket 4411")],
            with("node02", at(Reboot, Outcome::Running, NOW - 10)),
            NOW,
            vec![Action::Released {
                node: "node02".to_owned(),
                why: "drained by someone else: `bad DIMM, ticket 4411`".to_owned(),
            }],
        ),
        (
            "a rollout's drain is not ours",
            policy(),
            vec![seen("node02", "IDLE+DRAIN", "toolkit:rollout 7 reboot: driver")],
            State::default(),
            NOW,
            vec![],
        ),
        (
            "a node still running jobs is not acted on",
            policy(),
            vec![seen("node02", "MIXED+DRAIN", "toolkit:health rail-links: rail1 down")],
            State::default(),
            NOW,
            vec![wait("node02", "draining: jobs still run")],
        ),
        (
            "nor given its next step",
            policy(),
            vec![seen("node02", "ALLOCATED+DRAIN", "toolkit:health rail-links: rail1 down")],
            with("node02", at(Relink, Outcome::Running, NOW - 700)),
            NOW,
            vec![wait("node02", "draining: jobs still run")],
        ),
        (
            "an RMA node stays as it is",
            policy(),
            vec![seen("node02", "IDLE+DRAIN", &format!("{RMA_PREFIX} rail-links: rail1 down"))],
            State::default(),
            NOW,
            vec![],
        ),
    ]
}

#[test]
fn every_case_decides_as_expected() {
    for (name, policy, observed, state, now, expected) in cases() {
        assert_eq!(decide(&policy, &observed, &state, now), expected, "{name}");
    }
}

#[test]
fn drained_and_empty_follows_slurm() {
    assert!(seen("n", "IDLE+DRAIN", "").drained_and_empty());
    assert!(seen("n", "DOWN*+DRAIN+REBOOT_ISSUED", "").drained_and_empty());
    assert!(seen("n", "IDLE+DRAIN+COMPLETING", "").drained());
    assert!(!seen("n", "IDLE+DRAIN+COMPLETING", "").drained_and_empty());
    assert!(!seen("n", "MIXED+DRAIN", "").drained_and_empty());
    assert!(!seen("n", "IDLE", "").drained());
}

#[test]
fn the_rma_reason_names_the_check_and_fits_slurm() {
    assert_eq!(super::super::rma_reason("rail-links", "rail1 down"), "toolkit:rma rail-links: rail1 down");
    let long = super::super::rma_reason("gpu-health", &"é".repeat(300));
    assert!(long.len() <= 200 && long.starts_with("toolkit:rma gpu-health: é"), "{long}");
}
