//! Sessions on hosts and the pool that hands them out: over this process's own
//! connection ([`super::ssh`]) or, with [`SshOptions::persist`], over the one the
//! background process keeps ([`super::mux`]).
//!
//! Stage: observe and apply. Input: [`SshTarget`]s and [`SshOptions`]. Output: an
//! [`SshSession`] per host that implements [`Executor`], or the [`TransportError`]
//! that says which host failed and why. [`SshPool`] connects hosts on demand, at most
//! once each; with [`SshOptions::persist`] the connections are made and kept by the
//! background process, so the next run reuses them instead of paying a key exchange
//! per host again. Kept apart from `ssh` so that `mux`, built on `ssh`'s
//! connections, and the sessions, which use both, import in one direction.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::OnceCell;

use super::mux;
use super::ssh::{Cells, CommandLine, Input, Link, Links, SshOptions, SshTarget, run_channel};
use super::{Executor, ExitStatus, Output, TransportError};

type SharedResult = Result<Arc<SshSession>, Arc<TransportError>>;
/// Whether the background process reached a host.
type Reached = Result<(), Arc<TransportError>>;

/// Commands on one host, over a (possibly shared) SSH connection.
pub struct SshSession {
    target: SshTarget,
    via: Via,
    command_timeout: Duration,
}

/// Who carries a session's commands.
#[derive(Clone)]
enum Via {
    /// A connection of this process.
    Link(Arc<Link>),
    /// The connection kept by the background process.
    Mux(Arc<mux::Client>),
}

impl std::fmt::Debug for SshSession {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("SshSession").field("target", &self.target).finish_non_exhaustive()
    }
}

impl SshSession {
    /// Connects to `target`, through its bastion chain if it has one (each bastion
    /// connected here; use [`SshPool`] to share bastions).
    ///
    /// # Errors
    /// Connection, host key and authentication failures, each naming the host.
    pub async fn connect(target: &SshTarget, options: &SshOptions) -> Result<Self, TransportError> {
        let link = Link::connect(target, options).await?;
        Ok(Self { target: target.clone(), via: Via::Link(Arc::new(link)), command_timeout: options.command_timeout })
    }

    /// Connects to `target` over a `direct-tcpip` channel of `bastion`'s connection,
    /// whatever `target.proxy_jump` says.
    ///
    /// # Errors
    /// When the bastion cannot open the channel, or as [`SshSession::connect`];
    /// [`TransportError::InvalidArgument`] when `bastion`'s connection is kept by
    /// the background process (it has no channel here to carry another).
    pub async fn connect_via(
        target: &SshTarget,
        options: &SshOptions,
        bastion: &SshSession,
    ) -> Result<Self, TransportError> {
        let Via::Link(bastion_link) = &bastion.via else {
            return Err(TransportError::InvalidArgument {
                reason: format!("`{}` is a kept connection and cannot carry another", bastion.target.host),
            });
        };
        let link = Link::connect_via(target, options, Arc::clone(bastion_link), &bastion.target).await?;
        Ok(Self { target: target.clone(), via: Via::Link(Arc::new(link)), command_timeout: options.command_timeout })
    }

    /// The target this session is connected to.
    #[must_use]
    pub fn target(&self) -> &SshTarget {
        &self.target
    }

    /// Says goodbye to the server; the connection closes when the last reference
    /// is dropped anyway. A kept connection stays open for the next run.
    pub async fn close(&self) {
        if let Via::Link(link) = &self.via {
            link.disconnect().await;
        }
    }

    async fn run(&self, argv: &[String], parts: &[&[u8]]) -> Result<Output, TransportError> {
        let command = CommandLine::of(&self.target, argv)?;
        match &self.via {
            Via::Link(link) => {
                let protocol = |source| TransportError::Protocol { host: self.target.host.clone(), source };
                let channel = link.open().await.map_err(protocol)?;
                run_channel(channel, &self.target.host, command, Input::Parts(parts), self.command_timeout).await
            }
            Via::Mux(client) => client.exec(&self.target, command, parts).await,
        }
    }
}

impl SshSession {
    /// Runs `argv` with everything `input` yields as its standard input, streamed a
    /// packet at a time (an upload of any size, never held in memory).
    ///
    /// # Errors
    /// As [`Executor::exec`]; [`TransportError::InvalidArgument`] over a kept
    /// connection (the background process carries whole inputs only).
    pub async fn exec_reading(
        &self,
        argv: &[String],
        input: &mut (dyn tokio::io::AsyncRead + Unpin + Send),
    ) -> Result<Output, TransportError> {
        let command = CommandLine::of(&self.target, argv)?;
        let link = self.own_link()?;
        let protocol = |source| TransportError::Protocol { host: self.target.host.clone(), source };
        let channel = link.open().await.map_err(protocol)?;
        run_channel(channel, &self.target.host, command, Input::Reader(input), self.command_timeout).await
    }

    /// Starts `argv` and hands its standard output back line by line while it runs:
    /// a service whose life is this channel's. Closing the channel, or losing the
    /// connection (this process killed), gives the command end-of-file on its
    /// standard input, which is how it learns to stop.
    ///
    /// # Errors
    /// The channel cannot be opened or the server refuses the command;
    /// [`TransportError::InvalidArgument`] over a kept connection.
    pub async fn spawn(&self, argv: &[String]) -> Result<Spawned, TransportError> {
        let command = CommandLine::of(&self.target, argv)?;
        let link = self.own_link()?;
        let protocol = |source| TransportError::Protocol { host: self.target.host.clone(), source };
        let channel = link.open().await.map_err(protocol)?;
        let (mut reader, writer) = channel.split();
        writer.exec(true, command.line.into_bytes()).await.map_err(protocol)?;
        let (lines, receiver) = tokio::sync::mpsc::unbounded_channel();
        let finished = tokio::spawn(async move {
            let mut pending = Vec::new();
            let mut stderr = Vec::new();
            let mut status = ExitStatus::Unknown;
            while let Some(message) = reader.wait().await {
                match message {
                    russh::ChannelMsg::Data { data } => {
                        pending.extend_from_slice(&data);
                        while let Some(end) = pending.iter().position(|&byte| byte == b'\n') {
                            let taken: Vec<u8> = pending.drain(..=end).collect();
                            let _ = lines.send(String::from_utf8_lossy(&taken[..end]).into_owned());
                        }
                    }
                    russh::ChannelMsg::ExtendedData { data, ext: 1 } => stderr.extend_from_slice(&data),
                    russh::ChannelMsg::ExitStatus { exit_status } => status = ExitStatus::Code(exit_status),
                    russh::ChannelMsg::ExitSignal { signal_name, .. } => {
                        status = ExitStatus::Signal(format!("{signal_name:?}"));
                    }
                    russh::ChannelMsg::Failure => break,
                    _ => {}
                }
            }
            Output { status, stdout: pending, stderr }
        });
        Ok(Spawned { host: self.target.host.clone(), lines: receiver, writer, finished })
    }

    fn own_link(&self) -> Result<&Arc<Link>, TransportError> {
        match &self.via {
            Via::Link(link) => Ok(link),
            Via::Mux(_) => Err(TransportError::InvalidArgument {
                reason: format!("`{}` is a kept connection: a stream needs a connection of this run", self.target.host),
            }),
        }
    }
}

/// A command started by [`SshSession::spawn`], still running.
pub struct Spawned {
    host: String,
    /// Its standard output, a line at a time (without the newline).
    pub lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    writer: russh::ChannelWriteHalf<russh::client::Msg>,
    finished: tokio::task::JoinHandle<Output>,
}

impl Spawned {
    /// Writes `bytes` to its standard input.
    ///
    /// # Errors
    /// The channel is closed.
    pub async fn send(&self, bytes: &[u8]) -> Result<(), TransportError> {
        self.writer.data(bytes).await.map_err(|source| TransportError::Protocol { host: self.host.clone(), source })
    }

    /// Closes its standard input and waits for it to exit: its status, its
    /// standard error and whatever it printed after the last line read.
    pub async fn finish(self) -> Output {
        let _ = self.writer.eof().await;
        let output = self.finished.await.unwrap_or(Output {
            status: ExitStatus::Unknown,
            stdout: Vec::new(),
            stderr: Vec::new(),
        });
        let _ = self.writer.close().await;
        output
    }
}

impl Executor for SshSession {
    fn host(&self) -> &str {
        &self.target.host
    }

    async fn exec(&self, argv: &[String]) -> Result<Output, TransportError> {
        self.run(argv, &[]).await
    }

    async fn exec_with_input(&self, argv: &[String], input: &[u8]) -> Result<Output, TransportError> {
        self.run(argv, &[input]).await
    }

    async fn exec_with_parts(&self, argv: &[String], parts: &[&[u8]]) -> Result<Output, TransportError> {
        self.run(argv, parts).await
    }
}

/// Connections of one run, made on first use and kept: one per endpoint, user and
/// key — so one per bastion however many hosts sit behind it. With
/// [`SshOptions::persist`] the background process holds them instead (and keeps
/// them after the run); the pool then remembers only which hosts it reached.
pub struct SshPool {
    targets: HashMap<String, SshTarget>,
    options: SshOptions,
    links: Links,
    mux: Option<Arc<mux::Client>>,
    kept: Cells<Reached>,
}

impl SshPool {
    /// A pool for `targets`, keyed by [`SshTarget::host`].
    pub fn new(targets: impl IntoIterator<Item = SshTarget>, options: SshOptions) -> Self {
        let mux = options.persist.clone().map(|persist| Arc::new(mux::Client::new(persist, options.clone())));
        Self {
            targets: targets.into_iter().map(|target| (target.host.clone(), target)).collect(),
            options,
            links: Links::default(),
            mux,
            kept: Mutex::default(),
        }
    }

    /// The options connections are made with.
    #[must_use]
    pub fn options(&self) -> &SshOptions {
        &self.options
    }

    /// The session to `host`, connecting on first use. A failure is remembered:
    /// a host that refused once is not dialled again in the same run.
    ///
    /// # Errors
    /// [`TransportError::UnknownTarget`] for a name not in the pool, else the
    /// connection error.
    pub async fn session(&self, host: &str) -> SharedResult {
        let Some(target) = self.targets.get(host) else {
            return Err(Arc::new(TransportError::UnknownTarget { host: host.to_owned() }));
        };
        let command_timeout = self.options.command_timeout;
        if let Some(mux) = &self.mux {
            let cell = Arc::clone(self.kept_cells().entry(host.to_owned()).or_default());
            let reached = cell.get_or_init(|| async { mux.connect(target).await.map_err(Arc::new) }).await;
            match reached {
                Ok(()) => {
                    return Ok(Arc::new(SshSession {
                        target: target.clone(),
                        via: Via::Mux(Arc::clone(mux)),
                        command_timeout,
                    }));
                }
                // No background process could be started here: this run connects itself.
                Err(error) if matches!(**error, TransportError::Mux { host: None, .. }) => {}
                Err(error) => return Err(Arc::clone(error)),
            }
        }
        let link = self.links.get(target, &self.options).await?;
        Ok(Arc::new(SshSession { target: target.clone(), via: Via::Link(link), command_timeout }))
    }

    fn kept_cells(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<OnceCell<Reached>>>> {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Connects every target, at most `parallel` at a time; the result is in no
    /// particular order.
    pub async fn connect_all(&self, parallel: usize) -> Vec<(String, SharedResult)> {
        futures::stream::iter(self.targets.keys())
            .map(|host| async move { (host.clone(), self.session(host).await) })
            .buffer_unordered(parallel.max(1))
            .collect()
            .await
    }

    /// Drops the cached connection (or remembered failure) of `host`, so the next
    /// [`SshPool::session`] connects again. A bastion's connection is kept: only the
    /// host's own hop is dialled again. Sessions handed out before keep the old
    /// connection, which closes when the last of them is dropped.
    pub fn forget(&self, host: &str) {
        if let Some(target) = self.targets.get(host) {
            if self.links.forget(target) {
                tracing::debug!(host, "forgot the connection");
            }
            if self.kept_cells().remove(host).is_some()
                && let Some(mux) = &self.mux
            {
                mux.forget(target);
            }
        }
    }

    /// Disconnects every connection made so far by this process; connections kept
    /// by the background process stay open for the next run.
    pub async fn close_all(&self) {
        self.links.close_all().await;
    }
}

impl super::Connector for SshPool {
    type Executor = SshSession;

    async fn connect(&self, host: &str) -> Result<Arc<SshSession>, Arc<TransportError>> {
        self.session(host).await
    }

    fn forget(&self, host: &str) {
        SshPool::forget(self, host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ssh::tests::target;

    #[tokio::test]
    async fn forget_drops_a_remembered_failure_so_the_host_is_dialled_again() {
        // Port 1 on the loopback: refused at once, nothing is listening.
        let unreachable = SshTarget { address: "127.0.0.1".to_owned(), port: 1, ..target() };
        let pool = SshPool::new([unreachable], SshOptions::default());
        assert!(pool.session("node01").await.is_err());
        assert_eq!(pool.links.lock().len(), 1, "the failure is remembered");
        pool.forget("node02");
        assert_eq!(pool.links.lock().len(), 1, "an unknown name forgets nothing");
        crate::transport::Connector::forget(&pool, "node01");
        assert!(pool.links.lock().is_empty(), "forgotten: the next session dials again");
        assert!(pool.session("node01").await.is_err());
        assert_eq!(pool.links.lock().len(), 1);
    }
}
