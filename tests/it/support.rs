//! Shared test support: real sshd hosts on loopback for SSH, deploy and push tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolkit::transport::ssh::SshTarget;

/// A test cannot run because `reason` (a tool, the test venv, Docker) is missing: it
/// fails, naming what and how to get it, so that "passed" always means "ran". A
/// developer who wants the rest of the suite without it sets
/// `TOOLKIT_SKIP_MISSING_TOOLS=1`: the test then says "skipped" on stderr and the
/// caller returns. (`TOOLKIT_REQUIRE_TOOLS`, which CI sets, is now the default.)
pub fn cannot_run(reason: &str) {
    if std::env::var_os("TOOLKIT_SKIP_MISSING_TOOLS").is_some() {
        eprintln!("skipped: {reason}");
        return;
    }
    panic!(
        "{reason}\n(`.ci/setup` installs what the tests need; TOOLKIT_SKIP_MISSING_TOOLS=1 skips such tests instead)"
    );
}

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/sshhosts.sh");

/// N real sshd hosts (tests/support/sshhosts.sh), stopped on drop.
pub struct Hosts {
    pub base: PathBuf,
    pub prefix: String,
    _directory: tempfile::TempDir,
}

impl Hosts {
    /// Starts `count` hosts for test number `test` (unique per test in this file).
    /// `None` when sshd is absent and the developer skips missing tools ([`cannot_run`]).
    pub fn up(test: u8, count: usize) -> Option<Self> {
        if !Path::new("/usr/sbin/sshd").exists() || !Path::new("/usr/bin/ssh-keygen").exists() {
            cannot_run("/usr/sbin/sshd or ssh-keygen is not installed: apt-get install openssh-server openssh-client");
            return None;
        }
        let directory = tempfile::Builder::new().prefix("toolkit-sshhosts-").tempdir().expect("tempdir");
        let prefix = format!("127.{}.{test}", 20 + std::process::id() % 200);
        let hosts = Self { base: directory.path().to_owned(), prefix, _directory: directory };
        let status = hosts.script().args(["up", &count.to_string()]).status().expect("run sshhosts.sh");
        assert!(status.success(), "sshhosts.sh up {count} failed");
        Some(hosts)
    }

    pub fn script(&self) -> Command {
        let mut command = Command::new("bash");
        command.arg(SCRIPT).env("SSHHOSTS_DIR", &self.base).env("SSHHOSTS_PREFIX", &self.prefix);
        command
    }

    pub fn address(&self, k: usize) -> String {
        format!("{}.{k}", self.prefix)
    }

    /// The per-host "filesystem" root.
    pub fn root(&self, k: usize) -> PathBuf {
        self.base.join(format!("root/host{k}"))
    }

    pub fn known_hosts(&self) -> PathBuf {
        self.base.join("known_hosts")
    }

    pub fn client_key(&self) -> PathBuf {
        self.base.join("id_ed25519")
    }

    pub fn host_key_file(&self, k: usize) -> PathBuf {
        self.base.join(format!("etc/host{k}/ssh_host_ed25519_key.pub"))
    }

    /// The PID of host `k`'s listening sshd.
    pub fn pid(&self, k: usize) -> String {
        std::fs::read_to_string(self.base.join(format!("run/host{k}.pid"))).expect("pid file").trim().to_owned()
    }

    /// How many connections host `k`'s sshd serves (one child process each).
    pub fn connections(&self, k: usize) -> usize {
        let output = Command::new("ps").args(["-o", "pid=", "--ppid", &self.pid(k)]).output().expect("ps");
        String::from_utf8_lossy(&output.stdout).lines().count()
    }

    pub fn target(&self, k: usize) -> SshTarget {
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

    /// Starts every host of 1..=`count` that is not running (after [`Hosts::kill`]).
    pub fn up_again(&self, count: usize) {
        let status = self.script().args(["up", &count.to_string()]).status().expect("run sshhosts.sh");
        assert!(status.success(), "sshhosts.sh up {count} failed");
    }

    /// Stops host `k`'s sshd (a PID this test started).
    pub fn kill(&self, k: usize) {
        // Its per-connection children too, as a host going down would.
        let children = Command::new("ps").args(["-o", "pid=", "--ppid", &self.pid(k)]).output().expect("ps");
        for child in String::from_utf8_lossy(&children.stdout).split_whitespace() {
            let _ = Command::new("kill").arg(child).status();
        }
        let status = Command::new("kill").arg(self.pid(k)).status().expect("kill");
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
