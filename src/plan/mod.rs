//! Plan: desired resources against recorded (or observed) state.
//!
//! Stage: plan. Input: the resource graph and a [`State`](state::State). Output: a
//! [`Plan`], which is data: `plan --out plan.json` saves it, `render` shows it.
//! [`diff::diff`] is pure; reading the state is the caller's job.
//!
//! The JSON form is versioned ([`PLAN_FORMAT_VERSION`]) and documented in
//! `docs/plan-format.md`.

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

use crate::resource::Disruption;
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
/// (target, kind, name, reason, fingerprints) are the same for thousands of entries
/// and share one copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Resource id.
    pub id: Text,
    /// Target host or switch.
    pub target: Text,
    /// Resource kind.
    pub kind: Text,
    /// Path, package, service or command description.
    pub name: Text,
    /// What happens.
    pub action: Action,
    /// Why, in words (`content changed`, `restart: /etc/slurm/slurm.conf changed`).
    pub reason: Text,
    /// Fingerprint before (recorded or observed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Text>,
    /// Fingerprint after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Text>,
    /// Unified diff of a non-secret file's content, when the old content is known.
    /// Shared: the same edit on every node is one diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<Text>,
    /// Secret content: never shown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
    /// What the change does to running work (absent: `none`).
    #[serde(default, skip_serializing_if = "is_none")]
    pub disruption: Disruption,
    /// The values a value-setting command sets: on create every one, on update those
    /// that differ, each with its value before and after.
    #[serde(default, skip_serializing_if = "Values::is_empty")]
    pub values: Values,
}

impl Change {
    /// A change with no fingerprints, diff, values or disruption yet.
    #[must_use]
    pub fn new(id: Text, target: Text, kind: Text, name: Text, action: Action, reason: Text) -> Self {
        Self {
            id,
            target,
            kind,
            name,
            action,
            reason,
            before: None,
            after: None,
            diff: None,
            secret: false,
            disruption: Disruption::None,
            values: Values::default(),
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_none(disruption: &Disruption) -> bool {
    *disruption == Disruption::None
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
}

impl Plan {
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
        }
    }
}
