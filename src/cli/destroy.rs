//! `toolkit destroy`: terminate the cloud instances the cluster owns, and only them.
//!
//! The plan lists every instance tagged `toolkit:cluster=<cluster>` that is not
//! already terminated (found by tag, checked again on each answer), as removals; it
//! is shown, confirmed on a terminal or with `--yes`, then applied. Instances of
//! other clusters or without the tag are never listed. A second destroy finds
//! nothing and changes nothing. Bare-metal nodes are not touched.

use std::path::Path;

use anyhow::Context as _;

use crate::cli::live;
use crate::cli::{BlueprintArgs, OutputFormat, Status, emit, load_checked};
use crate::cloud::{CLUSTER_TAG, Instance, NODE_TAG};
use crate::plan::{self, Action, Baseline, Change, Plan, Summary};

/// Arguments of `toolkit destroy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
    /// Destroy without asking (required when not on a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Show the plan only.
    #[arg(long)]
    dry_run: bool,
}

/// The removal plan of `instances` (all owned by `cluster`).
#[must_use]
pub fn destroy_plan(cluster: &str, instances: &[Instance], inputs: plan::diff::PlanInputs) -> Plan {
    let changes: Vec<Change> = instances
        .iter()
        .filter(|instance| instance.tag(CLUSTER_TAG) == Some(cluster))
        .map(|instance| {
            let node = instance.tag(NODE_TAG).unwrap_or(&instance.id).to_owned();
            Change {
                id: format!("{node}:instance:{cluster}").into(),
                name: cluster.into(),
                action: Action::Remove,
                reason: format!("terminate `{}` ({})", instance.id, instance.state.name).into(),
                after: None,
                secret: false,
                disruption: crate::resource::Disruption::None,
                delta: crate::plan::Delta::from_before(
                    format!("{} {}", instance.instance_type, instance.image_id).into(),
                ),
            }
        })
        .collect();
    Plan {
        format_version: plan::PLAN_FORMAT_VERSION,
        toolkit_version: env!("CARGO_PKG_VERSION").to_owned(),
        cluster: cluster.to_owned(),
        blueprint_sha256: inputs.blueprint_sha256,
        inventory_sha256: inputs.inventory_sha256,
        blueprint_path: None,
        inventory_path: None,
        baseline: Baseline::Observed,
        summary: Summary::of(&changes),
        changes,
        warnings: Vec::new(),
        rollout: None,
        spares: None,
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let output = args.paths.output;
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    let loaded = live::require_inventory(&inputs)?;
    let cloud = loaded
        .inventory
        .cloud
        .as_ref()
        .context("the inventory has no `cloud` section: there is nothing toolkit created to destroy")?;
    let cluster = inputs.blueprint.blueprint.cluster.name.clone();
    let ec2 = crate::deploy::api::ec2(cloud, Path::new(".")).map_err(|error| anyhow::anyhow!("{error}"))?;
    let plan_inputs = plan::diff::PlanInputs {
        cluster: cluster.clone(),
        blueprint_sha256: crate::compile::text_sha256(&inputs.blueprint.source.text),
        inventory_sha256: Some(crate::compile::text_sha256(&loaded.source.text)),
    };
    let inventory_path = args.paths.inventory.as_deref().unwrap_or(Path::new("inventory.yaml"));
    live::runtime()?.block_on(async {
        let instances = ec2.cluster_instances(&cluster).await.context("listing the cluster's instances")?;
        let plan = destroy_plan(&cluster, &instances, plan_inputs);
        match output {
            OutputFormat::Text if !plan.summary.has_changes() => {
                emit(&format!("No cloud instances of cluster `{cluster}` to destroy.\n"));
            }
            OutputFormat::Text => emit(&plan::render::text(&plan)),
            OutputFormat::Json if args.dry_run || !plan.summary.has_changes() => {
                emit(&format!("{}\n", plan::render::json(&plan)?));
            }
            OutputFormat::Json => {}
        }
        if args.dry_run {
            return Ok(if plan.summary.has_changes() { Status::Changes } else { Status::Clean });
        }
        if !plan.summary.has_changes() {
            eprintln!("nothing to destroy");
            return Ok(Status::Clean);
        }
        if !args.yes && !crate::cli::deploy::confirm_with("Destroy these instances? Only `yes` is accepted: ")? {
            eprintln!("destroy cancelled; nothing was changed");
            return Ok(Status::Error);
        }
        let terminated = ec2.terminate_cluster(&cluster).await.context("terminating the cluster's instances")?;
        if let Some(hosts_file) = crate::inventory::cloud_hosts_path(inventory_path, &loaded.inventory)
            && hosts_file.exists()
        {
            std::fs::remove_file(&hosts_file).with_context(|| format!("removing `{}`", hosts_file.display()))?;
        }
        if let Some(state_path) = live::state_path(None, &inputs)
            && state_path.exists()
        {
            let mut state = plan::state::State::load(&state_path, &cluster)?;
            for change in &plan.changes {
                state.forget(&change.id);
            }
            state.save(&state_path)?;
        }
        match output {
            OutputFormat::Json => emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(&serde_json::json!({ "plan": plan, "terminated": terminated }))?
            )),
            OutputFormat::Text => emit(&format!("Destroy: {} instance(s) terminated.\n", terminated.len())),
        }
        Ok(Status::Clean)
    })
}
