//! `toolkit status`: a rolling change in progress (from the state file) and the nodes
//! toolkit holds drained (from the scheduler), so an operator sees what a deploy left
//! half way before starting another.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;

use crate::blueprint::schema::Role;
use crate::cli::live::{self, SshArgs};
use crate::cli::{BlueprintArgs, OutputFormat, Status, emit, load_checked};
use crate::deploy::scheduler::{Scheduler as _, Slurm};
use crate::model;
use crate::plan::state::{RolloutState, State};
use crate::transport::Connector as _;
use crate::validate::drain::REASON_PREFIX;
use crate::validate::health::status::{self as health_status, CheckStatus};

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
    /// Nodes drained with a toolkit reason, by name.
    held: BTreeMap<String, String>,
    /// Why the scheduler could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduler_error: Option<String>,
    /// The node health checks' last verdicts (with a `monitoring` section), read from
    /// the metrics files each node's health program writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<Vec<CheckStatus>>,
    /// Nodes whose health could not be read, and why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    health_unread: BTreeMap<String, String>,
}

/// The metrics files of the node health program, both cadences.
const HEALTH_FILES: &str = "cat /var/lib/prometheus/node-exporter/toolkit_health_fast.prom \
    /var/lib/prometheus/node-exporter/toolkit_health_slow.prom 2>/dev/null; true";

/// Each compute node's health files, read over SSH in parallel.
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
    let health_on = inputs.blueprint.blueprint.monitoring.is_some();
    let compute: Vec<String> = model
        .nodes
        .iter()
        .filter(|node| model.groups[node.group].has_role(Role::Compute))
        .map(|n| n.name.clone())
        .collect();
    let (held, scheduler_error, health, health_unread) = live::runtime()?.block_on(async {
        let result = match pool.connect(&controller).await {
            Ok(session) => Slurm::new(session.as_ref()).nodes().await.map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        let (health, health_unread) = if health_on {
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
                (held, None, health, health_unread)
            }
            Err(error) => (BTreeMap::new(), Some(error), health, health_unread),
        }
    });
    let report = Report { rollout: state.rollout, held, scheduler_error, health, health_unread };
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
    if let Some(health) = &report.health {
        health_text(health, &report.health_unread, &mut out);
    }
    out
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
