//! SSH transport, facts and the apply walker against real OpenSSH servers.
//!
//! Each test starts its own set of sshd hosts with `tests/support/sshhosts.sh` on a
//! loopback /24 of its own (`127.X.N.K`, X from the process id, N per test), in a
//! temporary directory, and stops them when its [`Hosts`] guard is dropped — also
//! when the test fails. Without `/usr/sbin/sshd` the tests print why and pass,
//! unless `TOOLKIT_REQUIRE_TOOLS` is set (CI), where a missing sshd is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolkit::transport::ssh::{SshOptions, SshSession, SshTarget};
use toolkit::transport::{Executor, TransportError};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/sshhosts.sh");

/// A set of running sshd hosts; `down` on drop.
struct Hosts {
    base: PathBuf,
    prefix: String,
    _directory: tempfile::TempDir,
}

impl Hosts {
    /// Starts `count` hosts for test number `test` (unique per test in this file).
    /// `None` when sshd is absent and tools are not required.
    fn up(test: u8, count: usize) -> Option<Self> {
        if !Path::new("/usr/sbin/sshd").exists() || !Path::new("/usr/bin/ssh-keygen").exists() {
            assert!(
                std::env::var_os("TOOLKIT_REQUIRE_TOOLS").is_none(),
                "sshd or ssh-keygen is missing and TOOLKIT_REQUIRE_TOOLS is set: apt-get install openssh-server openssh-client"
            );
            eprintln!(
                "skipped: /usr/sbin/sshd or ssh-keygen not installed (apt-get install openssh-server openssh-client)"
            );
            return None;
        }
        let directory = tempfile::Builder::new().prefix("toolkit-sshhosts-").tempdir().expect("tempdir");
        let prefix = format!("127.{}.{test}", 20 + std::process::id() % 200);
        let hosts = Self { base: directory.path().to_owned(), prefix, _directory: directory };
        let status = hosts.script().args(["up", &count.to_string()]).status().expect("run sshhosts.sh");
        assert!(status.success(), "sshhosts.sh up {count} failed");
        Some(hosts)
    }

    fn script(&self) -> Command {
        let mut command = Command::new("bash");
        command.arg(SCRIPT).env("SSHHOSTS_DIR", &self.base).env("SSHHOSTS_PREFIX", &self.prefix);
        command
    }

    fn address(&self, k: usize) -> String {
        format!("{}.{k}", self.prefix)
    }

    /// The per-host "filesystem" root.
    fn root(&self, k: usize) -> PathBuf {
        self.base.join(format!("root/host{k}"))
    }

    fn known_hosts(&self) -> PathBuf {
        self.base.join("known_hosts")
    }

    fn client_key(&self) -> PathBuf {
        self.base.join("id_ed25519")
    }

    fn host_public_key(&self, k: usize) -> String {
        std::fs::read_to_string(self.base.join(format!("etc/host{k}/ssh_host_ed25519_key.pub"))).expect("host key")
    }

    fn target(&self, k: usize) -> SshTarget {
        SshTarget {
            host: format!("host{k}"),
            address: self.address(k),
            port: 22,
            user: "root".to_owned(),
            identity_file: Some(self.client_key()),
            known_hosts: self.known_hosts(),
            proxy_jump: None,
            become_root: false,
        }
    }

    /// Stops host `k`'s sshd (a PID this test started).
    fn kill(&self, k: usize) {
        let pid = std::fs::read_to_string(self.base.join(format!("run/host{k}.pid"))).expect("pid file");
        let status = Command::new("kill").arg(pid.trim()).status().expect("kill");
        assert!(status.success());
        // Wait until the port is closed.
        for _ in 0..50 {
            if std::net::TcpStream::connect((self.address(k).as_str(), 22)).is_err() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("host{k} still accepts connections");
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = self.script().arg("down").status();
    }
}

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
    drop(hosts.host_public_key(1));
}
