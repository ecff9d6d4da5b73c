//! `toolkit plan`: what deploy would change, Terraform-style exit codes.

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::cli::{BlueprintArgs, OutputFormat, Status, emit, load_checked, print_diagnostics};
use crate::compile::{compile, text_sha256};
use crate::plan::{self, diff::PlanInputs, state::State};
use crate::render::Renderer;

/// Arguments of `toolkit plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
    /// Compare with the state file of the last deploy instead of reading the targets.
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
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let output = args.paths.output;
    if !args.offline {
        bail!("a live plan reads facts from the targets over SSH; until `deploy` lands use `--offline`");
    }
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    let renderer = match &args.templates {
        Some(dir) => Renderer::with_overrides(dir)?,
        None => Renderer::embedded()?,
    };
    let compiled = match compile(&inputs.blueprint, inputs.inventory.as_ref(), &renderer) {
        Ok(compiled) => compiled,
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, output);
            return Ok(Status::Error);
        }
    };
    let state_path =
        args.state.clone().or_else(|| inputs.inventory.as_ref().and_then(|i| i.inventory.state_file.clone()));
    let state = match &state_path {
        Some(path) => State::load(path, &compiled.model.name)?,
        None => State::empty(&compiled.model.name),
    };
    let plan = plan::diff(
        &compiled.graph,
        &state,
        PlanInputs {
            cluster: compiled.model.name.clone(),
            blueprint_sha256: text_sha256(&inputs.blueprint.source.text),
            inventory_sha256: inputs.inventory.as_ref().map(|i| text_sha256(&i.source.text)),
        },
    );
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
    match output {
        OutputFormat::Json => emit(&format!("{}\n", plan::render::json(&plan)?)),
        OutputFormat::Text => {
            emit(&plan::render::text(&plan));
            emit(&format!("{}\n", plan::render::summary_table(&plan)));
        }
    }
    Ok(if plan.summary.has_changes() { Status::Changes } else { Status::Clean })
}
