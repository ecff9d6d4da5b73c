//! Which disk receives the OS: the blueprint's hints against the disks the deploy
//! agent found, as Ironic's root device hints work — every hint given must match,
//! and exactly one disk may match. Never "the first disk": disk order is the order
//! controllers answered in, which changes between boots and between identical
//! machines.
//!
//! Stage: pure. Input: a [`DiskRule`] and the agent's [`AgentDisk`]s. Output: the
//! chosen disk, or why none can be chosen, naming every candidate.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The hints (`os.disk` in the blueprint).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRule {
    /// `/dev/disk/by-path/…` or `/dev/disk/by-id/…`.
    pub path: Option<String>,
    /// Serial number.
    pub serial: Option<String>,
    /// World Wide Name.
    pub wwn: Option<String>,
    /// Model.
    pub model: Option<String>,
    /// Smallest size, GiB.
    pub min_gib: Option<u64>,
    /// Largest size, GiB.
    pub max_gib: Option<u64>,
}

/// A disk as the agent reports it (sysfs and udev).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentDisk {
    /// Kernel name (`vda`, `nvme0n1`, `sda`).
    pub name: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Model, when the device says.
    #[serde(default)]
    pub model: Option<String>,
    /// Serial number, when the device says.
    #[serde(default)]
    pub serial: Option<String>,
    /// WWN, when the device has one.
    #[serde(default)]
    pub wwn: Option<String>,
    /// Its `/dev/disk/by-path/` name (without the directory).
    #[serde(default)]
    pub by_path: Option<String>,
    /// Its `/dev/disk/by-id/` names, space separated.
    #[serde(default)]
    pub by_id: Option<String>,
    /// Spinning disk.
    #[serde(default)]
    pub rotational: bool,
}

impl AgentDisk {
    /// `vda (8 GiB, serial S4X…)`, for messages.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("{} GiB", self.size_bytes >> 30)];
        for (name, value) in [("model", &self.model), ("serial", &self.serial), ("path", &self.by_path)] {
            if let Some(value) = value {
                parts.push(format!("{name} {value}"));
            }
        }
        format!("{} ({})", self.name, parts.join(", "))
    }

    /// The device node the agent writes to.
    #[must_use]
    pub fn device(&self) -> String {
        format!("/dev/{}", self.name)
    }
}

/// Why no single disk matches.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DiskError {
    /// The rule gives no hint at all.
    #[error("the disk rule gives no hint: toolkit never picks \"the first disk\"")]
    NoHint,
    /// No disk matches.
    #[error("no disk matches {rule}; the node has: {seen}")]
    NoMatch {
        /// The rule.
        rule: String,
        /// Every disk seen.
        seen: String,
    },
    /// Several disks match.
    #[error("{count} disks match {rule}: {candidates}; add a hint (serial, path) that tells them apart")]
    Ambiguous {
        /// The rule.
        rule: String,
        /// How many.
        count: usize,
        /// Those that match.
        candidates: String,
    },
}

impl DiskRule {
    /// Whether no hint is given.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// `path …, serial …, 3–16 GiB`.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (name, value) in
            [("path", &self.path), ("serial", &self.serial), ("wwn", &self.wwn), ("model", &self.model)]
        {
            if let Some(value) = value {
                parts.push(format!("{name} `{value}`"));
            }
        }
        match (self.min_gib, self.max_gib) {
            (Some(min), Some(max)) => parts.push(format!("{min}–{max} GiB")),
            (Some(min), None) => parts.push(format!("at least {min} GiB")),
            (None, Some(max)) => parts.push(format!("at most {max} GiB")),
            (None, None) => {}
        }
        format!("the rule {}", parts.join(", "))
    }

    /// Whether `disk` meets every hint.
    #[must_use]
    pub fn matches(&self, disk: &AgentDisk) -> bool {
        let gib = disk.size_bytes as f64 / f64::from(1_u32 << 30);
        let same = |wanted: &Option<String>, have: &Option<String>| {
            wanted.as_ref().is_none_or(|wanted| have.as_deref().is_some_and(|have| have.trim() == wanted.trim()))
        };
        let path_ok = self.path.as_ref().is_none_or(|path| {
            if let Some(name) = path.strip_prefix("/dev/disk/by-path/") {
                disk.by_path.as_deref() == Some(name)
            } else if let Some(name) = path.strip_prefix("/dev/disk/by-id/") {
                disk.by_id.as_deref().is_some_and(|ids| ids.split_whitespace().any(|id| id == name))
            } else {
                false
            }
        });
        path_ok
            && same(&self.serial, &disk.serial)
            && same(&self.model, &disk.model)
            && self.wwn.as_ref().is_none_or(|wwn| {
                disk.wwn
                    .as_deref()
                    .is_some_and(|have| have.trim().to_ascii_lowercase().contains(&wwn.to_ascii_lowercase()))
            })
            && self.min_gib.is_none_or(|min| gib >= min as f64)
            && self.max_gib.is_none_or(|max| gib <= max as f64)
    }
}

/// The one disk of `disks` that `rule` selects.
///
/// # Errors
/// [`DiskError`]: no hint, no match, or several matches — each naming the disks.
pub fn select<'a>(rule: &DiskRule, disks: &'a [AgentDisk]) -> Result<&'a AgentDisk, DiskError> {
    if rule.is_empty() {
        return Err(DiskError::NoHint);
    }
    let matching: Vec<&AgentDisk> = disks.iter().filter(|disk| rule.matches(disk)).collect();
    let list = |disks: &[&AgentDisk]| disks.iter().map(|disk| disk.describe()).collect::<Vec<_>>().join("; ");
    match matching[..] {
        [one] => Ok(one),
        [] => Err(DiskError::NoMatch {
            rule: rule.describe(),
            seen: if disks.is_empty() { "no disk at all".to_owned() } else { list(&disks.iter().collect::<Vec<_>>()) },
        }),
        _ => Err(DiskError::Ambiguous { rule: rule.describe(), count: matching.len(), candidates: list(&matching) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// Two NVMe drives and a SATA SSD as a real server reports them.
    fn disks() -> Vec<AgentDisk> {
        vec![
            AgentDisk {
                name: "nvme0n1".to_owned(),
                size_bytes: 3_840_755_982_336,
                model: Some("SAMSUNG MZQL23T8HCLS-00A07".to_owned()),
                serial: Some("S64HNE0T123456".to_owned()),
                wwn: Some("eui.36434830523012345".to_owned()),
                by_path: Some("pci-0000:c3:00.0-nvme-1".to_owned()),
                by_id: Some("nvme-SAMSUNG_MZQL23T8HCLS-00A07_S64HNE0T123456 nvme-eui.36434830523012345".to_owned()),
                rotational: false,
            },
            AgentDisk {
                name: "nvme1n1".to_owned(),
                size_bytes: 3_840_755_982_336,
                model: Some("SAMSUNG MZQL23T8HCLS-00A07".to_owned()),
                serial: Some("S64HNE0T654321".to_owned()),
                by_path: Some("pci-0000:c4:00.0-nvme-1".to_owned()),
                ..AgentDisk::default()
            },
            AgentDisk {
                name: "sda".to_owned(),
                size_bytes: 480 * GIB,
                model: Some("MTFDDAK480TDS".to_owned()),
                serial: Some("2209335A1B2C".to_owned()),
                by_path: Some("pci-0000:00:17.0-ata-1".to_owned()),
                rotational: false,
                ..AgentDisk::default()
            },
        ]
    }

    #[test]
    fn each_hint_selects_its_disk() {
        let disks = disks();
        let pick = |rule: DiskRule| select(&rule, &disks).map(|disk| disk.name.clone());
        let by_path =
            DiskRule { path: Some("/dev/disk/by-path/pci-0000:00:17.0-ata-1".to_owned()), ..DiskRule::default() };
        assert_eq!(pick(by_path), Ok("sda".to_owned()));
        let by_id =
            DiskRule { path: Some("/dev/disk/by-id/nvme-eui.36434830523012345".to_owned()), ..DiskRule::default() };
        assert_eq!(pick(by_id), Ok("nvme0n1".to_owned()));
        assert_eq!(
            pick(DiskRule { serial: Some("S64HNE0T654321".to_owned()), ..DiskRule::default() }),
            Ok("nvme1n1".to_owned())
        );
        assert_eq!(pick(DiskRule { max_gib: Some(1000), ..DiskRule::default() }), Ok("sda".to_owned()));
        assert_eq!(
            pick(DiskRule { wwn: Some("EUI.36434830523012345".to_owned()), ..DiskRule::default() }),
            Ok("nvme0n1".to_owned())
        );
    }

    #[test]
    fn several_or_none_is_an_error_naming_the_disks() {
        let disks = disks();
        let two =
            select(&DiskRule { model: Some("SAMSUNG MZQL23T8HCLS-00A07".to_owned()), ..DiskRule::default() }, &disks)
                .expect_err("ambiguous");
        let text = two.to_string();
        assert!(text.starts_with("2 disks match the rule model"), "{text}");
        assert!(text.contains("nvme0n1 (3576 GiB") && text.contains("nvme1n1 (3576 GiB"), "{text}");
        let none = select(&DiskRule { min_gib: Some(8000), ..DiskRule::default() }, &disks).expect_err("none");
        let text = none.to_string();
        assert!(text.contains("no disk matches the rule at least 8000 GiB; the node has: nvme0n1"), "{text}");
        assert!(text.contains("sda (480 GiB, model MTFDDAK480TDS"), "{text}");
        assert_eq!(select(&DiskRule::default(), &disks), Err(DiskError::NoHint));
        // Hints combine: the model of the NVMe drives and the serial of the second.
        let both = DiskRule {
            model: Some("SAMSUNG MZQL23T8HCLS-00A07".to_owned()),
            serial: Some("S64HNE0T654321".to_owned()),
            ..DiskRule::default()
        };
        assert_eq!(select(&both, &disks).map(|disk| disk.name.as_str()), Ok("nvme1n1"));
        // A path that is not a stable one matches nothing.
        let unstable = DiskRule { path: Some("/dev/sda".to_owned()), ..DiskRule::default() };
        assert!(select(&unstable, &disks).is_err());
    }
}
