//! Errors of the Redfish client.
//!
//! Stage: observe/apply (BMC). Input: HTTP outcomes. Output: [`BmcError`], each naming the
//! BMC's host and the URL or user involved. A password is never part of an error: the
//! variants have no field that could hold one, and transport errors carry only URLs
//! that the client built without credentials.

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::inventory::secrets::SecretError;

/// Why a BMC could not be reached, authenticated, read or changed.
#[derive(Debug, Error)]
pub enum BmcError {
    /// The inventory has no `bmcs` entry for the host.
    #[error("no BMC for host `{host}` in the inventory's `bmcs`")]
    NotInInventory {
        /// The host.
        host: String,
    },
    /// A credential reference could not be resolved.
    #[error("BMC `{host}`: {source}")]
    Secret {
        /// The host.
        host: String,
        /// Which reference and why (never its value).
        #[source]
        source: SecretError,
    },
    /// The endpoint is not an `http(s)://` URL.
    #[error("BMC `{host}`: endpoint `{endpoint}` is not an http(s) URL")]
    InvalidEndpoint {
        /// The host.
        host: String,
        /// The endpoint as written.
        endpoint: String,
    },
    /// The CA file could not be read or holds no certificate.
    #[error("BMC `{host}`: cannot use CA file `{path}`: {reason}")]
    CaFile {
        /// The host.
        host: String,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("BMC `{host}`: cannot build the HTTP client")]
    Client {
        /// The host.
        host: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The request did not get an answer (connection refused, TLS failure, timeout),
    /// after the retries.
    #[error("BMC `{host}`: {method} `{url}` failed after {attempts} attempt(s)")]
    Transport {
        /// The host.
        host: String,
        /// HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// How many times it was tried.
        attempts: u32,
        /// The last transport error.
        #[source]
        source: reqwest::Error,
    },
    /// Values are queued on the BMC for the next reset that the blueprint does not
    /// want: a reset would apply them, so toolkit does not send one.
    #[error(
        "BMC `{host}`: BIOS values the blueprint does not want are queued for the next reset: {settings}; \
         toolkit does not reset the host while they are queued. Clear them on the BMC (`{settings_uri}`) \
         or add them to the node's hardware profile"
    )]
    UnwantedPending {
        /// The host.
        host: String,
        /// The queued values, each with the value in effect.
        settings: String,
        /// The settings object that holds them.
        settings_uri: String,
    },
    /// The BMC refused the credentials (HTTP 401).
    #[error("authentication failed for BMC {host} as {user}")]
    AuthenticationFailed {
        /// The host.
        host: String,
        /// The user name (never the password).
        user: String,
    },
    /// The BMC has no such resource (HTTP 404).
    #[error("BMC `{host}`: `{url}` not found (HTTP 404)")]
    NotFound {
        /// The host.
        host: String,
        /// The URL.
        url: String,
    },
    /// The BMC failed (HTTP 5xx) after the retries.
    #[error("BMC `{host}`: {method} `{url}` failed with HTTP {status}{}", message_suffix(.message.as_deref()))]
    Server {
        /// The host.
        host: String,
        /// HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// HTTP status code.
        status: u16,
        /// The Redfish error message (`@Message.ExtendedInfo` or `error.message`).
        message: Option<String>,
    },
    /// The BMC rejected the request (HTTP 4xx other than 401 and 404).
    #[error("BMC `{host}`: {method} `{url}` rejected with HTTP {status}{}", message_suffix(.message.as_deref()))]
    Rejected {
        /// The host.
        host: String,
        /// HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// HTTP status code.
        status: u16,
        /// The Redfish error message, if any.
        message: Option<String>,
    },
    /// A response body is not the JSON expected.
    #[error("BMC `{host}`: unexpected answer from `{url}`: {reason}")]
    Decode {
        /// The host.
        host: String,
        /// The URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// The BMC does not offer what was asked (no BIOS resource, a reset type it does not allow…).
    #[error("BMC `{host}`: {what}")]
    Unsupported {
        /// The host.
        host: String,
        /// What is missing.
        what: String,
    },
    /// A long operation's task ended in failure.
    #[error("BMC `{host}`: task `{task}` ended `{state}`{}", message_suffix(.message.as_deref()))]
    TaskFailed {
        /// The host.
        host: String,
        /// The task monitor URL.
        task: String,
        /// The final `TaskState`.
        state: String,
        /// The task's message, if any.
        message: Option<String>,
    },
    /// Waiting for a task or a state took too long.
    #[error("BMC `{host}`: {what} not done after {waited:?}")]
    Timeout {
        /// The host.
        host: String,
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },
}

fn message_suffix(message: Option<&str>) -> String {
    message.map(|m| format!(": {m}")).unwrap_or_default()
}
