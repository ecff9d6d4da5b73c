//! Kubernetes objects of a cluster scheduled by Kubernetes: tenant namespaces and
//! Kueue quotas, topology labels and Kueue's `Topology`, and the values of the NVIDIA
//! GPU and Network Operator charts.
//!
//! Stage: render. Input: the [`Model`] (its [`KubeModel`]). Output: `Desired::Api`
//! resources holding [`KubeObject`]s, applied with server-side apply in dependency
//! order (Node labels before the `Topology` that levels on them, flavors before the
//! queues that use them, a namespace before its LocalQueue). One file per concern:
//! [`kueue`], [`topology`].

pub mod kueue;
pub mod topology;

use serde_json::{Map, Value, json};

use crate::model::Model;
use crate::model::kubernetes::{self, KubeModel};
use crate::resource::api::{ApiDesired, KUBERNETES_TARGET};
use crate::resource::kube::{FIELD_MANAGER, KubeObject, MANAGED_BY_LABEL};
use crate::resource::{Desired, Resource, ResourceId, Target, TargetKind};

/// An object with the ids it waits for.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The object.
    pub object: KubeObject,
    /// Objects that must be applied first.
    pub after: Vec<ResourceId>,
}

impl Planned {
    /// The resource id of the object.
    #[must_use]
    pub fn id(&self) -> ResourceId {
        id_of(&self.object)
    }
}

/// The id of `object`'s resource: `kubernetes:k8s:Kind/[namespace/]name`.
#[must_use]
pub fn id_of(object: &KubeObject) -> ResourceId {
    ResourceId(ApiDesired::Kubernetes(Box::new(object.clone())).id())
}

/// `metadata` of an object toolkit owns: its name (and namespace), labelled as
/// managed by toolkit so it can be listed back.
#[must_use]
pub fn metadata(name: &str, namespace: Option<&str>) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".to_owned(), json!(name));
    if let Some(namespace) = namespace {
        metadata.insert("namespace".to_owned(), json!(namespace));
    }
    metadata.insert("labels".to_owned(), json!({ MANAGED_BY_LABEL: FIELD_MANAGER }));
    Value::Object(metadata)
}

/// Every Kubernetes object of `model`, in dependency order (none unless the
/// scheduler is Kubernetes).
#[must_use]
pub fn objects(model: &Model) -> Vec<Planned> {
    let Some(kube) = kubernetes::expand(model) else { return Vec::new() };
    objects_of(&kube)
}

/// The objects of an expanded Kubernetes view.
#[must_use]
pub fn objects_of(kube: &KubeModel) -> Vec<Planned> {
    let mut out = topology::objects(kube);
    let topology = out.iter().find(|planned| planned.object.kind == "Topology").map(Planned::id);
    out.extend(kueue::objects(kube, topology));
    out
}

/// The objects as graph resources on the `kubernetes` target.
#[must_use]
pub fn resources(model: &Model) -> Vec<Resource> {
    objects(model)
        .into_iter()
        .map(|planned| {
            let target = Target { name: KUBERNETES_TARGET.to_owned(), kind: TargetKind::Node };
            let item = ApiDesired::Kubernetes(Box::new(planned.object));
            let name = item.name();
            Resource::new(target, &name, Desired::Api(Box::new(item))).after(planned.after)
        })
        .collect()
}

#[cfg(test)]
mod tests;
