//! The rolling change: hosts whose changes need them empty go through the scheduler
//! in waves under a disruption budget — drain, wait until empty, apply, reboot when
//! the class says so, check, resume — while every other change applies in place
//! first.
//!
//! Stage: roll out. Input: the [`ResourceGraph`], a classified [`Plan`] (its
//! [`RolloutPlan`](crate::plan::RolloutPlan)), a [`Connector`], a [`Scheduler`] on
//! the controller, [`NodeHooks`] (reboot, post-change checks) and the state of the
//! last deploy. Output: a [`RolloutReport`]; the state, with the rollout's progress,
//! is saved after every step through the caller's `save`.
//!
//! Rules (the GPU Operator's upgrade controller, Slurm's drain semantics):
//! - no scheduler answering means nothing runs: every change applies at once;
//! - toolkit drains with a reason naming itself and the rollout
//!   (`toolkit:rollout <id> drain: <cause>`), and resumes only nodes carrying it; a
//!   node someone else drained is changed but left drained;
//! - nodes already out of service count against `--max-unavailable`; nodes a previous
//!   run left drained go first and never wait for a slot;
//! - a node that fails (apply, reboot, check) stays drained with the failure as its
//!   reason; past `max_failures` no new wave starts and the untouched nodes stay in
//!   service;
//! - every step is written to the state before the next one, so an interrupted
//!   rollout resumes without draining a finished node again;
//! - a node whose definition slurmctld and the node must agree on changes (the plan's
//!   [`Agreement`]) has its new line reach slurmctld only in its own wave, while it
//!   is empty: the controller's slurm.conf is written wave by wave with the nodes not
//!   rolled yet on their old lines, slurmctld restarted after the wave's nodes
//!   (increase) or before them (decrease), and each node registers again once both
//!   sides agree, which also clears an INVAL left by an earlier run.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use super::scheduler::{NodeStatus, Scheduler};
use crate::apply::{self, ApplyOptions, ApplyReport, Outcome, ResourceOutcome, SkipReason};
use crate::graph::ResourceGraph;
use crate::plan::agreement::Agreement;
use crate::plan::state::{NodeRollout, RolloutState, RolloutStep, State};
use crate::plan::{MaxUnavailable, Plan};
use crate::resource::api::ApiDesired;
use crate::resource::{Content, Desired, Disruption};
use crate::transport::{Connector, Executor as _};

/// How a rollout is paced and when it stops.
#[derive(Debug, Clone)]
pub struct RolloutOptions {
    /// How long a node may take to empty before the rollout stops (or requeues).
    pub drain_timeout: Duration,
    /// Requeue the jobs still holding a node once the drain timeout passed.
    pub requeue: bool,
    /// Failed nodes tolerated before no new wave starts (exceeded, not equalled).
    pub max_failures: usize,
    /// How often the scheduler is asked whether drained nodes are empty.
    pub poll: Duration,
    /// How long a changed node may take to pass its checks (links settle, daemons
    /// start): checks are retried until then, as the GPU Operator waits for its
    /// validator.
    pub check_timeout: Duration,
    /// Pause between two tries of the checks.
    pub check_interval: Duration,
}

impl Default for RolloutOptions {
    fn default() -> Self {
        Self {
            drain_timeout: Duration::from_hours(1),
            requeue: false,
            max_failures: 0,
            poll: Duration::from_secs(2),
            check_timeout: Duration::from_mins(2),
            check_interval: Duration::from_secs(5),
        }
    }
}

/// What a rollout does to a node besides applying its resources. (The futures need
/// not be `Send`: a deploy runs on one task.)
pub trait NodeHooks: Sync {
    /// Reboots `host` and returns once it is back.
    fn reboot(&self, host: &str) -> impl Future<Output = Result<(), String>>;
    /// Checks changed nodes before they take work again: per host, `Err(check)` names
    /// what failed.
    fn check(&self, hosts: &[String]) -> impl Future<Output = BTreeMap<String, Result<(), String>>>;
    /// Makes `host`'s BMC-side changes (firmware, BIOS attributes) once it is drained,
    /// before its reset. Hooks that reach no BMC refuse.
    fn apply_bmc(&self, host: &str, items: &[&ApiDesired]) -> impl Future<Output = Result<(), String>> {
        let refusal = format!("`{host}`: this run changes no BMC ({} BIOS or firmware change(s))", items.len());
        async move { Err(refusal) }
    }
    /// After the reset: `host`'s BMC reports what [`Self::apply_bmc`] set.
    fn verify_bmc(&self, host: &str, items: &[&ApiDesired]) -> impl Future<Output = Result<(), String>> {
        let _ = (host, items);
        async { Ok(()) }
    }
}

/// Hooks for a deploy without a scheduler (`push`): nothing is ever drained, so
/// nothing is rebooted or checked.
pub struct NoHooks;

impl NodeHooks for NoHooks {
    async fn reboot(&self, host: &str) -> Result<(), String> {
        Err(format!("`{host}`: this run does not reboot hosts"))
    }

    async fn check(&self, hosts: &[String]) -> BTreeMap<String, Result<(), String>> {
        hosts.iter().map(|host| (host.clone(), Ok(()))).collect()
    }
}

/// The outcome of a deploy that went through the rollout.
#[derive(Debug, Clone, Default)]
pub struct RolloutReport {
    /// Every resource's outcome, all phases merged.
    pub apply: ApplyReport,
    /// The rollout's id, when nodes were drained.
    pub id: Option<String>,
    /// Each rolled node's final step.
    pub nodes: BTreeMap<String, NodeRollout>,
    /// The waves as run.
    pub waves: Vec<Vec<String>>,
    /// Why it stopped before the end.
    pub stopped: Option<String>,
    /// Said once, for people (`no scheduler answers: nothing runs jobs yet`).
    pub notes: Vec<String>,
}

impl RolloutReport {
    /// Everything applied, every node done, nothing stopped.
    #[must_use]
    pub fn is_success(&self) -> bool {
        self.stopped.is_none()
            && self.apply.is_success()
            && self.nodes.values().all(|node| node.step == RolloutStep::Done)
    }
}

/// `toolkit:rollout <id>`: what every drain reason of the rollout starts with.
#[must_use]
pub fn reason_prefix(id: &str) -> String {
    format!("toolkit:rollout {id}")
}

/// Runs `plan` through the rollout. `state` is the last deploy's state; `save` writes
/// it (with progress) after every step.
#[allow(clippy::too_many_arguments)]
pub async fn run<C: Connector, S: Scheduler, H: NodeHooks>(
    graph: &ResourceGraph,
    plan: &Plan,
    connector: &C,
    scheduler: &S,
    hooks: &H,
    apply_options: &ApplyOptions,
    options: &RolloutOptions,
    state: State,
    save: &mut (dyn FnMut(&State) -> Result<(), String> + Send),
) -> RolloutReport {
    let mut run = Run::new(graph, plan, state, save);
    let snapshot = match scheduler.nodes().await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            run.report.stopped = Some(format!("cannot read the scheduler's nodes, so nothing was changed: {error}"));
            run.skip_unreached();
            return run.finish();
        }
    };
    let Some(snapshot) = snapshot else {
        run.report.notes.push("no scheduler answers yet: nothing runs jobs, every change applies at once".to_owned());
        let everything = run.changes.clone();
        let with_bmc: BTreeSet<String> =
            run.bmc_changes.iter().map(|&index| graph.resources[index].target().to_string()).collect();
        for host in &with_bmc {
            run.apply_bmc(host, hooks).await;
        }
        run.apply(connector, apply_options, &everything).await;
        run.remove(connector, apply_options, |_| true).await;
        // A first driver install still needs its reboot (nouveau out, the new modules
        // in), and the node its checks (its GPUs all seen) before it is called ready.
        let reboot: Vec<String> =
            run.hosts_of_class(Disruption::Reboot).into_iter().filter(|host| !run.host_failed(host)).collect();
        let results = futures::future::join_all(reboot.iter().map(|host| hooks.reboot(host))).await;
        let mut problems = Vec::new();
        let mut back = Vec::new();
        for (host, result) in reboot.into_iter().zip(results) {
            match result {
                Ok(()) => back.push(host),
                Err(error) => problems.push(format!("{host} did not come back from its reboot: {error}")),
            }
        }
        for (host, verdict) in check_until(hooks, &back, options).await {
            if let Err(check) = verdict {
                problems.push(format!("{host} failed its checks after the reboot: {check}"));
            }
        }
        for host in back.iter().filter(|host| with_bmc.contains(*host)) {
            if let Err(error) = run.verify_bmc(host, hooks, options).await {
                problems.push(format!("{host}: {error}"));
            }
        }
        if !problems.is_empty() {
            run.report.stopped = Some(problems.join("; "));
        }
        return run.finish();
    };

    let previous = run.state.rollout.take();
    let mut nodes: BTreeMap<String, NodeRollout> = BTreeMap::new();
    if let Some(previous) = &previous {
        for (name, node) in previous.in_flight() {
            nodes.insert(name.to_owned(), node.clone());
        }
    }
    let planned: Vec<String> =
        plan.rollout.iter().flat_map(crate::plan::RolloutPlan::drained_hosts).map(str::to_owned).collect();
    for host in &planned {
        if snapshot.contains_key(host) {
            nodes.entry(host.clone()).or_insert(NodeRollout {
                step: RolloutStep::Pending,
                held_by_other: false,
                error: None,
            });
        } else if !nodes.contains_key(host) {
            run.report.notes.push(format!("`{host}` is not in the scheduler yet: changed without a drain"));
        }
    }
    let id = previous.as_ref().map_or_else(new_id, |previous| previous.id.clone());
    let rolled: BTreeSet<String> = nodes.keys().cloned().collect();

    // Switches whose daemons restart go first, one at a time: each switch's own
    // BGP-established check (a guarded command after FRR) passes before the next
    // one restarts, so a rail never loses two switches at once.
    let restarting: Vec<String> = plan
        .rollout
        .iter()
        .flat_map(|rollout| rollout.hosts.iter())
        .filter(|(_, host)| host.class >= Disruption::Restart)
        .map(|(name, _)| name.clone())
        .filter(|name| {
            run.changes.iter().any(|&index| {
                let resource = &graph.resources[index];
                resource.target() == name && resource.target_kind == crate::resource::TargetKind::Switch
            })
        })
        .collect();
    for switch in &restarting {
        let changes: HashSet<usize> =
            run.changes.iter().copied().filter(|&index| graph.resources[index].target() == *switch).collect();
        run.apply(connector, apply_options, &changes).await;
        if run.host_failed(switch) {
            run.report.stopped = Some(format!(
                "switch `{switch}` failed its change or its BGP check: no other switch restarts and no node is drained"
            ));
            run.skip_unreached();
            return run.finish();
        }
    }
    // The controller's node lines wait for the waves when a rolled node's definition
    // changes; nodes new to the cluster are in its slurm.conf before their slurmd starts.
    run.hold_agreement(&rolled);
    if !run.held.is_empty()
        && run.agreement.is_some_and(|agreement| {
            agreement.nodes.values().any(|node| node.direction == crate::plan::agreement::Direction::Added)
        })
        && let Err(error) = run.agree(connector, apply_options).await
    {
        run.report.stopped = Some(format!("slurmctld could not learn the added nodes: {error}; no node was drained"));
        run.skip_unreached();
        return run.finish();
    }
    // Then everything else that needs no drain: the controller's changes, switches
    // whose changes restart nothing, nodes whose changes jobs do not notice.
    let first: HashSet<usize> = run
        .changes
        .iter()
        .copied()
        .filter(|&index| {
            let host = graph.resources[index].target();
            !rolled.contains(host) && !restarting.iter().any(|name| name == host) && !run.held.contains(&index)
        })
        .collect();
    run.apply(connector, apply_options, &first).await;
    run.remove(connector, apply_options, |host| !rolled.contains(host)).await;
    if rolled.is_empty() {
        return run.finish();
    }
    if !run.report.apply.is_success() {
        run.report.stopped =
            Some("changes that need no drain failed: no node was drained; fix them and deploy again".to_owned());
        run.skip_unreached();
        return run.finish();
    }
    let started = previous.as_ref().map_or_else(|| jiff::Timestamp::now().to_string(), |p| p.started.clone());
    run.state.rollout = Some(RolloutState { id: id.clone(), started, nodes });
    run.report.id = Some(id.clone());
    run.save();

    let waves = match waves(&run.rollout().nodes, &snapshot, &rolled, plan) {
        Ok(waves) => waves,
        Err(reason) => {
            run.report.stopped = Some(reason);
            run.skip_unreached();
            return run.finish();
        }
    };
    // A node that failed in an earlier run goes again in the first wave and counts
    // only if it fails again.
    let mut failures = 0;
    for wave in waves {
        if apply_options.cancel.is_cancelled() {
            run.report.stopped =
                Some("interrupted: the nodes in flight stay drained; deploy again to carry on".to_owned());
            break;
        }
        run.report.waves.push(wave.clone());
        // Boxed: a wave's future is most of the run's, which a deploy's own future holds.
        let wave_failures =
            Box::pin(run.wave(&wave, &snapshot, &id, connector, scheduler, hooks, apply_options, options)).await;
        failures += wave_failures;
        if run.report.stopped.is_some() {
            break;
        }
        if failures > options.max_failures {
            let failed: Vec<String> = run
                .rollout()
                .nodes
                .iter()
                .filter(|(_, node)| node.step == RolloutStep::Failed)
                .map(|(name, node)| format!("{name} ({})", node.error.as_deref().unwrap_or("failed")))
                .collect();
            run.report.stopped = Some(format!(
                "{failures} node(s) failed (more than --max-failures {}): {}; no new wave starts, and the failed nodes stay drained with the failure as their reason",
                options.max_failures,
                failed.join(", ")
            ));
            break;
        }
    }
    // Every wave done: slurmctld's slurm.conf is the blueprint's (the last wave's text
    // already was, so nothing restarts again). A stopped rollout leaves it as it is.
    if run.report.stopped.is_none() && !run.held.is_empty() {
        let held = run.held.clone();
        run.apply(connector, apply_options, &held).await;
    }
    run.skip_unreached();
    run.finish()
}

/// A short id that sorts by time: `r20261125-221651`.
fn new_id() -> String {
    jiff::Timestamp::now().strftime("r%Y%m%d-%H%M%S").to_string()
}

/// The waves to run: nodes a previous run holds and nodes already out of service
/// first (they cost no slot), then the rest in name order, each wave as large as the
/// budget leaves room for after the nodes others hold out of service.
fn waves(
    nodes: &BTreeMap<String, NodeRollout>,
    snapshot: &BTreeMap<String, NodeStatus>,
    rolled: &BTreeSet<String>,
    plan: &Plan,
) -> Result<Vec<Vec<String>>, String> {
    // The plan's budget: deploy runs the waves the plan showed.
    let (max_unavailable, budget) = plan
        .rollout
        .as_ref()
        .map_or((MaxUnavailable::default(), 1), |rollout| (rollout.max_unavailable, rollout.budget));
    let held_elsewhere: Vec<&str> = snapshot
        .iter()
        .filter(|(name, status)| status.is_unavailable() && !rolled.contains(*name))
        .map(|(name, _)| name.as_str())
        .collect();
    let free: Vec<String> = nodes
        .iter()
        .filter(|(name, node)| node.step.in_flight() || snapshot.get(*name).is_some_and(NodeStatus::is_unavailable))
        .map(|(name, _)| name.clone())
        .collect();
    let waiting: Vec<String> = nodes
        .iter()
        .filter(|(name, node)| node.step == RolloutStep::Pending && !free.contains(name))
        .map(|(name, _)| name.clone())
        .collect();
    let slots = budget.saturating_sub(held_elsewhere.len());
    if slots == 0 && !waiting.is_empty() {
        return Err(format!(
            "--max-unavailable {max_unavailable} allows {budget} node(s) out of service and {} already are ({}): no node can be drained; raise --max-unavailable or return them to service",
            held_elsewhere.len(),
            crate::model::hostlist::compress(held_elsewhere.iter().copied())
        ));
    }
    let mut waves = Vec::new();
    let mut waiting = waiting.into_iter();
    if !free.is_empty() {
        let mut first = free;
        first.extend(waiting.by_ref().take(slots.saturating_sub(first.len())));
        waves.push(first);
    }
    waves.extend(crate::plan::disruption::waves(waiting.collect(), slots));
    Ok(waves)
}

/// One rollout's working data.
struct Run<'a> {
    graph: &'a ResourceGraph,
    plan: &'a Plan,
    /// The state as loaded, with the rollout's progress: what `save` writes.
    state: State,
    save: &'a mut (dyn FnMut(&State) -> Result<(), String> + Send),
    /// Resources to change over SSH (API objects are the API stage's).
    changes: HashSet<usize>,
    /// BIOS and firmware changes the API stage left for their node's wave.
    bmc_changes: HashSet<usize>,
    /// Per resource: its outcome so far (`None`: not run yet).
    outcomes: Vec<Option<ResourceOutcome>>,
    /// Resources gone from the blueprint, undone on their host's turn.
    removals: Vec<crate::plan::removal::Removal>,
    /// Outcomes of the removals run so far.
    removed: Vec<ResourceOutcome>,
    report: RolloutReport,
    /// What slurmctld and the nodes agree on, when a node's definition changes.
    agreement: Option<&'a Agreement>,
    /// The controller's slurm.conf and slurmctld, held out of the in-place phase and
    /// written wave by wave ([`Self::agree`]), then as planned after the last wave.
    held: HashSet<usize>,
    /// Nodes whose new line slurmctld has (or gets with the next [`Self::agree`]).
    agreed: BTreeSet<String>,
}

impl<'a> Run<'a> {
    fn new(
        graph: &'a ResourceGraph,
        plan: &'a Plan,
        state: State,
        save: &'a mut (dyn FnMut(&State) -> Result<(), String> + Send),
    ) -> Self {
        let mut changes = super::changed_indexes(graph, plan);
        let waiting: HashSet<&str> = plan
            .changes
            .iter()
            .filter(|change| super::firmware::in_rollout_wave(change))
            .map(|change| change.id.as_str())
            .collect();
        let (bmc_changes, ssh): (HashSet<usize>, HashSet<usize>) =
            changes.drain().partition(|&index| waiting.contains(graph.resources[index].id.as_str()));
        changes = ssh;
        changes.retain(|&index| !matches!(*graph.resources[index].desired, Desired::Api(_)));
        let removals = super::removals(graph, plan, &state);
        Self {
            graph,
            plan,
            state,
            save,
            changes,
            bmc_changes,
            outcomes: vec![None; graph.resources.len()],
            removals,
            removed: Vec::new(),
            report: RolloutReport::default(),
            agreement: plan.rollout.as_ref().and_then(|rollout| rollout.agreement.as_ref()),
            held: HashSet::new(),
            agreed: BTreeSet::new(),
        }
    }

    /// Holds the controller's slurm.conf and slurmctld back when a node in `rolled`
    /// has a new definition to agree on.
    fn hold_agreement(&mut self, rolled: &BTreeSet<String>) {
        let Some(agreement) = self.agreement else { return };
        if !agreement.waved().any(|node| rolled.contains(node)) {
            return;
        }
        let slurmctld = format!("{}:service:slurmctld", agreement.controller);
        self.held = self
            .changes
            .iter()
            .copied()
            .filter(|&index| {
                let id = self.graph.resources[index].id.as_str();
                id == agreement.resource || id == slurmctld
            })
            .collect();
    }

    /// The wave's nodes `hosts` whose definition slurmctld must learn in their wave.
    fn agreeing(&self, hosts: &[String]) -> Vec<String> {
        let Some(agreement) = self.agreement.filter(|_| !self.held.is_empty()) else { return Vec::new() };
        hosts
            .iter()
            .filter(|host| agreement.direction(host).is_some_and(crate::plan::agreement::Direction::needs_wave))
            .cloned()
            .collect()
    }

    /// Writes the controller's slurm.conf with the new lines of the nodes in
    /// [`Self::agreed`] and the old lines of the nodes still waiting, and restarts
    /// slurmctld when the text changed: a node's line changes only with the node empty,
    /// so no running job is aborted for a changed definition (`_sync_jobs_to_conf`).
    async fn agree<C: Connector>(&mut self, connector: &C, apply_options: &ApplyOptions) -> Result<(), String> {
        let Some(agreement) = self.agreement else { return Ok(()) };
        let find = |id: &str| self.held.iter().copied().find(|&index| self.graph.resources[index].id.as_str() == id);
        let Some(file_index) = find(&agreement.resource) else { return Ok(()) };
        let mut file = self.graph.resources[file_index].clone();
        let Desired::File { path, content, mode, owner, group, secret, check } = &*file.desired else {
            return Err(format!("`{}` is not a file", agreement.resource));
        };
        let text = agreement.transitional(content.text(), &self.agreed);
        file.desired = std::sync::Arc::new(Desired::File {
            path: path.clone(),
            content: Content::new(text),
            mode: *mode,
            owner: owner.clone(),
            group: group.clone(),
            secret: *secret,
            check: check.clone(),
        });
        let mut resources = vec![file];
        if let Some(service) = find(&format!("{}:service:slurmctld", agreement.controller)) {
            let service = self.graph.resources[service].clone().after([resources[0].id.clone()]);
            resources.push(service);
        }
        let graph = crate::graph::build(resources).map_err(|problems| {
            problems.0.iter().map(|problem| problem.message.clone()).collect::<Vec<_>>().join("; ")
        })?;
        let report = apply::apply(&graph, &HashSet::from([0]), connector, apply_options).await;
        match report.outcomes.iter().find(|outcome| !outcome.outcome.is_success()) {
            None => Ok(()),
            Some(failed) => Err(match &failed.outcome {
                Outcome::Failed { error } => format!("{}: {}", failed.id, first_words(error)),
                other => format!("{}: {other:?}", failed.id),
            }),
        }
    }

    /// After both sides changed: each of `hosts` registers again (slurmd restarted), and
    /// is given until the check timeout to register valid (not INVAL). Returns the hosts
    /// that did not, with why.
    async fn settle<C: Connector, S: Scheduler>(
        &self,
        hosts: &[String],
        connector: &C,
        scheduler: &S,
        options: &RolloutOptions,
    ) -> Vec<(String, String)> {
        let restart = ["systemctl", "restart", "slurmd"].map(str::to_owned);
        let mut problems = Vec::new();
        let mut waiting = Vec::new();
        for host in hosts {
            let restarted = match connector.connect(host).await {
                Ok(executor) => match executor.exec(&restart).await {
                    Ok(output) => output.into_success(host, &restart).map(drop).map_err(|error| error.to_string()),
                    Err(error) => Err(error.to_string()),
                },
                Err(error) => Err(error.to_string()),
            };
            match restarted {
                Ok(()) => waiting.push(host.clone()),
                Err(error) => problems.push((host.clone(), format!("restarting slurmd to register again: {error}"))),
            }
        }
        let deadline = Instant::now() + options.check_timeout;
        while !waiting.is_empty() {
            // slurmctld just restarted may not answer for a moment: asked again.
            let (nodes, unread) = match scheduler.nodes().await {
                Ok(nodes) => (nodes.unwrap_or_default(), None),
                Err(error) => (BTreeMap::new(), Some(error.to_string())),
            };
            let registered = |host: &String| nodes.get(host).is_some_and(|status| !status.invalid);
            if Instant::now() >= deadline {
                for host in waiting.drain(..).filter(|host| !registered(host)) {
                    let why = unread.clone().unwrap_or_else(|| {
                        nodes.get(&host).and_then(|status| status.reason.clone()).unwrap_or_default()
                    });
                    problems.push((host, format!("not registered valid after slurmctld and the node agreed: {why}")));
                }
                break;
            }
            waiting.retain(|host| !registered(host));
            if !waiting.is_empty() {
                tokio::time::sleep(options.poll).await;
            }
        }
        problems
    }

    fn rollout(&mut self) -> &mut RolloutState {
        self.state.rollout.get_or_insert_with(|| RolloutState {
            id: new_id(),
            started: jiff::Timestamp::now().to_string(),
            nodes: BTreeMap::new(),
        })
    }

    /// Moves `host` to `step`; written with the next [`Self::save`], which every phase
    /// of a wave ends with (a step redone after a crash is harmless: draining a drained
    /// node, resuming a resumed one).
    fn set_step(&mut self, host: &str, step: RolloutStep, error: Option<String>) {
        if let Some(node) = self.rollout().nodes.get_mut(host) {
            node.step = step;
            node.error = error;
        }
    }

    fn step(&self, host: &str) -> Option<RolloutStep> {
        self.state.rollout.as_ref().and_then(|rollout| rollout.nodes.get(host)).map(|node| node.step)
    }

    /// Applies `changes` through the walker and merges the outcomes.
    async fn apply<C: Connector>(&mut self, connector: &C, options: &ApplyOptions, changes: &HashSet<usize>) {
        if changes.is_empty() {
            return;
        }
        let report = apply::apply(self.graph, changes, connector, options).await;
        for outcome in report.outcomes {
            // Resources outside `changes` are `Unchanged` in this report whatever an
            // earlier phase did to them.
            if changes.contains(&outcome.index) {
                let index = outcome.index;
                self.outcomes[index] = Some(outcome);
            }
        }
        self.report.apply.cancelled |= report.cancelled;
        self.report.apply.aborted |= report.aborted;
        self.save();
    }

    /// Undoes the removals on the hosts `on` selects, after their changes (none after
    /// an interrupted or aborted walk).
    async fn remove<C: Connector>(&mut self, connector: &C, options: &ApplyOptions, on: impl Fn(&str) -> bool) {
        if self.report.apply.cancelled || self.report.apply.aborted {
            return;
        }
        let selected: Vec<crate::plan::removal::Removal> =
            self.removals.iter().filter(|removal| on(&removal.target)).cloned().collect();
        if selected.is_empty() {
            return;
        }
        self.removed.extend(apply::remove::remove(&selected, connector, options).await);
        self.save();
    }

    /// `host`'s BIOS and firmware changes left for its wave, in graph order.
    fn bmc_of(&self, host: &str) -> Vec<usize> {
        self.graph
            .ordered()
            .filter(|index| self.bmc_changes.contains(index) && self.graph.resources[*index].target() == host)
            .collect()
    }

    fn items(&self, indexes: &[usize]) -> Vec<&'a ApiDesired> {
        let graph = self.graph;
        indexes
            .iter()
            .filter_map(|&index| match &*graph.resources[index].desired {
                Desired::Api(item) => Some(item.as_ref()),
                _ => None,
            })
            .collect()
    }

    /// Makes `host`'s BIOS and firmware changes through its BMC (the node is drained,
    /// or nothing runs jobs yet) and records their outcome.
    async fn apply_bmc<H: NodeHooks>(&mut self, host: &str, hooks: &H) {
        let indexes = self.bmc_of(host);
        if indexes.is_empty() {
            return;
        }
        let started = Instant::now();
        let result = hooks.apply_bmc(host, &self.items(&indexes)).await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        for index in indexes {
            let resource = &self.graph.resources[index];
            let outcome = match &result {
                Ok(()) => Outcome::Changed,
                Err(error) => Outcome::Failed { error: error.clone() },
            };
            self.outcomes[index] =
                Some(ResourceOutcome { index, id: resource.id.clone(), target: host.to_owned(), outcome, elapsed_ms });
        }
        self.save();
    }

    /// After `host`'s reset, its BMC reports what was set: asked again until the check
    /// timeout (a BMC that flashed itself takes a while to answer again).
    async fn verify_bmc<H: NodeHooks>(&self, host: &str, hooks: &H, options: &RolloutOptions) -> Result<(), String> {
        let indexes = self.bmc_of(host);
        if indexes.is_empty() {
            return Ok(());
        }
        let items = self.items(&indexes);
        let deadline = Instant::now() + options.check_timeout;
        loop {
            match hooks.verify_bmc(host, &items).await {
                Ok(()) => return Ok(()),
                Err(error) if Instant::now() + options.check_interval > deadline => {
                    return Err(format!("BMC after reset: {error}"));
                }
                Err(error) => tracing::info!(host, %error, "BMC does not report the changes yet; asking again"),
            }
            tokio::time::sleep(options.check_interval).await;
        }
    }

    fn host_failed(&self, host: &str) -> bool {
        self.outcomes
            .iter()
            .flatten()
            .chain(&self.removed)
            .any(|outcome| outcome.target == host && !outcome.outcome.is_success())
    }

    fn host_error(&self, host: &str) -> Option<String> {
        self.outcomes.iter().flatten().chain(&self.removed).find_map(|outcome| match &outcome.outcome {
            Outcome::Failed { error } if outcome.target == host => {
                Some(format!("{}: {}", outcome.id, error.lines().next().unwrap_or_default()))
            }
            Outcome::Skipped { reason: SkipReason::Upstream { id } } if outcome.target == host => {
                Some(format!("{} skipped: upstream `{id}` failed", outcome.id))
            }
            _ => None,
        })
    }

    fn hosts_of_class(&self, class: Disruption) -> BTreeSet<String> {
        self.plan
            .rollout
            .iter()
            .flat_map(|rollout| rollout.hosts.iter())
            .filter(|(_, host)| host.class == class)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Changed resources not run yet are `NotReached`: their record stays as it was.
    fn skip_unreached(&mut self) {
        for &index in self.changes.iter().chain(&self.bmc_changes) {
            if self.outcomes[index].is_none() {
                let resource = &self.graph.resources[index];
                self.outcomes[index] = Some(ResourceOutcome {
                    index,
                    id: resource.id.clone(),
                    target: resource.target().to_string(),
                    outcome: Outcome::Skipped { reason: SkipReason::NotReached },
                    elapsed_ms: 0,
                });
            }
        }
    }

    /// The merged report; resources never run count as unchanged only when they were
    /// not to be changed.
    fn merged(&self) -> ApplyReport {
        let outcomes = self
            .graph
            .ordered()
            .map(|index| {
                self.outcomes[index].clone().unwrap_or_else(|| {
                    let resource = &self.graph.resources[index];
                    let outcome = if self.changes.contains(&index) || self.bmc_changes.contains(&index) {
                        Outcome::Skipped { reason: SkipReason::NotReached }
                    } else {
                        Outcome::Unchanged
                    };
                    ResourceOutcome {
                        index,
                        id: resource.id.clone(),
                        target: resource.target().to_string(),
                        outcome,
                        elapsed_ms: 0,
                    }
                })
            })
            .chain(self.removed.iter().cloned())
            .collect();
        ApplyReport { outcomes, cancelled: self.report.apply.cancelled, aborted: self.report.apply.aborted }
    }

    /// Writes the state as it is now: resources done so far recorded, the rollout's
    /// progress kept. A failed write is reported, and the run goes on: the hosts are
    /// as they are either way. The first failure is a warning at once and a note in
    /// the report; the rollout saves after every step, and the same failure again is
    /// only a debug message.
    fn save(&mut self) {
        let merged = self.merged();
        let mut state = super::record(self.state.clone(), self.graph, self.plan, &merged);
        state.rollout.clone_from(&self.state.rollout);
        if let Err(error) = (self.save)(&state) {
            if self.report.notes.iter().any(|note| note.starts_with("could not save")) {
                tracing::debug!(%error, "could not save the state, again");
            } else {
                tracing::warn!(%error, "could not save the state");
                self.report.notes.push(format!("could not save the state: {error}"));
            }
        }
    }

    fn finish(mut self) -> RolloutReport {
        if self.state.rollout.as_ref().is_some_and(RolloutState::is_finished) {
            if let Some(rollout) = self.state.rollout.take() {
                self.report.nodes = rollout.nodes;
            }
        } else if let Some(rollout) = &self.state.rollout {
            self.report.nodes.clone_from(&rollout.nodes);
        }
        self.save();
        self.report.apply = self.merged();
        self.report
    }

    /// One wave: drain, wait, apply, reboot, check, resume. Returns its failures.
    #[allow(clippy::too_many_arguments)]
    async fn wave<C: Connector, S: Scheduler, H: NodeHooks>(
        &mut self,
        wave: &[String],
        snapshot: &BTreeMap<String, NodeStatus>,
        id: &str,
        connector: &C,
        scheduler: &S,
        hooks: &H,
        apply_options: &ApplyOptions,
        options: &RolloutOptions,
    ) -> usize {
        let prefix = reason_prefix(id);
        let mut failures = 0;
        // Drain.
        for host in wave {
            if self.step(host) != Some(RolloutStep::Pending) {
                continue;
            }
            let status = snapshot.get(host);
            // slurmctld's own drain of a node that registered below its line is the
            // definition mismatch this rollout settles: the node is toolkit's to drain.
            let mismatch = status.is_some_and(|status| status.invalid) && !self.agreeing(wave).is_empty();
            let theirs = status.is_some_and(|status| {
                status.drain && !status.reason.as_deref().is_some_and(|reason| reason.starts_with(&prefix))
            }) && !mismatch;
            if theirs {
                if let Some(node) = self.rollout().nodes.get_mut(host) {
                    node.held_by_other = true;
                }
                self.set_step(host, RolloutStep::Draining, None);
                continue;
            }
            let reason = format!("{prefix} {}: {}", self.class_of(host), self.cause_of(host));
            match scheduler.drain(host, &reason).await {
                Ok(()) => self.set_step(host, RolloutStep::Draining, None),
                Err(error) => {
                    failures += 1;
                    self.set_step(host, RolloutStep::Failed, Some(format!("drain: {error}")));
                }
            }
        }
        self.save();
        // Wait until empty.
        let draining: Vec<String> =
            wave.iter().filter(|host| self.step(host) == Some(RolloutStep::Draining)).cloned().collect();
        if let Err(stop) = self.wait_empty(&draining, scheduler, apply_options, options).await {
            self.report.stopped = Some(stop);
            return failures;
        }
        // BIOS and firmware through the BMC first: the node is empty, and its reset
        // below applies them.
        let emptied: Vec<String> = wave
            .iter()
            .filter(|host| {
                self.step(host).is_some_and(|step| step >= RolloutStep::Drained && step != RolloutStep::Done)
            })
            .cloned()
            .collect();
        for host in &emptied {
            self.apply_bmc(host, hooks).await;
        }
        // slurmctld first when every node of the wave reports less than before: it then
        // expects no more than they still report.
        let agreeing = self.agreeing(&emptied);
        let controller_first = !agreeing.is_empty()
            && agreeing.iter().all(|host| {
                self.agreement
                    .and_then(|agreement| agreement.direction(host))
                    .is_some_and(crate::plan::agreement::Direction::controller_first)
            });
        if controller_first && !self.agree_wave(&agreeing, connector, scheduler, &prefix, apply_options).await {
            return failures + agreeing.len();
        }
        // Apply.
        let drained: BTreeSet<&String> = wave.iter().filter(|host| emptied.contains(host)).collect();
        let changes: HashSet<usize> = self
            .changes
            .iter()
            .copied()
            .filter(|&index| {
                let host = &self.graph.resources[index].target();
                drained.contains(&host.to_string()) && !self.host_failed(host)
            })
            .collect();
        self.apply(connector, apply_options, &changes).await;
        let on: BTreeSet<String> = drained.iter().map(|host| (*host).clone()).collect();
        self.remove(connector, apply_options, |host| on.contains(host)).await;
        for host in wave {
            if !drained.contains(host) {
                continue;
            }
            if self.host_failed(host) {
                failures += 1;
                let error = self.host_error(host).unwrap_or_else(|| "apply failed".to_owned());
                self.fail(host, scheduler, &prefix, format!("apply {error}")).await;
            } else if self.step(host) < Some(RolloutStep::Applied) || self.step(host) == Some(RolloutStep::Failed) {
                self.set_step(host, RolloutStep::Applied, None);
            }
        }
        self.save();
        // Reboot, the wave's nodes at once.
        let rebooting: Vec<&String> = wave
            .iter()
            .filter(|host| self.step(host) == Some(RolloutStep::Applied) && self.class_of(host) == Disruption::Reboot)
            .collect();
        let rebooted = futures::future::join_all(rebooting.iter().map(|host| hooks.reboot(host))).await;
        for (host, result) in rebooting.into_iter().zip(rebooted) {
            match result {
                Ok(()) => self.set_step(host, RolloutStep::Rebooted, None),
                Err(error) => {
                    failures += 1;
                    self.fail(host, scheduler, &prefix, format!("reboot: {error}")).await;
                }
            }
        }
        self.save();
        // The nodes first (they now report more than slurmctld's old line, which it
        // accepts), then slurmctld with their new lines.
        let rolled_nodes: Vec<String> = agreeing
            .iter()
            .filter(|host| matches!(self.step(host), Some(RolloutStep::Applied | RolloutStep::Rebooted)))
            .cloned()
            .collect();
        if !controller_first
            && !rolled_nodes.is_empty()
            && !self.agree_wave(&rolled_nodes, connector, scheduler, &prefix, apply_options).await
        {
            return failures + rolled_nodes.len();
        }
        // Both sides agree: each node registers again, which clears an INVAL a
        // registration in between (a mixed change) or an earlier run left.
        for (host, problem) in self.settle(&rolled_nodes, connector, scheduler, options).await {
            failures += 1;
            self.fail(&host, scheduler, &prefix, format!("register {problem}")).await;
        }
        self.save();
        // Check, then resume.
        let to_check: Vec<String> = wave
            .iter()
            .filter(|host| matches!(self.step(host), Some(RolloutStep::Applied | RolloutStep::Rebooted)))
            .cloned()
            .collect();
        let verdicts = check_until(hooks, &to_check, options).await;
        for host in &to_check {
            if let Some(Err(check)) = verdicts.get(host) {
                failures += 1;
                self.fail(host, scheduler, &prefix, format!("check {check}")).await;
                continue;
            }
            if let Err(error) = self.verify_bmc(host, hooks, options).await {
                failures += 1;
                self.fail(host, scheduler, &prefix, format!("check {error}")).await;
                continue;
            }
            let held = self.state.rollout.as_ref().and_then(|r| r.nodes.get(host)).is_some_and(|n| n.held_by_other);
            if !held && let Err(error) = scheduler.resume(host).await {
                failures += 1;
                self.set_step(host, RolloutStep::Failed, Some(format!("resume: {error}")));
                continue;
            }
            self.set_step(host, RolloutStep::Done, None);
        }
        self.save();
        failures
    }

    /// slurmctld learns the new lines of `hosts`; when it cannot, they fail and the
    /// rollout stops (slurmctld's own state is then what the next run observes).
    async fn agree_wave<C: Connector, S: Scheduler>(
        &mut self,
        hosts: &[String],
        connector: &C,
        scheduler: &S,
        prefix: &str,
        apply_options: &ApplyOptions,
    ) -> bool {
        self.agreed.extend(hosts.iter().cloned());
        let Err(error) = self.agree(connector, apply_options).await else { return true };
        for host in hosts {
            self.fail(host, scheduler, prefix, format!("slurmctld {error}")).await;
        }
        self.report.stopped = Some(format!(
            "slurmctld could not take the new node lines of {}: {error}; they stay drained",
            crate::model::hostlist::compress(hosts.iter().map(String::as_str))
        ));
        self.save();
        false
    }

    /// Marks `host` failed: it stays drained, with the failure as its reason (unless
    /// someone else holds it).
    async fn fail<S: Scheduler>(&mut self, host: &str, scheduler: &S, prefix: &str, error: String) {
        let held = self.state.rollout.as_ref().and_then(|r| r.nodes.get(host)).is_some_and(|n| n.held_by_other);
        if !held {
            let reason = format!("{prefix} failed: {}", first_words(&error));
            if let Err(drain_error) = scheduler.drain(host, &reason).await {
                tracing::warn!(host, %drain_error, "could not record the failure as the drain reason");
            }
        }
        self.set_step(host, RolloutStep::Failed, Some(error));
    }

    /// Waits until every host in `draining` is empty; requeues once past the timeout
    /// when allowed. `Err` says which jobs held which node.
    async fn wait_empty<S: Scheduler>(
        &mut self,
        draining: &[String],
        scheduler: &S,
        apply_options: &ApplyOptions,
        options: &RolloutOptions,
    ) -> Result<(), String> {
        let mut waiting: Vec<String> = draining.to_vec();
        let mut deadline = Instant::now() + options.drain_timeout;
        let mut requeued = false;
        while !waiting.is_empty() {
            let nodes = scheduler.nodes().await.map_err(|error| format!("waiting for nodes to drain: {error}"))?;
            let mut still = Vec::new();
            let before = waiting.len();
            for host in waiting {
                let empty = nodes.as_ref().and_then(|nodes| nodes.get(&host)).is_none_or(NodeStatus::is_empty_drained);
                let jobs = if empty {
                    scheduler.jobs_on(&host).await.map_err(|error| format!("waiting for `{host}` to drain: {error}"))?
                } else {
                    Vec::new()
                };
                if empty && jobs.is_empty() {
                    self.set_step(&host, RolloutStep::Drained, None);
                } else {
                    still.push(host);
                }
            }
            if still.len() < before {
                self.save();
            }
            waiting = still;
            if waiting.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let mut holding = Vec::new();
                let mut ids = Vec::new();
                for host in &waiting {
                    let jobs = scheduler.jobs_on(host).await.unwrap_or_default();
                    let listed: Vec<String> =
                        jobs.iter().map(|job| format!("{} ({}, {})", job.id, job.user, job.state)).collect();
                    ids.extend(jobs.into_iter().map(|job| job.id));
                    holding.push(format!(
                        "{host}: {}",
                        if listed.is_empty() { "completing".to_owned() } else { listed.join(", ") }
                    ));
                }
                if options.requeue && !requeued && !ids.is_empty() {
                    scheduler.requeue(&ids).await.map_err(|error| format!("requeueing {}: {error}", ids.join(",")))?;
                    self.report.notes.push(format!("requeued job(s) {} after --drain-timeout", ids.join(",")));
                    requeued = true;
                    deadline = Instant::now() + options.drain_timeout;
                    continue;
                }
                return Err(format!(
                    "not empty after --drain-timeout {} s: {}; they stay drained by toolkit (deploy again to keep waiting, `--requeue` to requeue the jobs, or `scontrol update nodename=… state=resume` to give up)",
                    options.drain_timeout.as_secs(),
                    holding.join("; ")
                ));
            }
            tokio::select! {
                () = tokio::time::sleep(options.poll) => {}
                () = apply_options.cancel.cancelled() => {
                    return Err("interrupted while nodes drained: they stay drained by toolkit; deploy again to carry on".to_owned());
                }
            }
        }
        Ok(())
    }

    fn class_of(&self, host: &str) -> Disruption {
        self.plan.rollout.as_ref().map_or(Disruption::Drain, |rollout| rollout.class(host).max(Disruption::Drain))
    }

    /// The first change that makes `host` need a drain, as a path or name.
    fn cause_of(&self, host: &str) -> String {
        self.plan
            .rollout
            .as_ref()
            .and_then(|rollout| rollout.hosts.get(host))
            .and_then(|host| host.because.first())
            .map_or_else(
                || "resume an interrupted rollout".to_owned(),
                |id| id.splitn(3, ':').last().unwrap_or(id).to_owned(),
            )
    }
}

/// Checks `hosts`, trying the failing ones again until they pass or the check timeout
/// passes; the last verdict counts.
async fn check_until<H: NodeHooks>(
    hooks: &H,
    hosts: &[String],
    options: &RolloutOptions,
) -> BTreeMap<String, Result<(), String>> {
    let mut verdicts = BTreeMap::new();
    if hosts.is_empty() {
        return verdicts;
    }
    let deadline = Instant::now() + options.check_timeout;
    let mut pending = hosts.to_vec();
    loop {
        verdicts.extend(hooks.check(&pending).await);
        pending.retain(|host| verdicts.get(host).is_some_and(Result::is_err));
        if pending.is_empty() || Instant::now() + options.check_interval > deadline {
            return verdicts;
        }
        tracing::info!(hosts = pending.len(), "checks failed; trying again");
        tokio::time::sleep(options.check_interval).await;
    }
}

/// The start of an error, short enough for a Slurm reason.
fn first_words(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(120).collect()
}

#[cfg(test)]
mod tests;
