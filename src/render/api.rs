//! API resources: what each node's BMC and the cloud should report before the node
//! is configured over SSH.
//!
//! Stage: render. Input: the [`Model`] (its blueprint's hardware profiles) and the
//! inventory (`bmcs`, `cloud`). Output: [`ApiResources`]: `Desired::Api` resources
//! (BIOS attributes → one-time PXE boot → power; placement group → instance), the
//! gate of each host (its power or instance resource, which every SSH resource of
//! the host depends on), and the firmware versions each node is expected to report.

use std::collections::BTreeMap;

use crate::blueprint::schema::DesiredPower;
use crate::bmc::resources::{ApiDesired, BootEnabled};
use crate::bmc::{BootTarget, PowerState};
use crate::cloud::RailInterface;
use crate::inventory::Inventory;
use crate::inventory::schema::Cloud;
use crate::model::Model;
use crate::resource::{Desired, Resource, ResourceId, Target, TargetKind};

/// API resources and what the rest of the graph needs to know about them.
#[derive(Debug, Default)]
pub struct ApiResources {
    /// Resources in dependency order.
    pub resources: Vec<Resource>,
    /// Per host, the resource that must be in place before the host is reached over
    /// SSH (its power state, or its instance).
    pub gates: BTreeMap<String, ResourceId>,
    /// Per node with a BMC, the firmware versions its hardware profile expects.
    pub firmware: BTreeMap<String, BTreeMap<String, String>>,
}

fn target(name: &str) -> Target {
    Target { name: name.to_owned(), kind: TargetKind::Node }
}

fn resource(item: ApiDesired, after: impl IntoIterator<Item = ResourceId>) -> Resource {
    let name = item.name();
    Resource::new(target(item.target()), &name, Desired::Api(item)).after(after)
}

/// The API resources of `model` on `inventory` (none without an inventory).
#[must_use]
pub fn resources(model: &Model, inventory: Option<&Inventory>) -> ApiResources {
    let mut out = ApiResources::default();
    let Some(inventory) = inventory else { return out };
    let blueprint = &model.blueprint;
    let cloud = inventory.cloud.as_ref();
    let placement = cloud.and_then(|cloud| cloud.placement_group.clone()).filter(|_| {
        cloud.is_some_and(|cloud| model.groups.iter().any(|group| cloud.node_groups.contains_key(&group.name)))
    });
    let placement_id = placement.as_ref().map(|name| {
        let item = ApiDesired::PlacementGroup { cluster: model.name.clone(), name: name.clone() };
        let id = ResourceId(item.id());
        out.resources.push(resource(item, []));
        id
    });
    for (group_index, group) in model.groups.iter().enumerate() {
        let schema = &blueprint.node_groups[group_index];
        if let Some(cloud) = cloud
            && let Some(settings) = cloud.node_groups.get(&group.name)
        {
            let rails = schema.rail_nics.as_ref().map_or(0, |nics| nics.count as usize);
            let interfaces = interfaces(cloud, rails);
            let image_id = settings.image_id.clone().or_else(|| cloud.image_id.clone()).unwrap_or_default();
            for node in &model.nodes[group.nodes.clone()] {
                let item = ApiDesired::Instance {
                    cluster: model.name.clone(),
                    node: node.name.clone(),
                    instance_type: settings.instance_type.clone(),
                    image_id: image_id.clone(),
                    present: true,
                    key_name: cloud.key_name.clone(),
                    interfaces: interfaces.clone(),
                    placement_group: placement.clone(),
                };
                out.gates.insert(node.name.clone(), ResourceId(item.id()));
                out.resources.push(resource(item, placement_id.clone()));
            }
            continue;
        }
        let Some(profile) = schema.hardware_profile.as_ref().and_then(|name| blueprint.hardware_profiles.get(name))
        else {
            continue;
        };
        for node in &model.nodes[group.nodes.clone()] {
            if !inventory.bmcs.contains_key(&node.name) {
                continue;
            }
            let host = node.name.clone();
            let mut before = Vec::new();
            for (name, value) in &profile.bios {
                let item = ApiDesired::BiosAttribute { host: host.clone(), name: name.clone(), value: value.clone() };
                before.push(ResourceId(item.id()));
                out.resources.push(resource(item, []));
            }
            if profile.pxe_on_provision {
                let item = ApiDesired::BootOverride {
                    host: host.clone(),
                    target: BootTarget::Pxe,
                    enabled: BootEnabled::Once,
                };
                let id = ResourceId(item.id());
                out.resources.push(resource(item, before.clone()));
                before.push(id);
            }
            let state = match profile.power {
                DesiredPower::On => PowerState::On,
                DesiredPower::Off => PowerState::Off,
            };
            let item = ApiDesired::Power { host: host.clone(), state };
            out.gates.insert(host.clone(), ResourceId(item.id()));
            out.resources.push(resource(item, before));
            if !profile.firmware.is_empty() {
                out.firmware.insert(host, profile.firmware.clone());
            }
        }
    }
    out
}

/// The management interface (device 0), then one per rail: EFA rails one per
/// network card (device 1 on card `r`), plain rails as devices 1… on card 0.
fn interfaces(cloud: &Cloud, rails: usize) -> Vec<RailInterface> {
    let management = RailInterface {
        subnet_id: cloud.management_subnet.clone(),
        network_card_index: 0,
        device_index: 0,
        security_group_ids: cloud.security_groups.clone(),
        interface_type: None,
    };
    let rail_interfaces = cloud.rail_subnets.iter().take(rails).enumerate().map(|(rail, subnet)| {
        let rail = u32::try_from(rail).unwrap_or(u32::MAX);
        RailInterface {
            subnet_id: subnet.clone(),
            network_card_index: if cloud.efa { rail } else { 0 },
            device_index: if cloud.efa { 1 } else { rail + 1 },
            security_group_ids: cloud.security_groups.clone(),
            interface_type: cloud.efa.then(|| "efa".to_owned()),
        }
    });
    std::iter::once(management).chain(rail_interfaces).collect()
}
