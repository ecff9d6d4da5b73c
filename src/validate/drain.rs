//! Draining nodes that failed acceptance in Slurm, and resuming them once they pass,
//! without ever touching a node a person drained.
//!
//! Stage: validate (pure, after the run). Input: the nodes' current Slurm state
//! (`scontrol show node`, read by the `scontrol-node` parser) and the verdict each
//! validator gave each node. Output: [`Action`]s, each one `scontrol update`
//! command for the controller.
//!
//! Toolkit owns exactly the drains whose reason starts with [`REASON_PREFIX`]
//! (`toolkit:gpu-health,nccl-pairwise`), as LBNL NHC owns `NHC:` reasons: a failing
//! node is drained with the ids of the validators it failed; a node drained by
//! toolkit is resumed only when every validator named in its reason ran again and
//! the node passed it; a node drained for any other reason keeps its reason and its
//! state, whatever toolkit found.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use crate::results::Verdict;

/// The start of every drain reason toolkit sets.
pub const REASON_PREFIX: &str = "toolkit:";

/// A node's drain state in Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Node name.
    pub name: String,
    /// Drained or draining.
    pub drained: bool,
    /// The reason Slurm records, without the `[user@time]` suffix.
    pub reason: Option<String>,
}

/// One change to a node's Slurm state (or a deliberate non-change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Drain the node (or update toolkit's reason on it).
    Drain {
        /// Node.
        node: String,
        /// `toolkit:<ids>`.
        reason: String,
    },
    /// Resume a node toolkit drained, now that it passes.
    Resume {
        /// Node.
        node: String,
        /// The reason it was drained for.
        was: String,
    },
    /// A failing node someone else drained: left as it is.
    LeaveAlone {
        /// Node.
        node: String,
        /// Their reason.
        reason: String,
        /// What toolkit found.
        failed: String,
    },
    /// A failing node Slurm does not know.
    Unknown {
        /// Node.
        node: String,
    },
}

impl Action {
    /// The `scontrol` command, for actions that change something.
    #[must_use]
    pub fn argv(&self) -> Option<Vec<String>> {
        let words: Vec<String> = match self {
            Self::Drain { node, reason } => {
                vec![
                    "update".to_owned(),
                    format!("nodename={node}"),
                    "state=drain".to_owned(),
                    format!("reason={reason}"),
                ]
            }
            Self::Resume { node, .. } => {
                vec!["update".to_owned(), format!("nodename={node}"), "state=resume".to_owned()]
            }
            Self::LeaveAlone { .. } | Self::Unknown { .. } => return None,
        };
        Some(std::iter::once("scontrol".to_owned()).chain(words).collect())
    }
}

impl fmt::Display for Action {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Drain { node, reason } => write!(formatter, "drain {node} (reason {reason})"),
            Self::Resume { node, was } => write!(formatter, "resume {node} (drained for {was}, now passes)"),
            Self::LeaveAlone { node, reason, failed } => {
                write!(formatter, "leave {node} as it is: drained by someone else (`{reason}`); it failed {failed}")
            }
            Self::Unknown { node } => write!(formatter, "cannot drain {node}: Slurm does not know it"),
        }
    }
}

/// Reads node states from the `scontrol-node` parser's output.
///
/// # Errors
/// When the value does not have the parser's shape.
pub fn node_states(parsed: &serde_json::Value) -> Result<Vec<NodeState>, String> {
    #[derive(Deserialize)]
    struct Parsed {
        nodes: Vec<Node>,
    }
    #[derive(Deserialize)]
    struct Node {
        name: String,
        #[serde(default)]
        drain: bool,
        #[serde(default)]
        reason: Option<String>,
    }
    let parsed: Parsed = serde_json::from_value(parsed.clone())
        .map_err(|error| format!("the Slurm node list does not have the expected shape: {error}"))?;
    Ok(parsed
        .nodes
        .into_iter()
        .map(|node| NodeState {
            name: node.name,
            drained: node.drain,
            reason: node.reason.map(|reason| strip_set_by(&reason)).filter(|reason| !reason.is_empty()),
        })
        .collect())
}

/// `toolkit:x [root@2026-11-21T09:30:00]` → `toolkit:x`.
fn strip_set_by(reason: &str) -> String {
    let reason = reason.trim();
    match reason.rfind(" [") {
        Some(at) if reason.ends_with(']') => reason[..at].trim_end().to_owned(),
        _ => reason.to_owned(),
    }
}

/// The validator ids in a toolkit reason; `None` for a reason toolkit did not set.
#[must_use]
pub fn owned_ids(reason: &str) -> Option<BTreeSet<String>> {
    let ids = reason.strip_prefix(REASON_PREFIX)?;
    Some(ids.split(',').map(str::trim).filter(|id| !id.is_empty()).map(str::to_owned).collect())
}

/// What to change, given each node's verdicts (`node → validator → verdict`, only
/// verdicts that can be attributed to the node) and Slurm's view of the nodes.
#[must_use]
pub fn plan(states: &[NodeState], verdicts: &BTreeMap<String, BTreeMap<String, Verdict>>) -> Vec<Action> {
    let by_name: BTreeMap<&str, &NodeState> = states.iter().map(|state| (state.name.as_str(), state)).collect();
    let mut actions = Vec::new();
    for (node, found) in verdicts {
        let failed: BTreeSet<&str> =
            found.iter().filter(|(_, verdict)| **verdict == Verdict::Failed).map(|(id, _)| id.as_str()).collect();
        let Some(state) = by_name.get(node.as_str()) else {
            if !failed.is_empty() {
                actions.push(Action::Unknown { node: node.clone() });
            }
            continue;
        };
        let current = state.reason.as_deref().filter(|_| state.drained);
        if !failed.is_empty() {
            let reason = format!("{REASON_PREFIX}{}", failed.iter().copied().collect::<Vec<_>>().join(","));
            match current {
                None => actions.push(Action::Drain { node: node.clone(), reason }),
                Some(existing) if owned_ids(existing).is_some() => {
                    if existing != reason {
                        actions.push(Action::Drain { node: node.clone(), reason });
                    }
                }
                Some(existing) => actions.push(Action::LeaveAlone {
                    node: node.clone(),
                    reason: existing.to_owned(),
                    failed: failed.iter().copied().collect::<Vec<_>>().join(", "),
                }),
            }
            continue;
        }
        if let Some(existing) = current
            && let Some(ids) = owned_ids(existing)
            && !ids.is_empty()
            && ids.iter().all(|id| found.get(id) == Some(&Verdict::Passed))
        {
            actions.push(Action::Resume { node: node.clone(), was: existing.to_owned() });
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, drained: bool, reason: Option<&str>) -> NodeState {
        NodeState { name: name.to_owned(), drained, reason: reason.map(str::to_owned) }
    }

    fn verdicts(entries: &[(&str, &str, Verdict)]) -> BTreeMap<String, BTreeMap<String, Verdict>> {
        let mut out: BTreeMap<String, BTreeMap<String, Verdict>> = BTreeMap::new();
        for (node, id, verdict) in entries {
            out.entry((*node).to_owned()).or_default().insert((*id).to_owned(), *verdict);
        }
        out
    }

    #[test]
    fn failing_nodes_are_drained_with_the_failed_ids() {
        let states = [state("node01", false, None), state("node02", false, None)];
        let found = verdicts(&[
            ("node01", "gpu-health", Verdict::Failed),
            ("node01", "nccl-pairwise", Verdict::Failed),
            ("node01", "mtu", Verdict::Passed),
            ("node02", "gpu-health", Verdict::Passed),
        ]);
        let actions = plan(&states, &found);
        assert_eq!(
            actions,
            [Action::Drain { node: "node01".to_owned(), reason: "toolkit:gpu-health,nccl-pairwise".to_owned() }]
        );
        assert_eq!(
            actions[0].argv().expect("a command"),
            ["scontrol", "update", "nodename=node01", "state=drain", "reason=toolkit:gpu-health,nccl-pairwise"]
        );
    }

    #[test]
    fn a_node_drained_by_a_person_is_never_touched() {
        let states = [state("node01", true, Some("bad DIMM, ticket 4411")), state("node02", true, Some("maintenance"))];
        let found = verdicts(&[("node01", "gpu-health", Verdict::Failed), ("node02", "gpu-health", Verdict::Passed)]);
        let actions = plan(&states, &found);
        assert_eq!(actions.len(), 1, "node02 passes but stays drained: {actions:?}");
        assert!(matches!(&actions[0], Action::LeaveAlone { node, .. } if node == "node01"));
        assert_eq!(actions[0].argv(), None);
    }

    #[test]
    fn only_toolkit_drains_whose_validators_all_passed_are_resumed() {
        let states = [
            state("node01", true, Some("toolkit:gpu-health")),
            state("node02", true, Some("toolkit:gpu-health,nccl-pairwise")),
            state("node03", true, Some("toolkit:gpu-health")),
            state("node04", false, Some("toolkit:gpu-health")),
        ];
        let found = verdicts(&[
            ("node01", "gpu-health", Verdict::Passed),
            // nccl-pairwise did not run (or could not attribute): node02 stays drained.
            ("node02", "gpu-health", Verdict::Passed),
            ("node03", "gpu-health", Verdict::Failed),
            ("node04", "gpu-health", Verdict::Passed),
        ]);
        let actions = plan(&states, &found);
        assert_eq!(actions, [Action::Resume { node: "node01".to_owned(), was: "toolkit:gpu-health".to_owned() }]);
        assert_eq!(actions[0].argv().expect("a command"), ["scontrol", "update", "nodename=node01", "state=resume"]);
    }

    #[test]
    fn a_toolkit_reason_is_updated_to_what_fails_now() {
        let states = [state("node01", true, Some("toolkit:gpu-health"))];
        let found = verdicts(&[("node01", "gpu-health", Verdict::Passed), ("node01", "mtu", Verdict::Failed)]);
        assert_eq!(
            plan(&states, &found),
            [Action::Drain { node: "node01".to_owned(), reason: "toolkit:mtu".to_owned() }]
        );
        let found = verdicts(&[("node01", "gpu-health", Verdict::Failed)]);
        assert!(plan(&states, &found).is_empty(), "already drained for exactly that");
        let found = verdicts(&[("ghost", "gpu-health", Verdict::Failed)]);
        assert_eq!(plan(&states, &found), [Action::Unknown { node: "ghost".to_owned() }]);
    }

    #[test]
    fn states_from_the_parser_output() {
        let parsed = serde_json::json!({ "source": "scontrol", "nodes": [
            { "name": "node01", "state": "IDLE", "drain": true, "reason": "toolkit:mtu [root@2026-11-21T09:30:00]", "flags": ["DRAIN"] },
            { "name": "node02", "state": "IDLE", "drain": false, "reason": null }
        ]});
        let states = node_states(&parsed).expect("reads");
        assert_eq!(states[0], state("node01", true, Some("toolkit:mtu")));
        assert_eq!(states[1], state("node02", false, None));
        assert_eq!(owned_ids("toolkit:a,b"), Some(["a".to_owned(), "b".to_owned()].into()));
        assert_eq!(owned_ids("Toolkit:a"), None);
    }
}
