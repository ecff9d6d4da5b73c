//! The desired state of one Kubernetes object: what toolkit applies with
//! server-side apply, and only the fields it has an opinion on.
//!
//! Stage: render → graph → plan (core data). Input: an object body built by
//! `render::kubernetes`. Output: [`KubeObject`], carried by
//! [`ApiDesired::Kubernetes`](super::api::ApiDesired::Kubernetes). Pure data: the
//! HTTP client that applies it lives in `kube`, the comparison in `plan`.
//!
//! The plan compares objects by their canonical YAML ([`KubeObject::yaml`]): the
//! body as toolkit sends it, and the live object projected onto the same fields.

use serde_json::Value;

/// Label put on every object toolkit applies, so it can list what it owns
/// (there is no server-side filter by field manager).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`], also the server-side apply field manager.
pub const FIELD_MANAGER: &str = "toolkit";

/// One object: its identity and the body toolkit applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeObject {
    /// `kueue.x-k8s.io/v1beta2`, `v1`.
    pub api_version: String,
    /// `ClusterQueue`, `Namespace`.
    pub kind: String,
    /// Lowercase plural used in the REST path (`clusterqueues`).
    pub plural: String,
    /// Namespace of a namespaced object; `None` when cluster-scoped.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// The whole object as applied: `apiVersion`, `kind`, `metadata`, `spec`…
    pub body: Value,
    /// The object also belongs to others (a Node's labels): toolkit applies only its
    /// fields and never deletes the object.
    pub shared: bool,
}

impl KubeObject {
    /// An object from its body; identity is read from it.
    ///
    /// `body` must carry `apiVersion`, `kind` and `metadata.name` (and
    /// `metadata.namespace` for a namespaced kind): the renderers build it so.
    #[must_use]
    pub fn new(plural: &str, body: Value) -> Self {
        let text = |pointer: &str| body.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
        Self {
            api_version: text("/apiVersion").unwrap_or_default(),
            kind: text("/kind").unwrap_or_default(),
            plural: plural.to_owned(),
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name").unwrap_or_default(),
            body,
            shared: false,
        }
    }

    /// Marks the object as shared with other managers (see [`KubeObject::shared`]).
    #[must_use]
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// API group (`kueue.x-k8s.io`; empty for the core group).
    #[must_use]
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(group, _)| group)
    }

    /// The name a plan shows: `Kind/name`, or `Kind/namespace/name`.
    #[must_use]
    pub fn display(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{}/{namespace}/{}", self.kind, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    /// REST path of the object: `/api/v1/…` for the core group, `/apis/G/V/…` otherwise.
    #[must_use]
    pub fn path(&self) -> String {
        let base = if self.group().is_empty() {
            format!("/api/{}", self.api_version)
        } else {
            format!("/apis/{}", self.api_version)
        };
        match &self.namespace {
            Some(namespace) => format!("{base}/namespaces/{namespace}/{}/{}", self.plural, self.name),
            None => format!("{base}/{}/{}", self.plural, self.name),
        }
    }

    /// The body as YAML, keys in the order the renderer built them: what the plan
    /// shows and compares.
    #[must_use]
    pub fn yaml(&self) -> String {
        yaml(&self.body)
    }
}

/// A JSON value as YAML text (a value that cannot be written gives its JSON).
#[must_use]
pub fn yaml(value: &Value) -> String {
    serde_norway::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// The fields of `live` that `desired` names, in `desired`'s shape: what the live
/// object says about the fields toolkit applies. Maps recurse; lists and scalars are
/// taken whole (Kueue's lists are atomic). A field `desired` names that `live` lacks
/// is left out.
#[must_use]
pub fn project(desired: &Value, live: &Value) -> Value {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => Value::Object(
            want.iter()
                .filter_map(|(key, wanted)| have.get(key).map(|value| (key.clone(), project(wanted, value))))
                .collect(),
        ),
        (_, live) => live.clone(),
    }
}

/// Why `name` is not a DNS-1123 label (namespaces, and names used as label values:
/// at most 63 lowercase letters, digits and `-`, starting and ending alphanumeric).
#[must_use]
pub fn dns1123_label_error(name: &str) -> Option<&'static str> {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > 63 {
        Some("is longer than 63 characters")
    } else if !name.chars().all(|c| alphanumeric(c) || c == '-') {
        Some("may only hold lowercase letters, digits and `-`")
    } else if !name.starts_with(alphanumeric) || !name.ends_with(alphanumeric) {
        Some("must start and end with a lowercase letter or digit")
    } else {
        None
    }
}

/// Why `name` is not a DNS-1123 subdomain (most object names: at most 253
/// characters, DNS-1123 labels joined by `.`).
#[must_use]
pub fn dns1123_subdomain_error(name: &str) -> Option<&'static str> {
    if name.len() > 253 {
        return Some("is longer than 253 characters");
    }
    name.split('.').find_map(|label| match dns1123_label_error(label) {
        Some("is empty") if !name.is_empty() => Some("has an empty part between dots"),
        other => other,
    })
}

/// Why `value` is not a label value (at most 63 letters, digits, `-`, `_`, `.`,
/// starting and ending alphanumeric; empty is allowed).
#[must_use]
pub fn label_value_error(value: &str) -> Option<&'static str> {
    let alphanumeric = |c: char| c.is_ascii_alphanumeric();
    if value.len() > 63 {
        Some("is longer than 63 characters")
    } else if !value.chars().all(|c| alphanumeric(c) || matches!(c, '-' | '_' | '.')) {
        Some("may only hold letters, digits, `-`, `_` and `.`")
    } else if !value.is_empty() && (!value.starts_with(alphanumeric) || !value.ends_with(alphanumeric)) {
        Some("must start and end with a letter or digit")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn identity_and_path_come_from_the_body() {
        let queue = KubeObject::new(
            "localqueues",
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": "team-a", "namespace": "team-a"}}),
        );
        assert_eq!(queue.group(), "kueue.x-k8s.io");
        assert_eq!(queue.path(), "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/team-a");
        assert_eq!(queue.display(), "LocalQueue/team-a/team-a");
        let node = KubeObject::new("nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}));
        assert_eq!(node.group(), "");
        assert_eq!(node.path(), "/api/v1/nodes/n1");
    }

    #[test]
    fn names_follow_the_kubernetes_rules() {
        assert_eq!(dns1123_label_error("team-a"), None);
        assert_eq!(dns1123_label_error("Team_A"), Some("may only hold lowercase letters, digits and `-`"));
        assert_eq!(dns1123_label_error("-a"), Some("must start and end with a lowercase letter or digit"));
        assert_eq!(dns1123_label_error(&"a".repeat(64)), Some("is longer than 63 characters"));
        assert_eq!(dns1123_subdomain_error("gpu01.ai.example.com"), None);
        assert_eq!(dns1123_subdomain_error("a..b"), Some("has an empty part between dots"));
        assert_eq!(dns1123_subdomain_error(""), Some("is empty"));
        assert_eq!(label_value_error("su0"), None);
        assert_eq!(label_value_error(""), None);
        assert_eq!(label_value_error("a b"), Some("may only hold letters, digits, `-`, `_` and `.`"));
    }

    #[test]
    fn projection_keeps_only_the_fields_toolkit_applies() {
        let desired = json!({"metadata": {"name": "n1", "labels": {"a": "1"}}, "spec": {"x": [1]}});
        let live = json!({"metadata": {"name": "n1", "uid": "u", "labels": {"a": "2", "other": "o"}},
                          "spec": {"x": [1, 2], "y": 3}, "status": {}});
        assert_eq!(
            project(&desired, &live),
            json!({"metadata": {"name": "n1", "labels": {"a": "2"}}, "spec": {"x": [1, 2]}})
        );
    }
}
