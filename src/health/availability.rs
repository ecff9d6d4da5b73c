//! Availability from Slurm's event log: node-hours in service over node-hours, mean time
//! to repair (drain → resume), GPU-hours lost per cause, and repairs and RMAs per week.
//!
//! Stage: health (pure; `toolkit report` calls it). Input: the events
//! ([`crate::parsers::slurm_events`]), the compute nodes with their GPUs, and the
//! window to account. Output: [`Availability`], which the report lays out.
//!
//! A node is out of service while any of its events lasts (events of one node that
//! overlap — a drained node going down too — count once). Drains a rolling change made
//! (`toolkit:rollout …`) are planned work: they count against availability but are no
//! repair, so they are left out of the time to repair.

use std::collections::BTreeMap;

use jiff::civil::DateTime;
use serde::Serialize;

use crate::parsers::slurm_events::SlurmEvent;

/// The period accounted, `[start, end)`, in the event log's civil time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    /// First instant counted.
    pub start: DateTime,
    /// First instant not counted (the report's time).
    pub end: DateTime,
}

/// What a node lost, summed per cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Lost {
    /// Node-hours out of service.
    pub node_hours: f64,
    /// GPU-hours out of service (node-hours × the node's GPUs).
    pub gpu_hours: f64,
}

/// One week's figures (weeks begin on Monday 00:00).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Week {
    /// Monday of the week.
    pub start: jiff::civil::Date,
    /// Node-hours in service over node-hours within the week (and the window).
    pub availability: f64,
    /// Nodes that came back by themselves (a health or repair drain that ended).
    pub repairs: usize,
    /// Nodes sent to RMA.
    pub rmas: usize,
    /// Mean time to repair of the drains that ended this week, seconds.
    pub mttr_seconds: Option<f64>,
}

/// The window's availability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Availability {
    /// The period accounted.
    pub window: Window,
    /// Compute nodes accounted.
    pub nodes: usize,
    /// Node-hours in the window (nodes × hours).
    pub node_hours: f64,
    /// Node-hours in service over node-hours.
    pub availability: f64,
    /// Mean time to repair over the drains that ended (rollouts left out), seconds.
    pub mttr_seconds: Option<f64>,
    /// Drains that ended, rollouts left out.
    pub repaired: usize,
    /// Lost node- and GPU-hours per cause (`health rail-links`, `rma gpu-health`,
    /// `rollout`, `other: <reason>`).
    pub lost: BTreeMap<String, Lost>,
    /// Week by week.
    pub weeks: Vec<Week>,
}

/// The cause a drain reason names: toolkit's own reasons by kind and check, anything
/// else (an operator's, Slurm's `Not responding`) as `other: <reason>`.
#[must_use]
pub fn cause(reason: &str) -> String {
    let Some(rest) = reason.strip_prefix("toolkit:") else {
        return format!("other: {}", reason.trim());
    };
    let mut words = rest.split_whitespace();
    let kind = words.next().unwrap_or_default();
    match kind {
        "health" | "rma" | "repair" => match words.next() {
            Some(check) => format!("{kind} {}", check.trim_end_matches(':')),
            None => kind.to_owned(),
        },
        _ => kind.to_owned(),
    }
}

fn is_planned(reason: &str) -> bool {
    reason.starts_with("toolkit:rollout")
}

fn is_rma(reason: &str) -> bool {
    reason.strip_prefix("toolkit:rma").is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
}

fn is_repair(reason: &str) -> bool {
    ["toolkit:health", "toolkit:repair"].iter().any(|prefix| reason.starts_with(prefix))
}

/// Seconds from `from` to `to`; 0 when `to` is not later.
fn seconds(from: DateTime, to: DateTime) -> f64 {
    if to <= from {
        return 0.0;
    }
    // Civil times: a day is 24 hours here (the event log has no zone to say otherwise).
    from.duration_until(to).as_secs_f64()
}

/// The union of `intervals` clipped to `[start, end)`, in seconds.
fn covered(intervals: &mut [(DateTime, DateTime)], start: DateTime, end: DateTime) -> f64 {
    intervals.sort();
    let mut total = 0.0;
    let mut reach: Option<DateTime> = None;
    for &(from, to) in intervals.iter() {
        let from = from.max(start).max(reach.unwrap_or(start));
        let to = to.min(end);
        if to > from {
            total += seconds(from, to);
            reach = Some(to);
        }
    }
    total
}

/// Accounts `events` over `window` for the compute nodes in `gpus` (node → GPUs per node;
/// events of other nodes and cluster events are left out).
#[must_use]
pub fn availability(events: &[SlurmEvent], gpus: &BTreeMap<String, u32>, window: Window) -> Availability {
    let ours: Vec<&SlurmEvent> = events.iter().filter(|event| gpus.contains_key(&event.node)).collect();
    let open_end = |event: &SlurmEvent| event.end.unwrap_or(window.end);
    let node_count = gpus.len();
    let hours = |start: DateTime, end: DateTime| seconds(start, end) / 3600.0;

    let ratio = |start: DateTime, end: DateTime| {
        let total = hours(start, end) * node_count as f64;
        if total <= 0.0 {
            return 1.0;
        }
        let mut out = 0.0;
        for node in gpus.keys() {
            let mut intervals: Vec<(DateTime, DateTime)> =
                ours.iter().filter(|event| &event.node == node).map(|event| (event.start, open_end(event))).collect();
            out += covered(&mut intervals, start, end) / 3600.0;
        }
        1.0 - out / total
    };

    let mut lost: BTreeMap<String, Lost> = BTreeMap::new();
    for event in &ours {
        let mut interval = [(event.start, open_end(event))];
        let node_hours = covered(&mut interval, window.start, window.end) / 3600.0;
        if node_hours <= 0.0 {
            continue;
        }
        let entry = lost.entry(cause(&event.reason)).or_default();
        entry.node_hours += node_hours;
        entry.gpu_hours += node_hours * f64::from(gpus.get(&event.node).copied().unwrap_or(0));
    }

    let repaired_in = |start: DateTime, end: DateTime| -> Vec<f64> {
        ours.iter()
            .filter(|event| !is_planned(&event.reason))
            .filter_map(|event| {
                event.end.filter(|&ended| ended >= start && ended < end).map(|ended| seconds(event.start, ended))
            })
            .collect()
    };
    let mean =
        |durations: &[f64]| (!durations.is_empty()).then(|| durations.iter().sum::<f64>() / durations.len() as f64);
    let durations = repaired_in(window.start, window.end);

    let mut weeks = Vec::new();
    let first = window.start.date();
    let back = i64::from(first.weekday().to_monday_zero_offset());
    let mut monday = first.checked_sub(jiff::Span::new().days(back)).unwrap_or(first);
    loop {
        let week_start = monday.to_datetime(jiff::civil::Time::midnight());
        if week_start >= window.end {
            break;
        }
        let Ok(next) = monday.checked_add(jiff::Span::new().days(7)) else { break };
        let week_end = next.to_datetime(jiff::civil::Time::midnight());
        let (from, to) = (week_start.max(window.start), week_end.min(window.end));
        let in_week = |at: DateTime| at >= from && at < to;
        weeks.push(Week {
            start: monday,
            availability: ratio(from, to),
            repairs: ours.iter().filter(|event| is_repair(&event.reason) && event.end.is_some_and(in_week)).count(),
            rmas: ours.iter().filter(|event| is_rma(&event.reason) && in_week(event.start)).count(),
            mttr_seconds: mean(&repaired_in(from, to)),
        });
        monday = next;
    }

    Availability {
        window,
        nodes: node_count,
        node_hours: hours(window.start, window.end) * node_count as f64,
        availability: ratio(window.start, window.end),
        mttr_seconds: mean(&durations),
        repaired: durations.len(),
        lost,
        weeks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime {
        text.parse().expect("a time")
    }

    fn event(node: &str, start: &str, end: Option<&str>, reason: &str) -> SlurmEvent {
        SlurmEvent {
            node: node.to_owned(),
            start: at(start),
            end: end.map(at),
            state: "DRAIN".to_owned(),
            reason: reason.to_owned(),
            user: "root".to_owned(),
        }
    }

    fn four_nodes() -> BTreeMap<String, u32> {
        (1..=4).map(|n| (format!("node0{n}"), 4)).collect()
    }

    #[test]
    fn causes_name_toolkits_kind_and_check() {
        assert_eq!(cause("toolkit:health rail-links: rail1 down"), "health rail-links");
        assert_eq!(cause("toolkit:rma gpu-health: GPU 2 fell off the bus"), "rma gpu-health");
        assert_eq!(cause("toolkit:rollout r1 drain: x"), "rollout");
        assert_eq!(cause("bad DIMM, ticket 4411"), "other: bad DIMM, ticket 4411");
    }

    #[test]
    fn one_day_of_four_nodes_with_a_repair_an_rma_and_a_rollout() {
        // Monday 2026-11-30 to Wednesday 2026-12-02: 4 nodes × 48 h = 192 node-hours.
        let window = Window { start: at("2026-11-30T00:00:00"), end: at("2026-12-02T00:00:00") };
        let events = [
            // A rail down for 30 minutes, repaired by a reboot.
            event(
                "node02",
                "2026-11-30T10:00:00",
                Some("2026-11-30T10:30:00"),
                "toolkit:health rail-links: rail1 down",
            ),
            // node02 goes down as well while drained: counted once.
            event("node02", "2026-11-30T10:10:00", Some("2026-11-30T10:20:00"), "Not responding"),
            // node03 sent to RMA on the second day, still out at the window's end: 12 h.
            event("node03", "2026-12-01T12:00:00", None, "toolkit:rma gpu-health: GPU 2 fell off the bus"),
            // A rolling change held node01 for 1 hour: lost, but no repair.
            event("node01", "2026-11-30T20:00:00", Some("2026-11-30T21:00:00"), "toolkit:rollout r1 drain: x"),
            // The head is no compute node; and an event before the window counts its part.
            event("head", "2026-11-30T00:00:00", Some("2026-12-01T00:00:00"), "x"),
            event("node04", "2026-11-29T23:00:00", Some("2026-11-30T01:00:00"), "toolkit:health mtu: 1500"),
        ];
        let result = availability(&events, &four_nodes(), window);
        assert_eq!(result.nodes, 4);
        assert!((result.node_hours - 192.0).abs() < 1e-9);
        // Out: 0.5 (node02) + 12 (node03) + 1 (node01) + 1 (node04 inside the window) = 14.5 h.
        assert!((result.availability - (1.0 - 14.5 / 192.0)).abs() < 1e-9, "{}", result.availability);
        // Repairs ended: node02's two events (30 and 10 min) and node04's (2 h); the
        // rollout is no repair and the RMA has not ended.
        assert_eq!(result.repaired, 3);
        let mttr = (30.0 * 60.0 + 10.0 * 60.0 + 2.0 * 3600.0) / 3.0;
        assert!((result.mttr_seconds.expect("mttr") - mttr).abs() < 1e-6);
        let lost = |cause: &str| result.lost.get(cause).copied().unwrap_or_default();
        assert!((lost("rma gpu-health").gpu_hours - 48.0).abs() < 1e-9, "12 h × 4 GPUs");
        assert!((lost("health rail-links").gpu_hours - 2.0).abs() < 1e-9);
        assert!((lost("other: Not responding").node_hours - 10.0 / 60.0).abs() < 1e-9);
        assert!((lost("rollout").node_hours - 1.0).abs() < 1e-9);
        assert!(!result.lost.contains_key("other: x"), "the head is not accounted");
        // One week, Monday 30 November.
        assert_eq!(result.weeks.len(), 1);
        let week = &result.weeks[0];
        assert_eq!(week.start.to_string(), "2026-11-30");
        assert_eq!((week.repairs, week.rmas), (2, 1), "node02's health drain and node04's; node03's RMA");
        assert!((week.availability - result.availability).abs() < 1e-12);
    }

    #[test]
    fn the_labs_recorded_event_log() {
        let text = crate::parsers::fixtures::read("sacctmgr_22.05_list_events.txt");
        let events = crate::parsers::slurm_events::parse_events(&text).expect("parses");
        // The half hour from the first drain on, at 22:39:18: node03 is still in RMA.
        let window = Window { start: at("2026-12-05T22:09:18"), end: at("2026-12-05T22:39:18") };
        let result = availability(&events, &four_nodes(), window);
        // Health drains: node01 600 s, node02 602 s, node03 603 s, node04 599 s; node03's
        // RMA from 22:19:21 (1197 s to the window's end); node04's operator drain 20 s.
        let out = 600.0 + 602.0 + 603.0 + 599.0 + 1197.0 + 20.0;
        assert!((result.availability - (1.0 - out / (4.0 * 1800.0))).abs() < 1e-9, "{}", result.availability);
        assert_eq!(result.repaired, 5, "four health drains and the operator's ended");
        let mttr = (600.0 + 602.0 + 603.0 + 599.0 + 20.0) / 5.0;
        assert!((result.mttr_seconds.expect("mttr") - mttr).abs() < 1e-9);
        assert_eq!((result.weeks[0].repairs, result.weeks[0].rmas), (4, 1));
        let lost = &result.lost["rma gpu-health"];
        assert!((lost.gpu_hours - 1197.0 * 4.0 / 3600.0).abs() < 1e-9);
        assert!(result.lost.contains_key("other: bad DIMM, ticket 4411"));
    }

    #[test]
    fn weeks_split_at_monday_and_a_window_without_events_is_fully_available() {
        let window = Window { start: at("2026-12-03T00:00:00"), end: at("2026-12-10T00:00:00") };
        let quiet = availability(&[], &four_nodes(), window);
        assert!((quiet.availability - 1.0).abs() < f64::EPSILON);
        assert_eq!(quiet.mttr_seconds, None);
        let starts: Vec<String> = quiet.weeks.iter().map(|week| week.start.to_string()).collect();
        assert_eq!(starts, ["2026-11-30", "2026-12-07"]);
        // A drain over Sunday midnight: each week gets its part, the repair its end's week.
        let events = [event("node01", "2026-12-06T22:00:00", Some("2026-12-07T02:00:00"), "toolkit:health mtu: 1500")];
        let split = availability(&events, &four_nodes(), window);
        let first_week_hours = 4.0 * 4.0 * 24.0; // Thursday to Sunday
        assert!((split.weeks[0].availability - (1.0 - 2.0 / first_week_hours)).abs() < 1e-9);
        assert_eq!((split.weeks[0].repairs, split.weeks[1].repairs), (0, 1));
        assert_eq!(split.weeks[1].mttr_seconds, Some(4.0 * 3600.0));
    }
}
