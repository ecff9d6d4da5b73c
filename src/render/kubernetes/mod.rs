//! Kubernetes objects of a cluster scheduled by Kubernetes: tenant namespaces and
//! Kueue quotas, topology labels and Kueue's `Topology`, and the values of the NVIDIA
//! GPU and Network Operator charts.
//!
//! Stage: render. Input: the [`Model`] (its [`KubeModel`]). Output: `Desired::Api`
//! resources holding [`KubeObject`]s, applied with server-side apply in dependency
//! order (Node labels before the `Topology` that levels on them, flavors before the
//! queues that use them, a namespace before its LocalQueue). One file per concern:
//! [`kueue`], [`topology`], [`gpu_operator`], [`network_operator`], [`helm`].
//!
//! The operators' charts are installed from the control host (the first controller
//! node) with `helm upgrade --install`, their values files written there first;
//! without a controller node only the objects are planned.

pub mod gpu_operator;
pub mod helm;
pub mod kueue;
pub mod network_operator;
pub mod topology;

use serde_json::{Map, Value, json};

use crate::blueprint::schema::Role;
use crate::model::Model;
use crate::model::kubeadm;
use crate::model::kubernetes::{self, KubeModel};
use crate::resource::api::{ApiDesired, KUBERNETES_TARGET};
use crate::resource::kube::{FIELD_MANAGER, KubeObject, MANAGED_BY_LABEL};
use crate::resource::{Desired, Resource, ResourceId, Target};

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
    ResourceId(ApiDesired::Kubernetes(Box::new(object.clone())).id().into())
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
    let mut out = objects_of(&kube);
    if let Some(settings) = &kube.settings.network_operator {
        out.extend(network_operator::objects(model, &kube, settings));
    }
    out
}

/// The objects of an expanded Kubernetes view.
#[must_use]
pub fn objects_of(kube: &KubeModel) -> Vec<Planned> {
    let mut out = topology::objects(kube);
    let topology = out.iter().find(|planned| planned.object.kind == "Topology").map(Planned::id);
    out.extend(kueue::objects(kube, topology.as_ref()));
    out
}

/// The objects as graph resources on the `kubernetes` target, then the operator
/// charts' values files and installs on the control host.
#[must_use]
pub fn resources(model: &Model) -> Vec<Resource> {
    let mut out: Vec<Resource> = objects(model)
        .into_iter()
        .map(|planned| {
            let target = Target::node(KUBERNETES_TARGET);
            let item = ApiDesired::Kubernetes(Box::new(planned.object));
            let name = item.name();
            Resource::new(target, &name, Desired::Api(Box::new(item))).after(planned.after)
        })
        .collect();
    if let Some(kube) = kubernetes::expand(model)
        && let Some(host) = model.first_with(Role::Controller)
    {
        let host = Target::node(&host.name);
        // A cluster kubeadm brings up: helm on the control plane uses kubeadm's admin
        // kubeconfig (root has no ~/.kube/config there), after `kubeadm init`.
        let kubeadm = crate::model::kubeadm::expand(model).filter(|kubeadm| kubeadm.control_plane.name == *host.name);
        for (chart, values) in charts(model, &kube) {
            for mut resource in helm::resources(&host, &chart, &values) {
                if kubeadm.is_some()
                    && let Desired::Command { argv, .. } = std::sync::Arc::make_mut(&mut resource.desired)
                {
                    argv.extend(["--kubeconfig", kubeadm::ADMIN_CONF].map(str::to_owned));
                    resource.depends_on.push(ResourceId::new(&host.name, "command", kubeadm::INIT_COMMAND));
                }
                out.push(resource);
            }
        }
    }
    out
}

/// The charts toolkit installs, with their values: the GPU Operator, and the
/// Network Operator when the blueprint has one.
#[must_use]
pub fn charts<'a>(model: &Model, kube: &'a KubeModel) -> Vec<(helm::Chart<'a>, Value)> {
    let operator = &kube.settings.gpu_operator;
    let mut charts = vec![(
        helm::Chart {
            release: "gpu-operator",
            chart: "gpu-operator",
            repository: gpu_operator::REPOSITORY,
            version: &operator.version,
            namespace: &operator.namespace,
            title: "NVIDIA GPU Operator",
        },
        gpu_operator::values(model, kube),
    )];
    if let Some(network) = &kube.settings.network_operator {
        charts.push((
            helm::Chart {
                release: "network-operator",
                chart: "network-operator",
                repository: network_operator::REPOSITORY,
                version: &network.version,
                namespace: &network.namespace,
                title: "NVIDIA Network Operator",
            },
            network_operator::values(network),
        ));
    }
    charts
}

#[cfg(test)]
mod tests;
