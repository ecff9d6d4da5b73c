//! `toolkit status`: a rolling change in progress (from the state file), the nodes
//! toolkit holds drained (from the scheduler), so an operator sees what a deploy left
//! half way before starting another, and the cluster's current health: from Prometheus
//! when the blueprint deploys monitoring (targets down, alerts, failing checks, Slurm
//! nodes out of service), else — or when Prometheus cannot be read — from the health
//! metrics files on the nodes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;

use crate::blueprint::schema::Role;
use crate::cli::live::{self, SshArgs};
use crate::cli::{BlueprintArgs, OutputFormat, Status, emit, load_checked};
use crate::deploy::scheduler::{Scheduler as _, Slurm};
use crate::health::prometheus::{self as prometheus_view, Query, Responses, View};
use crate::health::repair::state::State as RepairState;
use crate::health::status::{self as health_status, CheckStatus};
use crate::model;
use crate::plan::state::provisioning::{NodeProvisioning, ProvisionStep};
use crate::plan::state::{RolloutState, State};
use crate::transport::Connector as _;
use crate::validate::drain::REASON_PREFIX;

/// Arguments of `toolkit status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
    /// State file (default: the inventory's `state_file`).
    #[arg(long)]
    state: Option<PathBuf>,
    #[command(flatten)]
    ssh: SshArgs,
}

/// What `status` reports.
#[derive(Debug, Serialize)]
struct Report {
    /// The rollout the state file holds, if one is unfinished.
    rollout: Option<RolloutState>,
    /// Bare-metal nodes by name: their provisioning step, from the state file.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    provisioning: BTreeMap<String, NodeProvisioning>,
    /// Nodes drained with a toolkit reason, by name.
    held: BTreeMap<String, String>,
    /// Spares on standby and those serving in place of nodes in RMA (with spares).
    #[serde(skip_serializing_if = "Option::is_none")]
    spares: Option<crate::plan::SparesPlan>,
    /// Why the scheduler could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduler_error: Option<String>,
    /// What Prometheus sees now (with a `monitoring` section).
    #[serde(skip_serializing_if = "Option::is_none")]
    prometheus: Option<View>,
    /// Why Prometheus could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    prometheus_error: Option<String>,
    /// The node health checks' last verdicts, read from the metrics files each node's
    /// health program writes (when Prometheus cannot tell).
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<Vec<CheckStatus>>,
    /// Nodes whose health could not be read, and why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    health_unread: BTreeMap<String, String>,
    /// The repair service's state on the controller (with `monitoring.repair`).
    #[serde(skip_serializing_if = "Option::is_none")]
    repair: Option<RepairState>,
    /// Why it could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    repair_error: Option<String>,
}

/// The state file must be read as root: it is under `/var/lib/toolkit`, mode 0755 but
/// the service may tighten it. A controller where the service has not run yet has none.
const REPAIR_STATE: &str = "cat /var/lib/toolkit/repair/state.json 2>/dev/null || echo '{}'";

/// The controller's repair state: nodes in repair with their step, nodes in RMA.
async fn repair_state(pool: &impl crate::transport::Connector, controller: &str) -> Result<RepairState, String> {
    use crate::transport::Executor as _;
    let session = pool.connect(controller).await.map_err(|error| error.to_string())?;
    let argv = ["sh".to_owned(), "-c".to_owned(), REPAIR_STATE.to_owned()];
    let output = session.exec(&argv).await.map_err(|error| error.to_string())?;
    serde_json::from_slice(&output.stdout)
        .map_err(|error| format!("{}: {error}", crate::health::repair::resources::STATE))
}

/// The metrics files of the node health program, both cadences, and of the
/// cluster-scope checks (the controller's BGP checks, a switch's cabling check).
const HEALTH_FILES: &str = "cat /var/lib/prometheus/node-exporter/toolkit_health_fast.prom \
    /var/lib/prometheus/node-exporter/toolkit_health_slow.prom \
    /var/lib/prometheus/node-exporter/toolkit_health_cluster.prom 2>/dev/null; true";

/// Fetches each query from Prometheus on its own host, one answer per line (Prometheus
/// answers with one-line JSON): its API need not be reachable from where toolkit runs,
/// only SSH is.
const FETCH: &str = "import sys, urllib.parse as p, urllib.request as u
args = sys.argv[2:]
for path, promql in zip(args[0::2], args[1::2]):
    query = '?' + p.urlencode({'query': promql}) if promql else ''
    print(u.urlopen(sys.argv[1] + path + query, timeout=20).read().decode().replace('\\n', ' '))";

/// Prometheus' view, read on the monitoring host.
async fn prometheus_health(pool: &impl crate::transport::Connector, host: &str) -> Result<View, String> {
    use crate::transport::Executor as _;
    let session = pool.connect(host).await.map_err(|error| error.to_string())?;
    let mut argv = vec![
        "python3".to_owned(),
        "-c".to_owned(),
        FETCH.to_owned(),
        format!("http://localhost:{}", model::monitoring::PROMETHEUS_PORT),
    ];
    for Query { path, promql } in prometheus_view::QUERIES {
        argv.extend([path.to_owned(), promql.unwrap_or_default().to_owned()]);
    }
    let output = session.exec(&argv).await.map_err(|error| error.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let bodies: Vec<&str> = stdout.lines().collect();
    let [targets, alerts, failing, unavailable, reasons] = bodies[..] else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let why = stderr.lines().last().unwrap_or("no answer");
        return Err(format!("Prometheus on {host} did not answer every query ({why})"));
    };
    prometheus_view::view(&Responses { targets, alerts, failing, unavailable, reasons })
        .map_err(|error| format!("Prometheus on {host}: {error}"))
}

/// Each compute node's health files (and the cluster checks' host's and switches'), read
/// over SSH in parallel.
async fn node_health(
    pool: &impl crate::transport::Connector,
    nodes: &[String],
) -> (Vec<CheckStatus>, BTreeMap<String, String>) {
    use crate::transport::Executor as _;
    let argv = ["sh".to_owned(), "-c".to_owned(), HEALTH_FILES.to_owned()];
    let reads = nodes.iter().map(|node| async {
        let read = match pool.connect(node).await {
            Ok(session) => session.exec(&argv).await.map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        (node.clone(), read)
    });
    let mut statuses = Vec::new();
    let mut unread = BTreeMap::new();
    for (node, read) in futures::future::join_all(reads).await {
        match read {
            Ok(output) => {
                let found = health_status::parse(&String::from_utf8_lossy(&output.stdout));
                if found.is_empty() {
                    unread.insert(node, "no health metrics yet (the checks have not run)".to_owned());
                }
                statuses.extend(found);
            }
            Err(error) => {
                unread.insert(node, error);
            }
        }
    }
    (statuses, unread)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let output = args.paths.output;
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    let inventory = live::require_inventory(&inputs)?;
    let model = model::expand(&inputs.blueprint.blueprint)?;
    let controller = model.first_with(Role::Controller).context("the blueprint has no controller")?.name.clone();
    let state = match live::state_path(args.state.as_ref(), &inputs) {
        Some(path) => State::load(&path, &model.name)?,
        None => State::empty(&model.name),
    };
    let pool = live::pool(inventory, &args.ssh)?;
    let monitoring = model::monitoring::monitoring(&model, Some(&inventory.inventory));
    let monitoring_host = monitoring.as_ref().map(|monitoring| monitoring.host.clone());
    let health_on = inputs.blueprint.blueprint.monitoring.is_some();
    let repair_on = inputs.blueprint.blueprint.monitoring.as_ref().is_some_and(|m| m.repair.is_some());
    let mut compute: Vec<String> = model
        .nodes
        .iter()
        .filter(|node| model.groups[node.group].has_role(Role::Compute))
        .map(|n| n.name.clone())
        .collect();
    // The cluster-scope checks' host, when it runs them (with FRR switches to check),
    // and the FRR switches, which check their own cabling.
    if let Some(monitoring) = monitoring.filter(|monitoring| !monitoring.frr_switches.is_empty()) {
        if !compute.contains(&monitoring.cluster_checks_host) {
            compute.push(monitoring.cluster_checks_host);
        }
        compute.extend(monitoring.frr_switches.into_iter().map(|switch| switch.name));
    }
    let (held, scheduler_error, seen, health, health_unread, repair) = live::runtime()?.block_on(async {
        let repair = if repair_on { Some(repair_state(&pool, &controller).await) } else { None };
        let result = match pool.connect(&controller).await {
            Ok(session) => Slurm::new(session.as_ref()).nodes().await.map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        let seen = match &monitoring_host {
            Some(host) => Some(prometheus_health(&pool, host).await),
            None => None,
        };
        let (health, health_unread) = if health_on && !matches!(seen, Some(Ok(_))) {
            let (statuses, unread) = node_health(&pool, &compute).await;
            (Some(statuses), unread)
        } else {
            (None, BTreeMap::new())
        };
        pool.close_all().await;
        match result {
            Ok(nodes) => {
                let held = nodes
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, node)| node.drain)
                    .filter_map(|(name, node)| {
                        node.reason.filter(|reason| reason.starts_with(REASON_PREFIX)).map(|r| (name, r))
                    })
                    .collect();
                (held, None, seen, health, health_unread, repair)
            }
            Err(error) => (BTreeMap::new(), Some(error), seen, health, health_unread, repair),
        }
    });
    let (repair, repair_error) = match repair {
        Some(Ok(state)) => (Some(state), None),
        Some(Err(error)) => (None, Some(error)),
        None => (None, None),
    };
    let (prometheus, prometheus_error) = match seen {
        Some(Ok(view)) => (Some(view), None),
        Some(Err(error)) => (None, Some(error)),
        None => (None, None),
    };
    let rma =
        crate::model::spares::records_from_reasons(held.iter().map(|(node, reason)| (node.as_str(), reason.as_str())));
    let spares = crate::plan::SparesPlan::of(&model.with_rma(&rma));
    let report = Report {
        rollout: state.rollout,
        provisioning: state.provisioning,
        held,
        spares,
        scheduler_error,
        prometheus,
        prometheus_error,
        health,
        health_unread,
        repair,
        repair_error,
    };
    match output {
        OutputFormat::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&report)?)),
        OutputFormat::Text => emit(&text(&report)),
    }
    Ok(if report.scheduler_error.is_some() { Status::Error } else { Status::Clean })
}

fn text(report: &Report) -> String {
    let mut out = String::new();
    match &report.rollout {
        Some(rollout) => {
            let count = |wanted: fn(&crate::plan::state::NodeRollout) -> bool| {
                rollout.nodes.values().filter(|n| wanted(n)).count()
            };
            let _ = writeln!(
                out,
                "Rollout {} (started {}): {} done, {} in flight, {} pending; `toolkit deploy` carries it on.",
                rollout.id,
                rollout.started,
                count(|node| node.step == crate::plan::state::RolloutStep::Done),
                count(|node| node.step.in_flight()),
                count(|node| node.step == crate::plan::state::RolloutStep::Pending),
            );
            for (name, node) in &rollout.nodes {
                let error = node.error.as_deref().map(|error| format!(": {error}")).unwrap_or_default();
                let _ = writeln!(out, "  {name:<12} {:?}{error}", node.step);
            }
        }
        None => out.push_str("No rollout in progress.\n"),
    }
    provisioning_text(&report.provisioning, &mut out);
    if let Some(error) = &report.scheduler_error {
        let _ = writeln!(out, "Cannot read the scheduler: {error}");
    } else if report.held.is_empty() {
        out.push_str("No node is drained by toolkit.\n");
    } else {
        out.push_str("Drained by toolkit:\n");
        for (name, reason) in &report.held {
            let _ = writeln!(out, "  {name:<12} {reason}");
        }
    }
    if let Some(spares) = &report.spares {
        out.push_str("Spares:\n");
        for line in spares.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Some(view) = &report.prometheus {
        prometheus_text(view, &mut out);
    }
    if let Some(error) = &report.prometheus_error {
        let _ = writeln!(out, "Cannot read Prometheus: {error}");
    }
    if let Some(health) = &report.health {
        health_text(health, &report.health_unread, &mut out);
    }
    if let Some(state) = &report.repair {
        repair_text(state, &mut out);
    }
    if let Some(error) = &report.repair_error {
        let _ = writeln!(out, "Cannot read the repair service's state: {error}");
    }
    out
}

/// Nodes in repair (their step, for how long) and in RMA, and the last repairs' times.
fn repair_text(state: &RepairState, out: &mut String) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let resumed: Vec<u64> = state.history.iter().filter_map(|done| done.mttr_seconds).collect();
    let mean = if resumed.is_empty() {
        String::new()
    } else {
        format!(
            ", mean drain → resume {} s over the last {}",
            resumed.iter().sum::<u64>() / resumed.len() as u64,
            resumed.len()
        )
    };
    let _ = writeln!(out, "Repair: {} in repair, {} in RMA{mean}.", state.nodes.len(), state.rma.len());
    for (node, what) in state.lines(now) {
        let _ = writeln!(out, "  {node:<12} {what}");
    }
}

/// Each bare-metal node's provisioning step: what it reached, since when, the last
/// thing seen and, for a failed one, why.
fn provisioning_text(nodes: &BTreeMap<String, NodeProvisioning>, out: &mut String) {
    if nodes.is_empty() {
        return;
    }
    let ready = nodes.values().filter(|node| node.step == ProvisionStep::Reachable).count();
    let _ = writeln!(out, "Bare metal: {ready} of {} nodes installed and reachable.", nodes.len());
    for (name, node) in nodes.iter().filter(|(_, node)| node.step != ProvisionStep::Reachable) {
        let seen = node.last_seen.as_deref().map(|seen| format!(", last seen: {seen}")).unwrap_or_default();
        let error = node.error.as_deref().map(|error| format!(": {error}")).unwrap_or_default();
        let _ = writeln!(out, "  {name:<12} {} since {}{seen}{error}", node.step.as_str(), node.since);
    }
}

/// The counts, then one line per problem, by host.
fn prometheus_text(view: &View, out: &mut String) {
    let _ = writeln!(out, "Health (from Prometheus): {}.", view.headline());
    for (host, what) in view.lines() {
        let host = if host.is_empty() { "cluster" } else { host.as_str() };
        let _ = writeln!(out, "  {host:<12} {what}");
    }
}

/// Failing and warning checks one per line, the rest counted.
fn health_text(health: &[CheckStatus], unread: &BTreeMap<String, String>, out: &mut String) {
    let count = |verdict: &str| health.iter().filter(|status| status.verdict == verdict).count();
    let _ = writeln!(
        out,
        "Health (from the nodes): {} passing, {} failing, {} warning, {} skipped.",
        count("pass"),
        count("fail"),
        count("warn"),
        count("skipped")
    );
    for status in health.iter().filter(|status| matches!(status.verdict, "fail" | "warn")) {
        let _ = writeln!(
            out,
            "  {:<12} {} {} on {} ({}): {}",
            status.node, status.verdict, status.check, status.subject, status.action, status.detail
        );
    }
    for (node, why) in unread {
        let _ = writeln!(out, "  {node:<12} unread: {why}");
    }
}
