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
//!
//! A reset applies every BIOS value queued on the BMC, whoever queued it: `api::queued`
//! plans those values (wanted, or overwritten), and [`apply`] leaves only the
//! blueprint's values queued before anything else on that BMC, refusing to power on
//! or restart a node while an unwanted one remains.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt as _;

use super::{firmware, kube};
use crate::apply::{ApplyReport, Outcome, ResourceOutcome, SkipReason};
use crate::bmc::resources::{self, NodeFacts};
use crate::bmc::{BiosSettings, BmcConfig, BmcError, PowerState, Redfish, ResetType, firmware_check};
use crate::cloud::{AwsCredentials, CLUSTER_TAG, Ec2, Instance, NODE_TAG, NodeSpec, instance_hosts};
use crate::graph::ResourceGraph;
use crate::inventory::schema::Cloud;
use crate::inventory::{CloudHosts, Inventory, secrets};
use crate::plan::{Action, Change, Plan};
use crate::resource::api::{ApiDesired, CLOUD_TARGET, KUBERNETES_KIND, KUBERNETES_TARGET, Observed};
use crate::resource::{Desired, ResourceId};
use crate::text::Text;

/// How long a power change or instances take to come up before the stage fails.
const WAIT: Duration = Duration::from_mins(10);

/// The graph's API resources, with their indexes.
#[must_use]
pub fn items(graph: &ResourceGraph) -> Vec<(usize, &ApiDesired)> {
    graph
        .resources
        .iter()
        .enumerate()
        .filter_map(|(index, resource)| match &*resource.desired {
            Desired::Api(item) => Some((index, item.as_ref())),
            _ => None,
        })
        .collect()
}

/// The BIOS attributes the blueprint wants, by node: what may stay queued on a BMC
/// for the next reset.
#[must_use]
pub fn wanted_bios(graph: &ResourceGraph) -> BTreeMap<String, BTreeMap<String, serde_json::Value>> {
    let mut wanted: BTreeMap<String, BTreeMap<String, serde_json::Value>> = BTreeMap::new();
    for (_, item) in items(graph) {
        if let ApiDesired::BiosAttribute { host, name, value } = item {
            wanted.entry(host.clone()).or_default().insert(name.clone(), value.clone());
        }
    }
    wanted
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
    /// Nodes the scheduler runs jobs on (set by the caller from the model): when
    /// they are on, their BIOS and firmware changes wait for their rollout wave.
    pub schedulable: BTreeSet<String>,
    /// Each node's BIOS in effect and queued for the next reset, as its BMC reports it.
    pub bios: BTreeMap<String, BiosSettings>,
    /// What the Kubernetes API server reports beyond the desired objects' values
    /// (those are in `observed`): toolkit's objects no longer desired, notes.
    pub kubernetes: kube::KubeObservation,
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
    let results: Vec<(String, Result<NodeFacts, String>)> = futures::stream::iter(hosts)
        .map(|host| async move {
            let result = async {
                let config = BmcConfig::from_inventory(inventory, host, base).map_err(|error| error.to_string())?;
                let redfish = Redfish::connect(config).await.map_err(|error| error.to_string())?;
                let observed =
                    resources::observe_node_facts(&redfish, items_ref).await.map_err(|error| error.to_string());
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
            Ok(facts) => {
                observation.observed.extend(facts.observed);
                observation.firmware.insert(host.clone(), facts.firmware);
                if let Some(bios) = facts.bios {
                    observation.bios.insert(host, bios);
                }
            }
            Err(reason) => {
                observation.unreachable.insert(host, reason);
            }
        }
    }
    if items.iter().any(|item| item.kubernetes().is_some()) {
        let mut kubernetes = kube::observe(graph, inventory, base).await;
        observation.observed.append(&mut kubernetes.observed);
        if let Some(reason) = &kubernetes.unreachable {
            observation.unreachable.insert(KUBERNETES_TARGET.to_owned(), reason.clone());
        }
        observation.kubernetes = kubernetes;
    }
    if items.iter().any(ApiDesired::is_cloud) {
        let result = async {
            let cloud = inventory.cloud.as_ref().ok_or("the inventory has no `cloud` section")?;
            let ec2 = ec2(cloud, base)?;
            let observed =
                crate::cloud::observe::observe_cloud(&ec2, cluster, &items).await.map_err(|error| error.to_string())?;
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
/// orphan instance. Firmware changes are judged by the vendor-aware comparison
/// ([`firmware::judge`]); BIOS and firmware changes of a schedulable node that is on
/// wait for its rollout wave (their reason ends with [`firmware::IN_ROLLOUT_WAVE`]),
/// and restart nothing here. Pure.
#[must_use]
pub fn changes(graph: &ResourceGraph, observation: &ApiObservation) -> Vec<Change> {
    let items: Vec<ApiDesired> = items(graph).into_iter().map(|(_, item)| item.clone()).collect();
    let mut changes = crate::plan::api::diff(&items, &observation.observed);
    for (change, item) in changes.iter_mut().zip(&items) {
        firmware::judge(change, item);
    }
    let power: BTreeMap<String, Option<Text>> = changes
        .iter()
        .filter(|change| change.kind() == "power")
        .map(|change| (change.target().to_string(), change.before().cloned()))
        .collect();
    let waits = |target: &str| {
        observation.schedulable.contains(target)
            && power.get(target).is_some_and(|before| before.as_deref() == Some("On"))
    };
    // Nodes the API stage restarts: BIOS or firmware changing, not left to a wave.
    let restarting: BTreeMap<String, bool> = changes
        .iter()
        .filter(|change| firmware::is_bmc_side(change.kind()) && change.action != Action::NoOp)
        .filter(|change| !waits(change.target()))
        .fold(BTreeMap::new(), |mut hosts, change| {
            *hosts.entry(change.target().to_string()).or_default() |= change.kind() == "firmware";
            hosts
        });
    for change in &mut changes {
        let is_on = power.get(change.target()).is_some_and(|before| before.as_deref() == Some("On"));
        if let Some(reason) = observation
            .unreachable
            .get(change.target())
            .or_else(|| observation.unreachable.get(CLOUD_TARGET).filter(|_| is_cloud_kind(change.kind())))
        {
            change.reason = format!("not observed: {reason}").into();
            continue;
        }
        match change.kind() {
            "boot" if is_on && change.action != Action::NoOp => {
                change.action = Action::NoOp;
                change.reason = "node is on: PXE boot only when it is provisioned".into();
            }
            "power" if change.action == Action::NoOp && is_on && restarting.contains_key(change.target()) => {
                change.action = Action::Update;
                change.reason = if restarting[change.target()] {
                    "restart: BIOS settings and firmware apply at boot".into()
                } else {
                    "restart: BIOS settings apply at boot".into()
                };
            }
            _ => {}
        }
    }
    let queued = queued::plan(&mut changes, &wanted_bios(graph), observation);
    changes.extend(queued);
    kube::plan(&mut changes, graph, &observation.kubernetes);
    // A schedulable node that is on is reset only in its wave; overwriting values
    // queued on its BMC (`pending on BMC: …`) resets nothing and stays here.
    for change in &mut changes {
        let wave = firmware::is_bmc_side(change.kind())
            && change.action != Action::NoOp
            && waits(change.target())
            && !observation.unreachable.contains_key(change.target())
            && !change.reason.starts_with("pending on BMC:");
        if wave {
            change.reason = format!("{}; {}", change.reason, firmware::IN_ROLLOUT_WAVE).into();
        }
    }
    for instance in &observation.orphans {
        let node = instance.tag(NODE_TAG).unwrap_or(&instance.id).to_owned();
        let cluster = instance.tag(CLUSTER_TAG).unwrap_or_default();
        changes.push(Change {
            id: format!("{node}:instance:{cluster}").into(),
            name: cluster.into(),
            action: Action::Remove,
            reason: format!("`{}` is no longer in the blueprint: terminate", instance.id).into(),
            after: None,
            secret: false,
            disruption: crate::resource::Disruption::None,
            delta: crate::plan::Delta::from_before(format!("{} {}", instance.instance_type, instance.image_id).into()),
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
        .filter(|change| match change.kind() {
            "instance" => change.action == Action::Create,
            "power" => {
                change.after.as_deref() == Some("Off")
                    || (change.action != Action::NoOp && change.before().map(Text::as_str) != Some("On"))
            }
            _ => false,
        })
        .map(|change| change.target().to_string())
        .collect()
}

/// One line per firmware component whose version is not the expected one (those
/// toolkit does not flash), then one per refused firmware change, then what the
/// Kubernetes API server could not tell (a kind it does not serve, no kubeconfig).
#[must_use]
pub fn firmware_warnings(
    expected: &BTreeMap<String, BTreeMap<String, String>>,
    observation: &ApiObservation,
    changes: &[Change],
) -> Vec<String> {
    let mut warnings = Vec::new();
    for (host, wanted) in expected {
        let Some(actual) = observation.firmware.get(host) else { continue };
        for mismatch in firmware_check(wanted, actual) {
            warnings.push(format!(
                "{host}: firmware `{}` is `{}`, the hardware profile expects `{}` (not flashed: no image, or firmware updates off)",
                mismatch.component,
                mismatch.actual.as_deref().unwrap_or("not reported"),
                mismatch.expected
            ));
        }
    }
    warnings.extend(firmware::refused(changes));
    warnings.extend(observation.kubernetes.notes.iter().cloned());
    warnings
}

/// Applies the plan's API changes in graph order: per BMC, BIOS attributes, then
/// the one-time boot, then power (BMCs in parallel); in the cloud, the placement
/// group, then instances (run, replaced, or terminated), waiting until they run.
/// Afterwards the cloud hosts file is rewritten from the cluster's instances. Then
/// the Kubernetes objects ([`kube::apply`]; `force_conflicts` takes over fields
/// other managers own).
///
/// What is not a resource's outcome — instances terminated, the hosts file written,
/// objects still finalizing — comes back as notes for the caller to show; problems
/// outside any resource are logged.
pub async fn apply(
    graph: &ResourceGraph,
    plan: &Plan,
    inventory: &Inventory,
    inventory_path: &Path,
    base: &Path,
    parallel: usize,
    force_conflicts: bool,
) -> Applied {
    let by_id: BTreeMap<&str, &Change> = plan.changes.iter().map(|change| (change.id.as_str(), change)).collect();
    let mut work: BTreeMap<String, Vec<(usize, &ApiDesired, &Change)>> = BTreeMap::new();
    let mut cloud_work: Vec<(usize, &ApiDesired, &Change)> = Vec::new();
    for index in graph.ordered() {
        let Desired::Api(item) = &*graph.resources[index].desired else { continue };
        let Some(change) = by_id.get(item.id().as_str()) else { continue };
        if item.is_cloud() {
            cloud_work.push((index, item, change));
        } else if item.is_bmc() {
            work.entry(item.target().to_owned()).or_default().push((index, item, change));
        }
    }
    let wanted = wanted_bios(graph);
    let no_bios = BTreeMap::new();
    let desired_ids: BTreeSet<String> = items(graph).into_iter().map(|(_, item)| item.id()).collect();
    // Hosts with queued BIOS values to overwrite, though nothing of theirs in the graph changes.
    let queued: BTreeSet<&str> = plan
        .changes
        .iter()
        .filter(|change| {
            change.kind() == "bios" && change.action == Action::Update && !desired_ids.contains(change.id.as_str())
        })
        .map(Change::target)
        .collect();
    let (wanted, no_bios, queued) = (&wanted, &no_bios, &queued);
    let mut outcomes: Vec<ResourceOutcome> = futures::stream::iter(work)
        .map(|(host, steps)| async move {
            let bios = BmcBios { wanted: wanted.get(&host).unwrap_or(no_bios), queued: queued.contains(host.as_str()) };
            apply_bmc(inventory, base, &host, &steps, bios).await
        })
        .buffer_unordered(parallel.max(1))
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    let mut notes = Vec::new();
    let has_cloud = !cloud_work.is_empty() || plan.changes.iter().any(|c| c.kind() == "instance");
    if has_cloud && let Some(cloud) = &inventory.cloud {
        outcomes.extend(apply_cloud(cloud, base, inventory_path, inventory, &cloud_work, plan, &mut notes).await);
    }
    outcomes.extend(kube::apply(graph, plan, inventory, base, force_conflicts, &mut notes).await);
    let order: BTreeMap<usize, usize> =
        graph.ordered().enumerate().map(|(position, index)| (index, position)).collect();
    outcomes.sort_by_key(|outcome| order.get(&outcome.index).copied().unwrap_or(usize::MAX));
    Applied { report: ApplyReport { outcomes, cancelled: false, aborted: false }, notes }
}

/// What [`apply`] did.
#[derive(Debug)]
pub struct Applied {
    /// Each API resource's outcome.
    pub report: ApplyReport,
    /// For the user, one line each: what happened besides the resources' outcomes.
    pub notes: Vec<String>,
}

fn outcome(index: usize, item: &ApiDesired, outcome: Outcome, started: Instant) -> ResourceOutcome {
    ResourceOutcome {
        index,
        id: ResourceId(item.id().into()),
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
        let reason = SkipReason::Upstream { id: ResourceId(failed.id().into()) };
        out.push(outcome(*index, item, Outcome::Skipped { reason }, Instant::now()));
    }
}

/// One node's BIOS as the blueprint wants it, for the API stage.
#[derive(Debug, Clone, Copy)]
struct BmcBios<'a> {
    /// The attributes the blueprint wants: all that may stay queued.
    wanted: &'a BTreeMap<String, serde_json::Value>,
    /// The plan overwrites queued values the blueprint does not want.
    queued: bool,
}

async fn apply_bmc(
    inventory: &Inventory,
    base: &Path,
    host: &str,
    steps: &[(usize, &ApiDesired, &Change)],
    bios: BmcBios<'_>,
) -> Vec<ResourceOutcome> {
    let mut out = Vec::new();
    let changing = |change: &Change| matches!(change.action, Action::Create | Action::Update);
    if !bios.queued && !steps.iter().any(|(_, _, change)| changing(change)) {
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
        // Before any other change: exactly the blueprint's BIOS values queued, written
        // together (BMCs stage them for the next boot), nothing else left for a reset
        // to apply.
        let overwritten = settle_bios(&redfish, &system, bios.wanted).await?;
        for setting in overwritten.iter().filter(|setting| setting.wanted.is_none()) {
            tracing::warn!(host, "BIOS value pending on the BMC and not in the blueprint set back: {setting}");
        }
        Ok::<_, BmcError>((redfish, system))
    }
    .await;
    let (redfish, system) = match connected {
        Ok(connected) => connected,
        Err(error) => {
            // The failure is the first change's (a no-op before it is left unchanged);
            // everything after it is skipped.
            let first = steps.iter().position(|(_, _, change)| changing(change)).unwrap_or(0);
            for (index, item, _) in &steps[..first] {
                out.push(outcome(*index, item, Outcome::Unchanged, started));
            }
            let (index, item, _) = steps[first];
            out.push(outcome(index, item, Outcome::Failed { error: error.to_string() }, started));
            finish_after_failure(steps, first + 1, item, &mut out);
            return out;
        }
    };
    for (position, (index, item, change)) in steps.iter().enumerate() {
        let started = Instant::now();
        if !changing(change) {
            out.push(outcome(*index, item, Outcome::Unchanged, started));
            continue;
        }
        let result = match item {
            ApiDesired::Firmware { .. } => firmware::apply(&redfish, &system, &[*item]).await,
            // Written above, with the other BIOS values.
            ApiDesired::BiosAttribute { .. }
            | ApiDesired::Instance { .. }
            | ApiDesired::PlacementGroup { .. }
            | ApiDesired::Kubernetes(_) => Ok(()),
            ApiDesired::BootOverride { target, .. } => {
                redfish.boot_once(&system, *target).await.map(|_| ()).map_err(|error| error.to_string())
            }
            ApiDesired::Power { state, .. } => power(&redfish, &system, *state, change, bios.wanted).await,
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

/// [`Redfish::settle_bios`]; a system without a `Bios` resource has nothing queued,
/// which is an error only when the blueprint wants BIOS values.
async fn settle_bios(
    redfish: &Redfish,
    system: &str,
    wanted: &BTreeMap<String, serde_json::Value>,
) -> Result<Vec<crate::bmc::PendingSetting>, BmcError> {
    match redfish.settle_bios(system, wanted).await {
        Err(BmcError::Unsupported { .. }) if wanted.is_empty() => Ok(Vec::new()),
        result => result,
    }
}

/// On from off, off from on, or a restart of a node that is on, then waits until
/// the BMC reports the desired state. Turning on or restarting applies what is
/// queued in the BIOS: refused while a value the blueprint does not want is queued.
async fn power(
    redfish: &Redfish,
    system: &str,
    state: PowerState,
    change: &Change,
    wanted: &BTreeMap<String, serde_json::Value>,
) -> Result<(), String> {
    let is_on = change.before().map(Text::as_str) == Some("On");
    let reset = match state {
        PowerState::On if is_on => ResetType::ForceRestart,
        PowerState::Off => ResetType::ForceOff,
        _ => ResetType::On,
    };
    if reset != ResetType::ForceOff {
        redfish.refuse_unwanted_pending(system, wanted).await.map_err(|error| error.to_string())?;
    }
    redfish.reset(system, reset).await.map_err(|error| error.to_string())?;
    redfish.wait_for_power(system, state, WAIT).await.map_err(|error| error.to_string())
}

async fn apply_cloud(
    cloud: &Cloud,
    base: &Path,
    inventory_path: &Path,
    inventory: &Inventory,
    steps: &[(usize, &ApiDesired, &Change)],
    plan: &Plan,
    notes: &mut Vec<String>,
) -> Vec<ResourceOutcome> {
    let cluster = plan.cluster.as_str();
    let mut out = Vec::new();
    let ec2 = match ec2(cloud, base) {
        Ok(ec2) => ec2,
        Err(error) => {
            if let Some((index, item, _)) = steps.first() {
                out.push(outcome(*index, item, Outcome::Failed { error }, Instant::now()));
                finish_after_failure(steps, 1, item, &mut out);
            } else {
                tracing::error!("cloud: {error}");
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
    match terminate_removed(&ec2, cluster, plan).await {
        Ok(0) => {}
        Ok(terminated) => notes.push(format!("terminated {terminated} instance(s) no longer in the blueprint")),
        Err(error) => tracing::error!("terminating instances no longer in the blueprint: {error}"),
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
        Ok(path) => notes.push(format!("cloud hosts written to {}", path.display())),
        Err(error) => tracing::error!("cannot record the cloud hosts: {error}"),
    }
    out
}

/// Terminates the cluster's instances the plan removes (nodes no longer in the
/// blueprint), found again by tag so only this cluster's are touched; how many.
async fn terminate_removed(ec2: &Ec2, cluster: &str, plan: &Plan) -> Result<usize, crate::cloud::CloudError> {
    let removed: BTreeSet<&str> = plan
        .changes
        .iter()
        .filter(|change| change.kind() == "instance" && change.action == Action::Remove)
        .map(|change| change.id.as_str())
        .collect();
    if removed.is_empty() {
        return Ok(0);
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
    }
    Ok(ids.len())
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
    let mut changes = changes(graph, observation);
    // Made by the SSH stage's rollout, once the node is drained.
    for change in changes.iter_mut().filter(|change| firmware::in_rollout_wave(change)) {
        change.action = Action::NoOp;
    }
    let warnings = firmware_warnings(firmware, observation, &changes);
    Plan { warnings, ..Plan::new(inputs, crate::plan::Baseline::Observed, changes) }
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
    // Waiting for their rollout wave: not made yet, whatever this plan's action says.
    let waiting: BTreeSet<&str> =
        plan.changes.iter().filter(|c| firmware::in_rollout_wave(c)).map(|c| c.id.as_str()).collect();
    for (index, item) in items(graph) {
        let done = match actions.get(item.id().as_str()) {
            _ if waiting.contains(item.id().as_str()) => false,
            Some(Action::NoOp) => true,
            _ => report.outcomes.iter().any(|outcome| outcome.index == index && outcome.outcome.is_success()),
        };
        if done {
            state.record(&graph.resources[index]);
        }
    }
    // Kubernetes removals are found again from the live objects' labels if a delete failed.
    for change in plan
        .changes
        .iter()
        .filter(|change| change.action == Action::Remove && matches!(change.kind(), "instance" | KUBERNETES_KIND))
    {
        state.forget(&change.id);
    }
    state
}

mod queued;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::api::{BootEnabled, BootTarget};
    use crate::resource::{Resource, Target};

    fn graph(items: Vec<ApiDesired>) -> ResourceGraph {
        let resources = items
            .into_iter()
            .map(|item| {
                let name = item.name();
                Resource::new(Target::node(item.target()), &name, Desired::Api(Box::new(item)))
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
        changes.iter().map(|change| (change.kind(), change.action, change.reason.as_str())).collect()
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

    /// The DMTF rack server's BIOS: in effect and queued (tests/support/mockups/SOURCE.md).
    fn dmtf_bios() -> BiosSettings {
        let read = |path: &str| -> serde_json::Value {
            let file =
                format!("{}/tests/support/mockups/dmtf-rackmount1/{path}/index.json", env!("CARGO_MANIFEST_DIR"));
            serde_json::from_str(&std::fs::read_to_string(file).expect("mockup")).expect("JSON")
        };
        let base = "Systems/437XR1138R2/Bios";
        BiosSettings::read(
            "/redfish/v1/Systems/437XR1138R2/Bios",
            &read(base),
            Some(&read(&format!("{base}/Settings"))),
        )
    }

    /// The DMTF rack server as node `n1`, on, with `ProcTurboMode: Enabled` (queued:
    /// `Disabled`) and `EmbeddedSata: embedded_sata` (in effect `Raid`, queued `Ahci`)
    /// in its hardware profile.
    fn dmtf_node(embedded_sata: &str) -> (ResourceGraph, ApiObservation) {
        let graph = graph(vec![
            ApiDesired::BiosAttribute { host: "n1".into(), name: "ProcTurboMode".into(), value: "Enabled".into() },
            ApiDesired::BiosAttribute { host: "n1".into(), name: "EmbeddedSata".into(), value: embedded_sata.into() },
            ApiDesired::Power { host: "n1".into(), state: PowerState::On },
        ]);
        let mut observation = observed(&[
            ("n1:bios:ProcTurboMode", "Enabled"),
            ("n1:bios:EmbeddedSata", "Raid"),
            ("n1:power:system", "On"),
        ]);
        observation.bios.insert("n1".into(), dmtf_bios());
        (graph, observation)
    }

    #[test]
    fn values_pending_on_the_bmc_are_planned_wanted_or_overwritten() {
        let (graph, observation) = dmtf_node("Ahci");
        let changes = changes(&graph, &observation);
        let summary: Vec<(&str, Action, &str, Option<&str>)> = changes
            .iter()
            .map(|change| {
                (change.id.as_str(), change.action, change.reason.as_str(), change.before().map(Text::as_str))
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "n1:bios:ProcTurboMode",
                    Action::Update,
                    "pending on BMC: ProcTurboMode = Disabled (unwanted), overwritten with Enabled",
                    Some("Enabled (pending: Disabled)")
                ),
                (
                    "n1:bios:EmbeddedSata",
                    Action::Update,
                    "Raid → Ahci: pending on BMC, applies at the next reset",
                    Some("Raid")
                ),
                ("n1:power:system", Action::Update, "restart: BIOS settings apply at boot", Some("On")),
                (
                    "n1:bios:AdminPhone",
                    Action::Update,
                    "pending on BMC: AdminPhone = (404) 555-1212 (unwanted), set back to \"\" before any reset",
                    Some("\"\" (pending: (404) 555-1212)")
                ),
                (
                    "n1:bios:NicBoot2",
                    Action::Update,
                    "pending on BMC: NicBoot2 = NetworkBoot (unwanted), set back to Disabled before any reset",
                    Some("Disabled (pending: NetworkBoot)")
                ),
            ]
        );
        assert_eq!(wanted_bios(&graph)["n1"].len(), 2);
    }

    #[test]
    fn overwriting_an_unwanted_value_alone_does_not_restart_the_node() {
        let (graph, observation) = dmtf_node("Raid");
        let changes = changes(&graph, &observation);
        let power = changes.iter().find(|change| change.kind() == "power").expect("power");
        assert_eq!(power.action, Action::NoOp, "{power:?}");
        assert_eq!(changes.iter().filter(|change| change.action == Action::Update).count(), 4, "{changes:#?}");
    }

    #[test]
    fn a_schedulable_node_that_is_on_gets_bios_and_firmware_in_its_rollout_wave() {
        let mut items = vec![ApiDesired::Firmware {
            host: "n1".into(),
            component: "BIOS".into(),
            version: "2.4.1".into(),
            image: "http://fw/bios.bin".into(),
            sha256: "0".repeat(64),
            allow_downgrade: false,
        }];
        items.extend(node_items());
        let graph = graph(items);
        let mut observation = observed(&[
            ("n1:firmware:BIOS", "2.3.1"),
            ("n1:bios:ProcTurboMode", "Enabled"),
            ("n1:boot:override", "Hdd/Continuous"),
            ("n1:power:system", "On"),
        ]);
        observation.schedulable.insert("n1".into());
        let wave = "in the node's rollout wave: drain, change, reset, check, resume";
        let upgrade = format!("upgrade 2.3.1 → 2.4.1; {wave}");
        let bios = format!("Enabled → Disabled; {wave}");
        // The SSH stage's rollout makes them: updates there, and no restart here.
        assert_eq!(
            actions(&changes(&graph, &observation)),
            [
                ("firmware", Action::Update, upgrade.as_str()),
                ("bios", Action::Update, bios.as_str()),
                ("boot", Action::NoOp, "node is on: PXE boot only when it is provisioned"),
                ("power", Action::NoOp, "as desired"),
            ]
        );
        // The API stage's plan shows them as not its own, and records none of them.
        let staged = plan(&graph, &observation, &BTreeMap::new(), crate::plan::diff::PlanInputs::default());
        assert_eq!(staged.changes[0].action, Action::NoOp);
        assert!(firmware::in_rollout_wave(&staged.changes[0]));
        let state = record(crate::plan::state::State::empty("c"), &graph, &staged, &ApplyReport::default());
        assert!(
            !state.resources.contains_key("n1:firmware:BIOS") && !state.resources.contains_key("n1:bios:ProcTurboMode")
        );
        assert!(state.resources.contains_key("n1:power:system"));

        // A node that runs no jobs (or is off) gets them in the API stage, restarted.
        observation.schedulable.clear();
        let changes = changes(&graph, &observation);
        assert_eq!(changes[0].reason, "upgrade 2.3.1 → 2.4.1");
        assert_eq!(changes[3].reason, "restart: BIOS settings and firmware apply at boot");

        // A downgrade is refused, with a warning that says how to allow it.
        observation.observed.insert("n1:firmware:BIOS".into(), Some("2.5.0".into()));
        let staged = plan(&graph, &observation, &BTreeMap::new(), crate::plan::diff::PlanInputs::default());
        assert_eq!(staged.changes[0].action, Action::NoOp);
        assert_eq!(
            staged.warnings,
            [
                "n1: firmware `BIOS`: refused: downgrade 2.5.0 → 2.4.1 of `BIOS`; set `allow_downgrade: true` in the hardware profile to flash it"
            ]
        );
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
            firmware_warnings(&expected, &observation, &[]),
            [
                "n1: firmware `BIOS` is `2.3.1`, the hardware profile expects `2.4.0` (not flashed: no image, or firmware updates off)",
                "n1: firmware `BMC` is `not reported`, the hardware profile expects `1.0` (not flashed: no image, or firmware updates off)",
            ]
        );
    }
}
