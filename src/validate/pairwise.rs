//! The second pass of a pairwise test: which node of a failing pair is bad.
//!
//! Stage: validate (pure). Input: the outcomes of the first pass (pairs of nodes
//! that passed, failed, or could not run). Output: the pairs to re-test — every
//! suspect with a known-good partner — and, once they ran, the verdict per node.
//!
//! This is Google Cluster Health Scanner's bisection (`nccl_runner.py`,
//! `determine_failed_components`): a pair failing says one of two nodes is bad; the
//! node is bad if it fails again with a node that passed. A node that passed in any
//! pair is never failed (nodes cannot move from passed to failed), and a suspect
//! that could not be re-tested (no good node, or the re-test did not run) stays
//! failed. Pairs that could not run (`error`) are no evidence either way.

use std::collections::BTreeSet;

/// How one pair did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairOutcome {
    /// Every threshold met.
    Passed,
    /// A threshold missed.
    Failed,
    /// Did not run or could not be read: no evidence about either node.
    Error,
}

/// One pair's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairResult {
    /// The first node.
    pub first: String,
    /// The second node.
    pub second: String,
    /// How it did.
    pub outcome: PairOutcome,
}

impl PairResult {
    /// A result for `first`+`second`.
    #[must_use]
    pub fn new(first: &str, second: &str, outcome: PairOutcome) -> Self {
        Self { first: first.to_owned(), second: second.to_owned(), outcome }
    }

    fn nodes(&self) -> [&str; 2] {
        [&self.first, &self.second]
    }
}

/// The verdict per node after both passes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judgement {
    /// Nodes shown good: in a passing pair in either pass.
    pub passed: BTreeSet<String>,
    /// Nodes shown bad: failed on the first pass and not cleared by the second.
    pub failed: BTreeSet<String>,
}

/// Nodes in a failing pair and in no passing pair, in order of first appearance.
#[must_use]
pub fn suspects(first_pass: &[PairResult]) -> Vec<String> {
    let passed = nodes_with(first_pass, PairOutcome::Passed);
    let mut seen = BTreeSet::new();
    first_pass
        .iter()
        .filter(|pair| pair.outcome == PairOutcome::Failed)
        .flat_map(PairResult::nodes)
        .filter(|node| !passed.contains(*node) && seen.insert(*node))
        .map(str::to_owned)
        .collect()
}

/// The re-tests: each suspect with a node that passed, partners taken in turn so the
/// load spreads. Empty when no node passed (there is no reference to compare with).
#[must_use]
pub fn second_pass(first_pass: &[PairResult]) -> Vec<(String, String)> {
    let mut good: Vec<&str> = Vec::new();
    for pair in first_pass.iter().filter(|pair| pair.outcome == PairOutcome::Passed) {
        for node in pair.nodes() {
            if !good.contains(&node) {
                good.push(node);
            }
        }
    }
    if good.is_empty() {
        return Vec::new();
    }
    suspects(first_pass)
        .into_iter()
        .enumerate()
        .map(|(turn, suspect)| {
            let partner = good[turn % good.len()];
            (suspect, partner.to_owned())
        })
        .collect()
}

/// Combines both passes (CHS `determine_failed_components`).
#[must_use]
pub fn judge(first_pass: &[PairResult], second: &[PairResult]) -> Judgement {
    let first_failed = nodes_with(first_pass, PairOutcome::Failed);
    let mut passed: BTreeSet<String> =
        nodes_with(first_pass, PairOutcome::Passed).into_iter().map(str::to_owned).collect();
    passed.extend(nodes_with(second, PairOutcome::Passed).into_iter().map(str::to_owned));
    // A known-good partner in a failing re-test did not fail: only first-pass suspects can.
    let mut failed: BTreeSet<String> = nodes_with(second, PairOutcome::Failed)
        .into_iter()
        .filter(|node| first_failed.contains(node))
        .map(str::to_owned)
        .collect();
    // Suspects never re-tested, or whose re-test could not run, stay failed.
    failed.extend(first_failed.into_iter().filter(|node| !passed.contains(*node)).map(str::to_owned));
    failed.retain(|node| !passed.contains(node));
    Judgement { passed, failed }
}

fn nodes_with(pairs: &[PairResult], outcome: PairOutcome) -> BTreeSet<&str> {
    pairs.iter().filter(|pair| pair.outcome == outcome).flat_map(PairResult::nodes).collect()
}

#[cfg(test)]
mod tests {
    use super::PairOutcome::{Error, Failed, Passed};
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn one_bad_node_is_named_after_the_second_pass() {
        // node03 is bad: its pair fails; node04 is dragged down with it.
        let first = [
            PairResult::new("node01", "node02", Passed),
            PairResult::new("node03", "node04", Failed),
            PairResult::new("node05", "node06", Passed),
        ];
        assert_eq!(suspects(&first), ["node03", "node04"]);
        let retests = second_pass(&first);
        assert_eq!(retests, [("node03".to_owned(), "node01".to_owned()), ("node04".to_owned(), "node02".to_owned())]);
        let second = [PairResult::new("node03", "node01", Failed), PairResult::new("node04", "node02", Passed)];
        let judgement = judge(&first, &second);
        assert_eq!(judgement.failed, set(&["node03"]));
        assert_eq!(judgement.passed, set(&["node01", "node02", "node04", "node05", "node06"]));
    }

    #[test]
    fn a_known_good_partner_is_never_failed_and_a_flaky_pair_is_cleared() {
        let first = [PairResult::new("a", "b", Passed), PairResult::new("c", "d", Failed)];
        // Both re-tests pass: the first failure was not either node's fault.
        let second = [PairResult::new("c", "a", Passed), PairResult::new("d", "b", Passed)];
        assert!(judge(&first, &second).failed.is_empty());
        // Both re-tests fail: both suspects are bad, the good partners stay good.
        let second = [PairResult::new("c", "a", Failed), PairResult::new("d", "b", Failed)];
        let judgement = judge(&first, &second);
        assert_eq!(judgement.failed, set(&["c", "d"]));
        assert!(judgement.passed.contains("a") && judgement.passed.contains("b"));
    }

    #[test]
    fn suspects_without_a_good_node_or_a_retest_stay_failed() {
        let first = [PairResult::new("a", "b", Failed), PairResult::new("c", "d", Failed)];
        assert!(second_pass(&first).is_empty(), "nothing to compare with");
        assert_eq!(judge(&first, &[]).failed, set(&["a", "b", "c", "d"]));
        let first = [PairResult::new("a", "b", Passed), PairResult::new("c", "d", Failed)];
        let second = [PairResult::new("c", "a", Error), PairResult::new("d", "b", Passed)];
        assert_eq!(judge(&first, &second).failed, set(&["c"]), "c's re-test did not run: it stays suspect");
    }

    #[test]
    fn errors_are_no_evidence_and_ring_passes_clear_nodes() {
        let first =
            [PairResult::new("a", "b", Error), PairResult::new("b", "c", Passed), PairResult::new("c", "a", Failed)];
        // c passed with b, so only a is a suspect; a is re-tested with b or c.
        assert_eq!(suspects(&first), ["a"]);
        assert_eq!(second_pass(&first), [("a".to_owned(), "b".to_owned())]);
        let judgement = judge(&first, &[PairResult::new("a", "b", Failed)]);
        assert_eq!(judgement.failed, set(&["a"]));
        assert!(!judgement.failed.contains("b"), "b passed with c: it cannot move to failed");
    }
}
