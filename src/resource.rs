//! Resources: the unit of desired state on one target.
//!
//! Stage: render → graph → plan. A [`Resource`] is a file, directory, package,
//! service or guarded command on one host or switch, or an API object (BMC, cloud),
//! with a stable id that keys the plan and the state file, and the ids it depends on.
//! [`api`] holds the data of API objects, so the core needs no HTTP client module;
//! [`shell`] quotes the words of a command, for plans and for transport.

pub mod api;
pub mod kube;
pub mod shell;

use std::fmt::{self, Write as _};
use std::hash::BuildHasher as _;
use std::sync::Arc;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

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
    /// Host or switch name (`node01`, `leaf0`).
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
        /// Files on its own target whose change restarts or reloads it, as `kind:name`
        /// (their ids without the target, made by [`watched`]; [`Resource::watches`]
        /// has the ids): so every node's copy of a service is the same, one shared
        /// `Desired`, where ids made ~17,000 distinct ones at 4,096 nodes.
        watches: Vec<Text>,
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
        /// and plans show each value old → new. Boxed: few commands set values, and
        /// inline it made every `Desired` 40 bytes larger (168, not 128).
        reads: Option<Box<Reads>>,
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

/// The files of `ids`, all on one target, as a service on that target watches them
/// ([`watched_file`] each).
pub fn watched<'a>(ids: impl IntoIterator<Item = &'a ResourceId>) -> Vec<Text> {
    ids.into_iter().map(watched_file).collect()
}

/// A file as a service on its target watches it: its id without the target
/// (`node01:file:/etc/munge/munge.key` → `file:/etc/munge/munge.key`).
#[must_use]
pub fn watched_file(id: &ResourceId) -> Text {
    Text::from(id.as_str().split_once(':').map_or(id.as_str(), |(_, file)| file))
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

/// What a resource comes after, read as a slice. One pointer in the resource, nothing
/// allocated without any: the graph turns the ids into edges and empties every list,
/// and at 4,096 nodes the inline list it replaced was 16 more bytes in each of
/// ~230,000 resources for as long as the plan lives. With some, one allocation that
/// holds two inline: nearly every resource depends on at most two (a file on its
/// package, a command on its file), so the lists are not grown one by one.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Dependencies(Option<Box<smallvec::SmallVec<[ResourceId; 2]>>>);

impl Dependencies {
    /// No dependencies.
    #[must_use]
    pub const fn new() -> Self {
        Self(None)
    }

    /// Adds `id`.
    pub fn push(&mut self, id: ResourceId) {
        self.0.get_or_insert_with(Box::default).push(id);
    }

    /// Keeps only the ids `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&mut ResourceId) -> bool) {
        if let Some(ids) = &mut self.0 {
            ids.retain(keep);
        }
    }
}

impl std::ops::Deref for Dependencies {
    type Target = [ResourceId];

    fn deref(&self) -> &[ResourceId] {
        self.0.as_deref().map_or(&[], |ids| ids.as_slice())
    }
}

impl fmt::Debug for Dependencies {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_list().entries(self.iter()).finish()
    }
}

impl Extend<ResourceId> for Dependencies {
    fn extend<I: IntoIterator<Item = ResourceId>>(&mut self, ids: I) {
        for id in ids {
            self.push(id);
        }
    }
}

impl FromIterator<ResourceId> for Dependencies {
    fn from_iter<I: IntoIterator<Item = ResourceId>>(ids: I) -> Self {
        let mut dependencies = Self::new();
        dependencies.extend(ids);
        dependencies
    }
}

impl<'a> IntoIterator for &'a Dependencies {
    type Item = &'a ResourceId;
    type IntoIter = std::slice::Iter<'a, ResourceId>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Desired state on one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Stable id; its first part names the target ([`Resource::target`]).
    pub id: ResourceId,
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
    /// Whether the target is a node or a switch. Its name is read from the id rather
    /// than held again: at 4,096 nodes a second pointer to it in each of ~230,000
    /// resources was 3.7 MB of a plan's peak.
    pub target_kind: TargetKind,
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
    /// targets that want the same: nothing of it is built, hashed or compared.
    #[must_use]
    pub fn shared(target: Target, name: &str, desired: Arc<Desired>) -> Self {
        let Target { name: target_name, kind: target_kind } = target;
        let id = ResourceId::new(&target_name, desired.kind(), name);
        Self { id, desired, depends_on: Dependencies::new(), disruption: Disruption::None, target_kind }
    }

    /// The name of the node or switch it lives on: its id's first part.
    #[must_use]
    pub fn target(&self) -> &str {
        id_parts(self.id.as_str()).0
    }

    /// The ids of the files it watches, if it is a service: on its own target.
    pub fn watches(&self) -> impl Iterator<Item = ResourceId> + '_ {
        let watches = match &*self.desired {
            Desired::Service { watches, .. } => watches.as_slice(),
            _ => &[],
        };
        watches.iter().map(|file| ResourceId(format!("{}:{file}", self.target()).into()))
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
#[derive(Default)]
pub struct SharedDesired {
    /// Each copy with its hash: growing the table moves the hashes, not the contents
    /// hashed again (a file's whole text; ~2.5% of a 4,096-node plan's CPU time).
    seen: HashTable<(u64, Arc<Desired>)>,
    // foldhash: hundreds of thousands of resources, none chosen by an adversary.
    hasher: foldhash::fast::RandomState,
}

impl fmt::Debug for SharedDesired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedDesired").field("seen", &self.seen.len()).finish_non_exhaustive()
    }
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
    /// [`SharedDesired::share`] of resources changed after they were made. A stage
    /// run inside another (a pool thread that waits runs other jobs meanwhile) has
    /// its own sharing, and the enclosing one's is back when it ends.
    pub fn during<R>(stage: impl FnOnce() -> R) -> (R, Self) {
        /// Puts the enclosing stage's sharing back, even when `stage` panics.
        struct Scope(Option<SharedDesired>);
        impl Drop for Scope {
            fn drop(&mut self) {
                let enclosing = self.0.take();
                STAGE_SHARING.with_borrow_mut(|sharing| *sharing = enclosing);
            }
        }
        let enclosing = STAGE_SHARING.with_borrow_mut(|sharing| sharing.replace(Self::default()));
        let scope = Scope(enclosing);
        let result = stage();
        let shared = STAGE_SHARING.with_borrow_mut(Option::take).unwrap_or_default();
        drop(scope);
        (result, shared)
    }

    /// The copy already seen of `desired`, or `desired` as the first.
    fn intern(&mut self, desired: Desired) -> Arc<Desired> {
        let (hash, entry) = self.entry(&desired);
        match entry {
            Entry::Occupied(seen) => Arc::clone(&seen.get().1),
            Entry::Vacant(slot) => {
                let desired = Arc::new(desired);
                slot.insert((hash, Arc::clone(&desired)));
                desired
            }
        }
    }

    /// `desired`'s hash, and where its copy is or goes.
    fn entry(&mut self, desired: &Desired) -> (u64, Entry<'_, (u64, Arc<Desired>)>) {
        let hash = self.hasher.hash_one(desired);
        (hash, self.seen.entry(hash, |(seen_hash, seen)| *seen_hash == hash && **seen == *desired, |(hash, _)| *hash))
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
            match self.entry(&resource.desired) {
                (_, Entry::Occupied(seen)) => resource.desired = Arc::clone(&seen.get().1),
                (hash, Entry::Vacant(slot)) => {
                    slot.insert((hash, Arc::clone(&resource.desired)));
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
        let (made, seen) = SharedDesired::during(|| [package("node01"), package("node02")]);
        assert!(Arc::ptr_eq(&made[0].desired, &made[1].desired));
        assert_eq!(seen.seen.len(), 1);
        let outside = [package("node01"), package("node02")];
        assert!(!Arc::ptr_eq(&outside[0].desired, &outside[1].desired), "no sharing outside a stage");
        let panicked = std::panic::catch_unwind(|| SharedDesired::during(|| panic!("stage failed")));
        assert!(panicked.is_err());
        let after = [package("node01"), package("node02")];
        assert!(!Arc::ptr_eq(&after[0].desired, &after[1].desired), "a panicking stage ends its sharing");
    }

    #[test]
    fn a_stage_run_inside_another_leaves_the_enclosing_sharing_as_it_was() {
        let package =
            |node: &str| Resource::new(Target::node(node), "munge", Desired::Package { name: "munge".into() });
        let ((first, (inner, inner_seen), last), seen) = SharedDesired::during(|| {
            let first = package("node01");
            let inner = SharedDesired::during(|| package("node02"));
            (first, inner, package("node03"))
        });
        assert!(!Arc::ptr_eq(&first.desired, &inner.desired), "the inner stage shares on its own");
        assert!(Arc::ptr_eq(&first.desired, &last.desired), "the enclosing sharing is back after it");
        assert_eq!((seen.seen.len(), inner_seen.seen.len()), (1, 1));
    }

    #[test]
    fn a_resource_s_target_is_its_id_s_first_part() {
        let on = |target: Target| Resource::new(target, "/etc/a:b", Desired::Package { name: "a".into() });
        let (node, switch) = (on(Target::node("gpu0001")), on(Target::switch("leaf0")));
        assert_eq!((node.target(), node.target_kind), ("gpu0001", TargetKind::Node));
        assert_eq!((switch.target(), switch.target_kind), ("leaf0", TargetKind::Switch));
        assert_eq!(node.id.as_str(), "gpu0001:package:/etc/a:b");
    }

    #[test]
    fn dependencies_allocate_nothing_until_there_is_one() {
        let id = |text: &str| ResourceId(text.into());
        let mut dependencies = Dependencies::new();
        assert!(dependencies.0.is_none() && dependencies.is_empty());
        dependencies.extend([]);
        assert!(dependencies.0.is_none(), "extending by nothing allocates nothing");
        dependencies.extend([id("a:package:x"), id("a:file:/y")]);
        dependencies.push(id("b:package:z"));
        assert_eq!(
            dependencies.iter().map(ResourceId::as_str).collect::<Vec<_>>(),
            ["a:package:x", "a:file:/y", "b:package:z"]
        );
        dependencies.retain(|id| id.as_str().starts_with("a:"));
        assert_eq!(format!("{dependencies:?}"), r#"[ResourceId("a:package:x"), ResourceId("a:file:/y")]"#);
        assert_eq!(dependencies, [id("a:package:x"), id("a:file:/y")].into_iter().collect());
        // A resource is four words: id, desired, dependencies, and its two one-byte classes.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<Resource>(), 32);
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
            reads: Some(Box::new(qos_reads())),
        };
        assert_eq!(command("a").fingerprint(), command("b").fingerprint());
        assert!(command("a").fingerprint().starts_with("values:"));
    }
}
