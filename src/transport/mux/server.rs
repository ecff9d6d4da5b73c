//! The background process: accepts the runs' requests on the unix socket, keeps
//! one connection per endpoint, user and key, and exits when idle.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt as _;
use tokio::net::{UnixListener, UnixStream};

use super::wire::{self, Reply, Request};
use crate::transport::TransportError;
use crate::transport::ssh::{Input, Link, Links, SshOptions, SshTarget, run_channel};

/// What every request handler shares.
struct Keeper {
    links: Links,
    /// Requests being served.
    busy: AtomicUsize,
    /// When the last request ended, as milliseconds since `started`.
    last: AtomicU64,
    started: Instant,
    /// Seconds without a request before exiting (the latest run's choice).
    idle: AtomicU64,
    stop: tokio::sync::Notify,
}

impl Keeper {
    fn touch(&self) {
        self.last.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Option<Duration> {
        if self.busy.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        Some(self.started.elapsed().saturating_sub(last))
    }

    fn expired(&self) -> bool {
        self.idle_for().is_some_and(|idle| idle >= Duration::from_secs(self.idle.load(Ordering::Relaxed)))
    }
}

/// Serves on `socket` until idle for `idle` (or asked to stop, or the socket is
/// removed), then closes every connection. Returns at once when another process
/// already serves this socket.
///
/// # Errors
/// When the socket or its lock file cannot be made.
pub async fn serve(socket: &Path, idle: Duration) -> std::io::Result<()> {
    let directory = socket.parent().unwrap_or(Path::new("."));
    let name = socket.file_name().map_or_else(|| "ssh.sock".into(), |name| name.to_string_lossy().into_owned());
    // Held for the process's life: a second keeper started by a concurrent run
    // finds it taken and leaves.
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(directory.join(format!("{name}.lock")))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(()),
        Err(std::fs::TryLockError::Error(error)) => return Err(error),
    }
    // Left by a keeper that was killed: nobody listens on it (we hold the lock).
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    let inode = std::fs::metadata(socket)?.ino();
    let uid = std::fs::metadata("/proc/self")?.uid();
    let keeper = Arc::new(Keeper {
        links: Links::default(),
        busy: AtomicUsize::new(0),
        last: AtomicU64::new(0),
        started: Instant::now(),
        idle: AtomicU64::new(idle.as_secs()),
        stop: tokio::sync::Notify::new(),
    });
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                tokio::spawn(handle(Arc::clone(&keeper), stream, uid));
            }
            () = keeper.stop.notified() => break,
            _ = tick.tick() => {
                let ours = std::fs::symlink_metadata(socket).is_ok_and(|metadata| metadata.ino() == inode);
                if keeper.expired() || !ours {
                    break;
                }
            }
        }
    }
    if std::fs::symlink_metadata(socket).is_ok_and(|metadata| metadata.ino() == inode) {
        let _ = std::fs::remove_file(socket);
    }
    keeper.links.close_all().await;
    drop(lock);
    Ok(())
}

/// Decrements the busy count and marks the time when a request ends, however.
struct Busy<'a>(&'a Keeper);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn handle(keeper: Arc<Keeper>, mut stream: UnixStream, uid: u32) {
    // Only this user's runs: the directory is private already, this is the second lock.
    if !stream.peer_cred().is_ok_and(|peer| peer.uid() == uid) {
        return;
    }
    keeper.busy.fetch_add(1, Ordering::Relaxed);
    let _busy = Busy(&keeper);
    let Ok(request) = wire::receive::<_, Request>(&mut stream).await else { return };
    let reply = match request {
        Request::Connect { target, options, idle } => {
            keeper.idle.store(idle, Ordering::Relaxed);
            match trusted(&keeper.links, &target, &options).await {
                Ok(_) => Reply::Connected,
                Err(message) => Reply::Failed { message },
            }
        }
        Request::Exec { target, options, idle, command } => {
            keeper.idle.store(idle, Ordering::Relaxed);
            let channel = match open(&keeper.links, &target, &options).await {
                Ok(channel) => channel,
                Err(message) => {
                    let _ = wire::send(&mut stream, &Reply::Failed { message }).await;
                    return;
                }
            };
            let (mut reader, mut writer) = stream.split();
            let result =
                run_channel(channel, &target.host, command, Input::Reader(&mut reader), options.command_timeout).await;
            let _ = match result {
                Ok(output) => {
                    let header = Reply::Output {
                        status: output.status,
                        stdout: output.stdout.len() as u64,
                        stderr: output.stderr.len() as u64,
                    };
                    async {
                        wire::send(&mut writer, &header).await?;
                        writer.write_all(&output.stdout).await?;
                        writer.write_all(&output.stderr).await?;
                        writer.flush().await
                    }
                    .await
                }
                Err(error) => wire::send(&mut writer, &Reply::Failed { message: error.to_string() }).await,
            };
            return;
        }
        Request::Forget { target } => {
            keeper.links.forget(&target);
            Reply::Done
        }
        Request::Stop => {
            keeper.stop.notify_one();
            Reply::Stopping
        }
    };
    let _ = wire::send(&mut stream, &reply).await;
}

/// The connection to `target`, made now if there is none, dropped and made again
/// if its host key is no longer listed in the run's known_hosts (the new attempt
/// then fails as a first connection would). Failures are not remembered: the next
/// run tries again.
async fn trusted(links: &Links, target: &SshTarget, options: &SshOptions) -> Result<Arc<Link>, String> {
    let link = get(links, target, options).await?;
    if link.still_trusted(target) {
        return Ok(link);
    }
    links.forget(target);
    get(links, target, options).await
}

/// The connection to `target`; a failure is reported and forgotten.
async fn get(links: &Links, target: &SshTarget, options: &SshOptions) -> Result<Arc<Link>, String> {
    links.get(target, options).await.map_err(|error| {
        links.forget_failures();
        error.to_string()
    })
}

/// How long a kept connection may take to open a channel before it counts as dead.
/// A live connection answers in one round trip; one whose peer vanished without a
/// word (host powered off or cut off, container removed, sshd frozen) never answers,
/// and russh would notice only after its keepalives (15 s x 3): a run must not wait
/// that long for a host that is back, or that it can dial again. A slow but live
/// connection that misses this bound costs one new connection, nothing else: its
/// channels in flight keep it open until they end.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// A session channel on `target`'s connection; a connection that died since (the
/// server restarted, the host rebooted, or it stopped answering) is made again once.
async fn open(
    links: &Links,
    target: &SshTarget,
    options: &SshOptions,
) -> Result<russh::Channel<russh::client::Msg>, String> {
    let link = get(links, target, options).await?;
    match tokio::time::timeout(ANSWER_WITHIN, link.open()).await {
        Ok(Ok(channel)) => return Ok(channel),
        Ok(Err(error)) => tracing::debug!(host = %target.host, %error, "kept connection is gone; connecting again"),
        Err(_) => tracing::debug!(host = %target.host, "kept connection does not answer; connecting again"),
    }
    // Only this connection: a concurrent request may have made the new one already.
    links.forget_link(target, &link);
    let link = trusted(links, target, options).await?;
    let protocol = |source| TransportError::Protocol { host: target.host.clone(), source }.to_string();
    match tokio::time::timeout(options.connect_timeout, link.open()).await {
        Ok(opened) => opened.map_err(protocol),
        Err(_) => Err(protocol(russh::Error::ConnectionTimeout)),
    }
}
