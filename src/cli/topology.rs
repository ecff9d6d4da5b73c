//! `toolkit topology`: fabric sizing and the cabling plan (port map).

use std::fmt::Write as _;

use tabled::settings::Style;
use tabled::{Table, Tabled};

use crate::cli::{OutputFormat, Status, emit, load_checked};
use crate::model;
use crate::topology::cabling;

/// Output formats of `toolkit topology`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Sizing table and the switch list; `--cables` adds the port map.
    #[default]
    Text,
    /// Sizing, switches and every cable.
    Json,
    /// Every cable, one per line, for the cabling crew.
    Csv,
}

/// Arguments of `toolkit topology`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The blueprint YAML file.
    blueprint: std::path::PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    output: Format,
    /// In text output, list every cable too.
    #[arg(long)]
    cables: bool,
}

#[derive(Tabled)]
struct Row {
    item: &'static str,
    value: String,
}

#[derive(Tabled)]
struct SwitchRow {
    name: String,
    role: String,
    su: String,
    rail: String,
    asn: u32,
    loopback: String,
    hosts: String,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let diagnostics_format = if args.output == Format::Json { OutputFormat::Json } else { OutputFormat::Text };
    let Some(inputs) = load_checked(&args.blueprint, None, diagnostics_format) else {
        return Ok(Status::Error);
    };
    let model = model::expand(&inputs.blueprint.blueprint)?;
    let fabric = &model.fabric;
    let rows = cabling::cables(&model);
    match args.output {
        Format::Json => {
            let json = serde_json::json!({
                "format_version": 1,
                "cluster": model.name,
                "kind": fabric.kind,
                "sizing": fabric.sizing,
                "switches": fabric.switches,
                "cables": rows,
            });
            emit(&format!("{}\n", serde_json::to_string_pretty(&json)?));
        }
        Format::Csv => emit(&cabling::csv(&rows)),
        Format::Text => {
            let s = &fabric.sizing;
            let sizing = [
                ("fabric", format!("{:?}, rail-optimized, {} tiers", fabric.kind, s.tiers).to_lowercase()),
                ("nodes on fabric", s.nodes.to_string()),
                ("rails", s.rails.to_string()),
                ("switch", format!("{} ({} ports at {} Gb/s)", fabric.switch_model, s.radix, fabric.link_speed_gbps)),
                ("scalable units", format!("{} ({} nodes each)", s.scalable_units, s.nodes_per_su)),
                ("leaves", format!("{} ({} uplinks each)", s.leaves, s.uplinks_per_leaf)),
                ("spines", format!("{} ({} links per leaf)", s.spines, s.links_per_leaf_spine)),
                ("cores", s.cores.to_string()),
                ("cables node-leaf", s.node_leaf_cables.to_string()),
                ("cables leaf-spine", s.leaf_spine_cables.to_string()),
                ("cables spine-core", s.spine_core_cables.to_string()),
            ];
            let mut out = String::new();
            let mut table = Table::new(sizing.into_iter().map(|(item, value)| Row { item, value }));
            table.with(Style::sharp());
            let _ = writeln!(out, "{table}");
            let switches = fabric.switches.iter().map(|s| SwitchRow {
                name: s.name.clone(),
                role: format!("{:?}", s.role).to_lowercase(),
                su: s.su.map(|v| v.to_string()).unwrap_or_default(),
                rail: s.rail.map(|v| v.to_string()).unwrap_or_default(),
                asn: s.asn,
                loopback: s.loopback.to_string(),
                hosts: s.host_subnet.map(|n| n.to_string()).unwrap_or_default(),
            });
            let mut table = Table::new(switches);
            table.with(Style::sharp());
            let _ = writeln!(out, "{table}");
            if args.cables {
                out.push_str(&cabling::csv(&rows));
            }
            emit(&out);
        }
    }
    Ok(Status::Clean)
}
