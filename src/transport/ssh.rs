//! SSH transport over russh: one connection per host, one channel per command.
//!
//! Stage: observe and apply. Input: an [`SshTarget`] (address, user, key, known_hosts,
//! optional bastion) and [`SshOptions`]. Output: an authenticated connection
//! ([`Link`]) and its channels, or a [`TransportError`] that says which host failed
//! and why; `super::session` builds the [`super::Executor`] sessions on them.
//!
//! Host keys are checked against the target's known_hosts file before anything is
//! sent; an unknown key is refused unless `accept_new_host_keys`, a changed key is
//! refused always. The key exchange is the dominant cost of a fan-out, so
//! `curve25519-sha256` (about ten times cheaper than the post-quantum hybrids) is
//! offered first. [`Links`] makes one connection per endpoint and shares bastion
//! connections between the hosts behind them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::agent::AgentIdentity;
use russh::keys::agent::client::AgentClient;
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, Disconnect, Preferred, kex};
use tokio::sync::OnceCell;

use super::known_hosts::{self, HostKeyStatus, KnownHosts, fingerprint};
use super::{ExitStatus, Output, TransportError, quote, summarize};

/// Where and how to log in to one host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SshTarget {
    /// Target name (`node01`), used in messages and as the pool key.
    pub host: String,
    /// DNS name or IP address to dial; also the name looked up in known_hosts.
    pub address: String,
    /// TCP port.
    pub port: u16,
    /// Remote user.
    pub user: String,
    /// Private key file (ed25519, ECDSA or RSA, without passphrase); `None` uses the
    /// ssh-agent.
    pub identity_file: Option<PathBuf>,
    /// The known_hosts file to check (and, with accept-new, extend).
    pub known_hosts: PathBuf,
    /// A bastion to reach this host through (`ProxyJump`).
    pub proxy_jump: Option<Box<SshTarget>>,
    /// Run every command as root through `sudo -n --`.
    pub become_root: bool,
}

impl SshTarget {
    /// `address:port`, for messages.
    #[must_use]
    pub fn endpoint(&self) -> String {
        if self.address.contains(':') {
            format!("[{}]:{}", self.address, self.port)
        } else {
            format!("{}:{}", self.address, self.port)
        }
    }

    /// The names this host's key may be recorded under, as OpenSSH looks them up:
    /// the address dialled, then the target name when it differs.
    #[must_use]
    pub fn known_host_names(&self) -> Vec<String> {
        let mut names = vec![known_hosts::host_name(&self.address, self.port)];
        let by_name = known_hosts::host_name(&self.host, self.port);
        if !names.contains(&by_name) {
            names.push(by_name);
        }
        names
    }

    /// The argv actually run for `argv`: prefixed with `sudo -n --` when becoming
    /// root (`-n`: fail instead of prompting for a password nobody can type).
    #[must_use]
    pub fn wrap_argv(&self, argv: &[String]) -> Vec<String> {
        if self.become_root {
            ["sudo", "-n", "--"].iter().map(|word| (*word).to_owned()).chain(argv.iter().cloned()).collect()
        } else {
            argv.to_vec()
        }
    }

    /// Pool key of a connection: two targets with equal keys share it.
    pub(crate) fn connection_key(&self) -> String {
        let identity =
            self.identity_file.as_deref().map_or_else(|| "agent".to_owned(), |path| path.display().to_string());
        let key =
            format!("{}@{} identity={identity} known_hosts={}", self.user, self.endpoint(), self.known_hosts.display());
        match &self.proxy_jump {
            None => key,
            Some(bastion) => format!("{key} via {}", bastion.connection_key()),
        }
    }
}

/// Limits and policies shared by all connections of a run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SshOptions {
    /// TCP connect + key exchange + authentication.
    pub connect_timeout: Duration,
    /// One command, from channel open to exit.
    pub command_timeout: Duration,
    /// Send a keepalive after this long without traffic.
    pub keepalive_interval: Duration,
    /// Close the connection after this many unanswered keepalives.
    pub keepalive_max: usize,
    /// Record unknown host keys instead of refusing them (OpenSSH `accept-new`).
    pub accept_new_host_keys: bool,
    /// ssh-agent socket used when a target has no identity file.
    pub agent_socket: Option<PathBuf>,
    /// Keep the connections open after the run, in a background process, for the
    /// next run to reuse; `None` closes them when the run ends.
    #[serde(skip)]
    pub persist: Option<Persist>,
}

/// Where the background process listens and how long it keeps idle connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persist {
    /// The unix socket (see [`super::mux::default_socket`]).
    pub socket: PathBuf,
    /// Exit after this long without a request.
    pub idle: Duration,
    /// The `toolkit` executable started as `PROGRAM ssh-mux --socket … --idle …`.
    pub program: PathBuf,
}

impl Default for SshOptions {
    /// 10 s to connect, 10 min per command, keepalive every 15 s, strict host keys,
    /// the agent from `SSH_AUTH_SOCK`, connections closed when the run ends.
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_mins(10),
            keepalive_interval: Duration::from_secs(15),
            keepalive_max: 3,
            accept_new_host_keys: false,
            agent_socket: std::env::var_os("SSH_AUTH_SOCK").filter(|value| !value.is_empty()).map(PathBuf::from),
            persist: None,
        }
    }
}

/// One authenticated SSH connection; shared by every session to the same
/// endpoint, user and key.
pub(crate) struct Link {
    handle: Handle<HostKeyVerifier>,
    /// The host key the server proved it holds, checked against known_hosts again
    /// before a kept connection serves another run.
    host_key: Option<russh::keys::PublicKey>,
    /// Keeps the bastion connection (which carries this one) alive.
    _bastion: Option<Arc<Link>>,
}

impl Link {
    pub(crate) async fn connect(target: &SshTarget, options: &SshOptions) -> Result<Self, TransportError> {
        match &target.proxy_jump {
            None => Self::connect_direct(target, options).await,
            Some(bastion_target) => {
                let bastion = Box::pin(Self::connect(bastion_target, options))
                    .await
                    .map_err(|source| proxy_error(target, bastion_target, source))?;
                Self::connect_via(target, options, Arc::new(bastion), bastion_target).await
            }
        }
    }

    async fn connect_direct(target: &SshTarget, options: &SshOptions) -> Result<Self, TransportError> {
        let attempt = async {
            let socket =
                tokio::net::TcpStream::connect((target.address.as_str(), target.port)).await.map_err(|source| {
                    TransportError::Connect { host: target.host.clone(), address: target.endpoint(), source }
                })?;
            // Small request/response packets: Nagle would add a delay to each.
            let _ = socket.set_nodelay(true);
            handshake(target, options, socket).await
        };
        let (handle, host_key) = with_connect_timeout(target, options, attempt).await?;
        Ok(Self { handle, host_key, _bastion: None })
    }

    pub(crate) async fn connect_via(
        target: &SshTarget,
        options: &SshOptions,
        bastion: Arc<Link>,
        bastion_target: &SshTarget,
    ) -> Result<Self, TransportError> {
        let attempt = async {
            let channel = bastion
                .handle
                .channel_open_direct_tcpip(target.address.clone(), u32::from(target.port), "127.0.0.1", 0)
                .await
                .map_err(|source| {
                    proxy_error(
                        target,
                        bastion_target,
                        TransportError::Protocol { host: bastion_target.host.clone(), source },
                    )
                })?;
            handshake(target, options, channel.into_stream()).await
        };
        let (handle, host_key) = with_connect_timeout(target, options, attempt).await?;
        Ok(Self { handle, host_key, _bastion: Some(bastion) })
    }

    /// Whether the connection has ended (the server closed it, or keepalives went
    /// unanswered).
    pub(crate) fn is_closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Whether `target`'s known_hosts still lists the key this connection was made
    /// with: a kept connection must not outlive the trust it was opened under.
    pub(crate) fn still_trusted(&self, target: &SshTarget) -> bool {
        let Some(key) = &self.host_key else { return false };
        KnownHosts::load(&target.known_hosts)
            .is_ok_and(|known| matches!(known.check(&target.known_host_names(), key), HostKeyStatus::Known))
    }

    /// Says goodbye to the server.
    pub(crate) async fn disconnect(&self) {
        let _ = self.handle.disconnect(Disconnect::ByApplication, "", "en").await;
    }

    /// Runs the command line `line` over a new channel, with `input` on its
    /// standard input.
    /// Opens a session channel, or says why not (a dead connection).
    pub(crate) async fn open(&self) -> Result<russh::Channel<client::Msg>, russh::Error> {
        self.handle.channel_open_session().await
    }
}

/// What a command reads on its standard input.
pub(crate) enum Input<'a> {
    /// These bytes, one part after another (nothing: end-of-file at once).
    Parts(&'a [&'a [u8]]),
    /// Whatever this reader yields, to its end (the mux's client socket).
    Reader(&'a mut (dyn tokio::io::AsyncRead + Unpin + Send)),
}

/// A command as sent: the quoted line, and its short form for messages.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct CommandLine {
    /// What the remote shell runs.
    pub line: String,
    /// [`summarize`] of the argv.
    pub summary: String,
}

impl CommandLine {
    /// `argv` as `target` runs it (with `sudo` when becoming root), quoted.
    pub(crate) fn of(target: &SshTarget, argv: &[String]) -> Result<Self, TransportError> {
        let argv = target.wrap_argv(argv);
        Ok(Self { line: quote::command_line(&argv)?, summary: summarize(&argv) })
    }
}

/// Runs a command on an open channel: input streamed, output collected, the
/// command's limit enforced.
pub(crate) async fn run_channel(
    channel: russh::Channel<client::Msg>,
    host: &str,
    command: CommandLine,
    input: Input<'_>,
    command_timeout: Duration,
) -> Result<Output, TransportError> {
    let protocol = |source| TransportError::Protocol { host: host.to_owned(), source };
    let CommandLine { line, summary } = command;
    let command = || summary.clone();
    let (mut reader, writer) = channel.split();
    writer.exec(true, line.into_bytes()).await.map_err(protocol)?;
    let send = async {
        match input {
            // Streamed from the caller's bytes a packet at a time: a batch of
            // files is hundreds of kilobytes per host, every host at once.
            Input::Parts(parts) => {
                for part in parts {
                    writer.data(*part).await?;
                }
            }
            Input::Reader(source) => writer.data(source).await?,
        }
        writer.eof().await
    };
    let receive = async {
        let mut output = Output { status: ExitStatus::Unknown, stdout: Vec::new(), stderr: Vec::new() };
        let mut refused = false;
        while let Some(message) = reader.wait().await {
            match message {
                ChannelMsg::Data { data } => output.stdout.extend_from_slice(&data),
                ChannelMsg::ExtendedData { data, ext: 1 } => output.stderr.extend_from_slice(&data),
                ChannelMsg::ExitStatus { exit_status } => output.status = ExitStatus::Code(exit_status),
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    output.status = ExitStatus::Signal(format!("{signal_name:?}"));
                }
                ChannelMsg::Failure => {
                    refused = true;
                    break;
                }
                _ => {}
            }
        }
        (output, refused)
    };
    let finished = tokio::time::timeout(command_timeout, async { tokio::join!(send, receive) }).await;
    let Ok((send_result, (output, refused))) = finished else {
        // Closing the channel closes the command's pipes on the server.
        let _ = writer.close().await;
        return Err(TransportError::CommandTimeout {
            host: host.to_owned(),
            command: command(),
            seconds: command_timeout.as_secs(),
        });
    };
    if refused {
        let _ = writer.close().await;
        return Err(TransportError::CommandFailed {
            host: host.to_owned(),
            command: command(),
            status: ExitStatus::Unknown,
            stderr: "the server refused to run the command".to_owned(),
        });
    }
    match (send_result, &output.status) {
        // A command may exit without reading all of its input; its status says
        // what happened.
        (Err(_), ExitStatus::Code(code)) if *code != 0 => Ok(output),
        (Err(source), _) => Err(protocol(source)),
        (Ok(()), _) => Ok(output),
    }
}

fn proxy_error(target: &SshTarget, bastion: &SshTarget, source: TransportError) -> TransportError {
    shared_proxy_error(target, bastion, Arc::new(source))
}

fn shared_proxy_error(target: &SshTarget, bastion: &SshTarget, source: Arc<TransportError>) -> TransportError {
    TransportError::ProxyJump { host: target.host.clone(), bastion: bastion.host.clone(), source }
}

async fn with_connect_timeout<T>(
    target: &SshTarget,
    options: &SshOptions,
    attempt: impl Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    tokio::time::timeout(options.connect_timeout, attempt).await.unwrap_or_else(|_| {
        Err(TransportError::ConnectTimeout {
            host: target.host.clone(),
            address: target.endpoint(),
            seconds: options.connect_timeout.as_secs(),
        })
    })
}

/// Key exchange, host key check and authentication over an open byte stream; the
/// handle and the host key the server presented.
async fn handshake<S>(
    target: &SshTarget,
    options: &SshOptions,
    stream: S,
) -> Result<(Handle<HostKeyVerifier>, Option<russh::keys::PublicKey>), TransportError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let known = KnownHosts::load(&target.known_hosts)?;
    let names = target.known_host_names();
    let config = client_config(options, &known.keys_for(&names));
    let verifier = HostKeyVerifier {
        host: target.host.clone(),
        names,
        known_hosts: target.known_hosts.clone(),
        known,
        accept_new: options.accept_new_host_keys,
        accepted: Arc::default(),
    };
    let accepted = Arc::clone(&verifier.accepted);
    let mut handle = client::connect_stream(Arc::new(config), stream, verifier).await.map_err(|error| match error {
        VerifierError::HostKey(error) => *error,
        VerifierError::Ssh(source) => TransportError::Protocol { host: target.host.clone(), source },
    })?;
    authenticate(&mut handle, target, options).await?;
    let host_key = accepted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    Ok((handle, host_key))
}

fn client_config(options: &SshOptions, recorded: &[(usize, russh::keys::PublicKey)]) -> client::Config {
    let default = Preferred::default();
    // Ask first for the host key types already recorded, as OpenSSH does, so a host
    // with both an RSA and an ed25519 key is checked against the one we know.
    let is_recorded = |algorithm: &russh::keys::Algorithm| {
        recorded.iter().any(|(_, key)| {
            let known = key.algorithm();
            known == *algorithm || (known.is_rsa() && matches!(algorithm, russh::keys::Algorithm::Rsa { .. }))
        })
    };
    let (mut keys, others): (Vec<_>, Vec<_>) =
        default.key.iter().cloned().partition(|algorithm| is_recorded(algorithm));
    keys.extend(others);
    client::Config {
        preferred: Preferred {
            kex: Cow::Borrowed(&[
                kex::CURVE25519,
                kex::CURVE25519_PRE_RFC_8731,
                kex::MLKEM768X25519_SHA256,
                kex::DH_G16_SHA512,
                kex::DH_G14_SHA256,
                kex::EXTENSION_SUPPORT_AS_CLIENT,
                kex::EXTENSION_OPENSSH_STRICT_KEX_AS_CLIENT,
            ]),
            key: Cow::Owned(keys),
            ..default
        },
        keepalive_interval: Some(options.keepalive_interval),
        keepalive_max: options.keepalive_max,
        nodelay: true,
        ..client::Config::default()
    }
}

async fn authenticate(
    handle: &mut Handle<HostKeyVerifier>,
    target: &SshTarget,
    options: &SshOptions,
) -> Result<(), TransportError> {
    let protocol = |source| TransportError::Protocol { host: target.host.clone(), source };
    let denied = |identity: String| TransportError::AuthFailed {
        host: target.host.clone(),
        user: target.user.clone(),
        identity,
    };
    if let Some(path) = &target.identity_file {
        let key = russh::keys::load_secret_key(path, None).map_err(|error| TransportError::KeyFile {
            path: path.clone(),
            reason: match error {
                russh::keys::Error::KeyIsEncrypted => {
                    "it is encrypted; load it into ssh-agent and leave the identity file unset".to_owned()
                }
                other => other.to_string(),
            },
        })?;
        let key_fingerprint = fingerprint(key.public_key());
        let hash = rsa_hash(handle, key.algorithm().is_rsa()).await.map_err(protocol)?;
        let result = handle
            .authenticate_publickey(&target.user, PrivateKeyWithHashAlg::new(Arc::new(key), hash))
            .await
            .map_err(protocol)?;
        return if result.success() {
            Ok(())
        } else {
            Err(denied(format!("key `{}` ({key_fingerprint})", path.display())))
        };
    }
    let Some(socket) = &options.agent_socket else {
        return Err(TransportError::NoIdentity { host: target.host.clone() });
    };
    let agent_error = |reason: String| TransportError::Agent { socket: socket.clone(), reason };
    let mut agent = AgentClient::connect_uds(socket).await.map_err(|error| agent_error(error.to_string()))?;
    let identities = agent.request_identities().await.map_err(|error| agent_error(error.to_string()))?;
    let mut offered = Vec::new();
    for identity in identities {
        let AgentIdentity::PublicKey { key, .. } = identity else {
            continue;
        };
        offered.push(fingerprint(&key));
        let hash = rsa_hash(handle, key.algorithm().is_rsa()).await.map_err(protocol)?;
        let result = handle
            .authenticate_publickey_with(&target.user, key, hash, &mut agent)
            .await
            .map_err(|error| agent_error(error.to_string()))?;
        if result.success() {
            return Ok(());
        }
    }
    if offered.is_empty() {
        Err(agent_error("the agent holds no keys".to_owned()))
    } else {
        Err(denied(format!("the ssh-agent keys {}", offered.join(", "))))
    }
}

/// The RSA signature hash the server accepts (SHA-512 or SHA-256, never SHA-1 when
/// the server says which it takes).
async fn rsa_hash(handle: &Handle<HostKeyVerifier>, is_rsa: bool) -> Result<Option<HashAlg>, russh::Error> {
    if !is_rsa {
        return Ok(None);
    }
    Ok(handle.best_supported_rsa_hash().await?.unwrap_or(Some(HashAlg::Sha256)))
}

/// russh calls this with the server's key during the key exchange.
struct HostKeyVerifier {
    host: String,
    names: Vec<String>,
    known_hosts: PathBuf,
    known: KnownHosts,
    accept_new: bool,
    /// The key accepted, for [`Link::still_trusted`].
    accepted: Arc<Mutex<Option<russh::keys::PublicKey>>>,
}

impl HostKeyVerifier {
    /// Accepts `key` and keeps it for the connection.
    fn accept(&self, key: &russh::keys::PublicKey) -> bool {
        *self.accepted.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(key.clone());
        true
    }
}

#[derive(Debug)]
enum VerifierError {
    Ssh(russh::Error),
    HostKey(Box<TransportError>),
}

impl From<russh::Error> for VerifierError {
    fn from(error: russh::Error) -> Self {
        Self::Ssh(error)
    }
}

impl client::Handler for HostKeyVerifier {
    type Error = VerifierError;

    async fn check_server_key(&mut self, presented: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let PublicKeyOrCertificate::PublicKey { key, .. } = presented else {
            // No certificate algorithm is offered, so a server cannot send one.
            return Ok(false);
        };
        let refuse = |error: TransportError| Err(VerifierError::HostKey(Box::new(error)));
        match self.known.check(&self.names, key) {
            HostKeyStatus::Known => Ok(self.accept(key)),
            HostKeyStatus::Unknown if self.accept_new => {
                known_hosts::append(&self.known_hosts, &self.names[0], key)
                    .map_err(|error| VerifierError::HostKey(Box::new(error)))?;
                tracing::info!(host = %self.host, fingerprint = %fingerprint(key), "recorded new host key");
                Ok(self.accept(key))
            }
            HostKeyStatus::Unknown => refuse(TransportError::UnknownHostKey {
                host: self.host.clone(),
                fingerprint: fingerprint(key),
                known_hosts: self.known_hosts.clone(),
            }),
            HostKeyStatus::Changed { expected } => {
                let (line, expected_key) = &expected[0];
                refuse(TransportError::ChangedHostKey {
                    host: self.host.clone(),
                    expected_fingerprint: fingerprint(expected_key),
                    presented_fingerprint: fingerprint(key),
                    known_hosts: self.known_hosts.clone(),
                    line: *line,
                })
            }
            HostKeyStatus::Revoked { line } => refuse(TransportError::RevokedHostKey {
                host: self.host.clone(),
                fingerprint: fingerprint(key),
                known_hosts: self.known_hosts.clone(),
                line,
            }),
        }
    }
}

pub(crate) type SharedLink = Result<Arc<Link>, Arc<TransportError>>;
pub(crate) type Cells<T> = Mutex<HashMap<String, Arc<OnceCell<T>>>>;

/// Connections by [`SshTarget::connection_key`], made once each (a bastion once
/// however many hosts sit behind it); a connection found closed is made again.
#[derive(Default)]
pub(crate) struct Links {
    cells: Cells<SharedLink>,
}

impl Links {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<OnceCell<SharedLink>>>> {
        self.cells.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The connection for `target`, made on first use; a failure is remembered
    /// until [`Links::forget`].
    pub(crate) async fn get(&self, target: &SshTarget, options: &SshOptions) -> SharedLink {
        let key = target.connection_key();
        let cell = {
            let mut cells = self.lock();
            let cell = cells.entry(key.clone()).or_default();
            // A dead connection (server gone, keepalives unanswered) is dialled again.
            if matches!(cell.get(), Some(Ok(link)) if link.is_closed()) {
                *cell = Arc::default();
            }
            Arc::clone(cell)
        };
        cell.get_or_init(|| async {
            let link = match &target.proxy_jump {
                None => Link::connect_direct(target, options).await,
                Some(bastion_target) => match Box::pin(self.get(bastion_target, options)).await {
                    Ok(bastion) => Link::connect_via(target, options, bastion, bastion_target).await,
                    Err(error) => Err(shared_proxy_error(target, bastion_target, error)),
                },
            };
            match link {
                Ok(link) => {
                    tracing::debug!(host = %target.host, "connected");
                    Ok(Arc::new(link))
                }
                Err(error) => {
                    tracing::warn!(host = %target.host, %error, "connection failed");
                    Err(Arc::new(error))
                }
            }
        })
        .await
        .clone()
    }

    /// Drops what is cached for `target` (not its bastion's); true when something was.
    pub(crate) fn forget(&self, target: &SshTarget) -> bool {
        self.lock().remove(&target.connection_key()).is_some()
    }

    /// Drops `link` from the cache if it is still `target`'s connection (not one
    /// made since); true when it was.
    pub(crate) fn forget_link(&self, target: &SshTarget, link: &Arc<Link>) -> bool {
        let mut cells = self.lock();
        let key = target.connection_key();
        let current =
            cells.get(&key).is_some_and(|cell| matches!(cell.get(), Some(Ok(kept)) if Arc::ptr_eq(kept, link)));
        if current {
            cells.remove(&key);
        }
        current
    }

    /// Drops every remembered failure.
    pub(crate) fn forget_failures(&self) {
        self.lock().retain(|_, cell| !matches!(cell.get(), Some(Err(_))));
    }

    /// Disconnects every connection made so far.
    pub(crate) async fn close_all(&self) {
        let cells: Vec<_> = self.lock().values().cloned().collect();
        for cell in cells {
            if let Some(Ok(link)) = cell.get() {
                link.disconnect().await;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A target no test connects to; tests of other transport modules use it too.
    pub(crate) fn target() -> SshTarget {
        SshTarget {
            host: "node01".to_owned(),
            address: "10.0.0.1".to_owned(),
            port: 22,
            user: "root".to_owned(),
            identity_file: None,
            known_hosts: PathBuf::from("/nonexistent"),
            proxy_jump: None,
            become_root: false,
        }
    }

    #[test]
    fn become_root_prefixes_sudo_and_keeps_every_word() {
        let argv: Vec<String> = ["printf", "%s", "a'b $(x)"].iter().map(|word| (*word).to_owned()).collect();
        assert_eq!(target().wrap_argv(&argv), argv);
        let root = SshTarget { become_root: true, ..target() };
        let wrapped = root.wrap_argv(&argv);
        assert_eq!(wrapped, ["sudo", "-n", "--", "printf", "%s", "a'b $(x)"]);
        assert_eq!(quote::command_line(&wrapped).expect("line"), r"sudo -n -- printf %s 'a'\''b $(x)'");
    }

    #[test]
    fn known_host_names_follow_openssh() {
        assert_eq!(target().known_host_names(), ["10.0.0.1", "node01"]);
        let other_port = SshTarget { port: 2222, host: "10.0.0.1".to_owned(), ..target() };
        assert_eq!(other_port.known_host_names(), ["[10.0.0.1]:2222"]);
        let v6 = SshTarget { address: "fd00::1".to_owned(), ..target() };
        assert_eq!(v6.endpoint(), "[fd00::1]:22");
    }

    #[test]
    fn curve25519_is_offered_first_and_known_key_types_lead() {
        let rsa = russh::keys::PublicKey::from_openssh(
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC0648NOqZz3OMmHWpoFQsYtdr4CK0jThNMMvbDxzOWqkyp75xCzBLk3JqqmUQ4Qpun6cVmIOs1sl4v0v0k6arsFVgLcWD3VlpESwcsvos52ZLnHHdLEiDZQS7gWJyyIcop5R7FjB5ojf/dCCwNqoFo6Z1rLwi3Xvnt9BYHvFFrnw==",
        )
        .expect("key");
        let config = client_config(&SshOptions::default(), &[(1, rsa)]);
        assert_eq!(config.preferred.kex[0], kex::CURVE25519);
        assert!(config.preferred.key[0].clone().is_rsa(), "{:?}", config.preferred.key);
        let config = client_config(&SshOptions::default(), &[]);
        assert_eq!(config.preferred.key[0], russh::keys::Algorithm::Ed25519);
    }
}
