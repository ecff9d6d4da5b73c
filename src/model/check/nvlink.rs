//! Checks of the NVLink domains (`nvlink_domains`) and of what the scheduler asks of
//! them: every domain names real nodes, no node sits in two, a domain holds at most one
//! NVL72 (18 trays, 72 GPUs) of one GPU model; Slurm can express domains only with
//! `topology/block` (23.11+; Debian 12's 22.05 has none), and a partition's job shape
//! keeps each segment inside one domain.

use std::collections::HashMap;

use super::{Facts, is_simple_name};
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::release::{SlurmRelease, parse_slurm_release};
use crate::blueprint::schema::{SchedulerKind, Slurm, SlurmTopology};
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::model::hostlist;
use crate::model::nvlink::{MAX_GPUS, MAX_TRAYS};
use crate::model::slurm::{BLOCK_SIZES_SINCE, BLOCK_TOPOLOGY_SINCE};

/// Longest domain name: a Slurm block name and a Kubernetes label value (63).
const MAX_NAME: usize = 63;

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let domains = &loaded.blueprint.nvlink_domains;
    if domains.is_empty() {
        shapes_without_domains(loaded, out);
        return;
    }
    let Some(hostnames) = facts.hostnames.as_deref() else { return };
    let group_of: HashMap<&str, usize> = hostnames.iter().map(|(group, name)| (name.as_str(), *group)).collect();
    let mut sizes: Vec<(usize, usize)> = Vec::new();
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (index, domain) in domains.iter().enumerate() {
        let base = format!("nvlink_domains[{index}]");
        if let Some(first) = names.insert(&domain.name, index) {
            out.push(
                Diagnostic::error(
                    "duplicate-nvlink-domain",
                    format!("NVLink domain `{}` is declared twice", domain.name),
                )
                .at(&loaded.source, format!("{base}.name"))
                .help(format!("rename it: `nvlink_domains[{first}]` already uses that name")),
            );
        }
        if !is_simple_name(&domain.name, MAX_NAME) {
            out.push(
                Diagnostic::error("invalid-nvlink-domain-name", format!("`{}` is not a domain name", domain.name))
                    .at(&loaded.source, format!("{base}.name"))
                    .help("use lowercase letters, digits and `-`, starting with a letter (`rack1`)"),
            );
        }
        if domain.switch_trays == 0 {
            out.push(
                Diagnostic::error(
                    "nvlink-domain-no-switch-trays",
                    format!("NVLink domain `{}` has no NVLink switch trays", domain.name),
                )
                .at(&loaded.source, format!("{base}.switch_trays"))
                .help("an NVL72 rack has 9 NVLink switch trays: drop the key or give their number"),
            );
        }
        let members = match hostlist::expand(&domain.nodes) {
            Ok(members) => members,
            Err(reason) => {
                out.push(
                    Diagnostic::error(
                        "invalid-nvlink-domain-nodes",
                        format!("`{}` is not a hostlist: {reason}", domain.nodes),
                    )
                    .at(&loaded.source, format!("{base}.nodes"))
                    .help("write the compute trays as Slurm does: `gb[001-018]`"),
                );
                continue;
            }
        };
        let mut known = Vec::new();
        for name in &members {
            let Some(&group) = group_of.get(name.as_str()) else {
                out.push(
                    Diagnostic::error(
                        "nvlink-domain-unknown-node",
                        format!("NVLink domain `{}` names `{name}`, which is no node of the blueprint", domain.name),
                    )
                    .at(&loaded.source, format!("{base}.nodes"))
                    .help(unknown_node_help(name, hostnames)),
                );
                continue;
            };
            if let Some(&first) = owner.get(name) {
                out.push(
                    Diagnostic::error(
                        "nvlink-domain-overlap",
                        format!("node `{name}` is in NVLink domains `{}` and `{}`", domains[first].name, domain.name),
                    )
                    .at(&loaded.source, format!("{base}.nodes"))
                    .help("a compute tray belongs to one rack's NVLink fabric: list it in one domain"),
                );
                continue;
            }
            owner.insert(name.clone(), index);
            known.push(group);
        }
        size_and_gpus(loaded, index, &known, out);
        sizes.push((index, known.len()));
    }
    if let Some(slurm) = slurm_settings(loaded) {
        scheduler(loaded, slurm, &sizes, out);
    }
}

/// The closest node name, or where node names come from (a cluster has too many to list).
fn unknown_node_help(name: &str, hostnames: &[(usize, String)]) -> String {
    match did_you_mean(name, hostnames.iter().map(|(_, node)| node.as_str())) {
        Some(close) => format!("did you mean `{close}`?"),
        None => "node names come from `node_groups[].hostname` and `count`: list those of the rack".to_owned(),
    }
}

/// At most one NVL72 of one GPU model.
fn size_and_gpus(loaded: &LoadedBlueprint, index: usize, groups: &[usize], out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    let domain = &blueprint.nvlink_domains[index];
    let path = format!("nvlink_domains[{index}].nodes");
    let gpus: u64 =
        groups.iter().filter_map(|&g| blueprint.node_groups[g].gpu.as_ref()).map(|gpu| u64::from(gpu.count)).sum();
    if groups.len() > MAX_TRAYS || gpus > MAX_GPUS {
        out.push(
            Diagnostic::error(
                "nvlink-domain-too-large",
                format!(
                    "NVLink domain `{}` has {} compute trays and {gpus} GPUs; one NVLink domain holds at most {MAX_TRAYS} trays and {MAX_GPUS} GPUs",
                    domain.name,
                    groups.len()
                ),
            )
            .at(&loaded.source, &path)
            .help("split it into one domain per NVL72 rack"),
        );
    }
    let mut models: Vec<String> = Vec::new();
    for &group in groups {
        let model = blueprint.node_groups[group]
            .gpu
            .as_ref()
            .map_or_else(|| "no GPU".to_owned(), |gpu| format!("`{}`", gpu.model.to_ascii_lowercase()));
        if !models.contains(&model) {
            models.push(model);
        }
    }
    if models.len() > 1 {
        out.push(
            Diagnostic::error(
                "nvlink-domain-mixed-gpus",
                format!("NVLink domain `{}` mixes {}", domain.name, models.join(" and ")),
            )
            .at(&loaded.source, &path)
            .help("an NVLink domain is one rack of one GPU model: list only that rack's compute trays"),
        );
    }
}

fn slurm_settings(loaded: &LoadedBlueprint) -> Option<&Slurm> {
    let scheduler = &loaded.blueprint.scheduler;
    (scheduler.kind == SchedulerKind::Slurm).then_some(scheduler.slurm.as_ref()).flatten()
}

/// What Slurm can do with the domains at the blueprint's oldest release.
fn scheduler(loaded: &LoadedBlueprint, slurm: &Slurm, sizes: &[(usize, usize)], out: &mut Diagnostics) {
    let Some(release) = parse_slurm_release(&slurm.min_version) else { return };
    if release < BLOCK_TOPOLOGY_SINCE {
        out.push(
            Diagnostic::error(
                "nvlink-domains-need-block-topology",
                format!(
                    "NVLink domains need Slurm's `topology/block` (23.11+), but `min_version` is `{}`: Slurm 22.05 (Debian 12) has no such plugin and could not keep a job inside a domain",
                    slurm.min_version
                ),
            )
            .at(&loaded.source, "scheduler.slurm.min_version")
            .help("raise `min_version` to `\"24.05\"` or later (Slurm from outside Debian 12) and set `topology: block`"),
        );
    } else if slurm.topology != SlurmTopology::Block {
        out.push(
            Diagnostic::warning(
                "nvlink-domains-not-scheduled",
                "Slurm's topology does not know the NVLink domains: jobs may straddle racks and lose NVLink between their nodes",
            )
            .at(&loaded.source, "scheduler.slurm.topology")
            .help("set `topology: block`: one block per NVLink domain"),
        );
    }
    let smallest = sizes.iter().filter(|(_, size)| *size > 0).min_by_key(|(_, size)| *size);
    let largest = sizes.iter().map(|(_, size)| *size).max();
    if (BLOCK_TOPOLOGY_SINCE..BLOCK_SIZES_SINCE).contains(&release)
        && let (Some(&(index, small)), Some(large)) = (smallest, largest)
        && small != large
    {
        out.push(
            Diagnostic::error(
                "nvlink-domains-unequal",
                format!(
                    "Slurm `{}` wants blocks of equal size, but NVLink domain `{}` has {small} nodes and another {large}",
                    slurm.min_version, loaded.blueprint.nvlink_domains[index].name
                ),
            )
            .at(&loaded.source, format!("nvlink_domains[{index}].nodes"))
            .help("raise `min_version` to `\"24.05\"` (blocks of at least `BlockSizes` nodes), or give every domain as many nodes"),
        );
    }
    job_shapes(
        loaded,
        slurm,
        release,
        smallest.map(|&(index, size)| (loaded.blueprint.nvlink_domains[index].name.as_str(), size)),
        out,
    );
}

/// Each job shape's segment must fit the smallest domain: Slurm's planning base block
/// (`BlockSizes`), and it refuses a `--segment` larger than that.
fn job_shapes(
    loaded: &LoadedBlueprint,
    slurm: &Slurm,
    release: SlurmRelease,
    smallest: Option<(&str, usize)>,
    out: &mut Diagnostics,
) {
    for (p, partition) in slurm.partitions.iter().enumerate() {
        let partition_nodes: u64 = loaded
            .blueprint
            .node_groups
            .iter()
            .filter(|group| partition.groups.contains(&group.name))
            .map(|group| u64::from(group.count))
            .sum();
        for (s, shape) in partition.job_shapes.iter().enumerate() {
            let path = format!("scheduler.slurm.partitions[{p}].job_shapes[{s}]");
            if !shape_is_whole(loaded, &path, shape.nodes, shape.segment, out) {
                continue;
            }
            if u64::from(shape.nodes) > partition_nodes {
                out.push(
                    Diagnostic::error(
                        "job-shape-exceeds-partition",
                        format!(
                            "a job of {} nodes does not fit partition `{}` of {partition_nodes} nodes",
                            shape.nodes, partition.name
                        ),
                    )
                    .at(&loaded.source, format!("{path}.nodes"))
                    .help("shrink the job shape or add node groups to the partition"),
                );
            }
            let Some(segment) = shape.segment else { continue };
            if release < BLOCK_SIZES_SINCE {
                out.push(
                    Diagnostic::error(
                        "slurm-feature-too-new",
                        format!("`--segment` needs Slurm 24.05, but `min_version` is `{}`", slurm.min_version),
                    )
                    .at(&loaded.source, format!("{path}.segment"))
                    .help("raise `min_version` to `\"24.05\"`, or drop `segment`"),
                );
            }
            if slurm.topology != SlurmTopology::Block {
                out.push(
                    Diagnostic::error(
                        "job-shape-needs-block",
                        "a segment is placed inside one block, and Slurm's topology here has no blocks",
                    )
                    .at(&loaded.source, format!("{path}.segment"))
                    .help("set `scheduler.slurm.topology: block`"),
                );
            }
            if let Some((domain, size)) = smallest
                && segment as usize > size
            {
                out.push(
                    Diagnostic::error(
                        "job-shape-exceeds-nvlink-domain",
                        format!(
                            "partition `{}` asks for segments of {segment} nodes in one NVLink domain, but domain `{domain}` holds {size}: Slurm refuses a segment larger than its smallest block",
                            partition.name
                        ),
                    )
                    .at(&loaded.source, format!("{path}.segment"))
                    .help(format!("use a segment of at most {size} nodes (a divisor of `nodes`)")),
                );
            }
        }
    }
}

/// A job shape of at least one node, whose segment divides it; reports otherwise.
fn shape_is_whole(
    loaded: &LoadedBlueprint,
    path: &str,
    nodes: u32,
    segment: Option<u32>,
    out: &mut Diagnostics,
) -> bool {
    if nodes == 0 || segment == Some(0) {
        out.push(
            Diagnostic::error("invalid-job-shape", "a job shape needs at least one node, and a segment at least one")
                .at(&loaded.source, path)
                .help("give `nodes` (and `segment`) of 1 or more"),
        );
        return false;
    }
    if let Some(segment) = segment
        && !nodes.is_multiple_of(segment)
    {
        out.push(
            Diagnostic::error("invalid-job-shape", format!("{nodes} nodes do not split into segments of {segment}"))
                .at(&loaded.source, format!("{path}.segment"))
                .help("Slurm wants the node count to be a whole number of segments: pick a divisor of `nodes`"),
        );
        return false;
    }
    true
}

/// Segments without any NVLink domain have nothing to stay inside.
fn shapes_without_domains(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let Some(slurm) = slurm_settings(loaded) else { return };
    for (p, partition) in slurm.partitions.iter().enumerate() {
        for (s, shape) in partition.job_shapes.iter().enumerate() {
            let path = format!("scheduler.slurm.partitions[{p}].job_shapes[{s}]");
            if shape_is_whole(loaded, &path, shape.nodes, shape.segment, out) && shape.segment.is_some() {
                out.push(
                    Diagnostic::error(
                        "job-shape-needs-block",
                        "a segment stays inside one NVLink domain, and the blueprint declares none",
                    )
                    .at(&loaded.source, format!("{path}.segment"))
                    .help("declare the racks under `nvlink_domains`, or drop `segment`"),
                );
            }
        }
    }
}
