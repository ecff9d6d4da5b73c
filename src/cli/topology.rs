//! `toolkit topology`: fabric sizing and the cabling plan.

use crate::cli::{BlueprintArgs, Status, load_checked};
use crate::model;

/// Arguments of `toolkit topology`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), args.paths.output) else {
        return Ok(Status::Error);
    };
    let model = model::expand(&inputs.blueprint.blueprint)?;
    println!("{}", serde_json::to_string_pretty(&model.fabric.sizing)?);
    Ok(Status::Clean)
}
