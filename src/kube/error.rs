//! Errors of the Kubernetes API client.
//!
//! Stage: observe/apply (Kubernetes). Input: kubeconfig problems and HTTP outcomes,
//! the API server's `Status` bodies already decoded. Output: [`KubeError`], each
//! naming the object, the server or the kubeconfig involved and saying how to fix
//! it. A token or key is never part of an error: no variant has a field that could
//! hold one, and URLs are built without credentials.

use std::path::PathBuf;

use thiserror::Error;

/// One field another manager owns, from a 409's `details.causes[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldConflict {
    /// The other manager as the server names it (`"helm" using nvidia.com/v1`).
    pub manager: String,
    /// The field (`.spec.mig.strategy`).
    pub field: String,
}

/// One invalid field, from a 422's `details.causes[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`…
    pub reason: String,
    /// The field (`spec.levels`); empty when the server names none.
    pub field: String,
    /// What the server says about it.
    pub message: String,
}

/// Why the API server could not be reached, authenticated against, read or changed.
#[derive(Debug, Error)]
pub enum KubeError {
    /// The kubeconfig cannot be used (unreadable, not YAML, no such context…).
    #[error("kubeconfig `{path}`: {reason}")]
    Config {
        /// The kubeconfig file.
        path: PathBuf,
        /// What is wrong and how to fix it (with line and column when parsing).
        reason: String,
    },
    /// The exec credential plugin failed or printed no usable credential.
    #[error("kubeconfig `{path}`: exec plugin `{command}`: {reason}")]
    ExecPlugin {
        /// The kubeconfig file.
        path: PathBuf,
        /// The plugin command.
        command: String,
        /// Why (its exit status and stderr, or what its output lacks), and its install hint.
        reason: String,
    },
    /// The HTTP client could not be built (a certificate or key it cannot use).
    #[error("kubeconfig `{path}`: {reason}")]
    Client {
        /// The kubeconfig file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No answer: connection refused, TLS failure, timeout.
    #[error("{method} `{url}`: {reason}")]
    Transport {
        /// HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// The transport error, its causes joined.
        reason: String,
    },
    /// 401: the credentials were not accepted.
    #[error(
        "{server}: 401 Unauthorized: the API server did not accept the credentials of user `{user}` \
         (kubeconfig context `{context}`); refresh them (an expired token or certificate) or pick another \
         context with `kubernetes.context` in the inventory"
    )]
    Unauthorized {
        /// The API server.
        server: String,
        /// The kubeconfig user.
        user: String,
        /// The kubeconfig context.
        context: String,
    },
    /// 403: authenticated, but RBAC does not allow it.
    #[error(
        "{server}: 403 Forbidden: {message}; toolkit needs `get`, `list`, `patch`, `create` and `delete` on the \
         objects it applies: bind the kubeconfig user to a role that allows them"
    )]
    Forbidden {
        /// The API server.
        server: String,
        /// The server's message (names the user, verb and resource).
        message: String,
    },
    /// 409 from apply: fields another manager owns have other values.
    #[error(
        "{object}: apply conflicts with other managers: {}; keep their values by removing these fields from \
         the blueprint, or take them over with `--force-conflicts`",
        conflict_list(.conflicts)
    )]
    Conflict {
        /// The object (`ClusterQueue/research`).
        object: String,
        /// One entry per field.
        conflicts: Vec<FieldConflict>,
    },
    /// 409 without field-manager causes: the object changed under a precondition.
    #[error("{object}: 409 Conflict: {message}; run the plan again")]
    Stale {
        /// The object.
        object: String,
        /// The server's message.
        message: String,
    },
    /// 422: the server's validation refused the object.
    #[error("{object}: refused as invalid by the API server: {}", cause_list(.causes, .message))]
    Invalid {
        /// The object.
        object: String,
        /// The server's message (used when it gives no causes).
        message: String,
        /// One entry per invalid field.
        causes: Vec<FieldCause>,
    },
    /// 404 without details: the server does not serve this kind (its CRD is not installed).
    #[error("{server} does not serve `{kind}` in `{api_version}`: {hint}")]
    KindNotServed {
        /// The API server.
        server: String,
        /// The kind.
        kind: String,
        /// Its `apiVersion`.
        api_version: String,
        /// What installs it.
        hint: String,
    },
    /// 404 with details on apply: the object's namespace does not exist.
    #[error("{object}: {message}; apply its namespace first")]
    NamespaceMissing {
        /// The object.
        object: String,
        /// The server's message.
        message: String,
    },
    /// Any other unsuccessful status.
    #[error("{method} `{url}`: {code} {reason}: {message}")]
    Status {
        /// HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// HTTP status code.
        code: u16,
        /// `Status.reason` (`BadRequest`, `InternalError`…).
        reason: String,
        /// `Status.message`.
        message: String,
    },
    /// A successful answer that is not the JSON expected.
    #[error("{method} `{url}`: unexpected answer: {reason}")]
    Decode {
        /// HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

fn conflict_list(conflicts: &[FieldConflict]) -> String {
    conflicts
        .iter()
        .map(|conflict| format!("`{}` is owned by {}", conflict.field, conflict.manager))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cause_list(causes: &[FieldCause], message: &str) -> String {
    if causes.is_empty() {
        return message.to_owned();
    }
    causes
        .iter()
        .map(|cause| {
            if cause.field.is_empty() { cause.message.clone() } else { format!("`{}`: {}", cause.field, cause.message) }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What installs the kinds of an API group toolkit applies.
#[must_use]
pub fn install_hint(group: &str) -> String {
    match group {
        "kueue.x-k8s.io" => "Kueue is not installed, or not a release that serves this version: install it \
             (`kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/download/v<version>/manifests.yaml`) \
             or set `scheduler.kubernetes.kueue_version` to the release the cluster runs"
            .to_owned(),
        "nvidia.com" => "the NVIDIA GPU Operator's CRDs are not installed: install its chart first".to_owned(),
        "mellanox.com" | "nv-ipam.nvidia.com" | "sriovnetwork.openshift.io" => {
            "the NVIDIA Network Operator's CRDs are not installed: install its chart first".to_owned()
        }
        _ => "its CustomResourceDefinition is not installed (or not Established yet): install the component that \
              provides it"
            .to_owned(),
    }
}
