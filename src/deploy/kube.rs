//! Kubernetes objects in the API stage: read from the API server, planned against
//! the live objects, applied with server-side apply, pruned when they leave the
//! blueprint.
//!
//! Stage: observe → plan → apply (Kubernetes). Input: the graph's
//! [`KubeObject`]s and the inventory's `kubernetes` section (a kubeconfig). Output:
//! observed values (each object projected onto the fields toolkit applies, as YAML;
//! what would change is sent as a `dryRun=All` apply, so the plan warns of a
//! conflict or a refusal before the deploy meets it),
//! the objects labelled as toolkit's that the blueprint no longer has
//! ([`Orphan`]s, planned as removals), notes for the plan (a kind the server does
//! not serve), and an outcome per object applied or deleted.
//!
//! A shared object (a Node, whose labels toolkit sets) is never created: one that is
//! not in the cluster yet waits for its kubelet. Objects apply in graph order; one
//! whose dependency failed is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use crate::apply::{Outcome, ResourceOutcome, SkipReason};
use crate::graph::ResourceGraph;
use crate::inventory::Inventory;
use crate::kube::{ApplyOptions, Connection, Deleted, KubeClient, KubeError};
use crate::plan::{Action, Change, Plan};
use crate::resource::api::{ApiDesired, KUBERNETES_KIND, KUBERNETES_TARGET, Observed};
use crate::resource::kube::{FIELD_MANAGER, KubeObject, project, yaml};
use crate::resource::{Desired, ResourceId};

/// Kinds toolkit may have applied and deletes when they leave the blueprint, by API
/// group with the version used when the blueprint has none of the group left;
/// dependents first (a LocalQueue before its ClusterQueue, a queue before its flavor).
const PRUNABLE: &[(&str, &str, &[KindPlural])] = &[
    (
        "kueue.x-k8s.io",
        "v1beta2",
        &[
            ("LocalQueue", "localqueues"),
            ("ClusterQueue", "clusterqueues"),
            ("Cohort", "cohorts"),
            ("ResourceFlavor", "resourceflavors"),
            ("Topology", "topologies"),
            ("WorkloadPriorityClass", "workloadpriorityclasses"),
        ],
    ),
    ("mellanox.com", "v1alpha1", &[("NicClusterPolicy", "nicclusterpolicies")]),
];

/// A kind and its REST plural.
type KindPlural = (&'static str, &'static str);

/// A live object labelled as toolkit's that the blueprint no longer has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// Its resource id (`kubernetes:k8s:ClusterQueue/product`).
    pub id: String,
    /// `Kind/[namespace/]name`.
    pub display: String,
    /// Its REST path.
    pub path: String,
    /// Its toolkit-applied fields as YAML (the plan's `before`).
    pub before: String,
}

/// What the API server reports about the graph's objects.
#[derive(Debug, Default)]
pub struct KubeObservation {
    /// Observed values by resource id (`None`: absent).
    pub observed: Observed,
    /// toolkit's objects no longer desired.
    pub orphans: Vec<Orphan>,
    /// Lines for the plan's warnings.
    pub notes: Vec<String>,
    /// Why the server could not be read (then nothing else is known).
    pub unreachable: Option<String>,
}

/// The graph's Kubernetes objects, with their indexes.
fn objects(graph: &ResourceGraph) -> Vec<(usize, &KubeObject)> {
    graph
        .resources
        .iter()
        .enumerate()
        .filter_map(|(index, resource)| match &*resource.desired {
            Desired::Api(item) => item.kubernetes().map(|object| (index, object)),
            _ => None,
        })
        .collect()
}

/// A client for the inventory's kubeconfig; `None` when the inventory has none.
///
/// # Errors
/// The kubeconfig cannot be used (the message names it and what to fix).
pub fn client(inventory: &Inventory, base: &Path) -> Result<Option<KubeClient>, KubeError> {
    let Some(access) = &inventory.kubernetes else { return Ok(None) };
    let path = if access.kubeconfig.is_absolute() { access.kubeconfig.clone() } else { base.join(&access.kubeconfig) };
    let connection = Connection::load(&path, access.context.as_deref())?;
    KubeClient::new(connection).map(Some)
}

/// Reads every Kubernetes object of the graph, then lists toolkit's objects of the
/// kinds it prunes.
pub async fn observe(graph: &ResourceGraph, inventory: &Inventory, base: &Path) -> KubeObservation {
    let objects = objects(graph);
    let mut observation = KubeObservation::default();
    if objects.is_empty() {
        return observation;
    }
    let kube = match client(inventory, base) {
        Ok(Some(kube)) => kube,
        Ok(None) => {
            observation.notes.push(format!(
                "{} Kubernetes objects not read: the inventory names no kubeconfig (`kubernetes: {{kubeconfig: PATH}}`)",
                objects.len()
            ));
            return observation;
        }
        Err(error) => {
            observation.unreachable = Some(error.to_string());
            return observation;
        }
    };
    match read(&kube, &objects).await {
        Ok((observed, orphans, notes)) => {
            observation.observed = observed;
            observation.orphans = orphans;
            observation.notes = notes;
        }
        Err(error) => observation.unreachable = Some(error.to_string()),
    }
    observation
}

async fn read(
    kube: &KubeClient,
    objects: &[(usize, &KubeObject)],
) -> Result<(Observed, Vec<Orphan>, Vec<String>), KubeError> {
    let mut observed = Observed::new();
    let mut notes: BTreeSet<String> = BTreeSet::new();
    for (_, object) in objects {
        let id = ApiDesired::Kubernetes(Box::new((*object).clone())).id();
        let value = match kube.get(object).await {
            Ok(live) => live.map(|live| yaml(&project(&object.body, &live))),
            // Applying it fails the same way: the plan says so now.
            Err(error @ KubeError::KindNotServed { .. }) => {
                notes.insert(error.to_string());
                observed.insert(id, None);
                continue;
            }
            Err(error) => return Err(error),
        };
        // What would change goes through the server's admission and validation now
        // (`dryRun=All`), so a conflict or a refusal shows in the plan, not mid-deploy.
        let changes = value.as_deref() != Some(object.yaml().as_str()) && !(object.shared && value.is_none());
        if changes {
            match kube.apply(object, ApplyOptions { force: false, dry_run: true }).await {
                // Its namespace is created by the same deploy, first.
                Ok(_) | Err(KubeError::NamespaceMissing { .. }) => {}
                Err(error @ (KubeError::Conflict { .. } | KubeError::Invalid { .. } | KubeError::Forbidden { .. })) => {
                    notes.insert(format!("the API server would refuse it (dry run): {error}"));
                }
                Err(error) => return Err(error),
            }
        }
        observed.insert(id, value);
    }
    let desired: BTreeSet<String> = objects.iter().map(|(_, object)| object.path()).collect();
    let mut orphans = Vec::new();
    for (group, default_version, kinds) in PRUNABLE {
        let version = objects
            .iter()
            .find(|(_, object)| object.group() == *group)
            .map_or_else(|| format!("{group}/{default_version}"), |(_, object)| object.api_version.clone());
        for (kind, plural) in *kinds {
            let Some(items) = kube.list_managed(&version, plural).await? else { continue };
            for item in items.iter().filter(|item| applied_by_toolkit(item)) {
                let mut body = item.clone();
                body["apiVersion"] = json!(version);
                body["kind"] = json!(kind);
                let object = KubeObject::new(plural, body);
                if desired.contains(&object.path()) {
                    continue;
                }
                let mut shown = json!({"apiVersion": version, "kind": kind, "metadata": {"name": object.name}});
                if let Some(namespace) = &object.namespace {
                    shown["metadata"]["namespace"] = json!(namespace);
                }
                if let Some(spec) = item.get("spec") {
                    shown["spec"] = spec.clone();
                }
                orphans.push(Orphan {
                    id: ApiDesired::Kubernetes(Box::new(object.clone())).id(),
                    display: object.display(),
                    path: object.path(),
                    before: yaml(&shown),
                });
            }
        }
    }
    Ok((observed, orphans, notes.into_iter().collect()))
}

/// Whether toolkit applied the object (its label alone could have been copied).
fn applied_by_toolkit(item: &Value) -> bool {
    item.pointer("/metadata/managedFields").and_then(Value::as_array).is_some_and(|entries| {
        entries.iter().any(|entry| entry["manager"] == FIELD_MANAGER && entry["operation"] == "Apply")
    })
}

/// Adjusts the plan's Kubernetes changes to what was observed: a shared object the
/// cluster does not have yet is not created; then one removal per orphan.
pub fn plan(changes: &mut Vec<Change>, graph: &ResourceGraph, observation: &KubeObservation) {
    let shared: BTreeSet<String> = objects(graph)
        .into_iter()
        .filter(|(_, object)| object.shared)
        .map(|(_, object)| ApiDesired::Kubernetes(Box::new(object.clone())).id())
        .collect();
    for change in changes.iter_mut().filter(|change| change.kind() == KUBERNETES_KIND) {
        if change.action == Action::Create && shared.contains(change.id.as_str()) {
            change.action = Action::NoOp;
            change.reason = "not in the cluster yet: its labels are set once its kubelet registers it".into();
        }
    }
    for orphan in &observation.orphans {
        changes.push(Change {
            id: orphan.id.as_str().into(),
            name: orphan.display.as_str().into(),
            action: Action::Remove,
            reason: "applied by toolkit, no longer in the blueprint: delete".into(),
            after: None,
            secret: false,
            disruption: crate::resource::Disruption::None,
            delta: crate::plan::Delta::from_before(orphan.before.as_str().into()),
        });
    }
}

/// Applies the plan's Kubernetes creates and updates in graph order (one whose
/// dependency failed is skipped), then deletes its Kubernetes removals. Removals are
/// no resources of the graph: an object still finalizing is added to `notes`, a
/// failed deletion logged as an error.
pub async fn apply(
    graph: &ResourceGraph,
    plan: &Plan,
    inventory: &Inventory,
    base: &Path,
    force_conflicts: bool,
    notes: &mut Vec<String>,
) -> Vec<ResourceOutcome> {
    let by_id: BTreeMap<&str, &Change> = plan.changes.iter().map(|change| (change.id.as_str(), change)).collect();
    let position: BTreeMap<usize, usize> = graph.ordered().enumerate().map(|(at, index)| (index, at)).collect();
    let mut work = objects(graph);
    work.sort_by_key(|(index, _)| position.get(index).copied().unwrap_or(usize::MAX));
    let removals: Vec<&Change> = plan
        .changes
        .iter()
        .filter(|change| change.kind() == KUBERNETES_KIND && change.action == Action::Remove)
        .collect();
    let changing =
        |id: &str| by_id.get(id).is_some_and(|change| matches!(change.action, Action::Create | Action::Update));
    let mut out = Vec::new();
    if !work.iter().any(|(_, object)| changing(&id_of(object))) && removals.is_empty() {
        return out;
    }
    let kube = match client(inventory, base) {
        Ok(Some(kube)) => kube,
        Ok(None) => return out,
        Err(error) => {
            if let Some((index, object)) = work.iter().find(|(_, object)| changing(&id_of(object))) {
                out.push(outcome(*index, object, Outcome::Failed { error: error.to_string() }, Instant::now()));
            } else {
                tracing::error!("kubernetes: {error}");
            }
            return out;
        }
    };
    let options = ApplyOptions { force: force_conflicts, dry_run: false };
    // By graph index: a resource's dependencies are edges of the graph.
    let mut failed: BTreeSet<usize> = BTreeSet::new();
    for (index, object) in work {
        let started = Instant::now();
        if !changing(&id_of(object)) {
            out.push(outcome(index, object, Outcome::Unchanged, started));
            continue;
        }
        if let Some(upstream) = graph.dependencies(index).find(|dependency| failed.contains(dependency)) {
            failed.insert(index);
            let reason = SkipReason::Upstream { id: graph.resources[upstream].id.clone() };
            out.push(outcome(index, object, Outcome::Skipped { reason }, started));
            continue;
        }
        match kube.apply(object, options).await {
            Ok(_) => out.push(outcome(index, object, Outcome::Changed, started)),
            Err(error) => {
                failed.insert(index);
                out.push(outcome(index, object, Outcome::Failed { error: error.to_string() }, started));
            }
        }
    }
    for change in removals {
        let Some(path) = removal_path(change) else { continue };
        match kube.delete(&path, false).await {
            Ok(Deleted::Deleted | Deleted::Absent) => {}
            Ok(Deleted::Finalizing) => notes.push(format!("{}: deleted, its finalizers still run", change.name)),
            Err(error) => tracing::error!("deleting {}: {error}", change.name),
        }
    }
    out
}

/// The REST path of a removal, rebuilt from its `before` (the object's identity).
fn removal_path(change: &Change) -> Option<String> {
    let before: Value = serde_norway::from_str(change.before()?).ok()?;
    let kind = before.get("kind")?.as_str()?;
    let plural = PRUNABLE.iter().flat_map(|(_, _, kinds)| kinds.iter()).find(|(known, _)| *known == kind)?.1;
    Some(KubeObject::new(plural, before).path())
}

fn id_of(object: &KubeObject) -> String {
    ApiDesired::Kubernetes(Box::new(object.clone())).id()
}

fn outcome(index: usize, object: &KubeObject, outcome: Outcome, started: Instant) -> ResourceOutcome {
    ResourceOutcome {
        index,
        id: ResourceId(id_of(object).into()),
        target: KUBERNETES_TARGET.to_owned(),
        outcome,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::{Resource, Target};

    fn object(plural: &str, body: Value) -> KubeObject {
        KubeObject::new(plural, body)
    }

    #[test]
    fn a_missing_node_waits_for_its_kubelet_and_orphans_are_removed() {
        let node = object("nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx01"}})).shared();
        let queue = object(
            "clusterqueues",
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "research"}}),
        );
        let items: Vec<ApiDesired> = [node, queue].into_iter().map(|o| ApiDesired::Kubernetes(Box::new(o))).collect();
        let resources = items
            .iter()
            .map(|item| {
                let target = Target::node(KUBERNETES_TARGET);
                Resource::new(target, &item.name(), Desired::Api(Box::new(item.clone())))
            })
            .collect();
        let graph = crate::graph::build(resources).expect("graph");
        let observed: Observed = items.iter().map(|item| (item.id(), None)).collect();
        let mut changes = crate::plan::api::diff(&items, &observed);
        let gone = object(
            "localqueues",
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": "product", "namespace": "product"}, "spec": {"clusterQueue": "product"}}),
        );
        let observation = KubeObservation {
            orphans: vec![Orphan { id: id_of(&gone), display: gone.display(), path: gone.path(), before: gone.yaml() }],
            ..KubeObservation::default()
        };
        plan(&mut changes, &graph, &observation);
        let summary: Vec<(&str, Action, &str)> =
            changes.iter().map(|change| (change.name.as_str(), change.action, change.reason.as_str())).collect();
        assert_eq!(
            summary,
            [
                (
                    "Node/dgx01",
                    Action::NoOp,
                    "not in the cluster yet: its labels are set once its kubelet registers it"
                ),
                ("ClusterQueue/research", Action::Create, "absent"),
                (
                    "LocalQueue/product/product",
                    Action::Remove,
                    "applied by toolkit, no longer in the blueprint: delete"
                ),
            ]
        );
        assert_eq!(removal_path(&changes[2]).as_deref(), Some(gone.path().as_str()));
    }

    #[test]
    fn only_objects_toolkit_applied_are_pruned() {
        let applied = json!({"metadata": {"managedFields": [
            {"manager": "kubectl-edit", "operation": "Update"}, {"manager": "toolkit", "operation": "Apply"}]}});
        let labelled_by_hand =
            json!({"metadata": {"managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"}]}});
        assert!(applied_by_toolkit(&applied));
        assert!(!applied_by_toolkit(&labelled_by_hand));
        assert!(!applied_by_toolkit(&json!({"metadata": {}})));
    }
}
