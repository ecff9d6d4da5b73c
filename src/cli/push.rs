//! `toolkit push`: apply a manifest (files from templates, directories, packages,
//! services, commands) to inventory hosts with the same plan, parallel apply and
//! state as `deploy`.

use std::path::{Path, PathBuf};

use crate::cli::deploy::{RunOptions, plan_and_apply};
use crate::cli::live::{self, ApplyArgs};
use crate::cli::{Status, print_diagnostics};
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
    #[command(flatten)]
    apply: ApplyArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let loaded = yaml::load::<Manifest>(&args.manifest)
        .and_then(|manifest| inventory::load(&args.inventory).map(|inventory| (manifest, inventory)));
    let ((manifest, source), inventory) = match loaded {
        Ok(loaded) => loaded,
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, args.apply.output);
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
            print_diagnostics(&diagnostics, args.apply.output);
            return Ok(Status::Error);
        }
    };
    let name = args.manifest.file_stem().map_or_else(|| "push".to_owned(), |s| s.to_string_lossy().into_owned());
    let inputs = PlanInputs {
        cluster: name.clone(),
        blueprint_sha256: text_sha256(&source.text),
        inventory_sha256: Some(text_sha256(&inventory.source.text)),
    };
    let pool = live::pool(&inventory, &args.apply.ssh)?;
    let options = RunOptions::from(&args.apply);
    live::runtime()?.block_on(async {
        let result = plan_and_apply::<crate::deploy::rollout::NoHooks>(
            &options,
            &graph,
            &name,
            &pool,
            inputs,
            None,
            args.apply.state.as_deref(),
            None,
            None,
        )
        .await;
        pool.close_all().await;
        result
    })
}
