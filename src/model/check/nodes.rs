//! Checks of the cluster identity and the node groups: version, names, counts,
//! host name patterns, GPUs and roles.

use std::collections::HashMap;

use super::{Facts, MAX_NODES, has_role, index_width, is_simple_name, simple_name_suggestion};
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::{Role, SchedulerKind};
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::model::expand::hostname;
use crate::model::gpu;

/// Longest cluster name (it prefixes resource ids and Slurm's `ClusterName`).
const MAX_CLUSTER_NAME: usize = 40;
/// Most GPUs in one node (HGX/DGX boards carry 8; 16 leaves room for dense designs).
const MAX_GPUS_PER_NODE: u32 = 16;
/// Longest DNS label.
const MAX_HOSTNAME: usize = 63;

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    version(loaded, out);
    cluster_name(loaded, out);
    duplicate_group_names(loaded, out);
    group_counts(loaded, out);
    hostname_patterns(loaded, out);
    duplicate_hostnames(loaded, facts, out);
    unknown_gpu_models(loaded, out);
    gpu_counts(loaded, out);
    controller_roles(loaded, out);
    compute_and_database_roles(loaded, out);
    module_options(loaded, out);
    spares(loaded, out);
}

/// Spares are compute nodes kept out of the Slurm partitions: a group keeps at least
/// one node in service, and the `spare` partition's name is free.
fn spares(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    let is_slurm = blueprint.scheduler.kind == SchedulerKind::Slurm;
    for (index, group) in blueprint.node_groups.iter().enumerate() {
        if group.spares == 0 {
            continue;
        }
        let path = format!("node_groups[{index}].spares");
        if !group.roles.contains(&Role::Compute) {
            out.push(
                Diagnostic::error(
                    "spares-not-compute",
                    format!("group `{}` has spares but no `compute` role", group.name),
                )
                .at(&loaded.source, &path)
                .help("only compute nodes stand in for each other: remove `spares` or add the `compute` role"),
            );
        } else if group.spares >= group.count {
            out.push(
                Diagnostic::error(
                    "spares-exceed-count",
                    format!("group `{}` keeps `{}` of its `{}` nodes as spares", group.name, group.spares, group.count),
                )
                .at(&loaded.source, &path)
                .help(format!(
                    "keep at least one node in service: `spares` at most `{}`",
                    group.count.saturating_sub(1)
                )),
            );
        }
        if !is_slurm {
            out.push(
                Diagnostic::error(
                    "spares-need-slurm",
                    format!("group `{}` has spares, which need Slurm partitions", group.name),
                )
                .at(&loaded.source, &path)
                .help("spares stand by in a Slurm partition of their own: remove `spares` on this scheduler"),
            );
        }
    }
    let has_spares = blueprint.node_groups.iter().any(|group| group.spares > 0);
    let partitions = blueprint.scheduler.slurm.as_ref().map(|slurm| slurm.partitions.as_slice()).unwrap_or_default();
    if let Some(taken) =
        partitions.iter().position(|p| p.name == crate::model::spares::SPARE_PARTITION).filter(|_| has_spares)
    {
        out.push(
            Diagnostic::error(
                "spare-partition-taken",
                format!("partition `{}` is the one toolkit keeps the spares in", crate::model::spares::SPARE_PARTITION),
            )
            .at(&loaded.source, format!("scheduler.slurm.partitions[{taken}].name"))
            .help("rename this partition"),
        );
    }
}

/// Module names and parameters land in a modprobe.d file: one `options` line each.
fn module_options(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        for (module, options) in &group.module_options {
            let name_ok = !module.is_empty()
                && module.len() <= 64
                && module.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !name_ok {
                out.push(
                    Diagnostic::error("invalid-module-name", format!("`{module}` is not a kernel module name"))
                        .at(&loaded.source, format!("node_groups[{index}].module_options"))
                        .help("a module name is letters, digits, `_` and `-` (as `lsmod` lists it)"),
                );
            }
            let options_ok = !options.trim().is_empty()
                && options.split_whitespace().all(|word| word.contains('='))
                && !options.contains(['\n', '#', '\\']);
            if !options_ok {
                out.push(
                    Diagnostic::error(
                        "invalid-module-options",
                        format!("options `{options}` of module `{module}` are not `key=value` words"),
                    )
                    .at(&loaded.source, format!("node_groups[{index}].module_options.{module}"))
                    .help("write them as modprobe reads them: `NVreg_EnableGpuFirmware=0 NVreg_OpenRmEnableUnsupportedGpus=1`"),
                );
            }
        }
    }
}

fn version(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let version = loaded.blueprint.version;
    if version != 1 {
        out.push(
            Diagnostic::error("unsupported-version", format!("blueprint version `{version}` is not supported"))
                .at(&loaded.source, "version")
                .help("write `version: 1`, the only schema version"),
        );
    }
}

fn cluster_name(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let name = &loaded.blueprint.cluster.name;
    if !is_simple_name(name, MAX_CLUSTER_NAME) {
        out.push(
            Diagnostic::error("invalid-cluster-name", format!("cluster name `{name}` is not valid"))
                .at(&loaded.source, "cluster.name")
                .help(format!(
                    "use lowercase letters, digits and `-`, starting with a letter, at most {MAX_CLUSTER_NAME} characters, e.g. `{}`",
                    simple_name_suggestion(name, MAX_CLUSTER_NAME)
                )),
        );
    }
}

fn duplicate_group_names(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        if let Some(first) = seen.get(group.name.as_str()) {
            out.push(
                Diagnostic::error("duplicate-group-name", format!("node group `{}` is declared twice", group.name))
                    .at(&loaded.source, format!("node_groups[{index}].name"))
                    .help(format!("rename it: `node_groups[{first}]` already uses that name")),
            );
        } else {
            seen.insert(&group.name, index);
        }
    }
}

fn group_counts(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let mut total: u64 = 0;
    let mut reported_total = false;
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let path = format!("node_groups[{index}]");
        if group.count == 0 {
            out.push(
                Diagnostic::error("empty-group", format!("node group `{}` has `count: 0`", group.name))
                    .at(&loaded.source, format!("{path}.count"))
                    .help("give it at least one node, or remove the group"),
            );
        }
        total += u64::from(group.count);
        if total > MAX_NODES && !reported_total {
            reported_total = true;
            out.push(
                Diagnostic::error(
                    "too-many-nodes",
                    format!("the node groups up to `{}` declare `{total}` nodes, more than toolkit plans", group.name),
                )
                .at(&loaded.source, format!("{path}.count"))
                .help(format!("a blueprint may declare at most {MAX_NODES} nodes; check the count")),
            );
        }
        let last = group.start_index.checked_add(group.count.saturating_sub(1));
        if last.is_none() {
            out.push(
                Diagnostic::error(
                    "hostname-index-overflow",
                    format!(
                        "`start_index: {}` plus `count: {}` numbers nodes past `{}`",
                        group.start_index,
                        group.count,
                        u32::MAX
                    ),
                )
                .at(&loaded.source, format!("{path}.start_index"))
                .help("start the numbering lower (the default is 1)"),
            );
        }
    }
}

fn hostname_patterns(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let path = format!("node_groups[{index}].hostname");
        match index_width(&group.hostname) {
            Err(reason) => out.push(
                Diagnostic::error("invalid-hostname", format!("host name pattern `{}` is malformed", group.hostname))
                    .at(&loaded.source, &path)
                    .help(reason),
            ),
            Ok(None) if group.count > 1 => out.push(
                Diagnostic::error(
                    "hostname-without-index",
                    format!(
                        "group `{}` has `{}` nodes but host name `{}` has no `{{index}}`: every node gets the same name",
                        group.name, group.count, group.hostname
                    ),
                )
                .at(&loaded.source, &path)
                .help(format!("number the nodes, e.g. `\"{}{{index:02}}\"`", group.hostname)),
            ),
            Ok(_) => {
                let sample = hostname(&group.hostname, group.start_index);
                if let Some(reason) = hostname_problem(&sample) {
                    out.push(
                        Diagnostic::error("invalid-hostname", format!("host name `{sample}` is not valid: {reason}"))
                            .at(&loaded.source, &path)
                            .help("host names are DNS labels: letters, digits and `-`, not at either end, at most 63 characters"),
                    );
                }
            }
        }
    }
}

/// Why `name` is not a valid DNS label (RFC 1123), if it is not.
fn hostname_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_owned());
    }
    if name.len() > MAX_HOSTNAME {
        return Some(format!("it has {} characters", name.len()));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-')) {
        return Some(format!("`{bad}` is not allowed"));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("it starts or ends with `-`".to_owned());
    }
    None
}

fn duplicate_hostnames(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let Some(names) = &facts.hostnames else { return };
    let groups = &loaded.blueprint.node_groups;
    let mut owner: HashMap<&str, usize> = HashMap::with_capacity(names.len());
    // One diagnostic per pair of groups, with the first colliding name and how many collide.
    let mut collisions: HashMap<(usize, usize), (String, u64)> = HashMap::new();
    for (group, name) in names {
        match owner.get(name.as_str()) {
            Some(first) if first != group => {
                let entry = collisions.entry((*first, *group)).or_insert_with(|| (name.clone(), 0));
                entry.1 += 1;
            }
            Some(_) => {}
            None => {
                owner.insert(name, *group);
            }
        }
    }
    let mut collisions: Vec<_> = collisions.into_iter().collect();
    collisions.sort();
    for ((first, second), (name, count)) in collisions {
        let others = if count > 1 { format!(" and {} more", count - 1) } else { String::new() };
        out.push(
            Diagnostic::error(
                "duplicate-hostname",
                format!(
                    "host name `{name}`{others} of group `{}` is also a host name of group `{}`",
                    groups[second].name, groups[first].name
                ),
            )
            .at(&loaded.source, format!("node_groups[{second}].hostname"))
            .help("give each group its own host name prefix, or shift `start_index`"),
        );
    }
}

fn unknown_gpu_models(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let Some(g) = &group.gpu else { continue };
        if gpu::find(&g.model).is_none() {
            let known = gpu::names().collect::<Vec<_>>().join(", ");
            let help = match did_you_mean(&g.model, gpu::names()) {
                Some(close) => format!("did you mean `{close}`? known models: {known}"),
                None => format!("known models: {known}"),
            };
            out.push(
                Diagnostic::error("unknown-gpu-model", format!("GPU model `{}` is not known", g.model))
                    .at(&loaded.source, format!("node_groups[{index}].gpu.model"))
                    .help(help),
            );
        }
    }
}

fn gpu_counts(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let Some(g) = &group.gpu else { continue };
        if g.count == 0 || g.count > MAX_GPUS_PER_NODE {
            out.push(
                Diagnostic::error(
                    "invalid-gpu-count",
                    format!("group `{}` has `{}` GPUs per node", group.name, g.count),
                )
                .at(&loaded.source, format!("node_groups[{index}].gpu.count"))
                .help(format!(
                    "a node has 1 to {MAX_GPUS_PER_NODE} GPUs (HGX boards have 8); remove `gpu:` for nodes without GPUs"
                )),
            );
        }
    }
}

fn controller_roles(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let groups = &loaded.blueprint.node_groups;
    let controllers: Vec<usize> =
        groups.iter().enumerate().filter(|(_, g)| g.roles.contains(&Role::Controller)).map(|(i, _)| i).collect();
    let Some(&first) = controllers.first() else {
        out.push(
            Diagnostic::error("no-controller", "no node group has the `controller` role")
                .at(&loaded.source, "node_groups")
                .help("add `controller` to the `roles` of one group of one node (it runs the scheduler controller)"),
        );
        return;
    };
    for &other in &controllers[1..] {
        out.push(
            Diagnostic::error(
                "multiple-controller-groups",
                format!("groups `{}` and `{}` both have the `controller` role", groups[first].name, groups[other].name),
            )
            .at(&loaded.source, format!("node_groups[{other}].roles"))
            .help(format!("keep `controller` on one group only (`{}`)", groups[first].name)),
        );
    }
    let group = &groups[first];
    if group.count > 1 {
        out.push(
            Diagnostic::warning(
                "controller-not-ha",
                format!(
                    "controller group `{}` has `{}` nodes, but only the first runs the controller (HA is not rendered)",
                    group.name, group.count
                ),
            )
            .at(&loaded.source, format!("node_groups[{first}].count"))
            .help("set `count: 1`, or accept that the other nodes run no controller"),
        );
    }
}

fn compute_and_database_roles(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    if blueprint.scheduler.kind != SchedulerKind::Slurm {
        return;
    }
    if !has_role(blueprint, Role::Compute) {
        out.push(
            Diagnostic::error(
                "no-compute-group",
                "no node group has the `compute` role, so Slurm has no nodes to run jobs",
            )
            .at(&loaded.source, "node_groups")
            .help("add `compute` to the `roles` of the GPU node groups"),
        );
    }
    let accounting = blueprint.scheduler.slurm.as_ref().is_some_and(|slurm| slurm.accounting);
    if accounting && !has_role(blueprint, Role::Database) {
        out.push(
            Diagnostic::error(
                "no-database-group",
                "Slurm accounting is on but no node group has the `database` role to run slurmdbd",
            )
            .at(&loaded.source, "scheduler.slurm.accounting")
            .help("add `database` to the `roles` of the controller group, or set `accounting: false`"),
        );
    }
}
