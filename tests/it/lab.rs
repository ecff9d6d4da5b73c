//! Integration test: `toolkit lab up|status|exec|down` against the real Docker engine.
//!
//! Slow (the first run on a machine builds the image, ~2-3 minutes), so one test runs
//! the whole sequence. It uses its own cluster name and subnets, so a lab the user
//! runs from `blueprints/lab.yaml` is neither touched nor in the way.

use std::path::Path;
use std::process::{Command, Output};

use toolkit::lab::image::Recipe;

const CLUSTER: &str = "lab-it";

/// Held by each test that brings a lab up, so they run one after the other: two labs
/// at once double the load on a small machine, and every systemd container takes
/// inotify instances from one per-user limit (see `lab/README.md`).
pub(crate) static ONE_LAB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The lab to itself ([`ONE_LAB_AT_A_TIME`]), or `None` when a prerequisite is
/// missing and the developer skips missing tools ([`crate::support::cannot_run`]).
pub(crate) fn lab_or_skip(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    let one_lab = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(reason) = missing_prerequisite() {
        crate::support::cannot_run(&format!("{test} cannot run: {reason}"));
        return None;
    }
    Some(one_lab)
}

pub(crate) fn toolkit(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolkit")).args(args).current_dir(dir).output().expect("toolkit runs")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).output().is_ok_and(|o| o.status.success())
}

/// Why the test cannot run here, if it cannot.
pub(crate) fn missing_prerequisite() -> Option<String> {
    match Command::new("docker").arg("info").output() {
        Ok(info) if info.status.success() => {}
        Ok(info) => {
            let said = text(&info.stderr);
            return Some(format!("`docker info` fails ({}): {}", info.status, said.trim()));
        }
        Err(error) => return Some(format!("no `docker` client ({error}): apt-get install docker.io")),
    }
    if Command::new("ssh").arg("-V").output().is_err() {
        return Some("no `ssh` client (apt-get install openssh-client)".to_owned());
    }
    let image_present = succeeds("docker", &["image", "inspect", &Recipe::standard().tag()]);
    if !image_present && Command::new("debootstrap").arg("--version").output().is_err() {
        return Some("no lab image and no `debootstrap` to build it (apt-get install debootstrap)".to_owned());
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| text(&o.stdout).trim() == "0");
    if !image_present && !root {
        return Some("no lab image, and building one (debootstrap, chroot) needs root".to_owned());
    }
    None
}

/// Removes the test lab even when an assertion fails half way.
struct Teardown<'a>(&'a Path);

impl Drop for Teardown<'_> {
    fn drop(&mut self) {
        let _ = toolkit(self.0, &["lab", "down", "--cluster", CLUSTER]);
    }
}

fn labelled(kind: &str) -> Vec<String> {
    let filter = format!("label=toolkit.lab={CLUSTER}");
    let output = Command::new("docker")
        .args([
            kind,
            "ls",
            "--filter",
            &filter,
            "--format",
            if kind == "container" { "{{.Names}}" } else { "{{.Name}}" },
        ])
        .args(if kind == "container" { &["--all"][..] } else { &[][..] })
        .output()
        .expect("docker runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn lab_up_ssh_exec_status_down() {
    let Some(_one_lab) = lab_or_skip("lab test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let original = std::fs::read_to_string(root.join("blueprints/lab.yaml")).expect("lab blueprint");
    let edits = [
        ("  name: lab\n", "  name: lab-it\n"),
        ("subnet: 10.10.0.0/24", "subnet: 10.123.0.0/24"),
        ("rail_pool: 10.200.0.0/16", "rail_pool: 10.124.0.0/16"),
    ];
    let blueprint = crate::lab_e2e::edited(&original, &edits, "blueprints/lab.yaml");
    std::fs::write(dir.path().join("lab.yaml"), blueprint).expect("write blueprint");
    let _teardown = Teardown(dir.path());
    let _ = toolkit(dir.path(), &["lab", "down", "--cluster", CLUSTER]);

    let started = std::time::Instant::now();
    let up = toolkit(dir.path(), &["lab", "up", "lab.yaml"]);
    eprintln!("lab up took {:.0?}:\n{}", started.elapsed(), text(&up.stderr));
    assert!(up.status.success(), "lab up failed:\n{}", text(&up.stderr));

    let containers = labelled("container");
    assert_eq!(containers.len(), 8, "{containers:?}");
    let running = Command::new("docker")
        .args(["ps", "--filter", &format!("label=toolkit.lab={CLUSTER}"), "--filter", "status=running", "-q"])
        .output()
        .expect("docker runs");
    assert_eq!(text(&running.stdout).lines().count(), 8, "all eight containers run");

    // SSH from this machine, host key checked against the lab's known_hosts.
    let identity = dir.path().join(".toolkit/lab/id_ed25519");
    let known_hosts = dir.path().join(".toolkit/lab/known_hosts");
    for (address, host) in [("10.123.0.11", "node01"), ("10.123.0.10", "head"), ("10.123.0.254", "leaf0")] {
        let ssh = Command::new("ssh")
            .arg("-i")
            .arg(&identity)
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"])
            .arg(format!("root@{address}"))
            .arg("hostname")
            .output()
            .expect("ssh runs");
        assert!(ssh.status.success(), "ssh {address}: {}", text(&ssh.stderr));
        assert_eq!(text(&ssh.stdout).trim(), host);
    }

    // systemd is PID 1 and nothing failed: a pristine OS, daemons installed but off.
    let exec = |host: &str, command: &[&str]| {
        let mut args = vec!["lab", "exec", "--cluster", CLUSTER, host, "--"];
        args.extend_from_slice(command);
        toolkit(dir.path(), &args)
    };
    assert_eq!(text(&exec("node01", &["cat", "/proc/1/comm"]).stdout).trim(), "systemd");
    let state = exec("node01", &["systemctl", "is-system-running", "--wait"]);
    assert_eq!(text(&state.stdout).trim(), "running", "{}", text(&exec("node01", &["systemctl", "--failed"]).stdout));
    let slurmd = exec("node01", &["systemctl", "is-enabled", "slurmd"]);
    assert_eq!(text(&slurmd.stdout).trim(), "disabled", "deploy, not the image, enables slurmd");
    let exit = exec("node01", &["sh", "-c", "exit 3"]);
    assert_eq!(exit.status.code(), Some(3), "exec passes the command's exit status on");

    // Rails are there as interfaces (eth0, eth1 on the two leaves' networks, eth2 management),
    // without addresses: configuring them is deploy's job.
    let links = text(&exec("node01", &["ip", "-o", "link", "show"]).stdout);
    for (interface, mac) in
        [("eth0", "02:42:0a:7c:00:02"), ("eth1", "02:42:0a:7c:00:22"), ("eth2", "02:42:0a:7b:00:0b")]
    {
        assert!(
            links.lines().any(|l| l.contains(&format!(" {interface}@")) && l.contains(mac)),
            "{interface} {mac} in:\n{links}"
        );
    }
    let rail_addresses = text(&exec("node01", &["ip", "-o", "-4", "address", "show", "dev", "eth0"]).stdout);
    assert_eq!(rail_addresses.trim(), "", "a rail has no IPv4 address before deploy");
    let leaf = text(&exec("leaf0", &["ip", "-o", "link", "show"]).stdout);
    assert!(leaf.contains(" eth1@") && leaf.contains("mtu 9216"), "leaf0 has its uplink, jumbo-capable:\n{leaf}");

    let status = toolkit(dir.path(), &["lab", "status", "--cluster", CLUSTER, "--output", "json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let listed = status["containers"].as_array().expect("containers");
    assert_eq!(listed.len(), 8);
    assert_eq!(listed[1]["host"], "node01");
    assert_eq!(listed[1]["management"], "10.123.0.11");
    assert_eq!(listed[1]["state"], "running");

    // Idempotent: a second `up` keeps every running container.
    let again = toolkit(dir.path(), &["lab", "up", "lab.yaml"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stderr).matches("kept (running)").count(), 8, "{}", text(&again.stderr));

    let down = toolkit(dir.path(), &["lab", "down", "--cluster", CLUSTER]);
    assert!(down.status.success(), "{}", text(&down.stderr));
    assert_eq!(labelled("container"), Vec::<String>::new(), "no container left");
    assert_eq!(labelled("network"), Vec::<String>::new(), "no network left");
}

#[test]
fn lab_without_docker_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["lab", "status", "--cluster", CLUSTER])
        .env("TOOLKIT_DOCKER", dir.path().join("no-docker-here"))
        .output()
        .expect("toolkit runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("was not found: the lab needs Docker Engine"), "{stderr}");

    if Command::new("docker").arg("--version").output().is_err() {
        crate::support::cannot_run("the unreachable-daemon half needs the docker client");
        return;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["lab", "down", "--cluster", CLUSTER])
        .env("DOCKER_HOST", format!("unix://{}", dir.path().join("no.sock").display()))
        .output()
        .expect("toolkit runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("cannot reach the Docker daemon"), "{stderr}");
}
