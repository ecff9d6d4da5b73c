//! The pure diff: desired resources × recorded state → changes.
//!
//! Stage: plan. Input: a [`ResourceGraph`] and a [`State`]. Output: [`Plan`] body.
//! A service is updated (restarted or reloaded) when a file it watches is created
//! or updated in the same plan, even when the service itself is unchanged — what
//! Ansible handlers do, decided here as data.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;
use similar::TextDiff;

use super::removal;
use super::state::State;
use super::{Action, Baseline, Change, PLAN_FORMAT_VERSION, Plan, Summary};
use crate::graph::ResourceGraph;
use crate::resource::{Desired, OnChange, Resource};

/// Identity of the inputs, recorded in the plan.
#[derive(Debug, Clone, Default)]
pub struct PlanInputs {
    /// Cluster name.
    pub cluster: String,
    /// SHA-256 of the blueprint file.
    pub blueprint_sha256: String,
    /// SHA-256 of the inventory file.
    pub inventory_sha256: Option<String>,
}

/// Compares desired resources with `state`.
#[must_use]
pub fn diff(graph: &ResourceGraph, state: &State, inputs: PlanInputs) -> Plan {
    let mut changes = Vec::with_capacity(graph.resources.len());
    // foldhash: ids at scale, none chosen by an adversary.
    let mut changed_files: HashSet<&str, RandomState> = HashSet::default();
    let mut diff_cache: HashMap<(&str, &str), Option<String>> = HashMap::new();

    for &index in &graph.order {
        let resource = &graph.resources[index];
        let recorded = state.resources.get(resource.id.as_str());
        let after = resource.desired.fingerprint();
        let (mut action, mut reason) = match recorded {
            None => (Action::Create, "not applied yet".to_owned()),
            Some(recorded) if recorded.fingerprint == after => (Action::NoOp, "as recorded".to_owned()),
            Some(recorded) if unresolved_matches(&resource.desired, &recorded.fingerprint, &after) => {
                (Action::NoOp, "secret not readable here; content not compared".to_owned())
            }
            Some(recorded) => (Action::Update, describe_update(&recorded.fingerprint, &after)),
        };
        if let Desired::Service { watches, on_change, .. } = &resource.desired
            && action == Action::NoOp
            && let Some(file) = watches.iter().find(|w| changed_files.contains(w.as_str()))
        {
            let verb = match on_change {
                OnChange::Restart => "restart",
                OnChange::Reload => "reload",
            };
            action = Action::Update;
            reason = format!("{verb}: `{}` changed", file_name(file.as_str()));
        }
        let mut file_diff = None;
        let mut secret = false;
        if let Desired::File { path, content, secret: is_secret, .. } = &resource.desired {
            secret = *is_secret;
            if matches!(action, Action::Create | Action::Update) {
                changed_files.insert(resource.id.as_str());
            }
            if action == Action::Update && !secret {
                let old_hash = recorded.and_then(|r| r.content_sha256.as_deref());
                if let Some(old_hash) = old_hash
                    && old_hash != content.sha256()
                    && let Some(old_text) = state.contents.get(old_hash)
                {
                    file_diff.clone_from(
                        diff_cache
                            .entry((old_hash, content.sha256()))
                            .or_insert_with(|| Some(unified_diff(path, old_text, content.text()))),
                    );
                }
            }
        }
        changes.push(Change {
            id: resource.id.0.clone(),
            target: resource.target.name.clone(),
            kind: resource.desired.kind().to_owned(),
            name: display_name(resource),
            action,
            reason,
            before: recorded.map(|r| r.fingerprint.clone()),
            after: Some(after),
            diff: file_diff,
            secret,
            disruption: crate::resource::Disruption::None,
        });
    }
    // Only a recorded state can have resources no longer desired.
    if !state.resources.is_empty() {
        let desired: HashSet<&str, RandomState> = graph.resources.iter().map(|resource| resource.id.as_str()).collect();
        changes.extend(removal::changes(state, &desired, true));
    }
    let summary = Summary::of(&changes);
    Plan {
        format_version: PLAN_FORMAT_VERSION,
        toolkit_version: env!("CARGO_PKG_VERSION").to_owned(),
        cluster: inputs.cluster,
        blueprint_sha256: inputs.blueprint_sha256,
        inventory_sha256: inputs.inventory_sha256,
        blueprint_path: None,
        inventory_path: None,
        baseline: Baseline::State,
        summary,
        changes,
        warnings: Vec::new(),
        rollout: None,
    }
}

/// An unresolved secret matches when everything but its content hash does.
fn unresolved_matches(desired: &Desired, before: &str, after: &str) -> bool {
    let Desired::File { content, .. } = desired else { return false };
    let without_hash = |fingerprint: &str| fingerprint.split(' ').skip(1).collect::<Vec<_>>().join(" ");
    content.is_unresolved() && without_hash(before) == without_hash(after)
}

/// The human name of a resource: path, package, unit or description.
#[must_use]
pub fn display_name(resource: &Resource) -> String {
    match &resource.desired {
        Desired::File { path, .. } | Desired::Directory { path, .. } => path.clone(),
        Desired::Package { name } | Desired::Service { name, .. } => name.clone(),
        Desired::Command { description, .. } => description.clone(),
        Desired::Api(item) => item.name(),
    }
}

fn describe_update(before: &str, after: &str) -> String {
    let before: HashSet<&str> = before.split(' ').collect();
    let changed: Vec<&str> = after
        .split(' ')
        .filter(|part| !before.contains(part))
        .map(|part| match part.split_once(':').map(|(key, _)| key) {
            Some("sha256") => "content",
            Some(key) => key,
            None => part,
        })
        .collect();
    if changed.is_empty() { "changed".to_owned() } else { format!("{} changed", changed.join(", ")) }
}

fn file_name(id: &str) -> &str {
    split_id(id).1
}

/// `node01:file:/etc/hosts` → (`node01`, `/etc/hosts`).
fn split_id(id: &str) -> (&str, &str) {
    let mut parts = id.splitn(3, ':');
    let target = parts.next().unwrap_or_default();
    let _kind = parts.next();
    (target, parts.next().unwrap_or_default())
}

fn unified_diff(path: &str, old: &str, new: &str) -> String {
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a{path}"), &format!("b{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph;
    use crate::resource::{Content, ResourceId, Target, TargetKind};

    fn node() -> Target {
        Target { name: "node01".into(), kind: TargetKind::Node }
    }

    fn conf(text: &str) -> Resource {
        Resource::new(
            node(),
            "/etc/slurm/slurm.conf",
            Desired::File {
                path: "/etc/slurm/slurm.conf".into(),
                content: Content::new(text.into()),
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
                secret: false,
                check: None,
            },
        )
    }

    fn slurmd() -> Resource {
        let watched = ResourceId::new("node01", "file", "/etc/slurm/slurm.conf");
        Resource::new(
            node(),
            "slurmd",
            Desired::Service {
                name: "slurmd".into(),
                enabled: true,
                running: true,
                watches: vec![watched.clone()],
                on_change: OnChange::Restart,
            },
        )
        .after([watched])
    }

    fn plan(resources: Vec<Resource>, state: &State) -> Plan {
        diff(&graph::build(resources).expect("graph"), state, PlanInputs::default())
    }

    #[test]
    fn first_plan_creates_everything_and_second_is_all_no_ops() {
        let first = plan(vec![conf("A=1\n"), slurmd()], &State::empty("lab"));
        assert_eq!((first.summary.create, first.summary.no_op), (2, 0));
        let mut state = State::empty("lab");
        for resource in [conf("A=1\n"), slurmd()] {
            state.record(&resource);
        }
        let second = plan(vec![conf("A=1\n"), slurmd()], &state);
        assert!(!second.summary.has_changes(), "{second:#?}");
        assert!(second.changes.iter().all(|c| c.reason == "as recorded"));
    }

    #[test]
    fn an_edited_file_shows_a_diff_and_restarts_its_service() {
        let mut state = State::empty("lab");
        for resource in [conf("A=1\nB=2\n"), slurmd()] {
            state.record(&resource);
        }
        let plan = plan(vec![conf("A=1\nB=3\n"), slurmd()], &state);
        assert_eq!(plan.summary.update, 2);
        let file = &plan.changes[0];
        assert_eq!(file.reason, "content changed");
        assert_eq!(
            file.diff.as_deref(),
            Some("--- a/etc/slurm/slurm.conf\n+++ b/etc/slurm/slurm.conf\n@@ -1,2 +1,2 @@\n A=1\n-B=2\n+B=3\n")
        );
        assert_eq!(plan.changes[1].reason, "restart: `/etc/slurm/slurm.conf` changed");
    }

    fn key(content: Content) -> Resource {
        Resource::new(
            node(),
            "/etc/munge/munge.key",
            Desired::File {
                path: "/etc/munge/munge.key".into(),
                content,
                mode: 0o400,
                owner: "munge".into(),
                group: "munge".into(),
                secret: true,
                check: None,
            },
        )
    }

    #[test]
    fn an_unreadable_secret_is_not_compared_but_its_mode_is() {
        let mut state = State::empty("lab");
        state.record(&key(Content::new("real-key".into())));
        let same = plan(vec![key(Content::unresolved_secret())], &state);
        assert_eq!(same.changes[0].action, Action::NoOp);
        assert!(same.changes[0].diff.is_none());
        let mut loose = key(Content::unresolved_secret());
        if let Desired::File { mode, .. } = &mut loose.desired {
            *mode = 0o644;
        }
        let changed = plan(vec![loose], &state);
        assert_eq!(changed.changes[0].action, Action::Update);
    }

    #[test]
    fn resources_gone_from_the_blueprint_are_removed() {
        let mut state = State::empty("lab");
        state.record(&conf("A=1\n"));
        state.record(&slurmd());
        let plan = plan(vec![conf("A=1\n")], &state);
        assert_eq!(plan.summary.remove, 1);
        assert_eq!(plan.changes[1].id, "node01:service:slurmd");
    }
}
