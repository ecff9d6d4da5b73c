//! Removal: what undoes a resource once it leaves the blueprint, and the plan's
//! `-` lines for the recorded resources that did.
//!
//! Stage: plan. Input: a [`Resource`] when the state file records it, or a
//! [`State`] and the ids still desired when planning. Output: an [`Undo`] per
//! resource, kept in the state file, and the [`Action::Remove`] changes, in the
//! order they are undone (the reverse of the order they were applied in).

use std::collections::HashSet;

use foldhash::fast::RandomState;

pub use super::undo::Undo;

use super::state::{Recorded, State};
use super::{Action, Change};

/// Whether `change` is a removal that leaves the resource on its host (a package,
/// a command without an undo): the state forgets it, nothing runs.
#[must_use]
pub fn leaves_in_place(change: &Change) -> bool {
    change.action == Action::Remove && change.reason.starts_with("left in place")
}

/// A resource to undo: a `-` of the plan with what its record says undoes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// Resource id.
    pub id: String,
    /// Host or switch.
    pub target: String,
    /// What undoes it (`None`: left in place).
    pub undo: Option<Undo>,
}

/// The recorded undo of `id`, or the one derived from its id for older records.
#[must_use]
pub fn undo_of(id: &str, recorded: &Recorded) -> Option<Undo> {
    recorded.undo.clone().or_else(|| Undo::derived(id, &recorded.kind))
}

/// Recorded resources whose id is not in `desired`, in the order they are undone:
/// the reverse of the order they were applied in (then by id). With `api: false`,
/// API objects are left out (the API stage plans them from what the API reports).
#[must_use]
pub fn removals(state: &State, desired: &HashSet<&str, RandomState>, api: bool) -> Vec<Removal> {
    let mut gone: Vec<(&String, &Recorded)> = state
        .resources
        .iter()
        .filter(|(id, _)| !desired.contains(id.as_str()))
        .filter(|(id, recorded)| api || !undo_of(id, recorded).is_some_and(|undo| undo.is_api()))
        .collect();
    // Equal orders (records from before orders were kept) by id.
    gone.sort_unstable_by(|(a, a_record), (b, b_record)| b_record.order.cmp(&a_record.order).then_with(|| a.cmp(b)));
    gone.into_iter()
        .map(|(id, recorded)| Removal {
            id: id.clone(),
            target: crate::resource::id_parts(id).0.to_owned(),
            undo: undo_of(id, recorded),
        })
        .collect()
}

/// The plan's `-` changes for [`removals`].
#[must_use]
pub fn changes(state: &State, desired: &HashSet<&str, RandomState>, api: bool) -> Vec<Change> {
    removals(state, desired, api)
        .into_iter()
        .filter_map(|removal| {
            let recorded = state.resources.get(&removal.id)?;
            // The id's name: for a command its stable name (`sacctmgr-qos-team-b`),
            // which says what goes better than the description of what it made.
            let name = removal.id.splitn(3, ':').nth(2).unwrap_or_default().into();
            Some(Change {
                name,
                action: Action::Remove,
                reason: Undo::reason(removal.undo.as_ref()).into(),
                after: None,
                secret: recorded.secret,
                disruption: crate::resource::Disruption::None,
                delta: crate::plan::Delta::from_before(recorded.fingerprint.as_str().into()),
                id: removal.id.into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph;
    use crate::plan::diff::{PlanInputs, diff};
    use crate::plan::render;
    use crate::resource::{Content, Desired, OnChange, Resource, Target};

    fn head() -> Target {
        Target::node("head")
    }

    fn topology() -> Resource {
        Resource::new(
            head(),
            "/etc/slurm/topology.conf",
            Desired::File {
                path: "/etc/slurm/topology.conf".into(),
                content: Content::new("SwitchName=s0 Nodes=node01\n".into()),
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
                secret: false,
                check: None,
            },
        )
    }

    fn command(name: &str, undo: Option<Vec<String>>) -> Resource {
        Resource::new(
            head(),
            name,
            Desired::Command {
                argv: vec!["sacctmgr".into(), "-i".into(), "add".into(), name.into()],
                creates: None,
                unless: None,
                description: format!("create {name}"),
                undo,
                reads: None,
            },
        )
    }

    /// In the order a deploy applies them: the QOS before the account before the user.
    fn applied() -> Vec<Resource> {
        vec![
            Resource::new(head(), "slurmctld", Desired::Package { name: "slurmctld".into() }),
            topology(),
            Resource::new(
                head(),
                "toolkit-exporter",
                Desired::Service {
                    name: "toolkit-exporter".into(),
                    enabled: true,
                    running: true,
                    watches: Vec::new(),
                    on_change: OnChange::Restart,
                },
            ),
            command("sacctmgr-qos-team-b", Some(vec!["delete-qos".into()])),
            command("sacctmgr-qos-team-b-settings", Some(Vec::new())),
            command("sacctmgr-account-team-b", Some(vec!["delete-account".into()])),
            command("sacctmgr-user-team-b-bob", Some(vec!["delete-user".into()])),
            command("fake-gpu-devices", None),
        ]
    }

    fn recorded() -> State {
        let mut state = State::empty("lab");
        for (rank, resource) in applied().iter().enumerate() {
            state.record_at(resource, rank as u64 + 1);
        }
        state
    }

    fn nothing_desired() -> crate::plan::Plan {
        diff(&graph::build(Vec::new()).expect("graph"), &recorded(), PlanInputs::default())
    }

    #[test]
    fn removals_come_in_reverse_apply_order_and_say_what_happens() {
        let plan = nothing_desired();
        let lines: Vec<(&str, &str)> = plan.changes.iter().map(|c| (c.id.as_str(), c.reason.as_str())).collect();
        assert_eq!(
            lines,
            [
                ("head:command:fake-gpu-devices", "left in place: no undo"),
                ("head:command:sacctmgr-user-team-b-bob", "no longer in the blueprint: run its undo"),
                ("head:command:sacctmgr-account-team-b", "no longer in the blueprint: run its undo"),
                ("head:command:sacctmgr-qos-team-b-settings", "no longer in the blueprint: nothing to undo"),
                ("head:command:sacctmgr-qos-team-b", "no longer in the blueprint: run its undo"),
                ("head:service:toolkit-exporter", "no longer in the blueprint: stop and disable"),
                ("head:file:/etc/slurm/topology.conf", "no longer in the blueprint: delete"),
                ("head:package:slurmctld", "left in place: packages are not pruned"),
            ]
        );
        assert!(plan.changes.iter().all(|change| change.action == Action::Remove && change.after.is_none()));
        assert_eq!(plan.summary.remove, 8);
        let left: Vec<&str> =
            plan.changes.iter().filter(|change| leaves_in_place(change)).map(|change| change.name.as_str()).collect();
        assert_eq!(left, ["fake-gpu-devices", "slurmctld"]);
    }

    #[test]
    fn text_and_json_show_each_removal() {
        let plan = nothing_desired();
        let text = render::text(&plan);
        for line in [
            "  - command fake-gpu-devices on head  (left in place: no undo)",
            "  - command sacctmgr-account-team-b on head  (no longer in the blueprint: run its undo)",
            "  - file /etc/slurm/topology.conf on head  (no longer in the blueprint: delete)",
            "  - package slurmctld on head  (left in place: packages are not pruned)",
            "Plan: 0 to create, 0 to update, 8 to remove, 0 unchanged.",
        ] {
            assert!(text.lines().any(|shown| shown == line), "no `{line}` in:\n{text}");
        }
        let json: serde_json::Value = serde_json::from_str(&render::json(&plan).expect("json")).expect("parses");
        let first = &json["changes"][0];
        assert_eq!(first["id"], "head:command:fake-gpu-devices");
        assert_eq!(first["action"], "remove");
        assert_eq!(first["reason"], "left in place: no undo");
        assert!(first.get("after").is_none(), "{first}");
        assert_eq!(json["summary"]["remove"], 8);
    }

    #[test]
    fn still_desired_resources_are_not_removed() {
        let mut state = recorded();
        state.record(&topology());
        let graph = graph::build(vec![topology()]).expect("graph");
        let plan = diff(&graph, &state, PlanInputs::default());
        assert!(
            !plan.changes.iter().any(|change| change.id.ends_with("topology.conf") && change.action == Action::Remove)
        );
        assert_eq!(plan.summary.remove, 7);
    }

    #[test]
    fn records_without_an_undo_name_it_by_their_id() {
        let mut state = recorded();
        for record in state.resources.values_mut() {
            record.undo = None;
            record.order = 0;
        }
        let undos: Vec<Option<Undo>> = state.resources.iter().map(|(id, record)| undo_of(id, record)).collect();
        assert!(undos.contains(&Some(Undo::DeleteFile { path: "/etc/slurm/topology.conf".into() })));
        assert!(undos.contains(&Some(Undo::StopService { unit: "toolkit-exporter".into() })));
        assert!(undos.contains(&Some(Undo::KeepPackage { name: "slurmctld".into() })));
        // A command's undo cannot be guessed: left in place, and the plan says so.
        assert_eq!(undos.iter().filter(|undo| undo.is_none()).count(), 5);
        // Without orders, by id.
        let desired = HashSet::default();
        let ids: Vec<String> = removals(&state, &desired, true).into_iter().map(|removal| removal.id).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }
}
