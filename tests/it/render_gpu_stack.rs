//! Integration tests: render_gpu_stack — the GPU node software of real hardware
//! (NVIDIA repository, driver, Fabric Manager, persistenced, DOCA-OFED, peermem,
//! DCGM, enroot, pyxis) rendered from the example blueprints as golden files. No GPU
//! or InfiniBand here: nothing is installed, the resources are what a deploy applies.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use toolkit::blueprint::schema::Blueprint;
use toolkit::inventory::Inventory;
use toolkit::model;
use toolkit::render::{self, Renderer};
use toolkit::resource::{Desired, Resource, ResourceId};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn blueprint(name: &str) -> Blueprint {
    let path = root().join("blueprints").join(format!("{name}.yaml"));
    toolkit::blueprint::load::load(&path).expect("blueprint loads").blueprint
}

fn inventory(name: &str) -> Inventory {
    let path = root().join("inventories").join(format!("{name}.yaml"));
    toolkit::inventory::load(&path).expect("inventory loads").inventory
}

fn render_all(blueprint: &Blueprint, inventory: Option<&Inventory>) -> Vec<Resource> {
    let model = model::expand(blueprint).expect("expands");
    let renderer = Renderer::embedded().expect("templates parse");
    let resources = render::render(&model, inventory, &render::slurm::Secrets::default(), &renderer).expect("renders");
    // Every dependency exists and there is no cycle.
    toolkit::graph::build(resources.clone()).unwrap_or_else(|problems| panic!("{}", problems.render()));
    resources
}

/// What the software section adds or changes on `node`: every resource of the full
/// render that differs from the render without `software`, in render order, with its
/// dependencies and file contents.
fn stack_of(name: &str, node: &str) -> String {
    let full = blueprint(name);
    let mut bare = full.clone();
    bare.software = None;
    let with = render_all(&full, None);
    let without = render_all(&bare, None);
    let before: BTreeSet<String> = without
        .iter()
        .filter(|r| r.target() == node)
        .map(|r| format!("{}{:?}{:?}", r.id, r.desired, r.depends_on))
        .collect();
    let mut out = String::new();
    // The RoCE host QoS comes with the OFED stack too; it has its own golden file
    // (`render_roce_qos.rs`).
    for resource in with.iter().filter(|r| r.target() == node && !r.id.as_str().contains("roce-qos")) {
        if before.contains(&format!("{}{:?}{:?}", resource.id, resource.desired, resource.depends_on)) {
            continue;
        }
        describe(resource, &mut out);
    }
    out
}

fn describe(resource: &Resource, out: &mut String) {
    let _ = writeln!(out, "{}", resource.id);
    match &*resource.desired {
        Desired::File { content, mode, owner, group, .. } => {
            let _ = writeln!(out, "  file mode {mode:o} {owner}:{group}");
            for line in content.text().lines() {
                let _ = writeln!(out, "  | {line}");
            }
        }
        Desired::Package { name } => {
            let _ = writeln!(out, "  package {name}");
        }
        Desired::Service { name, enabled, running, on_change, .. } => {
            let files: Vec<String> = resource.watches().map(|id| id.to_string()).collect();
            let _ = writeln!(
                out,
                "  service {name} enabled={enabled} running={running} {on_change:?} on change of [{}]",
                files.join(", ")
            );
        }
        Desired::Command { argv, creates, unless, description, .. } => {
            let _ = writeln!(out, "  command ({description})");
            let _ = writeln!(out, "    argv: {argv:?}");
            if let Some(creates) = creates {
                let _ = writeln!(out, "    creates: {creates}");
            }
            if let Some(unless) = unless {
                let _ = writeln!(out, "    unless: {unless:?}");
            }
        }
        Desired::Directory { path, mode, owner } => {
            let _ = writeln!(out, "  directory {path} mode {mode:o} {owner}");
        }
        Desired::Api(api) => {
            let _ = writeln!(out, "  api {api:?}");
        }
    }
    if !resource.depends_on.is_empty() {
        let after: Vec<&str> = resource.depends_on.iter().map(ResourceId::as_str).collect();
        let _ = writeln!(out, "  after: {}", after.join(", "));
    }
}

#[test]
fn h100_infiniband_node_stack() {
    let text = stack_of("h100-superpod-1su", "dgx001");
    for needle in [
        "\"nvidia-open-550\", \"nvidia-persistenced\", \"nvidia-fabricmanager-550\"]",
        "dgx001:service:nvidia-fabricmanager",
        "repos/ubuntu2204/x86_64/",
        "doca/2.9.1/ubuntu22.04/x86_64/",
        "dgx001:package:datacenter-gpu-manager-4-cuda12",
        "ENROOT_CACHE_PATH          /raid/enroot/cache/group-$(id -g)",
        "on change of [dgx001:file:/etc/slurm/slurm.conf",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    insta::assert_snapshot!("h100_dgx001_gpu_stack", text);
}

/// The stack is rendered for a group's first node and copied to the others: every node
/// gets the golden node's resources under its own name, the slurmd restart included.
#[test]
fn every_node_of_a_group_gets_the_first_nodes_stack() {
    for (name, first, last) in [("h100-superpod-1su", "dgx001", "dgx031"), ("h200-roce-64", "gpu001", "gpu064")] {
        let expected = stack_of(name, first).replace(first, last);
        let text = stack_of(name, last);
        assert!(text.contains(&format!("{last}:service:nvidia-dcgm")), "{text}");
        assert_eq!(text, expected, "{name}: {last} differs from {first}");
    }
}

#[test]
fn h200_roce_node_stack() {
    let text = stack_of("h200-roce-64", "gpu001");
    assert!(text.contains("\"nvidia-driver-cuda\", \"nvidia-kernel-open-dkms\""), "{text}");
    assert!(text.contains("Pin: version 570.124.06-*"), "{text}");
    insta::assert_snapshot!("h200_gpu001_gpu_stack", text);
}

#[test]
fn the_controller_gets_pyxis_for_srun_but_no_gpu_software() {
    let text = stack_of("h200-roce-64", "ctl01");
    assert!(text.contains("ctl01:file:/etc/slurm/plugstack.conf"), "{text}");
    assert!(text.contains("required /usr/local/lib/slurm/spank_pyxis.so"), "{text}");
    for absent in ["nvidia-driver", "fabricmanager", "enroot", "dcgm", "doca"] {
        assert!(!text.contains(absent), "`{absent}` on the controller:\n{text}");
    }
    // slurmctld does not load SPANK plugins (spank(8)): it neither watches nor waits.
    assert!(!text.contains("service:slurmctld"), "{text}");
}

#[test]
fn nvidia_fabric_manager_only_on_nvswitch_models() {
    let mut pcie = blueprint("h200-roce-64");
    pcie.node_groups[2].gpu.as_mut().expect("gpu").model = "l40s".to_owned();
    let resources = render_all(&pcie, None);
    let Desired::Command { argv, .. } = &*find(&resources, "gpu001:command:nvidia-driver").desired else {
        panic!("the driver is installed by a command")
    };
    assert_eq!(argv[5..], ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]);
    assert!(!resources.iter().any(|r| r.id.as_str().contains("fabricmanager")));
}

#[test]
fn fourth_generation_nvswitch_adds_the_nvlink_subnet_manager() {
    let mut blackwell = blueprint("h200-roce-64");
    blackwell.node_groups[2].gpu.as_mut().expect("gpu").model = "b200".to_owned();
    let resources = render_all(&blackwell, None);
    let fabric_manager = find(&resources, "gpu001:service:nvidia-fabricmanager");
    assert!(fabric_manager.depends_on.iter().any(|id| id.as_str() == "gpu001:package:nvlsm"), "{fabric_manager:?}");
    let hopper = render_all(&blueprint("h200-roce-64"), None);
    assert!(!hopper.iter().any(|r| r.id.as_str().ends_with(":package:nvlsm")));
}

fn find<'a>(resources: &'a [Resource], id: &str) -> &'a Resource {
    resources.iter().find(|r| r.id.as_str() == id).unwrap_or_else(|| panic!("no resource `{id}`"))
}

/// Ids of GPU-stack resources: any of these on a node means the stack was rendered there.
fn gpu_stack_ids(resources: &[Resource]) -> Vec<&str> {
    resources
        .iter()
        .map(|r| r.id.as_str())
        .filter(|id| {
            ["nvidia", "enroot", "pyxis", "plugstack", "dcgm", "doca", "peermem", "linux-headers"]
                .iter()
                .any(|word| id.contains(word))
        })
        .collect()
}

#[test]
fn the_lab_renders_none_of_it() {
    let lab = blueprint("lab");
    assert!(lab.software.is_none(), "the lab declares no software section");
    let inventory = inventory("lab");
    let plain = render_all(&lab, Some(&inventory));
    assert_eq!(gpu_stack_ids(&plain), Vec::<&str>::new());

    // Even with a software section, fake_gpu_devices nodes get none of it: their GPUs
    // are device files for Slurm, not hardware a driver could drive.
    let mut declared = lab.clone();
    declared.software = blueprint("h200-roce-64").software;
    let fake = render_all(&declared, Some(&inventory));
    assert_eq!(gpu_stack_ids(&fake), Vec::<&str>::new());
    // The same blueprint without the inventory (real hosts) does render it.
    let real = render_all(&declared, None);
    assert!(gpu_stack_ids(&real).contains(&"node01:command:nvidia-driver"));
}

#[test]
fn a_gpu_controller_gets_the_stack_and_pyxis_once() {
    // The controller group has GPUs too: it gets the GPU stack and, as an srun host,
    // pyxis, with every resource once (the graph refuses duplicates).
    let mut gpu_head = blueprint("h200-roce-64");
    gpu_head.node_groups[0].gpu = gpu_head.node_groups[2].gpu.clone();
    let resources = render_all(&gpu_head, None);
    let on_ctl: Vec<&str> = resources.iter().filter(|r| r.target() == "ctl01").map(|r| r.id.as_str()).collect();
    assert!(
        on_ctl.contains(&"ctl01:command:nvidia-driver") && on_ctl.contains(&"ctl01:file:/etc/slurm/plugstack.conf")
    );
    assert_eq!(on_ctl.iter().filter(|id| **id == "ctl01:package:curl").count(), 1);
}

#[test]
fn the_nodes_of_a_group_share_one_copy_of_each_service_and_watch_their_own_files() {
    let resources = render_all(&blueprint("h100-superpod-1su"), None);
    let on_gpu_nodes = |name: &str| -> Vec<&Resource> {
        let suffix = format!(":service:{name}");
        resources.iter().filter(|r| r.target().starts_with("dgx") && r.id.as_str().ends_with(&suffix)).collect()
    };
    for name in ["slurmd", "munge", "nvidia-dcgm", "nvidia-fabricmanager", "lustre.mount"] {
        let services = on_gpu_nodes(name);
        assert_eq!(services.len(), 31, "{name}: one per GPU node");
        assert!(services.iter().all(|s| std::sync::Arc::ptr_eq(&s.desired, &services[0].desired)), "{name}: one copy");
    }
    // The slurmd every node shares (plugstack.conf added after the stages) restarts
    // on a change of the node's own files only.
    for slurmd in on_gpu_nodes("slurmd") {
        let watches: Vec<ResourceId> = slurmd.watches().collect();
        let own = format!("{}:file:{}", slurmd.target(), toolkit::render::gpu_stack::PLUGSTACK);
        assert!(watches.iter().any(|id| id.as_str() == own), "{watches:?}");
        assert!(watches.iter().all(|id| id.as_str().starts_with(&format!("{}:", slurmd.target()))), "{watches:?}");
    }
}
