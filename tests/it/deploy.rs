//! Integration tests: `toolkit push` (the same plan → apply → state path as
//! `deploy`) against real sshd hosts, through the binary, plus the cluster lock.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use toolkit::deploy::lock;
use toolkit::transport::session::SshSession;
use toolkit::transport::ssh::SshOptions;

use crate::support::Hosts;

/// A manifest, its template and an inventory for `hosts`, in a temp dir.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new(hosts: &Hosts, count: usize, entries: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut inventory = format!(
            "version: 1\ndefaults: {{ user: root, identity_file: {}, known_hosts: {} }}\nhosts:\n",
            hosts.base.join("id_ed25519").display(),
            hosts.base.join("known_hosts").display()
        );
        for k in 1..=count {
            let _ = writeln!(
                inventory,
                "  host{k}: {{ address: {}, vars: {{ host_root: {}, greeting: hello }} }}",
                hosts.address(k),
                hosts.root(k).display()
            );
        }
        std::fs::write(dir.path().join("inventory.yaml"), inventory).expect("inventory");
        std::fs::write(dir.path().join("app.conf.j2"), "# {{ host_label }}\ngreeting = {{ greeting }}\n").expect("tpl");
        let workspace = Self { dir };
        workspace.manifest(entries);
        workspace
    }

    fn manifest(&self, entries: &str) {
        std::fs::write(self.dir.path().join("push.yaml"), format!("version: 1\nresources:\n{entries}"))
            .expect("manifest");
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolkit"));
        command
            .arg("push")
            .arg(self.path("push.yaml"))
            .arg("-i")
            .arg(self.path("inventory.yaml"))
            .arg("--state")
            .arg(self.path("state.json"))
            .args(extra);
        self.private(&mut command);
        command
    }

    /// The workspace is the run's runtime directory: the connection keeper of its
    /// runs is its own, and exits when the directory is removed.
    fn private(&self, command: &mut Command) {
        command.env("XDG_RUNTIME_DIR", self.dir.path()).env_remove("TOOLKIT_SSH_PERSIST");
    }

    /// The keeper's socket (named after the toolkit build: one build here), if any.
    fn socket(&self) -> Option<PathBuf> {
        let sockets: Vec<PathBuf> = std::fs::read_dir(self.path("toolkit"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|extension| extension == "sock"))
            .collect();
        assert!(sockets.len() <= 1, "one build, one socket: {sockets:?}");
        sockets.into_iter().next()
    }

    /// PIDs of the connection keepers serving this workspace's socket (zombies
    /// left unreaped by a container's init do not count).
    fn keepers(&self) -> Vec<String> {
        let directory = self.path("toolkit").display().to_string();
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let pid = entry.file_name().to_string_lossy().into_owned();
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
            let words: Vec<String> =
                cmdline.split(|b| *b == 0).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
            if words.iter().any(|w| w == "ssh-mux")
                && words.iter().any(|w| Path::new(w).parent() == Some(Path::new(&directory)))
            {
                pids.push(pid);
            }
        }
        pids
    }

    fn disconnect(&self) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolkit"));
        command.arg("disconnect");
        self.private(&mut command);
        command.output().expect("runs toolkit disconnect")
    }

    fn push(&self, extra: &[&str]) -> Output {
        self.command(extra).output().expect("runs toolkit push")
    }
}

const FILES: &str = r#"  - directory: { path: "{{ host_root }}/etc/app", mode: "0755" }
  - template: { src: app.conf.j2, dest: "{{ host_root }}/etc/app/app.conf", mode: "0644" }
  - command: { argv: [sh, -c, "sha256sum {{ host_root }}/etc/app/app.conf > {{ host_root }}/etc/app/sum"], creates: "{{ host_root }}/etc/app/sum" }
"#;

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[test]
fn first_push_changes_everything_then_nothing_then_only_the_edited_file() {
    let Some(hosts) = Hosts::up(110, 3) else { return };
    let workspace = Workspace::new(&hosts, 3, FILES);
    let first = workspace.push(&["--yes"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(text(&first).contains("9 changed, 0 unchanged, 0 failed"), "{}", text(&first));
    for k in 1..=3 {
        let conf = std::fs::read_to_string(hosts.root(k).join("etc/app/app.conf")).expect("pushed");
        assert_eq!(conf, format!("# host{k}\ngreeting = hello\n"));
    }
    let again = workspace.push(&["--dry-run"]);
    assert_eq!(again.status.code(), Some(0), "a second plan has nothing to do: {}", text(&again));
    assert!(text(&again).contains("0 to create, 0 to update, 0 to remove, 9 unchanged"), "{}", text(&again));

    std::fs::write(workspace.path("app.conf.j2"), "# {{ host_label }}\ngreeting = hi\n").expect("edit");
    let plan = workspace.push(&["--dry-run"]);
    assert_eq!(plan.status.code(), Some(2), "{}", text(&plan));
    let shown = text(&plan);
    assert!(shown.contains("0 to create, 3 to update"), "{shown}");
    assert!(shown.contains("-greeting = hello") && shown.contains("+greeting = hi"), "diff shown: {shown}");
    let applied = workspace.push(&["--yes"]);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied));
    assert!(text(&applied).contains("3 changed"), "{}", text(&applied));
}

#[test]
fn a_stopped_host_fails_alone_and_a_rerun_converges() {
    let Some(hosts) = Hosts::up(111, 3) else { return };
    let workspace = Workspace::new(&hosts, 3, FILES);
    hosts.kill(2);
    let output = workspace.push(&["--yes", "--connect-timeout", "3"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(shown.contains("host2"), "{shown}");
    assert!(hosts.root(1).join("etc/app/app.conf").is_file() && hosts.root(3).join("etc/app/app.conf").is_file());
    assert!(!hosts.root(2).join("etc/app/app.conf").exists());
    hosts.up_again(3);
    let rerun = workspace.push(&["--yes"]);
    assert_eq!(rerun.status.code(), Some(0), "{}", text(&rerun));
    assert!(hosts.root(2).join("etc/app/app.conf").is_file());
    let settled = workspace.push(&["--dry-run"]);
    assert_eq!(settled.status.code(), Some(0), "{}", text(&settled));
}

#[test]
fn a_failing_command_skips_what_follows_on_its_host_only() {
    let Some(hosts) = Hosts::up(112, 2) else { return };
    let workspace = Workspace::new(
        &hosts,
        2,
        r#"  - command: { argv: [sh, -c, "test {{ inventory_hostname }} != host1"] }
  - template: { src: app.conf.j2, dest: "{{ host_root }}/app.conf", mode: "0644" }
"#,
    );
    let output = workspace.push(&["--yes", "--output", "json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("report JSON");
    let outcome = |target: &str, kind: &str| {
        report["outcomes"]
            .as_array()
            .expect("outcomes")
            .iter()
            .find(|o| o["target"] == target && o["id"].as_str().is_some_and(|id| id.contains(kind)))
            .map(|o| (o["outcome"].as_str().unwrap_or_default().to_owned(), o["reason"].as_str().map(str::to_owned)))
    };
    assert_eq!(outcome("host1", ":command:").map(|o| o.0), Some("failed".to_owned()));
    assert_eq!(outcome("host1", ":file:"), Some(("skipped".to_owned(), Some("upstream".to_owned()))));
    assert_eq!(outcome("host2", ":file:").map(|o| o.0), Some("changed".to_owned()));
    assert!(!hosts.root(1).join("app.conf").exists(), "dependent of the failure was skipped");
    assert!(hosts.root(2).join("app.conf").is_file(), "the other host went on");
}

#[test]
fn ctrl_c_reports_the_partial_outcome() {
    let Some(hosts) = Hosts::up(113, 2) else { return };
    let workspace = Workspace::new(
        &hosts,
        2,
        r#"  - command: { argv: [sleep, "3"] }
  - template: { src: app.conf.j2, dest: "{{ host_root }}/app.conf", mode: "0644" }
"#,
    );
    let child = workspace.command(&["--yes"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    std::thread::sleep(Duration::from_millis(1500));
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let output = child.wait_with_output().expect("waits");
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(shown.contains("interrupted"), "{shown}");
    assert!(shown.contains("skipped (interrupted)"), "{shown}");
}

#[test]
fn a_concurrent_reader_never_sees_a_half_written_file() {
    let Some(hosts) = Hosts::up(114, 1) else { return };
    let big_a = "a".repeat(400_000);
    let big_b = "b".repeat(400_000);
    let workspace = Workspace::new(
        &hosts,
        1,
        "  - template: { src: big.j2, dest: \"{{ host_root }}/big.conf\", mode: \"0644\" }\n",
    );
    let target = hosts.root(1).join("big.conf");
    std::fs::write(workspace.path("big.j2"), &big_a).expect("tpl");
    assert_eq!(workspace.push(&["--yes"]).status.code(), Some(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, target, a, b) = (stop.clone(), target.clone(), big_a.clone(), big_b.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let seen = std::fs::read_to_string(&target).expect("the file always exists");
                assert!(seen == a || seen == b, "a reader saw {} bytes of a half-written file", seen.len());
                reads += 1;
            }
            reads
        })
    };
    for round in 0..6 {
        std::fs::write(workspace.path("big.j2"), if round % 2 == 0 { &big_b } else { &big_a }).expect("tpl");
        let output = workspace.push(&["--yes"]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("reader");
    assert!(reads > 10, "the reader ran during the pushes ({reads} reads)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_lock_is_refused_and_names_its_holder() {
    let Some(hosts) = Hosts::up(115, 1) else { return };
    let session = SshSession::connect(&hosts.target(1), &SshOptions::default()).await.expect("connects");
    lock::acquire(&session, "alice@laptop pid 1 since 2026-11-22T00:00:00Z").await.expect("first lock");
    let error = lock::acquire(&session, "bob@ci pid 2").await.expect_err("second lock refused");
    let message = error.to_string();
    assert!(message.contains("alice@laptop pid 1"), "{message}");
    assert!(message.contains("toolkit unlock --force"), "{message}");
    lock::release(&session).await.expect("released");
    lock::acquire(&session, "bob@ci pid 2").await.expect("free again");
    lock::release(&session).await.expect("released");
    assert!(!Path::new(lock::LOCK_DIR).exists());
}

/// The PIDs of host `k`'s per-connection sshd processes: one per SSH connection,
/// a new PID for a new connection.
fn sessions(hosts: &Hosts, k: usize) -> Vec<String> {
    let output = Command::new("ps").args(["-o", "pid=", "--ppid", &hosts.pid(k)]).output().expect("ps");
    String::from_utf8_lossy(&output.stdout).split_whitespace().map(str::to_owned).collect()
}

/// Waits up to 10 s for `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..100 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("still not true after 10 s: {what}");
}

/// A first push with connections kept 30 s; the sshd session pid that outlives it on
/// each of the two hosts.
fn push_keeping(hosts: &Hosts, workspace: &Workspace) -> Vec<Vec<String>> {
    let first = workspace.push(&["--yes", "--ssh-persist", "30"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let kept: Vec<Vec<String>> = (1..=2).map(|k| sessions(hosts, k)).collect();
    assert!(kept.iter().all(|pids| pids.len() == 1), "one connection per host outlives the run: {kept:?}");
    kept
}

#[test]
fn kept_connections_serve_the_next_run_and_a_killed_one_is_made_again() {
    let Some(hosts) = Hosts::up(116, 2) else { return };
    let workspace = Workspace::new(&hosts, 2, FILES);
    let kept = push_keeping(&hosts, &workspace);
    assert_eq!(workspace.keepers().len(), 1, "one background process");
    let socket = workspace.socket().expect("the keeper's socket");
    assert!(socket.file_name().expect("name").to_string_lossy().starts_with("ssh-"), "{}", socket.display());
    let mode = std::fs::metadata(&socket).expect("socket").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let rerun = workspace.push(&["--yes", "--ssh-persist", "30"]);
    assert_eq!(rerun.status.code(), Some(0), "{}", text(&rerun));
    assert!(text(&rerun).contains("6 unchanged"), "{}", text(&rerun));
    let now: Vec<Vec<String>> = (1..=2).map(|k| sessions(&hosts, k)).collect();
    assert_eq!(now, kept, "the rerun opened no connection: the same sshd sessions served it");

    // host1's connection dies under the keeper (its sshd session is killed): the
    // next run connects host1 again and keeps host2's.
    assert!(Command::new("kill").arg(&kept[0][0]).status().expect("kill").success());
    eventually("host1's session ended", || sessions(&hosts, 1).is_empty());
    let after = workspace.push(&["--yes", "--ssh-persist", "30"]);
    assert_eq!(after.status.code(), Some(0), "{}", text(&after));
    let reconnected = sessions(&hosts, 1);
    assert!(
        reconnected.len() == 1 && reconnected != kept[0],
        "host1 connected again: {reconnected:?} (was {:?})",
        kept[0]
    );
    assert_eq!(sessions(&hosts, 2), kept[1]);

    let closed = workspace.disconnect();
    assert!(closed.status.success() && text(&closed).contains("closed"), "{}", text(&closed));
    eventually("the keeper exited", || workspace.keepers().is_empty());
    eventually("its connections closed", || (1..=2).all(|k| sessions(&hosts, k).is_empty()));
    assert!(workspace.socket().is_none());
}

/// The lab's layout: the inventory names its key and known_hosts relative to the
/// directory the run starts in.
fn with_relative_paths(hosts: &Hosts, workspace: &Workspace) {
    for name in ["id_ed25519", "known_hosts"] {
        std::fs::copy(hosts.base.join(name), workspace.path(name)).expect("copy");
    }
    let inventory = std::fs::read_to_string(workspace.path("inventory.yaml")).expect("inventory");
    let relative = inventory
        .replace(&hosts.base.join("id_ed25519").display().to_string(), "id_ed25519")
        .replace(&hosts.base.join("known_hosts").display().to_string(), "known_hosts");
    std::fs::write(workspace.path("inventory.yaml"), relative).expect("write");
}

#[test]
fn a_keeper_started_elsewhere_reads_a_runs_relative_paths_in_that_runs_directory() {
    let (Some(first_hosts), Some(second_hosts)) = (Hosts::up(119, 1), Hosts::up(129, 1)) else { return };
    let first = Workspace::new(&first_hosts, 1, FILES);
    let second = Workspace::new(&second_hosts, 1, FILES);
    with_relative_paths(&first_hosts, &first);
    with_relative_paths(&second_hosts, &second);
    // Both runs share the first one's keeper, as two checkouts of one user share
    // theirs; each starts in its own directory, where its relative paths point.
    let run = |workspace: &Workspace| {
        let mut command = workspace.command(&["--yes", "--ssh-persist", "30"]);
        command.current_dir(workspace.path("")).env("XDG_RUNTIME_DIR", first.path(""));
        command.output().expect("runs toolkit push")
    };
    let kept = run(&first);
    assert_eq!(kept.status.code(), Some(0), "{}", text(&kept));
    assert_eq!(first.keepers().len(), 1, "the first run left a keeper");
    let other = run(&second);
    assert_eq!(
        other.status.code(),
        Some(0),
        "the second run's hosts are checked against its own known_hosts: {}",
        text(&other)
    );
    assert_eq!(first.keepers().len(), 1, "one keeper served both runs");
    assert_eq!(sessions(&second_hosts, 1).len(), 1, "and keeps the second run's connection");
    assert!(first.disconnect().status.success());
    eventually("the keeper exited", || first.keepers().is_empty());
}

/// `command`'s output, or a panic naming `what` when it has not ended after 40 s: a
/// watchdog (below the 45 s that three unanswered 15 s keepalives take to declare a
/// connection dead), not a measurement.
fn within_keepalive(what: &str, mut command: Command) -> Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    for _ in 0..400 {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("output");
    panic!("{what}: still running after 40 s, waiting on a dead kept connection: {}", text(&output));
}

#[test]
fn a_kept_connection_that_stopped_answering_or_whose_host_restarted_stalls_no_run() {
    let Some(hosts) = Hosts::up(118, 2) else { return };
    let workspace = Workspace::new(&hosts, 2, FILES);
    let kept = push_keeping(&hosts, &workspace);

    // host1's end of the kept connection freezes: TCP stays up, nothing answers (a
    // host cut off or powered off, a removed container, as the keeper sees it).
    assert!(Command::new("kill").args(["-STOP", &kept[0][0]]).status().expect("kill").success());
    let rerun = within_keepalive("the rerun after host1 froze", workspace.command(&["--yes", "--ssh-persist", "30"]));
    let _ = Command::new("kill").args(["-KILL", &kept[0][0]]).status();
    assert_eq!(rerun.status.code(), Some(0), "{}", text(&rerun));
    assert!(text(&rerun).contains("6 unchanged"), "{}", text(&rerun));
    eventually("the frozen session is gone", || !sessions(&hosts, 1).contains(&kept[0][0]));
    let reconnected = sessions(&hosts, 1);
    assert_eq!(reconnected.len(), 1, "host1 was dialled again: {reconnected:?}");
    assert_eq!(sessions(&hosts, 2), kept[1], "host2's kept connection served the rerun");

    // host2 stops and starts again (a reboot, sshd restarted): its kept connection
    // ends with it, the next run dials it again.
    hosts.kill(2);
    hosts.up_again(2);
    let after =
        within_keepalive("the rerun after host2 restarted", workspace.command(&["--yes", "--ssh-persist", "30"]));
    assert_eq!(after.status.code(), Some(0), "{}", text(&after));
    assert!(text(&after).contains("6 unchanged"), "{}", text(&after));
    assert_eq!(sessions(&hosts, 1), reconnected, "host1's new connection was kept");
    assert_eq!(sessions(&hosts, 2).len(), 1);

    assert!(workspace.disconnect().status.success());
    eventually("the keeper exited", || workspace.keepers().is_empty());
}

#[test]
fn an_idle_keeper_exits_and_persistence_off_leaves_nothing_running() {
    let Some(hosts) = Hosts::up(117, 1) else { return };
    let workspace = Workspace::new(&hosts, 1, FILES);
    let off = workspace.push(&["--yes", "--ssh-persist", "0"]);
    assert_eq!(off.status.code(), Some(0), "{}", text(&off));
    assert!(workspace.keepers().is_empty() && workspace.socket().is_none());
    eventually("the run's connection closed", || sessions(&hosts, 1).is_empty());

    // The inventory's `ssh.persist: 0` turns it off too.
    let inventory = std::fs::read_to_string(workspace.path("inventory.yaml")).expect("inventory");
    std::fs::write(workspace.path("inventory.yaml"), format!("{inventory}ssh: {{ persist: 0 }}\n")).expect("write");
    let off = workspace.push(&["--yes"]);
    assert_eq!(off.status.code(), Some(0), "{}", text(&off));
    assert!(workspace.keepers().is_empty());
    std::fs::write(workspace.path("inventory.yaml"), inventory).expect("restore");

    let kept = workspace.push(&["--yes", "--ssh-persist", "2"]);
    assert_eq!(kept.status.code(), Some(0), "{}", text(&kept));
    assert_eq!(workspace.keepers().len(), 1);
    assert_eq!(sessions(&hosts, 1).len(), 1);
    eventually("the keeper exited after 2 s idle", || workspace.keepers().is_empty());
    eventually("its connection closed", || sessions(&hosts, 1).is_empty());
    assert!(workspace.socket().is_none());
}
