//! Transport: the only way to a remote target.
//!
//! Stage: observe and apply. Input: an argv or a file to write on one host. Output:
//! an [`Output`] (exit status, stdout, stderr) or a [`WriteOutcome`].
//!
//! [`Executor`] is what facts and apply run on: [`session::SshSession`] implements it over
//! one SSH connection per host; unit tests implement it with a scripted fake. Every
//! command goes through [`quote::command_line`], so no value reaches a remote shell
//! unquoted.

pub mod batch;
pub mod known_hosts;
pub mod mux;
pub mod quote;
pub mod session;
pub mod ssh;
pub mod targets;
pub mod write;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;

pub use write::{WriteOutcome, WriteRequest};

/// Hands out one [`Executor`] per host: the walker asks for a host when it first
/// has work there. Failures are shared (`Arc`) because one failed bastion or host
/// answers many requests.
pub trait Connector: Sync {
    /// What a connection is.
    type Executor: Executor + 'static;

    /// The executor for `host`, connecting on first use.
    fn connect(
        &self,
        host: &str,
    ) -> impl Future<Output = Result<std::sync::Arc<Self::Executor>, std::sync::Arc<TransportError>>> + Send;

    /// Drops what is cached for `host` — its connection, or the failure of its last
    /// attempt — so the next [`Connector::connect`] dials it again. A reboot needs
    /// this: the old connection dies with the old boot, and a host that refused while
    /// down must be tried again. Executors already handed out keep working (or
    /// failing) as before. Connectors that cache nothing have nothing to drop.
    fn forget(&self, host: &str) {
        let _ = host;
    }
}

/// A borrowed connector connects as its owner does.
impl<C: Connector> Connector for &C {
    type Executor = C::Executor;

    fn connect(
        &self,
        host: &str,
    ) -> impl Future<Output = Result<std::sync::Arc<Self::Executor>, std::sync::Arc<TransportError>>> + Send {
        (**self).connect(host)
    }

    fn forget(&self, host: &str) {
        (**self).forget(host);
    }
}

/// Everything that can go wrong between this program and a remote host.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The TCP connection failed (refused, unreachable, reset).
    #[error("cannot connect to `{host}` at `{address}`: {source}")]
    Connect {
        /// Target name.
        host: String,
        /// `address:port` dialled.
        address: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// TCP connect, key exchange and authentication took longer than the limit.
    #[error("connecting to `{host}` at `{address}` timed out after {seconds} s")]
    ConnectTimeout {
        /// Target name.
        host: String,
        /// `address:port` dialled.
        address: String,
        /// The limit.
        seconds: u64,
    },
    /// The host presented a key that the known_hosts file does not have.
    #[error(
        "host key of `{host}` is not known: it presented {fingerprint}, which `{known_hosts}` does not list; \
         verify the fingerprint out of band, then connect once with accept-new to record it"
    )]
    UnknownHostKey {
        /// Target name.
        host: String,
        /// `SHA256:…` of the presented key.
        fingerprint: String,
        /// The file that was searched.
        known_hosts: PathBuf,
    },
    /// The host presented a key other than the one recorded: refused, always.
    #[error(
        "host key of `{host}` has CHANGED: `{known_hosts}` line {line} records {expected_fingerprint}, \
         the host presented {presented_fingerprint}; someone may be intercepting the connection — if the \
         host was reinstalled, remove the old key with `ssh-keygen -R` and connect again"
    )]
    ChangedHostKey {
        /// Target name.
        host: String,
        /// `SHA256:…` of the recorded key.
        expected_fingerprint: String,
        /// `SHA256:…` of the presented key.
        presented_fingerprint: String,
        /// The file that records the old key.
        known_hosts: PathBuf,
        /// Its line.
        line: usize,
    },
    /// The presented key is marked `@revoked`.
    #[error("host key {fingerprint} of `{host}` is marked @revoked in `{known_hosts}` line {line}")]
    RevokedHostKey {
        /// Target name.
        host: String,
        /// `SHA256:…` of the presented key.
        fingerprint: String,
        /// The file.
        known_hosts: PathBuf,
        /// Its line.
        line: usize,
    },
    /// The server refused every key offered.
    #[error("permission denied for user `{user}` on `{host}` with {identity}")]
    AuthFailed {
        /// Target name.
        host: String,
        /// Remote user.
        user: String,
        /// Which key(s) were offered, with fingerprints.
        identity: String,
    },
    /// The private key file could not be used.
    #[error("cannot use private key `{path}`: {reason}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The ssh-agent could not be reached or failed to sign.
    #[error("ssh-agent at `{socket}`: {reason}")]
    Agent {
        /// `SSH_AUTH_SOCK`.
        socket: PathBuf,
        /// Why.
        reason: String,
    },
    /// Neither an identity file nor an agent is available.
    #[error("no key to log in to `{host}`: no identity file is set and no ssh-agent (SSH_AUTH_SOCK) is available")]
    NoIdentity {
        /// Target name.
        host: String,
    },
    /// The SSH protocol failed after the TCP connection was made.
    #[error("SSH with `{host}` failed: {source}")]
    Protocol {
        /// Target name.
        host: String,
        /// The russh error.
        #[source]
        source: russh::Error,
    },
    /// The bastion of a ProxyJump could not be used.
    #[error("`{host}` via bastion `{bastion}`: {source}")]
    ProxyJump {
        /// Target name.
        host: String,
        /// Bastion name.
        bastion: String,
        /// What went wrong on the bastion (shared by every host behind it).
        #[source]
        source: std::sync::Arc<TransportError>,
    },
    /// The host name is not among the known targets.
    #[error("no SSH target named `{host}`")]
    UnknownTarget {
        /// The name asked for.
        host: String,
    },
    /// A command ran longer than the per-command limit.
    #[error("`{command}` on `{host}` timed out after {seconds} s")]
    CommandTimeout {
        /// Target name.
        host: String,
        /// Short form of the command.
        command: String,
        /// The limit.
        seconds: u64,
    },
    /// A command exited unsuccessfully.
    #[error("`{command}` on `{host}` failed ({status}): {stderr}")]
    CommandFailed {
        /// Target name.
        host: String,
        /// Short form of the command.
        command: String,
        /// Exit status or signal.
        status: ExitStatus,
        /// Last lines of stderr.
        stderr: String,
    },
    /// A file's check command rejected the new content; the old file is untouched.
    #[error("`{command}` rejected the new `{path}` on `{host}`; the old file is untouched: {output}")]
    CheckFailed {
        /// Target name.
        host: String,
        /// The file.
        path: String,
        /// The check command.
        command: String,
        /// Its output (withheld for secret files).
        output: String,
    },
    /// The platform that runs commands on `host` for toolkit (a Kubernetes Job) failed.
    #[error("`{host}`: {reason}")]
    Platform {
        /// Target name.
        host: String,
        /// What failed, naming the object involved.
        reason: String,
    },
    /// An argument cannot be sent (NUL byte, empty argv, relative path).
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// Why.
        reason: String,
    },
    /// The background process that keeps connections failed, or reported what
    /// failed on its side (the message is its error's, as a direct connection would
    /// say it). `host: None`: the process itself could not be reached or started.
    #[error("{message}")]
    Mux {
        /// Target name, when the failure is about one host.
        host: Option<String>,
        /// What went wrong.
        message: String,
    },
    /// The known_hosts file could not be read or updated.
    #[error("cannot read or update known_hosts `{path}`: {source}")]
    KnownHosts {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// How a remote command ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(u32),
    /// A signal killed it (`TERM`, `KILL`…).
    Signal(String),
    /// The channel closed without an exit status.
    Unknown,
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code(code) => write!(formatter, "exit status {code}"),
            Self::Signal(signal) => write!(formatter, "killed by signal {signal}"),
            Self::Unknown => formatter.write_str("no exit status"),
        }
    }
}

/// What a remote command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code or signal.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

impl Output {
    /// Whether it exited with 0.
    #[must_use]
    pub fn success(&self) -> bool {
        self.status == ExitStatus::Code(0)
    }

    /// Standard output as text (invalid UTF-8 replaced).
    #[must_use]
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The last lines of stderr, short enough for an error message.
    #[must_use]
    pub fn stderr_tail(&self) -> String {
        tail(&String::from_utf8_lossy(&self.stderr))
    }

    /// `self` when it succeeded, else [`TransportError::CommandFailed`].
    ///
    /// # Errors
    /// When the exit status is not 0.
    pub fn into_success(self, host: &str, argv: &[String]) -> Result<Self, TransportError> {
        if self.success() {
            Ok(self)
        } else {
            Err(TransportError::CommandFailed {
                host: host.to_owned(),
                command: summarize(argv),
                stderr: self.stderr_tail(),
                status: self.status,
            })
        }
    }
}

/// Runs commands and writes files on one host.
///
/// Implemented by [`session::SshSession`] (one connection, one channel per call) and,
/// in unit tests, by scripted fakes. Futures are `Send` so hosts can be driven
/// from any task.
pub trait Executor: Send + Sync {
    /// The target name, for messages.
    fn host(&self) -> &str;

    /// Runs `argv` (quoted, never concatenated) and collects its output. A non-zero
    /// exit is an `Ok` [`Output`]; see [`Output::into_success`].
    fn exec(&self, argv: &[String]) -> impl Future<Output = Result<Output, TransportError>> + Send;

    /// Runs `argv` with `input` on its standard input, then end-of-file.
    fn exec_with_input(
        &self,
        argv: &[String],
        input: &[u8],
    ) -> impl Future<Output = Result<Output, TransportError>> + Send;

    /// Runs `argv` with `parts` on its standard input, one after another, then
    /// end-of-file. The SSH transport streams each part from the caller's bytes, so
    /// files sent together are never copied into one buffer; the default joins them.
    fn exec_with_parts(
        &self,
        argv: &[String],
        parts: &[&[u8]],
    ) -> impl Future<Output = Result<Output, TransportError>> + Send {
        async move { self.exec_with_input(argv, &parts.concat()).await }
    }

    /// Writes a file atomically (temp file, fsync, check, rename); see [`write`].
    fn write_file(
        &self,
        request: &WriteRequest<'_>,
    ) -> impl Future<Output = Result<WriteOutcome, TransportError>> + Send {
        async move {
            let argv = write::script_argv(request)?;
            let output = self.exec_with_input(&argv, request.contents).await?;
            write::interpret(self.host(), request, &output)
        }
    }
}

pub use crate::resource::shell::summarize;

/// The last 20 lines, at most 2,000 bytes, of `text`.
#[must_use]
pub fn tail(text: &str) -> String {
    let text = text.trim_end();
    let start = text.lines().rev().take(20).last().map_or(0, |line| line.as_ptr() as usize - text.as_ptr() as usize);
    let mut tail = &text[start..];
    if tail.len() > 2000 {
        let mut cut = tail.len() - 2000;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = &tail[cut..];
    }
    tail.to_owned()
}

/// 16 hex digits, unpredictable enough for temporary file names.
pub(crate) fn random_suffix() -> String {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
    // RandomState is seeded from the OS's random source.
    let hash = std::hash::RandomState::new().hash_one((count, now, std::process::id()));
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let text = (1..=30).map(|n| format!("line {n}")).collect::<Vec<_>>().join("\n");
        let tail = tail(&text);
        assert!(tail.starts_with("line 11\n"), "{tail}");
        assert!(tail.ends_with("line 30"), "{tail}");
        assert_eq!(super::tail(""), "");
        assert_eq!(super::tail("one"), "one");
    }

    #[test]
    fn summarize_abbreviates_scripts() {
        let argv = vec!["sh".to_owned(), "-c".to_owned(), "set -e\necho hi".to_owned(), "a b".to_owned()];
        assert_eq!(summarize(&argv), "sh -c <14 bytes> 'a b'");
    }

    #[test]
    fn random_suffixes_differ() {
        assert_ne!(random_suffix(), random_suffix());
        assert_eq!(random_suffix().len(), 16);
    }
}
