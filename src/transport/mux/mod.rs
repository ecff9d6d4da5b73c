//! Connections kept across runs, as OpenSSH's ControlMaster/ControlPersist keeps
//! them for Ansible: a small background process (`toolkit ssh-mux`) holds the
//! authenticated SSH connections; each `toolkit` run sends it its commands over a
//! unix socket in the user's runtime directory, and the next run finds the
//! connections open instead of paying a key exchange per host.
//!
//! Stage: observe and apply. Input: a target and a command line (with its standard
//! input streamed). Output: the command's [`Output`], or the [`TransportError`] the
//! background process met, by its message.
//!
//! Trust is kept as a direct connection keeps it: the background process connects
//! with the run's own target and options (known_hosts, accept-new, identity file or
//! agent), and a kept connection serves a new run only while its host key is still
//! listed in that run's known_hosts. The socket's directory is the user's own
//! (mode 0700), the socket is 0600, and the process serves only its own user (the
//! peer's uid is checked). Its argv holds the socket path and the idle time, no
//! secret; file contents pass through without being logged. It exits after
//! [`Persist::idle`] without a request, when `toolkit disconnect` asks, or when its
//! socket is removed. One process per user runs at a time (a lock file).

mod server;
mod wire;

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

pub use server::serve;
use wire::{Reply, Request};

pub use super::ssh::Persist;
use super::ssh::{CommandLine, SshOptions, SshTarget};
use super::{Output, TransportError};

/// 60 s, Ansible's ControlPersist: long enough for plan-then-deploy or
/// deploy-then-validate, short enough that authenticated sessions do not outlive the
/// work. A kept connection whose host went away costs a run at most a few seconds
/// (see `server`), so keeping them is safe as the default; `--ssh-persist 0` turns
/// it off.
pub const DEFAULT_IDLE: Duration = Duration::from_mins(1);

/// `$XDG_RUNTIME_DIR/toolkit/ssh-BUILD.sock`, else `/tmp/toolkit-UID/ssh-BUILD.sock`,
/// where BUILD names the `toolkit` executable `program` (its path, size and time):
/// a run is served only by a keeper of its own build, so an upgraded toolkit never
/// speaks to the keeper the old one left running. The directory is created 0700
/// and must belong to this user and be closed to others.
///
/// # Errors
/// When the directory cannot be made, or is another user's or open to others.
pub fn default_socket(program: &Path) -> std::io::Result<PathBuf> {
    Ok(socket_directory()?.join(format!("ssh-{}.sock", build(program))))
}

/// The sockets of every keeper in this user's directory, whatever build started it.
///
/// # Errors
/// As [`default_socket`], or when the directory cannot be listed.
pub fn all_sockets() -> std::io::Result<Vec<PathBuf>> {
    let mut sockets: Vec<PathBuf> = std::fs::read_dir(socket_directory()?)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name().is_some_and(|name| {
                let name = name.to_string_lossy();
                name.starts_with("ssh") && name.ends_with(".sock")
            })
        })
        .collect();
    sockets.sort();
    Ok(sockets)
}

fn socket_directory() -> std::io::Result<PathBuf> {
    let uid = std::fs::metadata("/proc/self")?.uid();
    let directory = match std::env::var_os("XDG_RUNTIME_DIR").filter(|value| !value.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("toolkit"),
        None => std::env::temp_dir().join(format!("toolkit-{uid}")),
    };
    private_directory(&directory, uid)?;
    Ok(directory)
}

/// 16 hex digits naming one build of `program`. Only runs of the same binary
/// compare them, so the standard library's hasher is stable enough.
fn build(program: &Path) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::hash::DefaultHasher::new();
    program.hash(&mut hasher);
    if let Ok(metadata) = std::fs::metadata(program) {
        (metadata.len(), metadata.mtime(), metadata.mtime_nsec(), metadata.ino()).hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// Creates `directory` 0700 if missing; refuses one that is not this user's own.
fn private_directory(directory: &Path, uid: u32) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(directory) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let metadata = std::fs::symlink_metadata(directory)?;
    if !metadata.is_dir() || metadata.uid() != uid || metadata.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "`{}` must be a directory of uid {uid} with mode 0700",
            directory.display()
        )));
    }
    Ok(())
}

/// The run's side: sends requests to the background process, starting it when
/// none answers.
#[derive(Debug)]
pub struct Client {
    persist: Persist,
    options: SshOptions,
    /// Serialises starting the process within this run.
    starting: tokio::sync::Mutex<()>,
}

impl Client {
    /// A client for the process at `persist.socket`, sending `options` along with
    /// every target.
    #[must_use]
    pub fn new(persist: Persist, options: SshOptions) -> Self {
        Self { persist, options, starting: tokio::sync::Mutex::new(()) }
    }

    /// Makes sure the background process holds a connection to `target` that is
    /// still trusted, connecting (and checking the host key, authenticating) now
    /// if it has none.
    ///
    /// # Errors
    /// The connection error, or [`TransportError::Mux`] with `host: None` when no
    /// background process can be reached (the caller then connects itself).
    pub async fn connect(&self, target: &SshTarget) -> Result<(), TransportError> {
        let mut stream = self.stream().await?;
        let request = Request::Connect { target: in_keeper(target), options: self.options.clone(), idle: self.idle() };
        wire::send(&mut stream, &request).await.map_err(|error| self.lost(&target.host, &error))?;
        match wire::receive(&mut stream).await.map_err(|error| self.lost(&target.host, &error))? {
            Reply::Connected => Ok(()),
            Reply::Failed { message } => Err(TransportError::Mux { host: Some(target.host.clone()), message }),
            other => Err(Self::unexpected(&target.host, &other)),
        }
    }

    /// Runs `command` on `target` with `input` on its standard input.
    ///
    /// # Errors
    /// As a direct connection's `exec`, by message.
    pub(crate) async fn exec(
        &self,
        target: &SshTarget,
        command: CommandLine,
        input: &[&[u8]],
    ) -> Result<Output, TransportError> {
        let stream = self.stream().await.map_err(|error| match error {
            TransportError::Mux { message, .. } => TransportError::Mux { host: Some(target.host.clone()), message },
            other => other,
        })?;
        let (mut reader, mut writer) = stream.into_split();
        let request =
            Request::Exec { target: in_keeper(target), options: self.options.clone(), idle: self.idle(), command };
        let send = async {
            wire::send(&mut writer, &request).await?;
            for part in input {
                writer.write_all(part).await?;
            }
            // End of the input: the remote command sees end-of-file.
            writer.shutdown().await
        };
        let receive = async {
            let reply = wire::receive(&mut reader).await?;
            let Reply::Output { status, stdout, stderr } = reply else { return Ok(Err(reply)) };
            let stdout = read_exactly(&mut reader, stdout).await?;
            let stderr = read_exactly(&mut reader, stderr).await?;
            Ok::<_, std::io::Error>(Ok(Output { status, stdout, stderr }))
        };
        let (input_sent, reply) = tokio::join!(send, receive);
        match reply.map_err(|error| self.lost(&target.host, &error))? {
            Ok(output) => Ok(output),
            Err(Reply::Failed { message }) => Err(TransportError::Mux { host: Some(target.host.clone()), message }),
            // The process answered before reading all input only with a failure.
            Err(other) => Err(input_sent
                .map_or_else(|error| self.lost(&target.host, &error), |()| Self::unexpected(&target.host, &other))),
        }
    }

    /// Asks the background process to drop its connection to `target` (a host
    /// that reboots); the next [`Client::connect`] dials it again.
    pub fn forget(&self, target: &SshTarget) {
        let socket = self.persist.socket.clone();
        let request = Request::Forget { target: in_keeper(target) };
        // Best effort and without waiting: a process that is gone holds nothing.
        tokio::spawn(async move {
            if let Ok(mut stream) = UnixStream::connect(&socket).await {
                let _ = wire::send(&mut stream, &request).await;
                let _ = wire::receive::<_, Reply>(&mut stream).await;
            }
        });
    }

    fn idle(&self) -> u64 {
        self.persist.idle.as_secs()
    }

    /// A stream to the background process, starting it if none answers.
    async fn stream(&self) -> Result<UnixStream, TransportError> {
        if let Ok(stream) = UnixStream::connect(&self.persist.socket).await {
            return Ok(stream);
        }
        let _starting = self.starting.lock().await;
        if let Ok(stream) = UnixStream::connect(&self.persist.socket).await {
            return Ok(stream);
        }
        self.start().map_err(|error| TransportError::Mux {
            host: None,
            message: format!("cannot start `{} ssh-mux`: {error}", self.persist.program.display()),
        })?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match UnixStream::connect(&self.persist.socket).await {
                Ok(stream) => return Ok(stream),
                Err(error) if tokio::time::Instant::now() >= deadline => {
                    return Err(TransportError::Mux {
                        host: None,
                        message: format!(
                            "the connection keeper did not open `{}`: {error}",
                            self.persist.socket.display()
                        ),
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Starts `toolkit ssh-mux` in its own process group (a Ctrl-C of this run does
    /// not reach it), with no terminal, pipe or secret of this run.
    fn start(&self) -> std::io::Result<()> {
        use std::os::unix::process::CommandExt as _;
        std::process::Command::new(&self.persist.program)
            .arg("ssh-mux")
            .arg("--socket")
            .arg(&self.persist.socket)
            .arg("--idle")
            .arg(self.idle().to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Holds no run's directory (a test's temporary one, a checkout) busy, and
            // resolves no relative path against it: every path it gets is absolute.
            .current_dir("/")
            .process_group(0)
            .spawn()
            .map(drop)
    }

    fn lost(&self, host: &str, error: &std::io::Error) -> TransportError {
        TransportError::Mux {
            host: Some(host.to_owned()),
            message: format!("lost the connection keeper at `{}`: {error}", self.persist.socket.display()),
        }
    }

    fn unexpected(host: &str, reply: &Reply) -> TransportError {
        TransportError::Mux {
            host: Some(host.to_owned()),
            message: format!("unexpected answer from the connection keeper: {reply:?}"),
        }
    }
}

/// `target` as the keeper must see it: its key and known_hosts files as absolute
/// paths. A relative path means a file in the run's working directory, and the
/// keeper, started by an earlier run, lives in another one: it would check a second
/// run's hosts against the first run's known_hosts (and offer its key).
fn in_keeper(target: &SshTarget) -> SshTarget {
    let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    SshTarget {
        identity_file: target.identity_file.as_deref().map(absolute),
        known_hosts: absolute(&target.known_hosts),
        proxy_jump: target.proxy_jump.as_deref().map(|bastion| Box::new(in_keeper(bastion))),
        ..target.clone()
    }
}

/// `length` bytes from `reader`.
async fn read_exactly(reader: &mut (impl tokio::io::AsyncRead + Unpin), length: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
    reader.take(length).read_to_end(&mut bytes).await?;
    Ok(bytes)
}

/// Asks the background process at `socket` to close its connections and exit;
/// `false` when none was running.
///
/// # Errors
/// When it answered something else than that it stops.
pub async fn stop(socket: &Path) -> std::io::Result<bool> {
    let Ok(mut stream) = UnixStream::connect(socket).await else { return Ok(false) };
    wire::send(&mut stream, &Request::Stop).await?;
    match wire::receive(&mut stream).await? {
        Reply::Stopping => Ok(true),
        other => Err(std::io::Error::other(format!("unexpected answer: {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_directory_must_be_private() {
        let base = tempfile::tempdir().expect("tempdir");
        let uid = std::fs::metadata("/proc/self").expect("self").uid();
        let directory = base.path().join("toolkit");
        private_directory(&directory, uid).expect("made");
        assert_eq!(std::fs::metadata(&directory).expect("stat").permissions().mode() & 0o777, 0o700);
        std::fs::set_permissions(&directory, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let error = private_directory(&directory, uid).expect_err("open to others");
        assert!(error.to_string().contains("mode 0700"), "{error}");
        std::fs::set_permissions(&directory, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(private_directory(&directory, uid + 1).is_err(), "another user's directory");
    }
}
