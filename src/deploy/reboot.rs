//! Reboot one host and wait until it is back: the primitive a rolling rollout calls
//! for a `reboot`-class change (first driver install, kernel parameters, firmware).
//!
//! Stage: roll out (IO over [`transport`](crate::transport)). Input: a [`Connector`],
//! a host name and [`RebootOptions`]. Output: a [`RebootReport`] (the boot identity
//! before and after, how long the host was away, whether its BMC had to power-cycle
//! it), or a [`RebootError`] that names the host and what it waited for.
//!
//! The steps: read the [`BootIdentity`]; ask systemd to reboot a second later (so the
//! SSH command returns with its exit status before sshd goes away); forget the cached
//! connection; dial again every `poll_interval` until SSH answers with another boot
//! identity (bounded by `return_timeout`); then wait until `systemctl
//! is-system-running` says `running` or `degraded` (bounded by `settle_timeout`).
//! When the host does not come back, a [`PowerCycle`] fallback (the BMC) may restart
//! it once, and the wait starts again. Before the reboot, the same fallback readies the
//! host out of band ([`PowerCycle::before_reboot`]): its BMC is left with only the BIOS
//! values the blueprint wants queued, since any reset applies what is queued.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

use crate::bmc::{BmcConfig, BmcError, Redfish};
use crate::transport::{Connector, Executor, TransportError};

/// Where the kernel says which boot this is (random at every kernel boot).
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// PID 1's status line; field 22 is when it started, in clock ticks since the kernel booted.
const INIT_STAT: &str = "/proc/1/stat";

/// Limits of one reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootOptions {
    /// From the reboot command until SSH answers with a new boot identity. GPU servers
    /// spend minutes in firmware (memory training, option ROMs), hence the default.
    /// An attempt under way at the limit is let finish (at most `attempt_timeout` more).
    pub return_timeout: Duration,
    /// From the new boot's first answer until systemd has finished booting.
    pub settle_timeout: Duration,
    /// Between two attempts to reach the host (and two readings of systemd's state).
    pub poll_interval: Duration,
    /// One attempt: connect, log in and read the identity. A host that is down often
    /// does not refuse but stays silent; this bounds each try.
    pub attempt_timeout: Duration,
}

impl Default for RebootOptions {
    /// 15 min to come back, 5 min to settle, a try every 2 s, 15 s per try.
    fn default() -> Self {
        Self {
            return_timeout: Duration::from_mins(15),
            settle_timeout: Duration::from_mins(5),
            poll_interval: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(15),
        }
    }
}

/// Which boot a host is in.
///
/// `boot_id` alone is not enough: in a container it is the host kernel's, and a
/// container restart (the lab's reboot) keeps it. `init_started`, the start time of
/// PID 1 in clock ticks since the kernel booted, changes whenever init starts again —
/// a container restart, and on a machine every boot — but two boots of one machine may
/// well start init at the same tick, which `boot_id` tells apart. Both are read, never
/// written: nothing is left on the host, and a reboot done by someone else between the
/// reading and the reboot command is still seen as a new boot. (A marker file in
/// `/run` would also work, at the price of a write.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootIdentity {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// Start time of PID 1, in clock ticks since the kernel booted (`/proc/1/stat` field 22).
    pub init_started: u64,
}

impl fmt::Display for BootIdentity {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "boot {} init@{}", self.boot_id, self.init_started)
    }
}

impl BootIdentity {
    /// Reads `cat /proc/sys/kernel/random/boot_id /proc/1/stat`.
    ///
    /// # Errors
    /// A description of what is missing, when the text is not two such lines.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        let boot_id = lines.next().map(str::trim).unwrap_or_default();
        if boot_id.len() != 36 || !boot_id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(format!("`{boot_id}` is not a boot id"));
        }
        let stat = lines.next().unwrap_or_default();
        // The command name (field 2) is in parentheses and may hold spaces: count
        // fields after its closing parenthesis, where field 3 comes first.
        let after_name = stat.rfind(')').map_or("", |end| &stat[end + 1..]);
        let init_started = after_name
            .split_whitespace()
            .nth(22 - 3)
            .and_then(|field| field.parse().ok())
            .ok_or_else(|| format!("`{}` has no start time (field 22)", stat.trim()))?;
        Ok(Self { boot_id: boot_id.to_owned(), init_started })
    }
}

/// What one reboot did.
#[derive(Debug, Clone, Serialize)]
pub struct RebootReport {
    /// The host.
    pub host: String,
    /// The boot before.
    pub before: BootIdentity,
    /// The boot after.
    pub after: BootIdentity,
    /// Whether the [`PowerCycle`] fallback had to restart it.
    pub power_cycled: bool,
    /// `running` or `degraded`: what `systemctl is-system-running` said at the end.
    pub system_state: String,
    /// From the reboot command until SSH answered in the new boot.
    pub returned_after: Duration,
    /// From the reboot command until systemd had finished booting.
    pub settled_after: Duration,
    /// Connection attempts after the reboot command.
    pub attempts: u32,
}

/// Why a reboot did not end with the host back and booted.
#[derive(Debug, Error)]
pub enum RebootError {
    /// The host could not be reached or read before the reboot: nothing was done.
    #[error("cannot read the boot identity of `{host}` before rebooting it; it was not rebooted")]
    Before {
        /// The host.
        host: String,
        /// Why.
        #[source]
        source: Arc<TransportError>,
    },
    /// The host answered something that is not a boot identity.
    #[error("`{host}` answered no boot identity: {reason}")]
    Identity {
        /// The host.
        host: String,
        /// What was wrong with the answer.
        reason: String,
    },
    /// The reboot command failed (no systemd, not root…): nothing was done.
    #[error("cannot reboot `{host}`")]
    Command {
        /// The host.
        host: String,
        /// Why.
        #[source]
        source: TransportError,
    },
    /// The host did not answer in a new boot in time.
    #[error("`{host}` did not come back within {seconds} s of {after} ({attempts} attempts); last: {last}")]
    DidNotReturn {
        /// The host.
        host: String,
        /// The limit (`return_timeout`).
        seconds: u64,
        /// `the reboot command` or `a BMC power cycle`.
        after: &'static str,
        /// Connection attempts made.
        attempts: u32,
        /// What the last attempt saw.
        last: String,
    },
    /// SSH refuses the host for a reason waiting does not fix (its host key changed…).
    #[error("`{host}` is back but cannot be trusted or logged in to")]
    Refused {
        /// The host.
        host: String,
        /// Why.
        #[source]
        source: Arc<TransportError>,
    },
    /// The host is back, but systemd did not finish booting in time.
    #[error(
        "`{host}` is back but did not finish booting within {seconds} s: `systemctl is-system-running` says `{state}`"
    )]
    NotSettled {
        /// The host.
        host: String,
        /// The limit (`settle_timeout`).
        seconds: u64,
        /// The last state read (or why it could not be read).
        state: String,
    },
    /// The BMC has BIOS values queued that the blueprint does not want, and they could
    /// not be overwritten: a reboot would apply them, so the host was not rebooted.
    #[error("`{host}` was not rebooted: its BMC has BIOS values queued for the next reset")]
    QueuedSettings {
        /// The host.
        host: String,
        /// Which values, and why they stayed.
        #[source]
        source: PowerCycleError,
    },
    /// The fallback could not power-cycle the host.
    #[error("`{host}` did not come back, and power-cycling it through its BMC failed")]
    PowerCycle {
        /// The host.
        host: String,
        /// Why.
        #[source]
        source: PowerCycleError,
    },
}

/// Why a [`PowerCycle`] failed (a BMC error, kept whole as the source).
pub type PowerCycleError = Box<dyn std::error::Error + Send + Sync>;

/// Restarts a host out of band when it does not come back by itself: the BMC
/// (Redfish `PowerCycle` or `ForceRestart`), a cloud API, a smart PDU.
pub trait PowerCycle: Sync {
    /// Power-cycles `host` and returns once the request was accepted.
    fn power_cycle(&self, host: &str) -> impl Future<Output = Result<(), PowerCycleError>> + Send;

    /// Readies `host` for a reboot out of band before it is asked to reboot: a BMC
    /// overwrites queued BIOS values the blueprint does not want, which any reset
    /// would apply. Nothing to do by default.
    fn before_reboot(&self, host: &str) -> impl Future<Output = Result<(), PowerCycleError>> + Send {
        let _ = host;
        async { Ok(()) }
    }
}

/// No fallback: [`reboot`] gives up when the host does not come back.
#[derive(Debug, Clone, Copy)]
pub enum NoPowerCycle {}

impl PowerCycle for NoPowerCycle {
    async fn power_cycle(&self, _host: &str) -> Result<(), PowerCycleError> {
        match *self {}
    }
}

/// [`PowerCycle`] through each host's BMC over Redfish: [`Redfish::power_cycle`] of
/// its one system (`PowerCycle`, else `ForceRestart`, else `On` for a system found
/// off — as the BMC's `ResetType@Redfish.AllowableValues` allows). Before a power
/// cycle or a reboot, BIOS values queued on the BMC that the blueprint does not want
/// ([`RedfishPowerCycle::with_bios`]) are overwritten with the values in effect; when
/// they stay queued, or the BMC cannot be read, the host is not restarted.
#[derive(Debug, Clone, Default)]
pub struct RedfishPowerCycle {
    bmcs: BTreeMap<String, BmcConfig>,
    /// The BIOS values the blueprint wants, by host: all that may stay queued.
    bios: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
}

/// A host the [`RedfishPowerCycle`] has no BMC for.
#[derive(Debug, Error)]
#[error("`{host}` has no BMC in the inventory (`bmcs:`), so it cannot be power-cycled")]
pub struct NoBmc {
    /// The host.
    pub host: String,
}

impl RedfishPowerCycle {
    /// A fallback for the hosts of `bmcs` (keyed by [`BmcConfig::host`]).
    pub fn new(bmcs: impl IntoIterator<Item = BmcConfig>) -> Self {
        Self { bmcs: bmcs.into_iter().map(|config| (config.host.clone(), config)).collect(), bios: BTreeMap::new() }
    }

    /// The BIOS values the blueprint wants by host (`deploy::api::wanted_bios`): before
    /// a reboot or a power cycle every other value queued on the BMC is overwritten
    /// with the one in effect; a host not named has none wanted.
    #[must_use]
    pub fn with_bios(mut self, bios: BTreeMap<String, BTreeMap<String, serde_json::Value>>) -> Self {
        self.bios = bios;
        self
    }

    /// Connects to `host`'s BMC and leaves only the wanted BIOS values queued.
    async fn settled(&self, host: &str) -> Result<Option<(Redfish, String)>, PowerCycleError> {
        let Some(config) = self.bmcs.get(host) else { return Ok(None) };
        let client = Redfish::connect(config.clone()).await?;
        let system = client.system().await?;
        let none = BTreeMap::new();
        let wanted = self.bios.get(host).unwrap_or(&none);
        match client.settle_bios(&system, wanted).await {
            Ok(overwritten) => {
                for setting in overwritten {
                    tracing::warn!(host, %setting, "queued BIOS value the blueprint does not want overwritten");
                }
            }
            // No Bios resource: nothing queued.
            Err(BmcError::Unsupported { .. }) => {}
            Err(error) => return Err(error.into()),
        }
        Ok(Some((client, system)))
    }
}

impl PowerCycle for RedfishPowerCycle {
    async fn power_cycle(&self, host: &str) -> Result<(), PowerCycleError> {
        let (client, system) = self.settled(host).await?.ok_or_else(|| NoBmc { host: host.to_owned() })?;
        let reset = client.power_cycle(&system).await?;
        tracing::warn!(host, system, reset = reset.as_str(), "reset through the BMC");
        // The reset was accepted; a session left open times out on the BMC.
        let _ = client.close().await;
        Ok(())
    }

    /// A host without a BMC here reboots as it is: toolkit cannot see its BIOS queue.
    async fn before_reboot(&self, host: &str) -> Result<(), PowerCycleError> {
        if let Some((client, _)) = self.settled(host).await? {
            let _ = client.close().await;
        }
        Ok(())
    }
}

/// Reboots `host` and waits until it is back in a new boot with systemd booted;
/// gives up when it does not come back (see [`reboot_with_fallback`]).
///
/// # Errors
/// See [`RebootError`]: each names the host and what it waited for.
pub async fn reboot<C: Connector>(
    connector: &C,
    host: &str,
    options: &RebootOptions,
) -> Result<RebootReport, RebootError> {
    reboot_with_fallback(connector, host, options, None::<&NoPowerCycle>).await
}

/// [`reboot`], and when the host does not come back within `return_timeout`,
/// `fallback` power-cycles it once and the wait starts again.
///
/// # Errors
/// See [`RebootError`].
pub async fn reboot_with_fallback<C: Connector, P: PowerCycle>(
    connector: &C,
    host: &str,
    options: &RebootOptions,
    fallback: Option<&P>,
) -> Result<RebootReport, RebootError> {
    let before = identity_before(connector, host).await?;
    if let Some(fallback) = fallback {
        fallback
            .before_reboot(host)
            .await
            .map_err(|source| RebootError::QueuedSettings { host: host.to_owned(), source })?;
    }
    let session =
        connector.connect(host).await.map_err(|source| RebootError::Before { host: host.to_owned(), source })?;
    // A second's delay lets this command exit, and SSH deliver its status, before
    // shutdown stops sshd; `systemctl reboot` itself may be cut off mid-answer.
    let command: Vec<String> = [
        "systemd-run",
        "--on-active=1",
        "--timer-property=AccuracySec=100ms",
        "--description=toolkit: reboot",
        "systemctl",
        "reboot",
    ]
    .map(String::from)
    .to_vec();
    session
        .exec(&command)
        .await
        .and_then(|output| output.into_success(host, &command))
        .map_err(|source| RebootError::Command { host: host.to_owned(), source })?;
    let issued = Instant::now();
    tracing::info!(host, %before, "reboot issued");
    drop(session);

    let mut wait = Wait { connector, host, options, attempts: 0 };
    let mut power_cycled = false;
    let after = match wait.new_boot(&before).await {
        Ok(after) => after,
        Err(Waited::Refused(source)) => return Err(RebootError::Refused { host: host.to_owned(), source }),
        Err(Waited::TimedOut(last)) => {
            let Some(fallback) = fallback else {
                return Err(wait.did_not_return("the reboot command", last));
            };
            tracing::warn!(host, %last, "did not come back: power-cycling through the BMC");
            fallback
                .power_cycle(host)
                .await
                .map_err(|source| RebootError::PowerCycle { host: host.to_owned(), source })?;
            power_cycled = true;
            match wait.new_boot(&before).await {
                Ok(after) => after,
                Err(Waited::Refused(source)) => return Err(RebootError::Refused { host: host.to_owned(), source }),
                Err(Waited::TimedOut(last)) => return Err(wait.did_not_return("a BMC power cycle", last)),
            }
        }
    };
    let returned_after = issued.elapsed();
    tracing::info!(host, %after, seconds = returned_after.as_secs_f64(), "back in a new boot");
    let system_state = wait.booted().await?;
    let settled_after = issued.elapsed();
    tracing::info!(host, %system_state, seconds = settled_after.as_secs_f64(), "booted");
    Ok(RebootReport {
        host: host.to_owned(),
        before,
        after,
        power_cycled,
        system_state,
        returned_after,
        settled_after,
        attempts: wait.attempts,
    })
}

/// The identity before the reboot, over the cached session; a session that died
/// since it was opened (the host restarted meanwhile) is dialled again once.
async fn identity_before<C: Connector>(connector: &C, host: &str) -> Result<BootIdentity, RebootError> {
    match read_identity(connector, host).await {
        Ok(identity) => Ok(identity),
        Err(Read::Transport(_)) => {
            connector.forget(host);
            read_identity(connector, host).await.map_err(|error| match error {
                Read::Transport(source) => RebootError::Before { host: host.to_owned(), source },
                Read::Identity(reason) => RebootError::Identity { host: host.to_owned(), reason },
            })
        }
        Err(Read::Identity(reason)) => Err(RebootError::Identity { host: host.to_owned(), reason }),
    }
}

enum Read {
    Transport(Arc<TransportError>),
    Identity(String),
}

async fn read_identity<C: Connector>(connector: &C, host: &str) -> Result<BootIdentity, Read> {
    let session = connector.connect(host).await.map_err(Read::Transport)?;
    let argv = vec!["cat".to_owned(), BOOT_ID.to_owned(), INIT_STAT.to_owned()];
    let output = session
        .exec(&argv)
        .await
        .and_then(|output| output.into_success(host, &argv))
        .map_err(|error| Read::Transport(Arc::new(error)))?;
    BootIdentity::parse(&output.stdout_text()).map_err(Read::Identity)
}

/// Why waiting for the host ended without it.
enum Waited {
    /// Out of time; what the last attempt saw.
    TimedOut(String),
    /// A failure waiting will not fix.
    Refused(Arc<TransportError>),
}

/// The polling state of one reboot.
struct Wait<'a, C> {
    connector: &'a C,
    host: &'a str,
    options: &'a RebootOptions,
    attempts: u32,
}

impl<C: Connector> Wait<'_, C> {
    /// Dials the host (a new connection each time) until it answers with an identity
    /// other than `before`. The connection that sees the new boot stays cached.
    async fn new_boot(&mut self, before: &BootIdentity) -> Result<BootIdentity, Waited> {
        let deadline = Instant::now() + self.options.return_timeout;
        loop {
            self.connector.forget(self.host);
            self.attempts += 1;
            // A whole attempt even near the deadline (which it may pass by one attempt):
            // an attempt cut to what is left would report "no answer" for a host that
            // in fact answered, from its old boot, a moment later.
            let limit = self.options.attempt_timeout;
            let last = match tokio::time::timeout(limit, read_identity(self.connector, self.host)).await {
                Ok(Ok(identity)) if identity != *before => return Ok(identity),
                Ok(Ok(_)) => "SSH answered from the old boot".to_owned(),
                Ok(Err(Read::Transport(error))) if waiting_will_not_fix(&error) => {
                    return Err(Waited::Refused(error));
                }
                Ok(Err(Read::Transport(error))) => error.to_string(),
                Ok(Err(Read::Identity(reason))) => format!("no boot identity: {reason}"),
                Err(_) => format!("no answer within {} s", limit.as_secs()),
            };
            tracing::debug!(host = self.host, attempt = self.attempts, %last, "not back yet");
            if Instant::now() + self.options.poll_interval >= deadline {
                self.connector.forget(self.host);
                return Err(Waited::TimedOut(last));
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    /// Waits until systemd has finished booting: `running`, or `degraded` (some unit
    /// failed: booted all the same; the validators that follow judge the node).
    async fn booted(&self) -> Result<String, RebootError> {
        let deadline = Instant::now() + self.options.settle_timeout;
        let argv = vec!["systemctl".to_owned(), "is-system-running".to_owned()];
        loop {
            // Exits non-zero for every state but `running`: the text is the answer.
            let state = match self.connector.connect(self.host).await {
                Ok(session) => match session.exec(&argv).await {
                    Ok(output) => output.stdout_text().trim().to_owned(),
                    Err(error) => {
                        self.connector.forget(self.host);
                        format!("unreadable: {error}")
                    }
                },
                Err(error) => {
                    self.connector.forget(self.host);
                    format!("unreadable: {error}")
                }
            };
            if state == "running" || state == "degraded" {
                return Ok(state);
            }
            if Instant::now() + self.options.poll_interval >= deadline {
                return Err(RebootError::NotSettled {
                    host: self.host.to_owned(),
                    seconds: self.options.settle_timeout.as_secs(),
                    state,
                });
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    fn did_not_return(&self, after: &'static str, last: String) -> RebootError {
        RebootError::DidNotReturn {
            host: self.host.to_owned(),
            seconds: self.options.return_timeout.as_secs(),
            after,
            attempts: self.attempts,
            last,
        }
    }
}

/// Host key and configuration problems: a host whose key changed across a reboot
/// must stop the rollout, not be waited for.
fn waiting_will_not_fix(error: &TransportError) -> bool {
    match error {
        TransportError::ProxyJump { source, .. } => waiting_will_not_fix(source),
        TransportError::UnknownHostKey { .. }
        | TransportError::ChangedHostKey { .. }
        | TransportError::RevokedHostKey { .. }
        | TransportError::KeyFile { .. }
        | TransportError::NoIdentity { .. }
        | TransportError::UnknownTarget { .. }
        | TransportError::InvalidArgument { .. }
        | TransportError::KnownHosts { .. } => true,
        // Authentication may fail while a booting host mounts home directories.
        _ => false,
    }
}

#[cfg(test)]
mod tests;
