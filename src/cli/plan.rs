//! `toolkit plan`: what deploy would change, Terraform-style exit codes.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::cli::live::{self, SshArgs};
use crate::cli::{BlueprintArgs, OutputFormat, Status, emit, load_checked, print_diagnostics};
use crate::deploy::health::compile_with_rma;
use crate::model::spares::RmaRecord;
use crate::plan::{self, state::State};
use crate::render::Renderer;

/// Arguments of `toolkit plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
    /// Compare with the state file of the last deploy instead of reading the hosts over SSH.
    #[arg(long)]
    offline: bool,
    /// State file (default: the inventory's `state_file`; none = nothing applied yet).
    #[arg(long)]
    state: Option<PathBuf>,
    /// `plan.json` saves the plan; a directory gets every rendered file as it would
    /// land on each target (`DIR/<target>/<path>`) plus `DIR/plan.json`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Templates that override the built-in ones (same names as under `templates/`).
    #[arg(long)]
    templates: Option<PathBuf>,
    /// `api`: plan the BMC, cloud and Kubernetes objects only, read through their APIs (no SSH).
    #[arg(long, value_enum, default_value_t)]
    stage: crate::cli::deploy::Stage,
    /// Nodes that may be drained at once by a rolling change: a count (`2`) or a
    /// percentage of the scheduler's nodes (`10%`); the plan shows the waves it implies.
    #[arg(long, default_value_t)]
    max_unavailable: plan::MaxUnavailable,
    /// Plan firmware updates: every hardware profile's components that name an
    /// `image` (as `firmware_updates: true` does per profile).
    #[arg(long)]
    firmware: bool,
    /// Bare metal: plan these nodes' OS as reinstalled though it runs (comma
    /// separated), as `deploy --reinstall` would do (Terraform's `-replace`).
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    reinstall: Vec<String>,
    /// Nodes in RMA, in the order they went (comma separated): spares take their places
    /// in the partitions. Without it, a live plan reads them from Slurm's drain reasons
    /// (`toolkit:rma …`).
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    rma: Vec<String>,
    /// Nodes back from RMA (comma separated, before those of `--rma`): each stands by
    /// as a spare, and the spare that replaced it keeps serving.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    returned: Vec<String>,
    #[command(flatten)]
    ssh: SshArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let output = args.paths.output;
    let Some(mut inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    if args.firmware {
        inputs.blueprint.blueprint.enable_firmware_updates();
    }
    let renderer = match &args.templates {
        Some(dir) => Renderer::with_overrides(dir)?,
        None => Renderer::embedded()?,
    };
    let state = if args.offline {
        let cluster = &inputs.blueprint.blueprint.cluster.name;
        Some(match live::state_path(args.state.as_ref(), &inputs) {
            Some(path) => State::load(&path, cluster)?,
            None => State::empty(cluster),
        })
    } else {
        None
    };
    // Offline, a file's diff needs its new text only against a recorded one, and only
    // `--out DIR` writes the texts: with nothing recorded and no tree to write, each
    // per-target text is rendered for its hash alone.
    let writes_files = args.out.as_ref().is_some_and(|out| out.extension().is_none_or(|e| e != "json"));
    let renderer = if !writes_files && state.as_ref().is_some_and(|state| state.resources.is_empty()) {
        renderer.without_texts()
    } else {
        renderer
    };
    let mut rma: Vec<RmaRecord> =
        args.returned.iter().map(|node| RmaRecord { node: node.clone(), returned: true }).collect();
    rma.extend(args.rma.iter().map(|node| RmaRecord { node: node.clone(), returned: false }));
    let has_spares = inputs.blueprint.blueprint.node_groups.iter().any(|group| group.spares > 0);
    if rma.is_empty() && has_spares && !args.offline {
        rma = rma_from_slurm(&inputs, &args.ssh)?;
    }
    let compiled = match compile_with_rma(&inputs.blueprint, inputs.inventory.as_ref(), &renderer, &rma) {
        Ok(compiled) => compiled,
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, output);
            return Ok(Status::Error);
        }
    };
    let plan_inputs = live::plan_inputs(&inputs, &compiled);
    // Bare metal: which nodes an OS would be written to. Their hosts' own changes can
    // only be read once they run it.
    let bare_metal = match &inputs.inventory {
        Some(inventory) if args.stage != crate::cli::deploy::Stage::Api => {
            let state_path = live::state_path(args.state.as_ref(), &inputs);
            crate::cli::provision::plan_lines(
                &compiled.model,
                inventory,
                state.as_ref(),
                state_path.as_deref(),
                &args.reinstall,
            )?
        }
        _ => None,
    };
    if let Some((lines, installs)) = &bare_metal {
        if output == OutputFormat::Text {
            emit(&format!(
                "Bare metal (os):\n{}\n\n",
                lines.iter().map(|line| format!("  {line}")).collect::<Vec<_>>().join("\n")
            ));
        }
        if *installs && !args.offline {
            eprintln!(
                "the hosts' own changes are planned once their OS is installed: `toolkit deploy` installs it first"
            );
            return Ok(Status::Changes);
        }
    }
    let mut plan = if args.stage == crate::cli::deploy::Stage::Api && !args.offline {
        let inventory = live::require_inventory(&inputs)?;
        let (plan, unreachable) = live::runtime()?.block_on(live::api_plan(&compiled, inventory, plan_inputs));
        if !unreachable.is_empty() {
            for (target, reason) in &unreachable {
                eprintln!("error: cannot read `{target}` through its API: {reason}");
            }
            return Ok(Status::Error);
        }
        plan
    } else if let Some(state) = &state {
        plan::diff::diff_described(&compiled.graph, &compiled.described, state, plan_inputs)
    } else {
        let inventory = live::require_inventory(&inputs)?;
        let pool = live::pool(inventory, &args.ssh)?;
        // The removals: what the last deploy applied and the blueprint no longer has.
        let recorded = match live::state_path(args.state.as_ref(), &inputs) {
            Some(path) => State::load(&path, &compiled.model.name)?,
            None => State::empty(&compiled.model.name),
        };
        let live_plan = live::runtime()?.block_on(async {
            let live_plan =
                live::live_plan(&compiled, &recorded, inventory, &pool, plan_inputs, args.ssh.parallel).await;
            pool.close_all().await;
            live_plan
        });
        let mut live_plan = live_plan;
        live_plan.plan.leave_out_absent(&mut live_plan.unreachable);
        if !live_plan.unreachable.is_empty() {
            for (host, reason) in &live_plan.unreachable {
                eprintln!("error: cannot read `{host}`: {reason}");
            }
            return Ok(Status::Error);
        }
        live_plan.plan
    };
    plan::disruption::classify(&compiled.graph, &mut plan, &compiled.model.schedulable_nodes(), args.max_unavailable);
    plan.spares = plan::SparesPlan::of(&compiled.model);
    plan.blueprint_path = Some(args.paths.blueprint.display().to_string());
    plan.inventory_path = args.paths.inventory.as_ref().map(|p| p.display().to_string());
    if let Some(out) = &args.out {
        let json = plan::render::json(&plan)?;
        if out.extension().is_some_and(|e| e == "json") {
            plan::state::write_atomic(out, json.as_bytes()).with_context(|| format!("writing `{}`", out.display()))?;
        } else {
            let written = plan::files::write_tree(out, &compiled.graph.resources)
                .with_context(|| format!("writing rendered files under `{}`", out.display()))?;
            plan::state::write_atomic(&out.join("plan.json"), json.as_bytes())?;
            eprintln!("wrote {written} rendered files and plan.json under {}", out.display());
        }
    }
    for warning in &plan.warnings {
        eprintln!("warning: {warning}");
    }
    match output {
        OutputFormat::Json => emit(&format!("{}\n", plan::render::json(&plan)?)),
        OutputFormat::Text => {
            emit(&plan::render::text(&plan));
            emit(&format!("{}\n", plan::render::summary_table(&plan)));
        }
    }
    let installs = bare_metal.as_ref().is_some_and(|(_, installs)| *installs);
    let status = if plan.summary.has_changes() || installs { Status::Changes } else { Status::Clean };
    // The process exits next and the OS takes the memory back at once: freeing a large
    // cluster's resources and plan entries one by one was ~15% of `plan` at 4,096 nodes.
    std::mem::forget(plan);
    std::mem::forget(compiled);
    Ok(status)
}

/// The nodes in RMA as Slurm holds them (drained with `toolkit:rma …`), read on the
/// controller; none when Slurm does not answer yet (a cluster not deployed).
fn rma_from_slurm(inputs: &crate::cli::Inputs, ssh: &SshArgs) -> anyhow::Result<Vec<RmaRecord>> {
    use crate::deploy::scheduler::Scheduler as _;
    use crate::transport::Connector as _;
    let inventory = live::require_inventory(inputs)?;
    let model = crate::model::expand(&inputs.blueprint.blueprint)?;
    let Some(controller) = model.first_with(crate::blueprint::schema::Role::Controller) else { return Ok(Vec::new()) };
    let pool = live::pool(inventory, ssh)?;
    let nodes = live::runtime()?.block_on(async {
        let nodes = match pool.connect(&controller.name).await {
            Ok(session) => crate::deploy::scheduler::Slurm::new(session.as_ref()).nodes().await.ok().flatten(),
            Err(_) => None,
        };
        pool.close_all().await;
        nodes
    });
    let nodes = nodes.unwrap_or_default();
    Ok(crate::model::spares::records_from_reasons(
        nodes.iter().filter_map(|(name, node)| node.reason.as_deref().map(|reason| (name.as_str(), reason))),
    ))
}
