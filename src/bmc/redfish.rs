//! The Redfish client: one BMC, its systems, their power, boot, BIOS and firmware.
//!
//! Stage: observe/apply (BMC). Input: a [`BmcConfig`] (from the inventory's `bmcs`).
//! Output: typed facts ([`SystemInfo`], [`PowerState`], [`BootOverride`], BIOS
//! attributes, firmware versions) and the changes made (reset, one-time boot, BIOS
//! settings); [`update`] flashes firmware through the `UpdateService`.
//!
//! Every request goes through [`Redfish::send`]: it authenticates (session token or
//! basic auth), retries what is safe to retry (no answer, 5xx, 429) with exponential
//! backoff, follows task monitors (`202 Accepted` + `Location`) to the end, and turns
//! an unsuccessful status into a [`BmcError`] that names the host and URL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde_json::{Value, json};

use super::error::BmcError;
use super::session::{Auth, Credentials, Sensitive, token_header};
pub use crate::http::RetryPolicy;
use crate::http::{self, Attempts};
use crate::inventory::Inventory;
use crate::inventory::secrets;
// The value types of desired API objects live in the core; the client takes and returns them.
pub use crate::resource::api::{BootTarget, PowerState};

/// Everything needed to talk to one BMC.
#[derive(Debug, Clone)]
pub struct BmcConfig {
    /// The node the BMC belongs to (inventory key); used in every error.
    pub host: String,
    /// Base URL (`https://10.0.0.5`); Redfish paths are resolved against its origin.
    pub endpoint: Url,
    /// User and password.
    pub credentials: Credentials,
    /// CA bundle that must have signed the BMC's certificate (replaces the system roots).
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate: only when the inventory says so for this endpoint.
    pub insecure: bool,
    /// Retries of failed requests.
    pub retry: RetryPolicy,
    /// Limit for one request.
    pub request_timeout: Duration,
    /// Limit for a task monitor to finish.
    pub task_timeout: Duration,
    /// Pause between polls of a task or a state.
    pub poll_interval: Duration,
}

impl BmcConfig {
    /// A configuration with default timeouts and retries.
    ///
    /// # Errors
    /// [`BmcError::InvalidEndpoint`] when `endpoint` is not an http(s) URL.
    pub fn new(host: &str, endpoint: &str, credentials: Credentials) -> Result<Self, BmcError> {
        let invalid = || BmcError::InvalidEndpoint { host: host.to_owned(), endpoint: endpoint.to_owned() };
        let url = Url::parse(endpoint).map_err(|_| invalid())?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(invalid());
        }
        Ok(Self {
            host: host.to_owned(),
            endpoint: url,
            credentials,
            ca_file: None,
            insecure: false,
            retry: RetryPolicy::default(),
            request_timeout: Duration::from_secs(30),
            task_timeout: Duration::from_mins(10),
            poll_interval: Duration::from_secs(2),
        })
    }

    /// The BMC of `host` from the inventory, credentials resolved; relative secret
    /// and CA paths are taken from `base`.
    ///
    /// # Errors
    /// No such BMC, an unresolvable credential, or a bad endpoint.
    pub fn from_inventory(inventory: &Inventory, host: &str, base: &Path) -> Result<Self, BmcError> {
        let bmc = inventory.bmcs.get(host).ok_or_else(|| BmcError::NotInInventory { host: host.to_owned() })?;
        let secret = |reference| {
            secrets::resolve(reference, base).map_err(|source| BmcError::Secret { host: host.to_owned(), source })
        };
        let credentials =
            Credentials { username: secret(&bmc.username)?, password: Sensitive::new(secret(&bmc.password)?) };
        let mut config = Self::new(host, &bmc.endpoint, credentials)?;
        config.ca_file =
            bmc.ca_file.as_ref().map(|path| if path.is_absolute() { path.clone() } else { base.join(path) });
        config.insecure = bmc.insecure;
        Ok(config)
    }
}

/// `ComputerSystem.Reset` types (Redfish `ResetType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetType {
    /// Turn on.
    On,
    /// Turn off now.
    ForceOff,
    /// Ask the OS to shut down.
    GracefulShutdown,
    /// Ask the OS to restart.
    GracefulRestart,
    /// Restart now.
    ForceRestart,
    /// Diagnostic interrupt.
    Nmi,
    /// Turn on now.
    ForceOn,
    /// Press the power button.
    PushPowerButton,
    /// Off, then on.
    PowerCycle,
}

impl ResetType {
    /// The Redfish spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "On",
            Self::ForceOff => "ForceOff",
            Self::GracefulShutdown => "GracefulShutdown",
            Self::GracefulRestart => "GracefulRestart",
            Self::ForceRestart => "ForceRestart",
            Self::Nmi => "Nmi",
            Self::ForceOn => "ForceOn",
            Self::PushPowerButton => "PushPowerButton",
            Self::PowerCycle => "PowerCycle",
        }
    }
}

/// The boot override as the BMC reports it (`Boot` of the system).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BootOverride {
    /// `BootSourceOverrideTarget`.
    pub target: Option<String>,
    /// `BootSourceOverrideEnabled` (`Once`, `Continuous`, `Disabled`).
    pub enabled: Option<String>,
    /// `BootSourceOverrideMode` (`UEFI`, `Legacy`).
    pub mode: Option<String>,
}

/// One network interface of a system.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Nic {
    /// The interface's `Id`.
    pub id: String,
    /// `MACAddress`.
    pub mac: Option<String>,
    /// `PermanentMACAddress`.
    pub permanent_mac: Option<String>,
}

/// What discovery found about one system.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SystemInfo {
    /// The system's URL path (`/redfish/v1/Systems/1`).
    pub uri: String,
    /// `Id`.
    pub id: String,
    /// `Manufacturer`.
    pub manufacturer: Option<String>,
    /// `Model`.
    pub model: Option<String>,
    /// `SerialNumber`.
    pub serial_number: Option<String>,
    /// `BiosVersion`.
    pub bios_version: Option<String>,
    /// `PowerState`.
    pub power_state: Option<PowerState>,
    /// `Boot`.
    pub boot: BootOverride,
    /// Interfaces from `EthernetInterfaces`.
    pub nics: Vec<Nic>,
    /// Firmware versions by component (see [`Redfish::firmware`]).
    pub firmware: BTreeMap<String, String>,
    /// Reset types the BMC allows (empty when it does not say).
    pub reset_types: Vec<String>,
    /// Whether the system has a `Bios` resource.
    pub has_bios: bool,
}

/// A BIOS attribute whose actual value differs from the desired one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BiosChange {
    /// Attribute name.
    pub name: String,
    /// Desired value.
    pub desired: Value,
    /// Actual value; `None` when the BIOS has no such attribute.
    pub actual: Option<Value>,
}

/// A firmware component whose version is not the expected one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FirmwareMismatch {
    /// Component name (`BIOS`, `BMC`, or a firmware inventory `Id`).
    pub component: String,
    /// Expected version.
    pub expected: String,
    /// Actual version; `None` when the component was not found.
    pub actual: Option<String>,
}

/// BIOS attributes that differ: desired values not equal to the actual ones. A value
/// written as a string matches a number or boolean with the same text, since
/// inventories and blueprints are YAML where `"Enabled"`, `1` and `true` mix.
#[must_use]
pub fn bios_diff(desired: &BTreeMap<String, Value>, actual: &BTreeMap<String, Value>) -> Vec<BiosChange> {
    desired
        .iter()
        .filter(|(name, want)| actual.get(*name).is_none_or(|have| !same_value(want, have)))
        .map(|(name, want)| BiosChange { name: name.clone(), desired: want.clone(), actual: actual.get(name).cloned() })
        .collect()
}

fn same_value(left: &Value, right: &Value) -> bool {
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    left == right || text(left) == text(right)
}

/// Components whose version differs from `expected` (or that are missing).
#[must_use]
pub fn firmware_check(expected: &BTreeMap<String, String>, actual: &BTreeMap<String, String>) -> Vec<FirmwareMismatch> {
    expected
        .iter()
        .filter(|(component, version)| actual.get(*component) != Some(version))
        .map(|(component, version)| FirmwareMismatch {
            component: component.clone(),
            expected: version.clone(),
            actual: actual.get(component).cloned(),
        })
        .collect()
}

/// An answer from the BMC, already checked for success.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|value| value.to_str().ok()).map(str::to_owned)
    }
}

/// A connection to one BMC, authenticated. Close it with [`Redfish::close`] to end
/// its session; dropping it ends the session in the background when a Tokio runtime
/// is still running.
#[derive(Debug)]
pub struct Redfish {
    config: BmcConfig,
    http: reqwest::Client,
    auth: Auth,
    service_root: Value,
}

/// Builds the HTTP client for one endpoint with its TLS trust: the inventory's CA
/// file alone when given, the system roots otherwise, nothing at all only when the
/// endpoint is marked `insecure`.
pub(crate) fn http_client(
    host: &str,
    ca_file: Option<&Path>,
    insecure: bool,
    timeout: Duration,
) -> Result<reqwest::Client, BmcError> {
    let mut builder = http::client_builder(timeout);
    if let Some(path) = ca_file {
        let ca_error = |reason: String| BmcError::CaFile { host: host.to_owned(), path: path.to_path_buf(), reason };
        let pem = std::fs::read(path).map_err(|error| ca_error(error.to_string()))?;
        builder = http::trust_only(builder, &pem).map_err(ca_error)?;
    }
    if insecure {
        tracing::warn!(host, "TLS certificate of the BMC is not verified (`insecure: true` in the inventory)");
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    builder.build().map_err(|source| BmcError::Client { host: host.to_owned(), source })
}

/// The Redfish error message of a failed response: the `@Message.ExtendedInfo`
/// messages when present, else `error.message`.
fn error_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    let extended: Vec<&str> = error
        .get("@Message.ExtendedInfo")
        .and_then(Value::as_array)
        .map(|infos| infos.iter().filter_map(|info| info.get("Message").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    if extended.is_empty() {
        error.get("message").and_then(Value::as_str).map(str::to_owned)
    } else {
        Some(extended.join("; "))
    }
}

pub(crate) fn string_at(value: &Value, pointer: &str) -> Option<String> {
    value.pointer(pointer).and_then(Value::as_str).map(str::to_owned)
}

pub(crate) fn link(value: &Value, pointer: &str) -> Option<String> {
    string_at(value, &format!("{pointer}/@odata.id"))
}

pub(crate) fn members(collection: &Value) -> Vec<String> {
    collection
        .get("Members")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(|item| link(item, "")).collect())
        .unwrap_or_default()
}

/// Whether a transport error is a TLS failure (an untrusted or invalid certificate):
/// retrying cannot help, so it is reported at once.
fn is_tls_failure(error: &reqwest::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = current {
        if error.is::<rustls::Error>() {
            return true;
        }
        // An io::Error's `source()` skips the error it wraps; `get_ref()` is that error.
        current = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    false
}

/// Retry-After in seconds (the HTTP-date form is rare on BMCs and is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers.get("Retry-After")?.to_str().ok()?.trim().parse::<u64>().ok().map(Duration::from_secs)
}

impl Redfish {
    /// Connects and authenticates: a Redfish session when the service offers one,
    /// basic auth otherwise; the credentials are checked before this returns.
    ///
    /// # Errors
    /// Unreachable BMC, TLS failure, [`BmcError::AuthenticationFailed`].
    pub async fn connect(config: BmcConfig) -> Result<Self, BmcError> {
        let http = http_client(&config.host, config.ca_file.as_deref(), config.insecure, config.request_timeout)?;
        let mut client = Self { config, http, auth: Auth::Basic, service_root: Value::Null };
        // The service root is readable without credentials on conforming services;
        // on one that insists, it is read again once authenticated.
        let root_url = client.url("/redfish/v1/")?;
        client.service_root = match client.send(Method::GET, &root_url, None, false).await {
            Ok(reply) => client.json(&root_url, &reply)?,
            Err(BmcError::AuthenticationFailed { .. }) => Value::Null,
            Err(error) => return Err(error),
        };
        client.login().await?;
        if client.service_root.is_null() {
            let reply = client.send(Method::GET, &root_url, None, true).await?;
            client.service_root = client.json(&root_url, &reply)?;
        }
        Ok(client)
    }

    async fn login(&mut self) -> Result<(), BmcError> {
        let sessions = link(&self.service_root, "/Links/Sessions").or_else(|| {
            self.service_root
                .get("SessionService")
                .map(|_| "/redfish/v1/SessionService/Sessions".to_owned())
                .or_else(|| self.service_root.is_null().then(|| "/redfish/v1/SessionService/Sessions".to_owned()))
        });
        if let Some(path) = sessions {
            let url = self.url(&path)?;
            let body = json!({
                "UserName": self.config.credentials.username,
                "Password": self.config.credentials.password.expose(),
            });
            match self.send(Method::POST, &url, Some(&body), false).await {
                Ok(reply) => {
                    let token = reply.header("X-Auth-Token").and_then(|token| token_header(&token));
                    if let Some(token) = token {
                        let location = match reply.header("Location") {
                            Some(location) => Some(self.url(&location)?),
                            None => None,
                        };
                        tracing::debug!(host = %self.config.host, "Redfish session opened");
                        self.auth = Auth::Session { token, location };
                        return Ok(());
                    }
                    tracing::debug!(host = %self.config.host, "session created without a token; using basic auth");
                }
                Err(
                    BmcError::NotFound { .. }
                    | BmcError::Rejected { status: 405, .. }
                    | BmcError::Server { status: 501, .. },
                ) => {}
                Err(error) => return Err(error),
            }
        }
        tracing::debug!(host = %self.config.host, "no Redfish session service; using basic auth");
        self.auth = Auth::Basic;
        // Check the credentials now, so a wrong password fails here and not midway.
        let systems = link(&self.service_root, "/Systems").unwrap_or_else(|| "/redfish/v1/Systems".to_owned());
        let url = self.url(&systems)?;
        self.send(Method::GET, &url, None, true).await.map(|_| ())
    }

    /// Ends the session (a `DELETE` of it); nothing to do with basic auth.
    ///
    /// # Errors
    /// The `DELETE` failed (the session then expires on the BMC by itself).
    pub async fn close(mut self) -> Result<(), BmcError> {
        let auth = std::mem::replace(&mut self.auth, Auth::Basic);
        if let Auth::Session { token, location: Some(location) } = auth {
            let result = self
                .http
                .delete(&location)
                .header("X-Auth-Token", token)
                .send()
                .await
                .map_err(|source| self.transport_error(&Method::DELETE, &location, 1, source))?;
            let status = result.status();
            if !status.is_success() && status != StatusCode::NOT_FOUND {
                return Err(BmcError::Rejected {
                    host: self.config.host.clone(),
                    method: "DELETE".to_owned(),
                    url: location,
                    status: status.as_u16(),
                    message: None,
                });
            }
            tracing::debug!(host = %self.config.host, "Redfish session closed");
        }
        Ok(())
    }

    /// The host this BMC belongs to.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.config.host
    }

    /// Whether requests use a session token (else basic auth).
    #[must_use]
    pub fn has_session(&self) -> bool {
        matches!(self.auth, Auth::Session { .. })
    }

    fn url(&self, path: &str) -> Result<String, BmcError> {
        self.config.endpoint.join(path).map(String::from).map_err(|_| BmcError::Decode {
            host: self.config.host.clone(),
            url: path.to_owned(),
            reason: "not a URL path".to_owned(),
        })
    }

    fn json(&self, url: &str, reply: &Reply) -> Result<Value, BmcError> {
        serde_json::from_slice(&reply.body).map_err(|error| BmcError::Decode {
            host: self.config.host.clone(),
            url: url.to_owned(),
            reason: error.to_string(),
        })
    }

    fn transport_error(&self, method: &Method, url: &str, attempts: u32, source: reqwest::Error) -> BmcError {
        BmcError::Transport {
            host: self.config.host.clone(),
            method: method.to_string(),
            url: url.to_owned(),
            attempts,
            source,
        }
    }

    /// One request with retries, classified. A `POST` is retried only when the BMC
    /// cannot have acted on it (no connection, 429, 503): an action must not run twice.
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        authenticated: bool,
    ) -> Result<Reply, BmcError> {
        self.send_with(method, url, body, authenticated, None).await
    }

    async fn send_with(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        authenticated: bool,
        if_match: Option<&HeaderValue>,
    ) -> Result<Reply, BmcError> {
        let idempotent = method != Method::POST;
        let mut attempts = Attempts::new(self.config.retry);
        loop {
            let attempt = attempts.start();
            let last = attempts.is_last();
            let mut request = self.http.request(method.clone(), url).header("Accept", "application/json");
            if authenticated {
                request = self.auth.apply(request, &self.config.credentials);
            }
            if let Some(etag) = if_match {
                request = request.header("If-Match", etag.clone());
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(error) => {
                    let retryable =
                        (error.is_connect() && !is_tls_failure(&error)) || (idempotent && error.is_timeout());
                    if retryable && !last {
                        tracing::debug!(host = %self.config.host, %url, attempt, "no answer; retrying");
                        attempts.pause(None).await;
                        continue;
                    }
                    return Err(self.transport_error(&method, url, attempt, error));
                }
            };
            let status = response.status();
            let retryable = match status.as_u16() {
                429 | 503 => true,
                500 | 502 | 504 => idempotent,
                _ => false,
            };
            if retryable && !last {
                tracing::debug!(host = %self.config.host, %url, status = status.as_u16(), attempt, "retrying");
                attempts.pause(retry_after(response.headers())).await;
                continue;
            }
            let headers = response.headers().clone();
            let body =
                response.bytes().await.map_err(|error| self.transport_error(&method, url, attempt, error))?.to_vec();
            tracing::debug!(host = %self.config.host, %method, %url, status = status.as_u16(), "redfish");
            return self.classify(&method, url, Reply { status, headers, body });
        }
    }

    fn classify(&self, method: &Method, url: &str, reply: Reply) -> Result<Reply, BmcError> {
        let status = reply.status;
        if status.is_success() {
            return Ok(reply);
        }
        let host = self.config.host.clone();
        let code = status.as_u16();
        Err(match code {
            401 => BmcError::AuthenticationFailed { host, user: self.config.credentials.username.clone() },
            404 => BmcError::NotFound { host, url: url.to_owned() },
            500..=599 => BmcError::Server {
                host,
                method: method.to_string(),
                url: url.to_owned(),
                status: code,
                message: error_message(&reply.body),
            },
            _ => BmcError::Rejected {
                host,
                method: method.to_string(),
                url: url.to_owned(),
                status: code,
                message: error_message(&reply.body),
            },
        })
    }

    /// Follows a task monitor until the operation ends: the monitor answers 202 while
    /// it runs, then the operation's own response (or a Task with a final `TaskState`).
    async fn finish(&self, url: &str, reply: Reply) -> Result<Reply, BmcError> {
        if reply.status != StatusCode::ACCEPTED {
            return Ok(reply);
        }
        let Some(location) = reply.header("Location") else {
            return Ok(reply);
        };
        let monitor = self.url(&location)?;
        tracing::debug!(host = %self.config.host, %url, task = %monitor, "waiting for task");
        let started = Instant::now();
        let mut current = reply;
        loop {
            if current.status != StatusCode::ACCEPTED
                && let Some(state) = serde_json::from_slice::<Value>(&current.body)
                    .ok()
                    .and_then(|task| string_at(&task, "/TaskState").map(|state| (state, task)))
            {
                let (state, task) = state;
                match state.as_str() {
                    "Completed" => return Ok(current),
                    "Exception" | "Killed" | "Cancelled" | "Interrupted" => {
                        return Err(BmcError::TaskFailed {
                            host: self.config.host.clone(),
                            task: monitor,
                            state,
                            message: task
                                .pointer("/Messages")
                                .and_then(Value::as_array)
                                .and_then(|messages| messages.iter().find_map(|m| string_at(m, "/Message"))),
                        });
                    }
                    _ => {}
                }
            } else if current.status != StatusCode::ACCEPTED {
                return Ok(current);
            }
            if started.elapsed() >= self.config.task_timeout {
                return Err(BmcError::Timeout {
                    host: self.config.host.clone(),
                    what: format!("task `{monitor}`"),
                    waited: started.elapsed(),
                });
            }
            let wait =
                retry_after(&current.headers).unwrap_or(self.config.poll_interval).min(self.config.poll_interval * 4);
            tokio::time::sleep(wait).await;
            current = self.send(Method::GET, &monitor, None, true).await?;
        }
    }

    /// `GET` of a Redfish path (or absolute URL) as JSON.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn get(&self, path: &str) -> Result<Value, BmcError> {
        let url = self.url(path)?;
        let reply = self.send(Method::GET, &url, None, true).await?;
        self.json(&url, &reply)
    }

    /// `PATCH` of a resource, with `If-Match` when the resource has an ETag (some
    /// BMCs require it), waiting for a task when the BMC starts one.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn patch(&self, path: &str, body: &Value) -> Result<(), BmcError> {
        let url = self.url(path)?;
        let etag = self.send(Method::GET, &url, None, true).await?.headers.get("ETag").cloned();
        let reply = self.send_with(Method::PATCH, &url, Some(body), true, etag.as_ref()).await?;
        self.finish(&url, reply).await.map(|_| ())
    }

    /// `POST` of an action, waiting for a task when the BMC starts one.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn post(&self, path: &str, body: &Value) -> Result<(), BmcError> {
        let url = self.url(path)?;
        let reply = self.send(Method::POST, &url, Some(body), true).await?;
        self.finish(&url, reply).await.map(|_| ())
    }

    /// The paths of the BMC's systems.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn systems(&self) -> Result<Vec<String>, BmcError> {
        let path = link(&self.service_root, "/Systems").unwrap_or_else(|| "/redfish/v1/Systems".to_owned());
        Ok(members(&self.get(&path).await?))
    }

    /// The only system of the BMC (the common case: one BMC per node).
    ///
    /// # Errors
    /// [`BmcError::Unsupported`] when the BMC has none or several.
    pub async fn system(&self) -> Result<String, BmcError> {
        let mut systems = self.systems().await?;
        match systems.len() {
            1 => Ok(systems.remove(0)),
            count => Err(BmcError::Unsupported {
                host: self.config.host.clone(),
                what: format!("expected one system, found {count}"),
            }),
        }
    }

    /// Everything discovery reports about a system: identity, BIOS version, power,
    /// boot override, NIC MACs, firmware versions, allowed reset types.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn discover(&self, system: &str) -> Result<SystemInfo, BmcError> {
        let value = self.get(system).await?;
        let nics = match link(&value, "/EthernetInterfaces") {
            Some(path) => self.nics(&path).await?,
            None => Vec::new(),
        };
        let firmware = self.firmware_of(&value).await?;
        Ok(SystemInfo {
            uri: system.to_owned(),
            id: string_at(&value, "/Id").unwrap_or_default(),
            manufacturer: string_at(&value, "/Manufacturer"),
            model: string_at(&value, "/Model"),
            serial_number: string_at(&value, "/SerialNumber"),
            bios_version: string_at(&value, "/BiosVersion"),
            power_state: string_at(&value, "/PowerState").as_deref().and_then(PowerState::parse),
            boot: boot_of(&value),
            nics,
            firmware,
            reset_types: reset_types(&value),
            has_bios: link(&value, "/Bios").is_some(),
        })
    }

    async fn nics(&self, collection: &str) -> Result<Vec<Nic>, BmcError> {
        let mut nics = Vec::new();
        for path in members(&self.get(collection).await?) {
            let nic = self.get(&path).await?;
            nics.push(Nic {
                id: string_at(&nic, "/Id").unwrap_or_default(),
                mac: string_at(&nic, "/MACAddress"),
                permanent_mac: string_at(&nic, "/PermanentMACAddress"),
            });
        }
        Ok(nics)
    }

    /// Firmware versions by component: `BIOS` (the system's `BiosVersion`), `BMC`
    /// (its manager's `FirmwareVersion`), and every `UpdateService/FirmwareInventory`
    /// member by `Id`.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn firmware(&self, system: &str) -> Result<BTreeMap<String, String>, BmcError> {
        let value = self.get(system).await?;
        self.firmware_of(&value).await
    }

    async fn firmware_of(&self, system: &Value) -> Result<BTreeMap<String, String>, BmcError> {
        let mut versions = BTreeMap::new();
        if let Some(version) = string_at(system, "/BiosVersion") {
            versions.insert("BIOS".to_owned(), version);
        }
        if let Some(manager) = link(system, "/Links/ManagedBy/0") {
            let manager = self.get(&manager).await?;
            if let Some(version) = string_at(&manager, "/FirmwareVersion") {
                versions.insert("BMC".to_owned(), version);
            }
        }
        if let Some(update_service) = link(&self.service_root, "/UpdateService") {
            // Services advertise an inventory they do not always serve: its absence
            // leaves the system's and manager's versions.
            let inventory = match self.get(&update_service).await {
                Ok(service) => link(&service, "/FirmwareInventory"),
                Err(BmcError::NotFound { .. }) => None,
                Err(error) => return Err(error),
            };
            if let Some(inventory) = inventory {
                let items = match self.get(&inventory).await {
                    Ok(collection) => members(&collection),
                    Err(BmcError::NotFound { url, .. }) => {
                        tracing::debug!(host = %self.config.host, %url, "firmware inventory advertised but absent");
                        Vec::new()
                    }
                    Err(error) => return Err(error),
                };
                for item in items {
                    let item = self.get(&item).await?;
                    if let (Some(id), Some(version)) = (string_at(&item, "/Id"), string_at(&item, "/Version")) {
                        versions.insert(id, version);
                    }
                }
            }
        }
        Ok(versions)
    }

    /// The system's power state.
    ///
    /// # Errors
    /// See [`BmcError`]; a state Redfish does not define is a [`BmcError::Decode`].
    pub async fn power_state(&self, system: &str) -> Result<PowerState, BmcError> {
        let value = self.get(system).await?;
        let text = string_at(&value, "/PowerState").unwrap_or_default();
        PowerState::parse(&text).ok_or_else(|| BmcError::Decode {
            host: self.config.host.clone(),
            url: system.to_owned(),
            reason: format!("`PowerState` `{text}` is not a Redfish power state"),
        })
    }

    /// `ComputerSystem.Reset` with `reset_type`, refused before sending when the BMC
    /// lists the types it allows and this is not one of them.
    ///
    /// # Errors
    /// [`BmcError::Unsupported`], or see [`BmcError`].
    pub async fn reset(&self, system: &str, reset_type: ResetType) -> Result<(), BmcError> {
        let value = self.get(system).await?;
        let allowed = reset_types(&value);
        if !allowed.is_empty() && !allowed.iter().any(|allowed| allowed == reset_type.as_str()) {
            return Err(BmcError::Unsupported {
                host: self.config.host.clone(),
                what: format!("reset type `{}` not allowed (allowed: {})", reset_type.as_str(), allowed.join(", ")),
            });
        }
        let target = string_at(&value, "/Actions/#ComputerSystem.Reset/target")
            .unwrap_or_else(|| format!("{}/Actions/ComputerSystem.Reset", system.trim_end_matches('/')));
        tracing::info!(host = %self.config.host, system, reset = reset_type.as_str(), "reset");
        self.post(&target, &json!({ "ResetType": reset_type.as_str() })).await
    }

    /// Restarts a system that stopped answering, with the strongest reset it allows
    /// (see [`power_cycle_type`]); returns the reset sent.
    ///
    /// # Errors
    /// [`BmcError::Unsupported`] when the BMC allows no such reset, or see [`BmcError`].
    pub async fn power_cycle(&self, system: &str) -> Result<ResetType, BmcError> {
        let value = self.get(system).await?;
        let power = string_at(&value, "/PowerState").as_deref().and_then(PowerState::parse);
        let allowed = reset_types(&value);
        let reset_type = power_cycle_type(&allowed, power).ok_or_else(|| BmcError::Unsupported {
            host: self.config.host.clone(),
            what: format!("no reset that restarts a hung system (allowed: {})", allowed.join(", ")),
        })?;
        self.reset(system, reset_type).await?;
        Ok(reset_type)
    }

    /// Polls until the system reports `state`; BMCs apply power changes with a delay.
    ///
    /// # Errors
    /// [`BmcError::Timeout`], or see [`BmcError`].
    pub async fn wait_for_power(&self, system: &str, state: PowerState, timeout: Duration) -> Result<(), BmcError> {
        let started = Instant::now();
        loop {
            if self.power_state(system).await? == state {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(BmcError::Timeout {
                    host: self.config.host.clone(),
                    what: format!("power state `{}` of `{system}`", state.as_str()),
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }

    /// The system's boot override.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn boot_override(&self, system: &str) -> Result<BootOverride, BmcError> {
        Ok(boot_of(&self.get(system).await?))
    }

    /// Boots `target` once at the next start (`BootSourceOverrideEnabled: Once`) and
    /// returns the override the BMC reports afterwards.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn boot_once(&self, system: &str, target: BootTarget) -> Result<BootOverride, BmcError> {
        self.boot_once_in(system, target, None).await
    }

    /// As [`Self::boot_once`], in firmware boot mode `mode` (`UEFI`, `Legacy`) when
    /// given (`BootSourceOverrideMode`), else in the mode the system has.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn boot_once_in(
        &self,
        system: &str,
        target: BootTarget,
        mode: Option<&str>,
    ) -> Result<BootOverride, BmcError> {
        let mut boot = json!({
            "BootSourceOverrideTarget": target.as_str(),
            "BootSourceOverrideEnabled": "Once",
        });
        if let Some(mode) = mode {
            boot["BootSourceOverrideMode"] = json!(mode);
        }
        self.patch(system, &json!({ "Boot": boot })).await?;
        self.boot_override(system).await
    }

    async fn bios_path(&self, system: &str) -> Result<String, BmcError> {
        link(&self.get(system).await?, "/Bios").ok_or_else(|| BmcError::Unsupported {
            host: self.config.host.clone(),
            what: format!("system `{system}` has no Bios resource"),
        })
    }

    /// The BIOS attributes in effect (the `Bios` resource).
    ///
    /// # Errors
    /// [`BmcError::Unsupported`] without a `Bios` resource, or see [`BmcError`].
    pub async fn bios(&self, system: &str) -> Result<BTreeMap<String, Value>, BmcError> {
        let path = self.bios_path(system).await?;
        let bios = self.get(&path).await?;
        let attributes = bios.get("Attributes").and_then(Value::as_object).ok_or_else(|| BmcError::Decode {
            host: self.config.host.clone(),
            url: path.clone(),
            reason: "no `Attributes` object".to_owned(),
        })?;
        Ok(attributes.iter().map(|(name, value)| (name.clone(), value.clone())).collect())
    }

    /// Writes BIOS attributes to the settings object (`@Redfish.Settings`, else the
    /// `Bios` resource itself), with `@Redfish.SettingsApplyTime` `OnReset` where the
    /// BMC offers it; most BMCs apply them at the next reset.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn set_bios(&self, system: &str, attributes: &BTreeMap<String, Value>) -> Result<(), BmcError> {
        let settings = self.bios_settings(system).await?;
        self.write_bios_settings(&settings, attributes).await
    }
}

fn boot_of(system: &Value) -> BootOverride {
    BootOverride {
        target: string_at(system, "/Boot/BootSourceOverrideTarget"),
        enabled: string_at(system, "/Boot/BootSourceOverrideEnabled"),
        mode: string_at(system, "/Boot/BootSourceOverrideMode"),
    }
}

/// The reset that restarts a hung system, given the types its BMC allows
/// (`ResetType@Redfish.AllowableValues`; empty when it does not say) and its power
/// state: `On` for a system that is off; else `PowerCycle` (off, then on: what a
/// firmware or driver hang needs) when allowed, else `ForceRestart`; a BMC that lists
/// neither has none.
#[must_use]
pub fn power_cycle_type(allowed: &[String], power: Option<PowerState>) -> Option<ResetType> {
    let allows = |reset: ResetType| allowed.is_empty() || allowed.iter().any(|a| a == reset.as_str());
    let preferred: &[ResetType] = if power == Some(PowerState::Off) {
        &[ResetType::On, ResetType::ForceOn, ResetType::PowerCycle]
    } else {
        &[ResetType::PowerCycle, ResetType::ForceRestart]
    };
    preferred.iter().copied().find(|reset| allows(*reset))
}

fn reset_types(system: &Value) -> Vec<String> {
    system
        .pointer("/Actions/#ComputerSystem.Reset/ResetType@Redfish.AllowableValues")
        .and_then(Value::as_array)
        .map(|values| values.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl Drop for Redfish {
    fn drop(&mut self) {
        if let Auth::Session { token, location: Some(location) } = std::mem::replace(&mut self.auth, Auth::Basic) {
            // Without a runtime the session simply times out on the BMC.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let http = self.http.clone();
                runtime.spawn(async move {
                    let _ = http.delete(&location).header("X-Auth-Token", token).send().await;
                });
            }
        }
    }
}

pub mod settings;
pub mod update;

#[cfg(test)]
mod tests;
