//! `toolkit lint`: load and check, print every diagnostic, exit 1 on any error.

use crate::cli::{BlueprintArgs, OutputFormat, Status, load_checked, print_diagnostics};

/// Arguments of `toolkit lint`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
}

#[allow(clippy::unnecessary_wraps)] // every command has the same signature
pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let output = args.paths.output;
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    print_diagnostics(&inputs.diagnostics, output);
    if output == OutputFormat::Text {
        eprintln!("{}: ok", args.paths.blueprint.display());
    }
    Ok(Status::Clean)
}
