//! The API server client: read an object, list what toolkit applied, server-side
//! apply, delete.
//!
//! Stage: observe/apply (Kubernetes). Input: a kubeconfig [`Connection`] and the
//! [`KubeObject`]s render made. Output: live objects (`None` when absent) and the
//! outcome of each change. Every request goes through [`KubeClient::send`]: it picks
//! the credentials (a static token or certificate, or an exec plugin's, run again
//! when it expired or the server answers 401), and [`status_error`] turns an
//! unsuccessful answer into a [`KubeError`] that names the object and says what to
//! do: the fields and managers of a 409, the field paths of a 422, the component
//! to install for an unknown kind.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::config::{Connection, Credentials};
use super::error::{FieldCause, FieldConflict, KubeError, install_hint};
use super::exec::{self, ExecCredential};
use crate::resource::kube::{FIELD_MANAGER, KubeObject, MANAGED_BY_LABEL};

/// How an apply is sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyOptions {
    /// Take over fields other managers own (`force=true`); only when the user asks.
    pub force: bool,
    /// Run admission and validation without persisting (`dryRun=All`).
    pub dry_run: bool,
}

/// What an apply did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The object did not exist (201 Created).
    pub created: bool,
    /// The object as the server has it afterwards (or would, on a dry run).
    pub object: Value,
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Gone.
    Deleted,
    /// Marked for deletion; finalizers still run.
    Finalizing,
    /// It was not there.
    Absent,
}

/// A client of one API server, authenticated as a kubeconfig context says.
#[derive(Debug)]
pub struct KubeClient {
    connection: Connection,
    /// The server URL requests go to (its host replaced by `tls-server-name`, if any).
    base: String,
    /// For static credentials (and exec plugins that give tokens).
    http: reqwest::Client,
    /// The exec plugin's last credential, with a client built for its certificate.
    exec: tokio::sync::Mutex<Option<(ExecCredential, reqwest::Client)>>,
}

/// Timeout of one request.
const TIMEOUT: Duration = Duration::from_secs(30);

impl KubeClient {
    /// A client for `connection`; nothing is sent yet.
    ///
    /// # Errors
    /// [`KubeError::Client`]: a CA or client certificate the TLS stack cannot use.
    pub fn new(connection: Connection) -> Result<Self, KubeError> {
        let identity = match &connection.credentials {
            Credentials::ClientCertificate { certificate, key } => Some((certificate.as_slice(), key.expose())),
            _ => None,
        };
        let (base, http) = build_http(&connection, identity)?;
        Ok(Self { connection, base, http, exec: tokio::sync::Mutex::new(None) })
    }

    /// The API server (as the kubeconfig names it).
    #[must_use]
    pub fn server(&self) -> &str {
        &self.connection.server
    }

    /// The object as the server has it; `None` when it does not exist.
    ///
    /// # Errors
    /// [`KubeError::KindNotServed`] when its kind is not installed; transport, auth.
    pub async fn get(&self, object: &KubeObject) -> Result<Option<Value>, KubeError> {
        let path = object.path();
        let (status, body) = self.send(Method::GET, &path, None).await?;
        match status {
            StatusCode::OK => decode(&Method::GET, &self.url(&path), &body).map(Some),
            StatusCode::NOT_FOUND if has_details(&body) => Ok(None),
            _ => Err(self.status_error(&Method::GET, &path, Some(object), status, &body)),
        }
    }

    /// Every object of a kind that carries toolkit's label, in all namespaces;
    /// `None` when the server does not serve the kind.
    ///
    /// # Errors
    /// Transport, auth, or an answer that is not a list.
    pub async fn list_managed(&self, api_version: &str, plural: &str) -> Result<Option<Vec<Value>>, KubeError> {
        let prefix = if api_version.contains('/') { "apis" } else { "api" };
        let selector = format!("{MANAGED_BY_LABEL}={FIELD_MANAGER}").replace('/', "%2F").replace('=', "%3D");
        let path = format!("/{prefix}/{api_version}/{plural}?labelSelector={selector}");
        let (status, body) = self.send(Method::GET, &path, None).await?;
        match status {
            StatusCode::OK => {
                let list = decode(&Method::GET, &self.url(&path), &body)?;
                let items = list.get("items").and_then(Value::as_array).ok_or_else(|| KubeError::Decode {
                    method: "GET".into(),
                    url: self.url(&path),
                    reason: "no `items` list".into(),
                })?;
                Ok(Some(items.clone()))
            }
            StatusCode::NOT_FOUND if !has_details(&body) => Ok(None),
            _ => Err(self.status_error(&Method::GET, &path, None, status, &body)),
        }
    }

    /// Server-side apply of `object` as field manager `toolkit`.
    ///
    /// # Errors
    /// [`KubeError::Conflict`] (409, with the fields and their managers),
    /// [`KubeError::Invalid`] (422, with field paths), [`KubeError::KindNotServed`],
    /// [`KubeError::NamespaceMissing`], auth, transport.
    pub async fn apply(&self, object: &KubeObject, options: ApplyOptions) -> Result<Applied, KubeError> {
        let mut path = format!("{}?fieldManager={FIELD_MANAGER}&fieldValidation=Strict", object.path());
        if options.force {
            path.push_str("&force=true");
        }
        if options.dry_run {
            path.push_str("&dryRun=All");
        }
        // JSON is YAML: the apply content type takes either.
        let body = serde_json::to_vec(&object.body).map_err(|error| KubeError::Decode {
            method: "PATCH".into(),
            url: self.url(&path),
            reason: error.to_string(),
        })?;
        let (status, reply) = self.send(Method::PATCH, &path, Some(body)).await?;
        match status {
            StatusCode::OK | StatusCode::CREATED => Ok(Applied {
                created: status == StatusCode::CREATED,
                object: decode(&Method::PATCH, &self.url(&path), &reply)?,
            }),
            _ => Err(self.status_error(&Method::PATCH, &path, Some(object), status, &reply)),
        }
    }

    /// Deletes the object at `path` (its dependents in the background).
    ///
    /// # Errors
    /// Auth, transport, or a refusal.
    pub async fn delete(&self, path: &str, dry_run: bool) -> Result<Deleted, KubeError> {
        let mut full = format!("{path}?propagationPolicy=Background");
        if dry_run {
            full.push_str("&dryRun=All");
        }
        let (status, body) = self.send(Method::DELETE, &full, None).await?;
        match status {
            StatusCode::OK | StatusCode::ACCEPTED => {
                let reply = decode(&Method::DELETE, &self.url(&full), &body)?;
                // A `Status` when it is gone; the object itself while finalizers run.
                let pending = reply.get("kind").and_then(Value::as_str) != Some("Status")
                    && reply.pointer("/metadata/deletionTimestamp").is_some();
                Ok(if pending || status == StatusCode::ACCEPTED { Deleted::Finalizing } else { Deleted::Deleted })
            }
            // Gone already, or its kind with it.
            StatusCode::NOT_FOUND => Ok(Deleted::Absent),
            _ => Err(self.status_error(&Method::DELETE, &full, None, status, &body)),
        }
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.connection.server)
    }

    /// Sends one request with the context's credentials; an exec plugin's credential
    /// is renewed when it expired, and once more when the server answers 401.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Vec<u8>), KubeError> {
        let mut renewed = false;
        loop {
            let (http, token) = self.credentials(renewed).await?;
            // A log is text/plain; the server may refuse a JSON-only Accept for it.
            let accept = if path.contains("/log?") { "text/plain, */*" } else { "application/json" };
            let mut request = http.request(method.clone(), format!("{}{path}", self.base)).header("Accept", accept);
            if let Some(token) = token {
                request = request.header(AUTHORIZATION, token);
            }
            if let Some(body) = &body {
                request = request.header(CONTENT_TYPE, "application/apply-patch+yaml").body(body.clone());
            }
            let response = request.send().await.map_err(|error| KubeError::Transport {
                method: method.to_string(),
                url: self.url(path),
                reason: chain(&error),
            })?;
            let status = response.status();
            let bytes = response.bytes().await.map_err(|error| KubeError::Transport {
                method: method.to_string(),
                url: self.url(path),
                reason: chain(&error),
            })?;
            let is_exec = matches!(self.connection.credentials, Credentials::Exec(_));
            if status == StatusCode::UNAUTHORIZED && is_exec && !renewed {
                renewed = true;
                continue;
            }
            return Ok((status, bytes.to_vec()));
        }
    }

    /// The client and `Authorization` header for the next request.
    async fn credentials(&self, renew: bool) -> Result<(reqwest::Client, Option<HeaderValue>), KubeError> {
        match &self.connection.credentials {
            Credentials::Anonymous | Credentials::ClientCertificate { .. } => Ok((self.http.clone(), None)),
            Credentials::Token(token) => Ok((self.http.clone(), Some(bearer(token.expose())))),
            Credentials::Exec(plugin) => {
                let mut cached = self.exec.lock().await;
                let stale = cached.as_ref().is_none_or(|(credential, _)| renew || !credential.is_fresh());
                if stale {
                    let credential = exec::run(plugin, &self.connection).await?;
                    let http = match (&credential.certificate, &credential.key) {
                        (Some(certificate), Some(key)) => {
                            build_http(&self.connection, Some((certificate, key.expose())))?.1
                        }
                        _ => self.http.clone(),
                    };
                    *cached = Some((credential, http));
                }
                let (credential, http) = cached.as_ref().ok_or_else(|| KubeError::ExecPlugin {
                    path: self.connection.path.clone(),
                    command: plugin.command.clone(),
                    reason: "no credential".into(),
                })?;
                Ok((http.clone(), credential.token.as_ref().map(|token| bearer(token.expose()))))
            }
        }
    }

    pub(super) fn status_error(
        &self,
        method: &Method,
        path: &str,
        object: Option<&KubeObject>,
        status: StatusCode,
        body: &[u8],
    ) -> KubeError {
        status_error(&self.connection, method, &self.url(path), object, status, body)
    }
}

/// `Authorization: Bearer …`, marked sensitive so no `Debug` or HTTP/2 table shows it.
fn bearer(token: &str) -> HeaderValue {
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

/// The server URL requests use and a client trusting the kubeconfig's CA, with a
/// client certificate when given.
fn build_http(
    connection: &Connection,
    identity: Option<(&[u8], &str)>,
) -> Result<(String, reqwest::Client), KubeError> {
    let fail = |reason: String| KubeError::Client { path: connection.path.clone(), reason };
    let mut builder = crate::http::client_builder(TIMEOUT);
    if let Some(pem) = &connection.certificate_authority {
        builder = crate::http::trust_only(builder, pem).map_err(|error| fail(format!("the cluster's CA: {error}")))?;
    }
    if connection.insecure {
        tracing::warn!(server = connection.server, "API server certificate not verified (`insecure-skip-tls-verify`)");
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    if let Some((certificate, key)) = identity {
        let mut pem = certificate.to_vec();
        pem.push(b'\n');
        pem.extend_from_slice(key.as_bytes());
        let identity = reqwest::Identity::from_pem(&pem)
            .map_err(|error| fail(format!("the client certificate or key cannot be used: {}", chain(&error))))?;
        builder = builder.identity(identity);
    }
    match &connection.proxy_url {
        Some(proxy) => {
            let proxy = reqwest::Proxy::all(proxy).map_err(|error| fail(format!("`proxy-url`: {error}")))?;
            builder = builder.proxy(proxy);
        }
        None => builder = builder.no_proxy(),
    }
    let mut base = connection.server.clone();
    // The certificate names `tls-server-name`, not the address in `server`: request
    // that name and resolve it to the server's address.
    if let Some(name) = &connection.tls_server_name {
        let url = reqwest::Url::parse(&connection.server).map_err(|error| fail(format!("server: {error}")))?;
        let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
        let port = url.port_or_known_default().unwrap_or(443);
        let address: SocketAddr = (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addresses| addresses.next())
            .ok_or_else(|| fail(format!("cannot resolve the server `{host}`")))?;
        builder = builder.resolve(name, address);
        let mut renamed = url.clone();
        renamed.set_host(Some(name)).map_err(|error| fail(format!("`tls-server-name` `{name}`: {error}")))?;
        renamed.as_str().trim_end_matches('/').clone_into(&mut base);
    }
    let client = builder.build().map_err(|error| fail(format!("cannot build the HTTP client: {}", chain(&error))))?;
    Ok((base, client))
}

/// An error and its causes on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

pub(super) fn decode(method: &Method, url: &str, body: &[u8]) -> Result<Value, KubeError> {
    serde_json::from_slice(body).map_err(|error| KubeError::Decode {
        method: method.to_string(),
        url: url.to_owned(),
        reason: format!("not JSON: {error}"),
    })
}

/// Whether a `Status` body has `details`: a 404 with them is a missing object (or
/// namespace), one without is a path the server does not serve at all.
fn has_details(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|status| names_something(&status))
}

/// Whether a `Status` has `details` naming an object or a kind (`details: {}` names nothing).
fn names_something(status: &Value) -> bool {
    ["/details/name", "/details/kind"]
        .iter()
        .any(|pointer| status.pointer(pointer).and_then(Value::as_str).is_some_and(|text| !text.is_empty()))
}

/// The [`KubeError`] of an unsuccessful answer, from its `Status` body.
#[must_use]
pub fn status_error(
    connection: &Connection,
    method: &Method,
    url: &str,
    object: Option<&KubeObject>,
    status: StatusCode,
    body: &[u8],
) -> KubeError {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let text = |pointer: &str| parsed.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    let message = match text("/message") {
        empty if empty.is_empty() => String::from_utf8_lossy(body).trim().chars().take(300).collect(),
        message => message,
    };
    let causes: Vec<FieldCause> = parsed
        .pointer("/details/causes")
        .and_then(Value::as_array)
        .map(|causes| {
            causes
                .iter()
                .map(|cause| {
                    let field = |key: &str| cause.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                    FieldCause { reason: field("reason"), field: field("field"), message: field("message") }
                })
                .collect()
        })
        .unwrap_or_default();
    let name = object.map_or_else(|| url.to_owned(), KubeObject::display);
    match status {
        StatusCode::UNAUTHORIZED => KubeError::Unauthorized {
            server: connection.server.clone(),
            user: connection.user.clone(),
            context: connection.context.clone(),
        },
        StatusCode::FORBIDDEN => KubeError::Forbidden { server: connection.server.clone(), message },
        StatusCode::CONFLICT if causes.iter().any(|cause| cause.reason == "FieldManagerConflict") => {
            KubeError::Conflict {
                object: name,
                conflicts: causes
                    .into_iter()
                    .filter(|cause| cause.reason == "FieldManagerConflict")
                    .map(|cause| FieldConflict {
                        manager: cause.message.strip_prefix("conflict with ").unwrap_or(&cause.message).to_owned(),
                        field: cause.field,
                    })
                    .collect(),
            }
        }
        StatusCode::CONFLICT => KubeError::Stale { object: name, message },
        StatusCode::UNPROCESSABLE_ENTITY => KubeError::Invalid { object: name, message, causes },
        StatusCode::NOT_FOUND if !names_something(&parsed) && object.is_some() => {
            let object =
                object.map(|object| (object.kind.clone(), object.api_version.clone(), object.group().to_owned()));
            let (kind, api_version, group) = object.unwrap_or_default();
            KubeError::KindNotServed {
                server: connection.server.clone(),
                kind,
                api_version,
                hint: install_hint(&group),
            }
        }
        StatusCode::NOT_FOUND if *method == Method::PATCH && text("/details/kind") == "namespaces" => {
            KubeError::NamespaceMissing { object: name, message }
        }
        _ => KubeError::Status {
            method: method.to_string(),
            url: url.to_owned(),
            code: status.as_u16(),
            reason: text("/reason"),
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn connection() -> Connection {
        Connection {
            path: "kubeconfig".into(),
            context: "ci".into(),
            user: "toolkit".into(),
            server: "https://10.0.0.1:6443".into(),
            certificate_authority: None,
            certificate_authority_data: None,
            insecure: false,
            tls_server_name: None,
            proxy_url: None,
            credentials: Credentials::Anonymous,
            namespace: None,
        }
    }

    /// `tests/support/kube-responses/<name>` (SOURCE.md there cites each format).
    fn response(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/support/kube-responses/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
    }

    fn error(method: &Method, code: u16, name: &str) -> KubeError {
        let queue = KubeObject::new(
            "clusterqueues",
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "research"}}),
        );
        let status = StatusCode::from_u16(code).expect("code");
        status_error(&connection(), method, "https://10.0.0.1:6443/x", Some(&queue), status, &response(name))
    }

    #[test]
    fn a_conflict_names_each_field_and_its_manager() {
        let error = error(&Method::PATCH, 409, "conflict-409.json");
        let KubeError::Conflict { conflicts, .. } = &error else { panic!("{error:?}") };
        assert_eq!(
            conflicts,
            &[
                FieldConflict { manager: "\"helm\" using nvidia.com/v1".into(), field: ".spec.mig.strategy".into() },
                FieldConflict { manager: "\"helm\" using nvidia.com/v1".into(), field: ".spec.driver.enabled".into() },
            ]
        );
        assert_eq!(
            error.to_string(),
            "ClusterQueue/research: apply conflicts with other managers: `.spec.mig.strategy` is owned by \"helm\" \
             using nvidia.com/v1, `.spec.driver.enabled` is owned by \"helm\" using nvidia.com/v1; keep their values \
             by removing these fields from the blueprint, or take them over with `--force-conflicts`"
        );
        assert!(matches!(super::tests::error(&Method::PATCH, 409, "stale-409.json"), KubeError::Stale { .. }));
    }

    #[test]
    fn invalid_not_found_and_auth_say_what_to_do() {
        assert_eq!(
            error(&Method::PATCH, 422, "invalid-422.json").to_string(),
            "ClusterQueue/research: refused as invalid by the API server: `spec.levels`: Invalid value: \"array\": must be unique"
        );
        let missing_kind = error(&Method::GET, 404, "notfound-kind-404.json").to_string();
        assert!(
            missing_kind.starts_with(
                "https://10.0.0.1:6443 does not serve `ClusterQueue` in `kueue.x-k8s.io/v1beta2`: Kueue is not installed"
            ),
            "{missing_kind}"
        );
        assert!(matches!(
            error(&Method::PATCH, 404, "notfound-namespace-404.json"),
            KubeError::NamespaceMissing { .. }
        ));
        assert!(has_details(&response("notfound-object-404.json")));
        assert!(!has_details(&response("notfound-kind-404.json")));
        assert!(!has_details(br#"{"kind":"Status","details":{}}"#), "empty details name nothing");
        assert!(
            error(&Method::GET, 401, "unauthorized-401.json")
                .to_string()
                .contains("user `toolkit` (kubeconfig context `ci`)")
        );
        let forbidden = error(&Method::PATCH, 403, "forbidden-403.json").to_string();
        assert!(forbidden.contains("cannot patch resource \"clusterqueues\""), "{forbidden}");
    }
}
