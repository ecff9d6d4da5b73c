//! The NVIDIA Network Operator for the rails: its chart values, and the objects
//! that give pods the rail NICs (the chart makes no NicClusterPolicy since v24.10,
//! so toolkit applies it).
//!
//! Stage: render. Input: the [`Model`] (rail interface names, link layer) and its
//! [`KubeModel`]. Output: chart values and [`Planned`] objects.
//!
//! `rdma: shared` — one RDMA shared device plugin resource per rail
//! (`rdma/rail0`…), selected by the rail's interface name: every pod on a node
//! shares that rail's HCA, which is how NCCL jobs use a rail-optimized fabric.
//! `rdma: sriov` — one `SriovNetworkNodePolicy` per rail, `vfs_per_nic` RDMA virtual
//! functions on the rail's port, advertised as `nvidia.com/rail<N>`. The RDMA stack
//! itself is the host's (`software.network`): no driver container is deployed.
//! Tenant isolation on the fabric stays where it is for Slurm: InfiniBand PKeys at
//! the subnet manager, RoCE VRFs at the switches.

use serde_json::{Value, json};

use super::{Planned, metadata};
use crate::blueprint::schema::{FabricKind, NetworkOperator, RdmaMode};
use crate::model::Model;
use crate::model::kubernetes::{GPU_MODEL_LABEL, KubeModel};
use crate::resource::kube::KubeObject;

/// Chart repository of the Network Operator.
pub const REPOSITORY: &str = "https://helm.ngc.nvidia.com/nvidia";
/// Image repository of the operator's components.
pub const IMAGE_REPOSITORY: &str = "nvcr.io/nvidia/mellanox";
/// Resource prefix of the RDMA shared device plugin (`rdma/rail0`).
pub const RDMA_PREFIX: &str = "rdma";
/// Mellanox/NVIDIA PCI vendor id.
const MELLANOX_VENDOR: &str = "15b3";

/// The chart values: the GPU Operator already runs node feature discovery, and the
/// SR-IOV operator only runs for `rdma: sriov`.
#[must_use]
pub fn values(settings: &NetworkOperator) -> Value {
    json!({
        "nfd": { "enabled": false },
        "sriovNetworkOperator": { "enabled": settings.rdma == RdmaMode::Sriov },
    })
}

/// Rail interface names, in rail order (from the first GPU node: every node names
/// its rails alike).
fn rail_netdevs(model: &Model, kube: &KubeModel) -> Vec<String> {
    let first = kube.flavors.first().and_then(|flavor| flavor.nodes.first());
    first.map(|&index| model.nodes[index].rails.iter().map(|port| port.netdev.clone()).collect()).unwrap_or_default()
}

/// The device objects for the rails (none without rails).
#[must_use]
pub fn objects(model: &Model, kube: &KubeModel, settings: &NetworkOperator) -> Vec<Planned> {
    let rails = rail_netdevs(model, kube);
    if rails.is_empty() {
        return Vec::new();
    }
    match settings.rdma {
        RdmaMode::Shared => vec![nic_cluster_policy(settings, &rails)],
        RdmaMode::Sriov => {
            let link = if model.fabric.kind == FabricKind::Infiniband { "ib" } else { "eth" };
            rails.iter().enumerate().map(|(rail, netdev)| sriov_policy(settings, kube, rail, netdev, link)).collect()
        }
    }
}

fn nic_cluster_policy(settings: &NetworkOperator, rails: &[String]) -> Planned {
    let config_list: Vec<Value> = rails
        .iter()
        .enumerate()
        .map(|(rail, netdev)| {
            json!({
                "resourceName": format!("rail{rail}"),
                "resourcePrefix": RDMA_PREFIX,
                "rdmaHcaMax": 63,
                "selectors": { "vendors": [MELLANOX_VENDOR], "ifNames": [netdev] },
            })
        })
        .collect();
    // One line per rail: the plugin reads the string as JSON.
    let lines: Vec<String> = config_list.iter().map(Value::to_string).collect();
    let config = format!("{{\"configList\": [\n  {}\n]}}\n", lines.join(",\n  "));
    let object = KubeObject::new(
        "nicclusterpolicies",
        json!({
            "apiVersion": "mellanox.com/v1alpha1",
            "kind": "NicClusterPolicy",
            "metadata": metadata("nic-cluster-policy", None),
            "spec": {
                "rdmaSharedDevicePlugin": {
                    "image": "k8s-rdma-shared-dev-plugin",
                    "repository": IMAGE_REPOSITORY,
                    "version": format!("network-operator-v{}", settings.version.trim_start_matches('v')),
                    "config": config,
                },
            },
        }),
    );
    Planned { object, after: Vec::new() }
}

fn sriov_policy(settings: &NetworkOperator, kube: &KubeModel, rail: usize, netdev: &str, link: &str) -> Planned {
    let flavors: Vec<&str> = kube.flavors.iter().map(|flavor| flavor.name.as_str()).collect();
    let node_selector = match flavors.as_slice() {
        [only] => json!({ GPU_MODEL_LABEL: only }),
        _ => json!({ "feature.node.kubernetes.io/network-sriov.capable": "true" }),
    };
    let object = KubeObject::new(
        "sriovnetworknodepolicies",
        json!({
            "apiVersion": "sriovnetwork.openshift.io/v1",
            "kind": "SriovNetworkNodePolicy",
            "metadata": metadata(&format!("rail{rail}"), Some(&settings.namespace)),
            "spec": {
                "resourceName": format!("rail{rail}"),
                "nodeSelector": node_selector,
                "numVfs": settings.vfs_per_nic.unwrap_or(8),
                "nicSelector": { "vendor": MELLANOX_VENDOR, "pfNames": [netdev] },
                "isRdma": true,
                "linkType": link,
                "deviceType": "netdevice",
            },
        }),
    );
    Planned { object, after: Vec::new() }
}
