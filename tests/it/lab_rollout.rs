//! Day 2 on a running lab: a change that needs nodes empty (the rails' MTU) goes
//! through Slurm one node at a time while a job runs, and the job completes; a node
//! that fails its post-change check stays drained and stops the rollout, and the
//! rerun after the fix resumes it; a deploy killed half way resumes without draining
//! a finished node again. Slurm's own event log (`sacctmgr show event`) is the judge
//! of who was drained when.
//!
//! Runs under its own cluster name and subnets (`lab-roll`, 10.131.0.0/24, rail pool
//! 10.132.0.0/16). `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::lab::{lab_or_skip, text, toolkit};
use super::lab_e2e::{
    NodeEvent, Teardown, assert_success, exec_ok_in, fresh_lab, head_clock, make_tenant_users, node_events_since,
    start_job,
};

const CLUSTER: &str = "lab-roll";
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-roll\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.131.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.132.0.0/16"),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.132 = `0a:84`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.131.0."), (":0a:c8:", ":0a:84:")];
const NODES: [&str; 4] = ["node01", "node02", "node03", "node04"];

/// The test's lab: its inputs' directory; toolkit and `lab exec` run from there.
struct Lab<'a> {
    dir: &'a Path,
}

impl Lab<'_> {
    fn run(&self, args: &[&str]) -> Output {
        toolkit(self.dir, args)
    }

    fn exec_ok(&self, host: &str, command: &[&str]) -> String {
        exec_ok_in(self.dir, CLUSTER, host, command)
    }

    fn set_mtu(&self, from: u32, to: u32) {
        let path = self.dir.join("lab.yaml");
        let blueprint = std::fs::read_to_string(&path).expect("blueprint");
        let (old, new) = (format!("rail_mtu: {from}\n"), format!("rail_mtu: {to}\n"));
        assert!(blueprint.contains(&old), "the blueprint has no `{old}`");
        std::fs::write(&path, blueprint.replace(&old, &new)).expect("write blueprint");
    }

    fn deploy(&self, extra: &[&str]) -> Output {
        let mut args = vec![
            "deploy",
            "lab.yaml",
            "-i",
            "inventory.yaml",
            "--yes",
            "--drain-timeout",
            "180",
            "--check-timeout",
            "30",
        ];
        args.extend_from_slice(extra);
        let started = Instant::now();
        let output = self.run(&args);
        eprintln!("deploy {extra:?} took {:.0?} (exit {:?})", started.elapsed(), output.status.code());
        output
    }

    fn rail_mtu(&self, node: &str) -> u32 {
        self.exec_ok(node, &["cat", "/sys/class/net/rail0/mtu"]).trim().parse().expect("an MTU")
    }

    fn now(&self) -> String {
        head_clock(self.dir, CLUSTER)
    }

    /// toolkit's rollout drains since `since`, in start order, once `at_least` are closed.
    fn drains_since(&self, since: &str, at_least: usize) -> Vec<NodeEvent> {
        // A failure re-reasons a drain (slurmdbd opens an event per reason): it is
        // not one more drain to wait for, or the wait ends before the last node's
        // event reaches slurmdbd (slurmctld sends events asynchronously).
        node_events_since(
            self.dir,
            CLUSTER,
            since,
            at_least,
            |event| event.3.starts_with("toolkit:rollout"),
            |event| !event.3.contains(" failed: "),
        )
    }

    fn node_state(&self, node: &str) -> (String, String) {
        let line = self.exec_ok("head", &["sinfo", "--noheader", "--Node", "-n", node, "--format=%T|%E"]);
        let line = line.lines().next().unwrap_or_default();
        let (state, reason) = line.split_once('|').unwrap_or((line, ""));
        (state.trim().to_owned(), reason.trim().to_owned())
    }

    fn wait_all_idle(&self) {
        let deadline = Instant::now() + Duration::from_mins(1);
        loop {
            let sinfo = self.exec_ok("head", &["sinfo", "--noheader", "--Node", "--format=%N %T"]);
            let idle: Vec<&str> = sinfo.lines().filter_map(|line| line.strip_suffix(" idle")).collect();
            if idle == NODES {
                return;
            }
            assert!(Instant::now() < deadline, "not every node became idle:\n{sinfo}");
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    fn assert_plan_clean(&self, why: &str) {
        let plan = self.run(&["plan", "lab.yaml", "-i", "inventory.yaml"]);
        assert!(
            plan.status.success(),
            "{why}: the plan still has changes:\n{}{}",
            text(&plan.stdout),
            text(&plan.stderr)
        );
    }
}

/// Each node drained once, and no two drains overlap. A failure recorded as the
/// drain's new reason is the same drain going on (slurmdbd opens an event per reason).
/// `deploys` is what the deploys printed, shown when the assertion fails.
fn assert_one_at_a_time(events: &[(String, String, String, String)], nodes: &[&str], deploys: &str) {
    let events: Vec<&(String, String, String, String)> =
        events.iter().filter(|event| !event.3.contains(" failed: ")).collect();
    let mut drained: Vec<&str> = events.iter().map(|event| event.0.as_str()).collect();
    drained.sort_unstable();
    assert_eq!(drained, nodes, "each node drained by toolkit exactly once: {events:#?}\n{deploys}");
    for pair in events.windows(2) {
        assert!(pair[0].2 <= pair[1].1, "two nodes drained at once: {pair:#?}");
    }
}

#[test]
fn a_rolling_change_drains_one_node_at_a_time_and_loses_no_job() {
    let Some(_one_lab) = lab_or_skip("lab rollout test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let _teardown = Teardown(dir.path(), CLUSTER);
    let model = fresh_lab(dir.path(), CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    make_tenant_users(dir.path(), CLUSTER, &model);
    let lab = Lab { dir: dir.path() };
    let first = lab.deploy(&[]);
    assert_success(&first, "the first deploy");
    assert!(text(&first.stderr).contains("no scheduler answers yet"), "{}", text(&first.stderr));
    lab.wait_all_idle();

    rolling_mtu_change_keeps_the_job(&lab);
    failing_check_stops_and_the_rerun_resumes(&lab);
    killed_rollout_resumes_without_draining_again(&lab);
    reboot_class_change_reboots_two_at_a_time(&lab);
}

/// 9000 → 8000 while alice's job runs on node01: four waves of one, the job completes.
fn rolling_mtu_change_keeps_the_job(lab: &Lab<'_>) {
    let job = start_job(lab.dir, CLUSTER, "node01", 20);
    lab.set_mtu(9000, 8000);
    let plan = lab.run(&["plan", "lab.yaml", "-i", "inventory.yaml"]);
    assert_eq!(plan.status.code(), Some(2), "{}", text(&plan.stderr));
    let shown = text(&plan.stdout);
    assert!(shown.contains("4 nodes need drain: 4 waves of 1 (max-unavailable 1)"), "{shown}");
    assert!(shown.contains("drain   node[01-04]  (file:/etc/netplan/60-toolkit-rails.yaml"), "{shown}");

    let since = lab.now();
    let deploy = lab.deploy(&["--max-unavailable", "1"]);
    assert_success(&deploy, "the rolling MTU change");
    let state = lab.exec_ok("head", &["sacct", "-n", "-X", "-P", "-j", &job, "-o", "State"]);
    assert_eq!(state.trim(), "COMPLETED", "the job running during the change completes");
    let events = lab.drains_since(&since, 4);
    assert_one_at_a_time(&events, &NODES, &text(&deploy.stderr));
    assert!(
        events[0].0 == "node01" && events[0].3.contains("drain: /etc/netplan/60-toolkit-rails.yaml"),
        "{events:#?}"
    );
    for node in NODES {
        assert_eq!(lab.rail_mtu(node), 8000, "{node}");
    }
    lab.wait_all_idle();
    lab.assert_plan_clean("after the rolling MTU change");
}

/// node03 cannot run its checks (no `ip` to list its links): it stays drained with the failure, the
/// rollout stops before node04; once fixed, the rerun resumes node03 and finishes
/// node04 without draining node01 or node02 again.
fn failing_check_stops_and_the_rerun_resumes(lab: &Lab<'_>) {
    // An `ip` that fails, first on root's PATH: the rail-links check cannot read the links.
    lab.exec_ok(
        "node03",
        &[
            "sh",
            "-c",
            "printf '#!/bin/sh\\necho broken >&2\\nexit 1\\n' > /usr/local/sbin/ip && chmod +x /usr/local/sbin/ip",
        ],
    );
    lab.set_mtu(8000, 7000);
    let since = lab.now();
    let deploy = lab.deploy(&[]);
    assert_eq!(deploy.status.code(), Some(1), "{}", text(&deploy.stderr));
    assert!(text(&deploy.stderr).contains("rollout stopped"), "{}", text(&deploy.stderr));
    let (state, reason) = lab.node_state("node03");
    assert!(
        state.starts_with("drained") && reason.contains("failed: check rail-links"),
        "node03: {state} {reason}\n{}",
        text(&deploy.stderr)
    );
    assert_eq!(lab.node_state("node04").0, "idle", "node04 is untouched");
    assert_eq!(lab.rail_mtu("node04"), 8000);
    assert_eq!(lab.rail_mtu("node02"), 7000);

    lab.exec_ok("node03", &["rm", "/usr/local/sbin/ip"]);
    let rerun = lab.deploy(&[]);
    assert_success(&rerun, "the rerun after the fix");
    let events = lab.drains_since(&since, 4);
    let deploys = format!(
        "the failing deploy:\n{}\nthe rerun:\n{}\n{}",
        text(&deploy.stderr),
        text(&rerun.stdout),
        text(&rerun.stderr)
    );
    assert_one_at_a_time(&events, &NODES, &deploys);
    assert_eq!(lab.rail_mtu("node04"), 7000);
    lab.wait_all_idle();
    lab.assert_plan_clean("after the resumed rollout");
}

/// The deploy is killed (as a lost laptop would be) once node02 is applied; the lock
/// is cleared by hand, and the rerun finishes without draining node01 or node02 again.
fn killed_rollout_resumes_without_draining_again(lab: &Lab<'_>) {
    lab.set_mtu(7000, 6000);
    let since = lab.now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"])
        .current_dir(lab.dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolkit runs");
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().expect("stderr")).lines() {
        let line = line.unwrap_or_default();
        log.push_str(&line);
        log.push('\n');
        if line == "changed: node02:file:/etc/netplan/60-toolkit-rails.yaml" {
            child.kill().expect("kill");
            break;
        }
    }
    let _ = child.wait();
    assert!(log.contains("changed: node02:file"), "the deploy never reached node02:\n{log}");
    let (state, reason) = lab.node_state("node02");
    assert!(state.starts_with("drain") && reason.starts_with("toolkit:rollout"), "node02 held: {state} {reason}");

    let status = lab.run(&["status", "lab.yaml", "-i", "inventory.yaml"]);
    assert_success(&status, "toolkit status after the kill");
    let shown = text(&status.stdout);
    assert!(
        shown.contains("1 done, 1 in flight, 2 pending") && shown.contains("Drained by toolkit:\n  node02"),
        "{shown}"
    );

    assert_success(&lab.run(&["unlock", "lab.yaml", "-i", "inventory.yaml", "--force"]), "unlock after the kill");
    let rerun = lab.deploy(&[]);
    assert_success(&rerun, "the rerun after the kill");
    let events = lab.drains_since(&since, 4);
    assert_one_at_a_time(&events, &NODES, &format!("the killed deploy:\n{log}\nthe rerun:\n{}", text(&rerun.stderr)));
    for node in NODES {
        assert_eq!(lab.rail_mtu(node), 6000, "{node}");
    }
    lab.wait_all_idle();
    lab.assert_plan_clean("after the killed rollout was resumed");
}

/// New kernel module parameters are read only at module load: every node is drained,
/// changed and rebooted (a new boot: its container restarted by `systemctl reboot`),
/// two at a time, and comes back into service.
fn reboot_class_change_reboots_two_at_a_time(lab: &Lab<'_>) {
    let path = lab.dir.join("lab.yaml");
    let blueprint = std::fs::read_to_string(&path).expect("blueprint");
    let anchor = "    gpu: { model: h100, count: \"${gpus_per_node}\" }\n";
    assert!(blueprint.contains(anchor), "the lab blueprint's GPU line moved: update this test");
    let edited = blueprint.replace(anchor, &format!("{anchor}    module_options: {{ dummy: \"numdummies=0\" }}\n"));
    std::fs::write(&path, edited).expect("write blueprint");
    let restarts = |node: &str| -> u64 {
        let container = toolkit::lab::layout::container_name(CLUSTER, node);
        let output = Command::new("docker")
            .args(["inspect", "--format", "{{.RestartCount}}", &container])
            .output()
            .expect("docker runs");
        text(&output.stdout).trim().parse().expect("a restart count")
    };
    let before: Vec<u64> = NODES.iter().map(|node| restarts(node)).collect();
    let plan = lab.run(&["plan", "lab.yaml", "-i", "inventory.yaml", "--max-unavailable", "2"]);
    let shown = text(&plan.stdout);
    assert!(shown.contains("4 nodes need drain and reboot: 2 waves of 2 (max-unavailable 2)"), "{shown}");

    let since = lab.now();
    let deploy = lab.deploy(&["--max-unavailable", "2"]);
    assert_success(&deploy, "the reboot-class change");
    for (node, before) in NODES.iter().zip(before) {
        assert_eq!(restarts(node), before + 1, "{node} rebooted once");
        let options = lab.exec_ok(node, &["cat", "/etc/modprobe.d/90-toolkit.conf"]);
        assert!(options.contains("options dummy numdummies=0"), "{options}");
    }
    let events = lab.drains_since(&since, 4);
    let mut drained: Vec<&str> = events.iter().map(|event| event.0.as_str()).collect();
    drained.sort_unstable();
    assert_eq!(drained, NODES, "each node drained once: {events:#?}");
    for event in &events {
        let at_once = events.iter().filter(|other| other.1 <= event.1 && event.1 < other.2).count();
        assert!(at_once <= 2, "more than two nodes drained at {}: {events:#?}", event.1);
    }
    lab.wait_all_idle();
    lab.assert_plan_clean("after the reboot-class change");
}
