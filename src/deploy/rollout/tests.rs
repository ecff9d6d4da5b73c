//! The rollout against an in-memory Slurm and the scripted transport: waves under the
//! budget, drains only where needed, resume only of toolkit's own drains, failures
//! that stop the line, and resumption from every step a run can stop at.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Instant;

use super::*;
use crate::apply::fake::{Call, FakeConnector, Script, fresh_debian};
use crate::deploy::scheduler::{Job, SchedulerError};
use crate::graph;
use crate::plan::diff::{PlanInputs, diff};
use crate::plan::disruption::classify;
use crate::plan::disruption::tests::file;
use crate::resource::{Content, Resource, Target};

const RAILS: &str = "/etc/netplan/60-toolkit-rails.yaml";

/// A node's status and its jobs, each with the reads left before it finishes.
type FakeNode = (NodeStatus, Vec<(Job, usize)>);

/// Slurm as a map: node → (status, jobs); a job finishes after `polls` reads.
#[derive(Default)]
struct FakeSlurm {
    nodes: Mutex<BTreeMap<String, FakeNode>>,
    /// `drain node` / `resume node` / `requeue ids`, in order.
    events: Mutex<Vec<String>>,
    /// Most nodes drained by toolkit at one time.
    most_drained: Mutex<usize>,
    down: bool,
}

impl FakeSlurm {
    fn with(nodes: &[&str]) -> Self {
        let slurm = Self::default();
        for node in nodes {
            let status = NodeStatus { state: "IDLE".into(), drain: false, busy: false, reason: None, invalid: false };
            slurm.nodes.lock().expect("nodes").insert((*node).to_owned(), (status, Vec::new()));
        }
        slurm
    }

    fn job(&self, node: &str, id: &str, polls: usize) {
        let mut nodes = self.nodes.lock().expect("nodes");
        let (status, jobs) = nodes.get_mut(node).expect("node");
        status.state = "ALLOCATED".into();
        status.busy = true;
        jobs.push((Job { id: id.into(), user: "alice".into(), state: "RUNNING".into() }, polls));
    }

    fn drain_by_admin(&self, node: &str, reason: &str) {
        let mut nodes = self.nodes.lock().expect("nodes");
        let (status, _) = nodes.get_mut(node).expect("node");
        status.drain = true;
        status.reason = Some(reason.into());
    }

    fn events(&self) -> Vec<String> {
        self.events.lock().expect("events").clone()
    }

    fn status(&self, node: &str) -> NodeStatus {
        self.nodes.lock().expect("nodes")[node].0.clone()
    }
}

impl Scheduler for FakeSlurm {
    async fn nodes(&self) -> Result<Option<BTreeMap<String, NodeStatus>>, SchedulerError> {
        if self.down {
            return Ok(None);
        }
        let mut nodes = self.nodes.lock().expect("nodes");
        for (status, jobs) in nodes.values_mut() {
            for (_, polls) in jobs.iter_mut() {
                *polls = polls.saturating_sub(1);
            }
            jobs.retain(|(_, polls)| *polls > 0);
            status.busy = !jobs.is_empty();
            if jobs.is_empty() && status.state == "ALLOCATED" {
                status.state = "IDLE".into();
            }
        }
        Ok(Some(nodes.iter().map(|(name, (status, _))| (name.clone(), status.clone())).collect()))
    }

    async fn drain(&self, node: &str, reason: &str) -> Result<(), SchedulerError> {
        let mut nodes = self.nodes.lock().expect("nodes");
        let (status, _) = nodes.get_mut(node).expect("node");
        status.drain = true;
        status.reason = Some(reason.into());
        let ours = nodes
            .values()
            .filter(|(s, _)| s.drain && s.reason.as_deref().is_some_and(|r| r.starts_with("toolkit:")))
            .count();
        let mut most = self.most_drained.lock().expect("most");
        *most = (*most).max(ours);
        self.events.lock().expect("events").push(format!("drain {node}: {reason}"));
        Ok(())
    }

    async fn resume(&self, node: &str) -> Result<(), SchedulerError> {
        let mut nodes = self.nodes.lock().expect("nodes");
        let (status, _) = nodes.get_mut(node).expect("node");
        status.drain = false;
        status.reason = None;
        self.events.lock().expect("events").push(format!("resume {node}"));
        Ok(())
    }

    async fn jobs_on(&self, node: &str) -> Result<Vec<Job>, SchedulerError> {
        Ok(self.nodes.lock().expect("nodes")[node].1.iter().map(|(job, _)| job.clone()).collect())
    }

    async fn requeue(&self, jobs: &[String]) -> Result<(), SchedulerError> {
        let mut nodes = self.nodes.lock().expect("nodes");
        for (_, held) in nodes.values_mut() {
            held.retain(|(job, _)| !jobs.contains(&job.id));
        }
        self.events.lock().expect("events").push(format!("requeue {}", jobs.join(",")));
        Ok(())
    }
}

/// Reboots and checks, recorded; checks fail for the hosts in `failing`.
#[derive(Default)]
struct Hooks {
    log: Mutex<Vec<String>>,
    failing: Mutex<Vec<String>>,
}

impl NodeHooks for Hooks {
    async fn reboot(&self, host: &str) -> Result<(), String> {
        self.log.lock().expect("log").push(format!("reboot {host}"));
        Ok(())
    }

    async fn check(&self, hosts: &[String]) -> BTreeMap<String, Result<(), String>> {
        let failing = self.failing.lock().expect("failing").clone();
        hosts
            .iter()
            .map(|host| {
                self.log.lock().expect("log").push(format!("check {host}"));
                let verdict = if failing.contains(host) { Err("rail-links".to_owned()) } else { Ok(()) };
                (host.clone(), verdict)
            })
            .collect()
    }
}

/// A head with slurm.conf and `nodes` with a rail file and slurm.conf; `rails`
/// is the rail file's new text, `class` its disruption.
struct Cluster {
    graph: ResourceGraph,
    plan: Plan,
    state: State,
}

fn cluster(nodes: &[&str], rails: &str, class: Disruption, budget: &str) -> Cluster {
    let resources = |text: &str, conf: &str| {
        let mut out = vec![file("head", "/etc/slurm/slurm.conf", conf, Disruption::None)];
        for node in nodes {
            out.push(file(node, RAILS, text, class));
            out.push(file(node, "/etc/slurm/slurm.conf", conf, Disruption::None));
        }
        out
    };
    let mut state = State::empty("lab");
    for resource in resources("mtu 9000", "old") {
        state.record(&resource);
    }
    let graph = graph::build(resources(rails, "new")).expect("graph");
    let mut plan = diff(&graph, &state, PlanInputs::default());
    let schedulable = nodes.iter().map(|node| (*node).to_owned()).collect();
    classify(&graph, &mut plan, &schedulable, budget.parse().expect("budget"));
    Cluster { graph, plan, state }
}

fn options() -> RolloutOptions {
    RolloutOptions {
        poll: Duration::from_millis(1),
        drain_timeout: Duration::from_secs(5),
        check_timeout: Duration::from_millis(5),
        check_interval: Duration::from_millis(1),
        ..RolloutOptions::default()
    }
}

/// Runs the rollout; returns its report and every state it saved.
async fn roll(
    cluster: &Cluster,
    state: State,
    connector: &FakeConnector,
    slurm: &impl Scheduler,
    hooks: &impl NodeHooks,
    options: &RolloutOptions,
) -> (RolloutReport, Vec<State>) {
    let saved = Mutex::new(Vec::new());
    let mut save = |state: &State| -> Result<(), String> {
        saved.lock().expect("saved").push(state.clone());
        Ok(())
    };
    let report = run(
        &cluster.graph,
        &cluster.plan,
        connector,
        slurm,
        hooks,
        &ApplyOptions::default(),
        options,
        state,
        &mut save,
    )
    .await;
    (report, saved.into_inner().expect("saved"))
}

fn writes(connector: &FakeConnector, path: &str) -> Vec<String> {
    connector
        .script
        .calls()
        .into_iter()
        .filter_map(|call| match call {
            Call::Write { host, path: written } if written == path => Some(host),
            _ => None,
        })
        .collect()
}

const NODES: [&str; 4] = ["node01", "node02", "node03", "node04"];

#[tokio::test]
async fn drain_class_nodes_go_one_wave_at_a_time_after_the_in_place_changes() {
    let cluster = cluster(&NODES, "mtu 8000", Disruption::Drain, "1");
    let slurm = FakeSlurm::with(&NODES);
    slurm.job("node01", "42", 3);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    let (report, saved) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(report.waves, [["node01"], ["node02"], ["node03"], ["node04"]]);
    assert_eq!(*slurm.most_drained.lock().expect("most"), 1, "never two at once");
    let events = slurm.events();
    let id = report.id.clone().expect("id");
    assert_eq!(events[0], format!("drain node01: toolkit:rollout {id} drain: {RAILS}"));
    assert_eq!(events.iter().filter(|event| event.starts_with("resume")).count(), 4);
    // The head's change (no drain) first; a drained node gets all its changes in its wave.
    let calls = connector.script.calls();
    let first_rail =
        calls.iter().position(|call| matches!(call, Call::Write { path, .. } if path == RAILS)).expect("rails");
    assert_eq!(calls[..first_rail].iter().map(Call::host).collect::<Vec<_>>(), ["head"]);
    assert_eq!(writes(&connector, "/etc/slurm/slurm.conf"), ["head", "node01", "node02", "node03", "node04"]);
    assert_eq!(writes(&connector, RAILS), NODES);
    // Each node was checked once, the state was saved as it went, and the finished
    // rollout is gone from the last state.
    assert_eq!(hooks.log.lock().expect("log").len(), 4);
    assert!(
        saved
            .iter()
            .any(|state| state.rollout.as_ref().is_some_and(|r| r.nodes["node02"].step == RolloutStep::Drained))
    );
    let last = saved.last().expect("saved");
    assert!(last.rollout.is_none());
    assert_eq!(
        last.resources[&format!("node04:file:{RAILS}")].fingerprint,
        cluster.graph.resources[1].desired.fingerprint()
    );
}

#[tokio::test]
async fn a_state_that_cannot_be_saved_is_one_warning_and_a_note_and_the_rollout_goes_on() {
    let cluster = cluster(&NODES, "mtu 8000", Disruption::Drain, "1");
    let slurm = FakeSlurm::with(&NODES);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    // A real save to a path whose parent is a file: every write fails.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("file"), "").expect("file");
    let path = dir.path().join("file/state.json");
    let attempts = Mutex::new(0_usize);
    let mut save = |state: &State| -> Result<(), String> {
        *attempts.lock().expect("attempts") += 1;
        state.clone().save(&path).map_err(|error| error.to_string())
    };
    let logged = crate::testing::Captured::default();
    let writer = logged.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .without_time()
        .with_writer(move || writer.clone())
        .finish();
    // The test's runtime runs on this thread: the rollout's events come here.
    let _default = tracing::subscriber::set_default(subscriber);
    let report = run(
        &cluster.graph,
        &cluster.plan,
        &connector,
        &slurm,
        &hooks,
        &ApplyOptions::default(),
        &options(),
        cluster.state.clone(),
        &mut save,
    )
    .await;
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(report.waves.len(), 4, "the hosts are as they are: the rollout went on");
    assert!(*attempts.lock().expect("attempts") > 4, "saved after every step");
    let text = logged.text();
    let warnings: Vec<&str> = text.lines().filter(|line| line.contains("could not save the state")).collect();
    assert_eq!(warnings.len(), 1, "once, not at every step: {text}");
    assert!(warnings[0].contains("WARN"), "{text}");
    let notes: Vec<&String> =
        report.notes.iter().filter(|note| note.starts_with("could not save the state: ")).collect();
    assert_eq!(notes.len(), 1, "{:?}", report.notes);
    let reason = notes[0].trim_start_matches("could not save the state: ");
    assert!(reason.contains("state.json"), "names the file: {reason}");
    assert!(warnings[0].contains(reason), "the warning says why: {text}");
}

#[tokio::test]
async fn no_scheduler_means_nothing_runs_and_everything_applies_at_once() {
    let cluster = cluster(&NODES, "mtu 8000", Disruption::Reboot, "1");
    let slurm = FakeSlurm { down: true, ..FakeSlurm::with(&NODES) };
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(report.is_success(), "{report:#?}");
    assert!(slurm.events().is_empty());
    assert!(report.waves.is_empty());
    // A first driver install still reboots, and the nodes are checked after it.
    let log = hooks.log.lock().expect("log").clone();
    assert_eq!(log.iter().filter(|entry| entry.starts_with("reboot")).count(), 4, "{log:?}");
    assert_eq!(log.iter().filter(|entry| entry.starts_with("check")).count(), 4, "{log:?}");
}

#[tokio::test]
async fn a_failing_check_keeps_the_node_drained_and_stops_the_rollout() {
    let cluster = cluster(&NODES, "mtu 8000", Disruption::Drain, "1");
    let slurm = FakeSlurm::with(&NODES);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    hooks.failing.lock().expect("failing").push("node02".into());
    let (report, saved) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(!report.is_success());
    assert!(report.stopped.as_deref().is_some_and(|why| why.contains("--max-failures 0")), "{report:?}");
    let id = report.id.clone().expect("id");
    let node02 = slurm.status("node02");
    assert!(node02.drain);
    assert_eq!(node02.reason.as_deref(), Some(format!("toolkit:rollout {id} failed: check rail-links").as_str()));
    // node03 and node04 are untouched: in service, not written.
    assert!(!slurm.status("node03").drain && !slurm.status("node04").drain);
    assert_eq!(writes(&connector, RAILS), ["node01", "node02"]);
    assert!(matches!(
        report.apply.outcome(&format!("node03:file:{RAILS}")),
        Some(Outcome::Skipped { reason: SkipReason::NotReached })
    ));
    let state = saved.last().expect("saved").clone();
    let rollout = state.rollout.clone().expect("kept");
    assert_eq!(rollout.nodes["node02"].step, RolloutStep::Failed);
    assert_eq!(rollout.nodes["node03"].step, RolloutStep::Pending);
    // node03's rail file keeps its old record: a later plan shows it again.
    assert_ne!(
        state.resources[&format!("node03:file:{RAILS}")].fingerprint,
        cluster.graph.resources[5].desired.fingerprint()
    );

    // Fixed: the rerun resumes node02 first (it holds no slot), then goes on; node01
    // is never drained again.
    hooks.failing.lock().expect("failing").clear();
    let rerun = {
        let mut state = state.clone();
        state.rollout = Some(rollout);
        let mut plan_state = state.clone();
        plan_state.rollout = None;
        let mut again = cluster_from(&cluster, &plan_state);
        again.state = state;
        again
    };
    let (report, _) = roll(&rerun, rerun.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(report.id.as_deref(), Some(id.as_str()));
    assert_eq!(report.waves, [["node02"], ["node03"], ["node04"]]);
    let drains: Vec<String> = slurm.events().into_iter().filter(|event| event.starts_with("drain node01")).collect();
    assert_eq!(drains.len(), 1, "{drains:?}");
    assert!(!slurm.status("node02").drain);
}

/// `cluster` planned again against `state` (what a rerun's plan sees).
fn cluster_from(cluster: &Cluster, state: &State) -> Cluster {
    let mut plan = diff(&cluster.graph, state, PlanInputs::default());
    let schedulable = NODES.iter().map(|node| (*node).to_owned()).collect();
    classify(&cluster.graph, &mut plan, &schedulable, "1".parse().expect("budget"));
    Cluster { graph: cluster.graph.clone(), plan, state: state.clone() }
}

#[tokio::test]
async fn a_rollout_resumes_from_every_step_without_draining_a_done_node_again() {
    for step in
        [RolloutStep::Draining, RolloutStep::Drained, RolloutStep::Applied, RolloutStep::Rebooted, RolloutStep::Failed]
    {
        let first = cluster(&NODES, "mtu 8000", Disruption::Drain, "1");
        // Interrupted: node01 done, node02 at `step` (drained by toolkit), the rest pending.
        let slurm = FakeSlurm::with(&NODES);
        slurm.drain_by_admin("node02", "toolkit:rollout r1 drain: x");
        let mut state = first.state.clone();
        for resource in &first.graph.resources {
            if resource.target() == "node01"
                || (step >= RolloutStep::Applied && step != RolloutStep::Failed && resource.target() == "node02")
            {
                state.record(resource);
            }
        }
        state.record(&first.graph.resources[0]);
        let mut nodes = BTreeMap::new();
        for (node, node_step) in [
            ("node01", RolloutStep::Done),
            ("node02", step),
            ("node03", RolloutStep::Pending),
            ("node04", RolloutStep::Pending),
        ] {
            nodes.insert(node.to_owned(), NodeRollout { step: node_step, held_by_other: false, error: None });
        }
        let again = cluster_from(&first, &state);
        state.rollout = Some(RolloutState { id: "r1".into(), started: "2026-11-25T00:00:00Z".into(), nodes });
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let hooks = Hooks::default();
        let (report, saved) = roll(&again, state, &connector, &slurm, &hooks, &options()).await;
        assert!(report.is_success(), "{step:?}: {report:#?}");
        assert_eq!(report.waves[0], ["node02"], "{step:?}: the held node goes first");
        let events = slurm.events();
        assert!(
            !events.iter().any(|event| event.starts_with("drain node01") || event.starts_with("drain node02")),
            "{step:?}: {events:?}"
        );
        assert!(events.contains(&"resume node02".to_owned()), "{step:?}: {events:?}");
        assert!(!writes(&connector, RAILS).contains(&"node01".to_owned()), "{step:?}");
        assert!(saved.last().expect("saved").rollout.is_none(), "{step:?}");
    }
}

#[tokio::test]
async fn nodes_drained_by_someone_else_are_changed_but_left_drained_and_count_against_the_budget() {
    let cluster = cluster(&NODES, "mtu 8000", Disruption::Drain, "2");
    let slurm = FakeSlurm::with(&NODES);
    slurm.drain_by_admin("node03", "bad DIMM");
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(report.is_success(), "{report:#?}");
    // node03 is already out: it goes first for free, with one more beside it.
    assert_eq!(report.waves, vec![vec!["node03", "node01"], vec!["node02", "node04"]]);
    assert_eq!(slurm.status("node03").reason.as_deref(), Some("bad DIMM"));
    assert!(slurm.status("node03").drain);
    assert!(!slurm.events().iter().any(|event| event.contains("node03")));

    // With a budget of 1 and a node held elsewhere (not part of the change), nothing can move.
    let cluster = cluster_three();
    let slurm = FakeSlurm::with(&NODES);
    slurm.drain_by_admin("node04", "bad DIMM");
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    let stopped = report.stopped.expect("stopped");
    assert!(stopped.contains("already are (node04)") && stopped.contains("raise --max-unavailable"), "{stopped}");
    assert!(slurm.events().is_empty());
}

/// A rollout never fights the repair service: a node it holds (drained by the health
/// checks, or left for RMA) is changed but not resumed, and counts against the budget.
#[tokio::test]
async fn nodes_in_repair_or_rma_are_not_resumed_and_count_against_the_budget() {
    let in_repair = "toolkit:health rail-links: rail1 down";
    let rma = crate::health::repair::rma_reason("gpu-inventory", "7 GPUs (planned 8)");
    let cluster = cluster(&NODES, "mtu 8000", Disruption::Drain, "2");
    let slurm = FakeSlurm::with(&NODES);
    slurm.drain_by_admin("node02", in_repair);
    slurm.drain_by_admin("node03", &rma);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(report.is_success(), "{report:#?}");
    // Both are out already: they go first, at no cost; the other two follow in one wave.
    assert_eq!(report.waves, vec![vec!["node02", "node03"], vec!["node01", "node04"]]);
    assert_eq!(slurm.status("node02").reason.as_deref(), Some(in_repair));
    assert_eq!(slurm.status("node03").reason.as_deref(), Some(rma.as_str()));
    assert!(slurm.status("node02").drain && slurm.status("node03").drain);
    let events = slurm.events();
    assert!(!events.iter().any(|event| event.contains("node02") || event.contains("node03")), "{events:?}");
}

/// Three of the four nodes change, budget 1.
fn cluster_three() -> Cluster {
    let mut three = cluster(&NODES[..3], "mtu 8000", Disruption::Drain, "1");
    if let Some(rollout) = &mut three.plan.rollout {
        rollout.schedulable_nodes = 4;
    }
    three
}

#[tokio::test]
async fn a_node_that_does_not_empty_stops_the_rollout_naming_the_job_unless_requeue() {
    let cluster = cluster(&NODES[..1], "mtu 8000", Disruption::Drain, "1");
    let slurm = FakeSlurm::with(&NODES[..1]);
    slurm.job("node01", "77", usize::MAX);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    let short = RolloutOptions { drain_timeout: Duration::from_millis(20), ..options() };
    let (report, saved) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &short).await;
    let stopped = report.stopped.clone().expect("stopped");
    assert!(stopped.contains("node01: 77 (alice, RUNNING)"), "{stopped}");
    assert!(writes(&connector, RAILS).is_empty(), "nothing applied under a running job");
    assert_eq!(saved.last().and_then(|s| s.rollout.clone()).expect("kept").nodes["node01"].step, RolloutStep::Draining);

    let requeue = RolloutOptions { requeue: true, ..short };
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &requeue).await;
    assert!(report.is_success(), "{report:#?}");
    assert!(slurm.events().contains(&"requeue 77".to_owned()));
}

/// `benches/rollout.sh`: plans the waves of a 4,096-node rolling change (drain class on
/// every node, max-unavailable 5 %) and drives them through the real walker and
/// rollout with the in-process transport and Slurm; prints figures, asserts none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by benches/rollout.sh in release mode"]
async fn bench_rollout_4096_nodes() {
    let nodes: Vec<String> = (1..=4096).map(|n| format!("gpu{n:04}")).collect();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let started = Instant::now();
    let cluster = cluster(&names, "mtu 8000", Disruption::Drain, "5%");
    let built = started.elapsed();
    let started = Instant::now();
    let mut plan = cluster.plan.clone();
    let schedulable = nodes.iter().cloned().collect();
    classify(&cluster.graph, &mut plan, &schedulable, "5%".parse().expect("budget"));
    let classified = started.elapsed();
    let rollout = plan.rollout.as_ref().expect("rollout");
    println!(
        "4096 nodes, {} resources: graph+diff {built:.2?}, classes+waves {classified:.2?} ({})",
        cluster.graph.resources.len(),
        rollout.summary().unwrap_or_default()
    );
    let slurm = FakeSlurm::with(&names);
    let mut script = Script::new(fresh_debian);
    script.delay = Duration::ZERO;
    let connector = FakeConnector::new(script);
    let hooks = Hooks::default();
    let started = Instant::now();
    let (report, saved) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    let elapsed = started.elapsed();
    assert!(report.is_success());
    let waves = report.waves.len();
    println!(
        "rollout: {waves} waves in {elapsed:.2?} = {:.1?} per wave (drain, wait, walker, check, resume, {} state saves in all)",
        elapsed / u32::try_from(waves).unwrap_or(1),
        saved.len()
    );
}

#[tokio::test]
async fn switches_that_restart_go_one_at_a_time_before_anything_else() {
    let switch = |name: &str, text: &str| {
        let target = Target::switch(name);
        let conf = Resource::new(
            target.clone(),
            "/etc/frr/frr.conf",
            Desired::File {
                path: "/etc/frr/frr.conf".into(),
                content: Content::new(text.into()),
                mode: 0o640,
                owner: "frr".into(),
                group: "frr".into(),
                secret: false,
                check: None,
            },
        );
        let watched = conf.id.clone();
        let frr = Resource::new(
            target,
            "frr",
            Desired::Service {
                name: "frr".into(),
                enabled: true,
                running: true,
                watches: crate::resource::watched([&watched]),
                on_change: crate::resource::OnChange::Restart,
            },
        )
        .after([watched]);
        [conf, frr]
    };
    let resources = |text: &str| -> Vec<Resource> {
        let mut out = Vec::new();
        for name in ["leaf0", "leaf1", "spine0"] {
            out.extend(switch(name, text));
        }
        out.push(file("head", "/etc/slurm/slurm.conf", text, Disruption::None));
        out
    };
    let mut state = State::empty("lab");
    for resource in resources("old") {
        state.record(&resource);
    }
    let graph = graph::build(resources("new")).expect("graph");
    let mut plan = diff(&graph, &state, PlanInputs::default());
    classify(&graph, &mut plan, &BTreeSet::new(), "1".parse().expect("budget"));
    let cluster = Cluster { graph, plan, state };
    let slurm = FakeSlurm::with(&NODES);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &Hooks::default(), &options()).await;
    assert!(report.is_success(), "{report:#?}");
    let hosts: Vec<String> = connector.script.calls().iter().map(|call| call.host().to_owned()).collect();
    let mut order: Vec<&str> = Vec::new();
    for host in &hosts {
        if order.last() != Some(&host.as_str()) {
            order.push(host);
        }
    }
    // Each switch's writes and restart together, one switch after another, then the head.
    assert_eq!(order, ["leaf0", "leaf1", "spine0", "head"], "{hosts:?}");
}

/// Hooks that record, for every BMC change and reboot, whether the node was drained
/// and empty at that moment; `verify` fails for the hosts in `unverified`.
struct BmcHooks<'a> {
    slurm: &'a FakeSlurm,
    log: Mutex<Vec<String>>,
    unverified: Vec<String>,
}

impl BmcHooks<'_> {
    fn empty(&self, host: &str) -> &'static str {
        let status = self.slurm.status(host);
        let jobs = self.slurm.nodes.lock().expect("nodes")[host].1.len();
        if status.drain && jobs == 0 { "drained" } else { "IN SERVICE" }
    }
}

impl NodeHooks for BmcHooks<'_> {
    async fn reboot(&self, host: &str) -> Result<(), String> {
        let line = format!("reboot {host} {}", self.empty(host));
        self.log.lock().expect("log").push(line);
        Ok(())
    }

    async fn check(&self, hosts: &[String]) -> BTreeMap<String, Result<(), String>> {
        hosts.iter().map(|host| (host.clone(), Ok(()))).collect()
    }

    async fn apply_bmc(&self, host: &str, items: &[&ApiDesired]) -> Result<(), String> {
        let ids: Vec<String> = items.iter().map(|item| item.id()).collect();
        let line = format!("bmc {host} {} {}", self.empty(host), ids.join(","));
        self.log.lock().expect("log").push(line);
        Ok(())
    }

    async fn verify_bmc(&self, host: &str, _items: &[&ApiDesired]) -> Result<(), String> {
        self.log.lock().expect("log").push(format!("verify {host}"));
        if self.unverified.iter().any(|h| h == host) {
            return Err("firmware `BIOS` is `2.3.1`, wanted `2.4.1`".into());
        }
        Ok(())
    }
}

/// Per node: firmware and a BIOS attribute waiting for the wave, power on.
fn bmc_cluster(nodes: &[&str]) -> Cluster {
    use crate::resource::api::PowerState;
    let mut resources = Vec::new();
    let mut observed = BTreeMap::new();
    for node in nodes {
        let target = Target::node(node);
        let items = [
            ApiDesired::Firmware {
                host: (*node).to_owned(),
                component: "BIOS".into(),
                version: "2.4.1".into(),
                image: "http://fw/bios.bin".into(),
                sha256: "0".repeat(64),
                allow_downgrade: false,
            },
            ApiDesired::BiosAttribute {
                host: (*node).to_owned(),
                name: "ProcTurboMode".into(),
                value: "Disabled".into(),
            },
        ];
        for item in items {
            let before = if matches!(item, ApiDesired::Firmware { .. }) { "2.3.1" } else { "Enabled" };
            observed.insert(item.id(), Some(before.to_owned()));
            let name = item.name();
            resources
                .push(Resource::new(target.clone(), &name, Desired::Api(Box::new(item))).disrupts(Disruption::Reboot));
        }
        let power = ApiDesired::Power { host: (*node).to_owned(), state: PowerState::On };
        observed.insert(power.id(), Some("On".to_owned()));
        resources.push(Resource::new(target, "system", Desired::Api(Box::new(power))));
    }
    let graph = graph::build(resources).expect("graph");
    let schedulable: BTreeSet<String> = nodes.iter().map(|node| (*node).to_owned()).collect();
    let observation =
        crate::deploy::api::ApiObservation { observed, schedulable: schedulable.clone(), ..Default::default() };
    let state = State::empty("lab");
    let mut plan = diff(&graph, &state, PlanInputs::default());
    plan.changes = crate::deploy::api::changes(&graph, &observation);
    plan.summary = crate::plan::Summary::of(&plan.changes);
    classify(&graph, &mut plan, &schedulable, "1".parse().expect("budget"));
    Cluster { graph, plan, state }
}

#[tokio::test]
async fn bios_and_firmware_change_inside_the_wave_after_the_drain_and_before_the_reset() {
    let nodes = ["node01", "node02"];
    let cluster = bmc_cluster(&nodes);
    assert_eq!(cluster.plan.rollout.as_ref().expect("rollout").waves, [["node01"], ["node02"]]);
    let slurm = FakeSlurm::with(&nodes);
    slurm.job("node01", "42", 3);
    slurm.job("node02", "43", 6);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = BmcHooks { slurm: &slurm, log: Mutex::new(Vec::new()), unverified: Vec::new() };
    let (report, saved) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(
        *hooks.log.lock().expect("log"),
        [
            "bmc node01 drained node01:firmware:BIOS,node01:bios:ProcTurboMode",
            "reboot node01 drained",
            "verify node01",
            "bmc node02 drained node02:firmware:BIOS,node02:bios:ProcTurboMode",
            "reboot node02 drained",
            "verify node02",
        ]
    );
    let id = report.id.clone().expect("id");
    assert_eq!(slurm.events()[0], format!("drain node01: toolkit:rollout {id} reboot: BIOS"));
    assert!(matches!(report.apply.outcome("node02:firmware:BIOS"), Some(Outcome::Changed)));
    // Recorded once made: the next plan compares with the BMC again.
    assert!(saved.last().expect("saved").resources.contains_key("node02:firmware:BIOS"));
    // Nothing went over SSH for them.
    assert!(connector.script.calls().is_empty(), "{:?}", connector.script.calls());
}

#[tokio::test]
async fn a_node_whose_bmc_does_not_report_the_new_firmware_stays_drained() {
    let nodes = ["node01", "node02"];
    let cluster = bmc_cluster(&nodes);
    let slurm = FakeSlurm::with(&nodes);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = BmcHooks { slurm: &slurm, log: Mutex::new(Vec::new()), unverified: vec!["node01".into()] };
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(!report.is_success());
    let id = report.id.clone().expect("id");
    assert_eq!(
        slurm.status("node01").reason.as_deref(),
        Some(
            format!("toolkit:rollout {id} failed: check BMC after reset: firmware `BIOS` is `2.3.1`, wanted `2.4.1`")
                .as_str()
        )
    );
    // node02 was never touched.
    assert!(!slurm.status("node02").drain);
    assert!(!hooks.log.lock().expect("log").iter().any(|line| line.contains("node02")));
    assert!(matches!(
        report.apply.outcome("node02:firmware:BIOS"),
        Some(Outcome::Skipped { reason: SkipReason::NotReached })
    ));
}

const SLURM_CONF: &str = "/etc/slurm/slurm.conf";
const GRES_CONF: &str = "/etc/slurm/gres.conf";
const HEALTH: &str = "/usr/local/lib/toolkit/health/check";

/// The lab's node line with `gpus` GPUs.
fn node_line(gpus: u32) -> String {
    format!(
        "NodeName=node[01-04] Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 CPUs=2 RealMemory=1024 Gres=gpu:h100:{gpus} State=UNKNOWN\n"
    )
}

fn slurm_conf(gpus: u32) -> String {
    format!(
        "ClusterName=lab\nSlurmctldHost=head\n\n# Nodes\n{}\n# Partitions\nPartitionName=gpu Nodes=node[01-04] Default=YES\n",
        node_line(gpus)
    )
}

/// A head with slurm.conf and slurmctld; nodes with gres.conf (drain), slurm.conf,
/// their health program and slurmd: deployed with `from` GPUs per node, planned with `to`.
fn gres_cluster(from: u32, to: u32) -> Cluster {
    let resources = |gpus: u32| {
        let conf = slurm_conf(gpus);
        let mut out = vec![file("head", SLURM_CONF, &conf, Disruption::None)];
        out.push(crate::render::common::service(
            &Target::node("head"),
            "slurmctld",
            vec![out[0].id.clone()],
            crate::resource::OnChange::Restart,
        ));
        for node in NODES {
            let gres = file(node, GRES_CONF, &format!("NodeName={node} Name=gpu Count={gpus}\n"), Disruption::Drain);
            let node_conf = file(node, SLURM_CONF, &conf, Disruption::None);
            // The health program expects the node's GPU count too.
            let health = file(node, HEALTH, &format!("gpu-inventory >= {gpus}\n"), Disruption::None);
            let slurmd = crate::render::common::service(
                &Target::node(node),
                "slurmd",
                vec![gres.id.clone(), node_conf.id.clone(), health.id.clone()],
                crate::resource::OnChange::Restart,
            );
            out.extend([gres, node_conf, health, slurmd]);
        }
        out
    };
    let mut state = State::empty("lab");
    for resource in resources(from) {
        state.record(&resource);
        if let Desired::File { content, .. } = &*resource.desired {
            state.contents.insert(content.sha256().to_owned(), content.text().to_owned());
        }
    }
    let graph = graph::build(resources(to)).expect("graph");
    let mut plan = diff(&graph, &state, PlanInputs::default());
    let schedulable = NODES.iter().map(|node| (*node).to_owned()).collect();
    classify(&graph, &mut plan, &schedulable, "1".parse().expect("budget"));
    Cluster { graph, plan, state }
}

/// Positions in `calls` of the calls `matches` selects.
fn positions(calls: &[Call], matches: impl Fn(&Call) -> bool) -> Vec<usize> {
    calls.iter().enumerate().filter(|(_, call)| matches(call)).map(|(at, _)| at).collect()
}

fn write_at(calls: &[Call], host: &str, path: &str) -> Vec<usize> {
    positions(calls, |call| matches!(call, Call::Write { host: h, path: p } if h == host && p == path))
}

/// The restarts of slurmd the rollout itself asks for (so the node registers again).
fn registrations(calls: &[Call], host: &str) -> Vec<usize> {
    positions(
        calls,
        |call| matches!(call, Call::Exec { host: h, argv } if h == host && argv == &["systemctl", "restart", "slurmd"]),
    )
}

#[tokio::test]
async fn a_gpu_increase_reaches_slurmctld_wave_by_wave_after_each_node() {
    let cluster = gres_cluster(4, 8);
    let agreement = cluster.plan.rollout.as_ref().and_then(|rollout| rollout.agreement.as_ref()).expect("agreement");
    assert_eq!(agreement.waved().collect::<Vec<_>>(), NODES);
    let slurm = FakeSlurm::with(&NODES);
    slurm.job("node01", "42", 3);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let hooks = Hooks::default();
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &hooks, &options()).await;
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(*slurm.most_drained.lock().expect("most"), 1);
    let calls = connector.script.calls();
    // slurmctld's slurm.conf: once per wave, then the blueprint's text once more
    // (unchanged on a real host: no restart).
    let head = write_at(&calls, "head", SLURM_CONF);
    assert_eq!(head.len(), 5, "{calls:#?}");
    let mut previous_wave_end: Option<usize> = None;
    for (wave, node) in NODES.iter().enumerate() {
        let gres = write_at(&calls, node, GRES_CONF)[0];
        let health = write_at(&calls, node, HEALTH)[0];
        let registered = registrations(&calls, node);
        assert_eq!(registered.len(), 1, "{node} registers again once");
        // Nothing of the node before the wave before it ended; the node, then slurmctld,
        // then its registration.
        assert!(previous_wave_end.is_none_or(|end| end < gres && end < health), "{node}: {calls:#?}");
        assert!(gres < head[wave] && health < head[wave] && head[wave] < registered[0], "{node}: {calls:#?}");
        previous_wave_end = Some(registered[0]);
    }
    let resumes: Vec<String> = slurm.events().into_iter().filter(|event| event.starts_with("resume")).collect();
    assert_eq!(resumes, NODES.map(|node| format!("resume {node}")));
}

#[tokio::test]
async fn a_gpu_decrease_reaches_slurmctld_before_each_wave_changes_its_nodes() {
    let cluster = gres_cluster(8, 4);
    let agreement = cluster.plan.rollout.as_ref().and_then(|rollout| rollout.agreement.as_ref()).expect("agreement");
    assert!(agreement.nodes.values().all(|node| node.direction == crate::plan::agreement::Direction::Decrease));
    let slurm = FakeSlurm::with(&NODES);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &Hooks::default(), &options()).await;
    assert!(report.is_success(), "{report:#?}");
    let calls = connector.script.calls();
    let head = write_at(&calls, "head", SLURM_CONF);
    for (wave, node) in NODES.iter().enumerate() {
        let gres = write_at(&calls, node, GRES_CONF)[0];
        assert!(head[wave] < gres, "slurmctld first for {node}: {calls:#?}");
        if wave > 0 {
            assert!(registrations(&calls, NODES[wave - 1])[0] < head[wave], "one wave after the other");
        }
    }
}

/// Slurm where some nodes registered below their line: INVAL and drained by slurmctld,
/// refused a resume until slurmd restarts (a valid registration).
struct InvalidSlurm {
    slurm: FakeSlurm,
    invalid: Mutex<BTreeSet<String>>,
    script: std::sync::Arc<Script>,
}

impl InvalidSlurm {
    fn registered(&self, node: &str) -> bool {
        !registrations(&self.script.calls(), node).is_empty()
    }
}

impl Scheduler for InvalidSlurm {
    async fn nodes(&self) -> Result<Option<BTreeMap<String, NodeStatus>>, SchedulerError> {
        let mut nodes = self.slurm.nodes().await?;
        self.invalid.lock().expect("invalid").retain(|node| !self.registered(node));
        let invalid = self.invalid.lock().expect("invalid").clone();
        for (name, status) in nodes.iter_mut().flatten() {
            status.invalid = invalid.contains(name);
        }
        Ok(nodes)
    }

    async fn drain(&self, node: &str, reason: &str) -> Result<(), SchedulerError> {
        self.slurm.drain(node, reason).await
    }

    async fn resume(&self, node: &str) -> Result<(), SchedulerError> {
        if self.invalid.lock().expect("invalid").contains(node) && !self.registered(node) {
            return Err(SchedulerError::Refused {
                host: "head".into(),
                command: format!("scontrol update nodename={node} state=resume"),
                message: format!("Invalid node state transition requested for node {node} from=INVAL to=RESUME"),
            });
        }
        self.slurm.resume(node).await
    }

    async fn jobs_on(&self, node: &str) -> Result<Vec<Job>, SchedulerError> {
        self.slurm.jobs_on(node).await
    }

    async fn requeue(&self, jobs: &[String]) -> Result<(), SchedulerError> {
        self.slurm.requeue(jobs).await
    }
}

#[tokio::test]
async fn a_node_slurmctld_set_inval_for_its_definition_is_taken_over_and_resumed() {
    // What an earlier toolkit left: slurmctld expects 8 GPUs of node03 and node04,
    // which still report 4.
    let cluster = gres_cluster(4, 8);
    let connector = FakeConnector::new(Script::new(fresh_debian));
    let slurm = InvalidSlurm {
        slurm: FakeSlurm::with(&NODES),
        invalid: Mutex::new(["node03", "node04"].map(str::to_owned).into()),
        script: connector.script.clone(),
    };
    for node in ["node03", "node04"] {
        slurm.slurm.drain_by_admin(node, "gres/gpu count reported lower than configured (4 < 8)");
    }
    let (report, _) = roll(&cluster, cluster.state.clone(), &connector, &slurm, &Hooks::default(), &options()).await;
    // The nodes already out of service go first and cost no slot.
    assert_eq!(report.waves, [vec!["node03", "node04"], vec!["node01"], vec!["node02"]]);
    assert!(report.is_success(), "{report:#?}");
    let events = slurm.slurm.events();
    let id = report.id.clone().expect("id");
    for node in NODES {
        assert!(events.contains(&format!("resume {node}")), "{node} back in service: {events:#?}");
    }
    assert!(
        events.iter().any(|event| event.starts_with(&format!("drain node03: toolkit:rollout {id}"))),
        "node03 is toolkit's now: {events:#?}"
    );
    assert!(!slurm.slurm.status("node03").drain && !slurm.slurm.status("node04").drain);
}
