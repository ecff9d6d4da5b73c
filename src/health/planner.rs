//! The health checks of the compute nodes, planned once for all of them and made node
//! by node: each node's checks (a rendered probe per subject) are laid out as its
//! program and dropped before the next node's are made.
//!
//! Stage: health (render-time, pure; `deploy` calls it). Input: the validator [`Catalog`], the
//! [`Model`] and the blueprint's [`Settings`]. Output: [`NodeChecks`] one node at a
//! time, or every node's [`Programs`].

use std::collections::BTreeSet;

use super::resources;
use super::{Check, NodeChecks, Programs, ResolvedLimit, Settings, check_ids};
use crate::blueprint::schema::Role;
use crate::model::Model;
use crate::validate::catalog::Catalog;
use crate::validate::derived::{self, DeriveInput};
use crate::validate::expr;
use crate::validate::run::{self, Disposition, LimitSource, RunOptions};
use crate::validate::spec::{Cadence, FAST_PROBE_TIMEOUT_SECONDS, HealthSpec, Severity, ValidatorSpec};
use crate::validate::subjects::{Expansion, NodeViews, Site};

/// The health checks of the compute nodes, planned once for all of them: each node's
/// are made when asked for ([`Planner::node`]), so that a node's checks (a rendered
/// probe per subject, ~14 per node) are made, laid out and dropped one node at a time
/// rather than held for every node at once (at 32,768 nodes, most of a plan's peak).
pub(super) struct Planner<'a> {
    model: &'a Model,
    settings: &'a Settings,
    fake_gpus: &'a BTreeSet<String>,
    /// The validators with a health probe that run, in catalog order.
    items: Vec<Item<'a>>,
    /// The compute nodes by name, each with its subjects as (item, subject) positions
    /// in the order a check list has them before it is sorted by cadence.
    pub(super) nodes: Vec<(&'a str, Vec<(u32, u32)>)>,
}

/// One validator's probe and subjects.
struct Item<'a> {
    spec: &'a ValidatorSpec,
    health: &'a HealthSpec,
    timeout: u64,
    command: expr::Command,
    expansion: Expansion,
    limits: Vec<run::Limit>,
}

/// Problems found while planning, each at the (item, subject) position whose check
/// it stops: reported in the order a validator-by-validator pass finds them, however
/// the nodes were visited.
#[derive(Default)]
pub(super) struct Problems(Vec<((u32, u32), String)>);

impl Problems {
    pub(super) fn push(&mut self, at: (u32, u32), problem: String) {
        self.0.push((at, problem));
    }

    /// `Ok` without problems, else every one in order.
    pub(super) fn into_result(mut self) -> Result<(), Vec<String>> {
        if self.0.is_empty() {
            return Ok(());
        }
        // Stable: one subject's problems keep the order they were found in.
        self.0.sort_by_key(|(at, _)| *at);
        Err(self.0.into_iter().map(|(_, problem)| problem).collect())
    }
}

impl<'a> Planner<'a> {
    /// The planner, and the problems of whole validators (a probe that does not compile).
    pub(super) fn new(
        catalog: &'a Catalog,
        model: &'a Model,
        settings: &'a Settings,
        fake_gpus: &'a BTreeSet<String>,
    ) -> Result<(Self, Problems), Vec<String>> {
        let site = Site::everything(model);
        let only: BTreeSet<String> = check_ids(catalog).map(str::to_owned).collect();
        let options = RunOptions { only: Some(only), ..RunOptions::default() };
        let planned = run::plan(catalog, model, &site, &options)?;
        let mut names: Vec<&str> = model
            .nodes
            .iter()
            .filter(|node| model.groups[node.group].has_role(Role::Compute))
            .map(|n| n.name.as_str())
            .collect();
        names.sort_unstable();
        let slot: std::collections::HashMap<&str, usize, foldhash::fast::RandomState> =
            names.iter().enumerate().map(|(at, name)| (*name, at)).collect();
        let mut nodes: Vec<(&str, Vec<(u32, u32)>)> = names.into_iter().map(|name| (name, Vec::new())).collect();
        let mut items = Vec::new();
        let mut problems = Problems::default();
        for planned in planned {
            let Disposition::Run { expansion, limits, .. } = planned.disposition else { continue };
            let Some(health) = &planned.spec.health else { continue };
            let at = items.len() as u32;
            let command = match expr::Command::compile(&health.probe) {
                Ok(command) => command,
                Err(problem) => {
                    problems.push((at, 0), format!("{}: the health probe: {problem}", planned.spec.id));
                    continue;
                }
            };
            for position in 0..expansion.len() {
                if let Some(&node) = slot.get(expansion.host(position, model)) {
                    nodes[node].1.push((at, position as u32));
                }
            }
            let timeout = health.timeout.unwrap_or(match health.cadence {
                Cadence::Fast => FAST_PROBE_TIMEOUT_SECONDS,
                Cadence::Slow => planned.spec.timeout,
            });
            items.push(Item { spec: planned.spec, health, timeout, command, expansion, limits });
        }
        Ok((Self { model, settings, fake_gpus, items, nodes }, problems))
    }

    /// Every node's program, made node by node in runs of `run` nodes on every core,
    /// each node's checks laid out as its script and dropped; the runs join in node
    /// order, as one pass over the nodes makes them. What stops a check goes to
    /// `problems`: once there is one, nothing more renders, and the programs are of no
    /// use. Else the first template that fails, in node order.
    pub(super) fn programs(
        &self,
        renderer: &crate::render::Renderer,
        run: usize,
        problems: &mut Problems,
    ) -> Result<Programs, crate::render::RenderError> {
        let timers = resources::Timers::new(self.settings, renderer)?;
        let runs = crate::parallel::runs(self.nodes.len(), run);
        let made = crate::parallel::ordered(&runs, |run| {
            // Each run's nodes share one copy of what they all want (the program's
            // directory, the timers), as a render stage's resources do, rather than
            // holding a copy per node until the plan shares them.
            let (made, _) = crate::resource::SharedDesired::during(|| {
                let mut problems = Problems::default();
                let mut made = Ok(Programs::default());
                let mut views = NodeViews::new(self.model);
                for at in run.clone() {
                    let checks = self.node(at, &mut views, &mut problems);
                    if let Ok(programs) = &mut made
                        && problems.0.is_empty()
                    {
                        match resources::node(&checks, self.settings, &timers, renderer, &mut programs.resources) {
                            Ok(program) => programs.by_node.push((checks.node, program)),
                            Err(error) => made = Err(error),
                        }
                    }
                }
                (problems, made)
            });
            made
        });
        let mut programs = Ok(Programs::default());
        for (run_problems, made) in made {
            problems.0.extend(run_problems.0);
            match (&mut programs, made) {
                (Ok(all), Ok(made)) => {
                    all.resources.extend(made.resources);
                    all.by_node.extend(made.by_node);
                }
                (Ok(_), Err(error)) => programs = Err(error),
                (Err(_), _) => {}
            }
        }
        programs
    }

    /// The checks of the node at `at` of [`Planner::nodes`], fast first; what stops a
    /// check goes to `problems`. The node views `views` has made are shared with the
    /// nodes planned before it.
    pub(super) fn node(&self, at: usize, views: &mut NodeViews<'_>, problems: &mut Problems) -> NodeChecks {
        let (node, subjects) = &self.nodes[at];
        let mut checks = Vec::with_capacity(subjects.len());
        for &(item_at, subject_at) in subjects {
            let item = &self.items[item_at as usize];
            let subject = item.expansion.subject(subject_at as usize, views);
            let spec = item.spec;
            let nodes: Vec<&crate::model::Node> = subject.nodes.iter().map(|&index| &self.model.nodes[index]).collect();
            let input = DeriveInput {
                model: self.model,
                nodes: &nodes,
                switch: subject.switch,
                selected: item.expansion.selected.len(),
            };
            let resolved = match resolve(spec, &item.limits, &input) {
                Ok(resolved) => resolved,
                Err(problem) => {
                    problems.push((item_at, subject_at), format!("{} on {}: {problem}", spec.id, subject.name));
                    continue;
                }
            };
            let skipped = reads_gpus(spec)
                .then(|| self.fake_gpus.contains(&subject.host))
                .filter(|fake| *fake)
                .map(|_| "the node's GPUs are device files (`fake_gpu_devices`)".to_owned());
            let probe = if skipped.is_some() {
                None
            } else {
                match item.command.render(&subject.context) {
                    Ok(text) => Some(text),
                    Err(problem) => {
                        let problem = format!("{}: the health probe for {}: {problem}", spec.id, subject.name);
                        problems.push((item_at, subject_at), problem);
                        continue;
                    }
                }
            };
            checks.push(Check {
                id: spec.id.clone(),
                subject: subject.name.clone(),
                cadence: item.health.cadence,
                action: self.settings.action(&spec.id, item.health.on_failure),
                timeout: item.timeout,
                probe,
                skipped,
                limits: resolved,
            });
        }
        checks.sort_by_key(|check| check.cadence);
        NodeChecks { node: (*node).to_owned(), checks }
    }
}

/// GPU validators read real GPUs: on nodes whose GPUs are device files (labs) they are
/// rendered but skipped, as the rollout's post-change checks skip them.
fn reads_gpus(spec: &ValidatorSpec) -> bool {
    spec.requires.contains(&crate::validate::spec::Requirement::Gpu)
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
