//! Checks of the scheduler: kind against its section, Slurm features and `extra`
//! keys against the oldest Slurm the configs must run on (reference §5, §8),
//! preemption, GPU sharing and partitions.

use std::collections::HashMap;

use super::{Facts, unknown_name_help};
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::release::{SlurmRelease as SlurmVersion, parse_slurm_release};
use crate::blueprint::schema::{GpuSharingMode, PreemptMode, Role, SchedulerKind, Slurm, SlurmTopology};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::model::gpu;
use crate::model::slurm::BLOCK_TOPOLOGY_SINCE;

/// Debian 12's Slurm, the oldest release toolkit renders for.
const OLDEST_SLURM: SlurmVersion = (22, 5);
/// MIG slices of one GPU (A100/H100/H200/B200: seven compute slices).
const MIG_SLICES_PER_GPU: u32 = 7;

/// slurm.conf keys that 22.05 does not know (unknown key ⇒ fatal); the release
/// that added each is only known to be later than 22.05 (reference §8 rule 2).
const NEWER_THAN_22_05: &[&str] = &[
    "PreemptParameters",
    "BlockName",
    "BlockSizes",
    "MaxBatchRequeue",
    "PrologTimeout",
    "EpilogTimeout",
    "HealthCheckTimeout",
    "RestrictedCoresPerGPU",
];

/// slurm.conf keys current Slurm no longer parses (reference §8 rule 5).
const REMOVED: &[&str] =
    &["AccountingStorageLoc", "SlurmctldPlugstack", "FrontendName", "FrontendAddr", "SchedulerAuth"];

/// slurm.conf keys current Slurm parses but ignores (reference §8 rule 5).
const DEFUNCT: &[&str] = &[
    "AccountingStorageUser",
    "CoreSpecPlugin",
    "ExtSensorsType",
    "ExtSensorsFreq",
    "GetEnvTimeout",
    "JobCredentialPrivateKey",
    "JobCredentialPublicCertificate",
    "PowerParameters",
    "PowerPlugin",
];

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    sections_match_kind(loaded, out);
    let Some(slurm) = &loaded.blueprint.scheduler.slurm else { return };
    let version = slurm_version(loaded, slurm, out);
    if let Some(version) = version {
        topology(loaded, slurm, version, out);
        extra_versions(loaded, slurm, version, out);
    }
    extra_syntax(loaded, slurm, out);
    preemption(loaded, slurm, out);
    gpu_sharing(loaded, slurm, out);
    partitions(loaded, slurm, facts, out);
    durations(loaded, slurm, out);
}

fn sections_match_kind(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let scheduler = &loaded.blueprint.scheduler;
    let (own, other, has_own, has_other) = match scheduler.kind {
        SchedulerKind::Slurm => ("slurm", "kubernetes", scheduler.slurm.is_some(), scheduler.kubernetes.is_some()),
        SchedulerKind::Kubernetes => ("kubernetes", "slurm", scheduler.kubernetes.is_some(), scheduler.slurm.is_some()),
    };
    if !has_own {
        out.push(
            Diagnostic::error("scheduler-section-mismatch", format!("`kind: {own}` has no `{own}:` section"))
                .at(&loaded.source, "scheduler.kind")
                .help(format!("add `{own}:` with its settings under `scheduler:`")),
        );
    }
    if has_other {
        out.push(
            Diagnostic::error(
                "scheduler-section-mismatch",
                format!("a `{other}:` section does not apply to `kind: {own}`"),
            )
            .at(&loaded.source, format!("scheduler.{other}"))
            .help(format!("remove `{other}:`, or set `kind: {other}`")),
        );
    }
}

fn slurm_version(loaded: &LoadedBlueprint, slurm: &Slurm, out: &mut Diagnostics) -> Option<SlurmVersion> {
    let path = "scheduler.slurm.min_version";
    let Some(version) = parse_slurm_release(&slurm.min_version) else {
        out.push(
            Diagnostic::error("invalid-slurm-version", format!("`{}` is not a Slurm release", slurm.min_version))
                .at(&loaded.source, path)
                .help("write the release as a quoted string, e.g. `\"22.05\"` or `\"23.11\"`"),
        );
        return None;
    };
    if version < OLDEST_SLURM {
        out.push(
            Diagnostic::error(
                "invalid-slurm-version",
                format!("Slurm `{}` is older than toolkit supports", slurm.min_version),
            )
            .at(&loaded.source, path)
            .help("toolkit renders configs for Slurm 22.05 (Debian 12) and later: use `\"22.05\"` or newer"),
        );
    }
    Some(version)
}

fn topology(loaded: &LoadedBlueprint, slurm: &Slurm, version: SlurmVersion, out: &mut Diagnostics) {
    if slurm.topology == SlurmTopology::Block && version < BLOCK_TOPOLOGY_SINCE {
        out.push(
            Diagnostic::error(
                "slurm-feature-too-new",
                format!("`topology: block` needs Slurm 23.11, but `min_version` is `{}`", slurm.min_version),
            )
            .at(&loaded.source, "scheduler.slurm.topology")
            .help("use `topology: tree` (works on 22.05 and later), or raise `min_version` to `\"23.11\"`"),
        );
    }
}

/// `Some(canonical name)` when `key` is in `list`; Slurm keys are case-insensitive.
fn find_key(list: &'static [&'static str], key: &str) -> Option<&'static str> {
    list.iter().copied().find(|known| known.eq_ignore_ascii_case(key))
}

fn extra_versions(loaded: &LoadedBlueprint, slurm: &Slurm, version: SlurmVersion, out: &mut Diagnostics) {
    for key in slurm.extra.keys() {
        let path = format!("scheduler.slurm.extra.{key}");
        if version <= OLDEST_SLURM
            && let Some(known) = find_key(NEWER_THAN_22_05, key)
        {
            out.push(
                Diagnostic::error(
                    "slurm-extra-too-new",
                    format!(
                        "`{known}` is not a slurm.conf key in Slurm `{}`: slurmctld would refuse to start",
                        slurm.min_version
                    ),
                )
                .at(&loaded.source, &path)
                .help("remove it, or raise `min_version` to the release that introduced it"),
            );
        }
        if let Some(known) = find_key(REMOVED, key) {
            out.push(
                Diagnostic::error(
                    "slurm-extra-removed",
                    format!("`{known}` was removed from slurm.conf: current Slurm refuses to start with it"),
                )
                .at(&loaded.source, &path)
                .help("remove it; the configs must run on current Slurm too"),
            );
        }
        if let Some(known) = find_key(DEFUNCT, key) {
            out.push(
                Diagnostic::warning("slurm-extra-defunct", format!("`{known}` is ignored by current Slurm"))
                    .at(&loaded.source, &path)
                    .help("remove it"),
            );
        }
    }
}

fn extra_syntax(loaded: &LoadedBlueprint, slurm: &Slurm, out: &mut Diagnostics) {
    for (key, value) in &slurm.extra {
        let path = format!("scheduler.slurm.extra.{key}");
        let mut chars = key.chars();
        let key_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric());
        if !key_ok {
            out.push(
                Diagnostic::error("invalid-slurm-extra", format!("`{key}` is not a slurm.conf key"))
                    .at(&loaded.source, &path)
                    .help("slurm.conf keys are letters and digits, e.g. `SchedulerParameters`"),
            );
        } else if value.is_empty() || value.contains(['\n', '\r']) {
            out.push(
                Diagnostic::error("invalid-slurm-extra", format!("the value of `{key}` is empty or spans lines"))
                    .at(&loaded.source, &path)
                    .help("give a one-line value; each `extra` entry becomes one `Key=Value` line"),
            );
        }
    }
}

fn preemption(loaded: &LoadedBlueprint, slurm: &Slurm, out: &mut Diagnostics) {
    if slurm.preempt_mode == PreemptMode::Suspend {
        out.push(
            Diagnostic::error(
                "preempt-suspend",
                "`preempt_mode: suspend` keeps the GPUs of suspended jobs allocated, so a tenant cannot reclaim them",
            )
            .at(&loaded.source, "scheduler.slurm.preempt_mode")
            .help("use `requeue` (borrowed jobs restart later) or `cancel`"),
        );
    }
}

/// The compute slices of a MIG profile (`3g.40gb` → 3), or `None` when malformed.
fn mig_slices(profile: &str) -> Option<u32> {
    let profile = profile.strip_suffix("+me").unwrap_or(profile);
    let (slices, memory) = profile.split_once("g.")?;
    let memory = memory.strip_suffix("gb")?;
    let all_digits = |text: &str| !text.is_empty() && text.chars().all(|c| c.is_ascii_digit());
    if !all_digits(slices) || !all_digits(memory) || slices.len() > 1 {
        return None;
    }
    slices.parse().ok().filter(|s| (1..=MIG_SLICES_PER_GPU).contains(s))
}

fn gpu_sharing(loaded: &LoadedBlueprint, slurm: &Slurm, out: &mut Diagnostics) {
    let sharing = &slurm.gpu_sharing;
    let base = "scheduler.slurm.gpu_sharing";
    match sharing.mode {
        GpuSharingMode::Shard | GpuSharingMode::Mps => {
            if sharing.per_gpu.is_none_or(|n| n == 0) {
                let mode = if sharing.mode == GpuSharingMode::Shard { "shard" } else { "mps" };
                out.push(
                    Diagnostic::error(
                        "gpu-sharing-incomplete",
                        format!("`mode: {mode}` needs `per_gpu` of at least 1"),
                    )
                    .at(&loaded.source, format!("{base}.per_gpu"))
                    .help("set how many jobs may share one GPU, e.g. `per_gpu: 4`"),
                );
            }
        }
        GpuSharingMode::Mig => mig(loaded, slurm, out),
        GpuSharingMode::None => {}
    }
}

fn mig(loaded: &LoadedBlueprint, slurm: &Slurm, out: &mut Diagnostics) {
    let base = "scheduler.slurm.gpu_sharing";
    let profiles = &slurm.gpu_sharing.mig_profiles;
    if profiles.is_empty() {
        out.push(
            Diagnostic::error("gpu-sharing-incomplete", "`mode: mig` needs `mig_profiles`")
                .at(&loaded.source, format!("{base}.mig_profiles"))
                .help("list the MIG instances of each GPU, e.g. `mig_profiles: [3g.40gb, 2g.20gb, 1g.10gb]`"),
        );
    }
    let mut slices: u32 = 0;
    let mut all_valid = true;
    for (index, profile) in profiles.iter().enumerate() {
        if let Some(count) = mig_slices(profile) {
            slices = slices.saturating_add(count);
        } else {
            all_valid = false;
            out.push(
                Diagnostic::error("invalid-mig-profile", format!("`{profile}` is not a MIG profile"))
                    .at(&loaded.source, format!("{base}.mig_profiles[{index}]"))
                    .help("MIG profiles look like `1g.10gb`, `2g.20gb`, `3g.40gb` or `7g.80gb`"),
            );
        }
    }
    if all_valid && slices > MIG_SLICES_PER_GPU {
        out.push(
            Diagnostic::error(
                "mig-profiles-exceed-gpu",
                format!("the MIG profiles use `{slices}` compute slices, a GPU has `{MIG_SLICES_PER_GPU}`"),
            )
            .at(&loaded.source, format!("{base}.mig_profiles"))
            .help("drop or shrink profiles until their `Ng` parts add up to 7 or less"),
        );
    }
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let Some(model) = group.gpu.as_ref().and_then(|g| gpu::find(&g.model)) else { continue };
        if !model.mig {
            out.push(
                Diagnostic::error(
                    "mig-unsupported-gpu",
                    format!("GPU model `{}` of group `{}` has no MIG support", model.name, group.name),
                )
                .at(&loaded.source, format!("node_groups[{index}].gpu.model"))
                .help("use `mode: shard` or `mode: mps` to share these GPUs"),
            );
        }
    }
}

fn partitions(loaded: &LoadedBlueprint, slurm: &Slurm, facts: &Facts, out: &mut Diagnostics) {
    let base = "scheduler.slurm.partitions";
    if slurm.partitions.is_empty() {
        out.push(
            Diagnostic::error("no-partitions", "Slurm has no partitions, so no job can be submitted")
                .at(&loaded.source, base)
                .help("add `- { name: gpu, groups: [<compute group>], default: true }`"),
        );
        return;
    }
    let groups = &loaded.blueprint.node_groups;
    let group_names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut first_default: Option<usize> = None;
    for (index, partition) in slurm.partitions.iter().enumerate() {
        let path = format!("{base}[{index}]");
        if let Some(first) = names.get(partition.name.as_str()) {
            out.push(
                Diagnostic::error("duplicate-partition", format!("partition `{}` is declared twice", partition.name))
                    .at(&loaded.source, format!("{path}.name"))
                    .help(format!("rename it: `partitions[{first}]` already uses that name")),
            );
        } else {
            names.insert(&partition.name, index);
        }
        if partition.default {
            if let Some(first) = first_default {
                out.push(
                    Diagnostic::error(
                        "multiple-default-partitions",
                        format!(
                            "partitions `{}` and `{}` are both the default",
                            slurm.partitions[first].name, partition.name
                        ),
                    )
                    .at(&loaded.source, format!("{path}.default"))
                    .help("keep `default: true` on one partition"),
                );
            } else {
                first_default = Some(index);
            }
        }
        if partition.groups.is_empty() {
            out.push(
                Diagnostic::error("empty-partition", format!("partition `{}` has no node groups", partition.name))
                    .at(&loaded.source, format!("{path}.groups"))
                    .help("list the compute groups whose nodes it schedules"),
            );
        }
        for (member, name) in partition.groups.iter().enumerate() {
            match facts.groups.get(name) {
                None => out.push(
                    Diagnostic::error("unknown-group", format!("node group `{name}` does not exist"))
                        .at(&loaded.source, format!("{path}.groups[{member}]"))
                        .help(unknown_name_help(name, group_names.iter().copied(), "node group")),
                ),
                Some(&group) if !groups[group].roles.contains(&Role::Compute) => out.push(
                    Diagnostic::warning(
                        "partition-group-not-compute",
                        format!("partition `{}` lists group `{name}`, which has no `compute` role", partition.name),
                    )
                    .at(&loaded.source, format!("{path}.groups[{member}]"))
                    .help(format!("only compute nodes run slurmd: add `compute` to `{name}` or remove it here")),
                ),
                Some(_) => {}
            }
        }
    }
    if first_default.is_none() {
        out.push(
            Diagnostic::warning("no-default-partition", "no partition is the default: jobs must name one with `-p`")
                .at(&loaded.source, base)
                .help("add `default: true` to the main partition"),
        );
    }
}

/// Whether `text` is a Slurm time: `INFINITE`, `UNLIMITED`, `M`, `M:S`, `H:M:S`,
/// `D-H`, `D-H:M` or `D-H:M:S` (slurm.conf(5)).
pub(super) fn is_slurm_time(text: &str) -> bool {
    if text.eq_ignore_ascii_case("infinite") || text.eq_ignore_ascii_case("unlimited") {
        return true;
    }
    let number = |part: &str| !part.is_empty() && part.len() <= 9 && part.chars().all(|c| c.is_ascii_digit());
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (Some(days), clock),
        None => (None, text),
    };
    let fields: Vec<&str> = clock.split(':').collect();
    if !fields.iter().all(|field| number(field)) {
        return false;
    }
    match days {
        Some(days) => number(days) && (1..=3).contains(&fields.len()),
        None => (1..=3).contains(&fields.len()),
    }
}

fn durations(loaded: &LoadedBlueprint, slurm: &Slurm, out: &mut Diagnostics) {
    let mut times: Vec<(String, &str)> = slurm
        .partitions
        .iter()
        .enumerate()
        .filter_map(|(index, p)| {
            p.max_time.as_deref().map(|t| (format!("scheduler.slurm.partitions[{index}].max_time"), t))
        })
        .collect();
    if let Some(half_life) = &slurm.fairshare_half_life {
        times.push(("scheduler.slurm.fairshare_half_life".to_owned(), half_life));
    }
    for (path, text) in times {
        if !is_slurm_time(text) {
            out.push(
                Diagnostic::error("invalid-time", format!("`{text}` is not a Slurm time"))
                    .at(&loaded.source, path)
                    .help("write `INFINITE`, minutes (`90`), `HH:MM:SS` or `D-HH:MM:SS` (e.g. `7-00:00:00`, `7-0`)"),
            );
        }
    }
}
