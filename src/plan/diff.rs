//! The pure diff: desired resources × recorded state → changes.
//!
//! Stage: plan. Input: a [`ResourceGraph`] and a [`State`]. Output: [`Plan`] body.
//! A service is updated (restarted or reloaded) when a file it watches is created
//! or updated in the same plan, even when the service itself is unchanged — what
//! Ansible handlers do, decided here as data.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;
use similar::TextDiff;

use super::described::Described;
use super::removal;
use super::state::{Contents, Recorded, State};
use super::{Action, Baseline, Change, Delta, Plan, ValueChange, Values};
use crate::graph::ResourceGraph;
use crate::resource::{Desired, OnChange, values_of};
use crate::text::{Interner, Text};

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
    diff_described(graph, &Described::of(graph), state, inputs)
}

/// [`diff`], with the resources already [`Described`].
#[must_use]
pub fn diff_described(graph: &ResourceGraph, described: &Described, state: &State, inputs: PlanInputs) -> Plan {
    compare(graph, described, |_, id| state.resources.get(id), &state.contents, Some(state), inputs)
}

/// Compares desired resources with what observing their hosts found: `observed` by
/// graph index (`None`: not there), the old texts of changed files in `contents`.
/// Observed records are of desired resources only: nothing is a removal.
#[must_use]
pub fn diff_observed(
    graph: &ResourceGraph,
    described: &Described,
    observed: &[Option<Recorded>],
    contents: &Contents,
    inputs: PlanInputs,
) -> Plan {
    compare(graph, described, |index, _| observed.get(index)?.as_ref(), contents, None, inputs)
}

/// The diff, with each resource's record found by `recorded` (graph index, id);
/// the records of `removable` that no desired resource has are removals.
fn compare<'s>(
    graph: &ResourceGraph,
    described: &Described,
    recorded: impl Fn(usize, &str) -> Option<&'s Recorded> + Sync,
    contents: &Contents,
    removable: Option<&State>,
    inputs: PlanInputs,
) -> Plan {
    // 230,000 resources at 4,096 nodes: compared in runs of the order on every core,
    // each run writing its own changes in place.
    let mut changes: Vec<Change> = std::iter::repeat_with(unfilled).take(graph.order.len()).collect();
    let compared = crate::parallel::fill(&mut changes, COMPARE_RUN, |start, slots| {
        compare_run(graph, described, &recorded, contents, start, slots)
    });
    let changed_files: Vec<&HashSet<&str, RandomState>> = compared.iter().map(|run| &run.changed_files).collect();
    // How many records a desired resource has: when all do, none is a removal.
    let mut desired_recorded = 0;
    let mut id = String::new();
    for (number, run) in compared.iter().enumerate() {
        desired_recorded += run.recorded;
        for waiting in &run.waiting {
            // The first watched file changed anywhere before the service: in an earlier
            // run, or earlier in its own.
            let in_earlier = waiting.watches.iter().position(|file| {
                let id = watched_id(&mut id, waiting.target, file);
                changed_files[..number].iter().any(|files| files.contains(id))
            });
            let Some(first) = in_earlier.into_iter().chain(waiting.in_run).min() else { continue };
            let change = &mut changes[waiting.at];
            change.action = Action::Update;
            change.reason =
                Text::from(format!("{}: `{}` changed", waiting.verb, file_name(waiting.watches[first].as_str())));
        }
    }
    drop(compared);
    // Only records of no desired resource (ids are unique in a graph) are removals.
    if let Some(state) = removable
        && desired_recorded < state.resources.len()
    {
        let desired: HashSet<&str, RandomState> = graph.resources.iter().map(|resource| resource.id.as_str()).collect();
        changes.extend(removal::changes(state, &desired, true));
    }
    Plan::new(inputs, Baseline::State, changes)
}

/// A slot [`compare_run`] fills: empty texts allocate nothing.
fn unfilled() -> Change {
    Change::new(Text::default(), Text::default(), Action::NoOp, Text::default())
}

/// Resources of the order one thread compares at a time.
const COMPARE_RUN: usize = 16_384;

/// What one run of the order found besides its changes.
struct Compared<'g> {
    /// How many of its resources have a record.
    recorded: usize,
    /// Ids of the files it creates or updates.
    changed_files: HashSet<&'g str, RandomState>,
    /// Its unchanged services that watch files: a file changed in an earlier run
    /// restarts (or reloads) them too.
    waiting: Vec<Waiting<'g>>,
}

/// An unchanged service that watches files, in the changes of its run.
struct Waiting<'g> {
    /// Its position in the plan's changes.
    at: usize,
    /// Its target, which holds the files it watches.
    target: &'g str,
    watches: &'g [Text],
    /// The first of `watches` changed earlier in its own run.
    in_run: Option<usize>,
    verb: &'static str,
}

/// Compares the resources of the order from position `start` on into `changes`, one
/// slot each.
fn compare_run<'g, 's>(
    graph: &'g ResourceGraph,
    described: &Described,
    recorded: &impl Fn(usize, &str) -> Option<&'s Recorded>,
    contents: &Contents,
    start: usize,
    changes: &mut [Change],
) -> Compared<'g> {
    let run = &graph.order[start..start + changes.len()];
    // foldhash: ids at scale, none chosen by an adversary.
    let mut changed_files: HashSet<&str, RandomState> = HashSet::default();
    let mut waiting = Vec::new();
    let mut diff_cache: HashMap<(&str, &str), Option<Text>> = HashMap::new();
    let mut id = String::new();
    // Reasons and old fingerprints repeat across nodes: one copy each.
    let mut texts = Interner::default();
    let (not_applied, as_recorded) = (texts.get("not applied yet"), texts.get("as recorded"));
    // A value-setting command's values, by fingerprints before and after: the same
    // for every node, parsed once and shared.
    let mut values_cache: HashMap<(Option<&str>, Text), Values, RandomState> = HashMap::default();
    // The same transition on every node (an unchanged file: before = after) is one delta;
    // values are told apart by address, as `values_cache` shares them.
    let mut deltas: HashMap<(Option<Text>, Option<Text>, usize), Delta, RandomState> = HashMap::default();

    let mut desired_recorded = 0;
    for (at, index) in run.iter().map(|&index| index as usize).enumerate() {
        let resource = &graph.resources[index];
        let recorded = recorded(index, resource.id.as_str());
        desired_recorded += usize::from(recorded.is_some());
        let description = described.get(index);
        let after = description.fingerprint.clone();
        let (action, mut reason) = match recorded {
            None => (Action::Create, not_applied.clone()),
            Some(recorded) if recorded.fingerprint == after => (Action::NoOp, as_recorded.clone()),
            Some(recorded) if unresolved_matches(&resource.desired, &recorded.fingerprint, &after) => {
                (Action::NoOp, texts.get("secret not readable here; content not compared"))
            }
            Some(recorded) => (Action::Update, texts.take(describe_update(&recorded.fingerprint, &after))),
        };
        let values = match &*resource.desired {
            Desired::Command { reads: Some(_), .. } if matches!(action, Action::Create | Action::Update) => {
                let before = recorded.map(|r| r.fingerprint.as_str());
                values_cache.entry((before, after.clone())).or_insert_with(|| value_changes(before, &after)).clone()
            }
            _ => Values::default(),
        };
        if action == Action::Update && !values.is_empty() {
            let keys: Vec<&str> = values.iter().map(|value| value.key.as_str()).collect();
            reason = if values.iter().all(|value| value.before.is_none()) {
                // A state written before the command read its values: only a hash is known.
                texts.get("values not recorded before")
            } else {
                texts.take(format!("{} changed", keys.join(", ")))
            };
        }
        if let Desired::Service { watches, on_change, .. } = &*resource.desired
            && action == Action::NoOp
            && !watches.is_empty()
        {
            let verb = match on_change {
                OnChange::Restart => "restart",
                OnChange::Reload => "reload",
            };
            let target = resource.target();
            let in_run = watches.iter().position(|file| changed_files.contains(watched_id(&mut id, target, file)));
            waiting.push(Waiting { at: start + at, target, watches, in_run, verb });
        }
        let mut file_diff = None;
        let mut secret = false;
        if let Desired::Api(item) = &*resource.desired
            && let Some(object) = item.kubernetes()
            && action == Action::Update
            && let Some(recorded) = recorded
        {
            file_diff =
                Some(Text::from(unified_diff(&format!("/{}", object.display()), &recorded.fingerprint, &after)));
        }
        if let Desired::File { path, content, secret: is_secret, .. } = &*resource.desired {
            secret = *is_secret;
            if matches!(action, Action::Create | Action::Update) {
                changed_files.insert(resource.id.as_str());
            }
            if action == Action::Update && !secret {
                let old_hash = recorded.and_then(super::state::Recorded::content_sha256);
                if let Some(old_hash) = old_hash
                    && old_hash != content.sha256()
                    && let Some(old_text) = contents.get(old_hash)
                {
                    file_diff.clone_from(
                        diff_cache
                            .entry((old_hash, content.sha256()))
                            .or_insert_with(|| Some(Text::from(unified_diff(path, old_text, content.text())))),
                    );
                }
            }
        }
        // Unchanged (most): the shared copy already at hand, not looked up again.
        let before = recorded.map(|r| if r.fingerprint == after { after.clone() } else { texts.get(&r.fingerprint) });
        let delta = if before.is_none() && file_diff.is_none() && values.is_empty() {
            Delta::default()
        } else {
            let values_at = values.as_ptr() as usize;
            deltas
                .entry((before.clone(), file_diff.clone(), values_at))
                .or_insert_with(|| Delta::new(before, file_diff, values))
                .clone()
        };
        changes[at] = Change {
            id: resource.id.0.clone(),
            name: description.name.clone(),
            action,
            reason,
            after: Some(after),
            secret,
            disruption: crate::resource::Disruption::None,
            delta,
        };
    }
    Compared { recorded: desired_recorded, changed_files, waiting }
}

/// An unresolved secret matches when everything but its content hash does.
fn unresolved_matches(desired: &Desired, before: &str, after: &str) -> bool {
    let Desired::File { content, .. } = desired else { return false };
    let without_hash = |fingerprint: &str| fingerprint.split(' ').skip(1).collect::<Vec<_>>().join(" ");
    content.is_unresolved() && without_hash(before) == without_hash(after)
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

/// The values of a value-setting command that change: every one when nothing (or
/// no values) was there before, else those that differ.
fn value_changes(before: Option<&str>, after: &str) -> Values {
    let Some(after) = values_of(after) else { return Values::default() };
    let before: Option<HashMap<String, String>> = before.and_then(values_of).map(|values| values.into_iter().collect());
    after
        .into_iter()
        .filter_map(|(key, after)| {
            let before = before.as_ref().map(|values| values.get(&key).cloned());
            match before {
                Some(Some(before)) if before == after => None,
                Some(before) => {
                    Some(ValueChange { key: key.into(), before: before.map(Text::from), after: after.into() })
                }
                None => Some(ValueChange { key: key.into(), before: None, after: after.into() }),
            }
        })
        .collect()
}

/// The path of a watched file (`file:/etc/slurm/slurm.conf` → `/etc/slurm/slurm.conf`).
fn file_name(watched: &str) -> &str {
    watched.split_once(':').map_or(watched, |(_, name)| name)
}

/// The id of the file a service on `target` watches as `file` (`kind:name`), made in
/// `buffer`: one lookup per watched file of every unchanged service, none allocated.
fn watched_id<'b>(buffer: &'b mut String, target: &str, file: &str) -> &'b str {
    buffer.clear();
    for part in [target, ":", file] {
        buffer.push_str(part);
    }
    buffer
}

/// A unified diff of two texts, headed `a{path}` / `b{path}`.
pub(crate) fn unified_diff(path: &str, old: &str, new: &str) -> String {
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
    use crate::resource::{Content, Resource, ResourceId, Target};

    fn node() -> Target {
        Target::node("node01")
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
                watches: crate::resource::watched([&watched]),
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
    fn the_same_transition_on_every_node_is_one_delta() {
        let on = |node: &str| {
            let mut file = conf("A=1\n");
            file.id = ResourceId::new(node, "file", "/etc/slurm/slurm.conf");
            file
        };
        let resources = || vec![on("node01"), on("node02")];
        let first = plan(resources(), &State::empty("lab"));
        assert!(first.changes.iter().all(|change| change.delta == Delta::default()), "a create has no before");
        let mut state = State::empty("lab");
        for resource in &resources() {
            state.record(resource);
        }
        let rerun = plan(resources(), &state);
        let [one, two] = &rerun.changes[..] else { panic!("two entries: {rerun:#?}") };
        assert_eq!((one.action, one.before(), two.before()), (Action::NoOp, one.after.as_ref(), two.after.as_ref()));
        assert!(std::ptr::eq(one.before().expect("before"), two.before().expect("before")), "one shared delta");
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
            file.diff().map(Text::as_str),
            Some("--- a/etc/slurm/slurm.conf\n+++ b/etc/slurm/slurm.conf\n@@ -1,2 +1,2 @@\n A=1\n-B=2\n+B=3\n")
        );
        assert_eq!(plan.changes[1].reason, "restart: `/etc/slurm/slurm.conf` changed");
    }

    #[test]
    fn a_file_changed_in_an_earlier_run_restarts_its_service() {
        // The file first, the service more than a run of the order later.
        let padding = (0..COMPARE_RUN + 10)
            .map(|i| Resource::new(node(), &format!("p{i}"), Desired::Package { name: format!("p{i}") }));
        let resources = |text: &str| std::iter::once(conf(text)).chain(padding.clone()).chain([slurmd()]).collect();
        let mut state = State::empty("lab");
        for resource in &resources("A=1\n") {
            state.record(resource);
        }
        let edited = plan(resources("A=2\n"), &state);
        assert_eq!(edited.summary.update, 2);
        let service = edited.changes.last().expect("changes");
        assert_eq!((service.name.as_str(), service.action), ("slurmd", Action::Update));
        assert_eq!(service.reason, "restart: `/etc/slurm/slurm.conf` changed");
        let unchanged = plan(resources("A=1\n"), &state);
        assert!(!unchanged.summary.has_changes());
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
        assert!(same.changes[0].diff().is_none());
        let mut loose = key(Content::unresolved_secret());
        if let Desired::File { mode, .. } = std::sync::Arc::make_mut(&mut loose.desired) {
            *mode = 0o644;
        }
        let changed = plan(vec![loose], &state);
        assert_eq!(changed.changes[0].action, Action::Update);
    }

    fn limits(gpus: &str) -> Resource {
        Resource::new(
            node(),
            "qos-team-a",
            Desired::Command {
                argv: vec!["sacctmgr".into()],
                creates: None,
                unless: None,
                description: "QOS `team-a`".into(),
                undo: Some(Vec::new()),
                reads: Some(Box::new(crate::resource::Reads {
                    argv: vec!["sacctmgr".into()],
                    wanted: vec![("Priority".into(), "10".into()), ("GrpTRES".into(), gpus.into())],
                })),
            },
        )
    }

    #[test]
    fn a_value_setting_command_shows_each_changed_value_old_to_new() {
        let mut state = State::empty("lab");
        state.record(&limits("gres/gpu=8"));
        let changed = plan(vec![limits("gres/gpu=4")], &state);
        let change = &changed.changes[0];
        assert_eq!((change.action, change.reason.as_str()), (Action::Update, "GrpTRES changed"));
        assert_eq!(
            change.values(),
            [ValueChange { key: "GrpTRES".into(), before: Some("gres/gpu=8".into()), after: "gres/gpu=4".into() }]
        );
        let same = plan(vec![limits("gres/gpu=8")], &state);
        assert!(same.changes[0].values().is_empty() && same.changes[0].action == Action::NoOp);

        // A state recorded before commands read their values holds only a hash.
        let mut old = State::empty("lab");
        old.record(&limits("gres/gpu=8"));
        if let Some(recorded) = old.resources.values_mut().next() {
            recorded.fingerprint = "command:0123456789abcdef".into();
        }
        let unknown = plan(vec![limits("gres/gpu=4")], &old);
        assert_eq!(unknown.changes[0].reason, "values not recorded before");
        assert_eq!(unknown.changes[0].values().len(), 2);
        assert!(unknown.changes[0].values().iter().all(|value| value.before.is_none()));
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
