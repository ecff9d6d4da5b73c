//! kubeconfig files: the context to use, its cluster (server and CA) and its user
//! (client certificate, bearer token, or exec credential plugin).
//!
//! Stage: observe/apply (Kubernetes). Input: a kubeconfig file (the inventory names
//! it) and an optional context. Output: a [`Connection`]: everything the client
//! needs, credentials read from their files and held as [`Sensitive`]. Fields kubectl
//! knows that toolkit does not use (`preferences`, `extensions`) are ignored; auth
//! it cannot do (`auth-provider`, basic auth) is refused with what to use instead.
//! Relative paths are taken from the kubeconfig's directory, as kubectl does.

use std::path::{Path, PathBuf};

use data_encoding::BASE64;
use serde::Deserialize;

use super::error::KubeError;
use crate::http::Sensitive;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct KubeconfigFile {
    #[serde(default)]
    clusters: Vec<Named<ClusterFile>>,
    #[serde(default)]
    users: Vec<Named<UserFile>>,
    #[serde(default)]
    contexts: Vec<Named<ContextFile>>,
    #[serde(default)]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context", default)]
    item: Option<T>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterFile {
    server: String,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    certificate_authority: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    #[serde(default)]
    tls_server_name: Option<String>,
    #[serde(default)]
    proxy_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct UserFile {
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    client_certificate: Option<PathBuf>,
    #[serde(default)]
    client_key: Option<PathBuf>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<PathBuf>,
    #[serde(default)]
    exec: Option<ExecFile>,
    #[serde(default)]
    auth_provider: Option<serde_norway::Value>,
    #[serde(default)]
    username: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecFile {
    api_version: String,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Option<Vec<EnvVar>>,
    #[serde(default)]
    install_hint: Option<String>,
    #[serde(default)]
    provide_cluster_info: bool,
    #[serde(default)]
    interactive_mode: Option<String>,
}

#[derive(Debug, Deserialize)]
struct EnvVar {
    name: String,
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ContextFile {
    cluster: String,
    user: String,
    #[serde(default)]
    namespace: Option<String>,
}

/// An exec credential plugin (`client.authentication.k8s.io`).
#[derive(Debug, Clone)]
pub struct ExecPlugin {
    /// `client.authentication.k8s.io/v1` (or `v1beta1`).
    pub api_version: String,
    /// The program: a name looked up in `PATH`, or a path (relative to the kubeconfig).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// What to tell the user when the program is missing.
    pub install_hint: Option<String>,
    /// Pass the cluster (server, CA) in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: bool,
}

/// How requests authenticate.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// None (the server may allow anonymous reads).
    Anonymous,
    /// `Authorization: Bearer …`.
    Token(Sensitive),
    /// A client certificate and its key, PEM.
    ClientCertificate {
        /// Certificate chain, PEM.
        certificate: Vec<u8>,
        /// Private key, PEM (RSA, SEC1 or PKCS#8).
        key: Sensitive,
    },
    /// Run a plugin for a token or a certificate.
    Exec(ExecPlugin),
}

/// Everything needed to talk to one API server, as a kubeconfig context says.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The kubeconfig file (named in errors).
    pub path: PathBuf,
    /// The context used.
    pub context: String,
    /// The context's user (named in errors).
    pub user: String,
    /// `https://host:port` of the API server.
    pub server: String,
    /// CA bundle (PEM) that must have signed the server's certificate; `None`: system roots.
    pub certificate_authority: Option<Vec<u8>>,
    /// Base64 of the CA bundle as the kubeconfig had it (for exec plugins' cluster info).
    pub certificate_authority_data: Option<String>,
    /// Accept any server certificate (`insecure-skip-tls-verify`).
    pub insecure: bool,
    /// Name the server certificate must have when it differs from the URL's host.
    pub tls_server_name: Option<String>,
    /// Proxy for all requests.
    pub proxy_url: Option<String>,
    /// How requests authenticate.
    pub credentials: Credentials,
    /// The context's default namespace.
    pub namespace: Option<String>,
}

impl Connection {
    /// Reads `path` and resolves `context` (default: its `current-context`).
    ///
    /// # Errors
    /// [`KubeError::Config`]: unreadable, not a kubeconfig (with line and column), no
    /// such context, cluster or user, a credential file missing, or auth toolkit
    /// cannot do.
    pub fn load(path: &Path, context: Option<&str>) -> Result<Self, KubeError> {
        let error = |reason: String| KubeError::Config { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|io| {
            error(if io.kind() == std::io::ErrorKind::NotFound {
                "it does not exist: kubeconfigs hold credentials and are not in the repository; write it (`kubeadm \
                 init` leaves /etc/kubernetes/admin.conf, `gcloud container clusters get-credentials` and `aws eks \
                 update-kubeconfig --kubeconfig PATH` write one) or point `kubernetes.kubeconfig` in the inventory at \
                 yours"
                    .to_owned()
            } else {
                format!("cannot read it: {io}")
            })
        })?;
        let file: KubeconfigFile = serde_norway::from_str(&text).map_err(|parse| error(parse.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let names = |items: &[String]| if items.is_empty() { "none".to_owned() } else { items.join(", ") };
        let context_name = match context {
            Some(name) => name.to_owned(),
            None => file.current_context.clone().filter(|name| !name.is_empty()).ok_or_else(|| {
                error("it has no `current-context`: set one, or name the context with `kubernetes.context` in the inventory".to_owned())
            })?,
        };
        let context_names: Vec<String> = file.contexts.iter().map(|context| context.name.clone()).collect();
        let chosen = file
            .contexts
            .iter()
            .find(|context| context.name == context_name)
            .and_then(|context| context.item.as_ref())
            .ok_or_else(|| error(format!("no context `{context_name}` (contexts: {})", names(&context_names))))?;
        let cluster_names: Vec<String> = file.clusters.iter().map(|cluster| cluster.name.clone()).collect();
        let cluster = file
            .clusters
            .iter()
            .find(|cluster| cluster.name == chosen.cluster)
            .and_then(|cluster| cluster.item.as_ref())
            .ok_or_else(|| {
                error(format!(
                    "context `{context_name}` names cluster `{}`, which is not under `clusters` (clusters: {})",
                    chosen.cluster,
                    names(&cluster_names)
                ))
            })?;
        let user_names: Vec<String> = file.users.iter().map(|user| user.name.clone()).collect();
        let user =
            file.users.iter().find(|user| user.name == chosen.user).and_then(|user| user.item.as_ref()).ok_or_else(
                || {
                    error(format!(
                        "context `{context_name}` names user `{}`, which is not under `users` (users: {})",
                        chosen.user,
                        names(&user_names)
                    ))
                },
            )?;
        let read = |what: &str, file: &Path| -> Result<Vec<u8>, KubeError> {
            let full = if file.is_absolute() { file.to_path_buf() } else { base.join(file) };
            std::fs::read(&full).map_err(|io| error(format!("{what} `{}`: {io}", full.display())))
        };
        let decode = |what: &str, data: &str| -> Result<Vec<u8>, KubeError> {
            let compact: String = data.chars().filter(|c| !c.is_whitespace()).collect();
            BASE64.decode(compact.as_bytes()).map_err(|_| error(format!("`{what}` is not base64")))
        };
        if !cluster.server.starts_with("https://") && !cluster.server.starts_with("http://") {
            return Err(error(format!(
                "cluster `{}`: server `{}` is not an http(s) URL",
                chosen.cluster, cluster.server
            )));
        }
        let certificate_authority = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
            (Some(data), _) => Some(decode("certificate-authority-data", data)?),
            (None, Some(file)) => Some(read("certificate-authority", file)?),
            (None, None) => None,
        };
        let certificate_authority_data = cluster
            .certificate_authority_data
            .clone()
            .or_else(|| certificate_authority.as_ref().map(|pem| BASE64.encode(pem)));
        let credentials = credentials(user, &chosen.user, path, &read, &decode)?;
        Ok(Self {
            path: path.to_path_buf(),
            context: context_name,
            user: chosen.user.clone(),
            server: cluster.server.trim_end_matches('/').to_owned(),
            certificate_authority,
            certificate_authority_data,
            insecure: cluster.insecure_skip_tls_verify,
            tls_server_name: cluster.tls_server_name.clone(),
            proxy_url: cluster.proxy_url.clone(),
            credentials,
            namespace: chosen.namespace.clone(),
        })
    }
}

type Reader<'a> = dyn Fn(&str, &Path) -> Result<Vec<u8>, KubeError> + 'a;
type Decoder<'a> = dyn Fn(&str, &str) -> Result<Vec<u8>, KubeError> + 'a;

fn credentials(
    user: &UserFile,
    name: &str,
    path: &Path,
    read: &Reader<'_>,
    decode: &Decoder<'_>,
) -> Result<Credentials, KubeError> {
    let refuse = |reason: String| KubeError::Config { path: path.to_path_buf(), reason };
    if user.auth_provider.is_some() {
        return Err(refuse(format!(
            "user `{name}`: `auth-provider` (the removed in-tree gcp/azure/oidc plugins) is not supported: \
             use an exec credential plugin (e.g. `gke-gcloud-auth-plugin`, `kubelogin`)"
        )));
    }
    if user.username.is_some() {
        return Err(refuse(format!(
            "user `{name}`: basic auth (`username`/`password`) is not supported: use a token, a client certificate or an exec plugin"
        )));
    }
    let certificate = match (&user.client_certificate_data, &user.client_certificate) {
        (Some(data), _) => Some(decode("client-certificate-data", data)?),
        (None, Some(file)) => Some(read("client-certificate", file)?),
        (None, None) => None,
    };
    let key = match (&user.client_key_data, &user.client_key) {
        (Some(data), _) => Some(decode("client-key-data", data)?),
        (None, Some(file)) => Some(read("client-key", file)?),
        (None, None) => None,
    };
    match (certificate, key) {
        (Some(certificate), Some(key)) => {
            let key =
                String::from_utf8(key).map_err(|_| refuse(format!("user `{name}`: the client key is not PEM text")))?;
            return Ok(Credentials::ClientCertificate { certificate, key: Sensitive::new(key) });
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(refuse(format!(
                "user `{name}`: a client certificate needs its key and the key its certificate"
            )));
        }
        (None, None) => {}
    }
    if let Some(token) = &user.token {
        return Ok(Credentials::Token(Sensitive::new(token.trim())));
    }
    if let Some(file) = &user.token_file {
        let token = read("tokenFile", file)?;
        let token = String::from_utf8(token).map_err(|_| refuse(format!("user `{name}`: `tokenFile` is not text")))?;
        return Ok(Credentials::Token(Sensitive::new(token.trim())));
    }
    if let Some(exec) = &user.exec {
        if !exec.api_version.starts_with("client.authentication.k8s.io/") {
            return Err(refuse(format!(
                "user `{name}`: exec `apiVersion` `{}` is not a `client.authentication.k8s.io` version",
                exec.api_version
            )));
        }
        if exec.interactive_mode.as_deref() == Some("Always") {
            return Err(refuse(format!(
                "user `{name}`: exec plugin `{}` wants a terminal (`interactiveMode: Always`); toolkit runs it without \
                 one: log in with it first or use `IfAvailable`",
                exec.command
            )));
        }
        return Ok(Credentials::Exec(ExecPlugin {
            api_version: exec.api_version.clone(),
            command: exec.command.clone(),
            args: exec.args.clone(),
            env: exec.env.iter().flatten().map(|var| (var.name.clone(), var.value.clone())).collect(),
            install_hint: exec.install_hint.clone(),
            provide_cluster_info: exec.provide_cluster_info,
        }));
    }
    Ok(Credentials::Anonymous)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("config");
        std::fs::write(&path, text).expect("write");
        path
    }

    const CONFIG: &str = "\
apiVersion: v1
kind: Config
preferences: {}
current-context: admin@lab
clusters:
- name: lab
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: pki/ca.crt
    extensions: [{name: x, extension: {}}]
users:
- name: admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: robot
  user:
    tokenFile: token
- name: gke
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      installHint: Install gke-gcloud-auth-plugin
      provideClusterInfo: true
contexts:
- name: admin@lab
  context: {cluster: lab, user: admin}
- name: robot@lab
  context: {cluster: lab, user: robot, namespace: team-a}
- name: gke
  context: {cluster: lab, user: gke}
- name: broken
  context: {cluster: nowhere, user: admin}
";

    #[test]
    fn a_context_gives_server_ca_and_credentials() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("pki")).expect("dir");
        std::fs::write(dir.path().join("pki/ca.crt"), "CA PEM").expect("ca");
        std::fs::write(dir.path().join("token"), "s3cret\n").expect("token");
        let path = write(dir.path(), CONFIG);

        let admin = Connection::load(&path, None).expect("current context");
        assert_eq!(admin.server, "https://10.0.0.1:6443");
        assert_eq!(admin.certificate_authority.as_deref(), Some(&b"CA PEM"[..]), "relative to the kubeconfig");
        let Credentials::ClientCertificate { certificate, key } = &admin.credentials else { panic!("{admin:?}") };
        assert_eq!((certificate.as_slice(), key.expose()), (&b"CERT"[..], "KEY"));
        assert!(!format!("{admin:?}").contains("KEY"), "the key never prints");

        let robot = Connection::load(&path, Some("robot@lab")).expect("robot");
        assert!(matches!(&robot.credentials, Credentials::Token(token) if token.expose() == "s3cret"));
        assert_eq!(robot.namespace.as_deref(), Some("team-a"));

        let gke = Connection::load(&path, Some("gke")).expect("gke");
        let Credentials::Exec(plugin) = &gke.credentials else { panic!("{gke:?}") };
        assert_eq!(plugin.command, "gke-gcloud-auth-plugin");
        assert!(plugin.provide_cluster_info);
    }

    #[test]
    fn problems_name_the_file_and_what_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), CONFIG);
        let text = |context| Connection::load(&path, Some(context)).expect_err("fails").to_string();
        assert!(
            text("nope").contains("no context `nope` (contexts: admin@lab, robot@lab, gke, broken)"),
            "{}",
            text("nope")
        );
        assert!(text("broken").contains("names cluster `nowhere`, which is not under `clusters` (clusters: lab)"));
        assert!(text("robot@lab").contains("certificate-authority `"), "{}", text("robot@lab"));
        let bad = write(dir.path(), "clusters: [{name: a, cluster: {server: 5, bogus: }}]\ncontexts: 3\n");
        let error = Connection::load(&bad, None).expect_err("not a kubeconfig").to_string();
        assert!(error.contains("line 2 column 11"), "{error}");
    }
}
