//! Checks of the compute fabric: rails and NICs, sizing, MTUs, RoCE QoS and
//! InfiniBand partitions.

use std::collections::HashMap;

use super::{Facts, MAX_RADIX, MAX_RAILS, MAX_RATIO_TERM, unknown_name_help};
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::{ComputeFabric, FabricKind, LinkLayer, RoceMode, Role, SubnetManagerKind};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::topology::{SizingError, parse_ratio};

/// Switch port MTU when the blueprint gives none.
const fn default_switch_mtu(kind: FabricKind) -> u32 {
    match kind {
        FabricKind::Roce => 9216,
        FabricKind::Infiniband => 4096,
    }
}

/// Host rail MTU when the blueprint gives none.
const fn default_host_mtu(kind: FabricKind) -> u32 {
    match kind {
        FabricKind::Roce => 9000,
        FabricKind::Infiniband => 4096,
    }
}

/// The MTUs InfiniBand defines (IBTA).
const IB_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];
/// Largest RoCE host MTU that every ConnectX and switch profile handles.
const ROCE_MAX_HOST_MTU: u32 = 9000;
/// The default partition's PKey; never assigned to a tenant.
const DEFAULT_PKEY: u16 = 0x7fff;

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    rail_and_radix_ranges(loaded, out);
    rail_nics(loaded, out);
    gpus_versus_rails(loaded, out);
    oversubscription(loaded, out);
    sizing(loaded, facts, out);
    mtus(loaded, out);
    sections_match_kind(loaded, out);
    roce_qos(loaded, out);
    subnet_manager(loaded, facts, out);
    pkeys(loaded, out);
}

fn compute(loaded: &LoadedBlueprint) -> &ComputeFabric {
    &loaded.blueprint.fabric.compute
}

fn rail_and_radix_ranges(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let compute = compute(loaded);
    if !(1..=MAX_RAILS).contains(&compute.rails) {
        out.push(
            Diagnostic::error("invalid-rail-count", format!("`rails: {}` is out of range", compute.rails))
                .at(&loaded.source, "fabric.compute.rails")
                .help(format!("a rail-optimized fabric has 1 to {MAX_RAILS} rails (one per GPU NIC, usually 8)")),
        );
    }
    if !(1..=MAX_RADIX).contains(&compute.switch.radix) {
        out.push(
            Diagnostic::error("invalid-radix", format!("switch radix `{}` is out of range", compute.switch.radix))
                .at(&loaded.source, "fabric.compute.switch.radix")
                .help(format!(
                    "give the ports per switch at link speed, 1 to {MAX_RADIX} (QM9700: 64; SN5600 at 400G: 128)"
                )),
        );
    }
}

fn rail_nics(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let compute = compute(loaded);
    let expected_layer = match compute.kind {
        FabricKind::Roce => LinkLayer::Ethernet,
        FabricKind::Infiniband => LinkLayer::Infiniband,
    };
    let layer_name = |layer: LinkLayer| match layer {
        LinkLayer::Ethernet => "ethernet",
        LinkLayer::Infiniband => "infiniband",
    };
    let kind_name = kind_name(compute.kind);
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let Some(nics) = &group.rail_nics else { continue };
        let path = format!("node_groups[{index}].rail_nics");
        if nics.count != compute.rails {
            out.push(
                Diagnostic::error(
                    "rail-nic-count-mismatch",
                    format!(
                        "group `{}` has `{}` rail NICs but the fabric has `{}` rails",
                        group.name, nics.count, compute.rails
                    ),
                )
                .at(&loaded.source, format!("{path}.count"))
                .help(format!(
                    "a rail-optimized node has one NIC per rail: set `count: {}` (or change `fabric.compute.rails`)",
                    compute.rails
                )),
            );
        }
        if nics.link_layer != expected_layer {
            out.push(
                Diagnostic::error(
                    "link-layer-mismatch",
                    format!(
                        "group `{}` has `{}` NICs on a `{kind_name}` fabric",
                        group.name,
                        layer_name(nics.link_layer)
                    ),
                )
                .at(&loaded.source, format!("{path}.link_layer"))
                .help(format!("set `link_layer: {}`", layer_name(expected_layer))),
            );
        }
        if nics.speed_gbps != compute.link_speed_gbps {
            let slower = nics.speed_gbps < compute.link_speed_gbps;
            let consequence =
                if slower { "the switch ports cannot run at NIC speed" } else { "the NICs will run at link speed" };
            let message = format!(
                "group `{}` has `{}` Gb/s NICs on a `{}` Gb/s fabric: {consequence}",
                group.name, nics.speed_gbps, compute.link_speed_gbps
            );
            let diagnostic = if slower {
                Diagnostic::error("nic-speed-mismatch", message)
            } else {
                Diagnostic::warning("nic-speed-mismatch", message)
            };
            out.push(
                diagnostic
                .at(&loaded.source, format!("{path}.speed_gbps"))
                .help(format!(
                    "set `speed_gbps: {}`, or `fabric.compute.link_speed_gbps` to the NIC speed (the radix counts ports at link speed)",
                    compute.link_speed_gbps
                )),
            );
        }
    }
}

fn gpus_versus_rails(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let Some(gpu) = group.gpu.as_ref().filter(|g| g.count > 0) else { continue };
        let Some(nics) = group.rail_nics.as_ref().filter(|n| n.count > 0) else {
            if group.roles.contains(&Role::Compute) {
                out.push(
                    Diagnostic::warning(
                        "gpu-group-off-fabric",
                        format!(
                            "compute group `{}` has GPUs but no `rail_nics`: it is not on the compute fabric",
                            group.name
                        ),
                    )
                    .at(&loaded.source, format!("node_groups[{index}]"))
                    .help("add `rail_nics:` (one NIC per rail) so its GPUs can run multi-node jobs"),
                );
            }
            continue;
        };
        let path = format!("node_groups[{index}].rail_nics.count");
        if gpu.count > nics.count {
            out.push(
                Diagnostic::warning(
                    "gpus-share-nics",
                    format!(
                        "group `{}` has `{}` GPUs per node and `{}` rail NICs: GPUs share NICs",
                        group.name, gpu.count, nics.count
                    ),
                )
                .at(&loaded.source, path)
                .help("NCCL bandwidth per GPU drops accordingly; rail-optimized designs give each GPU its own NIC"),
            );
        } else if nics.count > gpu.count {
            out.push(
                Diagnostic::warning(
                    "more-rails-than-gpus",
                    format!(
                        "group `{}` has `{}` rail NICs for `{}` GPUs per node: some rails carry no GPU traffic",
                        group.name, nics.count, gpu.count
                    ),
                )
                .at(&loaded.source, path)
                .help("use as many rails as GPUs per node, or fewer"),
            );
        }
    }
}

fn oversubscription(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let text = &compute(loaded).oversubscription;
    let problem = match parse_ratio(text) {
        None => Some("is not of the form `down:up` with positive whole numbers"),
        Some((down, up)) if down > MAX_RATIO_TERM || up > MAX_RATIO_TERM => Some("has a term above 64"),
        Some(_) => None,
    };
    if let Some(problem) = problem {
        out.push(
            Diagnostic::error("invalid-oversubscription", format!("oversubscription `{text}` {problem}"))
                .at(&loaded.source, "fabric.compute.oversubscription")
                .help(
                    "write `\"1:1\"` for a non-blocking fabric, or e.g. `\"2:1\"` (quoted, so YAML keeps it a string)",
                ),
        );
    }
}

fn sizing(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let Some(Err(error)) = &facts.sizing else { return };
    let compute = compute(loaded);
    let help = match error {
        SizingError::NoUplinks { .. } => format!(
            "a radix of `{}` cannot be split at `{}`: use a larger radix or a lower oversubscription",
            compute.switch.radix, compute.oversubscription
        ),
        SizingError::TooLarge { leaves, max, .. } => format!(
            "`{}` nodes on `{}` rails need `{leaves}` leaves, a 3-tier fabric of radix `{}` connects at most `{max}`: use a larger radix or split the cluster",
            facts.fabric_nodes, compute.rails, compute.switch.radix
        ),
        SizingError::UplinksExceedRadix { radix, .. } => format!(
            "lower `uplinks_per_leaf` below `{radix}`, or remove it to derive uplinks from the oversubscription"
        ),
    };
    out.push(
        Diagnostic::error("fabric-sizing", format!("the compute fabric cannot be built: {error}"))
            .at(&loaded.source, "fabric.compute.switch.radix")
            .help(help),
    );
}

fn mtus(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let compute = compute(loaded);
    let switch_mtu = compute.mtu.unwrap_or(default_switch_mtu(compute.kind));
    let host_mtu = compute.host_mtu.unwrap_or(default_host_mtu(compute.kind));
    let mut hosts: Vec<(String, u32)> = vec![("fabric.compute.host_mtu".to_owned(), host_mtu)];
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        if let Some(mtu) = group.rail_nics.as_ref().and_then(|nics| nics.mtu) {
            hosts.push((format!("node_groups[{index}].rail_nics.mtu"), mtu));
        }
    }
    if compute.kind == FabricKind::Infiniband {
        for (path, mtu) in std::iter::once(("fabric.compute.mtu".to_owned(), switch_mtu)).chain(hosts.iter().cloned()) {
            if !IB_MTUS.contains(&mtu) {
                out.push(
                    Diagnostic::error("invalid-ib-mtu", format!("`{mtu}` is not an InfiniBand MTU"))
                        .at(&loaded.source, path)
                        .help("InfiniBand MTUs are 256, 512, 1024, 2048 and 4096 (use 4096)"),
                );
            }
        }
    }
    for (path, mtu) in &hosts {
        if *mtu > switch_mtu {
            out.push(
                Diagnostic::error(
                    "host-mtu-above-switch-mtu",
                    format!("host MTU `{mtu}` is above the switch MTU `{switch_mtu}`: larger frames are dropped"),
                )
                .at(&loaded.source, path.as_str())
                .help(format!(
                    "set the host MTU to at most `{switch_mtu}` (switch MTU covers the host MTU plus headers)"
                )),
            );
        } else if compute.kind == FabricKind::Roce && *mtu > ROCE_MAX_HOST_MTU {
            out.push(
                Diagnostic::warning("host-mtu-above-9000", format!("RoCE host MTU `{mtu}` is above `9000`"))
                    .at(&loaded.source, path.as_str())
                    .help(
                        "use 9000: RoCE payloads stop at 4096 and not every NIC or switch profile passes larger frames",
                    ),
            );
        }
    }
}

fn kind_name(kind: FabricKind) -> &'static str {
    match kind {
        FabricKind::Roce => "roce",
        FabricKind::Infiniband => "infiniband",
    }
}

fn sections_match_kind(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let compute = compute(loaded);
    let stray = match compute.kind {
        FabricKind::Infiniband if compute.roce.is_some() => Some("roce"),
        FabricKind::Roce if compute.infiniband.is_some() => Some("infiniband"),
        _ => None,
    };
    if let Some(section) = stray {
        out.push(
            Diagnostic::error(
                "section-does-not-apply",
                format!("a `{section}:` section does not apply to a `{}` fabric", kind_name(compute.kind)),
            )
            .at(&loaded.source, format!("fabric.compute.{section}"))
            .help(format!("remove `{section}:`, or change `kind:`")),
        );
    }
}

fn roce_qos(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let compute = compute(loaded);
    if compute.kind != FabricKind::Roce {
        return;
    }
    let Some(qos) = &compute.roce else {
        out.push(
            Diagnostic::error("roce-qos-missing", "a RoCE fabric has no `roce:` QoS section")
                .at(&loaded.source, "fabric.compute.kind")
                .help("add `roce: { mode: lossless, pfc_priority: 3, ecn: true }` (NVIDIA's defaults)"),
        );
        return;
    };
    let base = "fabric.compute.roce";
    if qos.mode == RoceMode::Lossless {
        if qos.pfc_priority.is_none() {
            out.push(
                Diagnostic::error(
                    "roce-lossless-incomplete",
                    "a lossless RoCE fabric needs PFC and ECN: `pfc_priority` is missing",
                )
                .at(&loaded.source, format!("{base}.pfc_priority"))
                .help("add `pfc_priority: 3` (NVIDIA's default RoCE priority)"),
            );
        }
        if !qos.ecn {
            out.push(
                Diagnostic::error("roce-lossless-incomplete", "a lossless RoCE fabric needs PFC and ECN: `ecn` is off")
                    .at(&loaded.source, format!("{base}.ecn"))
                    .help("set `ecn: true`; without ECN, PFC alone spreads congestion as pause storms"),
            );
        }
    } else if !qos.ecn {
        out.push(
            Diagnostic::warning("roce-without-ecn", "a lossy RoCE fabric without ECN has no congestion control")
                .at(&loaded.source, format!("{base}.ecn"))
                .help("set `ecn: true`"),
        );
    }
    if let Some(priority) = qos.pfc_priority.filter(|p| *p > 7) {
        out.push(
            Diagnostic::error("invalid-pfc-priority", format!("PFC priority `{priority}` is not between 0 and 7"))
                .at(&loaded.source, format!("{base}.pfc_priority"))
                .help("802.1p priorities are 0 to 7; RoCE usually uses 3"),
        );
    }
    for (key, value) in [("dscp", qos.dscp), ("cnp_dscp", qos.cnp_dscp)] {
        if value > 63 {
            out.push(
                Diagnostic::error("invalid-dscp", format!("DSCP `{value}` is not between 0 and 63"))
                    .at(&loaded.source, format!("{base}.{key}"))
                    .help("DSCP is 6 bits; NVIDIA's defaults are 26 for RoCE data and 48 for CNPs"),
            );
        }
    }
    if qos.dscp == qos.cnp_dscp {
        out.push(
            Diagnostic::error(
                "dscp-collision",
                format!("RoCE data and congestion notifications share DSCP `{}`", qos.dscp),
            )
            .at(&loaded.source, format!("{base}.cnp_dscp"))
            .help("CNPs need their own DSCP in a strict-priority queue: use 48 for CNPs and 26 for data"),
        );
    }
}

fn subnet_manager(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let compute = compute(loaded);
    if compute.kind != FabricKind::Infiniband {
        return;
    }
    let Some(ib) = &compute.infiniband else {
        out.push(
            Diagnostic::error("missing-subnet-manager", "an InfiniBand fabric has no `infiniband.subnet_manager`")
                .at(&loaded.source, "fabric.compute.kind")
                .help("add `infiniband: { subnet_manager: { kind: opensm, groups: [<management group>] } }`: without a subnet manager no port becomes active"),
        );
        return;
    };
    let sm = &ib.subnet_manager;
    let base = "fabric.compute.infiniband.subnet_manager";
    if sm.kind == SubnetManagerKind::Opensm && sm.groups.is_empty() {
        out.push(
            Diagnostic::error(
                "missing-subnet-manager",
                "OpenSM runs on no node group: `subnet_manager.groups` is empty",
            )
            .at(&loaded.source, format!("{base}.groups"))
            .help("list the management group(s) that run OpenSM, or use `kind: ufm`"),
        );
    }
    let names: Vec<&str> = loaded.blueprint.node_groups.iter().map(|g| g.name.as_str()).collect();
    for (index, group) in sm.groups.iter().enumerate() {
        if !facts.has_group(group) {
            out.push(
                Diagnostic::error("unknown-group", format!("node group `{group}` does not exist"))
                    .at(&loaded.source, format!("{base}.groups[{index}]"))
                    .help(unknown_name_help(group, names.iter().copied(), "node group")),
            );
        }
    }
}

/// A PKey's 15-bit value, or why the text is not a PKey.
fn parse_pkey(text: &str) -> Result<u16, String> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .ok_or_else(|| format!("PKey `{text}` is not hexadecimal (`0x` followed by up to 4 hex digits)"))?;
    if digits.is_empty() || digits.len() > 4 {
        return Err(format!("PKey `{text}` is not 1 to 4 hex digits after `0x`"));
    }
    let value = u16::from_str_radix(digits, 16).map_err(|_| format!("PKey `{text}` is not hexadecimal"))?;
    // The top bit is the membership bit, not part of the partition number.
    let number = value & 0x7fff;
    if number == 0 || number == DEFAULT_PKEY {
        return Err(format!(
            "PKey `{text}` is reserved ({}): tenant partitions use 0x0001 to 0x7ffe",
            if number == 0 { "0x0000 is invalid" } else { "0x7fff is the default partition" }
        ));
    }
    Ok(number)
}

fn pkeys(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let Some(ib) = &compute(loaded).infiniband else { return };
    let tenants: Vec<&str> = loaded.blueprint.tenants.iter().map(|t| t.name.as_str()).collect();
    let mut numbers: HashMap<u16, usize> = HashMap::new();
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (index, pkey) in ib.pkeys.iter().enumerate() {
        let base = format!("fabric.compute.infiniband.pkeys[{index}]");
        if let Some(first) = names.get(pkey.name.as_str()) {
            out.push(
                Diagnostic::error("duplicate-pkey-name", format!("partition name `{}` is used twice", pkey.name))
                    .at(&loaded.source, format!("{base}.name"))
                    .help(format!("rename it: `pkeys[{first}]` already uses that name")),
            );
        } else {
            names.insert(&pkey.name, index);
        }
        match parse_pkey(&pkey.pkey) {
            Err(problem) => out.push(
                Diagnostic::error("invalid-pkey", problem)
                    .at(&loaded.source, format!("{base}.pkey"))
                    .help("write the PKey as a quoted hex string, e.g. `\"0x0a01\"`"),
            ),
            Ok(number) => {
                if let Some(first) = numbers.get(&number) {
                    out.push(
                        Diagnostic::error(
                            "duplicate-pkey",
                            format!(
                                "PKey `{}` of `{}` is partition `{number:#06x}`, as is `{}` of `{}`",
                                pkey.pkey, pkey.name, ib.pkeys[*first].pkey, ib.pkeys[*first].name
                            ),
                        )
                        .at(&loaded.source, format!("{base}.pkey"))
                        .help(
                            "the top bit is the membership bit, so PKeys that differ only there collide: pick another",
                        ),
                    );
                } else {
                    numbers.insert(number, index);
                }
            }
        }
        for (member, tenant) in pkey.tenants.iter().enumerate() {
            if !tenants.contains(&tenant.as_str()) {
                out.push(
                    Diagnostic::error("unknown-tenant", format!("tenant `{tenant}` is not declared"))
                        .at(&loaded.source, format!("{base}.tenants[{member}]"))
                        .help(unknown_name_help(tenant, tenants.iter().copied(), "tenant")),
                );
            }
        }
    }
}
