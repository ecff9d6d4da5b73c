//! Tenants as Kueue quotas: a namespace, a ClusterQueue and a LocalQueue per tenant,
//! one ResourceFlavor per GPU model, a WorkloadPriorityClass per tenant priority.
//!
//! Stage: render. Input: [`KubeModel`] (quota splits, borrowing limits and the Kueue
//! API version are decided in `model::kubernetes`). Output: [`Planned`] objects.
//!
//! Every ClusterQueue joins one cohort and names every flavor (Kueue lends and
//! borrows only flavors a queue has a nominal quota for, even 0). `nominalQuota` is
//! the tenant's guarantee, CPU and memory in proportion to its GPUs; `borrowingLimit`
//! is the rest of the flavor (0 for a tenant that may not borrow). Preemption
//! `reclaimWithinCohort: Any` gives a tenant its lent GPUs back whatever the
//! borrower's priority, `borrowWithinCohort: Never` keeps borrowers from preempting
//! each other, `withinClusterQueue: LowerPriority` orders a tenant's own work.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Planned, metadata};
use crate::model::kubernetes::{DeviceResource, Flavor, FlavorQuota, KubeModel, TenantQueue};
use crate::resource::ResourceId;
use crate::resource::kube::KubeObject;

/// Namespaces, priority classes, flavors, cluster queues, local queues.
#[must_use]
pub fn objects(kube: &KubeModel, topology: Option<&ResourceId>) -> Vec<Planned> {
    let api = kube.kueue.api_version();
    let mut out = Vec::new();
    let mut namespaces = BTreeMap::new();
    for tenant in &kube.tenants {
        let namespace = Planned {
            object: KubeObject::new(
                "namespaces",
                json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": metadata(&tenant.name, None) }),
            ),
            after: Vec::new(),
        };
        namespaces.insert(tenant.name.clone(), namespace.id());
        out.push(namespace);
    }
    for tenant in &kube.tenants {
        out.push(Planned {
            object: KubeObject::new(
                "workloadpriorityclasses",
                json!({
                    "apiVersion": api,
                    "kind": "WorkloadPriorityClass",
                    "metadata": metadata(&tenant.name, None),
                    "value": tenant.priority,
                    "description": format!("Workloads of tenant {} (label kueue.x-k8s.io/priority-class: {})", tenant.name, tenant.name),
                }),
            ),
            after: Vec::new(),
        });
    }
    let mut flavor_ids = Vec::new();
    for flavor in &kube.flavors {
        let planned = resource_flavor(kube, flavor, topology.cloned());
        flavor_ids.push(planned.id());
        out.push(planned);
    }
    for tenant in &kube.tenants {
        let queue = cluster_queue(kube, tenant, flavor_ids.clone());
        let queue_id = queue.id();
        out.push(queue);
        let local = KubeObject::new(
            "localqueues",
            json!({
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": metadata(&tenant.name, Some(&tenant.name)),
                "spec": { "clusterQueue": tenant.name },
            }),
        );
        let mut after = vec![queue_id];
        after.extend(namespaces.get(&tenant.name).cloned());
        out.push(Planned { object: local, after });
    }
    out
}

fn resource_flavor(kube: &KubeModel, flavor: &Flavor, topology: Option<ResourceId>) -> Planned {
    let mut spec = json!({ "nodeLabels": { crate::model::kubernetes::GPU_MODEL_LABEL: flavor.name } });
    if topology.is_some() {
        spec["topologyName"] = json!(super::topology::topology_name(kube));
    }
    let object = KubeObject::new(
        "resourceflavors",
        json!({
            "apiVersion": kube.kueue.api_version(),
            "kind": "ResourceFlavor",
            "metadata": metadata(&flavor.name, None),
            "spec": spec,
        }),
    );
    Planned { object, after: topology.into_iter().collect() }
}

/// The resources a queue's group covers: CPU and memory when every flavor knows
/// them, then the GPU device resources.
fn covered(kube: &KubeModel) -> Vec<String> {
    let mut covered = Vec::new();
    if kube.flavors.iter().all(|flavor| flavor.cpus.is_some()) {
        covered.push("cpu".to_owned());
    }
    if kube.flavors.iter().all(|flavor| flavor.memory_mib.is_some()) {
        covered.push("memory".to_owned());
    }
    covered.extend(kube.devices.iter().map(|device| device.name.clone()));
    covered
}

/// One resource's quota: nominal and, for a borrowing tenant, what it may borrow.
fn quota(name: &str, nominal: &Value, borrowing: &Value) -> Value {
    json!({ "name": name, "nominalQuota": nominal, "borrowingLimit": borrowing })
}

fn memory(mib: u64) -> Value {
    if mib.is_multiple_of(1024) { json!(format!("{}Gi", mib / 1024)) } else { json!(format!("{mib}Mi")) }
}

fn flavor_quotas(covered: &[String], devices: &[DeviceResource], flavor: &Flavor, share: &FlavorQuota) -> Value {
    let lent = |total: u64, own: u64| if share.borrow_gpus == 0 { 0 } else { total.saturating_sub(own) };
    let mut resources = Vec::new();
    for name in covered {
        match name.as_str() {
            "cpu" => {
                let (total, own) = (flavor.cpus.unwrap_or(0), share.cpus.unwrap_or(0));
                resources.push(quota("cpu", &json!(own), &json!(lent(total, own))));
            }
            "memory" => {
                let (total, own) = (flavor.memory_mib.unwrap_or(0), share.memory_mib.unwrap_or(0));
                resources.push(quota("memory", &memory(own), &memory(lent(total, own))));
            }
            _ => {
                let per_gpu = devices.iter().find(|device| &device.name == name).map_or(1, |device| device.per_gpu);
                resources.push(quota(name, &json!(share.gpus * per_gpu), &json!(share.borrow_gpus * per_gpu)));
            }
        }
    }
    json!({ "name": flavor.name, "resources": resources })
}

fn cluster_queue(kube: &KubeModel, tenant: &TenantQueue, flavors: Vec<ResourceId>) -> Planned {
    let covered = covered(kube);
    let flavor_entries: Vec<Value> = kube
        .flavors
        .iter()
        .zip(&tenant.quotas)
        .map(|(flavor, share)| flavor_quotas(&covered, &kube.devices, flavor, share))
        .collect();
    let mut spec = serde_json::Map::new();
    spec.insert(kube.kueue.cohort_field().to_owned(), json!(kube.cohort));
    spec.insert(
        "namespaceSelector".to_owned(),
        json!({ "matchLabels": { "kubernetes.io/metadata.name": tenant.name } }),
    );
    spec.insert("queueingStrategy".to_owned(), json!("BestEffortFIFO"));
    spec.insert(
        "preemption".to_owned(),
        json!({
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": { "policy": "Never" },
            "withinClusterQueue": "LowerPriority",
        }),
    );
    spec.insert("resourceGroups".to_owned(), json!([{ "coveredResources": covered, "flavors": flavor_entries }]));
    let object = KubeObject::new(
        "clusterqueues",
        json!({
            "apiVersion": kube.kueue.api_version(),
            "kind": "ClusterQueue",
            "metadata": metadata(&tenant.name, None),
            "spec": spec,
        }),
    );
    Planned { object, after: flavors }
}

/// Labels a job sets to run in a tenant's queue at its priority, for the docs and
/// the validators' Jobs.
#[must_use]
pub fn job_labels(tenant: &str) -> Value {
    json!({ "kueue.x-k8s.io/queue-name": tenant, "kueue.x-k8s.io/priority-class": tenant })
}
