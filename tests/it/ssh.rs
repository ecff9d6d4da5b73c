//! SSH transport, facts and the apply walker against real OpenSSH servers.
//!
//! Each test starts its own set of sshd hosts with `tests/support/sshhosts.sh` on a
//! loopback /24 of its own (`127.X.N.K`, X from the process id, N per test), in a
//! temporary directory, and stops them when its [`Hosts`] guard is dropped — also
//! when the test fails. Without `/usr/sbin/sshd` the tests fail saying why (see
//! [`crate::support::cannot_run`]).

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use toolkit::apply::{self, ApplyOptions, Outcome, SkipReason};
use toolkit::facts::{self, frr::FrrFact, package::PackageState};
use toolkit::graph;
use toolkit::resource::{Content, Desired, Resource, ResourceId, Target, TargetKind};
use toolkit::transport::session::{SshPool, SshSession};
use toolkit::transport::ssh::{SshOptions, SshTarget};
use toolkit::transport::{Executor, TransportError, WriteOutcome, WriteRequest};

use crate::support::Hosts;

fn options() -> SshOptions {
    SshOptions { agent_socket: None, ..SshOptions::default() }
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| (*word).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_round_trips_hostile_arguments_exactly() {
    let Some(hosts) = Hosts::up(1, 1) else { return };
    let session = SshSession::connect(&hosts.target(1), &options()).await.expect("connect");
    for hostile in ["a'b", "$(rm -rf /)", "`id`", "", "line1\nline2\n", "back\\slash \"q\" *", "ünï ✓", "-n", "A=b"]
    {
        let output = session.exec(&argv(&["printf", "%s", hostile])).await.expect("exec");
        assert!(output.success(), "{output:?}");
        assert_eq!(output.stdout, hostile.as_bytes(), "round trip of {hostile:?}");
    }
    // stdout, stderr and the exit status are kept apart; the connection is reused.
    let output = session.exec(&argv(&["sh", "-c", "echo out; echo err >&2; exit 3"])).await.expect("exec");
    assert_eq!((output.stdout_text().as_str(), output.stderr_tail().as_str()), ("out\n", "err"));
    let error = output.into_success("host1", &argv(&["sh", "-c", "…"])).expect_err("exit 3");
    assert!(error.to_string().contains("exit status 3"), "{error}");
    // Input goes to stdin, then end-of-file.
    let output = session.exec_with_input(&argv(&["sha256sum"]), b"abc").await.expect("exec");
    assert!(output.stdout_text().starts_with("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    // Sessions see their own root, as the script's SetEnv says.
    let output = session.exec(&argv(&["sh", "-c", "printf %s \"$SSHHOSTS_ROOT\""])).await.expect("exec");
    assert_eq!(output.stdout_text(), hosts.root(1).to_str().expect("utf-8"));
    assert!(matches!(session.exec(&argv(&["printf", "a\0b"])).await, Err(TransportError::InvalidArgument { .. })));
}

/// `SHA256:…` of a public key file, as `ssh-keygen -l` prints it.
fn fingerprint_of(public_key: &Path) -> String {
    let output = Command::new("ssh-keygen").arg("-lf").arg(public_key).output().expect("ssh-keygen -l");
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace().nth(1).expect("fingerprint field").to_owned()
}

/// An ssh-agent this test started, killed by its PID on drop.
struct Agent(String);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.0).status();
    }
}

fn keygen(kind: &str, path: &Path) {
    let mut command = Command::new("ssh-keygen");
    command.args(["-q", "-t", kind, "-N", "", "-C", "toolkit-test", "-f"]).arg(path);
    if kind == "rsa" {
        command.args(["-b", "2048"]);
    }
    assert!(command.status().expect("ssh-keygen").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_writes_on_every_host_and_a_failing_check_keeps_the_old_file() {
    let Some(hosts) = Hosts::up(2, 4) else { return };
    let pool = SshPool::new((1..=4).map(|k| hosts.target(k)), options());
    let results = pool.connect_all(8).await;
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|(_, result)| result.is_ok()), "{results:?}");
    let contents = "# toolkit test\nvalue = 'quoted' $(not run)\n".repeat(500);
    for k in 1..=4 {
        let session = pool.session(&format!("host{k}")).await.expect("connected");
        let path = hosts.root(k).join("etc app.conf");
        std::fs::create_dir_all(hosts.root(k)).expect("root");
        let path_text = path.to_str().expect("utf-8");
        let request = WriteRequest {
            path: path_text,
            contents: contents.as_bytes(),
            mode: 0o640,
            owner: Some("root"),
            group: Some("root"),
            check: None,
            secret: false,
            backup: false,
        };
        assert_eq!(session.write_file(&request).await.expect("write"), WriteOutcome::Written);
        assert_eq!(std::fs::read_to_string(&path).expect("read back"), contents);
        let remote = session.exec(&[String::from("cat"), path_text.to_owned()]).await.expect("cat");
        assert_eq!(remote.stdout, contents.as_bytes());
        assert_eq!(session.write_file(&request).await.expect("rewrite"), WriteOutcome::Unchanged);
        let facts = facts::file::probe(session.as_ref(), &[path_text.to_owned()]).await.expect("facts");
        let sha = toolkit::resource::Content::new(contents.clone());
        assert!(facts[0].is_file_with(sha.sha256(), 0o640, "root", "root"), "{facts:?}");

        // A check that rejects the new content: the old file stays, byte for byte.
        let check: Vec<String> = [
            "sh",
            "-c",
            "grep -q '^good' \"$1\" || { echo \"rejected: $(head -c 20 \"$1\")\"; exit 1; }",
            "check",
            "{}",
        ]
        .iter()
        .map(|word| (*word).to_owned())
        .collect();
        let bad = WriteRequest { contents: b"bad new content\n", check: Some(&check), ..request };
        let error = session.write_file(&bad).await.expect_err("check fails");
        let message = error.to_string();
        assert!(matches!(error, TransportError::CheckFailed { .. }), "{message}");
        assert!(message.contains("rejected: bad new content") && message.contains("untouched"), "{message}");
        assert_eq!(std::fs::read_to_string(&path).expect("old file"), contents);
        let secret = WriteRequest { secret: true, ..bad };
        let message = session.write_file(&secret).await.expect_err("check fails").to_string();
        assert!(!message.contains("bad new content"), "a secret leaked into: {message}");
        // No temporary file is left beside it.
        let leftovers: Vec<_> = std::fs::read_dir(hosts.root(k))
            .expect("list")
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().contains(".toolkit-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let good = WriteRequest { contents: b"good\n", ..bad };
        assert_eq!(session.write_file(&good).await.expect("accepted"), WriteOutcome::Written);
        assert_eq!(std::fs::read_to_string(&path).expect("new file"), "good\n");
    }
    pool.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_keys_unknown_accepted_new_and_changed() {
    let Some(hosts) = Hosts::up(3, 2) else { return };
    let presented = fingerprint_of(&hosts.host_key_file(1));

    // Unknown: an empty known_hosts refuses, naming the presented key.
    let empty = hosts.base.join("empty_known_hosts");
    std::fs::write(&empty, "").expect("empty file");
    let target = SshTarget { known_hosts: empty.clone(), ..hosts.target(1) };
    let error = SshSession::connect(&target, &options()).await.expect_err("unknown key");
    let message = error.to_string();
    assert!(matches!(error, TransportError::UnknownHostKey { .. }), "{message}");
    assert!(message.contains(&presented) && message.contains("host1"), "{message}");
    assert_eq!(std::fs::read_to_string(&empty).expect("read"), "", "nothing recorded without accept-new");

    // accept-new records it; a strict connection then succeeds.
    let accepting = SshOptions { accept_new_host_keys: true, ..options() };
    let session = SshSession::connect(&target, &accepting).await.expect("accept-new");
    assert!(session.exec(&[String::from("true")]).await.expect("exec").success());
    let recorded = std::fs::read_to_string(&empty).expect("read");
    assert_eq!(recorded.lines().count(), 1, "{recorded}");
    assert!(recorded.starts_with(&format!("{} ssh-ed25519 ", hosts.address(1))), "{recorded}");
    SshSession::connect(&target, &options()).await.expect("now known");

    // Changed: known_hosts records host2's key for host1's address.
    let wrong = hosts.base.join("wrong_known_hosts");
    let host2_key = std::fs::read_to_string(hosts.host_key_file(2)).expect("key");
    std::fs::write(&wrong, format!("# a comment\n{} {host2_key}", hosts.address(1))).expect("write");
    let target = SshTarget { known_hosts: wrong.clone(), ..hosts.target(1) };
    for options in [options(), accepting] {
        let error = SshSession::connect(&target, &options).await.expect_err("changed key");
        let message = error.to_string();
        assert!(matches!(error, TransportError::ChangedHostKey { line: 2, .. }), "{message}");
        assert!(message.contains(&presented), "presented fingerprint missing: {message}");
        assert!(message.contains(&fingerprint_of(&hosts.host_key_file(2))), "expected fingerprint missing: {message}");
    }
    assert_eq!(std::fs::read_to_string(&wrong).expect("read").lines().count(), 2, "a changed key is never recorded");

    // Hashed entries (ssh-keygen -H) are matched too.
    let hashed = hosts.base.join("hashed_known_hosts");
    std::fs::copy(hosts.known_hosts(), &hashed).expect("copy");
    let hashing = Command::new("ssh-keygen").args(["-q", "-H", "-f"]).arg(&hashed).output().expect("ssh-keygen -H");
    assert!(hashing.status.success());
    assert!(std::fs::read_to_string(&hashed).expect("read").starts_with("|1|"));
    SshSession::connect(&SshTarget { known_hosts: hashed, ..hosts.target(2) }, &options()).await.expect("hashed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_keys_wrong_rsa_and_agent() {
    let Some(hosts) = Hosts::up(4, 1) else { return };
    // A key the server does not know: a clear permission-denied naming user and key.
    let stranger = hosts.base.join("id_stranger");
    keygen("ed25519", &stranger);
    let target = SshTarget { identity_file: Some(stranger.clone()), ..hosts.target(1) };
    let error = SshSession::connect(&target, &options()).await.expect_err("denied");
    let message = error.to_string();
    assert!(matches!(error, TransportError::AuthFailed { .. }), "{message}");
    assert!(
        message.starts_with("permission denied for user `root` on `host1` with key `")
            && message.contains(stranger.to_str().expect("utf-8"))
            && message.contains(&fingerprint_of(&stranger.with_extension("pub"))),
        "{message}"
    );

    // An RSA key the server knows: rsa-sha2 signatures are negotiated.
    let rsa = hosts.base.join("id_rsa");
    keygen("rsa", &rsa);
    let authorized = hosts.base.join("etc/authorized_keys");
    let mut keys = std::fs::read_to_string(&authorized).expect("authorized_keys");
    keys.push_str(&std::fs::read_to_string(rsa.with_extension("pub")).expect("rsa pub"));
    std::fs::write(&authorized, keys).expect("authorize rsa");
    let target = SshTarget { identity_file: Some(rsa), ..hosts.target(1) };
    let session = SshSession::connect(&target, &options()).await.expect("rsa login");
    assert!(session.exec(&[String::from("true")]).await.expect("exec").success());

    // No identity file: the agent's keys are used.
    let socket = hosts.base.join("agent.sock");
    let agent = Command::new("ssh-agent").arg("-a").arg(&socket).arg("-s").output().expect("ssh-agent");
    let agent_output = String::from_utf8_lossy(&agent.stdout).into_owned();
    let agent_pid = agent_output
        .split(|c: char| c == ';' || c.is_whitespace())
        .find_map(|field| field.strip_prefix("SSH_AGENT_PID="))
        .expect("agent pid")
        .to_owned();
    let _agent = Agent(agent_pid);
    let added =
        Command::new("ssh-add").arg(hosts.client_key()).env("SSH_AUTH_SOCK", &socket).output().expect("ssh-add");
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let with_agent = SshOptions { agent_socket: Some(socket), ..options() };
    let target = SshTarget { identity_file: None, ..hosts.target(1) };
    let session = SshSession::connect(&target, &with_agent).await.expect("agent login");
    assert!(session.exec(&[String::from("true")]).await.expect("exec").success());
    // Neither a file nor an agent: said so.
    let error = SshSession::connect(&target, &options()).await.expect_err("no identity");
    assert!(matches!(error, TransportError::NoIdentity { .. }), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_jump_through_a_shared_bastion() {
    let Some(hosts) = Hosts::up(5, 3) else { return };
    let bastion = Box::new(hosts.target(1));
    let behind = |k: usize| SshTarget { proxy_jump: Some(bastion.clone()), ..hosts.target(k) };
    // host1 is a target of its own too: it shares the bastion's connection.
    let pool = SshPool::new([hosts.target(1), behind(2), behind(3)], options());
    for k in [1, 2, 3] {
        let session = pool.session(&format!("host{k}")).await.expect("via bastion");
        let output = session
            .exec(&[String::from("sh"), String::from("-c"), String::from("printf %s \"$SSHHOSTS_HOST\"")])
            .await
            .expect("exec");
        assert_eq!(output.stdout_text(), format!("host{k}"));
    }
    // One connection to the bastion carries all three.
    assert_eq!(hosts.connections(1), 1);
    assert_eq!(pool.session("host2").await.expect("cached").target().host, "host2");
    // The sessions ride on the bastion: when it goes down, so do they. The pool
    // dials a connection it has seen close again, so whether the failure comes from
    // the session or its command depends on when the close is noticed.
    hosts.kill(1);
    let exec = async {
        let session = pool.session("host2").await.map_err(|error| error.to_string())?;
        session.exec(&[String::from("true")]).await.map_err(|error| error.to_string())
    };
    let result = tokio::time::timeout(Duration::from_secs(20), exec).await;
    assert!(matches!(result, Ok(Err(_)) | Err(_)), "exec still worked after the bastion died: {result:?}");
    // A bastion that is down is named in the error.
    let error = SshSession::connect(&behind(3), &options()).await.expect_err("bastion down");
    let message = error.to_string();
    assert!(message.contains("via bastion `host1`") && message.contains("cannot connect"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_and_timeouts_over_ssh() {
    let Some(hosts) = Hosts::up(6, 1) else { return };
    let quick = SshOptions { command_timeout: Duration::from_secs(2), ..options() };
    let session = SshSession::connect(&hosts.target(1), &quick).await.expect("connect");
    let os = facts::os::probe(&session).await.expect("os facts");
    assert!(!os.kernel.is_empty() && !os.id.is_empty(), "{os:?}");
    let packages = facts::package::probe(&session, &["openssh-server".to_owned(), "no-such-package-xyz".to_owned()])
        .await
        .expect("package facts");
    assert!(matches!(packages.packages["openssh-server"], PackageState::Installed { .. }), "{packages:?}");
    assert_eq!(packages.packages["no-such-package-xyz"], PackageState::NotInstalled);
    let services = facts::service::probe(&session, &["ssh".to_owned()]).await.expect("service facts");
    assert_eq!(services.len(), 1);
    let frr = facts::frr::probe(&session, Some("toolkit-no-such-instance")).await.expect("frr facts");
    assert!(matches!(frr, FrrFact::NotInstalled | FrrFact::NotRunning { .. }), "{frr:?}");

    let error = session.exec(&[String::from("sleep"), String::from("30")]).await.expect_err("timeout");
    assert!(matches!(error, TransportError::CommandTimeout { seconds: 2, .. }), "{error}");
    // The connection survives a timed-out command.
    assert!(session.exec(&[String::from("true")]).await.expect("exec").success());

    hosts.kill(1);
    let error = SshSession::connect(&hosts.target(1), &options()).await.expect_err("refused");
    assert!(matches!(error, TransportError::Connect { .. }), "{error}");
    assert!(error.to_string().contains(&format!("cannot connect to `host1` at `{}:22`", hosts.address(1))), "{error}");
}

fn node(k: usize) -> Target {
    Target { name: format!("host{k}").into(), kind: TargetKind::Node }
}

/// Per host: a directory, three files in it (about 2 KB, 20 KB, 200 KB), and a
/// command that hashes them, guarded by the file it creates.
fn workload(hosts: &Hosts, count: usize) -> Vec<Resource> {
    let mut resources = Vec::new();
    for k in 1..=count {
        let directory = hosts.root(k).join("srv/app").to_str().expect("utf-8").to_owned();
        let dir = Resource::new(
            node(k),
            &directory,
            Desired::Directory { path: directory.clone(), mode: 0o750, owner: "root".to_owned() },
        );
        let dir_id = dir.id.clone();
        resources.push(dir);
        let mut files = Vec::new();
        for (name, size) in [("small.conf", 2_000), ("medium.conf", 20_000), ("large.conf", 200_000)] {
            let path = format!("{directory}/{name}");
            let line = format!("host{k} {name} line\n");
            let text = line.repeat(size / line.len());
            let file = Resource::new(
                node(k),
                &path,
                Desired::File {
                    path: path.clone(),
                    content: Content::new(text),
                    mode: 0o644,
                    owner: "root".to_owned(),
                    group: "root".to_owned(),
                    secret: false,
                    check: Some(vec!["test".to_owned(), "-s".to_owned(), "{}".to_owned()]),
                },
            )
            .after([dir_id.clone()]);
            files.push(file.id.clone());
            resources.push(file);
        }
        let sums = format!("{directory}/sums");
        resources.push(
            Resource::new(
                node(k),
                "sums",
                Desired::Command {
                    argv: vec![
                        "sh".to_owned(),
                        "-c".to_owned(),
                        "cd \"$1\" && sha256sum small.conf medium.conf large.conf > sums".to_owned(),
                        "sums".to_owned(),
                        directory.clone(),
                    ],
                    creates: Some(sums),
                    unless: None,
                    description: "hash the files".to_owned(),
                    undo: None,
                    reads: None,
                },
            )
            .after(files),
        );
    }
    resources
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walker_applies_then_finds_nothing_to_change() {
    let Some(hosts) = Hosts::up(7, 4) else { return };
    let graph = graph::build(workload(&hosts, 4)).expect("graph");
    let pool = SshPool::new((1..=4).map(|k| hosts.target(k)), options());
    let everything: HashSet<usize> = (0..graph.resources.len()).collect();
    let report = apply::apply(&graph, &everything, &pool, &ApplyOptions::default()).await;
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(report.counts().changed, 4 * 5);
    for k in 1..=4 {
        let sums = std::fs::read_to_string(hosts.root(k).join("srv/app/sums")).expect("command ran");
        assert_eq!(sums.lines().count(), 3);
        let large = std::fs::read_to_string(hosts.root(k).join("srv/app/large.conf")).expect("large file");
        assert!(large.len() > 190_000 && large.starts_with(&format!("host{k} large.conf")));
    }

    // Second run: facts say every file and directory is as desired.
    let mut changes = HashSet::new();
    for k in 1..=4 {
        let session = pool.session(&format!("host{k}")).await.expect("session");
        let resources: Vec<&Resource> =
            graph.resources.iter().filter(|resource| resource.target() == format!("host{k}")).collect();
        let observed = facts::gather(session.as_ref(), &resources).await.expect("facts");
        for resource in resources {
            let index = graph.resources.iter().position(|r| r.id == resource.id).expect("index");
            let as_desired = match &*resource.desired {
                Desired::File { path, content, mode, owner, group, .. } => {
                    observed.files[path].is_file_with(content.sha256(), *mode, owner, group)
                }
                Desired::Directory { path, mode, owner } => observed.files[path].is_directory_with(*mode, owner),
                // A guarded command is always handed to apply; its guard decides.
                _ => false,
            };
            if !as_desired {
                changes.insert(index);
            }
        }
    }
    let kinds: HashSet<&str> = changes.iter().map(|&index| graph.resources[index].desired.kind()).collect();
    assert_eq!(kinds, HashSet::from(["command"]), "files or directories planned again");
    let report = apply::apply(&graph, &changes, &pool, &ApplyOptions::default()).await;
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(report.counts().changed, 0, "{report:#?}");
    pool.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_host_fails_alone_and_its_dependents_are_skipped() {
    let Some(hosts) = Hosts::up(8, 4) else { return };
    let mut resources = workload(&hosts, 4);
    // host1's command also waits for host4's directory.
    let host4_dir = ResourceId::new("host4", "dir", hosts.root(4).join("srv/app").to_str().expect("utf-8"));
    let host1_command = ResourceId::new("host1", "command", "sums");
    for resource in &mut resources {
        if resource.id == host1_command {
            resource.depends_on.push(host4_dir.clone());
        }
    }
    let graph = graph::build(resources).expect("graph");
    hosts.kill(4);
    let pool = SshPool::new((1..=4).map(|k| hosts.target(k)), options());
    let everything: HashSet<usize> = (0..graph.resources.len()).collect();
    let options = ApplyOptions { parallel: 3, ..ApplyOptions::default() };
    let report = apply::apply(&graph, &everything, &pool, &options).await;
    for outcome in &report.outcomes {
        match (outcome.target.as_str(), &outcome.outcome) {
            ("host4", Outcome::Failed { error }) => {
                assert!(error.contains("cannot connect to `host4`"), "{error}");
            }
            ("host4", other) => {
                assert!(matches!(other, Outcome::Skipped { reason: SkipReason::Upstream { .. } }), "{other:?}");
            }
            ("host1", _) if outcome.id == host1_command => {
                assert_eq!(
                    outcome.outcome,
                    Outcome::Skipped { reason: SkipReason::Upstream { id: host4_dir.clone() } }
                );
            }
            (_, other) => assert_eq!(other, &Outcome::Changed, "{}", outcome.id),
        }
    }
    assert_eq!(report.failed_targets().into_iter().collect::<Vec<_>>(), ["host4"]);
    assert!(!hosts.root(1).join("srv/app/sums").exists(), "the skipped command ran");
    assert!(hosts.root(2).join("srv/app/sums").exists());
}
