//! Choosing what runs: the validators of a run (blueprint `acceptance`, `--only`),
//! their threshold overrides, their requirements against the model, their subjects.
//!
//! Stage: validate (pure, no network). Input: the catalog, the [`Model`], the site
//! and the [`RunOptions`]. Output: one [`Planned`] per validator, each with its
//! [`Disposition`] (run on these subjects, or skipped and why).

use std::collections::{BTreeMap, BTreeSet};

use super::{Disposition, Limit, LimitSource, Planned, RunOptions};
use crate::blueprint::schema::{AcceptanceMode, FabricKind, SchedulerKind};
use crate::model::Model;
use crate::validate::catalog::Catalog;
use crate::validate::derived;
use crate::validate::spec::{Requirement, ValidatorSpec};
use crate::validate::subjects::{self, Site};

/// Selects, checks and expands the validators of a run (no network).
///
/// # Errors
/// Every problem with the selection: unknown ids in `--only` or the blueprint,
/// unknown override names, unknown `--nodes`.
pub fn plan<'a>(
    catalog: &'a Catalog,
    model: &Model,
    site: &Site,
    options: &RunOptions,
) -> Result<Vec<Planned<'a>>, Vec<String>> {
    let mut problems = Vec::new();
    let ids: Vec<&str> = catalog.ids().collect();
    let unknown = |id: &str| match crate::diagnostic::did_you_mean(id, ids.iter().copied()) {
        Some(close) => format!("unknown validator `{id}` (did you mean `{close}`?)"),
        None => format!("unknown validator `{id}`; known: {}", ids.join(", ")),
    };
    if let Some(only) = &options.only {
        problems
            .extend(only.iter().filter(|id| catalog.get(id).is_none()).map(|id| format!("--only: {}", unknown(id))));
    }
    if let Some(nodes) = &options.nodes {
        let known: BTreeSet<&str> = model.nodes.iter().map(|node| node.name.as_str()).collect();
        for name in nodes.iter().filter(|name| !known.contains(name.as_str())) {
            let hint = crate::diagnostic::did_you_mean(name, known.iter().copied())
                .map(|close| format!(" (did you mean `{close}`?)"))
                .unwrap_or_default();
            problems.push(format!("--nodes: `{name}` is not a node of `{}`{hint}", model.name));
        }
    }
    let acceptance = &model.blueprint.acceptance;
    let mut references: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, reference) in acceptance.validators.iter().enumerate() {
        let at = format!("acceptance.validators[{index}]");
        let Some(spec) = catalog.get(&reference.id) else {
            problems.push(format!("{at}.id: {}", unknown(&reference.id)));
            continue;
        };
        references.insert(reference.id.as_str(), index);
        let allowed = spec.overridable();
        for key in reference.thresholds.keys().filter(|key| !allowed.contains(key.as_str())) {
            problems.push(format!(
                "{at}.thresholds.{key}: `{}` has no threshold or parameter `{key}`; it has: {}",
                spec.id,
                allowed.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut planned = Vec::new();
    for spec in &catalog.specs {
        let reference = references.get(spec.id.as_str()).map(|&index| (index, &acceptance.validators[index]));
        let disposition = match (&options.only, reference) {
            (Some(only), _) if !only.contains(&spec.id) => continue,
            (None, Some((index, reference))) if reference.skip => {
                Disposition::Skip(format!("skipped by the blueprint (`acceptance.validators[{index}].skip`)"))
            }
            (None, None) if acceptance.mode == AcceptanceMode::Explicit => continue,
            _ => dispose(spec, model, site, options, reference),
        };
        planned.push(Planned { spec, disposition });
    }
    Ok(planned)
}

fn dispose(
    spec: &ValidatorSpec,
    model: &Model,
    site: &Site,
    options: &RunOptions,
    reference: Option<(usize, &crate::blueprint::schema::ValidatorRef)>,
) -> Disposition {
    if let Some(reason) = unmet(model, &spec.requires) {
        return Disposition::Skip(reason);
    }
    let mut params = spec.params.clone();
    let mut overrides: BTreeMap<&str, (f64, String)> = BTreeMap::new();
    if let Some((index, reference)) = reference {
        for (key, value) in &reference.thresholds {
            let path = format!("acceptance.validators[{index}].thresholds.{key}");
            if let Some(param) = params.get_mut(key) {
                *param = *value;
            }
            overrides.insert(key.as_str(), (*value, path));
        }
    }
    let limits = spec
        .thresholds
        .iter()
        .filter(|threshold| unmet(model, &threshold.when).is_none())
        .filter(|threshold| spec.measurement(&threshold.measurement).is_some_and(|m| unmet(model, &m.when).is_none()))
        .map(|threshold| Limit {
            measurement: threshold.measurement.clone(),
            comparison: threshold.comparison,
            source: match (overrides.get(threshold.measurement.as_str()), threshold.value, &threshold.derived) {
                (Some((value, key)), _, _) => LimitSource::Blueprint { value: *value, key: key.clone() },
                (None, None, None) if let Some(name) = &threshold.of => LimitSource::Measurement {
                    name: name.clone(),
                    label: spec.measurement(name).map_or_else(|| name.clone(), |m| m.label.clone()),
                },
                (None, Some(value), _) => {
                    LimitSource::Fixed { value, reference: threshold.reference.clone().unwrap_or_default() }
                }
                (None, None, Some(name)) => LimitSource::Derived(name.clone()),
                (None, None, None) => LimitSource::Derived(String::new()),
            },
            severity: threshold.severity.unwrap_or(spec.severity),
        })
        .collect();
    match subjects::expand(spec, model, site, options.nodes.as_ref(), &params) {
        Ok(expansion) => match &expansion.empty_reason {
            Some(reason) => Disposition::Skip(reason.clone()),
            None => Disposition::Run { expansion, params, limits },
        },
        Err(reason) => Disposition::Fail(format!("cannot run: {reason}")),
    }
}

/// Why the cluster does not meet `requirements`, or `None` when it does.
#[must_use]
pub fn unmet(model: &Model, requirements: &[Requirement]) -> Option<String> {
    let slurm = model.blueprint.scheduler.kind == SchedulerKind::Slurm;
    requirements.iter().find_map(|requirement| {
        let (met, why) = match requirement {
            Requirement::Gpu => (model.total_gpus() > 0, "needs GPUs: no node group has any"),
            Requirement::Nvlink => (
                model.groups.iter().any(|group| group.gpu.is_some_and(|gpu| gpu.nvlink_gbps > 0)),
                "needs NVLink: no node group's GPUs have it",
            ),
            Requirement::Infiniband => {
                (model.fabric.kind == FabricKind::Infiniband, "applies to InfiniBand fabrics; this one is RoCE")
            }
            Requirement::Roce => {
                (model.fabric.kind == FabricKind::Roce, "applies to RoCE fabrics; this one is InfiniBand")
            }
            Requirement::RoceQos => (
                model.fabric.kind == FabricKind::Roce && model.fabric.roce.is_some() && model.groups.iter().any(has_ofed),
                "needs a RoCE fabric with `roce:` QoS and a node group with DOCA-OFED or MLNX_OFED (`software.network`)",
            ),
            Requirement::Rails => (
                model.nodes.iter().any(|node| !node.rails.is_empty()),
                "needs nodes on the compute fabric: no node has rail NICs",
            ),
            Requirement::Slurm => (slurm, "needs Slurm as the scheduler"),
            Requirement::Accounting => (
                slurm && model.blueprint.scheduler.slurm.as_ref().is_some_and(|settings| settings.accounting),
                "needs Slurm accounting (`scheduler.slurm.accounting: true`)",
            ),
            Requirement::Tenants => (!model.tenants.is_empty(), "needs tenants: the blueprint declares none"),
            Requirement::GpuDriver => (
                model.groups.iter().any(|group| group.software.as_ref().is_some_and(|stack| stack.driver.is_some())),
                "needs a GPU driver in the blueprint (`software.gpu_driver`)",
            ),
            Requirement::SharedFilesystem => (
                derived::benchmark_filesystem(model).is_some(),
                "needs a shared filesystem mounted by the compute nodes: `storage.filesystems` declares none",
            ),
            Requirement::Monitoring => (
                model.blueprint.monitoring.as_ref().is_some_and(|section| section.enabled),
                "needs monitoring: the blueprint has no `monitoring` section, or it is off",
            ),
        };
        (!met).then(|| why.to_owned())
    })
}

/// Whether `group` installs an OFED stack (from NVIDIA's repository), which brings
/// `mlnx_qos` and `cma_roce_tos`.
fn has_ofed(group: &crate::model::Group) -> bool {
    group.software.as_ref().is_some_and(|stack| stack.network_repo().is_some())
}
