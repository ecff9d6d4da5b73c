//! The state file: what the last deploy applied, by resource id.
//!
//! Stage: plan (input) and apply (output). Versioned JSON Lines ([`file`]), written
//! atomically (temp file, fsync, rename). Each distinct fingerprint is written once;
//! file texts are kept once per distinct hash so an offline plan can show a unified
//! diff, and are parsed only when a diff needs them ([`Contents`]); secret contents
//! are never kept, only their fingerprint.

mod contents;
mod file;
pub mod provisioning;

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use self::contents::Contents;
use super::undo::Undo;
use crate::resource::{Desired, Resource};
use crate::text::Text;

/// Version of the state file format this toolkit writes; it reads every earlier one.
pub const STATE_FORMAT_VERSION: u32 = 2;

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
    /// Parsed, but what it holds does not fit together.
    #[error("state file `{path}` is not valid: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Written by a newer toolkit.
    #[error(
        "state file `{path}` has format version {found}; this toolkit reads versions 1 to {STATE_FORMAT_VERSION}: \
         use the toolkit that wrote it, or a newer one"
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
}

/// One applied resource. Kind and fingerprint are shared text: the nodes of a
/// group record the same few.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Kind (`file`, `package`…).
    pub kind: Text,
    /// What makes it what it is (see [`Desired::fingerprint`]).
    pub fingerprint: Text,
    /// A secret file: no content kept.
    pub secret: bool,
    /// What undoes it once it leaves the blueprint when that is not what its id
    /// names ([`Undo::derived`]: files, directories, units and packages, by path or
    /// name; API objects): a command's declared undo, a Kubernetes object's. `None`
    /// also for a command without an undo.
    pub undo: Option<Undo>,
    /// Its position in the order of the deploy that recorded it (dependencies
    /// first): removals run in the reverse order, since the graph no longer has them.
    pub order: u64,
}

impl Recorded {
    /// Content hash of a non-secret file, to find its text in [`State::contents`]:
    /// the one its fingerprint starts with.
    #[must_use]
    pub fn content_sha256(&self) -> Option<&str> {
        if self.secret || self.kind != "file" {
            return None;
        }
        self.fingerprint.strip_prefix("sha256:")?.split(' ').next()
    }
}

/// The records of a state, by resource id. Hashed, not ordered: a deploy looks up
/// every desired resource's record (a quarter of a million at 4,096 nodes), and in
/// an ordered map each lookup compares long ids that share their host and kind
/// prefix, one pointer chase per level; the file is written sorted ([`file`]).
pub type Records = HashMap<String, Recorded, foldhash::fast::RandomState>;

/// What was applied, by resource id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// Format version.
    pub format_version: u32,
    /// Cluster name.
    pub cluster: String,
    /// Increases with each write.
    pub serial: u64,
    /// Applied resources.
    pub resources: Records,
    /// Non-secret file contents by SHA-256.
    pub contents: Contents,
    /// A rolling change not finished yet: the next deploy carries it on.
    pub rollout: Option<RolloutState>,
    /// Bare-metal nodes by name: where each is on its way from the rack.
    pub provisioning: BTreeMap<String, provisioning::NodeProvisioning>,
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

    /// Reads `path` (any format version, [`file`]); a missing file is an empty state.
    /// The file texts are kept unparsed until a diff asks for one.
    ///
    /// # Errors
    /// [`StateError`] when the file exists but cannot be read or parsed.
    pub fn load(path: &Path, cluster: &str) -> Result<Self, StateError> {
        let io = |source| StateError::Io { path: path.to_owned(), source };
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Self::empty(cluster)),
            Err(source) => return Err(io(source)),
        };
        file::read(path, file)
    }

    /// Records `resource` as applied, keeping the order it was recorded at before.
    pub fn record(&mut self, resource: &Resource) {
        let order = self.resources.get(resource.id.as_str()).map_or(0, |recorded| recorded.order);
        self.record_at(resource, order);
    }

    /// Records `resource` as applied at position `order` of the apply order; says
    /// whether the record changed (a deploy that changes no record rewrites nothing).
    pub fn record_at(&mut self, resource: &Resource, order: u64) -> bool {
        self.record_fingerprinted(resource, &Text::from(resource.desired.fingerprint()), order)
    }

    /// As [`Self::record_at`], with the resource's fingerprint made already (the
    /// nodes of a group share one). An unchanged record is compared, not rebuilt.
    pub fn record_fingerprinted(&mut self, resource: &Resource, fingerprint: &Text, order: u64) -> bool {
        let id = resource.id.as_str();
        let kind = resource.desired.kind();
        let secret = matches!(&*resource.desired, Desired::File { secret: true, .. });
        let undo = Undo::kept(&resource.desired, id);
        let old = self.resources.get_mut(id);
        if let Some(old) = &old
            && old.kind == kind
            && old.fingerprint == *fingerprint
            && old.secret == secret
            && old.undo == undo
            && old.order == order
        {
            return false;
        }
        let recorded = Recorded { kind: kind.into(), fingerprint: fingerprint.clone(), secret, undo, order };
        match old {
            Some(old) => *old = recorded,
            None => {
                self.resources.insert(id.to_owned(), recorded);
            }
        }
        if let Desired::File { content, secret: false, .. } = &*resource.desired
            && !self.contents.contains(content.sha256())
        {
            self.contents.share(content);
        }
        true
    }

    /// Forgets `id` (removed from the cluster); says whether it was recorded.
    pub fn forget(&mut self, id: &str) -> bool {
        self.resources.remove(id).is_some()
    }

    /// Drops contents no resource refers to.
    pub fn prune_contents(&mut self) {
        let used: std::collections::HashSet<&str> =
            self.resources.values().filter_map(Recorded::content_sha256).collect();
        self.contents.retain(|hash| used.contains(hash));
    }

    /// Writes atomically: temp file in the same directory, fsync, rename, fsync dir.
    ///
    /// # Errors
    /// [`StateError::Io`].
    pub fn save(&mut self, path: &Path) -> Result<(), StateError> {
        self.serial += 1;
        self.prune_contents();
        let io = |source| StateError::Io { path: path.to_owned(), source };
        write_atomic_with(path, |file| {
            let mut out = std::io::BufWriter::new(file);
            file::write(self, &mut out)?;
            out.flush()
        })
        .map_err(io)
    }
}

/// Writes `bytes` to `path` so a reader sees the old file or the new one, never half.
///
/// # Errors
/// Any IO error; the temp file is removed on failure.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// As [`write_atomic`], with the bytes written by `write_into` into the temp file.
///
/// # Errors
/// Any IO error, `write_into`'s included; the temp file is removed on failure.
pub fn write_atomic_with(
    path: &Path,
    write_into: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        write_into(&mut file)?;
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

    /// A state of node01's `(path, text, secret)` files, saved in a new directory.
    fn saved(files: &[(&str, &str, bool)]) -> (tempfile::TempDir, PathBuf, State) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let mut state = State::empty("lab");
        for &(file_path, text, secret) in files {
            state.record(&file(file_path, text, secret));
        }
        state.save(&path).expect("saves");
        (dir, path, state)
    }

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
        let (_dir, path, state) =
            saved(&[("/etc/a", "hello\n", false), ("/etc/munge/munge.key", "TOP-SECRET-KEY", true)]);
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
        // A file's undo is the one its id names: not kept twice.
        let id = "node01:file:/etc/slurm/topology.conf";
        assert_eq!(state.resources[id].undo, None);
        let undo = crate::plan::removal::undo_of(id, &state.resources[id]);
        assert_eq!(undo, Some(Undo::DeleteFile { path: "/etc/slurm/topology.conf".into() }));
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

    #[test]
    fn a_state_written_by_version_1_loads_and_is_written_back_as_version_2() {
        // Written by main at 9737680 (format 1): every kind of record, a secret, a
        // record from before undos and orders were kept, a rollout in progress.
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state/v1-main.json");
        let old = State::load(&fixture, "lab").expect("a version-1 file loads");
        assert_eq!((old.format_version, old.serial, old.resources.len()), (STATE_FORMAT_VERSION, 1, 10));
        let conf = &old.resources["node01:file:/etc/slurm/slurm.conf"];
        assert_eq!(
            old.contents.get(conf.content_sha256().expect("a hash")),
            Some("ClusterName=lab\nSlurmctldHost=head\n")
        );
        let key = &old.resources["node01:file:/etc/munge/munge.key"];
        assert!(key.secret && key.content_sha256().is_none());
        // What undoes each record is what version 1 said, kept or named by the id.
        let undo = |id: &str| crate::plan::removal::undo_of(id, &old.resources[id]);
        assert_eq!(undo("node01:file:/etc/hosts"), Some(Undo::DeleteFile { path: "/etc/hosts".into() }));
        assert_eq!(undo("node01:dir:/etc/slurm"), Some(Undo::DeleteDirectory { path: "/etc/slurm".into() }));
        assert_eq!(undo("node01:package:slurmd"), Some(Undo::KeepPackage { name: "slurmd".into() }));
        assert_eq!(undo("node01:power:system"), Some(Undo::Api));
        assert_eq!(undo("node01:command:nvidia-persistenced-mode"), None);
        assert!(matches!(undo("head:command:sacctmgr-qos-team-b"), Some(Undo::Run { argv }) if argv[2] == "delete"));
        assert_eq!(old.resources["node01:file:/etc/old.conf"].order, 0);
        assert_eq!(old.rollout.as_ref().map(|rollout| rollout.nodes["node01"].step), Some(RolloutStep::Applied));

        // Recording the same resources again changes no record: a deploy with
        // nothing to do leaves a version-1 file as it is.
        let mut again = old.clone();
        for (rank, resource) in fixture_resources().iter().enumerate() {
            assert!(!again.record_at(resource, rank as u64 + 1), "{} unchanged", resource.id);
        }
        assert_eq!(again, old);

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        again.save(&path).expect("saves");
        let text = std::fs::read_to_string(&path).expect("reads");
        assert!(text.starts_with("{\"format_version\":2,"), "{text}");
        assert!(!text.contains("TOP-SECRET-KEY"));
        let new = State::load(&path, "lab").expect("loads");
        assert_eq!(new.serial, 2);
        assert_eq!(new, again);
        let v1_bytes = std::fs::metadata(&fixture).expect("fixture").len();
        assert!((text.len() as u64) < v1_bytes / 2, "{} bytes, version 1 {v1_bytes}", text.len());
    }

    /// The resources of `tests/fixtures/state/v1-main.json`, as main recorded them.
    fn fixture_resources() -> Vec<Resource> {
        use crate::resource::api::{ApiDesired, PowerState};
        use crate::resource::{OnChange, Reads, ResourceId};
        let target = Target::node("node01");
        let command =
            |name: &str, argv: &[&str], creates: Option<&str>, undo: Option<&[&str]>, reads: Option<Reads>| {
                let words = |list: &[&str]| list.iter().map(|word| (*word).to_owned()).collect::<Vec<_>>();
                let host = if reads.is_some() { Target::node("head") } else { target.clone() };
                Resource::new(
                    host,
                    name,
                    Desired::Command {
                        argv: words(argv),
                        creates: creates.map(str::to_owned),
                        unless: None,
                        description: name.to_owned(),
                        undo: undo.map(words),
                        reads: reads.map(Box::new),
                    },
                )
            };
        let reads = Reads {
            argv: vec!["sacctmgr".into(), "-nP".into(), "show".into(), "qos".into(), "team-b".into()],
            wanted: vec![("Priority".into(), "10".into()), ("GrpTRES".into(), "gres/gpu=8".into())],
        };
        vec![
            Resource::new(
                target.clone(),
                "/etc/slurm",
                Desired::Directory { path: "/etc/slurm".into(), mode: 0o755, owner: "root".into() },
            ),
            file("/etc/slurm/slurm.conf", "ClusterName=lab\nSlurmctldHost=head\n", false),
            file("/etc/hosts", "127.0.0.1 localhost\n10.10.0.11 node01\n", false),
            file("/etc/munge/munge.key", "TOP-SECRET-KEY", true),
            Resource::new(target.clone(), "slurmd", Desired::Package { name: "slurmd".into() }),
            Resource::new(
                target.clone(),
                "slurmd",
                Desired::Service {
                    name: "slurmd".into(),
                    enabled: true,
                    running: true,
                    watches: crate::resource::watched([&ResourceId::new("node01", "file", "/etc/slurm/slurm.conf")]),
                    on_change: OnChange::Restart,
                },
            ),
            command(
                "sacctmgr-qos-team-b",
                &["sacctmgr", "-i", "add", "qos", "team-b"],
                None,
                Some(&["sacctmgr", "-i", "delete", "qos", "team-b"]),
                Some(reads),
            ),
            command(
                "nvidia-persistenced-mode",
                &["nvidia-smi", "-pm", "1"],
                Some("/run/toolkit/persistence"),
                None,
                None,
            ),
            Resource::new(
                target.clone(),
                "system",
                Desired::Api(Box::new(ApiDesired::Power { host: "node01".to_owned(), state: PowerState::On })),
            ),
        ]
    }

    #[test]
    fn file_texts_are_parsed_only_when_asked_for() {
        let (_dir, path, state) = saved(&[("/etc/a", "line one\nline \"two\"\n", false), ("/etc/b", "B\n", false)]);
        let text = std::fs::read_to_string(&path).expect("reads");
        // The records, then one line per text.
        assert_eq!(text.lines().count(), 3, "{text}");
        let loaded = State::load(&path, "lab").expect("loads");
        assert!(loaded.contents.is_unread());
        let hash = loaded.resources["node01:file:/etc/a"].content_sha256().expect("hash").to_owned();
        assert_eq!(loaded.contents.get(&hash), Some("line one\nline \"two\"\n"));
        assert!(!loaded.contents.is_unread());
        assert_eq!(loaded, state);

        // A damaged text costs its diff, not the state.
        let lines: Vec<&str> = text.lines().collect();
        std::fs::write(&path, format!("{}\n{}\n{}\n", lines[0], &lines[1][..10], lines[2])).expect("writes");
        let loaded = State::load(&path, "lab").expect("the records load");
        assert_eq!(loaded.resources, state.resources);
        assert_eq!(loaded.contents.len(), 1);
    }

    #[test]
    fn unread_texts_are_those_of_the_file_loaded_even_after_a_save_replaced_it() {
        let (_dir, path, _) = saved(&[("/etc/a", "old text\n", false)]);
        let loaded = State::load(&path, "lab").expect("loads");
        let hash = loaded.resources["node01:file:/etc/a"].content_sha256().expect("hash").to_owned();

        // A deploy saves the next state over it before a diff reads the old text.
        let mut next = State::empty("lab");
        next.record(&file("/etc/a", "new text\n", false));
        next.save(&path).expect("saves");
        assert!(loaded.contents.is_unread());
        assert_eq!(loaded.contents.get(&hash), Some("old text\n"));
        assert_eq!(loaded.contents.len(), 1);
    }

    #[test]
    fn each_distinct_fingerprint_is_written_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let mut state = State::empty("lab");
        for node in 0..50 {
            let target = Target::node(&format!("node{node:02}"));
            state.record(&Resource::new(target.clone(), "slurmd", Desired::Package { name: "slurmd".into() }));
            let conf = Resource::new(
                target,
                "/etc/slurm/slurm.conf",
                Desired::File {
                    path: "/etc/slurm/slurm.conf".into(),
                    content: Content::new("ClusterName=lab\n".into()),
                    mode: 0o644,
                    owner: "root".into(),
                    group: "root".into(),
                    secret: false,
                    check: None,
                },
            );
            state.record(&conf);
        }
        state.save(&path).expect("saves");
        let text = std::fs::read_to_string(&path).expect("reads");
        assert_eq!(text.matches("\"package:slurmd\"").count(), 1, "{text}");
        assert_eq!(text.matches("owner:root:root").count(), 1, "{text}");
        assert_eq!(State::load(&path, "lab").expect("loads"), state);
    }

    #[test]
    fn the_file_is_the_same_whatever_order_the_records_were_made_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let resources: Vec<Resource> = (0..40)
            .map(|node| {
                let target = Target::node(&format!("node{node:02}"));
                let package = format!("package-{}", node % 3);
                Resource::new(target, &package, Desired::Package { name: package.clone() })
            })
            .collect();
        let save = |order: &mut dyn Iterator<Item = &Resource>, name: &str| {
            let mut state = State::empty("lab");
            for resource in order {
                state.record(resource);
            }
            let path = dir.path().join(name);
            state.save(&path).expect("saves");
            std::fs::read_to_string(&path).expect("reads")
        };
        let forward = save(&mut resources.iter(), "forward.json");
        let backward = save(&mut resources.iter().rev(), "backward.json");
        assert_eq!(forward, backward);
        // By id, and the fingerprints in the order the ids first name them.
        assert!(forward.contains("\"fingerprints\":[\"package:package-0\",\"package:package-1\","), "{forward}");
        assert!(forward.find("\"node00:").expect("node00") < forward.find("\"node39:").expect("node39"));
    }

    #[test]
    fn a_damaged_or_newer_state_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{\"format_version\":3,\"cluster\":\"lab\"}\n").expect("writes");
        let error = State::load(&path, "lab").expect_err("newer").to_string();
        assert!(error.contains("format version 3") && error.contains("state.json"), "{error}");
        let text = "{\"format_version\":2,\"cluster\":\"lab\",\"serial\":1,\"fingerprints\":[\"package:a\"],\
                    \"resources\":{\"n1:package:a\":[1,1]}}\n";
        std::fs::write(&path, text).expect("writes");
        let error = State::load(&path, "lab").expect_err("no such fingerprint").to_string();
        assert!(error.contains("`n1:package:a` names fingerprint 1 of 1"), "{error}");
    }
}
