//! Checks of an inventory's `cloud` section against the blueprint, and of BMCs for
//! node groups with a hardware profile: a region, one subnet per rail, groups that
//! exist, an image for every group.
//!
//! Diagnostics point into the inventory's own file.

use super::unknown_name_help;
use crate::blueprint::LoadedBlueprint;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::inventory::LoadedInventory;
use crate::inventory::schema::Cloud;
use crate::source::join_key;

pub(super) fn check(
    loaded: &LoadedBlueprint,
    inventory: &LoadedInventory,
    hosts: Option<&[(usize, String)]>,
    out: &mut Diagnostics,
) {
    if let Some(cloud) = &inventory.inventory.cloud {
        region(cloud, inventory, out);
        rail_subnets(loaded, cloud, inventory, out);
        groups(loaded, cloud, inventory, out);
    }
    if let Some(hosts) = hosts {
        bmcs(loaded, inventory, hosts, out);
    }
}

fn region(cloud: &Cloud, inventory: &LoadedInventory, out: &mut Diagnostics) {
    match cloud.region.as_deref() {
        None => out.push(
            Diagnostic::error("cloud-missing-region", "the `cloud` section names no `region`")
                .at(&inventory.source, "cloud")
                .help("add `region: us-east-1` (the region whose subnets and images are named here)"),
        ),
        Some(region) if !is_region(region) => out.push(
            Diagnostic::error("cloud-invalid-region", format!("`{region}` is not a region name"))
                .at(&inventory.source, "cloud.region")
                .help("write the region as AWS names it, e.g. `us-east-1`"),
        ),
        Some(_) => {}
    }
}

/// `us-east-1`, `ap-southeast-2`, `us-gov-west-1`: lowercase words and a number.
fn is_region(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.len() >= 3
        && parts.last().is_some_and(|last| !last.is_empty() && last.chars().all(|c| c.is_ascii_digit()))
        && parts[..parts.len() - 1].iter().all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase()))
}

fn rail_subnets(loaded: &LoadedBlueprint, cloud: &Cloud, inventory: &LoadedInventory, out: &mut Diagnostics) {
    let rails = loaded.blueprint.fabric.compute.rails as usize;
    let with_rails =
        loaded.blueprint.node_groups.iter().any(|g| {
            cloud.node_groups.contains_key(&g.name) && g.rail_nics.as_ref().is_some_and(|nics| nics.count > 0)
        });
    let count = cloud.rail_subnets.len();
    if with_rails && count != rails {
        let key =
            if inventory.source.position("cloud.rail_subnets").is_some() { "cloud.rail_subnets" } else { "cloud" };
        out.push(
            Diagnostic::error(
                "cloud-rail-subnets",
                format!("the fabric has {rails} rail(s) but `cloud.rail_subnets` lists {count} subnet(s)"),
            )
            .at(&inventory.source, key)
            .help(format!(
                "list one subnet per rail, rail 0 first ({rails} in all): each node gets one interface per rail"
            )),
        );
    }
}

fn groups(loaded: &LoadedBlueprint, cloud: &Cloud, inventory: &LoadedInventory, out: &mut Diagnostics) {
    let names = || loaded.blueprint.node_groups.iter().map(|g| g.name.as_str());
    for (name, group) in &cloud.node_groups {
        let key = join_key("cloud.node_groups", name);
        if !names().any(|known| known == name) {
            out.push(
                Diagnostic::error("cloud-unknown-node-group", format!("node group `{name}` is not in the blueprint"))
                    .at(&inventory.source, key.clone())
                    .help(unknown_name_help(name, names(), "node group")),
            );
        }
        if group.image_id.is_none() && cloud.image_id.is_none() {
            out.push(
                Diagnostic::error("cloud-missing-image", format!("node group `{name}` has no image"))
                    .at(&inventory.source, key.clone())
                    .help("set `image_id` on the group or on the `cloud` section"),
            );
        }
        if !group.instance_type.contains('.') {
            out.push(
                Diagnostic::error(
                    "cloud-invalid-instance-type",
                    format!("`{}` is not an instance type", group.instance_type),
                )
                .at(&inventory.source, join_key(&key, "instance_type"))
                .help("write a type as the provider names it, e.g. `p5.48xlarge`"),
            );
        }
    }
}

/// Nodes of a group with a hardware profile need a BMC to be set through.
fn bmcs(loaded: &LoadedBlueprint, inventory: &LoadedInventory, hosts: &[(usize, String)], out: &mut Diagnostics) {
    let cloud_groups = inventory.inventory.cloud.as_ref().map(|c| &c.node_groups);
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        if group.hardware_profile.is_none() || cloud_groups.is_some_and(|groups| groups.contains_key(&group.name)) {
            continue;
        }
        let without: Vec<&str> = hosts
            .iter()
            .filter(|(group_index, name)| *group_index == index && !inventory.inventory.bmcs.contains_key(name))
            .map(|(_, name)| name.as_str())
            .collect();
        if !without.is_empty() {
            out.push(
                Diagnostic::warning(
                    "hardware-profile-without-bmc",
                    format!(
                        "node(s) `{}` of group `{}` have a hardware profile but no entry in `bmcs`; the profile is not applied to them",
                        crate::model::hostlist::compress(without.iter().copied()),
                        group.name
                    ),
                )
                .at(&inventory.source, if inventory.source.position("bmcs").is_some() { "bmcs" } else { "version" })
                .help("add each node's BMC: `node01: { endpoint: https://10.11.0.11, username: {env: BMC_USER}, password: {env: BMC_PASSWORD} }`"),
            );
        }
    }
}
