//! The cluster's current health as Prometheus sees it, for `toolkit status`: scrape
//! targets down, alerts pending or firing, toolkit health checks failing on each node,
//! and the Slurm nodes drained or down with their reasons (the Slurm view's metrics).
//!
//! Stage: health (pure; `toolkit status` reads with it). Input: the bodies of Prometheus' answers to [`QUERIES`],
//! fetched on the monitoring host. Output: [`View`]; one line per problem, by host,
//! from [`View::lines`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::parsers::ParseError;
use crate::parsers::prometheus::{self, Alert, Target};

/// One request to Prometheus' HTTP API: a path, and for `/api/v1/query` the PromQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// Path and fixed parameters (`/api/v1/targets?state=active`).
    pub path: &'static str,
    /// The `query` parameter, unencoded.
    pub promql: Option<&'static str>,
}

/// Active targets and their health.
pub const TARGETS: Query = Query { path: "/api/v1/targets?state=active", promql: None };
/// Alerts pending and firing.
pub const ALERTS: Query = Query { path: "/api/v1/alerts", promql: None };
/// Every check subject whose last run failed (`toolkit_healthcheck_ok` is 0).
pub const FAILING: Query = Query { path: "/api/v1/query", promql: Some("toolkit_healthcheck_ok == 0") };
/// Slurm nodes out of service.
pub const UNAVAILABLE: Query =
    Query { path: "/api/v1/query", promql: Some(r#"slurm_node_state_info{state=~"(down|drain|fail).*"} == 1"#) };
/// Why Slurm nodes are drained or down.
pub const REASONS: Query = Query { path: "/api/v1/query", promql: Some("slurm_node_reason_info") };
/// Every request the view needs, in the order [`Responses`] takes their answers.
pub const QUERIES: [Query; 5] = [TARGETS, ALERTS, FAILING, UNAVAILABLE, REASONS];

/// Prometheus' answers, one body per query of [`QUERIES`].
#[derive(Debug, Clone, Copy)]
pub struct Responses<'a> {
    /// Answer to [`TARGETS`].
    pub targets: &'a str,
    /// Answer to [`ALERTS`].
    pub alerts: &'a str,
    /// Answer to [`FAILING`].
    pub failing: &'a str,
    /// Answer to [`UNAVAILABLE`].
    pub unavailable: &'a str,
    /// Answer to [`REASONS`].
    pub reasons: &'a str,
}

/// What is wrong now, as Prometheus last scraped it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct View {
    /// Active scrape targets.
    pub targets: usize,
    /// Targets whose last scrape failed or that were never scraped.
    pub targets_down: Vec<Target>,
    /// Alerts pending or firing.
    pub alerts: Vec<Alert>,
    /// Health checks failing, per node and subject.
    pub failing: Vec<FailingCheck>,
    /// Slurm nodes drained, down or failed, with the reason Slurm holds.
    pub unavailable: Vec<UnavailableNode>,
}

/// One failing check, from `toolkit_healthcheck_ok`'s labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FailingCheck {
    /// Node whose health program ran it.
    pub node: String,
    /// Check (validator) id.
    pub check: String,
    /// Subject (`node02`, `node01+node02/rail1`).
    pub subject: String,
    /// `fast` or `slow`.
    pub cadence: String,
    /// `drain` or `alert`.
    pub action: String,
}

/// One Slurm node out of service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnavailableNode {
    /// Slurm node name.
    pub node: String,
    /// `sinfo` state (`drained`, `down*`, `draining`).
    pub state: String,
    /// Slurm's reason, empty when it has none.
    pub reason: String,
}

/// Reads Prometheus' answers into a [`View`].
///
/// # Errors
/// A body that is not a successful answer of the expected shape, naming which.
pub fn view(responses: &Responses<'_>) -> Result<View, ParseError> {
    let targets = prometheus::parse_targets(responses.targets)?.targets;
    let total = targets.len();
    let targets_down = targets.into_iter().filter(|target| target.health != "up").collect();
    let alerts = prometheus::parse_alerts(responses.alerts)?.alerts;
    let failing = prometheus::parse_vector(responses.failing)?
        .samples
        .into_iter()
        .map(|sample| {
            let label = |name: &str| sample.labels.get(name).cloned().unwrap_or_default();
            FailingCheck {
                node: label("node"),
                check: label("check"),
                subject: label("subject"),
                cadence: label("cadence"),
                action: label("action"),
            }
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let reasons: BTreeMap<String, String> = prometheus::parse_vector(responses.reasons)?
        .samples
        .into_iter()
        .filter_map(|sample| Some((sample.labels.get("node")?.clone(), sample.labels.get("reason")?.clone())))
        .collect();
    let mut unavailable: Vec<UnavailableNode> = prometheus::parse_vector(responses.unavailable)?
        .samples
        .into_iter()
        .filter_map(|sample| {
            let node = sample.labels.get("node")?.clone();
            let reason = reasons.get(&node).cloned().unwrap_or_default();
            Some(UnavailableNode { state: sample.labels.get("state").cloned().unwrap_or_default(), node, reason })
        })
        .collect();
    unavailable.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(View { targets: total, targets_down, alerts, failing, unavailable })
}

impl View {
    /// The one-line count: targets up, alerts firing and pending, checks failing,
    /// Slurm nodes out of service.
    #[must_use]
    pub fn headline(&self) -> String {
        let firing = self.alerts.iter().filter(|alert| alert.state == "firing").count();
        format!(
            "{} of {} targets up, {firing} alerts firing, {} pending, {} checks failing, {} nodes out of service in Slurm",
            self.targets - self.targets_down.len(),
            self.targets,
            self.alerts.len() - firing,
            self.failing.len(),
            self.unavailable.len(),
        )
    }

    /// Every problem as `(host, what)`, by host: targets down, alerts, failing checks,
    /// unavailable Slurm nodes. An alert's host is its `node` label (the Slurm rules),
    /// else its `instance` (the host the series came from).
    #[must_use]
    pub fn lines(&self) -> Vec<(String, String)> {
        let mut lines = Vec::new();
        for target in &self.targets_down {
            let error = if target.last_error.is_empty() { String::new() } else { format!(": {}", target.last_error) };
            lines.push((target.instance.clone(), format!("target {} {}{error}", target.job, target.health)));
        }
        for alert in &self.alerts {
            let host = alert.labels.get("node").or_else(|| alert.labels.get("instance")).cloned().unwrap_or_default();
            let severity = alert.labels.get("severity").map(|severity| format!(" ({severity})")).unwrap_or_default();
            lines.push((host, format!("{} {}{severity}: {}", alert.state, alert.name, alert.summary)));
        }
        for check in &self.failing {
            lines.push((check.node.clone(), format!("fail {} on {} ({})", check.check, check.subject, check.action)));
        }
        for node in &self.unavailable {
            lines.push((node.node.clone(), format!("{} in Slurm: {}", node.state, node.reason)));
        }
        lines.sort_by(|a, b| a.0.cmp(&b.0));
        lines
    }
}

/// The PromQL of one node's health history: per check, the worst verdict of each `step`
/// (1 passed, 0 failed), for `/api/v1/query_range` with that step. `node` is a host name
/// checked at lint (letters, digits, `-`, `.`), so it needs no escaping in the label matcher.
#[must_use]
pub fn history_query(node: &str, step_seconds: u64) -> String {
    format!(r#"min by (check) (min_over_time(toolkit_healthcheck_ok{{node="{node}"}}[{step_seconds}s]))"#)
}

/// One check's history on one node: when it failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckHistory {
    /// Check (validator) id.
    pub check: String,
    /// Steps in which it failed.
    pub failing_steps: usize,
    /// Steps in which it ran and passed.
    pub passing_steps: usize,
    /// Runs of failing steps, `[first, last]` as RFC 3339 times.
    pub failing: Vec<[String; 2]>,
}

/// Each check's failing periods in a range answer (a sample of 0 is a failing step; failing
/// steps at most 1.5 steps apart are one period). A series without a `check` label is left out.
#[must_use]
pub fn history(matrix: &prometheus::Matrix, step_seconds: u64) -> Vec<CheckHistory> {
    let time = |seconds: f64| {
        #[allow(clippy::cast_possible_truncation)] // Prometheus times are seconds since 1970, far inside i64
        let whole = seconds.floor() as i64;
        jiff::Timestamp::from_second(whole).map_or_else(|_| seconds.to_string(), |at| at.to_string())
    };
    #[allow(clippy::cast_precision_loss)] // a step is seconds, far below 2^52
    let gap = step_seconds as f64 * 1.5;
    let mut found: Vec<CheckHistory> = matrix
        .series
        .iter()
        .filter_map(|series| {
            let check = series.labels.get("check")?.clone();
            let mut failing: Vec<[f64; 2]> = Vec::new();
            let mut passing_steps = 0;
            for [at, value] in series.points.iter().copied() {
                if value != 0.0 {
                    passing_steps += 1;
                    continue;
                }
                match failing.last_mut() {
                    Some(period) if at - period[1] <= gap => period[1] = at,
                    _ => failing.push([at, at]),
                }
            }
            let failing_steps = series.points.len() - passing_steps;
            Some(CheckHistory {
                check,
                failing_steps,
                passing_steps,
                failing: failing.into_iter().map(|[from, to]| [time(from), time(to)]).collect(),
            })
        })
        .collect();
    found.sort_by(|a, b| b.failing_steps.cmp(&a.failing_steps).then_with(|| a.check.cmp(&b.check)));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::fixtures::read;

    #[test]
    fn a_healthy_lab_has_nothing_to_say() {
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let responses = Responses {
            targets: &read("prometheus_2.42_api_targets.json"),
            alerts: &read("prometheus_2.42_api_alerts.json"),
            failing: empty,
            unavailable: empty,
            reasons: empty,
        };
        let view = view(&responses).expect("parses");
        assert!(view.lines().is_empty(), "{:?}", view.lines());
        assert_eq!(
            view.headline(),
            "11 of 11 targets up, 0 alerts firing, 0 pending, 0 checks failing, 0 nodes out of service in Slurm"
        );
    }

    #[test]
    fn a_down_rail_as_the_lab_prometheus_saw_it() {
        let responses = Responses {
            targets: &read("prometheus_2.42_api_targets_lab_hlth.json"),
            alerts: &read("prometheus_2.42_api_alerts_node02_rail1_down.json"),
            failing: &read("prometheus_2.42_api_query_healthcheck_failing.json"),
            unavailable: &read("prometheus_2.42_api_query_slurm_unavailable.json"),
            reasons: &read("prometheus_2.42_api_query_slurm_reasons.json"),
        };
        let view = view(&responses).expect("parses");
        assert_eq!(
            view.headline(),
            "12 of 12 targets up, 6 alerts firing, 0 pending, 3 checks failing, 1 nodes out of service in Slurm"
        );
        assert_eq!(
            view.failing[2],
            FailingCheck {
                node: "node02".to_owned(),
                check: "rail-links".to_owned(),
                subject: "node02".to_owned(),
                cadence: "fast".to_owned(),
                action: "drain".to_owned(),
            }
        );
        let reason = "toolkit:health rail-links: rail1 down, MTU 9000 (planned up, MTU 9000)";
        assert_eq!(
            view.unavailable,
            [UnavailableNode { node: "node02".to_owned(), state: "drained".to_owned(), reason: reason.to_owned() }]
        );
        let node02: Vec<String> =
            view.lines().into_iter().filter(|(host, _)| host == "node02").map(|(_, line)| line).collect();
        assert!(
            node02.contains(&"firing RailLinkDown (critical): rail 1 (rail1) is down on node02".to_owned()),
            "{node02:#?}"
        );
        assert!(node02.contains(&"fail rail-links on node02 (drain)".to_owned()), "{node02:#?}");
        assert_eq!(node02.last(), Some(&format!("drained in Slurm: {reason}")));
        // Lines are by host: node01's mtu failure before node02's, node03's flapping rail after.
        let hosts: Vec<String> = view.lines().into_iter().map(|(host, _)| host).collect();
        assert!(hosts.windows(2).all(|pair| pair[0] <= pair[1]), "{hosts:?}");
        assert_eq!(hosts.first().map(String::as_str), Some("node01"));
    }

    #[test]
    fn a_nodes_history_as_the_lab_prometheus_recorded_it() {
        // node02's rail1 down a few seconds, then for 150 s; queried over 10 min with a 30 s step.
        let matrix =
            prometheus::parse_range(&read("prometheus_2.42_api_range_healthcheck_history.json")).expect("parses");
        let node02 = prometheus::Matrix {
            series: matrix
                .series
                .into_iter()
                .filter(|series| series.labels.get("node").map(String::as_str) == Some("node02"))
                .collect(),
        };
        let checks = history(&node02, 30);
        let rail = checks.iter().find(|check| check.check == "rail-links").expect("rail-links failed on node02");
        assert_eq!(rail.failing_steps, 9, "{checks:#?}");
        assert_eq!(rail.passing_steps, 0, "the query kept only failing steps");
        assert_eq!(rail.failing.len(), 2, "two periods, 210 s apart: {:?}", rail.failing);
        assert_eq!(rail.failing[1][1], "2026-11-26T08:25:10Z", "{:?}", rail.failing);
        assert_eq!(
            history_query("node02", 30),
            r#"min by (check) (min_over_time(toolkit_healthcheck_ok{node="node02"}[30s]))"#
        );
    }

    #[test]
    fn failing_steps_apart_are_two_periods() {
        let series = prometheus::Series {
            labels: [("check".to_owned(), "mtu".to_owned())].into(),
            points: vec![[0.0, 0.0], [30.0, 0.0], [60.0, 1.0], [90.0, 1.0], [120.0, 0.0]],
        };
        let checks = history(&prometheus::Matrix { series: vec![series] }, 30);
        assert_eq!((checks[0].failing_steps, checks[0].passing_steps), (3, 2));
        assert_eq!(
            checks[0].failing,
            [
                ["1970-01-01T00:00:00Z".to_owned(), "1970-01-01T00:00:30Z".to_owned()],
                ["1970-01-01T00:02:00Z".to_owned(), "1970-01-01T00:02:00Z".to_owned()]
            ]
        );
    }

    #[test]
    fn an_error_answer_names_prometheus_message() {
        let error = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        let targets = read("prometheus_2.42_api_targets.json");
        let alerts = read("prometheus_2.42_api_alerts.json");
        let responses =
            Responses { targets: &targets, alerts: &alerts, failing: error, unavailable: error, reasons: error };
        assert!(view(&responses).expect_err("refused").to_string().contains("parse error"));
    }
}
