//! RoCE host QoS: the host half of what the switches get, on every rail NIC — DSCP
//! trust, PFC on the lossless priority only, ECN (DCQCN notification and reaction
//! points) on it, the CNP DSCP, and the default ToS of RDMA-CM and verbs QPs.
//!
//! Stage: render. Input: the model (the fabric's [`RoceQos`](crate::blueprint::schema::RoceQos)
//! through [`host_qos`], the same values the switch render uses) and the inventory.
//! Output: per node a script, a boot unit that runs it, a run-once command for the
//! running system and the enabled unit, appended to `out`.
//!
//! Only nodes whose group installs DOCA-OFED or MLNX_OFED get this: `mlnx_qos`,
//! `cma_roce_tos` and the mlx5 `ecn` sysfs tree ship with those stacks, not with the
//! inbox rdma-core (and the lab's container nodes have no RoCE NIC at all). Nothing
//! here runs on this machine: the resources are golden-tested
//! (`tests/it/render_roce_qos.rs`) and applied on real nodes.
//!
//! A change drains the node: re-setting PFC and trust reconfigures the NIC's
//! priority queues under running RDMA traffic.

use serde::Serialize;

use crate::blueprint::schema::FabricKind;
use crate::inventory::Inventory;
use crate::model::Model;
use crate::render::common::{apply_once, file, unwatched_service};
use crate::render::gpu_stack::is_fake;
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Disruption, Resource, ResourceId, Target};
use crate::topology::ports::is_interface_name;
use crate::topology::qos::{HostQos, host_qos};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("host/roce-qos.sh.j2", include_str!("../../templates/host/roce-qos.sh.j2")),
    ("host/roce-qos.service.j2", include_str!("../../templates/host/roce-qos.service.j2")),
];

/// The script that sets the QoS of every rail NIC.
pub const SCRIPT: &str = "/usr/local/sbin/toolkit-roce-qos";
const UNIT_PATH: &str = "/etc/systemd/system/toolkit-roce-qos.service";
const SERVICE: &str = "toolkit-roce-qos";
const APPLY: &str = "roce-qos";

#[derive(Serialize)]
struct ScriptContext<'a> {
    netdevs: Vec<&'a str>,
    qos: &'a HostQos,
    pfc_argument: String,
    default_map_fits: bool,
    /// `1` or `0`, what the ecn sysfs `enable` files take.
    ecn: u8,
}

#[derive(Serialize)]
struct UnitContext {
    script: &'static str,
}

/// Appends the QoS resources of every node with rail NICs on a RoCE fabric whose
/// group installs an OFED stack.
///
/// # Errors
/// A rail interface name a shell script cannot carry, or a template that fails.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let Some(roce) = model.fabric.roce.filter(|_| model.fabric.kind == FabricKind::Roce) else {
        return Ok(());
    };
    let qos = host_qos(&roce);
    let unit = Content::new(renderer.render("host/roce-qos.service.j2", UnitContext { script: SCRIPT })?);
    for group in &model.groups {
        let Some(stack) = group.software.as_ref() else { continue };
        // The OFED packages from NVIDIA's repository; the inbox stack has none.
        let Some((_, ofed)) = stack.network_repo() else { continue };
        let nodes: Vec<_> = model
            .group_nodes(group)
            .iter()
            .filter(|node| !node.rails.is_empty() && !is_fake(inventory, &node.name))
            .collect();
        let Some(first) = nodes.first() else { continue };
        let netdevs: Vec<&str> = first.rails.iter().map(|rail| rail.netdev.as_str()).collect();
        // Names reach the script between single quotes: only interface-name characters.
        if let Some(bad) = netdevs.iter().find(|name| !is_interface_name(name)) {
            return Err(RenderError::Model {
                what: format!("the RoCE QoS of group `{}`", group.name),
                reason: format!("`{bad}` is not an interface name (see `rail_nics.netdev`)"),
            });
        }
        let script = Content::new(renderer.render(
            "host/roce-qos.sh.j2",
            ScriptContext {
                netdevs,
                qos: &qos,
                pfc_argument: qos.pfc_argument(),
                default_map_fits: qos.default_map_fits(),
                ecn: u8::from(qos.ecn),
            },
        )?);
        for node in nodes {
            let target = Target::node(&node.name);
            node_resources(&target, &ofed, &script, &unit, out);
        }
    }
    Ok(())
}

fn node_resources(target: &Target, ofed: &[String], script: &Content, unit: &Content, out: &mut Vec<Resource>) {
    let tools = ofed.iter().map(|name| ResourceId::new(&target.name, "package", name));
    let script_file = file(target, SCRIPT, script.clone(), 0o755).after(tools);
    let unit_file = file(target, UNIT_PATH, unit.clone(), 0o644);
    // The unit covers boots; this covers the running system, once per script content.
    let apply = apply_once(
        target,
        APPLY,
        script,
        SCRIPT,
        "set the rail NICs' RoCE QoS: DSCP trust, PFC, ECN, CNP DSCP and default ToS",
    )
    .after([script_file.id.clone()])
    .disrupts(Disruption::Drain);
    let service = unwatched_service(target, SERVICE, [unit_file.id.clone(), apply.id.clone()]);
    out.extend([script_file, unit_file, apply, service]);
}
