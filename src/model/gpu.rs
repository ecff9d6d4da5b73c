//! The GPU models toolkit knows, with the facts configs and thresholds need.
//!
//! Stage: expand (lookup table). Bandwidth figures are per-GPU, from NVIDIA's data
//! sheets; validators derive intra-node NCCL thresholds from them.

use serde::Serialize;

/// Facts about one GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GpuModel {
    /// Blueprint name and Slurm GRES type (`h100`).
    pub name: &'static str,
    /// Marketing name, as nvidia-smi reports it.
    pub product: &'static str,
    /// Memory per GPU in GiB.
    pub memory_gib: u32,
    /// NVLink bandwidth per GPU, GB/s, both directions (0 = PCIe only).
    pub nvlink_gbps: u32,
    /// Supports MIG partitioning.
    pub mig: bool,
    /// Its 8-GPU baseboard connects the GPUs through NVSwitches, which NVIDIA Fabric
    /// Manager must program before any GPU initializes (not GB200: its NVLink
    /// switches sit in rack trays managed outside the host).
    pub nvswitch: bool,
    /// Oldest driver branch that supports the model, and the source (`None`: not known here).
    pub min_driver: Option<(u32, &'static str)>,
}

/// R450: first branch for A100 and NVSwitch (DCGM getting-started guide: "NVIDIA Driver
/// R450 and later is required on systems using NVSwitch, such as DGX A100").
const A100_DRIVER: Option<(u32, &str)> = Some((450, "R450 release notes: first branch for HGX A100 (DCGM guide)"));
/// H100 and H200 minimums follow NVIDIA's production-branch support (R525 with CUDA 12.0
/// for Hopper, R550 for H200); not checked here against a primary source, unlike A100/B200.
const H100_DRIVER: Option<(u32, &str)> = Some((525, "R525: first production branch with Hopper (H100) support"));
const H200_DRIVER: Option<(u32, &str)> = Some((550, "R550: first production branch with H200 support"));
const B200_DRIVER: Option<(u32, &str)> =
    Some((570, "GPU Operator platform support: HGX B200 requires driver 570.133.20 or later"));

/// Every model a blueprint may name.
pub const GPU_MODELS: &[GpuModel] = &[
    GpuModel {
        name: "a100",
        product: "NVIDIA A100-SXM4-80GB",
        memory_gib: 80,
        nvlink_gbps: 600,
        mig: true,
        nvswitch: true,
        min_driver: A100_DRIVER,
    },
    GpuModel {
        name: "a100-40gb",
        product: "NVIDIA A100-SXM4-40GB",
        memory_gib: 40,
        nvlink_gbps: 600,
        mig: true,
        nvswitch: true,
        min_driver: A100_DRIVER,
    },
    GpuModel {
        name: "h100",
        product: "NVIDIA H100 80GB HBM3",
        memory_gib: 80,
        nvlink_gbps: 900,
        mig: true,
        nvswitch: true,
        min_driver: H100_DRIVER,
    },
    GpuModel {
        name: "h100-nvl",
        product: "NVIDIA H100 NVL",
        memory_gib: 94,
        nvlink_gbps: 600,
        mig: true,
        nvswitch: false,
        min_driver: H100_DRIVER,
    },
    GpuModel {
        name: "h200",
        product: "NVIDIA H200",
        memory_gib: 141,
        nvlink_gbps: 900,
        mig: true,
        nvswitch: true,
        min_driver: H200_DRIVER,
    },
    GpuModel {
        name: "h20",
        product: "NVIDIA H20",
        memory_gib: 96,
        nvlink_gbps: 900,
        mig: true,
        nvswitch: true,
        min_driver: None,
    },
    GpuModel {
        name: "b200",
        product: "NVIDIA B200",
        memory_gib: 180,
        nvlink_gbps: 1800,
        mig: true,
        nvswitch: true,
        min_driver: B200_DRIVER,
    },
    GpuModel {
        name: "gb200",
        product: "NVIDIA GB200",
        memory_gib: 186,
        nvlink_gbps: 1800,
        mig: true,
        nvswitch: false,
        min_driver: None,
    },
    GpuModel {
        name: "b300",
        product: "NVIDIA B300",
        memory_gib: 270,
        nvlink_gbps: 1800,
        mig: true,
        nvswitch: true,
        min_driver: None,
    },
    GpuModel {
        name: "l40s",
        product: "NVIDIA L40S",
        memory_gib: 48,
        nvlink_gbps: 0,
        mig: false,
        nvswitch: false,
        min_driver: None,
    },
    GpuModel {
        name: "l4",
        product: "NVIDIA L4",
        memory_gib: 24,
        nvlink_gbps: 0,
        mig: false,
        nvswitch: false,
        min_driver: None,
    },
];

impl GpuModel {
    /// Its NVSwitches are fourth-generation (NVLink 5, HGX B200/B300): Fabric Manager then
    /// needs the NVLink Subnet Manager, `nvlsm` (Fabric Manager user guide, "Systems Using
    /// Fourth Generation NVSwitches" and "What is NVLink Subnet Manager?").
    #[must_use]
    pub const fn needs_nvlsm(&self) -> bool {
        self.nvswitch && self.nvlink_gbps >= 1800
    }
}

/// Looks a model up by blueprint name (case-insensitive).
#[must_use]
pub fn find(name: &str) -> Option<&'static GpuModel> {
    GPU_MODELS.iter().find(|model| model.name.eq_ignore_ascii_case(name))
}

/// The names, for "did you mean" hints.
pub fn names() -> impl Iterator<Item = &'static str> {
    GPU_MODELS.iter().map(|model| model.name)
}
