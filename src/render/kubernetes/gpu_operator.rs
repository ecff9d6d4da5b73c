//! Values of the NVIDIA GPU Operator chart, from the blueprint's `software` section
//! and `gpu_sharing`.
//!
//! Stage: render. Input: the [`Model`] and its [`KubeModel`]. Output: the values
//! (JSON, written as YAML by [`super::helm`]).
//!
//! One owner per layer: when toolkit installs the host GPU driver over SSH
//! (`software.gpu_driver`), the operator's driver container is off
//! (`driver.enabled: false`); otherwise the operator builds the driver, at the
//! blueprint's version and kernel module flavour when it names one. The container
//! toolkit (runtime hook) and the DCGM exporter are the operator's. Sharing: `shard`
//! is time-slicing and `mps` CUDA MPS, both as a device-plugin config every node
//! uses by default; `mig` is a mig-parted config every node gets by default, with
//! strategy `single` when all instances are alike (each is a `nvidia.com/gpu`) and
//! `mixed` otherwise (`nvidia.com/mig-<profile>` resources).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::blueprint::schema::{GpuSharing, GpuSharingMode, KernelModules};
use crate::model::Model;
use crate::model::kubernetes::{GPU_RESOURCE, KubeModel};

/// Chart repository of the GPU Operator.
pub const REPOSITORY: &str = "https://helm.ngc.nvidia.com/nvidia";
/// Name of the device-plugin and mig-parted configs toolkit creates, and of the
/// entry every node uses by default.
pub const CONFIG_NAME: &str = "toolkit";

/// The chart values.
#[must_use]
pub fn values(model: &Model, kube: &KubeModel) -> Value {
    let software = model.blueprint.software.as_ref();
    let host_driver = software.and_then(|software| software.gpu_driver.as_ref());
    let operator = &kube.settings.gpu_operator;
    let driver = match (host_driver, &operator.driver_version) {
        (Some(_), _) => json!({ "enabled": false }),
        (None, Some(version)) => json!({
            "enabled": true,
            "version": version,
            "kernelModuleType": kernel_module_type(operator.kernel_modules),
        }),
        (None, None) => json!({ "enabled": true, "kernelModuleType": kernel_module_type(operator.kernel_modules) }),
    };
    let mut values = json!({
        "driver": driver,
        // One owner of containerd's NVIDIA runtime: the host's toolkit, or the operator's.
        "toolkit": { "enabled": !software.is_some_and(|software| software.container_toolkit) },
        "dcgmExporter": { "enabled": true },
    });
    if let Some(sharing) = device_plugin_config(&kube.settings.gpu_sharing) {
        values["devicePlugin"] = json!({
            "config": { "create": true, "name": format!("{CONFIG_NAME}-device-plugin"), "default": CONFIG_NAME, "data": { CONFIG_NAME: sharing } },
        });
    }
    if kube.settings.gpu_sharing.mode == GpuSharingMode::Mig {
        let profiles = &kube.settings.gpu_sharing.mig_profiles;
        let single = profiles.windows(2).all(|pair| pair[0] == pair[1]);
        values["mig"] = json!({ "strategy": if single { "single" } else { "mixed" } });
        values["migManager"] = json!({
            "enabled": true,
            "config": {
                "create": true,
                "name": format!("{CONFIG_NAME}-mig-parted"),
                "default": CONFIG_NAME,
                "data": { "config.yaml": mig_parted_config(profiles) },
            },
        });
    }
    values
}

/// `driver.kernelModuleType` (chart v25.3.0 on; `useOpenKernelModules` is a no-op).
#[must_use]
pub fn kernel_module_type(modules: KernelModules) -> &'static str {
    match modules {
        KernelModules::Open => "open",
        KernelModules::Proprietary => "proprietary",
    }
}

/// The device plugin's sharing config (`version: v1`, k8s-device-plugin format),
/// or `None` without time-slicing or MPS.
fn device_plugin_config(sharing: &GpuSharing) -> Option<String> {
    let method = match sharing.mode {
        GpuSharingMode::Shard => "timeSlicing",
        GpuSharingMode::Mps => "mps",
        GpuSharingMode::None | GpuSharingMode::Mig => return None,
    };
    let replicas = sharing.per_gpu.unwrap_or(1);
    let config = json!({
        "version": "v1",
        "flags": { "migStrategy": "none" },
        "sharing": { method: { "resources": [{ "name": GPU_RESOURCE, "replicas": replicas }] } },
    });
    Some(crate::resource::kube::yaml(&config))
}

/// mig-parted's config (`config.yaml`): `all-disabled`, and toolkit's layout with the
/// blueprint's instances on every GPU.
fn mig_parted_config(profiles: &[String]) -> String {
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    for profile in profiles {
        *counts.entry(profile.as_str()).or_default() += 1;
    }
    let config = json!({
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{ "devices": "all", "mig-enabled": false }],
            CONFIG_NAME: [{ "devices": "all", "mig-enabled": true, "mig-devices": counts }],
        },
    });
    crate::resource::kube::yaml(&config)
}
