//! Continuous node health on a running lab: the health program toolkit renders from
//! its validators runs on the nodes by slurmd itself (`HealthCheckProgram`); a rail
//! taken down on node02 drains node02 with the check in the reason and writes the
//! failure into node exporter's textfile directory; the rail back up resumes it; a
//! node an operator drained stays drained whatever the checks find. Prometheus (on the
//! head, scraping every 5 s) fires the rail alert naming node02 and rail 1 and resolves
//! it once the rail is back, and `toolkit status` names node02 from Prometheus (or from
//! the nodes' files while Prometheus is stopped). Also measures the
//! fast checks' wall and CPU time on a node, idle and busy, and the cluster-scope
//! validators' cycle from the controller.
//!
//! Runs under its own cluster name and subnets (`lab-hlth`, 10.163.0.0/24, rail pool
//! 10.164.0.0/16). `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lab::{lab_or_skip, text, toolkit};
use super::lab_e2e::{Teardown, assert_success, exec_in, exec_ok_in, fresh_lab};
use super::lab_monitoring::{api_in, wait_for};

const CLUSTER: &str = "lab-hlth";
/// A short fast interval so slurmd runs the checks by itself within the test.
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-hlth\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.163.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.164.0.0/16"),
    (
        "  scrape_interval: 15s\n",
        "  scrape_interval: 5s\n  alert_after: 10s\n  health: { fast_interval: 20s, slow_interval: 1h }\n",
    ),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.164 = `0a:a4`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.163.0."), (":0a:c8:", ":0a:a4:")];
const PROGRAM: &str = "/usr/local/lib/toolkit/health/check";
const FAST_METRICS: &str = "/var/lib/prometheus/node-exporter/toolkit_health_fast.prom";

struct Lab<'a> {
    dir: &'a Path,
}

impl Lab<'_> {
    fn exec_ok(&self, host: &str, command: &[&str]) -> String {
        exec_ok_in(self.dir, CLUSTER, host, command)
    }

    fn exec(&self, host: &str, command: &[&str]) -> Output {
        exec_in(self.dir, CLUSTER, host, command)
    }

    /// (state, reason) as `sinfo` shows them.
    fn node_state(&self, node: &str) -> (String, String) {
        let line = self.exec_ok("head", &["sinfo", "--noheader", "--Node", "-n", node, "--format=%T|%E"]);
        let line = line.lines().next().unwrap_or_default();
        let (state, reason) = line.split_once('|').unwrap_or((line, ""));
        (state.trim().to_owned(), reason.trim().to_owned())
    }

    /// Waits (up to `limit`) until `node`'s state and reason satisfy `done`.
    fn wait_state(
        &self,
        node: &str,
        limit: Duration,
        what: &str,
        done: impl Fn(&str, &str) -> bool,
    ) -> (String, String) {
        let deadline = Instant::now() + limit;
        loop {
            let (state, reason) = self.node_state(node);
            if done(&state, &reason) {
                return (state, reason);
            }
            assert!(Instant::now() < deadline, "{node}: {what}; it is `{state}` (`{reason}`)");
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    /// `toolkit status`'s text output.
    fn status(&self) -> String {
        let status = toolkit(self.dir, &["status", "lab.yaml", "-i", "inventory.yaml"]);
        assert_success(&status, "toolkit status");
        text(&status.stdout)
    }

    /// Waits (up to 2 minutes) until node02's `RailLinkDown` alert (or its absence)
    /// satisfies `done`; returns it (`null` when absent).
    fn wait_rail_alert(&self, done: impl Fn(Option<&Value>) -> bool, what: &str) -> Value {
        wait_for(Duration::from_mins(2), &format!("node02's RailLinkDown {what}"), || {
            let data = api_in(self.dir, CLUSTER, "/api/v1/alerts");
            let alerts = data["alerts"].as_array().cloned().unwrap_or_default();
            let found = alerts.iter().find(|alert| {
                alert["labels"]["alertname"] == "RailLinkDown" && alert["labels"]["instance"] == "node02"
            });
            if done(found) { Ok(found.cloned().unwrap_or_default()) } else { Err(format!("{data:#}")) }
        })
    }

    /// The node's fast metrics file (empty when it does not exist yet).
    fn fast_metrics(&self, node: &str) -> String {
        text(&self.exec(node, &["cat", FAST_METRICS]).stdout)
    }

    /// Runs the fast checks as slurmd does, timed by bash: (wall, user + sys) seconds.
    fn timed_run(&self, node: &str) -> (f64, f64) {
        let script = format!("TIMEFORMAT='%R %U %S'; time {PROGRAM} >/dev/null 2>&1");
        let output = self.exec(node, &["bash", "-c", &script]);
        let printed = text(&output.stderr);
        let numbers: Vec<f64> =
            printed.split_whitespace().rev().take(3).filter_map(|word| word.parse().ok()).collect::<Vec<_>>();
        assert_eq!(numbers.len(), 3, "bash time printed {printed:?}");
        // Reversed: sys, user, real.
        (numbers[2], numbers[0] + numbers[1])
    }
}

fn check_ok(metrics: &str, check: &str, subject: &str) -> Option<u8> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix("toolkit_healthcheck_ok{")?;
        (rest.contains(&format!("check=\"{check}\"")) && rest.contains(&format!("subject=\"{subject}\"")))
            .then(|| line.rsplit(' ').next()?.parse().ok())?
    })
}

#[test]
fn a_node_drains_itself_on_a_failing_check_and_resumes_only_its_own_drain() {
    let Some(_one_lab) = lab_or_skip("lab health test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let _teardown = Teardown(dir.path(), CLUSTER);
    fresh_lab(dir.path(), CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    let lab = Lab { dir: dir.path() };
    let started = Instant::now();
    let deploy = toolkit(dir.path(), &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    eprintln!("deploy took {:.0?}", started.elapsed());
    assert_success(&deploy, "the first deploy");
    let slurm_conf = lab.exec_ok("head", &["cat", "/etc/slurm/slurm.conf"]);
    assert!(slurm_conf.contains("HealthCheckProgram=/usr/local/lib/toolkit/health/check"), "{slurm_conf}");
    assert!(slurm_conf.contains("HealthCheckInterval=20\n"), "{slurm_conf}");
    for node in ["node01", "node02", "node03", "node04"] {
        lab.wait_state(node, Duration::from_mins(2), "should become idle", |state, _| state == "idle");
    }
    let timer = lab.exec("node02", &["systemctl", "is-active", "toolkit-health-slow.timer"]);
    assert_eq!(text(&timer.stdout).trim(), "active", "the slow checks' timer runs");

    slurmd_runs_the_checks_and_a_down_rail_drains_the_node(&lab);
    an_operator_drain_is_never_resumed(&lab);
    the_slow_checks_skip_what_does_not_apply(&lab);
    a_stopped_daemon_fails_the_services_check(&lab);
    measure_fast_checks(&lab);
    measure_cluster_checks(&lab);

    let plan = toolkit(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    assert!(plan.status.success(), "a second plan has nothing to change:\n{}", text(&plan.stdout));
}

fn slurmd_runs_the_checks_and_a_down_rail_drains_the_node(lab: &Lab<'_>) {
    // Nobody but slurmd runs the program until further down: the file is its work.
    let deadline = Instant::now() + Duration::from_mins(2);
    while check_ok(&lab.fast_metrics("node02"), "rail-links", "node02") != Some(1) {
        assert!(Instant::now() < deadline, "slurmd never ran the health checks:\n{}", lab.fast_metrics("node02"));
        std::thread::sleep(Duration::from_secs(2));
    }

    lab.exec_ok("node02", &["ip", "link", "set", "rail1", "down"]);
    // slurmd's next run (HealthCheckInterval 20 s, cycled over the nodes) drains it.
    let (state, reason) =
        lab.wait_state("node02", Duration::from_mins(2), "should be drained by its own check", |state, _| {
            state.starts_with("drain")
        });
    eprintln!("node02 after rail1 went down: {state} ({reason})");
    assert!(reason.starts_with("toolkit:health rail-links: rail1 down"), "{reason}");
    let metrics = lab.fast_metrics("node02");
    assert_eq!(check_ok(&metrics, "rail-links", "node02"), Some(0), "{metrics}");
    assert!(metrics.contains("toolkit_healthcheck_drained{node=\"node02\",cadence=\"fast\"} 1"), "{metrics}");
    assert!(
        metrics.contains(
            "toolkit_healthcheck_measurement{node=\"node02\",check=\"rail-links\",subject=\"node02\",measurement=\"rails_up\"} 1"
        ),
        "{metrics}"
    );

    // Prometheus fires the rail alert naming the node and the rail.
    let alert = lab.wait_rail_alert(|alert| alert.is_some_and(|alert| alert["state"] == "firing"), "to fire");
    eprintln!("RailLinkDown: {alert}");
    assert_eq!(alert["labels"]["rail"], "1", "{alert:#}");
    assert_eq!(alert["annotations"]["summary"], "rail 1 (rail1) is down on node02", "{alert:#}");

    // `toolkit status` reads Prometheus and names the failure, the alert and the drain
    // (the Slurm view refreshes every scrape interval: the drain shows a few seconds on).
    let lines = [
        "node02       firing RailLinkDown (critical): rail 1 (rail1) is down on node02",
        "node02       fail rail-links on node02 (drain)",
        "node02       drained in Slurm: toolkit:health rail-links: rail1 down",
    ];
    let shown = wait_for(Duration::from_mins(1), "toolkit status naming node02's rail", || {
        let shown = lab.status();
        let complete = shown.contains("Health (from Prometheus): ") && lines.iter().all(|line| shown.contains(line));
        if complete { Ok(shown) } else { Err(shown) }
    });
    eprintln!("toolkit status:\n{shown}");
    // Without Prometheus it reads every node's health files instead.
    lab.exec_ok("head", &["systemctl", "stop", "prometheus"]);
    let shown = lab.status();
    lab.exec_ok("head", &["systemctl", "start", "prometheus"]);
    assert!(shown.contains("Cannot read Prometheus: "), "{shown}");
    assert!(shown.contains("Health (from the nodes):"), "{shown}");
    assert!(shown.contains("fail rail-links on node02 (drain): rail1 down"), "{shown}");

    // node01 pings node02 across rail1 and fails, but `mtu` only alerts.
    lab.exec_ok("node01", &[PROGRAM]);
    let node01 = lab.fast_metrics("node01");
    assert_eq!(check_ok(&node01, "mtu", "node01+node02/rail1"), Some(0), "{node01}");
    assert!(node01.contains("action=\"alert\""), "{node01}");
    assert_eq!(lab.node_state("node01").0, "idle", "an alert-only failure drains nothing");

    lab.exec_ok("node02", &["ip", "link", "set", "rail1", "up"]);
    lab.exec_ok("node02", &[PROGRAM]);
    // `idle*` is idle and not responding for a moment (a busy host), not drained.
    let (state, reason) = lab.node_state("node02");
    assert_eq!(state.trim_end_matches('*'), "idle", "resumed once its check passes again ({reason})");
    assert_eq!(check_ok(&lab.fast_metrics("node02"), "rail-links", "node02"), Some(1));
    // The rail back up resolves the alert.
    lab.wait_rail_alert(|alert| alert.is_none(), "to resolve");
}

/// node03's node exporter stopped: slurmd's next run of the checks fails `services`
/// with the daemon named (alert only: the node stays in service), `toolkit validate
/// --only services` fails it too; started again, the check passes.
fn a_stopped_daemon_fails_the_services_check(lab: &Lab<'_>) {
    let services = |expected: u8, what: &str| {
        wait_for(Duration::from_mins(2), what, || {
            let metrics = lab.fast_metrics("node03");
            if check_ok(&metrics, "services", "node03") == Some(expected) { Ok(metrics) } else { Err(metrics) }
        })
    };
    services(1, "node03's services check passing after the deploy");
    lab.exec_ok("node03", &["systemctl", "stop", "prometheus-node-exporter"]);
    let metrics = services(0, "node03's services check failing");
    assert!(metrics.contains("# toolkit:detail services node03 prometheus-node-exporter inactive"), "{metrics}");
    let (state, _) = lab.node_state("node03");
    assert!(!state.starts_with("drain"), "`services` only alerts, node03 is {state}");
    let args =
        ["validate", "lab.yaml", "-i", "inventory.yaml", "--only", "services", "--nodes", "node03", "--output", "json"];
    let validate = toolkit(lab.dir, &args);
    let printed = format!("{}{}", text(&validate.stdout), text(&validate.stderr));
    assert_eq!(validate.status.code(), Some(2), "{printed}");
    assert!(printed.contains("prometheus-node-exporter inactive"), "{printed}");
    lab.exec_ok("node03", &["systemctl", "start", "prometheus-node-exporter"]);
    services(1, "node03's services check passing again");
}

fn an_operator_drain_is_never_resumed(lab: &Lab<'_>) {
    let reason = "bad DIMM, ticket 4411";
    lab.exec_ok("head", &["scontrol", "update", "nodename=node03", "state=drain", &format!("reason={reason}")]);
    // Passing checks do not resume it.
    lab.exec_ok("node03", &[PROGRAM]);
    assert_eq!(lab.node_state("node03"), ("drained".to_owned(), reason.to_owned()));
    // A failing check does not take the reason over, and passing again does not resume it.
    lab.exec_ok("node03", &["ip", "link", "set", "rail0", "down"]);
    lab.exec_ok("node03", &[PROGRAM]);
    assert_eq!(check_ok(&lab.fast_metrics("node03"), "rail-links", "node03"), Some(0));
    assert_eq!(lab.node_state("node03"), ("drained".to_owned(), reason.to_owned()));
    lab.exec_ok("node03", &["ip", "link", "set", "rail0", "up"]);
    lab.exec_ok("node03", &[PROGRAM]);
    assert_eq!(lab.node_state("node03"), ("drained".to_owned(), reason.to_owned()));
    // Nor does slurmd's own run.
    std::thread::sleep(Duration::from_secs(45));
    assert_eq!(lab.node_state("node03"), ("drained".to_owned(), reason.to_owned()));
    lab.exec_ok("head", &["scontrol", "update", "nodename=node03", "state=resume"]);
}

fn the_slow_checks_skip_what_does_not_apply(lab: &Lab<'_>) {
    lab.exec_ok("node02", &[PROGRAM, "slow"]);
    let slow = lab.exec_ok("node02", &["cat", "/var/lib/prometheus/node-exporter/toolkit_health_slow.prom"]);
    assert!(
        slow.contains("toolkit_healthcheck_skipped{node=\"node02\",check=\"dcgm-diag\",subject=\"node02\",cadence=\"slow\",action=\"drain\"} 1"),
        "{slow}"
    );
    assert!(slow.contains("# toolkit:skipped dcgm-diag node02 the node's GPUs are device files"), "{slow}");
}

/// Wall and CPU time of the fast checks on node02, idle and with both of its CPUs busy.
fn measure_fast_checks(lab: &Lab<'_>) {
    let runs: Vec<(f64, f64)> = (0..5).map(|_| lab.timed_run("node02")).collect();
    report("idle", &runs);
    lab.exec_ok(
        "node02",
        &["sh", "-c", "for i in 1 2; do timeout 120 sh -c 'while :; do :; done' >/dev/null 2>&1 & done; echo started"],
    );
    let busy: Vec<(f64, f64)> = (0..5).map(|_| lab.timed_run("node02")).collect();
    report("busy (2 spinning shells)", &busy);
    lab.exec("node02", &["sh", "-c", "pkill -f \"while :; do :; done\" || true"]);
    for (wall, _) in runs.iter().chain(&busy) {
        assert!(*wall < 60.0, "the fast checks must finish inside Slurm's 60 s: {wall} s");
    }
}

fn report(what: &str, runs: &[(f64, f64)]) {
    let walls: Vec<String> = runs.iter().map(|(wall, _)| format!("{wall:.2}")).collect();
    let cpus: Vec<String> = runs.iter().map(|(_, cpu)| format!("{cpu:.3}")).collect();
    eprintln!(
        "MEASURE fast checks on node02, {what}: wall s [{}], cpu (user+sys) s [{}]",
        walls.join(" "),
        cpus.join(" ")
    );
}

/// The cluster-scope validators (BGP on every switch, cabling against the plan from
/// LLDP, Slurm and the tenants' QOS) as one cycle from the controller.
fn measure_cluster_checks(lab: &Lab<'_>) {
    for _ in 0..2 {
        let started = Instant::now();
        let run = toolkit(
            lab.dir,
            &["validate", "lab.yaml", "-i", "inventory.yaml", "--only", "fabric-bgp,cabling,scheduler"],
        );
        eprintln!(
            "MEASURE cluster-scope cycle (fabric-bgp, cabling, scheduler): {:.2} s, exit {:?}",
            started.elapsed().as_secs_f64(),
            run.status.code()
        );
        assert_success(&run, "the cluster-scope checks pass on a healthy lab");
    }
}
