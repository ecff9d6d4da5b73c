//! The availability section of the report: node availability, mean time to repair,
//! repairs and RMAs per week, and GPU-hours lost per cause.
//!
//! Stage: report. Input: [`Availability`] (from Slurm's event log). Output: the rows the
//! HTML page lays out ([`View`]) and the Markdown section's text.

use std::fmt::Write as _;

use serde::Serialize;

use crate::health::availability::Availability;
use crate::report::{duration_text, format_number};

/// What the page shows, every number already in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct View {
    /// `2026-11-30T00:00:00 → 2026-12-07T00:00:00`.
    pub window: String,
    /// `4 nodes, 672 node-hours`.
    pub scope: String,
    /// `99.12 %`.
    pub availability: String,
    /// `12 min 30 s over 5 repairs`, or `no drain ended`.
    pub mttr: String,
    /// Cause, node-hours, GPU-hours; most GPU-hours first.
    pub lost: Vec<(String, String, String)>,
    /// Week (Monday), availability, repairs, RMAs, MTTR.
    pub weeks: Vec<(String, String, String, String, String)>,
}

fn percent(ratio: f64) -> String {
    format!("{} %", format_number(ratio * 100.0))
}

fn hours(value: f64) -> String {
    format_number(value)
}

/// The page's rows.
#[must_use]
pub fn view(availability: &Availability) -> View {
    let mut lost: Vec<_> = availability.lost.iter().collect();
    lost.sort_by(|a, b| b.1.gpu_hours.total_cmp(&a.1.gpu_hours).then_with(|| a.0.cmp(b.0)));
    View {
        window: format!("{} → {}", availability.window.start, availability.window.end),
        scope: format!("{} nodes, {} node-hours", availability.nodes, hours(availability.node_hours)),
        availability: percent(availability.availability),
        mttr: availability.mttr_seconds.map_or_else(
            || "no drain ended".to_owned(),
            |seconds| format!("{} over {} repairs", duration_text(seconds), availability.repaired),
        ),
        lost: lost
            .into_iter()
            .map(|(cause, lost)| (cause.clone(), hours(lost.node_hours), hours(lost.gpu_hours)))
            .collect(),
        weeks: availability
            .weeks
            .iter()
            .map(|week| {
                (
                    week.start.to_string(),
                    percent(week.availability),
                    week.repairs.to_string(),
                    week.rmas.to_string(),
                    week.mttr_seconds.map_or_else(|| "–".to_owned(), duration_text),
                )
            })
            .collect(),
    }
}

/// Table cell text: `|` and line breaks would end the cell, `<` could open HTML.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ").replace('<', "&lt;")
}

/// The Markdown section, from `## Availability` on.
#[must_use]
pub fn markdown(availability: &Availability) -> String {
    let view = view(availability);
    let mut out = String::from("## Availability\n\n");
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| Window | {} |", cell(&view.window));
    let _ = writeln!(out, "| Compute nodes | {} |", cell(&view.scope));
    let _ = writeln!(out, "| Node availability | **{}** |", view.availability);
    let _ = writeln!(out, "| Mean time to repair (drain → resume) | {} |", view.mttr);
    out.push_str("\n| Week of | Availability | Repairs | RMAs | MTTR |\n|---|--:|--:|--:|--:|\n");
    for (week, ratio, repairs, rmas, mttr) in &view.weeks {
        let _ = writeln!(out, "| {week} | {ratio} | {repairs} | {rmas} | {mttr} |");
    }
    if view.lost.is_empty() {
        out.push_str("\nNo node was out of service.\n");
    } else {
        out.push_str("\n| Cause | Node-hours lost | GPU-hours lost |\n|---|--:|--:|\n");
        for (cause, node_hours, gpu_hours) in &view.lost {
            let _ = writeln!(out, "| {} | {node_hours} | {gpu_hours} |", cell(cause));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::health::availability::{Window, availability};

    #[test]
    fn the_labs_half_hour_in_words() {
        let text = crate::parsers::fixtures::read("sacctmgr_22.05_list_events.txt");
        let events = crate::parsers::slurm_events::parse_events(&text).expect("parses");
        let window = Window {
            start: "2026-12-05T22:09:18".parse().expect("time"),
            end: "2026-12-05T22:39:18".parse().expect("time"),
        };
        let gpus: BTreeMap<String, u32> = (1..=4).map(|n| (format!("node0{n}"), 4)).collect();
        let section = markdown(&availability(&events, &gpus, window));
        // 3621 of 7200 node-seconds out of service (see health::availability's test).
        assert!(section.contains("| Node availability | **49.71 %** |"), "{section}");
        assert!(section.contains("| Mean time to repair (drain → resume) | 8 min 05 s over 5 repairs |"), "{section}");
        assert!(section.contains("| 2026-11-30 | 49.71 % | 4 | 1 | 8 min 05 s |"), "{section}");
        // Most GPU-hours first: the rail checks (2404 s × 4 GPUs), then the RMA (1197 s × 4).
        let causes: Vec<&str> =
            section.lines().filter(|line| line.starts_with("| health") || line.starts_with("| rma")).collect();
        assert_eq!(causes, ["| health rail-links | 0.67 | 2.67 |", "| rma gpu-health | 0.33 | 1.33 |"]);
        assert!(section.contains("| other: bad DIMM, ticket 4411 |"));
    }
}
