//! Continuous node health: the node-scope validators that have a `health` probe,
//! turned into one POSIX `sh` program per node that runs on the node itself — fast
//! checks from Slurm's `HealthCheckProgram`, slow ones from a systemd timer — writes
//! `toolkit_health_*` metrics for node exporter, and drains its own node (resuming it
//! only when toolkit's health check drained it).
//!
//! Stage: health (render-time, pure; `deploy` calls it). Input: the validator [`Catalog`], the
//! [`Model`], the blueprint's [`Settings`] and the nodes whose GPUs are device files
//! only. Output: [`NodeChecks`] per node, which [`script`] lays out as text and
//! [`resources`] as files and units.
//!
//! Why a rendered script and not toolkit's binary on every node: nothing to install or
//! upgrade on thousands of nodes, nothing that can be out of date with the blueprint
//! (the script is a deployed file like any other, planned and diffed), and a fast check
//! costs a few `cat`s and one `awk` per check, far inside Slurm's 60 s limit. What is
//! shared with `toolkit validate` is everything but the parsing: the check ids,
//! subjects, the measurement names, the thresholds with their limits resolved for the
//! node (derived from the model or overridden in the blueprint), and the `requires` and
//! `when` gates. Each probe reads the validator's own command or the same kernel
//! counters and prints the measurements, so a `toolkit validate` and a health check
//! that disagree point at a probe, not at two sets of thresholds.

pub mod availability;
mod planner;
pub mod prometheus;
pub mod repair;
pub mod resources;
pub mod script;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::model::Model;

use crate::validate::catalog::Catalog;
use crate::validate::spec::{Cadence, HealthAction};
use planner::Planner;

/// The start of every drain reason the health checks set; only nodes whose reason
/// starts with it are resumed by them.
pub const REASON_PREFIX: &str = "toolkit:health";

/// What takes a node whose `drain` check fails out of service, and what runs the
/// fast checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeControl {
    /// slurmd runs the fast checks (`HealthCheckProgram`); `scontrol` drains and resumes.
    #[default]
    Slurm,
    /// A systemd timer runs the fast checks; the node cordons and uncordons itself
    /// through the API server with the kubelet's credentials (`kubectl`), marked by
    /// the annotation [`CORDON_ANNOTATION`].
    Kubernetes,
}

/// The annotation on a Node that toolkit's health checks cordoned: `<checks>: <detail>`.
/// Only a node that carries it is uncordoned by them.
pub const CORDON_ANNOTATION: &str = "toolkit.io/health";

/// What a failing check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OnFailure {
    /// Take the node out of service (Slurm drain, Kubernetes cordon) with the check in
    /// the reason (and alert).
    Drain,
    /// Only the metric (alerting is Prometheus' job).
    Alert,
}

impl OnFailure {
    /// The name in the blueprint and the metrics' `action` label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Drain => "drain",
            Self::Alert => "alert",
        }
    }
}

/// The blueprint's `monitoring.health`, with durations parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Slurm `HealthCheckInterval`.
    pub fast_interval: Duration,
    /// Period of the slow checks' systemd timer.
    pub slow_interval: Duration,
    /// Period of the cluster-scope checks.
    pub cluster_interval: Duration,
    /// What a failure does unless `checks` says otherwise.
    pub on_failure: OnFailure,
    /// Per check id.
    pub checks: BTreeMap<String, OnFailure>,
    /// Slurm or Kubernetes, from the blueprint's scheduler.
    pub control: NodeControl,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            fast_interval: Duration::from_mins(5),
            slow_interval: Duration::from_hours(1),
            cluster_interval: Duration::from_mins(10),
            on_failure: OnFailure::Drain,
            checks: BTreeMap::new(),
            control: NodeControl::Slurm,
        }
    }
}

impl Settings {
    /// The blueprint's `monitoring.health`, or `None` without a `monitoring` section
    /// (no health checks are deployed then). With `monitoring.enabled: false` the
    /// checks still run and drain; only Prometheus and Alertmanager are left out.
    ///
    /// # Errors
    /// A duration that does not parse (lint reports it with its location first).
    pub fn from_blueprint(blueprint: &crate::blueprint::schema::Blueprint) -> Result<Option<Self>, String> {
        use crate::blueprint::duration::parse;
        use crate::blueprint::schema::OnFailure as Declared;
        let Some(monitoring) = &blueprint.monitoring else { return Ok(None) };
        let health = &monitoring.health;
        let action = |declared: Declared| match declared {
            Declared::Drain => OnFailure::Drain,
            Declared::Alert => OnFailure::Alert,
        };
        let interval =
            |key: &str, text: &str| parse(text).map_err(|problem| format!("monitoring.health.{key}: {problem}"));
        Ok(Some(Self {
            fast_interval: interval("fast_interval", &health.fast_interval)?,
            slow_interval: interval("slow_interval", &health.slow_interval)?,
            cluster_interval: interval("cluster_interval", &health.cluster_interval)?,
            on_failure: action(health.on_failure),
            checks: health.checks.iter().map(|(id, declared)| (id.clone(), action(*declared))).collect(),
            control: match blueprint.scheduler.kind {
                crate::blueprint::schema::SchedulerKind::Slurm => NodeControl::Slurm,
                crate::blueprint::schema::SchedulerKind::Kubernetes => NodeControl::Kubernetes,
            },
        }))
    }

    /// What a failure of `id` does: the blueprint's word for it, else the check's
    /// own default, else the blueprint's `on_failure`.
    #[must_use]
    pub fn action(&self, id: &str, declared: Option<HealthAction>) -> OnFailure {
        let declared = declared.map(|action| match action {
            HealthAction::Drain => OnFailure::Drain,
            HealthAction::Alert => OnFailure::Alert,
        });
        self.checks.get(id).copied().or(declared).unwrap_or(self.on_failure)
    }
}

/// One limit, resolved for one subject: `measurement comparison value`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedLimit {
    /// Measurement name, as the probe prints it.
    pub measurement: String,
    /// `>=`, `<=` or `==`.
    pub comparison: &'static str,
    /// The limit.
    pub value: f64,
    /// A missed warning limit is reported, not failed.
    pub warning: bool,
}

/// One health check of one subject on the node.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Validator id.
    pub id: String,
    /// The subject (`node01`, `node01+node02/rail1`).
    pub subject: String,
    /// When it runs.
    pub cadence: Cadence,
    /// What a failure does.
    pub action: OnFailure,
    /// Seconds the probe may run.
    pub timeout: u64,
    /// The probe, rendered for the subject; `None` when skipped.
    pub probe: Option<String>,
    /// Why it does not run here, when it does not.
    pub skipped: Option<String>,
    /// Limits the probe's measurements must meet.
    pub limits: Vec<ResolvedLimit>,
}

/// The health checks of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeChecks {
    /// Node (Slurm node name and host name).
    pub node: String,
    /// Its checks, fast first, in catalog order.
    pub checks: Vec<Check>,
}

impl NodeChecks {
    /// Whether any check of `cadence` exists (run or skipped).
    #[must_use]
    pub fn has(&self, cadence: Cadence) -> bool {
        self.checks.iter().any(|check| check.cadence == cadence)
    }
}

/// Ids of the validators with a health probe, in catalog order.
pub fn check_ids(catalog: &Catalog) -> impl Iterator<Item = &str> {
    catalog.specs.iter().filter(|spec| spec.health.is_some()).map(|spec| spec.id.as_str())
}

/// The checks of every compute node.
///
/// # Errors
/// Problems selecting the validators (unknown ids in the blueprint's acceptance
/// overrides), a probe that does not render, or a derived limit that cannot be computed.
pub fn plan(
    catalog: &Catalog,
    model: &Model,
    settings: &Settings,
    fake_gpus: &BTreeSet<String>,
) -> Result<Vec<NodeChecks>, Vec<String>> {
    let (planner, mut problems) = Planner::new(catalog, model, settings, fake_gpus)?;
    let mut views = crate::validate::subjects::NodeViews::new(model);
    let nodes = (0..planner.nodes.len()).map(|at| planner.node(at, &mut views, &mut problems)).collect();
    problems.into_result().map(|()| nodes)
}

/// The health program of every compute node, made from the model alone so that it
/// renders beside the other stages; [`Programs::attach`] adds it to them.
///
/// # Errors
/// Diagnostics for a validator catalog that does not load, checks that cannot be
/// planned, or a template that fails.
pub fn programs(
    model: &Model,
    inventory: Option<&crate::inventory::Inventory>,
    renderer: &crate::render::Renderer,
) -> Result<Programs, crate::diagnostic::Diagnostics> {
    use crate::diagnostic::{Diagnostic, Diagnostics};
    let settings = match Settings::from_blueprint(&model.blueprint) {
        Ok(Some(settings)) => settings,
        Ok(None) => return Ok(Programs::default()),
        Err(problem) => {
            return Err(Diagnostics(vec![
                Diagnostic::error("health-settings", problem).help("`toolkit lint` locates the value"),
            ]));
        }
    };
    let fake_gpus: BTreeSet<String> = inventory
        .map(|inventory| {
            inventory.hosts.iter().filter(|(_, host)| host.fake_gpu_devices).map(|(name, _)| name.clone()).collect()
        })
        .unwrap_or_default();
    let settings = &settings;
    let catalog = Catalog::builtin()?;
    let (planner, mut problems) = Planner::new(&catalog, model, settings, &fake_gpus).map_err(plan_failed)?;
    let programs = planner.programs(renderer, PROGRAM_RUN, &mut problems);
    problems.into_result().map_err(plan_failed)?;
    let mut programs = programs.map_err(|error| {
        Diagnostics(vec![Diagnostic::error("render-failed", error.to_string()).help("a health template failed")])
    })?;
    programs.resources.extend(repair_service(&catalog, model, inventory, settings)?);
    Ok(programs)
}

/// The repair service on the Slurm controller, with `monitoring.repair` (none on
/// Kubernetes, where no Slurm reboots or drains).
fn repair_service(
    catalog: &Catalog,
    model: &Model,
    inventory: Option<&crate::inventory::Inventory>,
    settings: &Settings,
) -> Result<Vec<crate::resource::Resource>, crate::diagnostic::Diagnostics> {
    use crate::diagnostic::{Diagnostic, Diagnostics};
    let policy = repair::policy(catalog, model, inventory).map_err(|problem| {
        Diagnostics(vec![Diagnostic::error("repair-settings", problem).help("`toolkit lint` locates the value")])
    })?;
    let Some(policy) = policy.filter(|_| settings.control == NodeControl::Slurm) else { return Ok(Vec::new()) };
    let Some((controller, address)) = repair_host(model, inventory) else { return Ok(Vec::new()) };
    Ok(repair::resources::resources(&policy, &controller, &address))
}

/// The Slurm controller and the address Alertmanager reaches its webhook at (the
/// inventory's, else the planned management address).
#[must_use]
pub fn repair_host(model: &Model, inventory: Option<&crate::inventory::Inventory>) -> Option<(String, String)> {
    let controller = model.first_with(crate::blueprint::schema::Role::Controller)?;
    let address = inventory
        .and_then(|inventory| inventory.hosts.get(&controller.name))
        .map_or_else(|| controller.mgmt_address.to_string(), |host| host.address.clone());
    Some((controller.name.clone(), address))
}

/// Compute nodes whose health programs one thread makes at a time.
const PROGRAM_RUN: usize = 128;

/// The diagnostics of checks that cannot be planned.
fn plan_failed(problems: Vec<String>) -> crate::diagnostic::Diagnostics {
    use crate::diagnostic::{Diagnostic, Diagnostics};
    Diagnostics(
        problems
            .into_iter()
            .map(|problem| {
                Diagnostic::error("health-plan", problem)
                    .help("the node health checks come from validators/*.yaml and `monitoring.health`")
            })
            .collect(),
    )
}

/// Every compute node's health program: its resources, and per node the one its
/// slurmd waits for. None without a `monitoring` section.
#[derive(Debug, Default)]
pub struct Programs {
    resources: Vec<crate::resource::Resource>,
    by_node: Vec<(String, crate::resource::ResourceId)>,
}

impl Programs {
    /// Appends the programs to the rendered resources `out`, each node's slurmd
    /// after its node's program (slurmd runs it).
    pub fn attach(self, out: &mut Vec<crate::resource::Resource>) {
        // Each node's slurmd, found in one pass: a search per node was quadratic (at
        // 4,096 nodes 4,096 scans of ~230,000 resources, ~1 s of a plan).
        let slurmd_at: std::collections::HashMap<&str, usize, foldhash::fast::RandomState> = out
            .iter()
            .enumerate()
            .filter(|(_, resource)| {
                matches!(&*resource.desired, crate::resource::Desired::Service { name, .. } if name == "slurmd")
            })
            .map(|(index, resource)| (resource.target(), index))
            .collect();
        let slurmd_at: Vec<(usize, crate::resource::ResourceId)> = self
            .by_node
            .into_iter()
            .filter_map(|(node, program)| slurmd_at.get(node.as_str()).map(|&index| (index, program)))
            .collect();
        for (index, program) in slurmd_at {
            out[index].depends_on.push(program);
        }
        out.extend(self.resources);
    }
}

#[cfg(test)]
mod tests;
