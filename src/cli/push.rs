//! `toolkit push`: apply a manifest (files from templates, directories, packages,
//! services, commands) to inventory hosts with the same plan, parallel apply and
//! state as `deploy`.

use std::path::{Path, PathBuf};

use crate::cli::deploy::{RunOptions, plan_and_apply};
use crate::cli::live::{self, SshArgs};
use crate::cli::{OutputFormat, Status, print_diagnostics};
use crate::compile::text_sha256;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::manifest::{self, Manifest};
use crate::plan::diff::PlanInputs;
use crate::{graph, inventory, yaml};

/// Arguments of `toolkit push`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The manifest YAML file.
    manifest: PathBuf,
    /// The inventory YAML file.
    #[arg(short, long)]
    inventory: PathBuf,
    /// Apply without asking (required when not on a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Show the plan only.
    #[arg(long)]
    dry_run: bool,
    /// Stop starting new hosts once more than this percentage of hosts failed.
    #[arg(long)]
    max_fail_percent: Option<u8>,
    /// State file recording what was pushed.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Keep each replaced file beside it as `<path>.<UTC time>.toolkit-backup`.
    #[arg(long)]
    backup: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    output: OutputFormat,
    #[command(flatten)]
    ssh: SshArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let loaded = yaml::load::<Manifest>(&args.manifest)
        .and_then(|manifest| inventory::load(&args.inventory).map(|inventory| (manifest, inventory)));
    let ((manifest, source), inventory) = match loaded {
        Ok(loaded) => loaded,
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, args.output);
            return Ok(Status::Error);
        }
    };
    let base = args.manifest.parent().unwrap_or(Path::new("."));
    let graph = match manifest::resources(&manifest, base, &inventory.inventory)
        .map_err(|error| {
            Diagnostics(vec![Diagnostic::error("manifest-failed", error.to_string()).in_file(&args.manifest)])
        })
        .and_then(graph::build)
    {
        Ok(graph) => graph,
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, args.output);
            return Ok(Status::Error);
        }
    };
    let name = args.manifest.file_stem().map_or_else(|| "push".to_owned(), |s| s.to_string_lossy().into_owned());
    let inputs = PlanInputs {
        cluster: name.clone(),
        blueprint_sha256: text_sha256(&source.text),
        inventory_sha256: Some(text_sha256(&inventory.source.text)),
    };
    let pool = live::pool(&inventory, &args.ssh)?;
    let options = RunOptions {
        yes: args.yes,
        dry_run: args.dry_run,
        output: args.output,
        parallel: args.ssh.parallel,
        max_fail_percent: args.max_fail_percent,
        backup: args.backup,
    };
    live::runtime()?.block_on(async {
        let result = plan_and_apply(&options, &graph, &name, &pool, inputs, None, args.state.as_deref()).await;
        pool.close_all().await;
        result
    })
}
