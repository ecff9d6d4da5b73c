//! The faulty-host report of a node sent to RMA: everything a vendor ticket asks for,
//! in one document — the machine (serial, model, parts, firmware), why it was taken out
//! (the failing checks with what they measured, the drain reason), what its BMC logged
//! around the failure, its health history, and the repair steps tried.
//!
//! Stage: report. Input: a [`Bundle`] gathered by `deploy::rma`. Output: the bundle as
//! JSON (the data, for a ticket system) and as Markdown (for the ticket's text).
//!
//! Each source is optional and says why it is missing: a node whose BMC does not answer
//! still gets a report with its checks and history. Nothing here holds a credential: the
//! BMC's address is its inventory name, never its user or password.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::bmc::inspect::{Hardware, Part};
use crate::bmc::logs::EventLog;
use crate::health::prometheus::CheckHistory;
use crate::health::status::CheckStatus;

/// A piece of evidence, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence<T> {
    /// Read.
    Read(T),
    /// Not read, and why (no BMC in the inventory, Prometheus not reachable…).
    Missing(String),
}

impl<T> Evidence<T> {
    fn read(&self) -> Option<&T> {
        match self {
            Self::Read(value) => Some(value),
            Self::Missing(_) => None,
        }
    }
}

/// The node's health checks as its health program last wrote them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checks {
    /// Every check that failed on its last run.
    pub failing: Vec<CheckStatus>,
    /// The lines of the metrics files about the failing checks, as written (measurements,
    /// details): the raw output behind each verdict.
    pub raw: String,
}

/// The BMC's event log within a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Events {
    /// Start of the window (RFC 3339).
    pub from: String,
    /// End of the window.
    pub to: String,
    /// What the log services held in it.
    pub log: EventLog,
}

/// The node's health history from Prometheus.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    /// Start of the range (RFC 3339).
    pub from: String,
    /// End of the range.
    pub to: String,
    /// Step, seconds.
    pub step_seconds: u64,
    /// Per check, when it failed.
    pub checks: Vec<CheckHistory>,
}

/// Everything about one faulty host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bundle {
    /// Cluster name.
    pub cluster: String,
    /// Node name.
    pub node: String,
    /// When the report was made (RFC 3339).
    pub generated: String,
    /// The node's drain reason in Slurm (`toolkit:rma gpu-health: …`).
    pub reason: Evidence<String>,
    /// The machine as its BMC reports it: serial, model, parts.
    pub hardware: Evidence<Hardware>,
    /// Firmware versions by component.
    pub firmware: Evidence<BTreeMap<String, String>>,
    /// The failing checks and their raw output.
    pub checks: Evidence<Checks>,
    /// The BMC's event log around the failure.
    pub events: Evidence<Events>,
    /// Health history.
    pub history: Evidence<History>,
    /// The repair steps tried, as the repair service recorded them (each a JSON object:
    /// step, times, outcome).
    pub ladder: Evidence<Vec<serde_json::Value>>,
}

/// The check a `toolkit:rma <check>: <detail>` reason names.
#[must_use]
pub fn reason_check(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix(crate::model::spares::RMA_REASON_PREFIX)?.strip_prefix(' ')?;
    rest.split(':').next().map(str::trim).filter(|check| !check.is_empty())
}

/// Table cell text.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ").replace('<', "&lt;")
}

fn missing(out: &mut String, why: &str) {
    let _ = writeln!(out, "_Not available: {}_\n", cell(why));
}

/// The Markdown text of the ticket.
#[must_use]
pub fn markdown(bundle: &Bundle) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Faulty host: {} ({})\n", cell(&bundle.node), cell(&bundle.cluster));
    let hardware = bundle.hardware.read();
    let value = |text: Option<&String>| text.map_or_else(|| "not reported".to_owned(), |text| cell(text));
    out.push_str("| | |\n|---|---|\n");
    let _ = writeln!(out, "| Node | {} |", cell(&bundle.node));
    let _ = writeln!(out, "| Serial number | {} |", value(hardware.and_then(|h| h.serial.as_ref())));
    let _ = writeln!(out, "| Manufacturer | {} |", value(hardware.and_then(|h| h.manufacturer.as_ref())));
    let _ = writeln!(out, "| Model | {} |", value(hardware.and_then(|h| h.model.as_ref())));
    let reason = match &bundle.reason {
        Evidence::Read(reason) => cell(reason),
        Evidence::Missing(why) => format!("not read ({})", cell(why)),
    };
    let _ = writeln!(out, "| Drain reason | {reason} |");
    let check = bundle.reason.read().and_then(|reason| reason_check(reason));
    let _ = writeln!(out, "| Failing check | {} |", check.map_or_else(|| "not named".to_owned(), cell));
    let _ = writeln!(out, "| Report made | {} |\n", cell(&bundle.generated));

    out.push_str("## Failing checks\n\n");
    match &bundle.checks {
        Evidence::Read(checks) if checks.failing.is_empty() => out.push_str("No check fails on its last run.\n\n"),
        Evidence::Read(checks) => {
            out.push_str("| Check | Subject | Cadence | Detail |\n|---|---|---|---|\n");
            for status in &checks.failing {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    cell(&status.check),
                    cell(&status.subject),
                    cell(&status.cadence),
                    cell(&status.detail)
                );
            }
            let _ = writeln!(
                out,
                "\nRaw output of the node's health program:\n\n```text\n{}\n```\n",
                checks.raw.trim_end()
            );
        }
        Evidence::Missing(why) => missing(&mut out, why),
    }

    out.push_str("## Hardware\n\n");
    match &bundle.hardware {
        Evidence::Read(hardware) => hardware_text(hardware, &mut out),
        Evidence::Missing(why) => missing(&mut out, why),
    }
    out.push_str("## Firmware\n\n");
    match &bundle.firmware {
        Evidence::Read(firmware) => {
            out.push_str("| Component | Version |\n|---|---|\n");
            for (component, version) in firmware {
                let _ = writeln!(out, "| {} | {} |", cell(component), cell(version));
            }
            out.push('\n');
        }
        Evidence::Missing(why) => missing(&mut out, why),
    }

    out.push_str("## BMC event log\n\n");
    match &bundle.events {
        Evidence::Read(events) => {
            let _ = writeln!(
                out,
                "{} entries from {} to {} in {} ({} outside the window left out).\n",
                events.log.entries.len(),
                cell(&events.from),
                cell(&events.to),
                events.log.services.iter().map(|service| format!("`{service}`")).collect::<Vec<_>>().join(", "),
                events.log.left_out,
            );
            if !events.log.entries.is_empty() {
                out.push_str("| Created | Severity | Type | Sensor | Code | Message | Message id |\n|---|---|---|---|---|---|---|\n");
                for entry in &events.log.entries {
                    let field = |text: &Option<String>| text.as_deref().map(cell).unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} | {} | {} | {} |",
                        cell(&entry.created),
                        field(&entry.severity),
                        field(&entry.entry_type),
                        field(&entry.sensor_type),
                        field(&entry.entry_code),
                        cell(&entry.message),
                        field(&entry.message_id),
                    );
                }
                out.push('\n');
            }
            for (service, why) in &events.log.unread {
                let _ = writeln!(out, "- `{service}` could not be read: {}", cell(why));
            }
            if !events.log.unread.is_empty() {
                out.push('\n');
            }
        }
        Evidence::Missing(why) => missing(&mut out, why),
    }

    out.push_str("## Health history\n\n");
    match &bundle.history {
        Evidence::Read(history) => {
            let _ = writeln!(
                out,
                "From {} to {}, in steps of {} s.\n",
                cell(&history.from),
                cell(&history.to),
                history.step_seconds
            );
            out.push_str("| Check | Failing steps | Passing steps | Failing |\n|---|--:|--:|---|\n");
            for check in &history.checks {
                let periods: Vec<String> = check
                    .failing
                    .iter()
                    .map(|[from, to]| if from == to { from.clone() } else { format!("{from} → {to}") })
                    .collect();
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    cell(&check.check),
                    check.failing_steps,
                    check.passing_steps,
                    cell(&periods.join(", "))
                );
            }
            out.push('\n');
        }
        Evidence::Missing(why) => missing(&mut out, why),
    }

    out.push_str("## Repair steps\n\n");
    match &bundle.ladder {
        Evidence::Read(steps) if steps.is_empty() => out.push_str("None recorded.\n"),
        Evidence::Read(steps) => {
            for (number, step) in steps.iter().enumerate() {
                let words: Vec<String> = match step.as_object() {
                    Some(fields) => fields.iter().map(|(key, value)| format!("{key}: {}", plain(value))).collect(),
                    None => vec![plain(step)],
                };
                let _ = writeln!(out, "{}. {}", number + 1, cell(&words.join(", ")));
            }
        }
        Evidence::Missing(why) => missing(&mut out, why),
    }
    out
}

/// A JSON value as words: strings without quotes.
fn plain(value: &serde_json::Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

fn hardware_text(hardware: &Hardware, out: &mut String) {
    let _ = writeln!(out, "System `{}`.\n", hardware.system);
    match &hardware.processors {
        Part::Reported(processors) => {
            for processor in processors {
                let _ = writeln!(out, "- processor: {}", cell(&serde_json::to_string(processor).unwrap_or_default()));
            }
        }
        Part::NotReported { reason: why } => {
            let _ = writeln!(out, "- processors not reported: {}", cell(why));
        }
    }
    match &hardware.memory_modules_mib {
        Part::Reported(mib) => {
            let _ = writeln!(out, "- memory: {mib} MiB in modules");
        }
        Part::NotReported { reason: why } => {
            let _ = writeln!(out, "- memory not reported: {}", cell(why));
        }
    }
    match &hardware.drives {
        Part::Reported(drives) => {
            for drive in drives {
                let _ = writeln!(out, "- drive: {}", cell(&serde_json::to_string(drive).unwrap_or_default()));
            }
        }
        Part::NotReported { reason: why } => {
            let _ = writeln!(out, "- drives not reported: {}", cell(why));
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_is_read_from_toolkits_rma_reason_only() {
        assert_eq!(reason_check("toolkit:rma gpu-health: GPU 2 fell off the bus"), Some("gpu-health"));
        assert_eq!(reason_check("toolkit:health gpu-health: x"), None);
        assert_eq!(reason_check("toolkit:rma"), None);
    }

    #[test]
    fn every_source_missing_still_makes_a_ticket_saying_why() {
        let why = |what: &str| format!("{what}: not read in this test");
        let bundle = Bundle {
            cluster: "lab".to_owned(),
            node: "node03".to_owned(),
            generated: "2026-12-05T22:30:00Z".to_owned(),
            reason: Evidence::Read("toolkit:rma gpu-health: GPU 2 | fell off the bus".to_owned()),
            hardware: Evidence::Missing(why("BMC")),
            firmware: Evidence::Missing(why("firmware")),
            checks: Evidence::Missing(why("checks")),
            events: Evidence::Missing(why("events")),
            history: Evidence::Missing(why("history")),
            ladder: Evidence::Read(vec![
                serde_json::json!({"step": "reboot", "at": "2026-12-05T22:10:00Z", "outcome": "still failing"}),
            ]),
        };
        let text = markdown(&bundle);
        assert!(text.contains("| Failing check | gpu-health |"), "{text}");
        assert!(
            text.contains("| Drain reason | toolkit:rma gpu-health: GPU 2 \\| fell off the bus |"),
            "a `|` cannot break the table"
        );
        assert!(text.contains("| Serial number | not reported |"));
        let unread = Bundle { reason: Evidence::Missing("Slurm does not answer".to_owned()), ..bundle.clone() };
        assert!(markdown(&unread).contains("| Drain reason | not read (Slurm does not answer) |"));
        for what in ["BMC", "firmware", "checks", "events", "history"] {
            assert!(text.contains(&format!("_Not available: {what}: not read in this test_")), "{what}: {text}");
        }
        assert!(text.contains("1. at: 2026-12-05T22:10:00Z, outcome: still failing, step: reboot"), "{text}");
    }
}
