//! Where each GPU node sits in the fabric, as node labels, and Kueue's `Topology`
//! over them for topology-aware scheduling.
//!
//! Stage: render. Input: [`KubeModel`] (labels and levels computed in
//! `model::kubernetes`). Output: one shared `Node` object per GPU node carrying only
//! toolkit's labels (the node itself belongs to the kubelet), then the `Topology`
//! (levels superpod → scalable unit → host), applied after every label it levels on.

use serde_json::json;

use super::{Planned, metadata};
use crate::model::kubernetes::KubeModel;
use crate::resource::kube::KubeObject;

/// Name of the `Topology` object ResourceFlavors reference.
#[must_use]
pub fn topology_name(kube: &KubeModel) -> String {
    format!("{}-fabric", kube.cohort)
}

/// Node label objects, then the `Topology` when topology-aware scheduling is on.
#[must_use]
pub fn objects(kube: &KubeModel) -> Vec<Planned> {
    let mut out: Vec<Planned> = kube
        .nodes
        .iter()
        .map(|node| Planned {
            object: KubeObject::new(
                "nodes",
                json!({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": { "name": node.node, "labels": node.labels },
                }),
            )
            .shared(),
            after: Vec::new(),
        })
        .collect();
    if !kube.topology_levels.is_empty() {
        let levels: Vec<_> = kube.topology_levels.iter().map(|label| json!({ "nodeLabel": label })).collect();
        let after = out.iter().map(Planned::id).collect();
        out.push(Planned {
            object: KubeObject::new(
                "topologies",
                json!({
                    "apiVersion": kube.kueue.api_version(),
                    "kind": "Topology",
                    "metadata": metadata(&topology_name(kube), None),
                    "spec": { "levels": levels },
                }),
            ),
            after,
        });
    }
    out
}
