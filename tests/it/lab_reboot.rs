//! Integration test: a lab node reboots for real. `deploy::reboot::reboot` runs
//! `systemctl reboot` on node01 over SSH (russh, host key checked); systemd ends the
//! container, Docker's restart policy starts it again, and the function sees a new
//! boot identity, sshd answering and systemd `running`. The container must come back
//! as a machine does: same addresses, no Docker addresses on its rails, a plain
//! `/etc/hosts`. A killed or powered-off container must stay down.
//!
//! A pristine lab is enough (no deploy): the reboot path is the same. Its own cluster
//! name and subnets (`lab-reboot`, 10.127.0.0/24, rail pool 10.128.0.0/16), distinct
//! from `lab-it` and `lab-e2e`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use toolkit::deploy::reboot::{RebootOptions, reboot};
use toolkit::transport::session::SshPool;
use toolkit::transport::ssh::{SshOptions, SshTarget};
use toolkit::transport::{Connector, Executor};

use crate::lab::{lab_or_skip, text, toolkit};
use crate::lab_e2e::edited;

const CLUSTER: &str = "lab-reboot";
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-reboot\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.127.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.128.0.0/16"),
];
const NODE01: &str = "10.127.0.11";

/// Takes the lab down at the end, also when an assertion failed.
struct Down<'a>(&'a Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if std::env::var_os("TOOLKIT_KEEP_LAB").is_none() {
            let _ = toolkit(self.0, &["lab", "down", "--cluster", CLUSTER]);
        }
    }
}

fn inspect(host: &str, format: &str) -> String {
    let container = toolkit::lab::layout::container_name(CLUSTER, host);
    let output = Command::new("docker").args(["inspect", "--format", format, &container]).output().expect("docker");
    assert!(output.status.success(), "docker inspect {container}: {}", text(&output.stderr));
    text(&output.stdout).trim().to_owned()
}

fn docker(args: &[&str]) {
    let output = Command::new("docker").args(args).output().expect("docker runs");
    assert!(output.status.success(), "docker {args:?}: {}", text(&output.stderr));
}

/// Waits until the container of `host` is no longer running; its status and exit code.
fn wait_stopped(host: &str) -> String {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let state = inspect(host, "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}");
        if !state.starts_with("running") || Instant::now() > deadline {
            return state;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn node01(dir: &Path) -> SshTarget {
    let lab = dir.join(".toolkit/lab");
    SshTarget {
        host: "node01".to_owned(),
        address: NODE01.to_owned(),
        port: 22,
        user: "root".to_owned(),
        identity_file: Some(lab.join("id_ed25519")),
        known_hosts: lab.join("known_hosts"),
        proxy_jump: None,
        become_root: false,
    }
}

#[test]
fn a_lab_node_reboots_for_real() {
    let Some(_one_lab) = lab_or_skip("lab reboot test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let original = std::fs::read_to_string(root.join("blueprints/lab.yaml")).expect("lab blueprint");
    std::fs::write(dir.path().join("lab.yaml"), edited(&original, BLUEPRINT_EDITS, "blueprints/lab.yaml"))
        .expect("write blueprint");
    let _down = Down(dir.path());
    let _ = toolkit(dir.path(), &["lab", "down", "--cluster", CLUSTER]);
    let up = toolkit(dir.path(), &["lab", "up", "lab.yaml"]);
    assert!(up.status.success(), "lab up failed:\n{}", text(&up.stderr));
    assert_eq!(inspect("node01", "{{.HostConfig.RestartPolicy.Name}}"), "on-failure");
    let started_before = inspect("node01", "{{.State.StartedAt}}");
    assert_eq!(inspect("node01", "{{.RestartCount}}"), "0");

    let pool = SshPool::new([node01(dir.path())], SshOptions::default());
    let options = RebootOptions {
        return_timeout: Duration::from_mins(2),
        settle_timeout: Duration::from_mins(2),
        poll_interval: Duration::from_millis(500),
        attempt_timeout: Duration::from_secs(10),
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let run = |argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|word| (*word).to_owned()).collect();
        runtime.block_on(async {
            let session = pool.connect("node01").await.expect("connects");
            session.exec(&argv).await.expect("runs")
        })
    };
    // A session is open before the reboot, as in a rollout: the reboot must not reuse it.
    assert_eq!(run(&["hostname"]).stdout_text().trim(), "node01");

    let started = Instant::now();
    let report = runtime.block_on(reboot(&pool, "node01", &options)).expect("node01 reboots and comes back");
    eprintln!(
        "node01 rebooted: back after {:.1?}, booted after {:.1?} (total {:.1?}), {} attempts, {} → {}",
        report.returned_after,
        report.settled_after,
        started.elapsed(),
        report.attempts,
        report.before,
        report.after
    );
    assert_ne!(report.after, report.before, "a new boot");
    assert_ne!(report.after.init_started, report.before.init_started, "init started again");
    assert_eq!(report.system_state, "running", "a pristine node boots with no failed unit");
    assert!(!report.power_cycled);

    // Docker restarted the container by its restart policy.
    assert_eq!(inspect("node01", "{{.RestartCount}}"), "1");
    assert_ne!(inspect("node01", "{{.State.StartedAt}}"), started_before);
    assert_eq!(inspect("node01", "{{.State.Running}}"), "true");

    // sshd answers on the same address; the node is what `lab up` leaves after a start.
    assert_eq!(run(&["hostname"]).stdout_text().trim(), "node01");
    let addresses = run(&["ip", "-o", "-4", "address", "show"]).stdout_text();
    assert!(addresses.contains(&format!("inet {NODE01}/24")), "management address kept:\n{addresses}");
    for rail in ["eth0", "eth1"] {
        assert!(!addresses.contains(&format!(" {rail} ")), "Docker's address on rail {rail} removed:\n{addresses}");
    }
    assert!(!run(&["mountpoint", "-q", "/etc/hosts"]).success(), "/etc/hosts is a plain file again");
    assert_eq!(run(&["systemctl", "is-active", "toolkit-lab-boot.service"]).stdout_text().trim(), "active");

    // Stopped by hand, a container stays down as before: killed, or powered off inside.
    docker(&["kill", &toolkit::lab::layout::container_name(CLUSTER, "node03")]);
    docker(&["exec", &toolkit::lab::layout::container_name(CLUSTER, "node04"), "systemctl", "poweroff"]);
    assert_eq!(wait_stopped("node03"), "exited 137 0", "docker kill: not restarted");
    assert_eq!(wait_stopped("node04"), "exited 0 0", "poweroff: exit 0, not restarted");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(inspect("node03", "{{.State.Status}}"), "exited");
    assert_eq!(inspect("node04", "{{.State.Status}}"), "exited");
    runtime.block_on(pool.close_all());
}
