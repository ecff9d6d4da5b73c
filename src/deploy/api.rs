//! The API stage: BMCs over Redfish and cloud instances over EC2, observed, planned
//! and applied before any host is reached over SSH.
//!
//! Stage: observe → plan → apply (API targets). Input: the graph's `Desired::Api`
//! resources and the inventory (`bmcs`, `cloud`). Output: [`ApiObservation`] (what
//! the APIs report, firmware versions, BMCs that could not be read), plan
//! [`Change`]s ([`changes`], pure), and an [`ApplyReport`] for the API resources
//! ([`apply`]). After instances run, their addresses are written to the inventory's
//! cloud hosts file ([`crate::inventory::cloud_hosts_path`]), which the SSH stage
//! loads with the inventory.
//!
//! Two rules make the plan converge like a provisioning tool's, decided here as data:
//! a one-time PXE boot is planned only for a node that is off (it is being
//! provisioned; a running node is left to boot as it does), and a node that is on
//! and gets BIOS changes is restarted, since BMCs apply BIOS settings at boot.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt as _;

use crate::apply::{ApplyReport, Outcome, ResourceOutcome, SkipReason};
use crate::bmc::resources;
use crate::bmc::{BmcConfig, PowerState, Redfish, ResetType, firmware_check};
use crate::cloud::{AwsCredentials, CLUSTER_TAG, Ec2, Instance, NODE_TAG, NodeSpec, instance_hosts};
use crate::graph::ResourceGraph;
use crate::inventory::schema::Cloud;
use crate::inventory::{CloudHosts, Inventory, secrets};
use crate::plan::{Action, Change, Plan};
use crate::resource::api::{ApiDesired, CLOUD_TARGET, Observed};
use crate::resource::{Desired, ResourceId};

/// How long a power change or instances take to come up before the stage fails.
const WAIT: Duration = Duration::from_mins(10);

/// What one BMC reports: observed values and firmware versions.
type NodeReport = (Observed, BTreeMap<String, String>);

/// The graph's API resources, with their indexes.
#[must_use]
pub fn items(graph: &ResourceGraph) -> Vec<(usize, &ApiDesired)> {
    graph
        .resources
        .iter()
        .enumerate()
        .filter_map(|(index, resource)| match &resource.desired {
            Desired::Api(item) => Some((index, item.as_ref())),
            _ => None,
        })
        .collect()
}

/// What the APIs report.
#[derive(Debug, Default)]
pub struct ApiObservation {
    /// Observed values by resource id (`None`: the object does not exist).
    pub observed: Observed,
    /// Firmware versions by node, as its BMC reports them.
    pub firmware: BTreeMap<String, BTreeMap<String, String>>,
    /// BMCs or the cloud (`cloud`) that could not be read, with the reason.
    pub unreachable: BTreeMap<String, String>,
    /// Instances tagged with this cluster whose node is no longer desired.
    pub orphans: Vec<Instance>,
}

/// An EC2 client from the inventory's `cloud` section, credentials resolved from
/// their references (relative files from `base`).
///
/// # Errors
/// An unreadable credential (the message names the reference, not the value), or a
/// bad endpoint.
pub fn ec2(cloud: &Cloud, base: &Path) -> Result<Ec2, String> {
    let access = secrets::resolve(&cloud.access_key_id, base).map_err(|error| error.to_string())?;
    let secret = secrets::resolve(&cloud.secret_access_key, base).map_err(|error| error.to_string())?;
    let credentials = AwsCredentials::new(&access, &secret);
    let region = cloud.region.as_deref().unwrap_or("us-east-1");
    let client = match &cloud.endpoint {
        Some(endpoint) => Ec2::new(endpoint, region, credentials),
        None => Ec2::for_region(region, credentials),
    };
    client.map_err(|error| error.to_string())
}

/// Reads every API object of the graph: each BMC once (in parallel), the cloud once.
pub async fn observe(graph: &ResourceGraph, inventory: &Inventory, cluster: &str, base: &Path) -> ApiObservation {
    let items: Vec<ApiDesired> = items(graph).into_iter().map(|(_, item)| item.clone()).collect();
    let mut observation = ApiObservation::default();
    if items.is_empty() {
        return observation;
    }
    let hosts: BTreeSet<&str> = items.iter().filter(|item| item.is_bmc()).map(ApiDesired::target).collect();
    let items_ref = &items;
    let results: Vec<(String, Result<NodeReport, String>)> = futures::stream::iter(hosts)
        .map(|host| async move {
            let result = async {
                let config = BmcConfig::from_inventory(inventory, host, base).map_err(|error| error.to_string())?;
                let redfish = Redfish::connect(config).await.map_err(|error| error.to_string())?;
                let observed = resources::observe_node(&redfish, items_ref).await.map_err(|error| error.to_string());
                let _ = redfish.close().await;
                observed
            }
            .await;
            (host.to_owned(), result)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (host, result) in results {
        match result {
            Ok((observed, firmware)) => {
                observation.observed.extend(observed);
                observation.firmware.insert(host, firmware);
            }
            Err(reason) => {
                observation.unreachable.insert(host, reason);
            }
        }
    }
    if items.iter().any(ApiDesired::is_cloud) {
        let result = async {
            let cloud = inventory.cloud.as_ref().ok_or("the inventory has no `cloud` section")?;
            let ec2 = ec2(cloud, base)?;
            let observed = resources::observe_cloud(&ec2, cluster, &items).await.map_err(|error| error.to_string())?;
            let instances = ec2.cluster_instances(cluster).await.map_err(|error| error.to_string())?;
            Ok::<_, String>((observed, instances))
        }
        .await;
        match result {
            Ok((observed, instances)) => {
                let desired: BTreeSet<&str> = items
                    .iter()
                    .filter_map(|item| match item {
                        ApiDesired::Instance { node, .. } => Some(node.as_str()),
                        _ => None,
                    })
                    .collect();
                observation.orphans = instances
                    .into_iter()
                    .filter(|instance| instance.tag(NODE_TAG).is_none_or(|node| !desired.contains(node)))
                    .collect();
                observation.observed.extend(observed);
            }
            Err(reason) => {
                observation.unreachable.insert(CLOUD_TARGET.to_owned(), reason);
            }
        }
    }
    observation
}

/// The plan's changes for the API resources (in graph order), then one removal per
/// orphan instance. Pure.
#[must_use]
pub fn changes(graph: &ResourceGraph, observation: &ApiObservation) -> Vec<Change> {
    let items: Vec<ApiDesired> = items(graph).into_iter().map(|(_, item)| item.clone()).collect();
    let mut changes = crate::plan::api::diff(&items, &observation.observed);
    let bios_changing: BTreeSet<String> = changes
        .iter()
        .filter(|change| change.kind == "bios" && change.action != Action::NoOp)
        .map(|change| change.target.clone())
        .collect();
    let power: BTreeMap<String, Option<String>> = changes
        .iter()
        .filter(|change| change.kind == "power")
        .map(|change| (change.target.clone(), change.before.clone()))
        .collect();
    for change in &mut changes {
        let is_on = power.get(&change.target).is_some_and(|before| before.as_deref() == Some("On"));
        if let Some(reason) = observation
            .unreachable
            .get(&change.target)
            .or_else(|| observation.unreachable.get(CLOUD_TARGET).filter(|_| is_cloud_kind(&change.kind)))
        {
            change.reason = format!("not observed: {reason}");
            continue;
        }
        match change.kind.as_str() {
            "boot" if is_on && change.action != Action::NoOp => {
                change.action = Action::NoOp;
                "node is on: PXE boot only when it is provisioned".clone_into(&mut change.reason);
            }
            "power" if change.action == Action::NoOp && is_on && bios_changing.contains(&change.target) => {
                change.action = Action::Update;
                "restart: BIOS settings apply at boot".clone_into(&mut change.reason);
            }
            _ => {}
        }
    }
    for instance in &observation.orphans {
        let node = instance.tag(NODE_TAG).unwrap_or(&instance.id).to_owned();
        let cluster = instance.tag(CLUSTER_TAG).unwrap_or_default();
        changes.push(Change {
            id: format!("{node}:instance:{cluster}"),
            target: node,
            kind: "instance".to_owned(),
            name: cluster.to_owned(),
            action: Action::Remove,
            reason: format!("`{}` is no longer in the blueprint: terminate", instance.id),
            before: Some(format!("{} {}", instance.instance_type, instance.image_id)),
            after: None,
            diff: None,
            secret: false,
            disruption: crate::resource::Disruption::None,
            values: Vec::new(),
        });
    }
    changes
}

fn is_cloud_kind(kind: &str) -> bool {
    matches!(kind, "instance" | "placement-group")
}

/// Hosts whose gate (power or instance) is not in place yet: they cannot be
/// observed or configured over SSH until the API stage ran. A node meant to be off
/// is never configured over SSH.
#[must_use]
pub fn pending_hosts(changes: &[Change]) -> BTreeSet<String> {
    changes
        .iter()
        .filter(|change| match change.kind.as_str() {
            "instance" => change.action == Action::Create,
            "power" => {
                change.after.as_deref() == Some("Off")
                    || (change.action != Action::NoOp && change.before.as_deref() != Some("On"))
            }
            _ => false,
        })
        .map(|change| change.target.clone())
        .collect()
}

/// One line per firmware component whose version is not the expected one.
#[must_use]
pub fn firmware_warnings(
    expected: &BTreeMap<String, BTreeMap<String, String>>,
    observation: &ApiObservation,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for (host, wanted) in expected {
        let Some(actual) = observation.firmware.get(host) else { continue };
        for mismatch in firmware_check(wanted, actual) {
            warnings.push(format!(
                "{host}: firmware `{}` is `{}`, the hardware profile expects `{}` (toolkit does not update firmware)",
                mismatch.component,
                mismatch.actual.as_deref().unwrap_or("not reported"),
                mismatch.expected
            ));
        }
    }
    warnings
}

/// Applies the plan's API changes in graph order: per BMC, BIOS attributes, then
/// the one-time boot, then power (BMCs in parallel); in the cloud, the placement
/// group, then instances (run, replaced, or terminated), waiting until they run.
/// Afterwards the cloud hosts file is rewritten from the cluster's instances.
pub async fn apply(
    graph: &ResourceGraph,
    plan: &Plan,
    inventory: &Inventory,
    inventory_path: &Path,
    base: &Path,
    parallel: usize,
) -> ApplyReport {
    let by_id: BTreeMap<&str, &Change> = plan.changes.iter().map(|change| (change.id.as_str(), change)).collect();
    let mut work: BTreeMap<String, Vec<(usize, &ApiDesired, &Change)>> = BTreeMap::new();
    let mut cloud_work: Vec<(usize, &ApiDesired, &Change)> = Vec::new();
    for &index in &graph.order {
        let Desired::Api(item) = &graph.resources[index].desired else { continue };
        let Some(change) = by_id.get(item.id().as_str()) else { continue };
        if item.is_cloud() {
            cloud_work.push((index, item, change));
        } else if item.is_bmc() {
            work.entry(item.target().to_owned()).or_default().push((index, item, change));
        }
    }
    let mut outcomes: Vec<ResourceOutcome> = futures::stream::iter(work)
        .map(|(host, steps)| async move { apply_bmc(inventory, base, &host, &steps).await })
        .buffer_unordered(parallel.max(1))
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    let has_cloud = !cloud_work.is_empty() || plan.changes.iter().any(|c| c.kind == "instance");
    if has_cloud && let Some(cloud) = &inventory.cloud {
        outcomes.extend(apply_cloud(cloud, base, inventory_path, inventory, &plan.cluster, &cloud_work, plan).await);
    }
    let order: BTreeMap<usize, usize> =
        graph.order.iter().enumerate().map(|(position, &index)| (index, position)).collect();
    outcomes.sort_by_key(|outcome| order.get(&outcome.index).copied().unwrap_or(usize::MAX));
    ApplyReport { outcomes, cancelled: false, aborted: false }
}

fn outcome(index: usize, item: &ApiDesired, outcome: Outcome, started: Instant) -> ResourceOutcome {
    ResourceOutcome {
        index,
        id: ResourceId(item.id()),
        target: item.target().to_owned(),
        outcome,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// Marks every step after a failure as skipped, naming the failed one.
fn finish_after_failure(
    steps: &[(usize, &ApiDesired, &Change)],
    from: usize,
    failed: &ApiDesired,
    out: &mut Vec<ResourceOutcome>,
) {
    for (index, item, _) in &steps[from..] {
        let reason = SkipReason::Upstream { id: ResourceId(failed.id()) };
        out.push(outcome(*index, item, Outcome::Skipped { reason }, Instant::now()));
    }
}

async fn apply_bmc(
    inventory: &Inventory,
    base: &Path,
    host: &str,
    steps: &[(usize, &ApiDesired, &Change)],
) -> Vec<ResourceOutcome> {
    let mut out = Vec::new();
    let changing = |change: &Change| matches!(change.action, Action::Create | Action::Update);
    if !steps.iter().any(|(_, _, change)| changing(change)) {
        for (index, item, _) in steps {
            out.push(outcome(*index, item, Outcome::Unchanged, Instant::now()));
        }
        return out;
    }
    let started = Instant::now();
    let connected = async {
        let config = BmcConfig::from_inventory(inventory, host, base)?;
        let redfish = Redfish::connect(config).await?;
        let system = redfish.system().await?;
        Ok::<_, crate::bmc::BmcError>((redfish, system))
    }
    .await;
    let (redfish, system) = match connected {
        Ok(connected) => connected,
        Err(error) => {
            let (index, item, _) = steps[0];
            out.push(outcome(index, item, Outcome::Failed { error: error.to_string() }, started));
            finish_after_failure(steps, 1, item, &mut out);
            return out;
        }
    };
    // BIOS attributes go in one PATCH: BMCs stage them together for the next boot.
    let bios: BTreeMap<String, serde_json::Value> = steps
        .iter()
        .filter(|(_, _, change)| changing(change))
        .filter_map(|(_, item, _)| match item {
            ApiDesired::BiosAttribute { name, value, .. } => Some((name.clone(), value.clone())),
            _ => None,
        })
        .collect();
    let mut bios_result: Option<Result<(), String>> = None;
    for (position, (index, item, change)) in steps.iter().enumerate() {
        let started = Instant::now();
        if !changing(change) {
            out.push(outcome(*index, item, Outcome::Unchanged, started));
            continue;
        }
        let result = match item {
            ApiDesired::BiosAttribute { .. } => bios_result
                .get_or_insert(redfish.set_bios(&system, &bios).await.map_err(|error| error.to_string()))
                .clone(),
            ApiDesired::BootOverride { target, .. } => {
                redfish.boot_once(&system, *target).await.map(|_| ()).map_err(|error| error.to_string())
            }
            ApiDesired::Power { state, .. } => power(&redfish, &system, *state, change).await,
            ApiDesired::Instance { .. } | ApiDesired::PlacementGroup { .. } | ApiDesired::Kubernetes(_) => Ok(()),
        };
        match result {
            Ok(()) => out.push(outcome(*index, item, Outcome::Changed, started)),
            Err(error) => {
                out.push(outcome(*index, item, Outcome::Failed { error }, started));
                finish_after_failure(steps, position + 1, item, &mut out);
                break;
            }
        }
    }
    let _ = redfish.close().await;
    out
}

/// On from off, off from on, or a restart of a node that is on, then waits until
/// the BMC reports the desired state.
async fn power(redfish: &Redfish, system: &str, state: PowerState, change: &Change) -> Result<(), String> {
    let is_on = change.before.as_deref() == Some("On");
    let reset = match state {
        PowerState::On if is_on => ResetType::ForceRestart,
        PowerState::Off => ResetType::ForceOff,
        _ => ResetType::On,
    };
    redfish.reset(system, reset).await.map_err(|error| error.to_string())?;
    redfish.wait_for_power(system, state, WAIT).await.map_err(|error| error.to_string())
}

async fn apply_cloud(
    cloud: &Cloud,
    base: &Path,
    inventory_path: &Path,
    inventory: &Inventory,
    cluster: &str,
    steps: &[(usize, &ApiDesired, &Change)],
    plan: &Plan,
) -> Vec<ResourceOutcome> {
    let mut out = Vec::new();
    let ec2 = match ec2(cloud, base) {
        Ok(ec2) => ec2,
        Err(error) => {
            if let Some((index, item, _)) = steps.first() {
                out.push(outcome(*index, item, Outcome::Failed { error }, Instant::now()));
                finish_after_failure(steps, 1, item, &mut out);
            } else {
                eprintln!("error: cloud: {error}");
            }
            return out;
        }
    };
    let mut started_ids: Vec<String> = Vec::new();
    let mut started_items: Vec<(usize, &ApiDesired, Instant)> = Vec::new();
    for (position, (index, item, change)) in steps.iter().enumerate() {
        let started = Instant::now();
        if !matches!(change.action, Action::Create | Action::Update) {
            out.push(outcome(*index, item, Outcome::Unchanged, started));
            continue;
        }
        let result = match item {
            ApiDesired::PlacementGroup { cluster, name } => {
                ec2.create_placement_group(cluster, name).await.map(|_| None).map_err(|error| error.to_string())
            }
            ApiDesired::Instance { cluster, node, placement_group, .. } => {
                replace_and_run(&ec2, cluster, node, placement_group.as_deref(), item, change).await.map(Some)
            }
            _ => Ok(None),
        };
        match result {
            Ok(Some(id)) => {
                started_ids.push(id);
                started_items.push((*index, item, started));
            }
            Ok(None) => out.push(outcome(*index, item, Outcome::Changed, started)),
            Err(error) => {
                out.push(outcome(*index, item, Outcome::Failed { error }, started));
                // Instances are independent of each other; only the placement group
                // is a precondition of the rest.
                if matches!(item, ApiDesired::PlacementGroup { .. }) {
                    finish_after_failure(steps, position + 1, item, &mut out);
                    break;
                }
            }
        }
    }
    if let Err(error) = terminate_removed(&ec2, cluster, plan).await {
        eprintln!("error: terminating instances no longer in the blueprint: {error}");
    }
    if !started_ids.is_empty() {
        let waited = ec2.wait_running(&started_ids, WAIT, Duration::from_secs(2)).await;
        for (index, item, started) in started_items {
            let result = match &waited {
                Ok(_) => Outcome::Changed,
                Err(error) => Outcome::Failed { error: error.to_string() },
            };
            out.push(outcome(index, item, result, started));
        }
    }
    match write_hosts(&ec2, cloud, inventory_path, inventory, cluster).await {
        Ok(path) => eprintln!("cloud hosts written to {}", path.display()),
        Err(error) => eprintln!("error: cannot record the cloud hosts: {error}"),
    }
    out
}

/// Terminates the cluster's instances the plan removes (nodes no longer in the
/// blueprint), found again by tag so only this cluster's are touched.
async fn terminate_removed(ec2: &Ec2, cluster: &str, plan: &Plan) -> Result<(), crate::cloud::CloudError> {
    let removed: BTreeSet<&str> = plan
        .changes
        .iter()
        .filter(|change| change.kind == "instance" && change.action == Action::Remove)
        .map(|change| change.id.as_str())
        .collect();
    if removed.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = ec2
        .cluster_instances(cluster)
        .await?
        .into_iter()
        .filter(|instance| {
            let node = instance.tag(NODE_TAG).unwrap_or(&instance.id);
            removed.contains(format!("{node}:instance:{cluster}").as_str())
        })
        .map(|instance| instance.id)
        .collect();
    if !ids.is_empty() {
        ec2.terminate_instances(&ids).await?;
        eprintln!("terminated {} instance(s) no longer in the blueprint", ids.len());
    }
    Ok(())
}

/// Runs one node; a node whose type or image changed is terminated first.
async fn replace_and_run(
    ec2: &Ec2,
    cluster: &str,
    node: &str,
    placement_group: Option<&str>,
    item: &ApiDesired,
    change: &Change,
) -> Result<String, String> {
    if change.action == Action::Update {
        let existing = ec2.cluster_instances(cluster).await.map_err(|error| error.to_string())?;
        let ids: Vec<String> = existing
            .into_iter()
            .filter(|instance| instance.tag(NODE_TAG) == Some(node))
            .map(|instance| instance.id)
            .collect();
        if !ids.is_empty() {
            ec2.terminate_instances(&ids).await.map_err(|error| error.to_string())?;
        }
    }
    let spec = NodeSpec::from_desired(item).ok_or("not an instance")?;
    tracing::info!(cluster, node, "run instance");
    let instance = ec2.run_node(cluster, placement_group, &spec).await.map_err(|error| error.to_string())?;
    Ok(instance.id)
}

async fn write_hosts(
    ec2: &Ec2,
    cloud: &Cloud,
    inventory_path: &Path,
    inventory: &Inventory,
    cluster: &str,
) -> Result<std::path::PathBuf, String> {
    let path = crate::inventory::cloud_hosts_path(inventory_path, inventory).ok_or("no `cloud` section")?;
    let instances = ec2.cluster_instances(cluster).await.map_err(|error| error.to_string())?;
    let hosts = CloudHosts {
        cluster: cluster.to_owned(),
        hosts: instance_hosts(&instances, &cloud.management_subnet, &cloud.rail_subnets),
    };
    let text = serde_norway::to_string(&hosts).map_err(|error| error.to_string())?;
    let header = "# Written by `toolkit deploy` from the cluster's running instances; loaded with the inventory.\n";
    crate::plan::state::write_atomic(&path, format!("{header}{text}").as_bytes()).map_err(|error| error.to_string())?;
    Ok(path)
}

pub use crate::resource::api::is_api_kind;

/// A plan of the API objects only (the API stage's), baseline observed.
#[must_use]
pub fn plan(
    graph: &ResourceGraph,
    observation: &ApiObservation,
    firmware: &BTreeMap<String, BTreeMap<String, String>>,
    inputs: crate::plan::diff::PlanInputs,
) -> Plan {
    let changes = changes(graph, observation);
    Plan {
        format_version: crate::plan::PLAN_FORMAT_VERSION,
        toolkit_version: env!("CARGO_PKG_VERSION").to_owned(),
        cluster: inputs.cluster,
        blueprint_sha256: inputs.blueprint_sha256,
        inventory_sha256: inputs.inventory_sha256,
        blueprint_path: None,
        inventory_path: None,
        baseline: crate::plan::Baseline::Observed,
        summary: crate::plan::Summary::of(&changes),
        changes,
        warnings: firmware_warnings(firmware, observation),
        rollout: None,
    }
}

/// The state after the API stage: API resources that are as desired (no-ops, or
/// applied) are recorded; others keep their old record; SSH resources are untouched.
#[must_use]
pub fn record(
    mut state: crate::plan::state::State,
    graph: &ResourceGraph,
    plan: &Plan,
    report: &ApplyReport,
) -> crate::plan::state::State {
    let actions: BTreeMap<&str, Action> =
        plan.changes.iter().map(|change| (change.id.as_str(), change.action)).collect();
    for (index, item) in items(graph) {
        let done = match actions.get(item.id().as_str()) {
            Some(Action::NoOp) => true,
            _ => report.outcomes.iter().any(|outcome| outcome.index == index && outcome.outcome.is_success()),
        };
        if done {
            state.record(&graph.resources[index]);
        }
    }
    for change in plan.changes.iter().filter(|change| change.action == Action::Remove && change.kind == "instance") {
        state.forget(&change.id);
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::api::{BootEnabled, BootTarget};
    use crate::resource::{Resource, Target, TargetKind};

    fn graph(items: Vec<ApiDesired>) -> ResourceGraph {
        let resources = items
            .into_iter()
            .map(|item| {
                let name = item.name();
                Resource::new(
                    Target { name: item.target().to_owned(), kind: TargetKind::Node },
                    &name,
                    Desired::Api(Box::new(item)),
                )
            })
            .collect();
        crate::graph::build(resources).expect("graph")
    }

    fn node_items() -> Vec<ApiDesired> {
        vec![
            ApiDesired::BiosAttribute { host: "n1".into(), name: "ProcTurboMode".into(), value: "Disabled".into() },
            ApiDesired::BootOverride { host: "n1".into(), target: BootTarget::Pxe, enabled: BootEnabled::Once },
            ApiDesired::Power { host: "n1".into(), state: PowerState::On },
        ]
    }

    fn observed(pairs: &[(&str, &str)]) -> ApiObservation {
        ApiObservation {
            observed: pairs.iter().map(|(id, value)| ((*id).to_owned(), Some((*value).to_owned()))).collect(),
            ..ApiObservation::default()
        }
    }

    fn actions(changes: &[Change]) -> Vec<(&str, Action, &str)> {
        changes.iter().map(|change| (change.kind.as_str(), change.action, change.reason.as_str())).collect()
    }

    #[test]
    fn a_node_that_is_off_is_provisioned_bios_then_pxe_then_power() {
        let graph = graph(node_items());
        let changes = changes(
            &graph,
            &observed(&[
                ("n1:bios:ProcTurboMode", "Enabled"),
                ("n1:boot:override", "Hdd/Continuous"),
                ("n1:power:system", "Off"),
            ]),
        );
        assert_eq!(
            actions(&changes),
            [
                ("bios", Action::Update, "Enabled → Disabled"),
                ("boot", Action::Update, "Hdd/Continuous → Pxe/Once"),
                ("power", Action::Update, "Off → On"),
            ]
        );
        assert_eq!(pending_hosts(&changes), BTreeSet::from(["n1".to_owned()]));
    }

    #[test]
    fn a_node_that_is_on_is_not_pxe_booted_and_restarts_for_bios_changes() {
        let graph = graph(node_items());
        let changes = changes(
            &graph,
            &observed(&[
                ("n1:bios:ProcTurboMode", "Enabled"),
                ("n1:boot:override", "Hdd/Continuous"),
                ("n1:power:system", "On"),
            ]),
        );
        assert_eq!(
            actions(&changes),
            [
                ("bios", Action::Update, "Enabled → Disabled"),
                ("boot", Action::NoOp, "node is on: PXE boot only when it is provisioned"),
                ("power", Action::Update, "restart: BIOS settings apply at boot"),
            ]
        );
        assert!(pending_hosts(&changes).is_empty(), "a node that is on is reachable over SSH");
        let converged = super::changes(
            &graph,
            &observed(&[
                ("n1:bios:ProcTurboMode", "Disabled"),
                ("n1:boot:override", "Hdd/Continuous"),
                ("n1:power:system", "On"),
            ]),
        );
        assert!(converged.iter().all(|change| change.action == Action::NoOp), "{converged:?}");
    }

    #[test]
    fn a_node_meant_to_be_off_is_never_reached_over_ssh() {
        let graph = graph(vec![ApiDesired::Power { host: "n1".into(), state: PowerState::Off }]);
        for observed_state in ["On", "Off"] {
            let changes = changes(&graph, &observed(&[("n1:power:system", observed_state)]));
            assert_eq!(pending_hosts(&changes), BTreeSet::from(["n1".to_owned()]), "{observed_state}");
        }
    }

    #[test]
    fn an_unreadable_bmc_says_why_and_firmware_mismatches_are_warnings() {
        let graph = graph(node_items());
        let mut observation = ApiObservation::default();
        observation.unreachable.insert("n1".into(), "connection refused".into());
        let changes = changes(&graph, &observation);
        assert!(changes.iter().all(|change| change.reason == "not observed: connection refused"), "{changes:?}");

        let expected = BTreeMap::from([(
            "n1".to_owned(),
            BTreeMap::from([("BIOS".to_owned(), "2.4.0".to_owned()), ("BMC".to_owned(), "1.0".to_owned())]),
        )]);
        let mut observation = ApiObservation::default();
        observation.firmware.insert("n1".into(), BTreeMap::from([("BIOS".to_owned(), "2.3.1".to_owned())]));
        assert_eq!(
            firmware_warnings(&expected, &observation),
            [
                "n1: firmware `BIOS` is `2.3.1`, the hardware profile expects `2.4.0` (toolkit does not update firmware)",
                "n1: firmware `BMC` is `not reported`, the hardware profile expects `1.0` (toolkit does not update firmware)",
            ]
        );
    }
}
