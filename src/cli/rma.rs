//! `toolkit rma NODE BLUEPRINT -i INV`: the faulty-host report of a node sent to RMA,
//! ready for the vendor ticket (`rma-NODE.json` and `rma-NODE.md`).
//!
//! Exit 0 when the report was written, whatever it could read (each missing source says
//! why inside it); 1 when the inputs cannot be read or the files cannot be written.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::blueprint::schema::Role;
use crate::bmc::BmcConfig;
use crate::cli::live::{self, SshArgs};
use crate::cli::{BlueprintArgs, OutputFormat, Status, emit, load_checked};
use crate::deploy::rma::{self, Request};
use crate::report::rma::Evidence;
use crate::transport::Connector as _;

/// Arguments of `toolkit rma`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node sent to RMA.
    node: String,
    #[command(flatten)]
    paths: BlueprintArgs,
    /// Where the report's files go.
    #[arg(long, default_value = ".")]
    output_dir: PathBuf,
    /// Start of the window around the failure (RFC 3339): the BMC log entries and the
    /// health history within it. Default: a day before `--until`.
    #[arg(long)]
    since: Option<jiff::Timestamp>,
    /// End of the window. Default: now.
    #[arg(long)]
    until: Option<jiff::Timestamp>,
    /// Prometheus' URL; default: the monitoring host's, port 9090.
    #[arg(long)]
    prometheus: Option<String>,
    /// The repair service's state file: the node's repair steps with their times.
    #[arg(long)]
    ladder: Option<PathBuf>,
    #[command(flatten)]
    ssh: SshArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let output = args.paths.output;
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    let inventory = live::require_inventory(&inputs)?;
    let model = crate::model::expand(&inputs.blueprint.blueprint)?;
    if !model.nodes.iter().any(|node| node.name == args.node) {
        anyhow::bail!("`{}` is not a node of the blueprint", args.node);
    }
    let controller = model.first_with(Role::Controller).map(|node| node.name.clone());
    let prometheus = args.prometheus.clone().or_else(|| {
        crate::model::monitoring::monitoring(&model, Some(&inventory.inventory))
            .map(|monitoring| format!("http://{}:{}", monitoring.host, crate::model::monitoring::PROMETHEUS_PORT))
    });
    let bmc = inventory
        .inventory
        .bmcs
        .contains_key(&args.node)
        .then(|| BmcConfig::from_inventory(&inventory.inventory, &args.node, std::path::Path::new(".")))
        .transpose()
        .context("the node's BMC in the inventory")?;
    let until = args.until.unwrap_or_else(jiff::Timestamp::now);
    let since = match args.since {
        Some(since) => since,
        None => until.checked_sub(jiff::SignedDuration::from_hours(24)).context("the window's start")?,
    };
    let ladder = match &args.ladder {
        Some(path) => rma::ladder_from(path, &args.node).map_or_else(Evidence::Missing, Evidence::Read),
        None => Evidence::Missing("no repair state file given (`--ladder`)".to_owned()),
    };
    let request = Request {
        cluster: model.name.clone(),
        node: args.node.clone(),
        bmc,
        prometheus,
        from: since,
        to: until,
        ladder,
    };
    let pool = live::pool(inventory, &args.ssh)?;
    let bundle = live::runtime()?.block_on(async {
        let node = pool.connect(&args.node).await.map_err(|error| error.to_string());
        let head = match &controller {
            Some(name) => pool.connect(name).await.map_err(|error| error.to_string()),
            None => Err("the blueprint has no controller".to_owned()),
        };
        let bundle =
            rma::gather(request, node.as_deref().map_err(Clone::clone), head.as_deref().map_err(Clone::clone)).await;
        pool.close_all().await;
        bundle
    });
    let paths = rma::write(&bundle, &args.output_dir)
        .with_context(|| format!("writing the report under `{}`", args.output_dir.display()))?;
    match output {
        OutputFormat::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&bundle)?)),
        OutputFormat::Text => emit(&crate::report::rma::markdown(&bundle)),
    }
    for path in &paths {
        eprintln!("wrote {}", path.display());
    }
    Ok(Status::Clean)
}
