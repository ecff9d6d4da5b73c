//! Day 2 on a running lab, for what slurmctld and the nodes must agree on: the GPU
//! count goes 4 → 8 and back to 4 while a job holds all four GPUs of node01, with
//! `--max-unavailable 1`. The job completes (Slurm 22.05 aborts a job whose node's
//! GRES count changes under it when slurmctld rereads its config, and a node that
//! reports fewer GPUs than its line is INVAL), no node ends INVAL or drained, each
//! node is drained by toolkit once and never two at once (Slurm's event log), no
//! health check drains a node on the way, and the next plan has nothing to change.
//!
//! Runs under its own cluster name and subnets (`lab-agree`, 10.141.0.0/24, rail
//! pool 10.142.0.0/16). `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use super::lab::{lab_or_skip, text, toolkit};
use super::lab_e2e::{
    NodeEvent, Teardown, assert_success, exec_ok_in, fresh_lab, head_clock, make_tenant_users, node_events_since,
};

const CLUSTER: &str = "lab-agree";
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-agree\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.141.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.142.0.0/16"),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.142 = `0a:8e`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.141.0."), (":0a:c8:", ":0a:8e:")];
const NODES: [&str; 4] = ["node01", "node02", "node03", "node04"];

struct Lab<'a> {
    dir: &'a Path,
}

impl Lab<'_> {
    fn exec_ok(&self, host: &str, command: &[&str]) -> String {
        exec_ok_in(self.dir, CLUSTER, host, command)
    }

    fn set_gpus(&self, from: u32, to: u32) {
        let path = self.dir.join("lab.yaml");
        let blueprint = std::fs::read_to_string(&path).expect("blueprint");
        let (old, new) = (format!("gpus_per_node: {from}\n"), format!("gpus_per_node: {to}\n"));
        assert!(blueprint.contains(&old), "the blueprint has no `{old}`");
        std::fs::write(&path, blueprint.replace(&old, &new)).expect("write blueprint");
    }

    fn deploy(&self) -> Output {
        let args = [
            "deploy",
            "lab.yaml",
            "-i",
            "inventory.yaml",
            "--yes",
            "--max-unavailable",
            "1",
            "--drain-timeout",
            "180",
            "--check-timeout",
            "30",
        ];
        let started = Instant::now();
        let output = toolkit(self.dir, &args);
        eprintln!("deploy took {:.0?} (exit {:?})", started.elapsed(), output.status.code());
        output
    }

    /// `sleep seconds` as alice holding all `gpus` GPUs of node01, running; its id.
    fn job_on_node01(&self, gpus: u32, seconds: u32) -> String {
        let (gres, sleep) = (format!("--gres=gpu:{gpus}"), format!("sleep {seconds}"));
        let job = self
            .exec_ok(
                "head",
                &[
                    "runuser",
                    "-u",
                    "alice",
                    "--",
                    "sbatch",
                    "--parsable",
                    "--chdir=/tmp",
                    "--output=/dev/null",
                    "--nodelist=node01",
                    &gres,
                    "--wrap",
                    &sleep,
                ],
            )
            .trim()
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.exec_ok("head", &["squeue", "-h", "-j", &job, "-o", "%T"]).contains("RUNNING") {
            assert!(Instant::now() < deadline, "job {job} did not start");
            std::thread::sleep(Duration::from_secs(1));
        }
        job
    }

    /// Every record Slurm kept of `job` (`-D`: a requeue leaves one per run).
    fn job_records(&self, job: &str) -> Vec<String> {
        let listed = self.exec_ok("head", &["sacct", "-n", "-X", "-D", "-P", "-j", job, "-o", "State"]);
        listed.lines().map(|line| line.trim().to_owned()).filter(|line| !line.is_empty()).collect()
    }

    fn now(&self) -> String {
        head_clock(self.dir, CLUSTER)
    }

    /// Every node event since `since`, in start order, once `at_least` toolkit rollout
    /// drains are closed.
    fn events_since(&self, since: &str, at_least: usize) -> Vec<NodeEvent> {
        node_events_since(self.dir, CLUSTER, since, at_least, |_| true, |event| event.3.starts_with("toolkit:rollout"))
    }

    /// Each node idle, registered valid, with `gpus` GPUs in slurmctld's view.
    fn assert_nodes_serve_with(&self, gpus: u32, deploy: &Output) {
        let deadline = Instant::now() + Duration::from_mins(1);
        loop {
            let sinfo = self.exec_ok("head", &["sinfo", "--noheader", "--Node", "--format=%N %T %G"]);
            let want: Vec<String> = NODES.iter().map(|node| format!("{node} idle gpu:h100:{gpus}")).collect();
            let seen: Vec<String> =
                sinfo.lines().map(|line| line.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
            if seen.iter().map(|line| line.split("(S:").next().unwrap_or(line)).eq(want.iter().map(String::as_str)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "not every node serves with {gpus} GPUs:\n{sinfo}\n{}",
                text(&deploy.stderr)
            );
            std::thread::sleep(Duration::from_secs(2));
        }
        let shown = self.exec_ok("head", &["scontrol", "show", "node"]);
        assert!(!shown.contains("INVAL"), "a node is INVAL:\n{shown}");
    }

    fn assert_plan_clean(&self, why: &str) {
        let plan = toolkit(self.dir, &["plan", "lab.yaml", "-i", "inventory.yaml"]);
        assert!(
            plan.status.success(),
            "{why}: the plan still has changes:\n{}{}",
            text(&plan.stdout),
            text(&plan.stderr)
        );
    }
}

/// Each node drained by toolkit's rollout once, never two at once, and no health
/// check or slurmctld drain (INVAL) in between.
fn assert_rolled_one_at_a_time(events: &[(String, String, String, String)], deploy: &Output) {
    let shown = || format!("{events:#?}\n{}", text(&deploy.stderr));
    // slurmctld restarted in a wave reports its drained nodes to slurmdbd again, which
    // closes the drain's event and opens the same one: one drain, recorded twice.
    let mut ours: Vec<(String, String, String, String)> = Vec::new();
    for event in events.iter().filter(|event| event.3.starts_with("toolkit:rollout")) {
        match ours.iter_mut().find(|drain| drain.0 == event.0 && drain.3 == event.3 && drain.2 == event.1) {
            Some(drain) => drain.2.clone_from(&event.2),
            None => ours.push(event.clone()),
        }
    }
    let mut drained: Vec<&str> = ours.iter().map(|event| event.0.as_str()).collect();
    drained.sort_unstable();
    assert_eq!(drained, NODES, "each node drained by toolkit exactly once: {}", shown());
    for pair in ours.windows(2) {
        assert!(pair[0].2 <= pair[1].1, "two nodes drained at once: {}", shown());
    }
    let others: Vec<&(String, String, String, String)> =
        events.iter().filter(|event| !event.3.starts_with("toolkit:rollout")).collect();
    assert!(others.is_empty(), "a node was taken out of service by something else: {others:#?}\n{}", shown());
}

#[test]
fn a_gpu_count_change_loses_no_job_and_leaves_no_node_inval() {
    let Some(_one_lab) = lab_or_skip("lab agree test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let _teardown = Teardown(dir.path(), CLUSTER);
    let model = fresh_lab(dir.path(), CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    make_tenant_users(dir.path(), CLUSTER, &model);
    let lab = Lab { dir: dir.path() };
    assert_success(&lab.deploy(), "the first deploy");

    for (from, to) in [(4, 8), (8, 4)] {
        let started = Instant::now();
        let job = lab.job_on_node01(4, 30);
        lab.set_gpus(from, to);
        let plan = toolkit(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml", "--max-unavailable", "1"]);
        let shown = text(&plan.stdout);
        let (direction, order) = if to > from {
            ("increase", "nodes first in 4 waves of 1, then slurmctld")
        } else {
            ("decrease", "slurmctld first with each wave's new lines, then the wave's nodes, in 4 waves of 1")
        };
        assert!(shown.contains(&format!("Rollout: gres on node[01-04] ({direction}): {order}")), "{shown}");

        let since = lab.now();
        let deploy = lab.deploy();
        assert_success(&deploy, &format!("GPUs {from} → {to}"));
        eprintln!("GPUs {from} → {to} with a job on node01: {:.0?} from the job's start", started.elapsed());
        assert_eq!(lab.job_records(&job), ["COMPLETED"], "job {job} ran once and completed");
        lab.assert_nodes_serve_with(to, &deploy);
        assert_rolled_one_at_a_time(&lab.events_since(&since, 4), &deploy);
        lab.assert_plan_clean(&format!("after GPUs {from} → {to}"));
    }
}
