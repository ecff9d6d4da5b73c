//! Plan: desired resources against recorded (or observed) state.
//!
//! Stage: plan. Input: the resource graph and a [`State`](state::State). Output: a
//! [`Plan`], which is data: `plan --out plan.json` saves it, `render` shows it.
//! [`diff::diff`] is pure; reading the state is the caller's job.
//!
//! The JSON form is versioned ([`PLAN_FORMAT_VERSION`]) and documented in
//! `docs/plan-format.md`.

pub mod agreement;
pub mod api;
pub mod described;
pub mod diff;
pub mod disruption;
pub mod files;
pub mod removal;
pub mod render;
pub mod state;
pub mod undo;

use serde::{Deserialize, Serialize};

pub use diff::diff;
pub use disruption::{MaxUnavailable, RolloutPlan};

use crate::resource::{Disruption, id_parts};
use crate::text::Text;

/// Version of the plan JSON format.
pub const PLAN_FORMAT_VERSION: u32 = 1;

/// What will happen to one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Not there yet.
    Create,
    /// There, but different (or a service to restart/reload).
    Update,
    /// Recorded but no longer desired: files and directories are deleted,
    /// services stopped and disabled, commands undone by their declared undo;
    /// packages and commands without an undo are left in place and forgotten
    /// (the reason says so).
    Remove,
    /// Already as desired.
    #[serde(rename = "no-op")]
    NoOp,
}

impl Action {
    /// The Terraform-style sign.
    #[must_use]
    pub fn sign(self) -> char {
        match self {
            Self::Create => '+',
            Self::Update => '~',
            Self::Remove => '-',
            Self::NoOp => ' ',
        }
    }
}

/// One resource's planned change. Its strings are [`Text`]: at scale most of them
/// (name, reason, fingerprints) are the same for thousands of entries and share one
/// copy. Its target and kind are those of its id (`target:kind:name`), read from it
/// rather than held twice: at 32,768 nodes two more pointers per entry were 30 MB.
/// In JSON they are fields as any other, checked against the id when read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Entry<String>")]
pub struct Change {
    /// Resource id: `<target>:<kind>:<name>`.
    pub id: Text,
    /// Path, package, service or command description.
    pub name: Text,
    /// What happens.
    pub action: Action,
    /// Why, in words (`content changed`, `restart: /etc/slurm/slurm.conf changed`).
    pub reason: Text,
    /// Fingerprint after.
    pub after: Option<Text>,
    /// Secret content: never shown.
    pub secret: bool,
    /// What the change does to running work (absent: `none`).
    pub disruption: Disruption,
    /// The fingerprint before, a file's diff and a command's values:
    /// [`Change::before`], [`Change::diff`], [`Change::values`].
    pub delta: Delta,
}

impl Change {
    /// A change with no fingerprints, diff, values or disruption yet.
    #[must_use]
    pub fn new(id: Text, name: Text, action: Action, reason: Text) -> Self {
        Self {
            id,
            name,
            action,
            reason,
            after: None,
            secret: false,
            disruption: Disruption::None,
            delta: Delta::default(),
        }
    }

    /// Fingerprint before (recorded or observed).
    #[must_use]
    pub fn before(&self) -> Option<&Text> {
        self.delta.0.as_ref()?.before.as_ref()
    }

    /// Unified diff of a non-secret file's content, when the old content is known.
    #[must_use]
    pub fn diff(&self) -> Option<&Text> {
        self.delta.0.as_ref()?.diff.as_ref()
    }

    /// The values a value-setting command sets: on create every one, on update those
    /// that differ, each with its value before and after.
    #[must_use]
    pub fn values(&self) -> &[ValueChange] {
        self.delta.0.as_ref().map_or(&[], |delta| &delta.values)
    }

    /// Target host or switch: the id's first part.
    #[must_use]
    pub fn target(&self) -> &str {
        id_parts(&self.id).0
    }

    /// Resource kind: the id's second part.
    #[must_use]
    pub fn kind(&self) -> &str {
        id_parts(&self.id).1
    }
}

/// A [`Change`] as plan JSON has it, target and kind spelled out.
#[derive(Serialize, Deserialize)]
struct Entry<T: AsRef<str>> {
    id: Text,
    target: T,
    kind: T,
    name: Text,
    action: Action,
    reason: Text,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    before: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    diff: Option<Text>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    secret: bool,
    #[serde(default, skip_serializing_if = "is_none")]
    disruption: Disruption,
    #[serde(default, skip_serializing_if = "Values::is_empty")]
    values: Values,
}

impl Serialize for Change {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Clones of shared texts: counter increments, no copies.
        Entry {
            id: self.id.clone(),
            target: self.target(),
            kind: self.kind(),
            name: self.name.clone(),
            action: self.action,
            reason: self.reason.clone(),
            before: self.before().cloned(),
            after: self.after.clone(),
            diff: self.diff().cloned(),
            secret: self.secret,
            disruption: self.disruption,
            values: self.delta.0.as_ref().map(|delta| delta.values.clone()).unwrap_or_default(),
        }
        .serialize(serializer)
    }
}

impl TryFrom<Entry<String>> for Change {
    type Error = String;

    fn try_from(entry: Entry<String>) -> Result<Self, String> {
        let change = Self {
            id: entry.id,
            name: entry.name,
            action: entry.action,
            reason: entry.reason,
            after: entry.after,
            secret: entry.secret,
            disruption: entry.disruption,
            delta: Delta::new(entry.before, entry.diff, entry.values),
        };
        if (change.target(), change.kind()) != (entry.target.as_str(), entry.kind.as_str()) {
            return Err(format!(
                "entry `{}` has target `{}` and kind `{}`, not those of its id (`target:kind:name`)",
                change.id, entry.target, entry.kind
            ));
        }
        Ok(change)
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_none(disruption: &Disruption) -> bool {
    *disruption == Disruption::None
}

/// What a change replaces and how it differs: the fingerprint before, a file's diff,
/// a command's values ([`Change::before`], [`Change::diff`], [`Change::values`]). One
/// pointer, nothing allocated when there is none (every entry of a first plan), shared
/// by the entries of the same transition (an unchanged file on every node: one): as
/// three fields they were 16 more bytes in each of ~230,000 entries at 4,096 nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta(Option<std::sync::Arc<DeltaParts>>);

#[derive(Debug, PartialEq, Eq)]
struct DeltaParts {
    before: Option<Text>,
    diff: Option<Text>,
    values: Values,
}

impl Delta {
    /// The fingerprint `before`, the `diff` and the `values`; nothing allocates nothing.
    #[must_use]
    pub fn new(before: Option<Text>, diff: Option<Text>, values: Values) -> Self {
        let none = before.is_none() && diff.is_none() && values.is_empty();
        Self((!none).then(|| std::sync::Arc::new(DeltaParts { before, diff, values })))
    }

    /// Only a fingerprint before: what a removal had, what a pending setting is.
    #[must_use]
    pub fn from_before(before: Text) -> Self {
        Self::new(Some(before), None, Values::default())
    }

    /// This delta with the fingerprint before replaced by `before`.
    #[must_use]
    pub fn with_before(&self, before: Option<Text>) -> Self {
        match &self.0 {
            Some(parts) => Self::new(before, parts.diff.clone(), parts.values.clone()),
            None => Self::new(before, None, Values::default()),
        }
    }
}

/// The values of one change ([`Change::values`]), read as a slice. One pointer, and
/// nothing allocated when empty, since nearly every entry has none (at 4,096 nodes a
/// `Vec` here was 3.7 MB of plan); shared, since every node's copy of a command sets
/// the same values (at 4,096 nodes a copy per node was 2.6 MB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Values(Option<std::sync::Arc<Vec<ValueChange>>>);

impl Values {
    /// The values in `values`; none allocates nothing.
    #[must_use]
    pub fn new(values: Vec<ValueChange>) -> Self {
        Self((!values.is_empty()).then(|| std::sync::Arc::new(values)))
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl Serialize for Values {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        <[ValueChange]>::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(Self::new)
    }
}

impl std::ops::Deref for Values {
    type Target = [ValueChange];

    fn deref(&self) -> &[ValueChange] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl FromIterator<ValueChange> for Values {
    fn from_iter<I: IntoIterator<Item = ValueChange>>(values: I) -> Self {
        Self::new(values.into_iter().collect())
    }
}

/// One value a command sets, before → after (`GrpTRES`: `gres/gpu=8` → `gres/gpu=4`).
/// Shared [`Text`]: every node's sysctl command sets the same values.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ValueChange {
    /// The field's name, as the command's tool spells it.
    pub key: Text,
    /// The value read now (or recorded); absent when the object is not there yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Text>,
    /// The value the command sets.
    pub after: Text,
}

/// Counts per action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Resources to create.
    pub create: usize,
    /// Resources to update.
    pub update: usize,
    /// Resources to remove.
    pub remove: usize,
    /// Resources already as desired.
    pub no_op: usize,
}

impl Summary {
    /// Counts of `changes`.
    #[must_use]
    pub fn of(changes: &[Change]) -> Self {
        let mut summary = Self::default();
        for change in changes {
            match change.action {
                Action::Create => summary.create += 1,
                Action::Update => summary.update += 1,
                Action::Remove => summary.remove += 1,
                Action::NoOp => summary.no_op += 1,
            }
        }
        summary
    }

    /// Whether anything would change.
    #[must_use]
    pub fn has_changes(&self) -> bool {
        self.create + self.update + self.remove > 0
    }
}

/// Where the "before" side came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    /// The state file of the last deploy.
    State,
    /// Facts read from the targets.
    Observed,
}

/// A plan: every resource's change, in dependency order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// [`PLAN_FORMAT_VERSION`].
    pub format_version: u32,
    /// toolkit version that made it.
    pub toolkit_version: String,
    /// Cluster name.
    pub cluster: String,
    /// SHA-256 of the blueprint file.
    pub blueprint_sha256: String,
    /// SHA-256 of the inventory file, if one was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_sha256: Option<String>,
    /// The blueprint file the plan was made from, so `deploy plan.json` finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blueprint_path: Option<String>,
    /// The inventory file, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_path: Option<String>,
    /// Baseline of the comparison.
    pub baseline: Baseline,
    /// Counts.
    pub summary: Summary,
    /// Every resource, in dependency order.
    pub changes: Vec<Change>,
    /// Preconditions that do not hold but that toolkit does not change (firmware
    /// versions other than the hardware profile's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Each host's disruption class and the waves of the rolling change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPlan>,
    /// Spares on standby and the swaps in effect, when the blueprint has spares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spares: Option<SparesPlan>,
}

/// Who stands by and who serves in whose place: what the partitions in the plan's
/// slurm.conf say, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparesPlan {
    /// Spares on standby (in the `spare` partition).
    pub standby: Vec<String>,
    /// Spares serving in place of nodes in RMA.
    pub swaps: Vec<crate::model::spares::Swap>,
    /// Nodes in RMA no spare could replace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreplaced: Vec<String>,
}

impl SparesPlan {
    /// The model's roster in names; `None` when it has no spares and no swap.
    #[must_use]
    pub fn of(model: &crate::model::Model) -> Option<Self> {
        let roster = &model.roster;
        if roster.is_empty() && roster.unreplaced.is_empty() {
            return None;
        }
        Some(Self {
            standby: roster.standby.iter().map(|&index| model.nodes[index].name.clone()).collect(),
            swaps: roster.swaps.clone(),
            unreplaced: roster.unreplaced.clone(),
        })
    }

    /// One line per spare on standby and per swap, as `plan` and `status` print them.
    #[must_use]
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.standby.is_empty() {
            lines.push(format!(
                "standing by in partition `{}`: {}",
                crate::model::spares::SPARE_PARTITION,
                crate::model::hostlist::compress(self.standby.iter().map(String::as_str))
            ));
        }
        for swap in &self.swaps {
            let state = if swap.returned { "back from RMA, a spare now" } else { "in RMA" };
            lines.push(format!(
                "{} serves in place of {} ({state}): {}",
                swap.spare,
                swap.failed,
                swap.locality.describe()
            ));
        }
        for node in &self.unreplaced {
            lines.push(format!("{node} in RMA: no spare left for it; it stays drained in its partitions"));
        }
        lines
    }
}

impl Plan {
    /// Leaves out the targets the inventory does not name at all (`unreachable`
    /// reasons `no SSH target named …`: a planned switch without an entry, whose
    /// configs lint says are rendered but cannot be deployed), with a warning, and
    /// takes them off `unreachable`: they are not part of this deployment.
    pub fn leave_out_absent(&mut self, unreachable: &mut std::collections::BTreeMap<String, String>) {
        let absent: Vec<String> = unreachable
            .iter()
            .filter(|(_, reason)| reason.starts_with("no SSH target named"))
            .map(|(host, _)| host.clone())
            .collect();
        if absent.is_empty() {
            return;
        }
        self.changes.retain(|change| !absent.iter().any(|host| host == change.target()));
        self.summary = Summary::of(&self.changes);
        for host in &absent {
            unreachable.remove(host);
        }
        self.warnings.push(format!(
            "not deployed: {} (not in the inventory; add them to `switches` to configure them)",
            absent.join(", ")
        ));
    }

    /// A plan of `changes` made now from `inputs` against `baseline`, counted; no
    /// warnings and no rollout yet.
    #[must_use]
    pub fn new(inputs: diff::PlanInputs, baseline: Baseline, changes: Vec<Change>) -> Self {
        Self {
            format_version: PLAN_FORMAT_VERSION,
            toolkit_version: env!("CARGO_PKG_VERSION").to_owned(),
            cluster: inputs.cluster,
            blueprint_sha256: inputs.blueprint_sha256,
            inventory_sha256: inputs.inventory_sha256,
            blueprint_path: None,
            inventory_path: None,
            baseline,
            summary: Summary::of(&changes),
            changes,
            warnings: Vec::new(),
            rollout: None,
            spares: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_its_target_and_kind_from_its_id_and_writes_them_out() {
        let change = Change::new("gpu0001:file:/etc/a:b".into(), "/etc/a:b".into(), Action::Create, "new".into());
        assert_eq!((change.target(), change.kind()), ("gpu0001", "file"));
        let json = serde_json::to_value(&change).expect("serializes");
        assert_eq!((json["target"].as_str(), json["kind"].as_str()), (Some("gpu0001"), Some("file")));
        let back: Change = serde_json::from_value(json.clone()).expect("reads back");
        assert_eq!(back, change);
        let mut other = json;
        other["target"] = "gpu0002".into();
        let error = serde_json::from_value::<Change>(other).expect_err("a target that is not the id's");
        assert!(error.to_string().contains("not those of its id"), "{error}");
        let bare = Change::new("odd".into(), "odd".into(), Action::Create, "new".into());
        assert_eq!((bare.target(), bare.kind()), ("odd", ""), "an id without parts: the whole, then nothing");
    }
}
