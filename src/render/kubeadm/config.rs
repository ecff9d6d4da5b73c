//! kubeadm's configuration files, API `kubeadm.k8s.io/v1beta4` (kubeadm 1.31 and
//! later; v1beta3 is gone in 1.37): InitConfiguration + ClusterConfiguration +
//! KubeletConfiguration for `kubeadm init` on the control plane, JoinConfiguration
//! for `kubeadm join` on every other node.
//!
//! Stage: render. Input: the [`KubeadmModel`] and, for the secret parts, the
//! bootstrap token and the CA pin. Output: the documents as JSON values (tests check
//! them against the published types) and as the YAML text of each file.

use serde_json::{Value, json};

use crate::model::kubeadm::{API_PORT, KubeNode, KubeadmModel};

/// kubeadm's config API.
pub const KUBEADM_API: &str = "kubeadm.k8s.io/v1beta4";
/// The kubelet's config API.
pub const KUBELET_API: &str = "kubelet.config.k8s.io/v1beta1";
/// containerd's CRI socket.
pub const CRI_SOCKET: &str = "unix:///run/containerd/containerd.sock";
/// How long a bootstrap token lives: a deploy's joins happen within it; the next
/// deploy that joins a node creates it again.
pub const TOKEN_TTL: &str = "24h0m0s";
/// The group kubeadm's own tokens bind to (RBAC for node bootstrap and auto-approval).
const TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// `nodeRegistration`: the Node's name, the CRI socket, and the kubelet's `node-ip`
/// and `node-labels` (labels at registration, so Kueue's topology sees the node as
/// soon as it is Ready).
fn registration(node: &KubeNode) -> Value {
    let mut args = vec![json!({ "name": "node-ip", "value": node.address })];
    if !node.labels.is_empty() {
        let labels: Vec<String> = node.labels.iter().map(|(key, value)| format!("{key}={value}")).collect();
        args.push(json!({ "name": "node-labels", "value": labels.join(",") }));
    }
    json!({ "name": node.name, "criSocket": CRI_SOCKET, "kubeletExtraArgs": args })
}

/// The documents of `kubeadm init --config` on the control plane.
#[must_use]
pub fn init_documents(kubeadm: &KubeadmModel, token: &str) -> Vec<Value> {
    let node = &kubeadm.control_plane;
    let endpoint_host = kubeadm.endpoint.rsplit_once(':').map_or(kubeadm.endpoint.as_str(), |(host, _)| host);
    let mut sans = vec![endpoint_host.to_owned()];
    if node.address != endpoint_host {
        sans.push(node.address.clone());
    }
    vec![
        json!({
            "apiVersion": KUBEADM_API,
            "kind": "InitConfiguration",
            "bootstrapTokens": [{
                "token": token,
                "description": "toolkit: joins the cluster's nodes",
                "ttl": TOKEN_TTL,
                "usages": ["signing", "authentication"],
                "groups": [TOKEN_GROUP],
            }],
            "localAPIEndpoint": { "advertiseAddress": node.address, "bindPort": API_PORT },
            "nodeRegistration": registration(node),
        }),
        json!({
            "apiVersion": KUBEADM_API,
            "kind": "ClusterConfiguration",
            "clusterName": kubeadm.cluster_name,
            "kubernetesVersion": format!("v{}", kubeadm.version),
            "controlPlaneEndpoint": kubeadm.endpoint,
            "networking": {
                "podSubnet": kubeadm.pod_subnet,
                "serviceSubnet": kubeadm.service_subnet,
                "dnsDomain": "cluster.local",
            },
            "apiServer": { "certSANs": sans },
        }),
        kubelet_document(),
    ]
}

/// The kubelet's configuration, uploaded by `kubeadm init` for every node: the
/// systemd cgroup driver containerd is configured with (the two must match).
fn kubelet_document() -> Value {
    json!({
        "apiVersion": KUBELET_API,
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "rotateCertificates": true,
    })
}

/// The document of `kubeadm join --config` on `node`: the token, the API endpoint,
/// and the CA pin computed at plan time from the inventory's CA.
#[must_use]
pub fn join_document(kubeadm: &KubeadmModel, node: &KubeNode, token: &str, ca_hash: &str) -> Value {
    json!({
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "token": token,
                "apiServerEndpoint": kubeadm.endpoint,
                "caCertHashes": [ca_hash],
            },
        },
        "nodeRegistration": registration(node),
    })
}

/// Documents as one multi-document YAML file.
#[must_use]
pub fn yaml_file(documents: &[Value]) -> String {
    let mut text = String::from("# kubeadm configuration (managed by toolkit); holds the bootstrap token: 0600.\n");
    for document in documents {
        text.push_str("---\n");
        text.push_str(&crate::resource::kube::yaml(document));
    }
    text
}
