//! `toolkit report RESULTS`: the handover report from a results JSON file.
//!
//! Exit code 0 when the report was written, whatever the verdict inside it (that
//! is `toolkit validate`'s exit code); 1 when the results cannot be read. The
//! overall verdict is printed on stderr so a person running it sees it at once.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::Context as _;

use crate::cli::{Status, emit};
use crate::plan::state::write_atomic;
use crate::report;
use crate::results::Results;

/// Report formats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One self-contained HTML page with charts, for the customer.
    #[default]
    Html,
    /// JUnit XML, for CI test reports.
    Junit,
    /// The results document, pretty-printed.
    Json,
    /// Markdown summary and failures, for tickets and pull requests.
    Md,
}

impl From<Format> for report::Format {
    fn from(format: Format) -> Self {
        match format {
            Format::Html => Self::Html,
            Format::Junit => Self::Junit,
            Format::Json => Self::Json,
            Format::Md => Self::Markdown,
        }
    }
}

/// Arguments of `toolkit report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The results JSON written by `toolkit validate` (`-` reads stdin).
    results: PathBuf,
    /// Report format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write the report to this file (atomically) instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Slurm's event log (`sacctmgr -P list events start=… format=NodeName,TimeStart,TimeEnd,State,Reason,User`):
    /// adds the availability section (HTML and Markdown).
    #[arg(long, requires = "blueprint")]
    events: Option<PathBuf>,
    /// The blueprint whose compute nodes (and their GPUs) the availability accounts.
    #[arg(long)]
    blueprint: Option<PathBuf>,
    /// Start of the period accounted (`2026-11-30T00:00:00`, the event log's time);
    /// default: the first event's start.
    #[arg(long)]
    since: Option<jiff::civil::DateTime>,
    /// End of the period accounted; default: now.
    #[arg(long)]
    until: Option<jiff::civil::DateTime>,
}

/// The availability of the blueprint's compute nodes from the event log.
fn availability(args: &Args) -> anyhow::Result<Option<crate::health::availability::Availability>> {
    use crate::health::availability::{Window, availability};
    let (Some(events), Some(blueprint)) = (&args.events, &args.blueprint) else { return Ok(None) };
    let text = std::fs::read_to_string(events).with_context(|| format!("reading `{}`", events.display()))?;
    let events =
        crate::parsers::slurm_events::parse_events(&text).with_context(|| format!("reading `{}`", events.display()))?;
    let loaded =
        crate::blueprint::load(blueprint).map_err(|diagnostics| anyhow::anyhow!("{}", diagnostics.render()))?;
    let model = crate::model::expand(&loaded.blueprint)?;
    let gpus = model
        .groups_with(crate::blueprint::schema::Role::Compute)
        .flat_map(|group| model.group_nodes(group).iter().map(|node| (node.name.clone(), group.gpus_per_node)))
        .collect();
    let until = args.until.unwrap_or_else(|| jiff::Zoned::now().datetime());
    let since = args.since.or_else(|| events.iter().map(|event| event.start).min()).unwrap_or(until);
    Ok(Some(availability(&events, &gpus, Window { start: since, end: until })))
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let (text, origin) = if args.results.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading results from stdin")?;
        (text, "<stdin>".to_owned())
    } else {
        let text =
            std::fs::read_to_string(&args.results).with_context(|| format!("reading `{}`", args.results.display()))?;
        (text, args.results.display().to_string())
    };
    let results = Results::from_json(&text, &origin)?;
    let availability = availability(args)?;
    let rendered = report::render_with(&results, availability.as_ref(), args.format.into())?;
    match &args.out {
        Some(out) => {
            write_atomic(out, rendered.as_bytes()).with_context(|| format!("writing `{}`", out.display()))?;
            eprintln!("wrote {}", out.display());
        }
        None => emit(&rendered),
    }
    eprintln!("{}: {} — {}", results.run.cluster, report::verdict_word(&results), report::counts_sentence(&results));
    Ok(Status::Clean)
}
