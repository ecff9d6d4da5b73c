//! `toolkit inspect`: each node's hardware as its BMC reports it, checked against the
//! blueprint's node group.
//!
//! Stage: inspect. Input: a blueprint, an inventory with `bmcs`, optionally `--only`
//! hosts. Output: a table per node and its mismatch lines (stdout), or a versioned
//! JSON document (docs/inspect-format.md); exit 0 when all match, 2 on any mismatch,
//! 1 on an error (an unreachable BMC names its node).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use futures::StreamExt as _;
use serde::Serialize;

use crate::bmc::inspect::{Hardware, boot_macs, inspect_bmc, record_boot_macs};
use crate::bmc::redfish::BmcConfig;
use crate::cli::{BlueprintArgs, OutputFormat, Status, emit, live, load_checked};
use crate::deploy::provision::verify::{Expected, Verdict, verify};
use crate::model;

/// Version of the JSON document; bumped on an incompatible change.
const FORMAT_VERSION: u32 = 1;

/// BMCs read at once: BMCs are slow (seconds per resource) but an inventory of
/// thousands would open as many sessions; 16 keeps a rack's worth in flight.
const PARALLEL: usize = 16;

/// Arguments of `toolkit inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    paths: BlueprintArgs,
    /// Only these hosts (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Record each inspected node's MACs as `boot_macs` in the inventory file,
    /// keeping its comments and layout.
    #[arg(long)]
    write_inventory: bool,
}

/// One node's outcome.
#[derive(Debug, Serialize)]
struct NodeReport {
    node: String,
    group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hardware: Option<Hardware>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<Verdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Runs the command.
///
/// # Errors
/// Unreadable inputs or an inventory without it.
pub fn run(args: &Args) -> anyhow::Result<Status> {
    let Some(inputs) = load_checked(&args.paths.blueprint, args.paths.inventory.as_deref(), args.paths.output) else {
        return Ok(Status::Error);
    };
    let inventory = live::require_inventory(&inputs)?;
    let base = args.paths.inventory.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
    let model = model::expand(&inputs.blueprint.blueprint)?;
    let mut targets = Vec::new();
    for node in &model.nodes {
        if !inventory.inventory.bmcs.contains_key(&node.name)
            || !(args.only.is_empty() || args.only.contains(&node.name))
        {
            continue;
        }
        let group_name = &model.groups[node.group].name;
        let group = model
            .blueprint
            .node_groups
            .iter()
            .find(|group| &group.name == group_name)
            .with_context(|| format!("node group `{group_name}` of `{}`", node.name))?;
        let config = BmcConfig::from_inventory(&inventory.inventory, &node.name, base)?;
        targets.push((node.name.clone(), Expected::from_group(group), config));
    }
    for host in &args.only {
        if !targets.iter().any(|(name, _, _)| name == host) {
            anyhow::bail!("`{host}` (from --only) is not a node of the blueprint with a BMC in the inventory");
        }
    }
    let reports: Vec<NodeReport> = live::runtime()?.block_on(async {
        futures::stream::iter(targets.into_iter().map(|(node, expected, config)| async move {
            match inspect_bmc(config).await {
                Ok(hardware) => NodeReport {
                    node,
                    group: expected.group.clone(),
                    verdict: Some(verify(&expected, &hardware)),
                    hardware: Some(hardware),
                    error: None,
                },
                Err(error) => NodeReport {
                    node,
                    group: expected.group,
                    hardware: None,
                    verdict: None,
                    error: Some(error.to_string()),
                },
            }
        }))
        .buffered(PARALLEL)
        .collect()
        .await
    });
    let errors = reports.iter().any(|report| report.error.is_some());
    let mismatches = reports.iter().any(|report| report.verdict.as_ref().is_some_and(|verdict| !verdict.matches()));
    let mut changes: Vec<String> = Vec::new();
    if args.write_inventory {
        let path = args.paths.inventory.as_deref().context("--write-inventory needs -i INVENTORY")?;
        let mut source = inventory.source.clone();
        for report in &reports {
            let Some(hardware) = &report.hardware else { continue };
            let macs = boot_macs(hardware);
            if macs.is_empty() {
                continue;
            }
            if let Some(text) = record_boot_macs(&source, &report.node, &macs)? {
                source = crate::source::SourceFile::new(source.path.clone(), text);
                changes.push(format!("{}: boot_macs [{}]", report.node, macs.join(", ")));
            }
        }
        if !changes.is_empty() {
            std::fs::write(path, &source.text).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    match args.paths.output {
        OutputFormat::Json => {
            let document =
                serde_json::json!({ "format_version": FORMAT_VERSION, "nodes": reports, "inventory_changes": changes });
            emit(&format!("{}\n", serde_json::to_string_pretty(&document)?));
        }
        OutputFormat::Text => {
            let mut text = render(&reports);
            for change in &changes {
                let _ = writeln!(text, "inventory: {change}");
            }
            emit(&text);
        }
    }
    for report in &reports {
        if let Some(error) = &report.error {
            eprintln!("error: {}: {error}", report.node);
        }
    }
    Ok(if errors {
        Status::Error
    } else if mismatches {
        Status::Changes
    } else {
        Status::Clean
    })
}

fn or_unknown(value: Option<&str>) -> &str {
    value.unwrap_or("?")
}

/// The per-node table and mismatch lines.
fn render(reports: &[NodeReport]) -> String {
    let mut out = String::new();
    for report in reports {
        let _ = writeln!(out, "{} (group {})", report.node, report.group);
        let Some(hw) = &report.hardware else {
            let _ = writeln!(out, "  not inspected: {}", or_unknown(report.error.as_deref()));
            continue;
        };
        let mut rows: Vec<(&str, String)> = Vec::new();
        let mut row = |key, value| rows.push((key, value));
        row("model", format!("{} {}", or_unknown(hw.manufacturer.as_deref()), or_unknown(hw.model.as_deref())));
        row("serial", or_unknown(hw.serial.as_deref()).to_owned());
        row(
            "cpus",
            match hw.processors.reported() {
                Some(list) => list
                    .iter()
                    .map(|p| {
                        format!(
                            "{} {} ({} cores, {} threads)",
                            p.id,
                            or_unknown(p.kind.as_deref()),
                            p.cores.map_or("?".into(), |c| c.to_string()),
                            p.threads.map_or("?".into(), |t| t.to_string())
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                None => format!("not reported: {}", hw.processors.reason().unwrap_or_default()),
            },
        );
        row(
            "memory",
            match (hw.memory_modules_mib.reported(), hw.memory_gib) {
                (Some(mib), _) => format!("{} GiB in modules", mib / 1024),
                (None, Some(gib)) => format!("{gib} GiB (system summary)"),
                (None, None) => format!("not reported: {}", hw.memory_modules_mib.reason().unwrap_or_default()),
            },
        );
        row(
            "pcie",
            match hw.pcie.reported() {
                Some(functions) => format!("{} functions", functions.len()),
                None => format!("not reported: {}", hw.pcie.reason().unwrap_or_default()),
            },
        );
        row(
            "disks",
            match hw.drives.reported() {
                Some(drives) => drives
                    .iter()
                    .map(|d| {
                        format!(
                            "{} {} B {}",
                            d.id,
                            d.capacity_bytes.unwrap_or_default(),
                            or_unknown(d.model.as_deref())
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                None => format!("not reported: {}", hw.drives.reason().unwrap_or_default()),
            },
        );
        row(
            "nics",
            match hw.nics.reported() {
                Some(nics) => nics
                    .iter()
                    .map(|n| format!("{} {}", n.id, or_unknown(n.mac.as_deref().or(n.permanent_mac.as_deref()))))
                    .collect::<Vec<_>>()
                    .join("; "),
                None => format!("not reported: {}", hw.nics.reason().unwrap_or_default()),
            },
        );
        for (key, value) in rows {
            let _ = writeln!(out, "  {key:<8}{value}");
        }
        if let Some(verdict) = &report.verdict {
            for mismatch in &verdict.mismatches {
                let _ = writeln!(out, "{}: {}", report.node, mismatch.message);
            }
            for unchecked in &verdict.unchecked {
                let _ = writeln!(out, "  unchecked {}: {}", unchecked.field, unchecked.reason);
            }
        }
    }
    out
}
