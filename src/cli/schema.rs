//! `toolkit schema`: the JSON Schema of the blueprint or the inventory.

use crate::blueprint::Blueprint;
use crate::cli::{Status, emit};
use crate::inventory::Inventory;

/// Which schema.
#[derive(Debug, Clone, Copy, Default, clap::ValueEnum)]
pub enum Which {
    /// The blueprint.
    #[default]
    Blueprint,
    /// The inventory.
    Inventory,
}

/// Arguments of `toolkit schema`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which file's schema.
    #[arg(value_enum, default_value_t)]
    which: Which,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let schema = match args.which {
        Which::Blueprint => schemars::schema_for!(Blueprint),
        Which::Inventory => schemars::schema_for!(Inventory),
    };
    emit(&format!("{}\n", serde_json::to_string_pretty(&schema)?));
    Ok(Status::Clean)
}
