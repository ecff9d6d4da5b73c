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
use crate::inventory::Inventory;
use crate::inventory::schema::Cloud;
use crate::model::Model;
use crate::resource::api::{ApiDesired, BootEnabled, BootTarget, PowerState, RailInterface};
use crate::resource::{Desired, Resource, ResourceId, Target};

/// API resources and what the rest of the graph needs to know about them.
#[derive(Debug, Default)]
pub struct ApiResources {
    /// Resources in dependency order.
    pub resources: Vec<Resource>,
    /// Per host, the resource that must be in place before the host is reached over
    /// SSH (its power state, or its instance).
    pub gates: BTreeMap<String, ResourceId>,
    /// Per node with a BMC, the firmware versions its hardware profile expects and
    /// toolkit does not flash (no image, or firmware updates off): reported only.
    pub firmware: BTreeMap<String, BTreeMap<String, String>>,
}

fn resource(item: ApiDesired, after: impl IntoIterator<Item = ResourceId>) -> Resource {
    let name = item.name();
    Resource::new(Target::node(item.target()), &name, Desired::Api(Box::new(item))).after(after)
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
        let id = ResourceId(item.id().into());
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
                out.gates.insert(node.name.clone(), ResourceId(item.id().into()));
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
            // Firmware first: a flashed BIOS may come back with its defaults, so the
            // attributes are set after it.
            let mut expected = BTreeMap::new();
            for (component, wanted) in &profile.firmware {
                let (Some(image), Some(sha256), true) = (&wanted.image, &wanted.sha256, profile.firmware_updates)
                else {
                    expected.insert(component.clone(), wanted.version.clone());
                    continue;
                };
                let item = ApiDesired::Firmware {
                    host: host.clone(),
                    component: component.clone(),
                    version: wanted.version.clone(),
                    image: image.clone(),
                    sha256: sha256.to_ascii_lowercase(),
                    allow_downgrade: profile.allow_downgrade,
                };
                before.push(ResourceId(item.id().into()));
                // Flashed firmware runs after the next reset.
                out.resources.push(resource(item, []).disrupts(crate::resource::Disruption::Reboot));
            }
            let flashed = before.clone();
            for (name, value) in &profile.bios {
                let item = ApiDesired::BiosAttribute { host: host.clone(), name: name.clone(), value: value.clone() };
                before.push(ResourceId(item.id().into()));
                // A BIOS setting takes effect on the next reset.
                out.resources.push(resource(item, flashed.clone()).disrupts(crate::resource::Disruption::Reboot));
            }
            if profile.pxe_on_provision {
                let item = ApiDesired::BootOverride {
                    host: host.clone(),
                    target: BootTarget::Pxe,
                    enabled: BootEnabled::Once,
                };
                let id = ResourceId(item.id().into());
                out.resources.push(resource(item, before.clone()));
                before.push(id);
            }
            let state = match profile.power {
                DesiredPower::On => PowerState::On,
                DesiredPower::Off => PowerState::Off,
            };
            let item = ApiDesired::Power { host: host.clone(), state };
            out.gates.insert(host.clone(), ResourceId(item.id().into()));
            out.resources.push(resource(item, before));
            if !expected.is_empty() {
                out.firmware.insert(host, expected);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blueprint::load::load_text;

    const BLUEPRINT: &str = r#"version: 1
cluster:
  name: mixed
node_groups:
  - name: head
    count: 1
    hostname: head
    roles: [controller, database, login]
    hardware_profile: metal
  - name: gpu
    count: 2
    hostname: "gpu{index:02}"
    roles: [compute]
    rail_nics: { count: 2, speed_gbps: 400, link_layer: ethernet }
hardware_profiles:
  metal:
    pxe_on_provision: true
    bios: { ProcTurboMode: Disabled }
    firmware: { BIOS: "2.4.0" }
fabric:
  compute:
    kind: roce
    rails: 2
    link_speed_gbps: 400
    switch: { model: frr-container, radix: 32 }
    oversubscription: "1:1"
    roce: { mode: lossless, pfc_priority: 3, ecn: true }
    addressing: { rail_pool: 10.200.0.0/16, loopback_pool: 10.255.0.0/24 }
  management:
    inband: { subnet: 10.10.0.0/24 }
scheduler:
  kind: slurm
  slurm:
    partitions:
      - { name: gpu, groups: [gpu], default: true }
"#;

    const INVENTORY: &str = "version: 1
hosts:
  head: { address: 10.10.0.10 }
bmcs:
  head: { endpoint: https://10.11.0.10, username: { env: U }, password: { env: P } }
cloud:
  provider: aws
  region: us-east-1
  access_key_id: { env: A }
  secret_access_key: { env: S }
  image_id: ami-1
  placement_group: pg
  management_subnet: subnet-m
  rail_subnets: [subnet-0, subnet-1]
  security_groups: [sg-1]
  efa: true
  node_groups:
    gpu: { instance_type: p5.48xlarge }
";

    #[test]
    fn bare_metal_and_cloud_nodes_get_their_api_resources_and_gates() {
        let loaded = load_text(std::path::Path::new("bp.yaml"), BLUEPRINT.to_owned()).expect("loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        let inventory: Inventory = serde_norway::from_str(INVENTORY).expect("inventory");
        let api = resources(&model, Some(&inventory));
        let ids: Vec<(&str, Vec<&str>)> = api
            .resources
            .iter()
            .map(|r| (r.id.as_str(), r.depends_on.iter().map(ResourceId::as_str).collect()))
            .collect();
        assert_eq!(
            ids,
            [
                ("cloud:placement-group:pg", vec![]),
                ("head:bios:ProcTurboMode", vec![]),
                ("head:boot:override", vec!["head:bios:ProcTurboMode"]),
                ("head:power:system", vec!["head:bios:ProcTurboMode", "head:boot:override"]),
                ("gpu01:instance:mixed", vec!["cloud:placement-group:pg"]),
                ("gpu02:instance:mixed", vec!["cloud:placement-group:pg"]),
            ]
        );
        assert_eq!(api.gates["head"].as_str(), "head:power:system");
        assert_eq!(api.gates["gpu01"].as_str(), "gpu01:instance:mixed");
        assert_eq!(api.firmware["head"]["BIOS"], "2.4.0");
        let Desired::Api(item) = &*api.resources[4].desired else { panic!("an API object") };
        let ApiDesired::Instance { interfaces, placement_group, .. } = item.as_ref() else { panic!("an instance") };
        assert_eq!(placement_group.as_deref(), Some("pg"));
        let layout: Vec<(&str, u32, u32, Option<&str>)> = interfaces
            .iter()
            .map(|i| (i.subnet_id.as_str(), i.network_card_index, i.device_index, i.interface_type.as_deref()))
            .collect();
        assert_eq!(
            layout,
            [("subnet-m", 0, 0, None), ("subnet-0", 0, 1, Some("efa")), ("subnet-1", 1, 1, Some("efa"))]
        );
    }

    #[test]
    fn firmware_with_an_image_is_flashed_first_only_when_updates_are_on() {
        let with_image = BLUEPRINT.replace(
            r#"    firmware: { BIOS: "2.4.0" }"#,
            "    firmware:\n      BMC: \"7.10\"\n      BIOS: { version: U46 v2.70 (01/11/2023), image: http://fw/u46.bin, sha256: ABC }",
        );
        let loaded = load_text(std::path::Path::new("bp.yaml"), with_image).expect("loads");
        let mut model = crate::model::expand(&loaded.blueprint).expect("expands");
        let inventory: Inventory = serde_norway::from_str(INVENTORY).expect("inventory");
        // Off: both components are reported, nothing is flashed.
        let api = resources(&model, Some(&inventory));
        assert!(api.resources.iter().all(|r| !r.id.as_str().contains(":firmware:")));
        assert_eq!(api.firmware["head"]["BIOS"], "U46 v2.70 (01/11/2023)");
        // On: the component with an image is a resource before the BIOS attributes;
        // the one without stays expected only.
        model.blueprint.enable_firmware_updates();
        let api = resources(&model, Some(&inventory));
        let head: Vec<(&str, Vec<&str>)> = api
            .resources
            .iter()
            .filter(|r| r.target() == "head")
            .map(|r| (r.id.as_str(), r.depends_on.iter().map(ResourceId::as_str).collect()))
            .collect();
        assert_eq!(
            head,
            [
                ("head:firmware:BIOS", vec![]),
                ("head:bios:ProcTurboMode", vec!["head:firmware:BIOS"]),
                ("head:boot:override", vec!["head:firmware:BIOS", "head:bios:ProcTurboMode"]),
                ("head:power:system", vec!["head:firmware:BIOS", "head:bios:ProcTurboMode", "head:boot:override"]),
            ]
        );
        assert_eq!(api.resources[1].disruption, crate::resource::Disruption::Reboot);
        let Desired::Api(item) = &*api.resources[1].desired else { panic!("an API object") };
        assert_eq!(item.value().as_deref(), Some("U46 v2.70 (01/11/2023)"));
        assert!(matches!(item.as_ref(), ApiDesired::Firmware { sha256, .. } if sha256 == "abc"));
        assert_eq!(api.firmware["head"], BTreeMap::from([("BMC".to_owned(), "7.10".to_owned())]));
    }

    #[test]
    fn compiled_ssh_resources_wait_for_their_hosts_gate() {
        let loaded = load_text(std::path::Path::new("bp.yaml"), BLUEPRINT.to_owned()).expect("loads");
        let inventory: Inventory = serde_norway::from_str(INVENTORY).expect("inventory");
        let loaded_inventory = crate::inventory::LoadedInventory {
            inventory,
            source: crate::source::SourceFile::new("inv.yaml", INVENTORY.to_owned()),
        };
        let compiled = crate::compile::compile(
            &loaded,
            Some(&loaded_inventory),
            &crate::render::Renderer::embedded().expect("templates"),
        )
        .expect("compiles");
        let graph = &compiled.graph;
        for (index, resource) in graph.resources.iter().enumerate() {
            if matches!(*resource.desired, Desired::Api(_)) {
                continue;
            }
            let gate = match resource.target() {
                "head" => "head:power:system",
                "gpu01" => "gpu01:instance:mixed",
                "gpu02" => "gpu02:instance:mixed",
                _ => continue,
            };
            assert!(
                graph.dependencies(index).any(|dependency| graph.resources[dependency].id.as_str() == gate),
                "{} waits for {gate}",
                resource.id
            );
        }
        let position = |id: &str| {
            graph.ordered().position(|index| graph.resources[index].id.as_str() == id).expect("in the graph")
        };
        assert!(position("head:power:system") < position("head:file:/etc/hosts"));
    }
}
