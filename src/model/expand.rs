//! Expands a checked blueprint into the [`Model`]: names every node, plans the
//! fabric, assigns addresses and resolves storage.
//!
//! Stage: expand. Input: [`Blueprint`]. Output: [`Model`]. `check` has already
//! reported problems with locations; the errors here are a safety net for callers
//! that skip it, so expansion never panics on any input.

use ipnet::Ipv4Net;
use thiserror::Error;

use super::{Filesystem, Group, Model, Node, RailPort, gpu, hostlist, nvlink, software, spares};
use crate::blueprint::schema::{Blueprint, Cpu, FabricKind, FilesystemKind};
use crate::topology::{self, FabricInput, SizingInput, addressing};

/// Why a blueprint could not be expanded (run `toolkit lint` for located details).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExpandError {
    /// A GPU model is not in the catalog.
    #[error("unknown GPU model `{0}`")]
    UnknownGpu(String),
    /// A value that must be a CIDR is not.
    #[error("`{value}` in `{field}` is not an IPv4 CIDR block")]
    BadCidr {
        /// Key path.
        field: &'static str,
        /// The value.
        value: String,
    },
    /// Oversubscription is not `down:up`.
    #[error("oversubscription `{0}` is not of the form `down:up`")]
    BadRatio(String),
    /// The fabric cannot be planned.
    #[error(transparent)]
    Fabric(#[from] topology::PlanError),
    /// Management subnet too small.
    #[error("management subnet `{subnet}` has room for {fits} nodes, {needed} are declared")]
    ManagementTooSmall {
        /// Subnet.
        subnet: Ipv4Net,
        /// Nodes.
        needed: usize,
        /// Room.
        fits: u64,
    },
    /// A reference to a group that does not exist.
    #[error("node group `{0}` does not exist")]
    UnknownGroup(String),
}

/// Addresses `.1`–`.9` of the management subnet stay free for gateways and services.
pub const MANAGEMENT_RESERVED: u32 = 9;

/// Expands `blueprint`.
///
/// # Errors
/// [`ExpandError`] for values `check` would have rejected.
pub fn expand(blueprint: &Blueprint) -> Result<Model, ExpandError> {
    let compute = &blueprint.fabric.compute;
    let mgmt: Ipv4Net = parse_cidr("fabric.management.inband.subnet", &blueprint.fabric.management.inband.subnet)?;
    let total_nodes: usize = blueprint.node_groups.iter().map(|g| g.count as usize).sum();
    let mgmt_room = addressing::usable_hosts(mgmt).saturating_sub(u64::from(MANAGEMENT_RESERVED));
    if total_nodes as u64 > mgmt_room {
        return Err(ExpandError::ManagementTooSmall { subnet: mgmt, needed: total_nodes, fits: mgmt_room });
    }
    let fabric_nodes: u32 = blueprint
        .node_groups
        .iter()
        .filter(|g| g.rail_nics.as_ref().is_some_and(|nics| nics.count > 0))
        .map(|g| g.count)
        .sum();
    let host_mtu = compute.host_mtu.unwrap_or(match compute.kind {
        FabricKind::Roce => 9000,
        FabricKind::Infiniband => 4096,
    });
    let fabric = topology::plan(&FabricInput {
        sizing: SizingInput {
            nodes: fabric_nodes,
            rails: compute.rails,
            radix: compute.switch.radix,
            oversubscription: topology::parse_ratio(&compute.oversubscription)
                .ok_or_else(|| ExpandError::BadRatio(compute.oversubscription.clone()))?,
            uplinks_override: compute.uplinks_per_leaf,
        },
        kind: compute.kind,
        link_speed_gbps: compute.link_speed_gbps,
        switch_model: &compute.switch.model,
        switch_mtu: compute.mtu.unwrap_or(match compute.kind {
            FabricKind::Roce => 9216,
            FabricKind::Infiniband => 4096,
        }),
        host_mtu,
        roce: compute.roce,
        infiniband: compute.infiniband.clone(),
        rail_pool: parse_cidr("fabric.compute.addressing.rail_pool", &compute.addressing.rail_pool)?,
        loopback_pool: parse_cidr("fabric.compute.addressing.loopback_pool", &compute.addressing.loopback_pool)?,
        spine_asn: compute.addressing.spine_asn,
        leaf_asn_base: compute.addressing.leaf_asn_base,
        core_asn: compute.addressing.core_asn,
    })?;

    let mut groups = Vec::with_capacity(blueprint.node_groups.len());
    let mut nodes = Vec::with_capacity(total_nodes);
    let mut fabric_slot: u32 = 0;
    let per_su = fabric.sizing.nodes_per_su.max(1);
    for (group_index, spec) in blueprint.node_groups.iter().enumerate() {
        let gpu_model = match &spec.gpu {
            Some(g) if g.count > 0 => {
                Some(gpu::find(&g.model).ok_or_else(|| ExpandError::UnknownGpu(g.model.clone()))?)
            }
            _ => None,
        };
        let first = nodes.len();
        let rail_count = spec.rail_nics.as_ref().map_or(0, |nics| nics.count.min(compute.rails));
        for offset in 0..spec.count {
            let name = hostname(&spec.hostname, spec.start_index.saturating_add(offset));
            let mgmt_address = addressing::nth_host(mgmt, MANAGEMENT_RESERVED + nodes.len() as u32);
            let mut rails = Vec::with_capacity(rail_count as usize);
            let su = fabric_slot / per_su;
            if let Some(nics) = &spec.rail_nics {
                let slot_in_su = fabric_slot % per_su;
                for rail in 0..rail_count {
                    let leaf = fabric.leaf_index(su, rail);
                    let Some(switch) = fabric.switches.get(leaf) else {
                        continue;
                    };
                    let (Some(subnet), Some(gateway)) = (switch.host_subnet, switch.gateway) else {
                        continue;
                    };
                    rails.push(RailPort {
                        rail,
                        netdev: nics.netdev.replace("{rail}", &rail.to_string()),
                        address: addressing::nth_host(subnet, slot_in_su + 1),
                        prefix_len: subnet.prefix_len(),
                        gateway,
                        leaf,
                        leaf_port: slot_in_su + 1,
                        mtu: nics.mtu.unwrap_or(host_mtu),
                    });
                }
                if rail_count > 0 {
                    fabric_slot += 1;
                }
            }
            nodes.push(Node { name, group: group_index, mgmt_address, su, rails });
        }
        let range = first..nodes.len();
        let hostlist = hostlist::compress(nodes[range.clone()].iter().map(|n| n.name.as_str()));
        groups.push(Group {
            name: spec.name.clone(),
            roles: spec.roles.clone(),
            nodes: range,
            hostlist,
            gpu: gpu_model,
            gpus_per_node: spec.gpu.as_ref().map_or(0, |g| g.count),
            cpu: spec.cpu.unwrap_or(Cpu { sockets: 1, cores_per_socket: 1, threads_per_core: 1 }),
            memory_mib: spec.memory_gib.map_or(0, |gib| u64::from(gib) * 1024),
            rail_nics: rail_count,
            local_nvme: spec.local_nvme.map_or(0, |nvme| nvme.count),
            software: gpu_model
                .and(spec.software.as_ref().or(blueprint.software.as_ref()))
                .map(|software| software::resolve(software, gpu_model)),
            module_options: spec.module_options.clone(),
        });
    }

    let filesystems = resolve_filesystems(blueprint, &groups, &nodes)?;
    let nvlink_domains = nvlink::resolve(&blueprint.nvlink_domains, &nodes);
    let mut model = Model {
        name: blueprint.cluster.name.clone(),
        domain: blueprint.cluster.domain.clone(),
        groups,
        nodes,
        fabric,
        filesystems,
        scratch: blueprint.storage.scratch.clone(),
        tenants: blueprint.tenants.clone(),
        nvlink_domains,
        blueprint: blueprint.clone(),
        roster: spares::Roster::default(),
    };
    model.roster = spares::roster(&model, &[]);
    Ok(model)
}

fn parse_cidr(field: &'static str, value: &str) -> Result<Ipv4Net, ExpandError> {
    value.parse().map_err(|_| ExpandError::BadCidr { field, value: value.to_owned() })
}

/// Fills `{index}` or `{index:0N}` in a host name pattern.
#[must_use]
pub fn hostname(pattern: &str, index: u32) -> String {
    let Some(start) = pattern.find("{index") else {
        return pattern.to_owned();
    };
    let Some(length) = pattern[start..].find('}') else {
        return pattern.to_owned();
    };
    let spec = &pattern[start + "{index".len()..start + length];
    // Capped: a u32 has 10 digits, so wider padding only wastes memory (lint reports it).
    let width = spec.strip_prefix(":0").and_then(|w| w.parse::<usize>().ok()).unwrap_or(0).min(10);
    format!("{}{index:0width$}{}", &pattern[..start], &pattern[start + length + 1..])
}

fn resolve_filesystems(
    blueprint: &Blueprint,
    groups: &[Group],
    nodes: &[Node],
) -> Result<Vec<Filesystem>, ExpandError> {
    let group_index = |name: &str| {
        groups.iter().position(|g| g.name == name).ok_or_else(|| ExpandError::UnknownGroup(name.to_owned()))
    };
    blueprint
        .storage
        .filesystems
        .iter()
        .map(|fs| {
            let server_group = fs.server_group.as_deref().map(group_index).transpose()?;
            let server = server_group.and_then(|g| nodes.get(groups[g].nodes.start)).map(|n| n.name.clone());
            let source = match (&server, &fs.export, &fs.endpoint) {
                (Some(server), Some(export), _) => format!("{server}:{export}"),
                (_, _, Some(endpoint)) => endpoint.clone(),
                (Some(server), None, None) => format!("{server}:{}", fs.mount),
                (None, _, None) => String::new(),
            };
            let client_groups = if fs.groups.is_empty() {
                (0..groups.len()).filter(|g| Some(*g) != server_group).collect()
            } else {
                fs.groups.iter().map(|name| group_index(name)).collect::<Result<_, _>>()?
            };
            let default_options = match fs.kind {
                FilesystemKind::Nfs => "vers=4.2,hard,_netdev,nofail",
                FilesystemKind::Lustre => "flock,_netdev,nofail",
            };
            Ok(Filesystem {
                name: fs.name.clone(),
                kind: fs.kind,
                server,
                export: fs.export.clone().or_else(|| server_group.map(|_| fs.mount.clone())),
                source,
                mount: fs.mount.clone(),
                options: fs.options.clone().unwrap_or_else(|| default_options.to_owned()),
                client_groups,
                tier: fs.tier,
                expected: fs.expected,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::hostname;

    #[test]
    fn fills_hostname_patterns() {
        assert_eq!(hostname("node{index:02}", 3), "node03");
        assert_eq!(hostname("gpu{index:03}-a", 12), "gpu012-a");
        assert_eq!(hostname("dgx{index}", 7), "dgx7");
        assert_eq!(hostname("head", 1), "head");
    }
}
