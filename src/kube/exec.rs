//! Exec credential plugins (`client.authentication.k8s.io/v1` and `v1beta1`): run the
//! kubeconfig's program, read the `ExecCredential` it prints.
//!
//! Stage: observe/apply (Kubernetes). Input: an [`ExecPlugin`] and the cluster it is
//! for. Output: an [`ExecCredential`] (a token, or a client certificate and key) with
//! its expiry. The program gets `KUBERNETES_EXEC_INFO` (never interactive: toolkit
//! runs without a terminal for it) and the cluster's server and CA when the
//! kubeconfig asks for them (`provideClusterInfo`). What it prints is a secret: an
//! error quotes its stderr, never its stdout.

use std::path::Path;
use std::process::Stdio;

use serde::Deserialize;
use serde_json::json;

use super::config::{Connection, ExecPlugin};
use super::error::KubeError;
use crate::http::Sensitive;

/// What a plugin gave.
#[derive(Debug, Clone)]
pub struct ExecCredential {
    /// A bearer token…
    pub token: Option<Sensitive>,
    /// …or a client certificate (PEM)…
    pub certificate: Option<Vec<u8>>,
    /// …and its key (PEM).
    pub key: Option<Sensitive>,
    /// When to run the plugin again; `None`: valid for the whole run.
    pub expires: Option<jiff::Timestamp>,
}

impl ExecCredential {
    /// Whether it is still good (a minute of margin, as requests take time).
    #[must_use]
    pub fn is_fresh(&self) -> bool {
        self.expires.is_none_or(|expires| {
            jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_secs(60)).is_ok_and(|soon| soon < expires)
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    api_version: String,
    kind: String,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    expiration_timestamp: Option<String>,
}

/// Runs `plugin` for `connection`'s cluster.
///
/// # Errors
/// [`KubeError::ExecPlugin`]: the program is missing (with its install hint), fails
/// (with its stderr), or prints no usable `ExecCredential`.
pub async fn run(plugin: &ExecPlugin, connection: &Connection) -> Result<ExecCredential, KubeError> {
    let fail = |reason: String| KubeError::ExecPlugin {
        path: connection.path.clone(),
        command: plugin.command.clone(),
        reason,
    };
    let mut spec = json!({"interactive": false});
    if plugin.provide_cluster_info {
        let mut cluster = json!({"server": connection.server});
        if let Some(data) = &connection.certificate_authority_data {
            cluster["certificate-authority-data"] = json!(data);
        }
        if let Some(name) = &connection.tls_server_name {
            cluster["tls-server-name"] = json!(name);
        }
        if connection.insecure {
            cluster["insecure-skip-tls-verify"] = json!(true);
        }
        spec["cluster"] = cluster;
    }
    let info = json!({"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec});
    // A path with a `/` is relative to the kubeconfig (as kubectl resolves it); a bare
    // name is looked up in PATH.
    let program = if plugin.command.contains('/') && Path::new(&plugin.command).is_relative() {
        connection.path.parent().unwrap_or(Path::new(".")).join(&plugin.command)
    } else {
        plugin.command.clone().into()
    };
    let output = tokio::process::Command::new(&program)
        .args(&plugin.args)
        .envs(plugin.env.iter().map(|(name, value)| (name, value)))
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|error| {
            let hint = plugin.install_hint.as_deref().map(|hint| format!("; {}", hint.trim())).unwrap_or_default();
            fail(format!("cannot run it: {error}{hint}"))
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(fail(format!("{}: {}", output.status, stderr.trim())));
    }
    let printed: Output = serde_json::from_slice(&output.stdout)
        .map_err(|error| fail(format!("its output is not an ExecCredential JSON object ({error})")))?;
    if printed.kind != "ExecCredential" || printed.api_version != plugin.api_version {
        return Err(fail(format!(
            "it printed `{}` `{}`, the kubeconfig asks for `ExecCredential` `{}`",
            printed.api_version, printed.kind, plugin.api_version
        )));
    }
    let status = printed.status.ok_or_else(|| fail("its ExecCredential has no `status`".to_owned()))?;
    let expires = status
        .expiration_timestamp
        .as_deref()
        .map(|text| {
            text.parse::<jiff::Timestamp>().map_err(|_| fail(format!("`expirationTimestamp` `{text}` is not RFC 3339")))
        })
        .transpose()?;
    let credential = ExecCredential {
        token: status.token.filter(|token| !token.is_empty()).map(Sensitive::new),
        certificate: status.client_certificate_data.map(String::into_bytes),
        key: status.client_key_data.map(Sensitive::new),
        expires,
    };
    match (&credential.token, &credential.certificate, &credential.key) {
        (Some(_), None, None) | (None, Some(_), Some(_)) => Ok(credential),
        _ => Err(fail(
            "its ExecCredential must hold `status.token`, or `status.clientCertificateData` and `status.clientKeyData`"
                .to_owned(),
        )),
    }
}
