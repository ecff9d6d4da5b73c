//! Removal on the lab: what leaves the blueprint leaves the hosts. The lab is
//! deployed, then `topology` and tenant `team-b` are dropped from its blueprint:
//! the live plan shows their removals, a deploy refuses to delete `team-b` while
//! one of its jobs waits (naming the job), and `deploy --force` cancels the job,
//! deletes topology.conf everywhere, restarts slurmctld without its TopologyPlugin
//! and deletes the account, its user and its QOS; the next plan has nothing to change.
//!
//! Slow like the e2e test (a lab up and three deploys). Its own cluster name and
//! subnets (`lab-rm`, 10.133.0.0/24, 10.134.0.0/16) keep it clear of the other
//! labs; `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::path::Path;
use std::time::Instant;

use super::lab::{lab_or_skip, text, toolkit};
use super::lab_e2e::{Teardown, assert_success, exec_in, exec_ok_in, fresh_lab, make_tenant_users};
use super::plan::DROP_TOPOLOGY_AND_TEAM_B;

const CLUSTER: &str = "lab-rm";

const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-rm\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.133.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.134.0.0/16"),
];
/// MACs are `02:42` + the rail address (10.200 = `0a:c8`, 10.134 = `0a:86`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.133.0."), (":0a:c8:", ":0a:86:")];

const HOSTS: [&str; 5] = ["head", "node01", "node02", "node03", "node04"];

fn deploy(dir: &Path) -> std::process::Output {
    let started = Instant::now();
    let run = toolkit(dir, &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    eprintln!("deploy took {:.0?}:\n{}", started.elapsed(), text(&run.stderr));
    run
}

#[test]
fn what_leaves_the_blueprint_leaves_the_hosts() {
    let Some(_one_lab) = lab_or_skip("lab removal test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let _teardown = Teardown(dir, CLUSTER);
    let model = fresh_lab(dir, CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    make_tenant_users(dir, CLUSTER, &model);
    let exec_ok = |host: &str, command: &[&str]| exec_ok_in(dir, CLUSTER, host, command);

    assert_success(&deploy(dir), "the first deploy");
    for host in HOSTS {
        exec_ok(host, &["test", "-f", "/etc/slurm/topology.conf"]);
    }
    assert!(
        exec_ok("head", &["sacctmgr", "-n", "-P", "show", "account", "team-b", "format=Account"]).contains("team-b")
    );

    // A job of team-b's that may not start for an hour waits in the queue.
    let job = exec_ok(
        "head",
        &["su", "bob", "-c", "sbatch --parsable --account=team-b --begin=now+3600 --wrap='sleep 600' 2>&1"],
    );
    let job = job.trim().to_owned();
    assert!(job.parse::<u64>().is_ok(), "sbatch as bob: {job}");

    let blueprint = std::fs::read_to_string(dir.join("lab.yaml")).expect("reads");
    let edited = super::lab_e2e::edited(&blueprint, DROP_TOPOLOGY_AND_TEAM_B, "the lab-rm blueprint");
    std::fs::write(dir.join("lab.yaml"), edited).expect("writes");

    let started = Instant::now();
    let plan = toolkit(dir, &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    eprintln!("live plan took {:.0?}", started.elapsed());
    let shown = text(&plan.stdout);
    assert_eq!(plan.status.code(), Some(2), "{shown}\n{}", text(&plan.stderr));
    for line in [
        "  - file /etc/slurm/topology.conf on head,node[01-04]  (no longer in the blueprint: delete)",
        "  - command sacctmgr-user-team-b-bob on head  (no longer in the blueprint: run its undo)",
        "  - command sacctmgr-account-team-b on head  (no longer in the blueprint: run its undo)",
        "  - command sacctmgr-qos-team-b on head  (no longer in the blueprint: run its undo)",
    ] {
        assert!(shown.lines().any(|shown| shown == line), "the live plan has no `{line}`:\n{shown}");
    }

    // The waiting job holds team-b: refused, naming the job; the rest goes ahead.
    let refused = deploy(dir);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stdout));
    let log = format!("{}{}", text(&refused.stdout), text(&refused.stderr));
    assert!(
        log.contains(&format!(
            "refusing to delete user `bob` of account `team-b`: it has running or pending jobs: {job} (bob, PENDING)"
        )),
        "{log}"
    );
    for host in ["node01", "node02", "node03", "node04"] {
        exec_ok(host, &["test", "!", "-e", "/etc/slurm/topology.conf"]);
    }

    // --force cancels the job, then deletes.
    let started = Instant::now();
    let forced = toolkit(dir, &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes", "--force"]);
    eprintln!("deploy --force took {:.0?}:\n{}", started.elapsed(), text(&forced.stderr));
    assert_success(&forced, "deploy --force");
    assert_eq!(exec_ok("head", &["squeue", "-h", "-A", "team-b"]).trim(), "", "--force cancels the job");

    for host in HOSTS {
        exec_ok(host, &["test", "!", "-e", "/etc/slurm/topology.conf"]);
    }
    let config = exec_ok("head", &["scontrol", "show", "config"]);
    assert!(!config.contains("topology/tree"), "slurmctld still runs with the tree plugin:\n{config}");
    let active = exec_in(dir, CLUSTER, "head", &["systemctl", "is-active", "slurmctld"]);
    assert_eq!(text(&active.stdout).trim(), "active");
    assert_eq!(exec_ok("head", &["sacctmgr", "-n", "show", "account", "team-b"]).trim(), "");
    assert_eq!(
        exec_ok("head", &["sacctmgr", "-n", "-P", "show", "qos", "where", "name=team-b", "format=Name"]).trim(),
        ""
    );
    assert_eq!(
        exec_ok("head", &["sacctmgr", "-n", "-P", "show", "assoc", "where", "user=bob", "format=Account"]).trim(),
        ""
    );
    // team-a is untouched.
    assert!(
        exec_ok("head", &["sacctmgr", "-n", "-P", "show", "account", "team-a", "format=Account"]).contains("team-a")
    );

    let started = Instant::now();
    let plan = toolkit(dir, &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    eprintln!("live plan took {:.0?}", started.elapsed());
    assert_success(&plan, "the plan after the removals must have nothing to change");
}
