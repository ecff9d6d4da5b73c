//! What slurmctld and each slurmd must agree on, and the order a change to it takes.
//!
//! Stage: plan. Input: the unified diff of the controller's slurm.conf (its old and
//! new `NodeName=` and `PartitionName=` lines). Output: an [`Agreement`]: per node,
//! the agreed settings that change, the direction of the change, and the node's old
//! line, from which the rollout writes the controller's slurm.conf wave by wave.
//!
//! What a node reports when its slurmd registers — GRES (from its gres.conf), CPUs,
//! sockets, cores, threads, RealMemory — must never be less than the controller's
//! line for it; Features, Weight and partition membership only slurmctld reads. The
//! rules, as Slurm 22.05.8 has them (`SchedMD/slurm @slurm-22-05-8-1`):
//! - a registration with fewer GRES than the line says is INVAL, even with
//!   `SlurmdParameters=config_overrides`; more are accepted, the excess ignored
//!   (`src/common/gres.c _node_config_validate`); fewer CPUs, sockets × cores ×
//!   threads or RealMemory are INVAL unless `config_overrides` is set
//!   (`src/slurmctld/node_mgr.c validate_node_specs`);
//! - an INVAL node is refused `state=resume` (`_valid_node_state_change`); only its
//!   next valid registration clears the flag (`validate_node_specs`);
//! - slurmctld started (or reconfigured) with a node line whose GRES count or
//!   socket/core layout changed aborts every job running on that node
//!   (`src/slurmctld/read_config.c _sync_jobs_to_conf`: `gres_job_revalidate2`,
//!   `valid_job_resources`), and a GRES with `File=` cannot be changed at run time
//!   (`scontrol update gres=` is refused by `gres.c _node_reconfig_test`).
//!
//! So "nodes first, slurmctld once at the end" is not enough: the restart at the end
//! would abort the jobs that started on the changed nodes meanwhile. A node's new line
//! reaches slurmctld only while that node is empty, in its own wave, in a slurm.conf
//! where the nodes not rolled yet keep their old lines; inside the wave an increase
//! changes the node first (it reports more than slurmctld expects), a decrease
//! slurmctld first, and a mixed change, which cannot avoid one registration that
//! reports less, has the node register again once both sides agree.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::model::hostlist;

/// Which way a node's agreed settings move, and so which side changes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Everything the node reports grows or stays: the node first, then slurmctld.
    Increase,
    /// Everything the node reports shrinks or stays: slurmctld first, then the node.
    Decrease,
    /// Some of it grows and some shrinks: the node, slurmctld, then the node registers again.
    Mixed,
    /// Only what slurmctld alone reads (features, weight, partitions): slurmctld, in place.
    ControllerOnly,
    /// A node new to slurm.conf: slurmctld must know it before its slurmd registers.
    Added,
    /// A node gone from slurm.conf: slurmctld drops it after the waves.
    Removed,
}

impl Direction {
    /// The word the plan prints.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Increase => "increase",
            Self::Decrease => "decrease",
            Self::Mixed => "mixed",
            Self::ControllerOnly => "controller only",
            Self::Added => "added",
            Self::Removed => "removed",
        }
    }

    /// The node must be empty while slurmctld learns its new line: it goes in a wave.
    #[must_use]
    pub const fn needs_wave(self) -> bool {
        matches!(self, Self::Increase | Self::Decrease | Self::Mixed)
    }

    /// slurmctld gets the wave's new lines before the wave's nodes change.
    #[must_use]
    pub const fn controller_first(self) -> bool {
        matches!(self, Self::Decrease)
    }
}

/// One node's change to what it and slurmctld agree on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAgreement {
    /// Which side changes first.
    pub direction: Direction,
    /// The settings that change, old → new: `gres gpu:h100 4 → 8`.
    pub changes: Vec<String>,
    /// The node's old line without its `NodeName=`, kept in the controller's slurm.conf
    /// until the node's wave (absent for an added node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
}

/// Every node whose agreed settings change, and where slurmctld reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    /// The host that runs slurmctld.
    pub controller: String,
    /// The id of its slurm.conf resource.
    pub resource: String,
    /// Per node, in name order.
    pub nodes: BTreeMap<String, NodeAgreement>,
}

impl Agreement {
    /// Reads the change from the controller's slurm.conf diff; `None` when no node's
    /// agreed settings change.
    #[must_use]
    pub fn from_diff(controller: &str, resource: &str, diff: &str) -> Option<Self> {
        let old = Lines::read(diff, '-');
        let new = Lines::read(diff, '+');
        let mut nodes = BTreeMap::new();
        let names: BTreeSet<&String> = old.nodes.keys().chain(new.nodes.keys()).collect();
        for name in names {
            let agreement = match (old.nodes.get(name), new.nodes.get(name)) {
                (Some((line, before)), Some((_, after))) => {
                    let mut compared = compare(before, after);
                    compared.partitions(&old.membership(name), &new.membership(name));
                    let Some(direction) = compared.direction() else { continue };
                    NodeAgreement { direction, changes: compared.changes, old: Some(line.clone()) }
                }
                (None, Some(_)) => NodeAgreement { direction: Direction::Added, changes: Vec::new(), old: None },
                (Some((line, _)), None) => {
                    NodeAgreement { direction: Direction::Removed, changes: Vec::new(), old: Some(line.clone()) }
                }
                (None, None) => continue,
            };
            nodes.insert(name.clone(), agreement);
        }
        // A node whose line is the same but whose partitions changed.
        for name in old.members().chain(new.members()) {
            if nodes.contains_key(name) {
                continue;
            }
            let mut compared = Compared::default();
            compared.partitions(&old.membership(name), &new.membership(name));
            if let Some(direction) = compared.direction() {
                nodes.insert(name.to_owned(), NodeAgreement { direction, changes: compared.changes, old: None });
            }
        }
        (!nodes.is_empty()).then(|| Self { controller: controller.to_owned(), resource: resource.to_owned(), nodes })
    }

    /// Nodes that must be empty while slurmctld learns their new line.
    pub fn waved(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().filter(|(_, node)| node.direction.needs_wave()).map(|(name, _)| name.as_str())
    }

    /// The direction of `node`, when its agreed settings change.
    #[must_use]
    pub fn direction(&self, node: &str) -> Option<Direction> {
        self.nodes.get(node).map(|node| node.direction)
    }

    /// The controller's slurm.conf while the waved nodes outside `done` still have their
    /// old line: `new`'s text, each `NodeName=` line split so that those nodes keep
    /// theirs. Nodes removed from the blueprint stay until the end (`new` itself).
    #[must_use]
    pub fn transitional(&self, new: &str, done: &BTreeSet<String>) -> String {
        let pending = |name: &str| {
            self.nodes.get(name).is_some_and(|node| {
                (node.direction.needs_wave() && !done.contains(name)) || node.direction == Direction::Removed
            })
        };
        let mut out = String::with_capacity(new.len() + 256);
        let mut removed_written = false;
        for line in new.split_inclusive('\n') {
            let Some((names, attributes)) = node_line(line) else {
                out.push_str(line);
                continue;
            };
            let Ok(expanded) = hostlist::expand(names) else {
                out.push_str(line);
                continue;
            };
            let (kept, now): (Vec<&String>, Vec<&String>) = expanded.iter().partition(|name| pending(name));
            if !now.is_empty() {
                let _ = writeln!(out, "NodeName={} {attributes}", hostlist::compress(now.iter().map(|n| n.as_str())));
            }
            // The old lines of the nodes still waiting, grouped by line.
            let mut old: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for name in kept {
                if let Some(line) = self.nodes.get(name.as_str()).and_then(|node| node.old.as_deref()) {
                    old.entry(line).or_default().push(name);
                }
            }
            if !removed_written {
                removed_written = true;
                for (name, node) in &self.nodes {
                    if node.direction == Direction::Removed
                        && let Some(line) = &node.old
                    {
                        old.entry(line).or_default().push(name);
                    }
                }
            }
            for (line, names) in old {
                let _ = writeln!(out, "NodeName={} {line}", hostlist::compress(names));
            }
        }
        out
    }

    /// The plan's lines: one per direction and set of changes, with the order taken.
    /// `waves` is the rollout's waves, for their count and size.
    #[must_use]
    pub fn lines(&self, waves: &[Vec<String>]) -> Vec<String> {
        let mut groups: BTreeMap<(Direction, Vec<String>), Vec<&str>> = BTreeMap::new();
        for (name, node) in &self.nodes {
            let settings: BTreeSet<String> =
                node.changes.iter().map(|change| change.split(' ').next().unwrap_or_default().to_owned()).collect();
            groups.entry((node.direction, settings.into_iter().collect())).or_default().push(name);
        }
        let largest = waves.iter().map(Vec::len).max().unwrap_or(0);
        let in_waves = format!(
            "{} wave{} of {}{largest}",
            waves.len(),
            if waves.len() == 1 { "" } else { "s" },
            if waves.iter().all(|wave| wave.len() == largest) { "" } else { "up to " }
        );
        groups
            .into_iter()
            .map(|((direction, settings), names)| {
                let hosts = hostlist::compress(names.iter().copied());
                let what = if settings.is_empty() { String::new() } else { format!("{} on ", settings.join(", ")) };
                let order = match direction {
                    Direction::Increase => format!(
                        "nodes first in {in_waves}, then slurmctld with each wave's new lines (a node may report more than slurmctld expects, never less)"
                    ),
                    Direction::Decrease => format!(
                        "slurmctld first with each wave's new lines, then the wave's nodes, in {in_waves} (slurmctld never expects more than a node reports)"
                    ),
                    Direction::Mixed => format!(
                        "in {in_waves}: the wave's nodes, slurmctld with their new lines, then the nodes register again (some settings grow, some shrink)"
                    ),
                    Direction::ControllerOnly => "slurmctld only, no drain (no node reports them)".to_owned(),
                    Direction::Added => "slurmctld learns them first, then their slurmd starts".to_owned(),
                    Direction::Removed => "slurmctld keeps them until the waves are done, then drops them".to_owned(),
                };
                format!("{what}{hosts} ({}): {order}", direction.as_str())
            })
            .collect()
    }
}

/// `NodeName=<names> <attributes>` → (names, attributes), `DEFAULT` left out.
fn node_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim_end_matches('\n').strip_prefix("NodeName=")?;
    let (names, attributes) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    (!names.eq_ignore_ascii_case("DEFAULT")).then_some((names, attributes.trim()))
}

/// What a node line says about the node, as slurmctld compares it with a registration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Definition {
    /// Numbers the node reports: `cpus`, `sockets`, `cores`, `threads`, `memory`, and
    /// `gres <name[:type]>` per GRES.
    reported: BTreeMap<String, u64>,
    /// What only slurmctld reads: `features`, `weight`.
    controller: BTreeMap<&'static str, String>,
}

impl Definition {
    fn parse(attributes: &str) -> Self {
        let mut definition = Self::default();
        let (mut boards, mut sockets_per_board, mut sockets) = (None, None, None);
        for word in attributes.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else { continue };
            let number = || value.parse::<u64>().ok();
            match key.to_ascii_lowercase().as_str() {
                "cpus" | "procs" => insert(&mut definition.reported, "cpus", number()),
                "boards" => boards = number(),
                "socketsperboard" => sockets_per_board = number(),
                "sockets" => sockets = number(),
                "corespersocket" => insert(&mut definition.reported, "cores", number()),
                "threadspercore" => insert(&mut definition.reported, "threads", number()),
                "realmemory" => insert(&mut definition.reported, "memory", number()),
                "gres" => {
                    for gres in value.split(',').filter(|gres| !gres.is_empty()) {
                        let (name, count) = gres_count(gres);
                        definition.reported.insert(format!("gres {name}"), count);
                    }
                }
                "feature" | "features" => {
                    let mut features: Vec<&str> = value.split(',').collect();
                    features.sort_unstable();
                    definition.controller.insert("features", features.join(","));
                }
                "weight" => {
                    definition.controller.insert("weight", value.to_owned());
                }
                _ => {}
            }
        }
        let sockets = sockets.or_else(|| Some(boards.unwrap_or(1) * sockets_per_board?));
        insert(&mut definition.reported, "sockets", sockets);
        definition
    }
}

fn insert(map: &mut BTreeMap<String, u64>, key: &str, value: Option<u64>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value);
    }
}

/// `gpu:h100:8` → (`gpu:h100`, 8); `gpu` → (`gpu`, 1): the count is the last part when
/// it is a number (with Slurm's `K`/`M`/`G` suffixes).
fn gres_count(gres: &str) -> (&str, u64) {
    let Some((name, last)) = gres.rsplit_once(':') else { return (gres, 1) };
    let (digits, scale) = match last.as_bytes().last() {
        Some(b'K' | b'k') => (&last[..last.len() - 1], 1024),
        Some(b'M' | b'm') => (&last[..last.len() - 1], 1024 * 1024),
        Some(b'G' | b'g') => (&last[..last.len() - 1], 1024 * 1024 * 1024),
        _ => (last, 1),
    };
    match digits.parse::<u64>() {
        Ok(count) => (name, count * scale),
        Err(_) => (gres, 1),
    }
}

/// One node's settings compared, old with new.
#[derive(Debug, Default)]
struct Compared {
    grows: bool,
    shrinks: bool,
    controller: bool,
    changes: Vec<String>,
}

impl Compared {
    fn direction(&self) -> Option<Direction> {
        match (self.grows, self.shrinks, self.controller) {
            (true, true, _) => Some(Direction::Mixed),
            (true, false, _) => Some(Direction::Increase),
            (false, true, _) => Some(Direction::Decrease),
            (false, false, true) => Some(Direction::ControllerOnly),
            (false, false, false) => None,
        }
    }

    fn partitions(&mut self, old: &BTreeSet<&str>, new: &BTreeSet<&str>) {
        if old != new {
            self.controller = true;
            let list = |set: &BTreeSet<&str>| if set.is_empty() { "none".to_owned() } else { join(set) };
            self.changes.push(format!("partitions {} → {}", list(old), list(new)));
        }
    }
}

fn join(set: &BTreeSet<&str>) -> String {
    set.iter().copied().collect::<Vec<_>>().join(",")
}

fn compare(old: &Definition, new: &Definition) -> Compared {
    let mut compared = Compared::default();
    let keys: BTreeSet<&String> = old.reported.keys().chain(new.reported.keys()).collect();
    for key in keys {
        let (before, after) =
            (old.reported.get(key).copied().unwrap_or(0), new.reported.get(key).copied().unwrap_or(0));
        if before != after {
            compared.grows |= after > before;
            compared.shrinks |= after < before;
            compared.changes.push(format!("{key} {before} → {after}"));
        }
    }
    for key in ["features", "weight"] {
        let (before, after) = (old.controller.get(key), new.controller.get(key));
        if before != after {
            compared.controller = true;
            let shown = |value: Option<&String>| value.map_or("none", String::as_str).to_owned();
            compared.changes.push(format!("{key} {} → {}", shown(before), shown(after)));
        }
    }
    compared
}

/// The node and partition lines on one side of a diff.
#[derive(Debug, Default)]
struct Lines {
    /// Node → (its line's attributes, what they define).
    nodes: BTreeMap<String, (String, Definition)>,
    /// Partition → its nodes, for the partitions whose line is on this side.
    partitions: BTreeMap<String, BTreeSet<String>>,
}

impl Lines {
    /// The lines a unified diff marks with `sign` (`-` old, `+` new).
    fn read(diff: &str, sign: char) -> Self {
        let mut lines = Self::default();
        for line in diff.lines() {
            if line.starts_with("---") || line.starts_with("+++") {
                continue; // the header
            }
            let Some(text) = line.strip_prefix(sign) else { continue };
            if let Some((names, attributes)) = node_line(text) {
                let definition = Definition::parse(attributes);
                for name in hostlist::expand(names).unwrap_or_default() {
                    lines.nodes.insert(name, (attributes.to_owned(), definition.clone()));
                }
            } else if let Some(rest) = text.strip_prefix("PartitionName=") {
                let (name, attributes) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                let members = attributes
                    .split_whitespace()
                    .find_map(|word| word.strip_prefix("Nodes="))
                    .filter(|nodes| !nodes.eq_ignore_ascii_case("ALL"))
                    .and_then(|nodes| hostlist::expand(nodes).ok())
                    .unwrap_or_default();
                lines.partitions.insert(name.to_owned(), members.into_iter().collect());
            }
        }
        lines
    }

    /// The partitions of this side that hold `node`.
    fn membership(&self, node: &str) -> BTreeSet<&str> {
        self.partitions.iter().filter(|(_, nodes)| nodes.contains(node)).map(|(name, _)| name.as_str()).collect()
    }

    fn members(&self) -> impl Iterator<Item = &str> {
        self.partitions.values().flatten().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::diff::unified_diff;

    const LINE_4: &str = "Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 CPUs=2 RealMemory=1024 Gres=gpu:h100:4 State=UNKNOWN";

    fn conf(nodes: &[&str], partitions: &[&str]) -> String {
        let mut text = "ClusterName=lab\nSlurmctldHost=head\n\n# Nodes: one line per node group\n".to_owned();
        for line in nodes {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str("\n# Partitions\n");
        for line in partitions {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    fn agreement(old: &str, new: &str) -> Option<Agreement> {
        let diff = unified_diff("/etc/slurm/slurm.conf", old, new);
        Agreement::from_diff("head", "head:file:/etc/slurm/slurm.conf", &diff)
    }

    const PARTITION: &str = "PartitionName=gpu Nodes=node[01-04] Default=YES MaxTime=INFINITE State=UP";

    fn lab(line: &str) -> String {
        conf(&[&format!("NodeName=node[01-04] {line}")], &[PARTITION])
    }

    #[test]
    fn each_reported_setting_up_is_an_increase_and_down_a_decrease() {
        let cases = [
            ("Gres=gpu:h100:4", "Gres=gpu:h100:8", "gres gpu:h100 4 → 8"),
            ("CPUs=2", "CPUs=4", "cpus 2 → 4"),
            ("SocketsPerBoard=1", "SocketsPerBoard=2", "sockets 1 → 2"),
            ("CoresPerSocket=2", "CoresPerSocket=4", "cores 2 → 4"),
            ("ThreadsPerCore=1", "ThreadsPerCore=2", "threads 1 → 2"),
            ("RealMemory=1024", "RealMemory=2048", "memory 1024 → 2048"),
            ("Gres=gpu:h100:4", "Gres=gpu:h100:4,shard:h100:32", "gres shard:h100 0 → 32"),
        ];
        for (from, to, change) in cases {
            let up = agreement(&lab(LINE_4), &lab(&LINE_4.replace(from, to))).expect(change);
            assert_eq!(up.nodes.len(), 4, "{change}");
            for node in up.nodes.values() {
                assert_eq!(node.direction, Direction::Increase, "{change}");
                assert_eq!(node.changes, [change]);
                assert_eq!(node.old.as_deref(), Some(LINE_4));
            }
            let down = agreement(&lab(&LINE_4.replace(from, to)), &lab(LINE_4)).expect(change);
            assert!(down.nodes.values().all(|node| node.direction == Direction::Decrease), "{change}: {down:#?}");
        }
    }

    #[test]
    fn settings_only_slurmctld_reads_need_no_wave() {
        let with = |extra: &str| lab(&format!("{LINE_4} {extra}"));
        for (old, new) in [
            (with("Weight=1"), with("Weight=10")),
            (with("Features=a"), with("Features=a,b")),
            (
                lab(LINE_4),
                conf(&[&format!("NodeName=node[01-04] {LINE_4}")], &[&PARTITION.replace("[01-04]", "[01-03]")]),
            ),
        ] {
            let found = agreement(&old, &new).expect("a change");
            assert!(found.waved().next().is_none(), "{found:#?}");
            assert!(found.nodes.values().all(|node| node.direction == Direction::ControllerOnly));
        }
        // Only node04 left the partition.
        let partition = agreement(
            &lab(LINE_4),
            &conf(&[&format!("NodeName=node[01-04] {LINE_4}")], &[&PARTITION.replace("[01-04]", "[01-03]")]),
        )
        .expect("a change");
        assert_eq!(partition.nodes.keys().collect::<Vec<_>>(), ["node04"]);
        assert_eq!(partition.nodes["node04"].changes, ["partitions gpu → none"]);
        // Same features in another order, a MaxTime change: nothing to agree on.
        assert_eq!(agreement(&with("Features=a,b"), &with("Features=b,a")), None);
        assert_eq!(
            agreement(
                &lab(LINE_4),
                &conf(&[&format!("NodeName=node[01-04] {LINE_4}")], &[&PARTITION.replace("INFINITE", "1-0")])
            ),
            None
        );
    }

    #[test]
    fn more_of_one_and_less_of_another_is_mixed() {
        let new = LINE_4.replace("Gres=gpu:h100:4", "Gres=gpu:h100:8").replace("RealMemory=1024", "RealMemory=512");
        let found = agreement(&lab(LINE_4), &lab(&new)).expect("a change");
        assert!(found.nodes.values().all(|node| node.direction == Direction::Mixed));
        assert_eq!(found.nodes["node01"].changes, ["gres gpu:h100 4 → 8", "memory 1024 → 512"]);
        // A GRES swapped for another is mixed too.
        let swapped = agreement(&lab(LINE_4), &lab(&LINE_4.replace("gpu:h100:4", "gpu:a100:4"))).expect("a change");
        assert!(swapped.nodes.values().all(|node| node.direction == Direction::Mixed));
    }

    #[test]
    fn only_the_nodes_whose_line_changed_and_added_or_removed_ones_are_named() {
        let old =
            conf(&[&format!("NodeName=node[01-02] {LINE_4}"), &format!("NodeName=node[03-04] {LINE_4}")], &[PARTITION]);
        let new = conf(
            &[
                &format!("NodeName=node[01-02] {LINE_4}"),
                &format!("NodeName=node03 {}", LINE_4.replace("gpu:h100:4", "gpu:h100:8")),
                &format!("NodeName=node05 {LINE_4}"),
            ],
            &[&PARTITION.replace("[01-04]", "[01-03,05]")],
        );
        let found = agreement(&old, &new).expect("a change");
        let directions: Vec<(&str, Direction)> =
            found.nodes.iter().map(|(name, node)| (name.as_str(), node.direction)).collect();
        assert_eq!(
            directions,
            [("node03", Direction::Increase), ("node04", Direction::Removed), ("node05", Direction::Added)]
        );
        assert_eq!(found.waved().collect::<Vec<_>>(), ["node03"]);
        assert_eq!(agreement(&old, &old), None);
    }

    #[test]
    fn the_controller_keeps_old_lines_until_each_node_is_done() {
        let new_line = LINE_4.replace("gpu:h100:4", "gpu:h100:8");
        let (old, new) = (lab(LINE_4), lab(&new_line));
        let found = agreement(&old, &new).expect("a change");
        let done = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect::<BTreeSet<_>>();
        let none = found.transitional(&new, &done(&[]));
        assert!(none.contains(&format!("NodeName=node[01-04] {LINE_4}\n")), "{none}");
        assert!(!none.contains("gpu:h100:8"), "{none}");
        let one = found.transitional(&new, &done(&["node01"]));
        assert!(one.contains(&format!("NodeName=node01 {new_line}\nNodeName=node[02-04] {LINE_4}\n")), "{one}");
        // Everything but the node lines is the new text, untouched.
        assert_eq!(
            one.replace(&format!("NodeName=node01 {new_line}\nNodeName=node[02-04] {LINE_4}\n"), ""),
            new.replace(&format!("NodeName=node[01-04] {new_line}\n"), "")
        );
        let all = found.transitional(&new, &done(&["node01", "node02", "node03", "node04"]));
        assert_eq!(all, new, "the last wave's text is the blueprint's");
    }

    #[test]
    fn a_removed_node_stays_until_the_end_and_an_added_one_is_there_from_the_start() {
        let old = lab(LINE_4);
        let new = conf(&[&format!("NodeName=node[01-03,05] {LINE_4}")], &[&PARTITION.replace("[01-04]", "[01-03,05]")]);
        let found = agreement(&old, &new).expect("a change");
        let text = found.transitional(&new, &BTreeSet::new());
        assert!(text.contains(&format!("NodeName=node[01-03,05] {LINE_4}\nNodeName=node04 {LINE_4}\n")), "{text}");
    }

    #[test]
    fn the_plan_says_the_order() {
        let waves: Vec<Vec<String>> = (1..=4).map(|n| vec![format!("node0{n}")]).collect();
        let up = agreement(&lab(LINE_4), &lab(&LINE_4.replace("gpu:h100:4", "gpu:h100:8"))).expect("a change");
        assert_eq!(
            up.lines(&waves),
            [
                "gres on node[01-04] (increase): nodes first in 4 waves of 1, then slurmctld with each wave's new lines (a node may report more than slurmctld expects, never less)"
            ]
        );
        let down = agreement(&lab(&LINE_4.replace("gpu:h100:4", "gpu:h100:8")), &lab(LINE_4)).expect("a change");
        assert!(down.lines(&waves[..2])[0].starts_with("gres on node[01-04] (decrease): slurmctld first with each wave's new lines, then the wave's nodes, in 2 waves of 1"), "{:?}", down.lines(&waves));
    }

    #[test]
    fn gres_counts_read_as_slurm_reads_them() {
        assert_eq!(gres_count("gpu:h100:8"), ("gpu:h100", 8));
        assert_eq!(gres_count("gpu:8"), ("gpu", 8));
        assert_eq!(gres_count("gpu"), ("gpu", 1));
        assert_eq!(gres_count("mps:2K"), ("mps", 2048));
        assert_eq!(gres_count("gpu:h100"), ("gpu:h100", 1));
    }
}
