//! The bare-metal Kubernetes view of the cluster (`scheduler.kubernetes.mode:
//! kubeadm`): which node runs `kubeadm init`, which join it, where the API server
//! answers, the exact release the packages are pinned to, the networks, and each
//! node's labels and container runtime.
//!
//! Stage: expand. Input: the [`Model`] of a blueprint in mode `kubeadm`. Output:
//! [`KubeadmModel`]. Every value the kubeadm and containerd files carry is decided
//! here; `render::kubeadm` only lays them out.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Model;
use super::kubernetes;
pub use crate::blueprint::release::parse_release;
use crate::blueprint::schema::{KubernetesMode, Role, SchedulerKind};

/// The API server's port when the blueprint names no endpoint.
pub const API_PORT: u16 = 6443;
/// The cluster-admin kubeconfig `kubeadm init` writes on the control plane: what
/// `helm` there uses, and what the API stage's kubeconfig is a copy of.
pub const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";
/// Name of the `kubeadm init` command resource on the control plane.
pub const INIT_COMMAND: &str = "kubeadm-init";

/// One node's part in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeNode {
    /// Host name (the Node's name).
    pub name: String,
    /// Management address: the kubelet's `node-ip`.
    pub address: String,
    /// Labels the kubelet registers the Node with (topology, GPU model).
    pub labels: BTreeMap<String, String>,
    /// containerd runs this node's pods with the NVIDIA runtime by default (a GPU
    /// node whose host has the NVIDIA Container Toolkit).
    pub nvidia_runtime: bool,
}

/// The cluster kubeadm builds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeadmModel {
    /// The exact release (`1.33.4`).
    pub version: String,
    /// Its minor release (`1.33`): the pkgs.k8s.io repository path.
    pub minor: String,
    /// `host:port` every node reaches the API server at.
    pub endpoint: String,
    /// Pod network (CNI).
    pub pod_subnet: String,
    /// Service network.
    pub service_subnet: String,
    /// The cluster's name (kubeadm's `clusterName`).
    pub cluster_name: String,
    /// The node that runs `kubeadm init`: the first controller.
    pub control_plane: KubeNode,
    /// Every other node, joined as a worker.
    pub workers: Vec<KubeNode>,
}

/// The kubeadm view of `model`; `None` unless the scheduler is Kubernetes in mode
/// `kubeadm` with a `kubeadm` section, an exact release and a controller node (lint
/// reports each of those).
#[must_use]
pub fn expand(model: &Model) -> Option<KubeadmModel> {
    let scheduler = &model.blueprint.scheduler;
    if scheduler.kind != SchedulerKind::Kubernetes {
        return None;
    }
    let settings = scheduler.kubernetes.as_ref()?;
    if settings.mode != KubernetesMode::Kubeadm {
        return None;
    }
    let kubeadm = settings.kubeadm.as_ref()?;
    let (version, minor) = parse_release(&settings.version)?;
    let first = model.first_with(Role::Controller)?;
    let mut labels: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    if let Some(kube) = kubernetes::expand(model) {
        for node in &kube.nodes {
            if let Some(found) = model.nodes.iter().find(|candidate| candidate.name == node.node) {
                labels.insert(found.name.as_str(), node.labels.clone());
            }
        }
    }
    let node = |index: usize| {
        let node = &model.nodes[index];
        let group = &model.groups[node.group];
        KubeNode {
            name: node.name.clone(),
            address: node.mgmt_address.to_string(),
            labels: labels.get(node.name.as_str()).cloned().unwrap_or_default(),
            nvidia_runtime: group.gpu.is_some() && group.software.as_ref().is_some_and(|stack| stack.container_toolkit),
        }
    };
    let first_index = model.nodes.iter().position(|candidate| candidate.name == first.name)?;
    let control_plane = node(first_index);
    let workers = (0..model.nodes.len()).filter(|&index| index != first_index).map(node).collect();
    let endpoint = kubeadm.api_endpoint.clone().unwrap_or_else(|| format!("{}:{API_PORT}", control_plane.address));
    Some(KubeadmModel {
        version,
        minor,
        endpoint,
        pod_subnet: kubeadm.pod_subnet.clone(),
        service_subnet: kubeadm.service_subnet.clone(),
        cluster_name: model.blueprint.cluster.name.clone(),
        control_plane,
        workers,
    })
}
