//! `toolkit unlock --force`: remove the cluster lock a crashed deploy left behind.

use anyhow::{Context as _, bail};

use crate::blueprint::schema::Role;
use crate::cli::live::{self, SshArgs};
use crate::cli::{BlueprintArgs, Status, load_checked};
use crate::deploy::lock;
use crate::model;
use crate::transport::Connector as _;

/// Arguments of `toolkit unlock`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
    /// Required: removing a lock someone still holds lets two deploys collide.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    ssh: SshArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    if !args.force {
        bail!("`toolkit unlock` removes another run's lock: pass `--force` if that run is gone");
    }
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), args.paths.output) else {
        return Ok(Status::Error);
    };
    let inventory = live::require_inventory(&inputs)?;
    let model = model::expand(&inputs.blueprint.blueprint)?;
    let controller = model.first_with(Role::Controller).context("the blueprint has no controller")?.name.clone();
    let pool = live::pool(inventory, &args.ssh)?;
    live::runtime()?.block_on(async {
        let session = pool.connect(&controller).await.map_err(|error| anyhow::anyhow!("{error}"))?;
        lock::release(session.as_ref()).await?;
        pool.close_all().await;
        eprintln!("cluster lock on `{controller}` removed");
        Ok(Status::Clean)
    })
}
