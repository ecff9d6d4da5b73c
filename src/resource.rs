//! Resources: the unit of desired state on one target.
//!
//! Stage: render → graph → plan. A [`Resource`] is a file, directory, package,
//! service or guarded command on one host or switch, or an API object (BMC, cloud),
//! with a stable id that keys the plan and the state file, and the ids it depends on.
//! [`api`] holds the data of API objects, so the core needs no HTTP client module.

pub mod api;
pub mod kube;

use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use self::api::ApiDesired;
use crate::text::Text;

/// Stable id: `<target>:<kind>:<name>`, e.g. `node01:file:/etc/slurm/slurm.conf`.
/// Shared [`Text`]: a resource's id, the ids that depend on it, its plan entry and
/// its walker outcome are one allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceId(pub Text);

impl ResourceId {
    /// Builds `<target>:<kind>:<name>`.
    #[must_use]
    pub fn new(target: &str, kind: &str, name: &str) -> Self {
        let mut id = String::with_capacity(target.len() + kind.len() + name.len() + 2);
        for part in [target, ":", kind, ":", name] {
            id.push_str(part);
        }
        Self(id.into())
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The target, kind and name of an id's text (`node01:file:/etc/hosts` → `node01`,
/// `file`, `/etc/hosts`); a part the text lacks is empty. The name may hold `:`. A
/// plain scan: targets and kinds are a few bytes, shorter than a `memchr` sets up
/// for, and plans ask for them per entry (at 32,768 nodes `split_once` here was
/// ~0.3 s of a plan).
#[must_use]
pub fn id_parts(id: &str) -> (&str, &str, &str) {
    let end = |start: usize| id.bytes().skip(start).position(|byte| byte == b':').map_or(id.len(), |at| start + at);
    let target_end = end(0);
    let kind_start = (target_end + 1).min(id.len());
    let kind_end = end(kind_start);
    (&id[..target_end], &id[kind_start..kind_end], &id[(kind_end + 1).min(id.len())..])
}

impl fmt::Display for ResourceId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// File content shared between every target that gets the same bytes, hashed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content(Arc<ContentInner>);

impl std::hash::Hash for Content {
    /// The digest stands for the text (equal texts have equal digests).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.sha256.hash(state);
    }
}

#[derive(Debug, PartialEq, Eq)]
struct ContentInner {
    text: String,
    sha256: String,
    /// False when only the hash was kept ([`Content::of_digest`]).
    kept: bool,
}

impl Content {
    /// Wraps and hashes `text`.
    #[must_use]
    pub fn new(mut text: String) -> Self {
        // Rendered text grows by doubling; the spare capacity would live as long as the plan.
        text.shrink_to_fit();
        let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
        Self(Arc::new(ContentInner { text, sha256, kept: true }))
    }

    /// The content whose text hashes to `digest` (SHA-256), without the text: for a
    /// plan that neither shows nor writes it (a switch's FRR configuration is ~20 KB,
    /// and a large fabric has thousands), the text streamed into the hash as it was
    /// rendered. [`Content::text`] is then empty; only what applies or writes files
    /// needs it, and those render with texts.
    #[must_use]
    pub fn of_digest(digest: &[u8]) -> Self {
        Self(Arc::new(ContentInner { text: String::new(), sha256: hex::encode(digest), kept: false }))
    }

    /// Whether the text was kept (not [`Content::of_digest`]).
    #[must_use]
    pub fn has_text(&self) -> bool {
        self.0.kept
    }

    /// The bytes as text.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.0.text
    }

    /// Content of a secret that could not be read here (an offline plan without
    /// access to the key): its hash is `unresolved`, and a plan does not compare it.
    #[must_use]
    pub fn unresolved_secret() -> Self {
        Self(Arc::new(ContentInner { text: String::new(), sha256: UNRESOLVED.to_owned(), kept: true }))
    }

    /// Whether this is [`Content::unresolved_secret`].
    #[must_use]
    pub fn is_unresolved(&self) -> bool {
        self.0.sha256 == UNRESOLVED
    }

    /// Hex SHA-256 of the text.
    #[must_use]
    pub fn sha256(&self) -> &str {
        &self.0.sha256
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.text.len()
    }

    /// Whether it is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.text.is_empty()
    }
}

/// The hash of content that could not be resolved.
pub const UNRESOLVED: &str = "unresolved";

/// Where a resource lives: a node or a switch, by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Target {
    /// Host or switch name (`node01`, `leaf0`); shared by the target's resources.
    pub name: Text,
    /// Whether it is a node or a switch.
    pub kind: TargetKind,
}

impl Target {
    /// The server `name`.
    #[must_use]
    pub fn node(name: &str) -> Self {
        Self { name: name.into(), kind: TargetKind::Node }
    }

    /// The switch `name`.
    #[must_use]
    pub fn switch(name: &str) -> Self {
        Self { name: name.into(), kind: TargetKind::Switch }
    }
}

/// Kind of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// A server.
    Node,
    /// A network switch.
    Switch,
}

/// How a service reacts to a change of a file it watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnChange {
    /// `systemctl restart`.
    Restart,
    /// `systemctl reload`.
    Reload,
}

/// What a resource is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desired {
    /// A regular file with exact content.
    File {
        /// Absolute path.
        path: String,
        /// The content; shared between targets.
        content: Content,
        /// Permission bits.
        mode: u32,
        /// Owner user.
        owner: String,
        /// Owner group.
        group: String,
        /// Secret content: never shown, stored only as a hash.
        secret: bool,
        /// Command that must accept the file before it is activated; `{}` is the temp path.
        check: Option<Vec<String>>,
    },
    /// A directory.
    Directory {
        /// Absolute path.
        path: String,
        /// Permission bits.
        mode: u32,
        /// Owner user.
        owner: String,
    },
    /// A package installed by the OS package manager.
    Package {
        /// Package name.
        name: String,
    },
    /// A systemd service.
    Service {
        /// Unit name without `.service`.
        name: String,
        /// Enabled at boot.
        enabled: bool,
        /// Running now.
        running: bool,
        /// Files whose change restarts or reloads it.
        watches: Vec<ResourceId>,
        /// Restart or reload.
        on_change: OnChange,
    },
    /// A command run when its guard says so.
    Command {
        /// Program and arguments; each is quoted when sent to a shell.
        argv: Vec<String>,
        /// Skip when this path exists.
        creates: Option<String>,
        /// Skip when this command (argv) succeeds.
        unless: Option<Vec<String>>,
        /// Why it exists, for the plan.
        description: String,
        /// What undoes it once it leaves the blueprint, for commands that change
        /// remote state: run as it is (each word quoted), with `TOOLKIT_FORCE=1` in
        /// its environment under `deploy --force`. It must succeed when there is
        /// nothing left to undo, and may refuse (exit 3, the reason on stderr) when
        /// undoing would lose work. `Some(vec![])`: nothing to undo (a wait, or
        /// settings that go with their object). `None`: left in place, and the plan
        /// says so. Not part of the fingerprint: declaring an undo changes nothing on
        /// the host.
        undo: Option<Vec<String>>,
        /// For a command that sets values: how to read them now. Then the values
        /// decide (the command runs when any differs) instead of `creates`/`unless`,
        /// and plans show each value old → new.
        reads: Option<Reads>,
    },
    /// An object behind an HTTP API: a BMC's power, boot override or BIOS attribute,
    /// a cloud instance or placement group. Set before the host is reached over SSH.
    Api(Box<ApiDesired>),
}

impl std::hash::Hash for Desired {
    /// Every field but an API object's (whose JSON values do not hash): those hash
    /// by kind and name alone, which equal objects share.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Self::File { path, content, mode, owner, group, secret, check } => {
                (path, content, mode, owner, group, secret, check).hash(state);
            }
            Self::Directory { path, mode, owner } => (path, mode, owner).hash(state),
            Self::Package { name } => name.hash(state),
            Self::Service { name, enabled, running, watches, on_change } => {
                (name, enabled, running, watches, on_change).hash(state);
            }
            Self::Command { argv, creates, unless, description, undo, reads } => {
                (argv, creates, unless, description, undo, reads).hash(state);
            }
            Self::Api(item) => (item.kind(), item.name()).hash(state),
        }
    }
}

impl Desired {
    /// Short kind name used in ids and plans.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::File { .. } => "file",
            Self::Directory { .. } => "dir",
            Self::Package { .. } => "package",
            Self::Service { .. } => "service",
            Self::Command { .. } => "command",
            Self::Api(item) => item.kind(),
        }
    }

    /// A fingerprint of everything that makes this resource what it is: two
    /// resources with equal fingerprints need no change between them.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        match self {
            Self::File { content, mode, owner, group, .. } => {
                // Sized up front: one per file resource, all alive in the plan at once.
                let mut text = String::with_capacity(32 + content.sha256().len() + owner.len() + group.len());
                let _ = write!(text, "sha256:{} mode:{mode:o} owner:{owner}:{group}", content.sha256());
                text
            }
            Self::Directory { mode, owner, .. } => format!("dir mode:{mode:o} owner:{owner}"),
            Self::Package { name } => format!("package:{name}"),
            Self::Service { enabled, running, .. } => format!("service enabled:{enabled} running:{running}"),
            Self::Command { reads: Some(reads), .. } => reads.fingerprint(),
            Self::Command { argv, creates, unless, .. } => {
                // Hashes the Debug text as it is written, without building it first.
                let mut hasher = HashWriter(Sha256::new());
                let _ = write!(hasher, "{argv:?}{creates:?}{unless:?}");
                let digest = hasher.0.finalize();
                format!("command:{}", hex::encode(&digest[..8]))
            }
            Self::Api(item) => item.value().unwrap_or_else(|| "absent".to_owned()),
        }
    }
}

/// How a value-setting command reads the values it sets (sacctmgr limits, sysctls):
/// `argv` prints the current values, one line per field in the order of `wanted`.
/// Nothing printed, a failure or another number of lines means the object is not
/// there yet. Values compare with surrounding blanks trimmed and inner runs of
/// blanks as one space, so a value cannot hold a line break.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reads {
    /// Program and arguments printing the current values; quoted when sent.
    pub argv: Vec<String>,
    /// Each field's name and the value the command sets, in the order `argv` prints them.
    pub wanted: Vec<(String, String)>,
}

/// Prefix of a [`Reads`] fingerprint; the rest is JSON `[[key, value], …]`.
const VALUES_PREFIX: &str = "values:";

impl Reads {
    /// The wanted values as a fingerprint, in the format of [`Reads::observed`].
    #[must_use]
    pub fn fingerprint(&self) -> String {
        values_fingerprint(self.wanted.iter().map(|(key, value)| (key.as_str(), normalized(value))))
    }

    /// The fingerprint of what `argv` printed, paired with the wanted keys; `None`
    /// when it printed nothing or not one line per field (the object is absent).
    #[must_use]
    pub fn observed(&self, printed: &str) -> Option<String> {
        if printed.is_empty() {
            return None;
        }
        let lines: Vec<&str> = printed.strip_suffix('\n').unwrap_or(printed).split('\n').collect();
        (lines.len() == self.wanted.len()).then(|| {
            values_fingerprint(self.wanted.iter().zip(lines).map(|((key, _), line)| (key.as_str(), normalized(line))))
        })
    }
}

/// The fields of a fingerprint made by [`Reads`]; `None` for any other fingerprint.
#[must_use]
pub fn values_of(fingerprint: &str) -> Option<Vec<(String, String)>> {
    serde_json::from_str(fingerprint.strip_prefix(VALUES_PREFIX)?).ok()
}

fn values_fingerprint<'a>(fields: impl Iterator<Item = (&'a str, String)>) -> String {
    let fields: Vec<(&str, String)> = fields.collect();
    // A list of string pairs always serializes; the fallback only keeps this total.
    let json = serde_json::to_string(&fields).unwrap_or_default();
    format!("{VALUES_PREFIX}{json}")
}

fn normalized(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Feeds formatted text straight into a SHA-256.
struct HashWriter(Sha256);

impl fmt::Write for HashWriter {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0.update(text.as_bytes());
        Ok(())
    }
}

/// What changing a resource does to the work running on its target, from least to
/// most disruptive: the class of a planned change, and of a host (its worst change).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Disruption {
    /// Content only, or a reload: running jobs do not notice.
    #[default]
    None,
    /// A daemon restarts that running jobs do not need (slurmctld, slurmd, FRR).
    Restart,
    /// The node must be empty: drained through the scheduler first.
    Drain,
    /// The node must be empty and rebooted before it takes work again.
    Reboot,
}

impl Disruption {
    /// The class as the plan prints it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Restart => "restart",
            Self::Drain => "drain",
            Self::Reboot => "reboot",
        }
    }

    /// Whether the node must be emptied through the scheduler first.
    #[must_use]
    pub const fn needs_drain(self) -> bool {
        matches!(self, Self::Drain | Self::Reboot)
    }
}

impl fmt::Display for Disruption {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.pad(self.as_str())
    }
}

/// What a resource comes after. Two ids are held inline: nearly every resource
/// depends on at most two (a file on its package, a command on its file), so at
/// 4,096 nodes ~200,000 small lists are not allocated, grown and freed one by one.
pub type Dependencies = smallvec::SmallVec<[ResourceId; 2]>;

/// Desired state on one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Stable id.
    pub id: ResourceId,
    /// Where it lives.
    pub target: Target,
    /// What it is: shared by the resources that want the same (every node of a
    /// group gets the same packages, services and most files).
    pub desired: Arc<Desired>,
    /// Ids that must be in place first (on any target). [`graph::build`](crate::graph::build)
    /// turns them into edges and empties the list: in a graph, ask
    /// [`ResourceGraph::dependencies`](crate::graph::ResourceGraph::dependencies).
    pub depends_on: Dependencies,
    /// What a change of it does to running work, declared by the renderer that knows
    /// what it touches (a rail's netplan: drain; a first driver install: reboot).
    /// Service restarts are classed by the plan, not here.
    pub disruption: Disruption,
}

impl Resource {
    /// A resource whose id is derived from target, kind and `name`.
    #[must_use]
    pub fn new(target: Target, name: &str, desired: Desired) -> Self {
        let desired = STAGE_SHARING.with_borrow_mut(|sharing| match sharing {
            Some(sharing) => sharing.intern(desired),
            None => Arc::new(desired),
        });
        Self::shared(target, name, desired)
    }

    /// A resource of what `desired` holds, already shared by the caller with the other
    /// targets that want the same: nothing of it is built, hashed or compared (during a
    /// render stage only the target's name is looked up, to share it).
    #[must_use]
    pub fn shared(mut target: Target, name: &str, desired: Arc<Desired>) -> Self {
        STAGE_SHARING.with_borrow_mut(|sharing| {
            if let Some(sharing) = sharing {
                sharing.share_target(&mut target);
            }
        });
        let id = ResourceId::new(&target.name, desired.kind(), name);
        Self { id, target, desired, depends_on: Dependencies::new(), disruption: Disruption::None }
    }

    /// Declares what a change of this resource does to running work.
    #[must_use]
    pub fn disrupts(mut self, disruption: Disruption) -> Self {
        self.disruption = disruption;
        self
    }

    /// Adds dependencies.
    #[must_use]
    pub fn after(mut self, ids: impl IntoIterator<Item = ResourceId>) -> Self {
        self.depends_on.extend(ids);
        self
    }
}

/// Makes resources that want the same thing share one [`Desired`]: at scale the
/// nodes of a group render the same packages, services, commands and files, each
/// copy a few hundred bytes. Kept across render stages, so each stage's copies are
/// dropped before the next one renders.
#[derive(Debug, Default)]
pub struct SharedDesired {
    // foldhash: hundreds of thousands of resources, none chosen by an adversary.
    seen: std::collections::HashSet<Arc<Desired>, foldhash::fast::RandomState>,
    /// Target names: every resource on a target points at one copy of its name (the
    /// stages made a copy per resource or per stage: ~69,000 of 5,376 names at 4,096
    /// nodes).
    targets: crate::text::Interner,
}

thread_local! {
    /// The sharing of the render stage running on this thread ([`SharedDesired::during`]).
    static STAGE_SHARING: std::cell::RefCell<Option<SharedDesired>> = const { std::cell::RefCell::new(None) };
}

impl SharedDesired {
    /// Runs `stage` with every [`Resource::new`] on this thread pointed at the copy
    /// already made of what it wants, as it is made: a stage's per-node copies are
    /// freed one by one instead of living until the stage ends (at 4,096 nodes they
    /// were ~20 MB at once, freed on the render threads where the plan that follows
    /// could not reuse them). Returns what `stage` returns and the copies seen, for
    /// [`SharedDesired::share`] of resources changed after they were made.
    /// `targets`: names already made, shared by every stage (the cluster's nodes and
    /// switches); a name not among them is shared within the stage.
    pub fn during<R>(targets: &[Text], stage: impl FnOnce() -> R) -> (R, Self) {
        /// Ends the sharing even when `stage` panics.
        struct Scope;
        impl Drop for Scope {
            fn drop(&mut self) {
                STAGE_SHARING.with_borrow_mut(Option::take);
            }
        }
        let targets = targets.iter().cloned().collect();
        STAGE_SHARING.with_borrow_mut(|sharing| *sharing = Some(Self { targets, ..Self::default() }));
        let scope = Scope;
        let result = stage();
        let shared = STAGE_SHARING.with_borrow_mut(Option::take).unwrap_or_default();
        drop(scope);
        (result, shared)
    }

    /// Points `target` at the copy of its name already made, or keeps its own as the first.
    fn share_target(&mut self, target: &mut Target) {
        target.name = self.targets.share(std::mem::take(&mut target.name));
    }

    /// The copy already seen of `desired`, or `desired` as the first.
    fn intern(&mut self, desired: Desired) -> Arc<Desired> {
        if let Some(shared) = self.seen.get(&desired) {
            return Arc::clone(shared);
        }
        let desired = Arc::new(desired);
        self.seen.insert(Arc::clone(&desired));
        desired
    }

    /// Points every resource of `resources` at the copy already seen of what it wants.
    pub fn share(&mut self, resources: &mut [Resource]) {
        for resource in resources {
            // Held elsewhere too: a copy seen (this set holds one) or shared by its
            // maker; only a copy of its own (made outside a stage, or changed after
            // with `Arc::make_mut`) is looked up, not every resource hashed again.
            if Arc::strong_count(&resource.desired) > 1 {
                continue;
            }
            match self.seen.get(&*resource.desired) {
                Some(shared) => resource.desired = Arc::clone(shared),
                None => {
                    self.seen.insert(Arc::clone(&resource.desired));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos_reads() -> Reads {
        Reads {
            argv: vec!["true".to_owned()],
            wanted: vec![("Priority".to_owned(), "10".to_owned()), ("GrpTRES".to_owned(), "gres/gpu=4".to_owned())],
        }
    }

    #[test]
    fn reads_compare_printed_values_with_wanted_ones() {
        let reads = qos_reads();
        assert_eq!(reads.observed("10\ngres/gpu=4\n"), Some(reads.fingerprint()));
        assert_eq!(reads.observed(" 10 \r\ngres/gpu=4"), Some(reads.fingerprint()), "blanks do not count");
        let other = reads.observed("10\ngres/gpu=8\n").expect("two lines");
        assert_ne!(other, reads.fingerprint());
        assert_eq!(
            values_of(&other),
            Some(vec![("Priority".to_owned(), "10".to_owned()), ("GrpTRES".to_owned(), "gres/gpu=8".to_owned())])
        );
        assert_eq!(reads.observed(""), None, "nothing printed: absent");
        assert_eq!(reads.observed("10\n"), None, "another number of lines: absent");
        assert_eq!(
            reads.observed("10\n\n").map(|f| values_of(&f)),
            Some(Some(vec![("Priority".to_owned(), "10".to_owned()), ("GrpTRES".to_owned(), String::new()),]))
        );
        assert_eq!(values_of("command:0123"), None);
    }

    #[test]
    fn resources_made_during_a_stage_share_what_they_want_as_they_are_made() {
        let package =
            |node: &str| Resource::new(Target::node(node), "munge", Desired::Package { name: "munge".into() });
        let (made, seen) = SharedDesired::during(&[], || [package("node01"), package("node02")]);
        assert!(Arc::ptr_eq(&made[0].desired, &made[1].desired));
        assert_eq!(seen.seen.len(), 1);
        let outside = [package("node01"), package("node02")];
        assert!(!Arc::ptr_eq(&outside[0].desired, &outside[1].desired), "no sharing outside a stage");
        let panicked = std::panic::catch_unwind(|| SharedDesired::during(&[], || panic!("stage failed")));
        assert!(panicked.is_err());
        let after = [package("node01"), package("node02")];
        assert!(!Arc::ptr_eq(&after[0].desired, &after[1].desired), "a panicking stage ends its sharing");
    }

    #[test]
    fn resources_made_during_a_stage_share_their_target_names() {
        let on =
            |node: &str, name: &str| Resource::new(Target::node(node), name, Desired::Package { name: name.into() });
        let known: Text = "gpu0001".into();
        let (made, _) = SharedDesired::during(std::slice::from_ref(&known), || {
            [on("gpu0001", "a"), on("gpu0001", "b"), on("ctl01", "a"), on("ctl01", "b")]
        });
        assert!(made[0].target.name.shares(&known) && made[1].target.name.shares(&known), "a known name: its copy");
        assert!(made[2].target.name.shares(&made[3].target.name), "another: the stage's first copy");
        assert_eq!((made[2].target.name.as_str(), made[2].id.as_str()), ("ctl01", "ctl01:package:a"));
        let outside = [on("ctl01", "a"), on("ctl01", "b")];
        assert!(!outside[0].target.name.shares(&outside[1].target.name), "no sharing outside a stage");
    }

    #[test]
    fn an_id_splits_into_target_kind_and_a_name_that_may_hold_colons() {
        assert_eq!(id_parts("gpu0001:file:/etc/a:b"), ("gpu0001", "file", "/etc/a:b"));
        assert_eq!(id_parts("odd"), ("odd", "", ""), "an id without parts: the whole, then nothing");
        assert_eq!(id_parts("a:b"), ("a", "b", ""));
        assert_eq!(id_parts("a::"), ("a", "", ""));
    }

    #[test]
    fn content_kept_as_a_hash_only_hashes_as_the_text() {
        let text = "router bgp 65000\n";
        let hashed = Content::of_digest(&Sha256::digest(text.as_bytes()));
        assert_eq!(hashed.sha256(), Content::new(text.to_owned()).sha256());
        assert!(!hashed.has_text() && hashed.text().is_empty());
        assert!(Content::new(String::new()).has_text());
    }

    #[test]
    fn a_command_that_reads_is_fingerprinted_by_its_values() {
        let command = |argv: &str| Desired::Command {
            argv: vec![argv.to_owned()],
            creates: None,
            unless: None,
            description: "set".to_owned(),
            undo: None,
            reads: Some(qos_reads()),
        };
        assert_eq!(command("a").fingerprint(), command("b").fingerprint());
        assert!(command("a").fingerprint().starts_with("values:"));
    }
}
