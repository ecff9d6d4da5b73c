//! Integration tests: render_roce_qos — the host half of the fabric's RoCE QoS on the
//! rail NICs of the h200-roce-64 example, as a golden file. No RoCE NIC here: nothing is
//! applied, the resources are what a deploy runs on real nodes.

use std::fmt::Write as _;
use std::path::PathBuf;

use toolkit::model;
use toolkit::render::{self, Renderer};
use toolkit::resource::{Desired, Disruption, Resource, ResourceId};

fn render_example(edit: impl FnOnce(&mut toolkit::blueprint::schema::Blueprint)) -> Vec<Resource> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("blueprints/h200-roce-64.yaml");
    let mut blueprint = toolkit::blueprint::load::load(&path).expect("blueprint loads").blueprint;
    edit(&mut blueprint);
    let model = model::expand(&blueprint).expect("expands");
    let renderer = Renderer::embedded().expect("templates parse");
    let resources = render::render(&model, None, &render::slurm::Secrets::default(), &renderer).expect("renders");
    toolkit::graph::build(resources.clone()).unwrap_or_else(|problems| panic!("{}", problems.render()));
    resources
}

fn qos_of(resources: &[Resource], node: &str) -> String {
    let mut out = String::new();
    for resource in resources.iter().filter(|r| r.target() == node && r.id.as_str().contains("roce-qos")) {
        let _ = writeln!(out, "{} ({:?})", resource.id, resource.disruption);
        match &*resource.desired {
            Desired::File { content, mode, .. } => {
                let _ = writeln!(out, "  file mode {mode:o}");
                for line in content.text().lines() {
                    let _ = writeln!(out, "  | {line}");
                }
            }
            Desired::Command { argv, creates, .. } => {
                let _ = writeln!(out, "  argv: {argv:?}\n  creates: {creates:?}");
            }
            other => {
                let _ = writeln!(out, "  {other:?}");
            }
        }
        let after: Vec<&str> = resource.depends_on.iter().map(ResourceId::as_str).collect();
        let _ = writeln!(out, "  after: {}", after.join(", "));
    }
    out
}

#[test]
fn h200_gpu001_roce_qos() {
    let resources = render_example(|_| {});
    let text = qos_of(&resources, "gpu001");
    for needle in [
        "mlnx_qos -i \"$netdev\" --trust dscp",
        "mlnx_qos -i \"$netdev\" --pfc 0,0,0,1,0,0,0,0",
        "/ecn/roce_np/enable/3",
        "/ecn/roce_rp/enable/3",
        "echo 48 > /sys/class/net/\"$netdev\"/ecn/roce_np/cnp_dscp",
        "cma_roce_tos -d \"$device\" -t 106",
        "echo 106 > /sys/class/infiniband/\"$device\"/tc/1/traffic_class",
        "configure 'rail7'",
        "gpu001:package:doca-ofed",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    assert!(!text.contains("--dscp2prio"), "DSCP 26 already maps to priority 3:\n{text}");
    let apply = resources.iter().find(|r| r.id.as_str() == "gpu001:command:roce-qos").expect("apply command");
    assert_eq!(apply.disruption, Disruption::Drain);
    insta::assert_snapshot!("h200_gpu001_roce_qos", text);
    // Nodes without rail NICs (controller, storage) get none of it.
    assert!(qos_of(&resources, "ctl01").is_empty());
}

#[test]
fn a_moved_priority_maps_the_dscp_and_lossy_has_no_pfc() {
    let moved = render_example(|blueprint| {
        let qos = blueprint.fabric.compute.roce.as_mut().expect("roce");
        qos.pfc_priority = Some(2);
    });
    let text = qos_of(&moved, "gpu002");
    assert!(text.contains("--pfc 0,0,1,0,0,0,0,0"), "{text}");
    assert!(text.contains("--dscp2prio set,26,2"), "{text}");
    assert!(text.contains("roce_np/enable/2"), "{text}");
    let lossy = render_example(|blueprint| {
        let qos = blueprint.fabric.compute.roce.as_mut().expect("roce");
        qos.mode = toolkit::blueprint::schema::RoceMode::Lossy;
    });
    assert!(qos_of(&lossy, "gpu002").contains("--pfc 0,0,0,0,0,0,0,0"));
}

#[test]
fn the_inbox_stack_gets_no_mlnx_tools() {
    let resources = render_example(|blueprint| {
        let software = blueprint.software.as_mut().expect("software");
        software.network.as_mut().expect("network").stack = toolkit::blueprint::schema::NetworkStackKind::Inbox;
    });
    assert!(qos_of(&resources, "gpu001").is_empty());
}
