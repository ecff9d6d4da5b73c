//! Self-repair on a running lab: node02's rail taken down drains node02 (its own health
//! check, run by slurmd); the repair service on the head (toolkit's, fed by
//! Alertmanager's webhook and its timer) reboots it as the rollout does — `systemd-run
//! … systemctl reboot` on the node, here over the head's root SSH, which ends the
//! container and Docker's restart policy starts it again; the boot
//! brings the rail back, the node's checks pass and resume it by themselves, and the
//! drain → resume time lands in the service's state file and in Prometheus. Meanwhile
//! node03, drained by an operator with a failing rail of its own, is never touched.
//! Last, the head restarted while node04 is mid-ladder: the restarted service finds
//! node04 in its state file and carries on.
//!
//! The head's root SSH to the nodes (key and known_hosts) is set up by the test, as an
//! operator gives a Slurm controller root SSH to its nodes; toolkit does not make it.
//!
//! Runs under its own cluster name and subnets (`lab-repair`, 10.181.0.0/24, rail pool
//! 10.182.0.0/16). `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lab::{lab_or_skip, text, toolkit};
use super::lab_e2e::{Teardown, assert_success, exec_ok_in, fresh_lab};
use super::lab_monitoring::{api_in, wait_for};

const CLUSTER: &str = "lab-repair";
/// Fast checks every 20 s, the repair service every 5 s; a step is given 3 minutes
/// (the container restart and slurmd's first health run); rail-links' ladder shortened
/// to what the lab can do from the head (no BMC, no root SSH from the head to nodes).
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-repair\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.181.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.182.0.0/16"),
    (
        "  scrape_interval: 15s\n",
        "  scrape_interval: 5s\n  alert_after: 10s\n  health: { fast_interval: 20s, slow_interval: 1h }\n  \
         repair:\n    max_in_repair: 1\n    max_repairs_per_day: 3\n    interval: 5s\n    settle: 3m\n    \
         diagnose: ping -c 1 -W 2 {node}\n    checks: { rail-links: [reboot, diagnose, rma] }\n",
    ),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.182 = `0a:b6`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.181.0."), (":0a:c8:", ":0a:b6:")];
const OPERATOR_REASON: &str = "bad DIMM, ticket 4411";

struct Lab<'a> {
    dir: &'a Path,
}

impl Lab<'_> {
    fn exec_ok(&self, host: &str, command: &[&str]) -> String {
        exec_ok_in(self.dir, CLUSTER, host, command)
    }

    /// (state, reason) as `sinfo` shows them.
    fn node_state(&self, node: &str) -> (String, String) {
        let line = self.exec_ok("head", &["sinfo", "--noheader", "--Node", "-n", node, "--format=%T|%E"]);
        let line = line.lines().next().unwrap_or_default();
        let (state, reason) = line.split_once('|').unwrap_or((line, ""));
        (state.trim().to_owned(), reason.trim().to_owned())
    }

    /// The repair service's state file.
    fn repair_state(&self) -> Value {
        let text =
            self.exec_ok("head", &["sh", "-c", "cat /var/lib/toolkit/repair/state.json 2>/dev/null || echo '{}'"]);
        serde_json::from_str(&text).unwrap_or_else(|error| panic!("state.json: {error}: {text}"))
    }

    /// How often Docker restarted the node's container.
    fn restarts(host: &str) -> u32 {
        let container = toolkit::lab::layout::container_name(CLUSTER, host);
        let output = Command::new("docker")
            .args(["inspect", "--format", "{{.RestartCount}}", &container])
            .output()
            .expect("docker");
        text(&output.stdout).trim().parse().unwrap_or_else(|_| panic!("restart count of {container}"))
    }

    fn service_log(&self) -> String {
        text(
            &super::lab_e2e::exec_in(
                self.dir,
                CLUSTER,
                "head",
                &["journalctl", "--no-pager", "-o", "cat", "-u", "toolkit-repair", "-u", "toolkit-repair-webhook"],
            )
            .stdout,
        )
    }
}

/// Seconds since the epoch (the containers share this host's clock).
fn epoch() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// A key for root on the head, authorized on every node, and the nodes' host keys in
/// the head's known_hosts.
fn give_the_head_root_ssh_to_the_nodes(lab: &Lab<'_>) {
    lab.exec_ok(
        "head",
        &["sh", "-c", "test -f /root/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519"],
    );
    let public = lab.exec_ok("head", &["cat", "/root/.ssh/id_ed25519.pub"]);
    for node in ["node01", "node02", "node03", "node04"] {
        lab.exec_ok(node, &["sh", "-c", "printf '%s\\n' \"$1\" >> /root/.ssh/authorized_keys", "sh", public.trim()]);
    }
    lab.exec_ok(
        "head",
        &["sh", "-c", "ssh-keyscan -t ed25519 node01 node02 node03 node04 >> /root/.ssh/known_hosts 2>/dev/null"],
    );
    let answer = lab.exec_ok("head", &["ssh", "-o", "BatchMode=yes", "root@node02", "hostname"]);
    assert_eq!(answer.trim(), "node02");
}

#[test]
fn a_node_a_reboot_repairs_comes_back_by_itself_and_an_operators_drain_is_never_touched() {
    let Some(_one_lab) = lab_or_skip("lab repair test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let _teardown = Teardown(dir.path(), CLUSTER);
    fresh_lab(dir.path(), CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    let lab = Lab { dir: dir.path() };
    let started = Instant::now();
    let deploy = toolkit(dir.path(), &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    eprintln!("deploy took {:.0?}", started.elapsed());
    assert_success(&deploy, "the first deploy");
    for node in ["node01", "node02", "node03", "node04"] {
        wait_for(Duration::from_mins(2), &format!("{node} idle"), || {
            let (state, reason) = lab.node_state(node);
            if state == "idle" { Ok(()) } else { Err(format!("{state} ({reason})")) }
        });
    }
    let active = lab.exec_ok("head", &["systemctl", "is-active", "toolkit-repair.timer", "toolkit-repair-webhook"]);
    assert_eq!(active.split_whitespace().collect::<Vec<_>>(), ["active", "active"], "the service runs");

    give_the_head_root_ssh_to_the_nodes(&lab);

    // The operator's node: drained by hand, and with a failing check of its own.
    lab.exec_ok(
        "head",
        &["scontrol", "update", "nodename=node03", "state=drain", &format!("reason={OPERATOR_REASON}")],
    );
    lab.exec_ok("node03", &["ip", "link", "set", "rail0", "down"]);
    let node03_restarts = Lab::restarts("node03");

    // The transient fault: a rail down, which the boot's network setup brings back up.
    let node02_restarts = Lab::restarts("node02");
    let fault = epoch();
    lab.exec_ok("node02", &["ip", "link", "set", "rail1", "down"]);
    // The service takes node02 in hand: the reboot step, recorded before it is taken.
    let entry = wait_for(Duration::from_mins(2), "node02 in repair in the state file", || {
        let state = lab.repair_state();
        let entry = &state["nodes"]["node02"];
        if entry["step"] == "reboot" { Ok(entry.clone()) } else { Err(format!("{state:#}\n{}", lab.service_log())) }
    });
    eprintln!("node02 in repair: {entry}");
    assert_eq!(entry["check"], "rail-links", "{entry}");
    let drained_at = entry["drained_at"].as_u64().expect("Slurm's drain time");
    eprintln!(
        "MEASURE detection → drain (rail down → Slurm's drain reason time): {} s",
        drained_at.saturating_sub(fault)
    );
    eprintln!(
        "MEASURE drain → reboot step taken: {} s",
        entry["since"].as_u64().unwrap_or(0).saturating_sub(drained_at)
    );
    let status = toolkit(dir.path(), &["status", "lab.yaml", "-i", "inventory.yaml"]);
    let shown = text(&status.stdout);
    assert!(shown.contains("node02       in repair for rail-links: reboot"), "toolkit status:\n{shown}");
    eprintln!("toolkit status while in repair:\n{shown}");

    // A real container restart, asked for by Slurm on the head.
    wait_for(Duration::from_mins(3), "node02's container restarted", || {
        let now = Lab::restarts("node02");
        if now > node02_restarts { Ok(()) } else { Err(format!("restart count {now}\n{}", lab.service_log())) }
    });
    let rebooted = epoch();
    // Back with its rail up, its checks pass and resume it; nobody resumes it but them.
    wait_for(Duration::from_mins(4), "node02 resumed by its own checks", || {
        let (state, reason) = lab.node_state("node02");
        if state.trim_end_matches('*') == "idle" {
            Ok(())
        } else {
            Err(format!("{state} ({reason})\n{}", lab.service_log()))
        }
    });
    let resumed = epoch();
    eprintln!(
        "MEASURE drain → resume (as the test saw it, 2 s polls): {} s (drain → container restarted {} s)",
        resumed.saturating_sub(drained_at),
        rebooted.saturating_sub(drained_at)
    );
    assert_eq!(Lab::restarts("node02"), node02_restarts + 1, "rebooted once");
    let up = lab.exec_ok("node02", &["cat", "/sys/class/net/rail1/operstate"]);
    assert_eq!(up.trim(), "up", "the boot brought the rail back");

    // The service closes the repair with its time to repair, and Prometheus has it.
    let done = wait_for(Duration::from_mins(1), "node02's repair in the history", || {
        let state = lab.repair_state();
        let history = state["history"].as_array().cloned().unwrap_or_default();
        match history.iter().find(|done| done["node"] == "node02") {
            Some(done) if state["nodes"].get("node02").is_none() => Ok(done.clone()),
            _ => Err(format!("{state:#}")),
        }
    });
    eprintln!("node02's repair: {done}");
    assert_eq!(done["outcome"], "resumed", "{done}");
    assert_eq!(done["steps"][0]["step"], "reboot", "{done}");
    assert_eq!(done["steps"].as_array().map(Vec::len), Some(1), "one step was enough: {done}");
    let mttr = done["mttr_seconds"].as_u64().expect("an MTTR");
    eprintln!("MEASURE MTTR recorded by the service (Slurm's drain time → resume seen): {mttr} s");
    assert!(mttr > 0 && mttr < 600, "{done}");
    let series = wait_for(Duration::from_mins(1), "the MTTR in Prometheus", || {
        let data = api_in(dir.path(), CLUSTER, "/api/v1/query?query=toolkit_repair_last_mttr_seconds");
        let result = data["result"].as_array().cloned().unwrap_or_default();
        if result.iter().any(|sample| sample["metric"]["node"] == "node02") {
            Ok(data)
        } else {
            Err(format!("{data:#}"))
        }
    });
    eprintln!("Prometheus: {series}");
    let shown = text(&toolkit(dir.path(), &["status", "lab.yaml", "-i", "inventory.yaml"]).stdout);
    assert!(shown.contains("Repair: 0 in repair, 0 in RMA, mean drain → resume"), "toolkit status:\n{shown}");

    // Hands off: node03 as the operator left it, never restarted, never in the state.
    assert_eq!(lab.node_state("node03"), ("drained".to_owned(), OPERATOR_REASON.to_owned()));
    assert_eq!(Lab::restarts("node03"), node03_restarts, "the operator's node was not rebooted");
    let state = lab.repair_state();
    assert!(state["nodes"].get("node03").is_none() && state["rma"].get("node03").is_none(), "{state:#}");
    assert!(!state["history"].to_string().contains("node03"), "{state:#}");
    assert!(!lab.service_log().contains("node03"), "the service never acted on node03:\n{}", lab.service_log());
    lab.exec_ok("node03", &["ip", "link", "set", "rail0", "up"]);
    lab.exec_ok("head", &["scontrol", "update", "nodename=node03", "state=resume"]);

    let plan = toolkit(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    assert!(plan.status.success(), "a second plan has nothing to change:\n{}", text(&plan.stdout));

    a_controller_restart_mid_ladder_carries_on(&lab);
}

/// node04's rail down, and the head rebooted (a container restart) right after the
/// service recorded node04's reboot step: the restarted service finds node04 in its
/// state file and carries the ladder on — here to its end, node04 resumed by its checks.
fn a_controller_restart_mid_ladder_carries_on(lab: &Lab<'_>) {
    let head_restarts = Lab::restarts("head");
    lab.exec_ok("node04", &["ip", "link", "set", "rail1", "down"]);
    wait_for(Duration::from_mins(2), "node04 in repair in the state file", || {
        let state = lab.repair_state();
        if state["nodes"]["node04"]["step"] == "reboot" { Ok(()) } else { Err(format!("{state:#}")) }
    });
    lab.exec_ok("head", &["systemd-run", "--on-active=1", "--timer-property=AccuracySec=100ms", "systemctl", "reboot"]);
    wait_for(Duration::from_mins(2), "the head restarted", || {
        let now = Lab::restarts("head");
        if now > head_restarts { Ok(()) } else { Err(format!("restart count {now}")) }
    });
    let done = wait_for(Duration::from_mins(4), "node04's repair closed by the restarted service", || {
        let read = super::lab_e2e::exec_in(lab.dir, CLUSTER, "head", &["cat", "/var/lib/toolkit/repair/state.json"]);
        let state: Value =
            serde_json::from_slice(&read.stdout).map_err(|error| format!("{error}: {}", text(&read.stderr)))?;
        let history = state["history"].as_array().cloned().unwrap_or_default();
        match history.iter().find(|done| done["node"] == "node04") {
            Some(done) if state["nodes"].get("node04").is_none() => Ok(done.clone()),
            _ => Err(format!("{state:#}")),
        }
    });
    eprintln!("node04's repair across the head's restart: {done}");
    assert_eq!(done["outcome"], "resumed", "{done}");
    assert_eq!(done["steps"][0]["step"], "reboot", "{done}");
    let (state, reason) = lab.node_state("node04");
    assert_eq!(state.trim_end_matches('*'), "idle", "{reason}");
}
