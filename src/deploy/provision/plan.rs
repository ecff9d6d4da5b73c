//! What a provisioning run would do, as plan lines: which nodes get an OS written
//! (destructive: their OS disk is erased), which are kept, which are refused.
//!
//! Stage: pure. Input: the candidates and, per node, what is known of it (SSH
//! presence live, or its state record offline). Output: [`Pending`] per node and
//! the lines `toolkit plan` and `toolkit deploy` print, nodes with the same action,
//! OS and disk rule folded into one hostlist.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::flow::{Candidate, Presence, disk_rule, image_spec};
use crate::blueprint::schema::{Distribution, Os, OsDisk};
use crate::inventory::schema::BootMedium;
use crate::model::hostlist;
use crate::plan::state::provisioning::{NodeProvisioning, ProvisionStep};

/// What a run would do to one node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pending {
    /// Install: nothing answers SSH on it (blank, off, or an install that did not finish).
    Install,
    /// Install though it runs toolkit's OS: named by `--reinstall`.
    Reinstall,
    /// Keep: it runs the OS toolkit installed.
    Keep,
    /// Refuse: another OS answers SSH (its key is not the one toolkit generated).
    Foreign,
}

/// What a live run would do, from the SSH probe.
#[must_use]
pub fn from_presence(presence: &Presence, reinstall: bool) -> Pending {
    match (presence, reinstall) {
        (_, true) => Pending::Reinstall,
        (Presence::Ours, false) => Pending::Keep,
        (Presence::Foreign(_), false) => Pending::Foreign,
        (Presence::Nothing, false) => Pending::Install,
    }
}

/// What a run would do, from the state file alone (`plan --offline`): a node the
/// last run left reachable is kept; any other is installed (a failed or killed
/// install starts again from the network boot).
#[must_use]
pub fn from_record(record: Option<&NodeProvisioning>, reinstall: bool) -> Pending {
    match (record, reinstall) {
        (_, true) => Pending::Reinstall,
        (Some(record), false) if record.step == ProvisionStep::Reachable => Pending::Keep,
        _ => Pending::Install,
    }
}

/// `debian bookworm`.
#[must_use]
pub fn os_name(os: &Os) -> String {
    let distribution = match os.distribution {
        Distribution::Debian => "debian",
        Distribution::Ubuntu => "ubuntu",
    };
    format!("{distribution} {}", os.suite)
}

/// `path /dev/disk/by-path/…, 3–16 GiB`: the rule as the plan shows it.
#[must_use]
pub fn disk_text(disk: &OsDisk) -> String {
    let mut parts = Vec::new();
    for (name, value) in [("path", &disk.path), ("serial", &disk.serial), ("wwn", &disk.wwn), ("model", &disk.model)] {
        if let Some(value) = value {
            parts.push(format!("{name} {value}"));
        }
    }
    match (disk.min_gib, disk.max_gib) {
        (Some(min), Some(max)) => parts.push(format!("{min}–{max} GiB")),
        (Some(min), None) => parts.push(format!("≥ {min} GiB")),
        (None, Some(max)) => parts.push(format!("≤ {max} GiB")),
        (None, None) => {}
    }
    parts.join(", ")
}

/// The plan lines, one per (action, OS, image, disk rule), nodes folded.
#[must_use]
pub fn lines(candidates: &[Candidate], pending: &BTreeMap<String, Pending>, medium: BootMedium) -> Vec<String> {
    let over = match medium {
        BootMedium::Network => "pxe",
        BootMedium::VirtualMedia => "virtual media",
    };
    let mut groups: BTreeMap<(Pending, String, String, String), Vec<&str>> = BTreeMap::new();
    for candidate in candidates {
        let Some(action) = pending.get(&candidate.node) else { continue };
        let recipe = image_spec(&candidate.os, &candidate.ssh.user).hash();
        let short = recipe.get(..12).unwrap_or(&recipe).to_owned();
        let rule = disk_text(&candidate.os.disk);
        debug_assert_eq!(disk_rule(&candidate.os).min_gib, candidate.os.disk.min_gib);
        groups.entry((action.clone(), os_name(&candidate.os), short, rule)).or_default().push(&candidate.node);
    }
    let mut out = Vec::new();
    for ((action, os, recipe, rule), nodes) in groups {
        let hosts = hostlist::compress(nodes.iter().copied());
        let mut line = String::new();
        let _ = match action {
            Pending::Install => write!(
                line,
                "+ os {os} on {hosts}  (install over {over}, image {recipe}, disk {rule})  destructive: the disk is erased"
            ),
            Pending::Reinstall => write!(
                line,
                "-/+ os {os} on {hosts}  (reinstall: --reinstall, image {recipe}, disk {rule})  destructive: the disk is erased"
            ),
            Pending::Keep => write!(line, "  os {os} on {hosts}  (installed: SSH answers with the pinned host key)"),
            Pending::Foreign => write!(
                line,
                "! os {os} on {hosts}  (refused: an OS toolkit did not install answers SSH; --reinstall to erase it)"
            ),
        };
        out.push(line);
    }
    out
}

/// Whether any node would be written.
#[must_use]
pub fn has_changes(pending: &BTreeMap<String, Pending>) -> bool {
    pending.values().any(|action| matches!(action, Pending::Install | Pending::Reinstall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_rule_reads_as_written() {
        let disk = OsDisk {
            path: Some("/dev/disk/by-path/pci-0000:00:04.0".to_owned()),
            min_gib: Some(3),
            max_gib: Some(16),
            ..OsDisk::default()
        };
        assert_eq!(disk_text(&disk), "path /dev/disk/by-path/pci-0000:00:04.0, 3–16 GiB");
        assert_eq!(disk_text(&OsDisk { serial: Some("S4X".to_owned()), ..OsDisk::default() }), "serial S4X");
    }

    #[test]
    fn reinstall_wins_and_only_a_reachable_record_is_kept() {
        assert_eq!(from_presence(&Presence::Ours, false), Pending::Keep);
        assert_eq!(from_presence(&Presence::Ours, true), Pending::Reinstall);
        assert_eq!(from_presence(&Presence::Foreign("SHA256:x".to_owned()), false), Pending::Foreign);
        assert_eq!(from_presence(&Presence::Nothing, false), Pending::Install);
        let record = |step| NodeProvisioning::new(step, String::new());
        assert_eq!(from_record(Some(&record(ProvisionStep::Reachable)), false), Pending::Keep);
        assert_eq!(from_record(Some(&record(ProvisionStep::Installing)), false), Pending::Install);
        assert_eq!(from_record(Some(&record(ProvisionStep::Failed)), false), Pending::Install);
        assert_eq!(from_record(None, false), Pending::Install);
        assert_eq!(from_record(Some(&record(ProvisionStep::Reachable)), true), Pending::Reinstall);
        let pending = BTreeMap::from([("a".to_owned(), Pending::Keep)]);
        assert!(!has_changes(&pending));
    }
}
