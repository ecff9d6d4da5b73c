//! The state file: what the last deploy applied, by resource id.
//!
//! Stage: plan (input) and apply (output). A JSON document, versioned, written
//! atomically (temp file, fsync, rename). File contents are kept once per distinct
//! hash so an offline plan can show a unified diff; secret contents are never kept,
//! only their fingerprint.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::undo::Undo;
use crate::resource::{Desired, Resource};

/// Version of the state file format.
pub const STATE_FORMAT_VERSION: u32 = 1;

/// Why the state file could not be read or written.
#[derive(Debug, Error)]
pub enum StateError {
    /// IO failure.
    #[error("state file `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// Not a state file toolkit can read.
    #[error("state file `{path}` is not valid: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// Written by a newer toolkit.
    #[error("state file `{path}` has format version {found}; this toolkit reads version {STATE_FORMAT_VERSION}")]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
}

/// One applied resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// Kind (`file`, `package`…).
    pub kind: String,
    /// What makes it what it is (see [`Desired::fingerprint`]).
    pub fingerprint: String,
    /// Content hash of a file, to find its text in [`State::contents`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
    /// A secret file: no content kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
    /// What undoes it once it leaves the blueprint; absent for a command without
    /// an undo, and in records written before undos were kept (then files,
    /// directories, units and packages are named by the id: [`Undo::derived`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<Undo>,
    /// Its position in the order of the deploy that recorded it (dependencies
    /// first): removals run in the reverse order, since the graph no longer has them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub order: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// What was applied, by resource id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct State {
    /// Format version.
    pub format_version: u32,
    /// Cluster name.
    pub cluster: String,
    /// Increases with each write.
    pub serial: u64,
    /// Applied resources.
    pub resources: BTreeMap<String, Recorded>,
    /// Non-secret file contents by SHA-256.
    pub contents: BTreeMap<String, String>,
    /// A rolling change not finished yet: the next deploy carries it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutState>,
}

/// A rolling change in progress, kept where the next deploy finds it (as the GPU
/// Operator keeps each node's upgrade state in a node label): which nodes are done,
/// which toolkit holds drained, which wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutState {
    /// Named in every drain reason toolkit sets for it (`toolkit:rollout <id> …`).
    pub id: String,
    /// When it started (RFC 3339, UTC).
    pub started: String,
    /// Per node: where it is.
    pub nodes: BTreeMap<String, NodeRollout>,
}

/// One node's place in a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRollout {
    /// The step it reached.
    pub step: RolloutStep,
    /// Drained by someone else before the rollout reached it: changed, never resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held_by_other: bool,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a node is in a rollout; every step but `pending` and `done` holds the node
/// drained with toolkit's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutStep {
    /// Not reached yet: in service, untouched.
    Pending,
    /// Drain set; running jobs finish.
    Draining,
    /// Empty: no job runs or completes on it.
    Drained,
    /// Its changes are applied.
    Applied,
    /// Rebooted with the changes (reboot class only).
    Rebooted,
    /// A change or a check failed: it stays drained with the failure as its reason.
    Failed,
    /// Checked and resumed (or left drained for whoever drained it before).
    Done,
}

impl RolloutStep {
    /// Whether toolkit holds the node out of service at this step.
    #[must_use]
    pub fn in_flight(self) -> bool {
        !matches!(self, Self::Pending | Self::Done)
    }
}

impl RolloutState {
    /// Nodes toolkit holds drained for this rollout.
    pub fn in_flight(&self) -> impl Iterator<Item = (&str, &NodeRollout)> {
        self.nodes.iter().filter(|(_, node)| node.step.in_flight()).map(|(name, node)| (name.as_str(), node))
    }

    /// Whether every node is done.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.nodes.values().all(|node| node.step == RolloutStep::Done)
    }
}

impl State {
    /// An empty state (nothing applied yet).
    #[must_use]
    pub fn empty(cluster: &str) -> Self {
        Self { format_version: STATE_FORMAT_VERSION, cluster: cluster.to_owned(), ..Self::default() }
    }

    /// Reads `path`; a missing file is an empty state.
    ///
    /// # Errors
    /// [`StateError`] when the file exists but cannot be read or parsed.
    pub fn load(path: &Path, cluster: &str) -> Result<Self, StateError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Self::empty(cluster)),
            Err(source) => return Err(StateError::Io { path: path.to_owned(), source }),
        };
        let state: Self =
            serde_json::from_str(&text).map_err(|source| StateError::Parse { path: path.to_owned(), source })?;
        if state.format_version != STATE_FORMAT_VERSION {
            return Err(StateError::Version { path: path.to_owned(), found: state.format_version });
        }
        Ok(state)
    }

    /// Records `resource` as applied, keeping the order it was recorded at before.
    pub fn record(&mut self, resource: &Resource) {
        let order = self.resources.get(resource.id.as_str()).map_or(0, |recorded| recorded.order);
        self.record_at(resource, order);
    }

    /// Records `resource` as applied at position `order` of the apply order; says
    /// whether the record changed (a deploy that changes no record rewrites nothing).
    pub fn record_at(&mut self, resource: &Resource, order: u64) -> bool {
        let (content_sha256, secret) = match &*resource.desired {
            Desired::File { content, secret, .. } => {
                if !secret && !self.contents.contains_key(content.sha256()) {
                    self.contents.insert(content.sha256().to_owned(), content.text().to_owned());
                }
                (Some(content.sha256().to_owned()), *secret)
            }
            _ => (None, false),
        };
        let recorded = Recorded {
            kind: resource.desired.kind().to_owned(),
            fingerprint: resource.desired.fingerprint(),
            content_sha256: content_sha256.filter(|_| !secret),
            secret,
            undo: Undo::of(&resource.desired),
            order,
        };
        match self.resources.get_mut(resource.id.as_str()) {
            Some(old) if *old == recorded => false,
            Some(old) => {
                *old = recorded;
                true
            }
            None => {
                self.resources.insert(resource.id.to_string(), recorded);
                true
            }
        }
    }

    /// Forgets `id` (removed from the cluster); says whether it was recorded.
    pub fn forget(&mut self, id: &str) -> bool {
        self.resources.remove(id).is_some()
    }

    /// Drops contents no resource refers to.
    pub fn prune_contents(&mut self) {
        let used: std::collections::HashSet<&str> =
            self.resources.values().filter_map(|r| r.content_sha256.as_deref()).collect();
        self.contents.retain(|hash, _| used.contains(hash.as_str()));
    }

    /// Writes atomically: temp file in the same directory, fsync, rename, fsync dir.
    ///
    /// # Errors
    /// [`StateError::Io`].
    pub fn save(&mut self, path: &Path) -> Result<(), StateError> {
        self.serial += 1;
        self.prune_contents();
        let io = |source| StateError::Io { path: path.to_owned(), source };
        let json =
            serde_json::to_vec_pretty(self).map_err(|source| StateError::Parse { path: path.to_owned(), source })?;
        write_atomic(path, &json).map_err(io)
    }
}

/// Writes `bytes` to `path` so a reader sees the old file or the new one, never half.
///
/// # Errors
/// Any IO error; the temp file is removed on failure.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        if let Ok(dir) = std::fs::File::open(dir) {
            // Makes the rename itself durable; not all filesystems allow it.
            let _ = dir.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::{Content, Target};

    fn file(path: &str, text: &str, secret: bool) -> Resource {
        Resource::new(
            Target::node("node01"),
            path,
            Desired::File {
                path: path.into(),
                content: Content::new(text.into()),
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
                secret,
                check: None,
            },
        )
    }

    #[test]
    fn round_trips_and_never_keeps_secret_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let mut state = State::empty("lab");
        state.record(&file("/etc/a", "hello\n", false));
        state.record(&file("/etc/munge/munge.key", "TOP-SECRET-KEY", true));
        state.save(&path).expect("saves");
        let text = std::fs::read_to_string(&path).expect("reads");
        assert!(!text.contains("TOP-SECRET-KEY"));
        let loaded = State::load(&path, "lab").expect("loads");
        assert_eq!(loaded, state);
        assert_eq!(loaded.serial, 1);
        assert_eq!(loaded.contents.len(), 1);
    }

    #[test]
    fn a_missing_file_is_empty_state_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = State::load(&dir.path().join("none.json"), "lab").expect("empty");
        assert!(missing.resources.is_empty());
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{not json").expect("writes");
        assert!(matches!(State::load(&bad, "lab"), Err(StateError::Parse { .. })));
    }

    #[test]
    fn records_what_undoes_each_resource_and_where_it_came_in_the_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let target = Target::node("head");
        let command = |name: &str, undo: Option<Vec<String>>| {
            Resource::new(
                target.clone(),
                name,
                Desired::Command {
                    argv: vec!["sacctmgr".into(), "-i".into(), "add".into(), "qos".into(), "team-b".into()],
                    creates: None,
                    unless: None,
                    description: "create QOS `team-b`".into(),
                    undo,
                    reads: None,
                },
            )
        };
        let undo = vec!["sacctmgr".to_owned(), "-i".into(), "delete".into(), "qos".into(), "team-b".into()];
        let mut state = State::empty("lab");
        state.record_at(&file("/etc/slurm/topology.conf", "x\n", false), 3);
        state.record_at(&command("sacctmgr-qos-team-b", Some(undo.clone())), 7);
        state.record_at(&command("bare", None), 8);
        // Recorded again without an order (a test, the API stage): keeps its order.
        state.record(&command("sacctmgr-qos-team-b", Some(undo.clone())));
        let qos = &state.resources["head:command:sacctmgr-qos-team-b"];
        assert_eq!((qos.undo.clone(), qos.order), (Some(Undo::Run { argv: undo }), 7));
        assert_eq!(state.resources["head:command:bare"].undo, None);
        let file = &state.resources["node01:file:/etc/slurm/topology.conf"];
        assert_eq!(file.undo, Some(Undo::DeleteFile { path: "/etc/slurm/topology.conf".into() }));
        // Declaring an undo changes nothing on the host: the fingerprint ignores it.
        assert_eq!(
            command("c", None).desired.fingerprint(),
            command("c", Some(vec!["true".into()])).desired.fingerprint()
        );
        state.save(&path).expect("saves");
        assert_eq!(State::load(&path, "lab").expect("loads"), state);
    }

    #[test]
    fn a_state_file_from_before_undos_were_kept_still_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let old = r#"{"format_version":1,"cluster":"lab","serial":3,
            "resources":{"node01:file:/etc/hosts":{"kind":"file","fingerprint":"sha256:ab mode:644 owner:root:root"}},
            "contents":{}}"#;
        std::fs::write(&path, old).expect("writes");
        let loaded = State::load(&path, "lab").expect("loads");
        let record = &loaded.resources["node01:file:/etc/hosts"];
        assert_eq!((record.undo.clone(), record.order), (None, 0));
    }
}
