//! Hardware verification: what a node's BMC reports against what the blueprint
//! declares for its group. A node that differs is stopped before anything is
//! written to it, with each difference worded for the person at the rack
//! (`7 GPUs, blueprint 8`, `1536 GiB memory, blueprint 2048`).
//!
//! Stage: pure. Input: an [`Expected`] (from the node's group) and the BMC's
//! [`Hardware`]. Output: a [`Verdict`]: the mismatches, and what could not be
//! checked because the BMC did not report it (the deploy agent checks GPUs and
//! memory again in band, before it writes: [`Expected::in_band`]).

use std::fmt;

use super::server::InBand;
use crate::blueprint::schema::NodeGroup;
use crate::bmc::inspect::Hardware;
use crate::model::Group;

/// What the blueprint declares of one node's hardware (only what it declares).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected {
    /// CPU sockets.
    pub sockets: Option<u32>,
    /// Cores, all sockets.
    pub cores: Option<u32>,
    /// Memory, GiB.
    pub memory_gib: Option<u32>,
    /// GPUs.
    pub gpus: Option<u32>,
    /// Local NVMe drives.
    pub nvme_drives: Option<u32>,
}

impl Expected {
    /// What `declared` (the blueprint's group) says; `group` is its expansion.
    #[must_use]
    pub fn of_group(group: &Group, declared: &NodeGroup) -> Self {
        Self {
            sockets: declared.cpu.map(|cpu| cpu.sockets),
            cores: declared.cpu.map(|cpu| cpu.sockets * cpu.cores_per_socket),
            memory_gib: declared.memory_gib,
            gpus: declared.gpu.as_ref().map(|_| group.gpus_per_node),
            nvme_drives: declared.local_nvme.as_ref().map(|_| group.local_nvme),
        }
    }

    /// What the deploy agent checks again from inside the machine.
    #[must_use]
    pub fn in_band(&self) -> InBand {
        InBand { gpus: self.gpus, memory_gib: self.memory_gib.map(u64::from) }
    }
}

/// One difference.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// What (`GPUs`, `GiB memory`, `CPU sockets`).
    pub what: &'static str,
    /// What the BMC reports.
    pub reported: String,
    /// What the blueprint says.
    pub blueprint: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} {}, blueprint {}", self.reported, self.what, self.blueprint)
    }
}

/// The outcome of a check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// Each difference.
    pub mismatches: Vec<Mismatch>,
    /// What the blueprint declares but the BMC did not report.
    pub unchecked: Vec<String>,
}

/// Memory a BMC may report below the installed total (firmware-reserved regions,
/// and vendors that count in GB rather than GiB), as a fraction: a missing DIMM is
/// at least 1/16 of a balanced server's memory, far beyond it.
const MEMORY_SHORTFALL: f64 = 0.03;

/// The hardware against the blueprint.
#[must_use]
pub fn verify(expected: &Expected, hardware: &Hardware) -> Verdict {
    let mut verdict = Verdict::default();
    let mut check = |what: &'static str, wanted: Option<u32>, reported: Option<u32>, source: &str| {
        let Some(wanted) = wanted else { return };
        match reported {
            Some(reported) if reported == wanted => {}
            Some(reported) => verdict.mismatches.push(Mismatch {
                what,
                reported: reported.to_string(),
                blueprint: wanted.to_string(),
            }),
            None => verdict.unchecked.push(format!("{what}: the BMC reports no {source}")),
        }
    };
    check("CPU sockets", expected.sockets, hardware.cpu_sockets(), "processors");
    check("CPU cores", expected.cores, hardware.cpu_cores(), "core counts");
    check("GPUs", expected.gpus, hardware.gpus(), "GPUs or PCIe devices (the deploy agent counts them in band)");
    let nvme = hardware.drives.as_ref().map(|drives| {
        drives.iter().filter(|drive| drive.protocol.as_deref().is_some_and(|p| p.eq_ignore_ascii_case("NVMe"))).count()
            as u32
    });
    if let (Some(wanted), Some(found)) = (expected.nvme_drives, nvme)
        && found < wanted
    {
        verdict.mismatches.push(Mismatch { what: "NVMe drives", reported: found.to_string(), blueprint: wanted.to_string() });
    } else if expected.nvme_drives.is_some() && nvme.is_none() {
        verdict.unchecked.push("NVMe drives: the BMC reports no drives".to_owned());
    }
    if let Some(wanted) = expected.memory_gib {
        match hardware.memory_gib {
            Some(reported) if reported < f64::from(wanted) * (1.0 - MEMORY_SHORTFALL) => {
                verdict.mismatches.push(Mismatch {
                    what: "GiB memory",
                    reported: format!("{reported}"),
                    blueprint: wanted.to_string(),
                });
            }
            Some(_) => {}
            None => verdict.unchecked.push("memory: the BMC reports no memory summary".to_owned()),
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bmc::inspect::{Drive, PcieFunction, Processor};

    /// An HGX H100 node as a BMC lays it out: two CPUs, eight GPUs as PCIe functions.
    fn hgx() -> Hardware {
        let cpu = |id: &str| Processor {
            id: id.to_owned(),
            kind: Some("CPU".to_owned()),
            cores: Some(56),
            threads: Some(112),
            ..Processor::default()
        };
        let gpu = |n: u32| PcieFunction {
            id: format!("GPU{n}/0"),
            vendor_id: Some("0x10DE".to_owned()),
            device_id: Some("0x2330".to_owned()),
            class_code: Some("0x030200".to_owned()),
            function_type: Some("Physical".to_owned()),
        };
        let nvme = |n: u32| Drive { id: format!("NVMe{n}"), protocol: Some("NVMe".to_owned()), ..Drive::default() };
        Hardware {
            memory_gib: Some(2048.0),
            processors: Some(vec![cpu("CPU0"), cpu("CPU1")]),
            pcie: Some((0..8).map(gpu).collect()),
            drives: Some((0..8).map(nvme).collect()),
            ..Hardware::default()
        }
    }

    fn expected() -> Expected {
        Expected { sockets: Some(2), cores: Some(112), memory_gib: Some(2048), gpus: Some(8), nvme_drives: Some(8) }
    }

    #[test]
    fn a_matching_node_passes() {
        assert_eq!(verify(&expected(), &hgx()), Verdict::default());
    }

    #[test]
    fn each_difference_is_worded_for_the_rack() {
        let mut hardware = hgx();
        hardware.pcie.as_mut().expect("pcie").pop();
        hardware.memory_gib = Some(1536.0);
        hardware.processors.as_mut().expect("cpus").pop();
        let verdict = verify(&expected(), &hardware);
        let said: Vec<String> = verdict.mismatches.iter().map(ToString::to_string).collect();
        assert_eq!(said, ["1 CPU sockets, blueprint 2", "56 CPU cores, blueprint 112", "7 GPUs, blueprint 8", "1536 GiB memory, blueprint 2048"]);
    }

    #[test]
    fn a_bmc_that_reports_less_leaves_it_unchecked_not_wrong() {
        let hardware = Hardware { memory_gib: Some(2040.0), ..Hardware::default() };
        let verdict = verify(&expected(), &hardware);
        assert!(verdict.mismatches.is_empty(), "{verdict:?}");
        assert_eq!(verdict.unchecked.len(), 4, "{verdict:?}");
        assert!(verdict.unchecked.iter().any(|note| note.starts_with("GPUs: the BMC reports no GPUs")), "{verdict:?}");
        // 8 GiB short of 2 TiB is firmware's share, not a missing DIMM.
        assert!(verify(&Expected { memory_gib: Some(2048), ..Expected::default() }, &hardware).mismatches.is_empty());
    }
}
