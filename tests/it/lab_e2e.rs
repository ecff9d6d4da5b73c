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
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use toolkit::model::Model;

use super::lab::{ONE_LAB_AT_A_TIME, missing_prerequisite, text, toolkit};

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

fn edited(original: &str, edits: &[(&str, &str)], what: &str) -> String {
    let mut text = original.to_owned();
    for (from, to) in edits {
        assert!(text.contains(from), "{what} no longer has `{from}`: update this test");
        text = text.replace(from, to);
    }
    text
}

/// Removes the lab even when an assertion fails half way (unless asked to keep it).
struct Teardown<'a>(&'a Path);

impl Drop for Teardown<'_> {
    fn drop(&mut self) {
        if std::env::var_os("TOOLKIT_KEEP_LAB").is_some() {
            eprintln!("TOOLKIT_KEEP_LAB: `toolkit lab down --cluster {CLUSTER}` removes the lab");
            return;
        }
        let _ = toolkit(self.0, &["lab", "down", "--cluster", CLUSTER]);
    }
}

/// `toolkit lab exec` in container `host`.
fn exec(dir: &Path, host: &str, command: &[&str]) -> Output {
    let mut args = vec!["lab", "exec", "--cluster", CLUSTER, host, "--"];
    args.extend_from_slice(command);
    toolkit(dir, &args)
}

/// stdout of a command that must succeed in `host`.
fn exec_ok(dir: &Path, host: &str, command: &[&str]) -> String {
    let output = exec(dir, host, command);
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

/// Fails with `why` and the output unless the command exited 0; says plainly when
/// the command does not exist in this build yet.
fn assert_success(run: &Output, why: &str) {
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

fn model(dir: &Path) -> Model {
    let loaded = toolkit::blueprint::load(&dir.join("lab.yaml")).expect("test blueprint loads");
    toolkit::model::expand(&loaded.blueprint).expect("test blueprint expands")
}

#[test]
fn deploy_brings_the_lab_up_end_to_end() {
    let _one_lab = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(reason) = missing_prerequisite() {
        assert!(std::env::var_os("TOOLKIT_REQUIRE_TOOLS").is_none(), "lab e2e test cannot run: {reason}");
        eprintln!("skipped lab e2e test: {reason}");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let blueprint = std::fs::read_to_string(root.join("blueprints/lab.yaml")).expect("lab blueprint");
    let inventory = std::fs::read_to_string(root.join("inventories/lab.yaml")).expect("lab inventory");
    std::fs::write(dir.path().join("lab.yaml"), edited(&blueprint, BLUEPRINT_EDITS, "blueprints/lab.yaml"))
        .expect("write blueprint");
    std::fs::write(dir.path().join("inventory.yaml"), edited(&inventory, INVENTORY_EDITS, "inventories/lab.yaml"))
        .expect("write inventory");
    let model = model(dir.path());
    let _teardown = Teardown(dir.path());
    let _ = toolkit(dir.path(), &["lab", "down", "--cluster", CLUSTER]);

    let started = Instant::now();
    let up = toolkit(dir.path(), &["lab", "up", "lab.yaml", "-i", "inventory.yaml"]);
    eprintln!("lab up took {:.0?}", started.elapsed());
    assert_success(&up, "lab up");
    let up_log = text(&up.stderr);
    assert!(!up_log.contains("warning"), "the inventory must match the lab it deploys to:\n{up_log}");

    let started = Instant::now();
    let deploy = toolkit(dir.path(), &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    eprintln!("deploy took {:.0?}:\n{}", started.elapsed(), text(&deploy.stderr));
    assert_success(&deploy, "toolkit deploy");

    check_units_running(dir.path(), &model);
    check_slurm(dir.path(), &model);
    check_bgp(dir.path(), &model);
    check_rails(dir.path(), &model);

    // Converged: the plan against the deployed hosts is empty (exit 0, not 2).
    let plan = toolkit(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    assert_success(&plan, "a second `toolkit plan` must have nothing to change");
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

    // A node is `completing` for a moment after the step; then idle.
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let sinfo = exec_ok(dir, &controller, &["sinfo", "--noheader", "--Node", "--format=%N %T"]);
        let states: BTreeMap<&str, &str> =
            sinfo.lines().filter_map(|line| line.split_once(' ')).map(|(n, s)| (n, s.trim())).collect();
        if compute.iter().all(|node| states.get(node) == Some(&"idle")) {
            break;
        }
        assert!(Instant::now() < deadline, "not every node became idle:\n{sinfo}");
        std::thread::sleep(Duration::from_secs(2));
    }
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
