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
    let (held, scheduler_error) = live::runtime()?.block_on(async {
        let result = match pool.connect(&controller).await {
            Ok(session) => Slurm::new(session.as_ref()).nodes().await.map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
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
                (held, None)
            }
            Err(error) => (BTreeMap::new(), Some(error)),
        }
    });
    let report = Report { rollout: state.rollout, held, scheduler_error };
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
    out
}
