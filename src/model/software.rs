//! The software stack of each GPU node group, resolved: which driver branch, whether
//! Fabric Manager runs, which packages and services that means.
//!
//! Stage: expand. Input: the blueprint's `software` section (top level or the group's
//! own, which replaces it) and the group's GPU model. Output: [`Stack`]. Package and
//! repository names are decided here so templates only lay them out; `check` has
//! already reported what is wrong with the values, so resolution never fails.

use serde::Serialize;

use super::gpu::GpuModel;
use crate::blueprint::schema::{
    Containers, Dcgm, FabricManagerMode, GpuDriver, KernelModules, NetworkStack, NetworkStackKind, Software, SoftwareOs,
};

/// NVIDIA's CUDA apt repository: drivers, Fabric Manager, DCGM.
pub const CUDA_REPO_BASE: &str = "https://developer.download.nvidia.com/compute/cuda/repos";
/// NVIDIA's networking repository: DOCA-Host and MLNX_OFED.
pub const MELLANOX_REPO_BASE: &str = "https://linux.mellanox.com/public/repo";
/// NVIDIA's DCGM exporter, from the CUDA repository (unit `nvidia-dcgm-exporter`).
pub const DCGM_EXPORTER_PACKAGE: &str = "datacenter-gpu-manager-exporter";

/// A group's software, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stack {
    /// Distribution of the nodes.
    pub os: SoftwareOs,
    /// The driver, when declared.
    pub driver: Option<Driver>,
    /// Fabric Manager runs (resolved from `auto` and the GPU model; needs a driver).
    pub fabric_manager: bool,
    /// Fabric Manager needs the NVLink Subnet Manager (fourth-generation NVSwitch).
    pub nvlsm: bool,
    /// The RDMA stack.
    pub network: Option<NetworkStack>,
    /// `nvidia-peermem` is loaded.
    pub peermem: bool,
    /// DCGM.
    pub dcgm: Option<Dcgm>,
    /// enroot and pyxis.
    pub containers: Option<Containers>,
    /// `nvidia-persistenced` runs (needs a driver).
    pub persistenced: bool,
    /// The NVIDIA Container Toolkit is installed on the host.
    pub container_toolkit: bool,
}

/// The driver, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Driver {
    /// Exact version, when pinned.
    pub version: Option<String>,
    /// Branch (the version's first number).
    pub branch: u32,
    /// Open kernel modules.
    pub open: bool,
}

impl Driver {
    /// What `nvidia-smi` must report: the exact version, or `<branch>.*`.
    #[must_use]
    pub fn expected(&self) -> String {
        self.version.clone().unwrap_or_else(|| format!("{}.*", self.branch))
    }

    /// The apt `Pin: version` pattern: Debian revisions follow the upstream version.
    #[must_use]
    pub fn apt_pin(&self) -> String {
        match &self.version {
            Some(version) => format!("{version}-*"),
            None => format!("{}.*", self.branch),
        }
    }

    /// The highest CUDA major release the driver runs (R450 → 11, R525 → 12, R580 → 13):
    /// DCGM 4 ships one package per CUDA major.
    #[must_use]
    pub const fn cuda_major(&self) -> u32 {
        if self.branch >= 580 {
            13
        } else if self.branch >= 525 {
            12
        } else {
            11
        }
    }
}

/// The branch a driver declaration means: `branch`, or the first number of `version`.
#[must_use]
pub fn driver_branch(driver: &GpuDriver) -> Option<u32> {
    match (&driver.version, driver.branch) {
        (Some(version), _) => version.split('.').next().and_then(|major| major.parse().ok()),
        (None, branch) => branch,
    }
}

/// Resolves `software` for a group with `gpu`.
#[must_use]
pub fn resolve(software: &Software, gpu: Option<&GpuModel>) -> Stack {
    let driver = software.gpu_driver.as_ref().and_then(|driver| {
        Some(Driver {
            version: driver.version.clone(),
            branch: driver_branch(driver)?,
            open: driver.kernel_modules == KernelModules::Open,
        })
    });
    let nvswitch = gpu.is_some_and(|gpu| gpu.nvswitch);
    let fabric_manager = driver.is_some()
        && match software.fabric_manager {
            FabricManagerMode::Auto => nvswitch,
            FabricManagerMode::Enabled => true,
            FabricManagerMode::Disabled => false,
        };
    Stack {
        os: software.os,
        nvlsm: fabric_manager && gpu.is_some_and(GpuModel::needs_nvlsm),
        persistenced: software.persistenced && driver.is_some(),
        driver,
        fabric_manager,
        network: software.network.clone(),
        peermem: software.peermem,
        dcgm: software.dcgm,
        containers: software.containers.clone(),
        container_toolkit: software.container_toolkit,
    }
}

impl Stack {
    /// Path segment of NVIDIA's CUDA repository for the distribution.
    #[must_use]
    pub const fn cuda_distro(&self) -> &'static str {
        match self.os {
            SoftwareOs::Debian12 => "debian12",
            SoftwareOs::Ubuntu2204 => "ubuntu2204",
        }
    }

    /// The CUDA repository's URL (a flat repository: suite `/`).
    #[must_use]
    pub fn cuda_repo(&self) -> String {
        format!("{CUDA_REPO_BASE}/{}/x86_64/", self.cuda_distro())
    }

    /// The CUDA repository's signing key (NVIDIA's 2022 key `3bf863cc`).
    #[must_use]
    pub fn cuda_key_url(&self) -> String {
        format!("{}3bf863cc.pub", self.cuda_repo())
    }

    /// Driver packages: compute-only userspace and the kernel modules of the chosen flavour.
    #[must_use]
    pub fn driver_packages(&self) -> Vec<String> {
        let Some(driver) = &self.driver else { return Vec::new() };
        match self.os {
            // Debian's CUDA repository: `nvidia-driver-cuda` is the compute-only userspace.
            SoftwareOs::Debian12 => vec![
                "nvidia-driver-cuda".to_owned(),
                if driver.open { "nvidia-kernel-open-dkms" } else { "nvidia-kernel-dkms" }.to_owned(),
            ],
            // Ubuntu's CUDA repository names the branch in its metapackages.
            SoftwareOs::Ubuntu2204 => vec![if driver.open {
                format!("nvidia-open-{}", driver.branch)
            } else {
                format!("cuda-drivers-{}", driver.branch)
            }],
        }
    }

    /// `nvidia-fabricmanager-<branch>`, when Fabric Manager runs.
    #[must_use]
    pub fn fabric_manager_package(&self) -> Option<String> {
        let driver = self.driver.as_ref().filter(|_| self.fabric_manager)?;
        Some(format!("nvidia-fabricmanager-{}", driver.branch))
    }

    /// DCGM's package: `datacenter-gpu-manager` (3) or `datacenter-gpu-manager-4-cudaN` (4).
    #[must_use]
    pub fn dcgm_package(&self) -> Option<String> {
        let dcgm = self.dcgm?;
        Some(match (dcgm.major, &self.driver) {
            (3, _) => "datacenter-gpu-manager".to_owned(),
            (_, Some(driver)) => format!("datacenter-gpu-manager-4-cuda{}", driver.cuda_major()),
            (_, None) => "datacenter-gpu-manager-4-cuda12".to_owned(),
        })
    }

    /// NVIDIA's DCGM exporter package and its apt version pin (`4.*`: the exporter's
    /// major follows DCGM's, the pairing NVIDIA tests). `None` without DCGM or with DCGM 3:
    /// the exporter's packages depend on DCGM 4 (`datacenter-gpu-manager-4-core`).
    #[must_use]
    pub fn dcgm_exporter(&self) -> Option<(&'static str, String)> {
        let dcgm = self.dcgm.filter(|dcgm| dcgm.major >= 4)?;
        Some((DCGM_EXPORTER_PACKAGE, format!("{}.*", dcgm.major)))
    }

    /// The DOCA or MLNX_OFED repository URL and the packages from it; `inbox` has no
    /// repository and takes rdma-core from the distribution.
    #[must_use]
    pub fn network_repo(&self) -> Option<(String, Vec<String>)> {
        let network = self.network.as_ref()?;
        let distro = match self.os {
            SoftwareOs::Debian12 => "debian12",
            SoftwareOs::Ubuntu2204 => "ubuntu22.04",
        };
        let version = network.version.as_deref().unwrap_or("latest");
        match network.stack {
            NetworkStackKind::DocaOfed => {
                Some((format!("{MELLANOX_REPO_BASE}/doca/{version}/{distro}/x86_64/"), vec!["doca-ofed".to_owned()]))
            }
            NetworkStackKind::MlnxOfed => Some((
                format!("{MELLANOX_REPO_BASE}/mlnx_ofed/{version}/{distro}/x86_64/"),
                vec!["mlnx-ofed-all".to_owned()],
            )),
            NetworkStackKind::Inbox => None,
        }
    }

    /// Distribution packages of the inbox RDMA stack.
    #[must_use]
    pub fn inbox_packages(&self) -> Vec<String> {
        match &self.network {
            Some(network) if network.stack == NetworkStackKind::Inbox => {
                ["rdma-core", "ibverbs-utils", "infiniband-diags"].iter().map(|name| (*name).to_owned()).collect()
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gpu;

    fn software(yaml: &str) -> Software {
        serde_norway::from_str(yaml).expect("software parses")
    }

    #[test]
    fn fabric_manager_follows_the_gpu_model_in_auto() {
        let spec = software("os: debian12\ngpu_driver: { version: 550.127.05 }\n");
        let h100 = resolve(&spec, gpu::find("h100"));
        assert!(h100.fabric_manager);
        assert_eq!(h100.fabric_manager_package().as_deref(), Some("nvidia-fabricmanager-550"));
        assert_eq!(h100.driver_packages(), ["nvidia-driver-cuda", "nvidia-kernel-open-dkms"]);
        assert!(!h100.nvlsm, "third-generation NVSwitch: no NVLink Subnet Manager");
        assert!(resolve(&spec, gpu::find("b200")).nvlsm);
        let l40s = resolve(&spec, gpu::find("l40s"));
        assert!(!l40s.fabric_manager);
        assert_eq!(l40s.fabric_manager_package(), None);
    }

    #[test]
    fn driver_pins_and_dcgm_packages() {
        let spec =
            software("os: ubuntu2204\ngpu_driver: { branch: 570, kernel_modules: proprietary }\ndcgm: { major: 4 }\n");
        let stack = resolve(&spec, gpu::find("b200"));
        let driver = stack.driver.as_ref().expect("driver");
        assert_eq!((driver.apt_pin().as_str(), driver.expected().as_str()), ("570.*", "570.*"));
        assert_eq!(stack.driver_packages(), ["cuda-drivers-570"]);
        assert_eq!(stack.dcgm_package().as_deref(), Some("datacenter-gpu-manager-4-cuda12"));
        assert_eq!(stack.dcgm_exporter(), Some((DCGM_EXPORTER_PACKAGE, "4.*".to_owned())));
        assert_eq!(stack.dcgm.map(|dcgm| dcgm.diag_level), Some(3));
        let exact = software("os: debian12\ngpu_driver: { version: 580.65.06 }\ndcgm: { major: 3 }\n");
        let stack = resolve(&exact, gpu::find("h100"));
        assert_eq!(stack.driver.as_ref().map(Driver::apt_pin).as_deref(), Some("580.65.06-*"));
        assert_eq!(stack.dcgm_package().as_deref(), Some("datacenter-gpu-manager"));
        assert_eq!(stack.dcgm_exporter(), None, "NVIDIA's exporter packages need DCGM 4");
    }

    #[test]
    fn no_driver_means_no_fabric_manager_or_persistenced() {
        let stack = resolve(&software("os: debian12\nfabric_manager: enabled\n"), gpu::find("h100"));
        assert!(!stack.fabric_manager && !stack.persistenced && stack.driver_packages().is_empty());
    }
}
