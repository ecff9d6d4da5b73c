//! Hardware against the blueprint: does the box in the rack match its node group?
//!
//! Stage: inspect (pure). Input: an [`Expected`] made from a blueprint node group
//! ([`Expected::from_group`]) and the [`Hardware`] a BMC reported. Output: a [`Verdict`]:
//! each mismatch by field with both values (`7 GPUs, blueprint 8`), and each field that
//! could not be checked because the BMC did not report it (never counted as a match).

use serde::{Deserialize, Serialize};

use crate::blueprint::schema::NodeGroup;
use crate::bmc::inspect::{Hardware, PcieFunction};

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;

/// PCI device ids of data-centre GPUs by catalog model name. Source: the PCI ID
/// Repository, vendor 10de (<https://pci-ids.ucw.cz/read/PC/10de>), as shipped in
/// Debian's `pci.ids` (`/usr/share/misc/pci.ids`). Lives here until the lead moves
/// it beside the GPU catalog (`src/model/gpu.rs`, not this module's file).
pub const GPU_DEVICE_IDS: &[(&str, &[u16])] = &[
    // GA100 [A100 SXM4 40GB], [A100 PCIe 80GB], [A100 SXM4 80GB], [A100 PCIe 40GB]
    ("a100", &[0x20b0, 0x20b5, 0x20b2, 0x20f1]),
    // GH100 [H100 SXM5 80GB], [H100 PCIe], [H100 NVL]
    ("h100", &[0x2330, 0x2331, 0x2321]),
    // GH100 [H200 SXM 141GB], [H200 NVL]
    ("h200", &[0x2335, 0x233b]),
    // GB100 [B200]
    ("b200", &[0x2901]),
    // AD102GL [L40S]
    ("l40s", &[0x26b9]),
];

/// What the blueprint says one node of a group has. `None` fields are not checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    /// The node group.
    pub group: String,
    /// CPU sockets.
    pub sockets: Option<u32>,
    /// Cores per socket.
    pub cores_per_socket: Option<u32>,
    /// Hardware threads per core.
    pub threads_per_core: Option<u32>,
    /// Memory in GiB.
    pub memory_gib: Option<u32>,
    /// GPU model (catalog name) and count.
    pub gpu: Option<(String, u32)>,
    /// Rail (compute fabric) NICs.
    pub rail_nics: Option<u32>,
    /// Local NVMe drives.
    pub local_nvme: Option<u32>,
    /// The OS disk rule, checked by the deploy agent in-band (seam for `provision::disk`).
    pub os_disk: Option<String>,
}

impl Expected {
    /// What `group` asks of each of its nodes.
    #[must_use]
    pub fn from_group(group: &NodeGroup) -> Self {
        Self {
            group: group.name.clone(),
            sockets: group.cpu.map(|cpu| cpu.sockets),
            cores_per_socket: group.cpu.map(|cpu| cpu.cores_per_socket),
            threads_per_core: group.cpu.map(|cpu| cpu.threads_per_core),
            memory_gib: group.memory_gib,
            gpu: group.gpu.as_ref().map(|gpu| (gpu.model.clone(), gpu.count)),
            rail_nics: group.rail_nics.as_ref().map(|nics| nics.count),
            local_nvme: group.local_nvme.as_ref().map(|nvme| nvme.count),
            os_disk: None,
        }
    }
}

impl Expected {
    /// What the deploy agent checks again from inside the machine, where GPUs and
    /// memory are seen whatever the BMC reports.
    #[must_use]
    pub fn in_band(&self) -> super::server::InBand {
        super::server::InBand {
            gpus: self.gpu.as_ref().map(|(_, count)| *count),
            memory_gib: self.memory_gib.map(u64::from),
        }
    }
}

/// One field where the hardware differs from the blueprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    /// `cpu_sockets`, `cores_per_socket`, `threads_per_core`, `memory_gib`, `gpus`, `nvme`.
    pub field: String,
    /// What the BMC reports.
    pub reported: String,
    /// What the blueprint says.
    pub blueprint: String,
    /// The sentence: `7 GPUs, blueprint 8`.
    pub message: String,
}

/// A field the BMC gave nothing to check against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unchecked {
    /// The field.
    pub field: String,
    /// Why (the BMC's missing resource).
    pub reason: String,
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Fields that differ.
    pub mismatches: Vec<Mismatch>,
    /// Fields that could not be checked.
    pub unchecked: Vec<Unchecked>,
}

impl Verdict {
    /// No mismatch (unchecked fields do not fail a node: the agent checks them in-band).
    #[must_use]
    pub fn matches(&self) -> bool {
        self.mismatches.is_empty()
    }

    fn differ(&mut self, field: &str, reported: u64, blueprint: u64, unit: &str) {
        self.mismatches.push(Mismatch {
            field: field.to_owned(),
            reported: reported.to_string(),
            blueprint: blueprint.to_string(),
            message: format!("{reported} {unit}, blueprint {blueprint}"),
        });
    }

    fn unchecked(&mut self, field: &str, reason: &str) {
        self.unchecked.push(Unchecked { field: field.to_owned(), reason: reason.to_owned() });
    }
}

/// Memory the BMC may report below the installed amount before it counts as a
/// mismatch: 3 %. `TotalSystemMemoryGiB` is what the firmware hands the OS on some
/// BMCs, less what it reserves (SMM, UMA frame buffers, memory-mapped I/O holes):
/// tens of MiB to a few GiB on a 2 TiB node — well under 3 % — while a missing DIMM
/// is 1/8 or 1/16 of a node's memory (6 % or more), so the tolerance never hides one.
const MEMORY_SHORTFALL: f64 = 0.03;

fn is_gpu_function(function: &PcieFunction) -> bool {
    let hex = |text: &Option<String>| {
        text.as_deref().and_then(|t| u32::from_str_radix(t.trim_start_matches("0x").trim_start_matches("0X"), 16).ok())
    };
    // Class 0x03 (display controller: VGA 0x0300, 3D 0x0302) from NVIDIA; only
    // physical functions, since a GPU's SR-IOV virtual functions are not more GPUs.
    hex(&function.vendor_id) == Some(u32::from(NVIDIA_VENDOR))
        && hex(&function.class_code).is_some_and(|class| class >> 16 == 0x03)
        && function.function_type.as_deref() != Some("Virtual")
}

/// The PCI device ids of a catalog GPU model, if known.
#[must_use]
pub fn gpu_device_ids(model: &str) -> Option<&'static [u16]> {
    GPU_DEVICE_IDS.iter().find(|(name, _)| name.eq_ignore_ascii_case(model)).map(|(_, ids)| *ids)
}

/// Compares `hardware` with `expected`.
#[must_use]
pub fn verify(expected: &Expected, hardware: &Hardware) -> Verdict {
    let mut verdict = Verdict::default();
    check_cpus(expected, hardware, &mut verdict);
    check_memory(expected, hardware, &mut verdict);
    check_gpus(expected, hardware, &mut verdict);
    if let Some(want) = expected.local_nvme {
        match hardware.drives.reported() {
            Some(drives) => {
                let have = drives.iter().filter(|d| d.protocol.as_deref() == Some("NVMe")).count() as u64;
                if have != u64::from(want) {
                    verdict.differ("nvme", have, want.into(), "NVMe drives");
                }
            }
            None => verdict.unchecked("nvme", hardware.drives.reason().unwrap_or_default()),
        }
    }
    if expected.rail_nics.is_some() {
        // Rail NICs (InfiniBand HCAs, RoCE ports) are not told apart from the
        // management NICs in `EthernetInterfaces`; the agent counts them in-band.
        verdict.unchecked("rail_nics", "the BMC does not tell rail NICs from other interfaces");
    }
    verdict
}

fn check_cpus(expected: &Expected, hardware: &Hardware, verdict: &mut Verdict) {
    if expected.sockets.is_none() && expected.cores_per_socket.is_none() && expected.threads_per_core.is_none() {
        return;
    }
    let Some(processors) = hardware.processors.reported() else {
        // The summary still tells sockets and totals.
        let reason = hardware.processors.reason().unwrap_or_default();
        match (&hardware.processor_summary, expected.sockets) {
            (Some(summary), Some(want)) if summary.count.is_some() => {
                let have = summary.count.unwrap_or_default();
                if have != want {
                    verdict.differ("cpu_sockets", have.into(), want.into(), "CPU sockets");
                }
            }
            _ => verdict.unchecked("cpu_sockets", reason),
        }
        verdict.unchecked("cores_per_socket", reason);
        return;
    };
    let cpus: Vec<_> = processors.iter().filter(|p| p.kind.as_deref().is_none_or(|k| k == "CPU")).collect();
    let sockets = cpus.len() as u64;
    if let Some(want) = expected.sockets
        && sockets != u64::from(want)
    {
        verdict.differ("cpu_sockets", sockets, want.into(), "CPU sockets");
    }
    if let Some(want) = expected.cores_per_socket {
        match cpus.iter().map(|p| p.cores).collect::<Option<Vec<_>>>() {
            Some(cores) => {
                if let Some(&have) = cores.iter().find(|&&have| have != want) {
                    verdict.differ("cores_per_socket", have.into(), want.into(), "cores per socket");
                }
            }
            None => verdict.unchecked("cores_per_socket", "a processor has no `TotalCores`"),
        }
    }
    if let Some(want) = expected.threads_per_core {
        let per_core: Option<Vec<u32>> = cpus.iter().map(|p| Some(p.threads? / p.cores.filter(|&c| c > 0)?)).collect();
        match per_core {
            Some(values) => {
                if let Some(&have) = values.iter().find(|&&have| have != want) {
                    verdict.differ("threads_per_core", have.into(), want.into(), "threads per core");
                }
            }
            None => verdict.unchecked("threads_per_core", "a processor has no `TotalThreads` or `TotalCores`"),
        }
    }
}

fn check_memory(expected: &Expected, hardware: &Hardware, verdict: &mut Verdict) {
    let Some(want) = expected.memory_gib else { return };
    // DIMMs are the installed amount; the summary is the fallback.
    #[allow(clippy::cast_precision_loss)]
    let have = hardware.memory_modules_mib.reported().map(|&mib| mib as f64 / 1024.0).or(hardware.memory_gib);
    let Some(have) = have else {
        let reason = hardware.memory_modules_mib.reason().unwrap_or("no `MemorySummary`");
        verdict.unchecked("memory_gib", reason);
        return;
    };
    let want_f = f64::from(want);
    if have < want_f * (1.0 - MEMORY_SHORTFALL) || have > want_f {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let shown = have.round() as u64;
        verdict.differ("memory_gib", shown, want.into(), "GiB memory");
    }
}

fn check_gpus(expected: &Expected, hardware: &Hardware, verdict: &mut Verdict) {
    let Some((model, want)) = &expected.gpu else { return };
    let ids = gpu_device_ids(model);
    let from_pcie = hardware.pcie.reported().map(|functions| {
        functions
            .iter()
            .filter(|f| is_gpu_function(f))
            .filter(|f| {
                // A known model is counted by its device ids; an unknown one by class.
                let device = f
                    .device_id
                    .as_deref()
                    .and_then(|d| u16::from_str_radix(d.trim_start_matches("0x").trim_start_matches("0X"), 16).ok());
                ids.is_none_or(|ids| device.is_some_and(|d| ids.contains(&d)))
            })
            .count() as u64
    });
    let from_processors = hardware
        .processors
        .reported()
        .map(|processors| processors.iter().filter(|p| p.kind.as_deref() == Some("GPU")).count() as u64);
    // PCIe is exact (vendor/device ids); processors of type GPU where a BMC lists them so.
    let have = match (from_pcie, from_processors) {
        (Some(pcie), _) if pcie > 0 => Some(pcie),
        (_, Some(gpus)) if gpus > 0 => Some(gpus),
        (Some(pcie), _) => Some(pcie),
        // No PCIe and no GPU among the processors: many BMCs do not list GPUs as
        // processors, so zero there proves nothing.
        (None, _) => None,
    };
    match have {
        Some(have) if have != u64::from(*want) => verdict.differ("gpus", have, (*want).into(), "GPUs"),
        Some(_) => {}
        None => verdict.unchecked("gpus", hardware.pcie.reason().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests;
