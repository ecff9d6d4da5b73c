//! Shows a plan: Terraform-style text (identical changes on many targets folded
//! into one entry with a hostlist), a summary table, or JSON.
//!
//! Stage: plan (output). Input: [`Plan`]. Output: text.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use indexmap::IndexMap;
use tabled::settings::Style;
use tabled::{Table, Tabled};

use super::{Action, Change, Plan, RolloutPlan, ValueChange};
use crate::model::hostlist;
use crate::resource::Disruption;
use crate::text::Text;

/// Kind, name, action, reason and detail (a file's diff, an API object's before → after)
/// of a change: equal keys fold into one entry.
type GroupKey<'a> = (&'a str, &'a str, Action, &'a str, Option<Cow<'a, str>>);

/// What an entry shows under its line: a file's diff, a command's values, or an API
/// object's values.
fn detail(change: &Change) -> Option<Cow<'_, str>> {
    if let Some(diff) = change.diff() {
        return Some(Cow::Borrowed(diff.as_str()));
    }
    if !change.values().is_empty() {
        return Some(Cow::Owned(values_text(change.values())));
    }
    if change.kind() == crate::resource::api::KUBERNETES_KIND {
        // An object shows as the YAML it applies (or had, when it goes); an update
        // carries a diff.
        return change.after.as_deref().or(change.before().map(Text::as_str)).map(Cow::Borrowed);
    }
    crate::resource::api::is_api_kind(change.kind()).then(|| {
        let show = |value: Option<&Text>| value.map_or("(absent)", Text::as_str).to_owned();
        Cow::Owned(format!("{} → {}", show(change.before()), show(change.after.as_ref())))
    })
}

/// One line per value, keys aligned: `key before → after`, or `key after` when
/// nothing was there before. An empty value shows as `""`.
fn values_text(values: &[ValueChange]) -> String {
    let width = values.iter().map(|value| value.key.chars().count()).max().unwrap_or(0);
    let show = |value: &str| if value.is_empty() { "\"\"".to_owned() } else { value.to_owned() };
    let mut text = String::new();
    for ValueChange { key, before, after } in values {
        let _ = match before {
            Some(before) => writeln!(text, "{key:<width$}  {} → {}", show(before), show(after)),
            None => writeln!(text, "{key:<width$}  {}", show(after)),
        };
    }
    text
}

/// The plan as text: one entry per distinct change, its targets compressed.
#[must_use]
pub fn text(plan: &Plan) -> String {
    let mut out = String::new();
    let groups = group(&plan.changes);
    if groups.is_empty() {
        let _ = writeln!(out, "No changes. The cluster `{}` matches the blueprint.", plan.cluster);
    } else {
        let _ = writeln!(out, "toolkit will perform the following actions on cluster `{}`:\n", plan.cluster);
        let groups: Vec<(GroupKey<'_>, Vec<u32>)> = groups.into_iter().collect();
        // Each entry's hostlist (thousands of names sorted and folded) on every core.
        let entries = crate::parallel::ordered(&groups, |(key, at)| {
            entry_text(key, at.iter().map(|&at| plan.changes[at as usize].target()).collect())
        });
        for entry in entries {
            out.push_str(&entry);
        }
        out.push('\n');
    }
    if let Some(rollout) = &plan.rollout {
        disruption_text(rollout, &mut out);
    }
    if let Some(spares) = &plan.spares {
        let _ = writeln!(out, "Spares:");
        for line in spares.lines() {
            let _ = writeln!(out, "  {line}");
        }
        out.push('\n');
    }
    for warning in &plan.warnings {
        let _ = writeln!(out, "Warning: {warning}");
    }
    if !plan.warnings.is_empty() {
        out.push('\n');
    }
    let s = plan.summary;
    let _ = writeln!(
        out,
        "Plan: {} to create, {} to update, {} to remove, {} unchanged.",
        s.create, s.update, s.remove, s.no_op
    );
    out
}

/// The changes that do something, by kind, name, action, reason and diff (in the order
/// each first appears), with their targets. 230,000 changes at 4,096 nodes: grouped in
/// runs on every core, the runs' groups then joined in order.
fn group(changes: &[Change]) -> Groups<'_> {
    let runs: Vec<(usize, &[Change])> = changes.chunks(GROUP_RUN).enumerate().collect();
    let mut grouped = crate::parallel::ordered(&runs, |&(number, run)| {
        let mut groups = Groups::default();
        for (at, change) in (number * GROUP_RUN..).zip(run).filter(|(_, c)| c.action != Action::NoOp) {
            groups
                .entry((change.kind(), &change.name, change.action, &change.reason, detail(change)))
                .or_default()
                .push(at as u32);
        }
        groups
    })
    .into_iter();
    let mut groups = grouped.next().unwrap_or_default();
    for run in grouped {
        for (key, targets) in run {
            groups.entry(key).or_default().extend(targets);
        }
    }
    groups
}

/// Same kind, name, action, reason and diff → one entry listing every target, by the
/// position of its change (4 bytes, not a 16-byte name: at 4,096 nodes the entries
/// list ~230,000 changes).
// foldhash: one key per change, none chosen by an adversary.
type Groups<'a> = IndexMap<GroupKey<'a>, Vec<u32>, foldhash::fast::RandomState>;

/// Changes one thread groups at a time.
const GROUP_RUN: usize = 32_768;

/// One entry: its line, with its targets compressed, then its detail indented.
fn entry_text((kind, name, action, reason, diff): &GroupKey<'_>, mut targets: Vec<&str>) -> String {
    targets.sort_unstable();
    let mut out = String::new();
    let _ =
        writeln!(out, "  {} {kind} {name} on {}  ({reason})", action.sign(), hostlist::compress(targets.into_iter()));
    if let Some(diff) = diff {
        for line in diff.lines() {
            let _ = writeln!(out, "      {line}");
        }
    }
    out
}

/// Hosts whose changes disrupt running work, folded by class and cause, then the
/// rollout line.
fn disruption_text(rollout: &RolloutPlan, out: &mut String) {
    let mut groups: IndexMap<(Disruption, bool, Vec<&str>), Vec<&str>> = IndexMap::new();
    let mut hosts: Vec<(&String, &crate::plan::disruption::HostDisruption)> = rollout.hosts.iter().collect();
    hosts.sort_by_key(|(_, host)| std::cmp::Reverse(host.class));
    for (name, host) in hosts {
        // Ids without their target fold the same cause on many hosts into one line.
        let causes = host.because.iter().map(|id| id.split_once(':').map_or(id.as_str(), |(_, rest)| rest)).collect();
        groups.entry((host.class, host.schedulable, causes)).or_default().push(name);
    }
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(out, "Disruption (what running jobs see):");
    for ((class, schedulable, causes), targets) in &groups {
        let note =
            if class.needs_drain() && !schedulable { "; not a scheduler node: changed without a drain" } else { "" };
        let _ = writeln!(
            out,
            "  {class:<7} {}  ({}{note})",
            hostlist::compress(targets.iter().copied()),
            causes.join(", ")
        );
    }
    match rollout.summary() {
        Some(summary) => {
            let _ = writeln!(out, "Rollout: {summary}.");
        }
        None => {
            let _ = writeln!(out, "Rollout: no node needs a drain; changes apply in place.");
        }
    }
    for line in rollout.agreement.iter().flat_map(|agreement| agreement.lines(&rollout.waves)) {
        let _ = writeln!(out, "Rollout: {line}.");
    }
    out.push('\n');
}

#[derive(Tabled)]
struct Row {
    kind: String,
    create: usize,
    update: usize,
    remove: usize,
    #[tabled(rename = "no-op")]
    no_op: usize,
}

/// A table of counts per resource kind.
#[must_use]
pub fn summary_table(plan: &Plan) -> String {
    let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
    for change in &plan.changes {
        let kind = change.kind();
        let row = rows.entry(kind).or_insert_with(|| Row {
            kind: kind.to_string(),
            create: 0,
            update: 0,
            remove: 0,
            no_op: 0,
        });
        match change.action {
            Action::Create => row.create += 1,
            Action::Update => row.update += 1,
            Action::Remove => row.remove += 1,
            Action::NoOp => row.no_op += 1,
        }
    }
    let mut table = Table::new(rows.into_values());
    table.with(Style::sharp());
    table.to_string()
}

/// The plan as pretty JSON.
///
/// # Errors
/// Serialization failure (not expected for this type).
pub fn json(plan: &Plan) -> serde_json::Result<String> {
    serde_json::to_string_pretty(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(target: &str, name: &str, action: Action) -> Change {
        let id = format!("{target}:file:{name}");
        Change::new(id.into(), name.into(), action, "not applied yet".into())
    }

    #[test]
    fn groups_joined_across_runs_keep_first_appearance_and_every_target() {
        // Three runs: `/etc/a` and `/etc/b` span them, `/etc/late` first shows in the
        // last, `/etc/same` is a no-op everywhere.
        let count = GROUP_RUN * 2 + 10;
        let changes: Vec<Change> = (0..count)
            .map(|i| {
                let target = format!("node{i:06}");
                match i {
                    _ if i % 5 == 4 => change(&target, "/etc/same", Action::NoOp),
                    _ if i > GROUP_RUN * 2 => change(&target, "/etc/late", Action::Create),
                    _ if i % 2 == 0 => change(&target, "/etc/a", Action::Create),
                    _ => change(&target, "/etc/b", Action::Update),
                }
            })
            .collect();
        let groups = group(&changes);
        let names: Vec<&str> = groups.keys().map(|key| key.1).collect();
        assert_eq!(names, ["/etc/a", "/etc/b", "/etc/late"]);
        for ((_, name, ..), at) in &groups {
            let targets: Vec<&str> = at.iter().map(|&at| changes[at as usize].target()).collect();
            let expected: Vec<&str> = changes
                .iter()
                .filter(|c| c.name.as_str() == *name && c.action != Action::NoOp)
                .map(Change::target)
                .collect();
            assert_eq!(targets, expected, "{name}: every target, in the order of the changes");
        }
    }
}
