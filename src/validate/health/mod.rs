//! Continuous node health: the node-scope validators that have a `health` probe,
//! turned into one POSIX `sh` program per node that runs on the node itself — fast
//! checks from Slurm's `HealthCheckProgram`, slow ones from a systemd timer — writes
//! `toolkit_health_*` metrics for node exporter, and drains its own node (resuming it
//! only when toolkit's health check drained it).
//!
//! Stage: validate (render-time, pure). Input: the validator [`Catalog`], the
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

pub mod prometheus;
pub mod resources;
pub mod script;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::blueprint::schema::Role;
use crate::model::Model;

use super::catalog::Catalog;
use super::derived::{self, DeriveInput};
use super::expr;
use super::run::{self, Disposition, LimitSource, RunOptions};
use super::spec::{Cadence, FAST_PROBE_TIMEOUT_SECONDS, HealthAction, Severity, ValidatorSpec};
use super::subjects::Site;

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
    let site = Site::everything(model);
    let only: BTreeSet<String> = check_ids(catalog).map(str::to_owned).collect();
    let options = RunOptions { only: Some(only), ..RunOptions::default() };
    let planned = run::plan(catalog, model, &site, &options)?;
    let compute: Vec<&str> = model
        .nodes
        .iter()
        .filter(|node| model.groups[node.group].has_role(Role::Compute))
        .map(|n| n.name.as_str())
        .collect();
    let mut by_node: BTreeMap<&str, Vec<Check>> = compute.iter().map(|name| (*name, Vec::new())).collect();
    let mut problems = Vec::new();
    for item in &planned {
        let Disposition::Run { expansion, limits, .. } = &item.disposition else { continue };
        let Some(health) = &item.spec.health else { continue };
        let timeout = health.timeout.unwrap_or(match health.cadence {
            Cadence::Fast => FAST_PROBE_TIMEOUT_SECONDS,
            Cadence::Slow => item.spec.timeout,
        });
        let command = match expr::Command::compile(&health.probe) {
            Ok(command) => command,
            Err(problem) => {
                problems.push(format!("{}: the health probe: {problem}", item.spec.id));
                continue;
            }
        };
        for subject in &expansion.subjects {
            let Some(checks) = by_node.get_mut(subject.host.as_str()) else { continue };
            let nodes: Vec<&crate::model::Node> = subject.nodes.iter().map(|&index| &model.nodes[index]).collect();
            let input =
                DeriveInput { model, nodes: &nodes, switch: subject.switch, selected: expansion.selected.len() };
            let resolved = match resolve(item.spec, limits, &input) {
                Ok(resolved) => resolved,
                Err(problem) => {
                    problems.push(format!("{} on {}: {problem}", item.spec.id, subject.name));
                    continue;
                }
            };
            let skipped = reads_gpus(item.spec)
                .then(|| fake_gpus.contains(&subject.host))
                .filter(|fake| *fake)
                .map(|_| "the node's GPUs are device files (`fake_gpu_devices`)".to_owned());
            let probe = if skipped.is_some() {
                None
            } else {
                match command.render(&subject.context) {
                    Ok(text) => Some(text),
                    Err(problem) => {
                        problems.push(format!("{}: the health probe for {}: {problem}", item.spec.id, subject.name));
                        continue;
                    }
                }
            };
            checks.push(Check {
                id: item.spec.id.clone(),
                subject: subject.name.clone(),
                cadence: health.cadence,
                action: settings.action(&item.spec.id, health.on_failure),
                timeout,
                probe,
                skipped,
                limits: resolved,
            });
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(by_node
        .into_iter()
        .map(|(node, mut checks)| {
            checks.sort_by_key(|check| check.cadence);
            NodeChecks { node: node.to_owned(), checks }
        })
        .collect())
}

/// GPU validators read real GPUs: on nodes whose GPUs are device files (labs) they are
/// rendered but skipped, as the rollout's post-change checks skip them.
fn reads_gpus(spec: &ValidatorSpec) -> bool {
    spec.requires.contains(&super::spec::Requirement::Gpu)
}

fn resolve(spec: &ValidatorSpec, limits: &[run::Limit], input: &DeriveInput<'_>) -> Result<Vec<ResolvedLimit>, String> {
    limits
        .iter()
        .map(|limit| {
            let value = match &limit.source {
                LimitSource::Fixed { value, .. } | LimitSource::Blueprint { value, .. } => *value,
                LimitSource::Derived(name) => derived::derive(name, input)?.value,
                // The node's script compares with numbers fixed at render time.
                LimitSource::Measurement { name, .. } => {
                    return Err(format!(
                        "the limit of `{}` is the measurement `{name}`, which a node health check cannot compare with",
                        limit.measurement
                    ));
                }
            };
            Ok(ResolvedLimit {
                measurement: limit.measurement.clone(),
                comparison: limit.comparison.as_str(),
                value,
                warning: limit.severity == Severity::Warning,
            })
        })
        .collect::<Result<_, String>>()
        .map_err(|problem| format!("`{}`: {problem}", spec.id))
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
    let nodes = plan(&catalog, model, settings, &fake_gpus).map_err(|problems| {
        Diagnostics(
            problems
                .into_iter()
                .map(|problem| {
                    Diagnostic::error("health-plan", problem)
                        .help("the node health checks come from validators/*.yaml and `monitoring.health`")
                })
                .collect(),
        )
    })?;
    let mut resources = Vec::new();
    let by_node = resources::resources(&nodes, settings, renderer, &mut resources).map_err(|error| {
        Diagnostics(vec![Diagnostic::error("render-failed", error.to_string()).help("a health template failed")])
    })?;
    Ok(Programs { resources, by_node })
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
