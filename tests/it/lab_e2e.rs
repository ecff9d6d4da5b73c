//! End to end: `toolkit deploy` brings the lab blueprint up on `toolkit lab`
//! containers, and the result is a working cluster — every node idle in Slurm and
//! `srun -N4 hostname` answering from all four, every BGP session Established,
//! full-MTU pings with DF over every rail between every pair of nodes, every
//! systemd unit running — and a second `toolkit plan` has nothing to change.
//!
//! Slow (a cold image build is ~2-3 minutes, the deploy itself under a minute). It
//! runs `blueprints/lab.yaml` and `inventories/lab.yaml` under their own cluster
//! name and subnets (`lab-e2e`, 10.125.0.0/24, 10.126.0.0/16), so neither a user's
//! `lab` nor the `lab-it` of the lab test is in the way; the inventory's MACs are
//! the lab's, moved to the new rail pool, and `lab up` must not warn about them.
//! `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards for a look inside.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use toolkit::model::Model;

use super::lab::{lab_or_skip, text, toolkit};
use super::redfish::toolkit_metal;

const CLUSTER: &str = "lab-e2e";

/// `blueprints/lab.yaml` → this test's blueprint, `inventories/lab.yaml` → its inventory.
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-e2e\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.125.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.126.0.0/16"),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.126 = `0a:7e`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.125.0."), (":0a:c8:", ":0a:7e:")];

pub(crate) fn edited(original: &str, edits: &[(&str, &str)], what: &str) -> String {
    let mut text = original.to_owned();
    for (from, to) in edits {
        assert!(text.contains(from), "{what} no longer has `{from}`: update this test");
        text = text.replace(from, to);
    }
    text
}

/// Removes lab `.1` (its inputs in `.0`) even when an assertion fails half way
/// (unless asked to keep it).
pub(crate) struct Teardown<'a>(pub &'a Path, pub &'a str);

impl Drop for Teardown<'_> {
    fn drop(&mut self) {
        if std::env::var_os("TOOLKIT_KEEP_LAB").is_some() {
            eprintln!("TOOLKIT_KEEP_LAB: `toolkit lab down --cluster {}` removes the lab", self.1);
            return;
        }
        let _ = toolkit(self.0, &["lab", "down", "--cluster", self.1]);
    }
}

/// Writes the lab's blueprint and inventory with `edits` into `dir` (as `lab.yaml`
/// and `inventory.yaml`), replaces any lab of that name by a fresh `lab up`, which
/// must not warn (the inventory matches the lab), and returns the blueprint's model.
pub(crate) fn fresh_lab(
    dir: &Path,
    cluster: &str,
    blueprint_edits: &[(&str, &str)],
    inventory_edits: &[(&str, &str)],
) -> Model {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let blueprint = std::fs::read_to_string(root.join("blueprints/lab.yaml")).expect("lab blueprint");
    let inventory = std::fs::read_to_string(root.join("inventories/lab.yaml")).expect("lab inventory");
    std::fs::write(dir.join("lab.yaml"), edited(&blueprint, blueprint_edits, "blueprints/lab.yaml"))
        .expect("write blueprint");
    std::fs::write(dir.join("inventory.yaml"), edited(&inventory, inventory_edits, "inventories/lab.yaml"))
        .expect("write inventory");
    let model = model(dir);
    let _ = toolkit(dir, &["lab", "down", "--cluster", cluster]);
    let started = Instant::now();
    let up = toolkit(dir, &["lab", "up", "lab.yaml", "-i", "inventory.yaml"]);
    eprintln!("lab up took {:.0?}", started.elapsed());
    assert_success(&up, "lab up");
    let up_log = text(&up.stderr);
    assert!(!up_log.contains("warning"), "the inventory must match the lab it deploys to:\n{up_log}");
    model
}

/// `toolkit lab exec` in container `host`.
fn exec(dir: &Path, host: &str, command: &[&str]) -> Output {
    exec_in(dir, CLUSTER, host, command)
}

/// `toolkit lab exec` in container `host` of lab `cluster`.
pub(crate) fn exec_in(dir: &Path, cluster: &str, host: &str, command: &[&str]) -> Output {
    let mut args = vec!["lab", "exec", "--cluster", cluster, host, "--"];
    args.extend_from_slice(command);
    toolkit(dir, &args)
}

/// stdout of a command that must succeed in `host`.
fn exec_ok(dir: &Path, host: &str, command: &[&str]) -> String {
    exec_ok_in(dir, CLUSTER, host, command)
}

/// stdout of a command that must succeed in `host` of lab `cluster`.
pub(crate) fn exec_ok_in(dir: &Path, cluster: &str, host: &str, command: &[&str]) -> String {
    let output = exec_in(dir, cluster, host, command);
    assert!(
        output.status.success(),
        "`{}` on {host} failed ({:?}):\n{}{}",
        command.join(" "),
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// A node event slurmdbd recorded: (node, start, end, reason).
pub(crate) type NodeEvent = (String, String, String, String);

/// The head's clock, for `sacctmgr show event Start=`.
pub(crate) fn head_clock(dir: &Path, cluster: &str) -> String {
    exec_ok_in(dir, cluster, "head", &["date", "+%Y-%m-%dT%H:%M:%S"]).trim().to_owned()
}

/// node[01-04]'s events since `since` that `keep` keeps, in start order; waits until
/// `at_least` of them are closed drains that `count` counts (slurmdbd records them a
/// moment after slurmctld, asynchronously).
pub(crate) fn node_events_since(
    dir: &Path,
    cluster: &str,
    since: &str,
    at_least: usize,
    keep: impl Fn(&NodeEvent) -> bool,
    count: impl Fn(&NodeEvent) -> bool,
) -> Vec<NodeEvent> {
    let start = format!("Start={since}");
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let listed = exec_ok_in(
            dir,
            cluster,
            "head",
            &["sacctmgr", "-nP", "show", "event", "Nodes=node[01-04]", &start, "format=NodeName,Start,End,Reason"],
        );
        let mut events: Vec<NodeEvent> = listed
            .lines()
            .filter_map(|line| {
                let mut fields = line.splitn(4, '|');
                let event = (
                    fields.next()?.to_owned(),
                    fields.next()?.to_owned(),
                    fields.next()?.to_owned(),
                    fields.next()?.to_owned(),
                );
                keep(&event).then_some(event)
            })
            .collect();
        events.sort_by(|a, b| a.1.cmp(&b.1));
        if events.iter().filter(|event| event.2 != "Unknown" && count(event)).count() >= at_least {
            return events;
        }
        assert!(Instant::now() < deadline, "fewer than {at_least} closed toolkit drains since {since}:\n{listed}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Fails with `why` and the output unless the command exited 0; says plainly when
/// the command does not exist in this build yet.
pub(crate) fn assert_success(run: &Output, why: &str) {
    let stderr = text(&run.stderr);
    assert!(
        !stderr.contains("unrecognized subcommand"),
        "{why}: this toolkit has no such command yet (the e2e test is written against the CLI contract of \
         DESIGN.md):\n{stderr}"
    );
    assert!(
        run.status.success(),
        "{why}: exit {:?}\nstdout:\n{}\nstderr:\n{stderr}",
        run.status.code(),
        text(&run.stdout)
    );
}

pub(crate) fn model(dir: &Path) -> Model {
    let loaded = toolkit::blueprint::load(&dir.join("lab.yaml")).expect("test blueprint loads");
    toolkit::model::expand(&loaded.blueprint).expect("test blueprint expands")
}

#[test]
fn deploy_brings_the_lab_up_end_to_end() {
    let Some(_one_lab) = lab_or_skip("lab e2e test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let _teardown = Teardown(dir.path(), CLUSTER);
    let model = fresh_lab(dir.path(), CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    make_tenant_users(dir.path(), CLUSTER, &model);

    // The first deploy loses a node half way (its container is killed, as a power
    // cut would): that node is reported failed, every other host finishes.
    let started = Instant::now();
    let first = deploy_losing(dir.path(), LOST_NODE, LOST_AFTER);
    eprintln!("deploy with {LOST_NODE} lost took {:.0?}", started.elapsed());
    check_only_lost_node_failed(&first);

    // The node comes back (`lab up` starts it again); a rerun converges.
    assert_success(&toolkit(dir.path(), &["lab", "up", "lab.yaml", "-i", "inventory.yaml"]), "lab up after the loss");
    let started = Instant::now();
    let deploy = toolkit(dir.path(), &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    eprintln!("rerun took {:.0?}:\n{}", started.elapsed(), text(&deploy.stderr));
    assert_success(&deploy, "the deploy after the node came back");

    check_units_running(dir.path(), &model);
    check_slurm(dir.path(), &model);
    check_bgp(dir.path(), &model);
    check_rails(dir.path(), &model);

    // Converged: the plan against the deployed hosts is empty (exit 0, not 2).
    let plan = toolkit(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    assert_success(&plan, "a second `toolkit plan` must have nothing to change");

    check_partition_change(dir.path());
    check_borrow_and_reclaim(dir.path());
    check_acceptance(dir.path());
    check_drain_and_resume(dir.path());
    check_miswired_rails(dir.path());
    check_bmc_stage_runs_first(dir.path());
}

/// The tenants' users, with the same UID on every host. On real clusters they come
/// from the site's directory (LDAP, SSSD) before Slurm is installed: slurmctld maps
/// association users to UIDs when it loads them.
/// Submits `sleep seconds` as alice on `node` (one GPU) and waits until it runs;
/// returns the job id.
pub(crate) fn start_job(dir: &Path, cluster: &str, node: &str, seconds: u32) -> String {
    let nodelist = format!("--nodelist={node}");
    let sleep = format!("sleep {seconds}");
    let job = exec_ok_in(
        dir,
        cluster,
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
            &nodelist,
            "--gres=gpu:1",
            "--wrap",
            &sleep,
        ],
    )
    .trim()
    .to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !exec_ok_in(dir, cluster, "head", &["squeue", "-h", "-j", &job, "-o", "%T"]).contains("RUNNING") {
        assert!(std::time::Instant::now() < deadline, "job {job} did not start");
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    job
}

pub(crate) fn make_tenant_users(dir: &Path, cluster: &str, model: &Model) {
    for host in model.nodes.iter().map(|node| node.name.as_str()) {
        for (user, uid) in [("alice", "2001"), ("bob", "2002")] {
            let script = format!("id -u {user} >/dev/null 2>&1 || useradd --uid {uid} --create-home {user}");
            exec_ok_in(dir, cluster, host, &["sh", "-c", &script]);
        }
    }
}

/// The node the first deploy loses, and the resource whose change means "half way".
const LOST_NODE: &str = "node04";
const LOST_AFTER: &str = "node04:file:/etc/slurm/slurm.conf";

/// `toolkit deploy --yes --output json`, killing `node`'s container as soon as the
/// deploy reports `resource` changed. Returns the finished deploy.
fn deploy_losing(dir: &Path, node: &str, resource: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes", "--output", "json"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolkit runs");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::BufReader::new(stdout), &mut bytes);
        bytes
    });
    let mut log = String::new();
    let mut killed = false;
    for line in BufReader::new(child.stderr.take().expect("stderr")).lines() {
        let line = line.unwrap_or_default();
        if !killed && line == format!("changed: {resource}") {
            let container = toolkit::lab::layout::container_name(CLUSTER, node);
            let kill = Command::new("docker").args(["kill", &container]).output().expect("docker kill");
            assert!(kill.status.success(), "docker kill {container}: {}", text(&kill.stderr));
            killed = true;
        }
        log.push_str(&line);
        log.push('\n');
    }
    let status = child.wait().expect("deploy ends");
    assert!(killed, "the deploy never reported `{resource}` changed, so {node} was not lost half way:\n{log}");
    Output { status, stdout: reader.join().expect("reader"), stderr: log.into_bytes() }
}

/// Exit 1; the lost node has failures; every other host has none and nothing skipped.
fn check_only_lost_node_failed(deploy: &Output) {
    let shown = text(&deploy.stderr);
    assert_eq!(deploy.status.code(), Some(1), "a deploy that lost a node must fail:\n{shown}");
    let report: serde_json::Value = serde_json::from_slice(&deploy.stdout)
        .unwrap_or_else(|e| panic!("deploy report JSON: {e}\n{}\n{shown}", text(&deploy.stdout)));
    let mut per_host: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for outcome in report["outcomes"].as_array().expect("outcomes") {
        let host = outcome["target"].as_str().expect("target").to_owned();
        let what = outcome["outcome"].as_str().expect("outcome").to_owned();
        *per_host.entry(host).or_default().entry(what).or_default() += 1;
    }
    let count = |host: &str, what: &str| per_host.get(host).and_then(|m| m.get(what)).copied().unwrap_or(0);
    assert!(count(LOST_NODE, "failed") > 0, "{LOST_NODE} must be reported failed: {per_host:?}\n{shown}");
    for host in per_host.keys().filter(|host| *host != LOST_NODE) {
        assert_eq!(
            (count(host, "failed"), count(host, "skipped")),
            (0, 0),
            "{host} must finish although {LOST_NODE} was lost: {per_host:?}\n{shown}"
        );
        assert!(count(host, "changed") > 0, "{host} was deployed: {per_host:?}");
    }
}

/// No unit failed anywhere (a failed wait-online, a slurmd that gave up…).
fn check_units_running(dir: &Path, model: &Model) {
    let hosts =
        model.nodes.iter().map(|n| n.name.as_str()).chain(model.fabric.switches.iter().map(|s| s.name.as_str()));
    for host in hosts {
        let state = exec(dir, host, &["systemctl", "is-system-running", "--wait"]);
        let failed = text(&exec(dir, host, &["systemctl", "--failed", "--no-legend", "--plain"]).stdout);
        assert_eq!(text(&state.stdout).trim(), "running", "{host}: failed units:\n{failed}");
    }
}

/// Every compute node idle, and a 4-node step runs on all of them.
fn check_slurm(dir: &Path, model: &Model) {
    let controller = model.first_with(toolkit::blueprint::schema::Role::Controller).expect("a controller").name.clone();
    let compute: Vec<&str> = model
        .groups_with(toolkit::blueprint::schema::Role::Compute)
        .flat_map(|group| model.group_nodes(group))
        .map(|node| node.name.as_str())
        .collect();
    assert_eq!(compute.len(), 4, "the lab blueprint has four compute nodes");

    let count = compute.len().to_string();
    let names = exec_ok(dir, &controller, &["srun", "-N", &count, "hostname"]);
    let mut names: Vec<&str> = names.lines().map(str::trim).collect();
    names.sort_unstable();
    assert_eq!(names, compute, "srun -N{count} hostname");

    wait_all_idle(dir);
}

/// On every switch, one Established session per cable, exchanging routes.
fn check_bgp(dir: &Path, model: &Model) {
    for (index, switch) in model.fabric.switches.iter().enumerate() {
        let cables = model.fabric.links.iter().filter(|l| l.lower == index || l.upper == index).count();
        // Sessions come up within a few keepalives of FRR's start (datacenter profile: 3 s).
        let deadline = Instant::now() + Duration::from_mins(1);
        loop {
            let json = exec_ok(dir, &switch.name, &["vtysh", "-c", "show bgp summary json"]);
            let summary: serde_json::Value =
                serde_json::from_str(&json).unwrap_or_else(|e| panic!("{}: {e}:\n{json}", switch.name));
            let peers = summary["ipv4Unicast"]["peers"].as_object().cloned().unwrap_or_default();
            let established = peers
                .values()
                .filter(|peer| {
                    peer["state"] == "Established"
                        && peer["peerState"] == "OK"
                        && peer["pfxRcd"].as_u64().is_some_and(|n| n > 0)
                })
                .count();
            if peers.len() == cables && established == cables {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {established} of {cables} sessions Established and receiving routes:\n{json}",
                switch.name
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// Every node reaches every other node over each rail with a full-MTU frame that
/// may not be fragmented.
fn check_rails(dir: &Path, model: &Model) {
    let nodes: Vec<_> = model.nodes.iter().filter(|node| !node.rails.is_empty()).collect();
    assert_eq!(nodes.len(), 4);
    let mut pings = 0;
    for from in &nodes {
        for rail in &from.rails {
            let mtu = exec_ok(dir, &from.name, &["cat", &format!("/sys/class/net/{}/mtu", rail.netdev)]);
            assert_eq!(mtu.trim(), rail.mtu.to_string(), "{} {} MTU", from.name, rail.netdev);
            // ICMP payload = MTU - 20 (IPv4 header) - 8 (ICMP header).
            let size = (rail.mtu - 28).to_string();
            for to in nodes.iter().filter(|to| to.name != from.name) {
                let Some(peer) = to.rails.iter().find(|peer| peer.rail == rail.rail) else { continue };
                let address = peer.address.to_string();
                let ping = exec(
                    dir,
                    &from.name,
                    &["ping", "-M", "do", "-s", &size, "-c", "1", "-W", "2", "-I", &rail.netdev, &address],
                );
                assert!(
                    ping.status.success(),
                    "{} {} → {} {} ({address}), {size} bytes with DF:\n{}{}",
                    from.name,
                    rail.netdev,
                    to.name,
                    peer.netdev,
                    text(&ping.stdout),
                    text(&ping.stderr)
                );
                pings += 1;
            }
        }
    }
    assert_eq!(pings, 4 * 3 * 2, "every ordered pair of nodes on both rails");
}

/// A partition's time limit changed in the blueprint: the plan changes slurm.conf
/// and restarts or reconfigures its daemons, nothing else; deploy applies it and
/// Slurm reports the new limit.
fn check_partition_change(dir: &Path) {
    let path = dir.join("lab.yaml");
    let blueprint = std::fs::read_to_string(&path).expect("blueprint");
    std::fs::write(&path, edited(&blueprint, &[("max_time: INFINITE", "max_time: 2-00:00:00")], "the lab blueprint"))
        .expect("write blueprint");
    let plan = toolkit(dir, &["plan", "lab.yaml", "-i", "inventory.yaml", "--output", "json"]);
    assert_eq!(plan.status.code(), Some(2), "a partition change is a change:\n{}", text(&plan.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).expect("plan JSON");
    let changed = super::plan::assert_only_slurm_config_changes(&plan);
    // slurm.conf on the controller and the four nodes, and their daemons told.
    assert!(changed.iter().filter(|c| c.contains("slurm.conf")).count() == 5, "{changed:#?}");
    assert!(
        changed.iter().any(|c| c.contains("slurmctld")) && changed.iter().any(|c| c.contains("slurmd ")),
        "{changed:#?}"
    );

    let deploy = toolkit(dir, &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    assert_success(&deploy, "deploying the partition change");
    let partition = exec_ok(dir, "head", &["scontrol", "show", "partition", "gpu"]);
    assert!(partition.contains("MaxTime=2-00:00:00"), "slurmctld runs the new limit:\n{partition}");
    assert_success(&toolkit(dir, &["plan", "lab.yaml", "-i", "inventory.yaml"]), "the plan after the partition change");
}

/// Tenant A (alice, team-a) fills the cluster by borrowing; tenant B (bob, team-b)
/// submits within its guarantee; one of A's borrowed jobs is requeued and B's runs.
fn check_borrow_and_reclaim(dir: &Path) {
    let sbatch = |user: &str, extra: &[&str]| -> String {
        let mut command =
            vec!["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null"];
        command.extend_from_slice(extra);
        command.extend_from_slice(&["--nodes=1", "--gres=gpu:4", "--wrap", "sleep 600"]);
        exec_ok(dir, "head", &command).trim().to_owned()
    };
    let borrowed: Vec<String> = (0..4).map(|_| sbatch("alice", &["--qos=borrow"])).collect();
    wait_for(dir, "alice's 4 borrowing jobs running on all 16 GPUs", |jobs| {
        borrowed.iter().all(|id| jobs.get(id).is_some_and(|job| job.state == "RUNNING"))
    });
    let guaranteed = sbatch("bob", &[]);
    let mut requeued = String::new();
    wait_for(dir, "bob's job running and one of alice's requeued", |jobs| {
        let running = |id: &String| jobs.get(id).is_some_and(|job| job.state == "RUNNING");
        let waiting: Vec<&String> = borrowed.iter().filter(|id| !running(id)).collect();
        if let [only] = waiting.as_slice() {
            requeued.clone_from(only);
        }
        running(&guaranteed) && waiting.len() == 1
    });
    let job = exec_ok(dir, "head", &["scontrol", "--oneliner", "show", "job", &requeued]);
    assert!(job.contains("JobState=PENDING") && job.contains("Restarts=1"), "preempted by requeue:\n{job}");
    exec_ok(dir, "head", &["scancel", "--user=alice"]);
    exec_ok(dir, "head", &["scancel", "--user=bob"]);
    wait_for(dir, "no jobs left", BTreeMap::is_empty);
    wait_all_idle(dir);
}

/// node01–04 all `idle` (a node is `completing` for a moment after a job).
fn wait_all_idle(dir: &Path) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let sinfo = exec_ok(dir, "head", &["sinfo", "--noheader", "--Node", "--format=%N %T"]);
        let nodes: Vec<&str> = sinfo.lines().filter_map(|line| line.strip_suffix(" idle")).collect();
        if nodes == ["node01", "node02", "node03", "node04"] {
            return;
        }
        assert!(Instant::now() < deadline, "not every node became idle:\n{sinfo}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

struct Job {
    state: String,
}

/// Polls `squeue` (job id → state) until `done` says so, for at most a minute.
fn wait_for(dir: &Path, what: &str, mut done: impl FnMut(&BTreeMap<String, Job>) -> bool) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let squeue = exec_ok(dir, "head", &["squeue", "--noheader", "--format=%i %T %u %q %r"]);
        let jobs: BTreeMap<String, Job> = squeue
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                Some((words.next()?.to_owned(), Job { state: words.next()?.to_owned() }))
            })
            .collect();
        if done(&jobs) {
            return;
        }
        assert!(Instant::now() < deadline, "waited a minute for {what}; squeue:\n{squeue}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The validators that need no GPU pass on the deployed lab (fio storage with a
/// small file, BGP, rail links, MTU, cabling from LLDP, Slurm), and their results
/// make a report.
const LAB_VALIDATORS: &str = "fabric-bgp,rail-links,mtu,cabling,scheduler,storage-throughput";

fn check_acceptance(dir: &Path) {
    let run = validate(dir, LAB_VALIDATORS, "results.json");
    assert_success(&run, "toolkit validate on the deployed lab");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).expect("results")).expect("JSON");
    let ids: Vec<&str> =
        results["validators"].as_array().expect("validators").iter().filter_map(|v| v["id"].as_str()).collect();
    assert_eq!(ids.len(), 6, "every lab validator ran: {ids:?}");
    let junit = toolkit(dir, &["report", "results.json", "--format", "junit"]);
    assert_success(&junit, "toolkit report --format junit");
    let xml = text(&junit.stdout);
    assert!(xml.contains("failures=\"0\"") && xml.contains("cabling"), "{xml}");
}

fn validate(dir: &Path, only: &str, results: &str) -> Output {
    toolkit(dir, &["validate", "lab.yaml", "-i", "inventory.yaml", "--only", only, "--results", results])
}

/// `--drain-failed`: a node whose rail is down is drained with reason
/// `toolkit:rail-links`; once the rail is back, the next run resumes it — and
/// never touches a node an administrator drained for a reason of their own.
fn check_drain_and_resume(dir: &Path) {
    exec_ok(dir, "head", &["scontrol", "update", "nodename=node02", "state=drain", "reason=admin: memory test"]);
    exec_ok(dir, "node03", &["ip", "link", "set", "rail1", "down"]);
    let run = drain_run(dir);
    assert_eq!(run.status.code(), Some(2), "a rail down fails rail-links:\n{}", text(&run.stderr));
    assert_eq!(node_state(dir, "node03"), ("drained".to_owned(), "toolkit:rail-links".to_owned()));

    exec_ok(dir, "node03", &["ip", "link", "set", "rail1", "up"]);
    let run = drain_run(dir);
    assert_success(&run, "rail-links once the rail is back");
    // Resumed; `idle*` (not responding) until slurmctld's next ping of the node.
    let deadline = Instant::now() + Duration::from_mins(1);
    while node_state(dir, "node03").0 != "idle" {
        assert!(Instant::now() < deadline, "toolkit resumed the node it drained: {:?}", node_state(dir, "node03"));
        std::thread::sleep(Duration::from_secs(1));
    }
    assert_eq!(node_state(dir, "node02"), ("drained".to_owned(), "admin: memory test".to_owned()));
    exec_ok(dir, "head", &["scontrol", "update", "nodename=node02", "state=resume"]);
}

fn drain_run(dir: &Path) -> Output {
    let args = ["validate", "lab.yaml", "-i", "inventory.yaml", "--only", "rail-links", "--drain-failed"];
    toolkit(dir, &[&args[..], &["--results", "drain.json"]].concat())
}

/// `(state, reason)` of a node as sinfo shows them.
fn node_state(dir: &Path, node: &str) -> (String, String) {
    let line = exec_ok(dir, "head", &["sinfo", "--noheader", "--Node", "--nodes", node, "--format=%T|%E"]);
    let (state, reason) = line.trim().split_once('|').unwrap_or((line.trim(), ""));
    (state.to_owned(), reason.to_owned())
}

/// node01's rail 0 cable and node02's rail 1 cable trade places (their host-side
/// ends move to the other leaf's bridge, as a technician's mistake would): the
/// cabling validator fails and names both cables; putting them back passes.
fn check_miswired_rails(dir: &Path) {
    let first = Cable::of(dir, "node01", "rail0");
    let second = Cable::of(dir, "node02", "rail1");
    replug(dir, &[("node01", &first, second.bridge.as_str()), ("node02", &second, first.bridge.as_str())]);
    let run = until_cabling(dir, |run| run.status.code() == Some(2));
    let results = std::fs::read_to_string(dir.join("cabling.json")).expect("results");
    let shown = format!("{}{}\n{results}", text(&run.stdout), text(&run.stderr));
    for moved in ["leaf0 swp1 <-> node01 rail0 is in leaf1", "leaf1 swp2 <-> node02 rail1 is in leaf0"] {
        assert!(results.contains(moved), "the work order names `{moved}`:\n{shown}");
    }
    replug(dir, &[("node01", &first, first.bridge.as_str()), ("node02", &second, second.bridge.as_str())]);
    until_cabling(dir, |run| run.status.success());
}

/// Moves cables as a technician does: the node's LLDP agent stops first (its
/// shutdown frame clears the neighbour on the switch it leaves, as a link going down
/// would), then the cable moves, then the agent starts and announces itself on the
/// switch it now reaches.
fn replug(dir: &Path, moves: &[(&str, &Cable, &str)]) {
    for (node, _, _) in moves {
        exec_ok(dir, node, &["systemctl", "stop", "lldpd"]);
    }
    for (_, cable, bridge) in moves {
        cable.plug_into(bridge);
    }
    for (node, _, _) in moves {
        exec_ok(dir, node, &["systemctl", "start", "lldpd"]);
    }
}

/// Runs the cabling validator until `done` says its outcome is the expected one, for
/// at most a minute (lldpd announces every 30 s).
fn until_cabling(dir: &Path, done: impl Fn(&Output) -> bool) -> Output {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let run = validate(dir, "cabling", "cabling.json");
        if done(&run) {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "cabling never settled: exit {:?}\n{}{}",
            run.status.code(),
            text(&run.stdout),
            text(&run.stderr)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The host end of a container's interface: a veth on the Docker host, in a bridge.
struct Cable {
    veth: String,
    bridge: String,
}

impl Cable {
    fn of(dir: &Path, host: &str, netdev: &str) -> Self {
        let peer = exec_ok(dir, host, &["cat", &format!("/sys/class/net/{netdev}/iflink")]);
        let veth = std::fs::read_dir("/sys/class/net")
            .expect("host interfaces")
            .filter_map(Result::ok)
            .find(|entry| {
                std::fs::read_to_string(entry.path().join("ifindex")).is_ok_and(|index| index.trim() == peer.trim())
            })
            .map_or_else(
                || panic!("no host interface with index {} ({host} {netdev})", peer.trim()),
                |entry| entry.file_name().to_string_lossy().into_owned(),
            );
        let master = std::fs::read_link(format!("/sys/class/net/{veth}/master")).expect("veth in a bridge");
        let bridge = master.file_name().expect("bridge name").to_string_lossy().into_owned();
        Self { veth, bridge }
    }

    fn plug_into(&self, bridge: &str) {
        let moved = Command::new("ip").args(["link", "set", &self.veth, "master", bridge]).output().expect("ip");
        assert!(moved.status.success(), "ip link set {} master {bridge}: {}", self.veth, text(&moved.stderr));
    }
}

/// A bare-metal head node: its BMC (sushy-tools' Redfish emulator) gets a hardware
/// profile in the same deploy as a Slurm change. The API stage runs first and sets
/// the BIOS; the SSH stage follows; afterwards the plan of both is empty.
fn check_bmc_stage_runs_first(dir: &Path) {
    let Some(bmc) = super::redfish::emulator(None) else {
        crate::support::cannot_run("the BMC step needs the Redfish emulator (.toolkit/venv), which is missing");
        return;
    };
    let path = dir.join("lab.yaml");
    let blueprint = std::fs::read_to_string(&path).expect("blueprint");
    let mut blueprint = edited(
        &blueprint,
        &[
            (
                "    roles: [controller, database, login]\n",
                "    roles: [controller, database, login]\n    hardware_profile: head\n",
            ),
            ("max_time: 2-00:00:00", "max_time: 3-00:00:00"),
        ],
        "the lab blueprint",
    );
    blueprint.push_str("\nhardware_profiles:\n  head:\n    power: on\n    bios: { ProcTurboMode: Disabled }\n");
    std::fs::write(&path, blueprint).expect("write blueprint");
    let inventory = dir.join("inventory.yaml");
    let mut listed = std::fs::read_to_string(&inventory).expect("inventory");
    let _ = write!(
        listed,
        "bmcs:\n  head:\n    endpoint: http://127.0.0.1:{}\n    username: {{ env: TOOLKIT_TEST_BMC_USER }}\n    \
         password: {{ env: TOOLKIT_TEST_BMC_PASSWORD }}\n",
        bmc.port
    );
    std::fs::write(&inventory, listed).expect("write inventory");

    let plan = toolkit_metal(dir, &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    let shown = format!("{}{}", text(&plan.stdout), text(&plan.stderr));
    assert_eq!(plan.status.code(), Some(2), "{shown}");
    assert!(shown.contains("bios ProcTurboMode on head") && shown.contains("Enabled → Disabled"), "{shown}");

    let deploy = toolkit_metal(dir, &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    let log = text(&deploy.stderr);
    assert_success(&deploy, "deploy with a BMC");
    let api = log.find("API stage (BMCs, cloud, Kubernetes)").unwrap_or_else(|| panic!("no API stage:\n{log}"));
    let ssh = log.find("changed: head:file:/etc/slurm/slurm.conf").unwrap_or_else(|| panic!("no SSH change:\n{log}"));
    assert!(api < ssh, "the API stage runs before the SSH stage:\n{log}");
    let partition = exec_ok(dir, "head", &["scontrol", "show", "partition", "gpu"]);
    assert!(partition.contains("MaxTime=3-00:00:00"), "{partition}");

    // Both stages converged: the BIOS is read back through Redfish as set.
    let plan = toolkit_metal(dir, &["plan", "lab.yaml", "-i", "inventory.yaml", "--stage", "api", "--output", "json"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).expect("plan JSON");
    let bios = plan["changes"].as_array().expect("changes").iter().find(|c| c["id"] == "head:bios:ProcTurboMode");
    assert_eq!(bios.map(|c| (c["action"].clone(), c["before"].clone())), Some(("no-op".into(), "Disabled".into())));
    let plan = toolkit_metal(dir, &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    assert_success(&plan, "the plan of both stages after the deploy");
}
