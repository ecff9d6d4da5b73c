//! Checks of the software stack (top-level `software` and each group's own): driver
//! version and branch against the GPU model, Fabric Manager on NVSwitch systems,
//! DCGM, nvidia-peermem's RDMA stack, and release strings that reach URLs and paths.

use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::{FabricManagerMode, NetworkStackKind, NodeGroup, Software};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::model::gpu::{self, GpuModel};
use crate::model::software::driver_branch;

pub(super) fn check(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    dcgm_level_twice(loaded, out);
    if let Some(software) = &blueprint.software {
        values(loaded, software, "software", out);
    }
    for (index, group) in blueprint.node_groups.iter().enumerate() {
        let own = group.software.as_ref().map(|software| (software, format!("node_groups[{index}].software")));
        if let Some((software, at)) = &own {
            values(loaded, software, at, out);
            if gpu_model(group).is_none() {
                out.push(
                    Diagnostic::warning(
                        "software-without-gpus",
                        format!("node group `{}` has no GPUs: its `software` section is not rendered", group.name),
                    )
                    .at(&loaded.source, at.clone())
                    .help("remove it, or declare the group's `gpu`"),
                );
            }
        }
        let Some(model) = gpu_model(group) else { continue };
        let effective = own.or_else(|| blueprint.software.as_ref().map(|software| (software, "software".to_owned())));
        if let Some((software, at)) = effective {
            against_gpu(loaded, group, model, software, &at, out);
        }
    }
}

/// The group's GPU model, when it has GPUs of a known model.
fn gpu_model(group: &NodeGroup) -> Option<&'static GpuModel> {
    group.gpu.as_ref().filter(|gpu| gpu.count > 0).and_then(|gpu| gpu::find(&gpu.model))
}

/// `[0-9][0-9A-Za-z.-]*`: a release as NVIDIA and GitHub name them, safe in URLs and paths.
fn is_release(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_digit())
        && text.len() <= 32
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// Checks that need only the section itself.
fn values(loaded: &LoadedBlueprint, software: &Software, at: &str, out: &mut Diagnostics) {
    let source = &loaded.source;
    if let Some(driver) = &software.gpu_driver {
        let here = format!("{at}.gpu_driver");
        match (&driver.version, driver.branch) {
            (Some(_), Some(_)) => out.push(
                Diagnostic::error("driver-version-and-branch", "`gpu_driver` gives both `version` and `branch`")
                    .at(source, format!("{here}.branch"))
                    .help("keep `version` to pin one release, or `branch` to follow the newest of a branch"),
            ),
            (None, None) => out.push(
                Diagnostic::error("driver-version-and-branch", "`gpu_driver` gives neither `version` nor `branch`")
                    .at(source, here.clone())
                    .help("add `version: 550.127.05` (one release) or `branch: 550`"),
            ),
            (Some(version), None) => {
                let parts: Vec<&str> = version.split('.').collect();
                let numeric = (2..=3).contains(&parts.len())
                    && parts
                        .iter()
                        .all(|part| !part.is_empty() && part.len() <= 4 && part.bytes().all(|b| b.is_ascii_digit()));
                if !numeric || driver_branch(driver).is_none() {
                    out.push(
                        Diagnostic::error(
                            "invalid-driver-version",
                            format!("driver version `{version}` is not `branch.minor[.patch]`"),
                        )
                        .at(source, format!("{here}.version"))
                        .help("write it as `nvidia-smi` prints it, e.g. `550.127.05`"),
                    );
                }
            }
            (None, Some(_)) => {}
        }
    }
    if let Some(dcgm) = software.dcgm {
        if !(1..=4).contains(&dcgm.diag_level) {
            out.push(
                Diagnostic::error(
                    "invalid-dcgm-level",
                    format!("DCGM diagnostic level {} does not exist", dcgm.diag_level),
                )
                .at(source, format!("{at}.dcgm.diag_level"))
                .help("`dcgmi diag -r` takes 1 (quick), 2 (medium), 3 (long) or 4 (extended)"),
            );
        }
        if !(3..=4).contains(&dcgm.major) {
            out.push(
                Diagnostic::error("invalid-dcgm-major", format!("DCGM {} is not packaged for this stack", dcgm.major))
                    .at(source, format!("{at}.dcgm.major"))
                    .help("use `4` (datacenter-gpu-manager-4-cudaN) or `3` (datacenter-gpu-manager)"),
            );
        }
        let monitored = loaded.blueprint.monitoring.as_ref().is_some_and(|monitoring| monitoring.enabled);
        if dcgm.major == 3 && monitored {
            out.push(
                Diagnostic::warning(
                    "dcgm-exporter-needs-dcgm-4",
                    "with DCGM 3 no DCGM exporter is deployed: the GPUs' metrics are not scraped and the GPU alerts \
                     (XID, ECC, retired pages, row remapping, temperature) cannot fire",
                )
                .at(source, format!("{at}.dcgm.major"))
                .help("use `major: 4`: NVIDIA's exporter package (datacenter-gpu-manager-exporter) depends on DCGM 4"),
            );
        }
    }
    if software.peermem {
        let stack = software.network.as_ref().map(|network| network.stack);
        if matches!(stack, None | Some(NetworkStackKind::Inbox)) {
            out.push(
                Diagnostic::error(
                    "peermem-without-rdma-stack",
                    "`peermem: true` needs DOCA-OFED or MLNX_OFED: nvidia-peermem registers with their \
                     peer-memory API, which the inbox rdma-core kernel lacks",
                )
                .at(source, format!("{at}.peermem"))
                .help(
                    "set `network: { stack: doca-ofed, version: ... }`, or `peermem: false` (dma-buf needs no module)",
                ),
            );
        }
    }
    if let Some(network) = &software.network {
        match (&network.stack, &network.version) {
            (NetworkStackKind::Inbox, Some(_)) => out.push(
                Diagnostic::warning(
                    "inbox-network-version",
                    "the inbox RDMA stack follows the distribution: `version` is ignored",
                )
                .at(source, format!("{at}.network.version"))
                .help("remove `version`, or choose `doca-ofed` to pin a release"),
            ),
            (NetworkStackKind::DocaOfed | NetworkStackKind::MlnxOfed, None) => out.push(
                Diagnostic::error(
                    "missing-network-version",
                    "the RDMA stack has no `version`: nodes would drift apart",
                )
                .at(source, format!("{at}.network"))
                .help("pin a release, e.g. `version: 2.9.1` (DOCA) or `24.10-1.1.4.0` (MLNX_OFED)"),
            ),
            _ => {}
        }
        if let Some(version) = network.version.as_deref().filter(|version| !is_release(version)) {
            out.push(release_error(source, &format!("{at}.network.version"), version));
        }
    }
    if let Some(containers) = &software.containers {
        for (key, version) in [("enroot", &containers.enroot), ("pyxis", &containers.pyxis)] {
            if !is_release(version) {
                out.push(release_error(source, &format!("{at}.containers.{key}"), version));
            }
        }
    }
}

fn release_error(source: &crate::source::SourceFile, at: &str, version: &str) -> Diagnostic {
    Diagnostic::error("invalid-software-version", format!("`{version}` is not a release number"))
        .at(source, at.to_owned())
        .help("give the release as published, digits first, e.g. `3.5.0`")
}

/// Checks of the section against the GPUs of one group.
fn against_gpu(
    loaded: &LoadedBlueprint,
    group: &NodeGroup,
    model: &GpuModel,
    software: &Software,
    at: &str,
    out: &mut Diagnostics,
) {
    let source = &loaded.source;
    let branch = software.gpu_driver.as_ref().and_then(driver_branch);
    if let (Some(branch), Some((minimum, reference))) = (branch, model.min_driver)
        && branch < minimum
    {
        let key = if software.gpu_driver.as_ref().is_some_and(|driver| driver.version.is_some()) {
            "version"
        } else {
            "branch"
        };
        out.push(
            Diagnostic::error(
                "driver-too-old",
                format!(
                    "driver branch {branch} does not support {} (node group `{}`): it needs R{minimum} or later",
                    model.name, group.name
                ),
            )
            .at(source, format!("{at}.gpu_driver.{key}"))
            .help(format!("choose a driver of branch {minimum} or later ({reference})")),
        );
    }
    match software.fabric_manager {
        FabricManagerMode::Disabled if model.nvswitch => out.push(
            Diagnostic::error(
                "fabric-manager-disabled",
                format!(
                    "{} GPUs of node group `{}` meet at NVSwitches: without Fabric Manager they do not initialize",
                    model.name, group.name
                ),
            )
            .at(source, format!("{at}.fabric_manager"))
            .help("use `fabric_manager: auto` (on for NVSwitch systems)"),
        ),
        FabricManagerMode::Enabled if !model.nvswitch => out.push(
            Diagnostic::warning(
                "fabric-manager-without-nvswitch",
                format!(
                    "{} GPUs of node group `{}` have no NVSwitch: Fabric Manager has nothing to manage",
                    model.name, group.name
                ),
            )
            .at(source, format!("{at}.fabric_manager"))
            .help("use `fabric_manager: auto`"),
        ),
        _ => {}
    }
    let fabric_manager_runs = match software.fabric_manager {
        FabricManagerMode::Auto => model.nvswitch,
        FabricManagerMode::Enabled => true,
        FabricManagerMode::Disabled => false,
    };
    if fabric_manager_runs && software.gpu_driver.is_none() {
        out.push(
            Diagnostic::error(
                "fabric-manager-without-driver",
                format!(
                    "node group `{}` runs Fabric Manager, whose version must equal the driver's, and no `gpu_driver` is declared",
                    group.name
                ),
            )
            .at(source, at.to_owned())
            .help("declare `gpu_driver: { version: ... }`: the driver and `nvidia-fabricmanager-<branch>` are pinned together"),
        );
    }
}

/// `dcgm-diag` runs at the group's `software.dcgm.diag_level`: an acceptance override of
/// its `level` then applies only to groups without one, which is easy to miss.
fn dcgm_level_twice(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    let declared = blueprint.software.as_ref().and_then(|software| software.dcgm).is_some()
        || blueprint
            .node_groups
            .iter()
            .any(|group| group.software.as_ref().and_then(|software| software.dcgm).is_some());
    if !declared {
        return;
    }
    for (index, validator) in blueprint.acceptance.validators.iter().enumerate() {
        if validator.id == "dcgm-diag" && validator.thresholds.contains_key("level") {
            out.push(
                Diagnostic::warning(
                    "dcgm-level-twice",
                    "`software.dcgm.diag_level` sets the DCGM level: this override applies only to groups without one",
                )
                .at(&loaded.source, format!("acceptance.validators[{index}].thresholds.level"))
                .help("set the level once, in `software.dcgm.diag_level`"),
            );
        }
    }
}
