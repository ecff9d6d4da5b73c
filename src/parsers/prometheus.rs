//! Prometheus 2.x HTTP API responses: `/api/v1/targets`, `/api/v1/rules`,
//! `/api/v1/alerts`, `/api/v1/query` and `/api/v1/query_range`, for the handover
//! report's monitoring section (targets up, rules loaded, alerts firing, health over
//! time) and `toolkit status` (what is wrong now).
//!
//! Stage: parse (leaf). Input: one response body (`{"status": …, "data": …}`). Output: the
//! parts a validator measures. A response whose status is not `success` is an error
//! naming Prometheus' own message.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ParseError, Summary, float, json_document};

#[derive(Deserialize)]
struct Envelope<T> {
    status: String,
    data: Option<T>,
    error: Option<String>,
}

fn data<T: for<'de> Deserialize<'de>>(text: &str, what: &str) -> Result<T, ParseError> {
    let envelope: Envelope<T> = json_document(text, what)?;
    match (envelope.status.as_str(), envelope.data) {
        ("success", Some(data)) => Ok(data),
        (status, _) => Err(ParseError::at(
            1,
            format!("{what} with status `success`"),
            format!("status `{status}`: {}", envelope.error.unwrap_or_default()),
        )),
    }
}

/// Scrape targets and their health.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Targets {
    /// Every active target.
    pub targets: Vec<Target>,
}

/// One active target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    /// Its `job` label.
    pub job: String,
    /// Its `instance` label (toolkit sets the host name).
    pub instance: String,
    /// `up`, `down` or `unknown` (not scraped yet).
    pub health: String,
    /// The last scrape's error, empty when it worked.
    pub last_error: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTargets {
    active_targets: Vec<RawTarget>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTarget {
    labels: BTreeMap<String, String>,
    health: String,
    #[serde(default)]
    last_error: String,
}

/// Parses `/api/v1/targets`.
///
/// # Errors
/// Malformed JSON, or a response that is not a success.
pub fn parse_targets(text: &str) -> Result<Targets, ParseError> {
    let raw: RawTargets = data(text, "a Prometheus /api/v1/targets response")?;
    let targets = raw
        .active_targets
        .into_iter()
        .map(|target| Target {
            job: target.labels.get("job").cloned().unwrap_or_default(),
            instance: target.labels.get("instance").cloned().unwrap_or_default(),
            health: target.health,
            last_error: target.last_error,
        })
        .collect();
    Ok(Targets { targets })
}

impl Summary for Targets {
    fn summary(&self) -> String {
        let up = self.targets.iter().filter(|target| target.health == "up").count();
        format!("{up} of {} targets up", self.targets.len())
    }
}

/// Rules loaded, by group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rules {
    /// Every rule.
    pub rules: Vec<Rule>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    /// Its group.
    pub group: String,
    /// Alert or record name.
    pub name: String,
    /// `alerting` or `recording`.
    pub kind: String,
    /// `ok`, `err` or `unknown`: whether its last evaluation worked.
    pub health: String,
    /// For alerting rules: `inactive`, `pending` or `firing`.
    pub state: Option<String>,
}

#[derive(Deserialize)]
struct RawRules {
    groups: Vec<RawGroup>,
}

#[derive(Deserialize)]
struct RawGroup {
    name: String,
    rules: Vec<RawRule>,
}

#[derive(Deserialize)]
struct RawRule {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    health: String,
    #[serde(default)]
    state: Option<String>,
}

/// Parses `/api/v1/rules`.
///
/// # Errors
/// Malformed JSON, or a response that is not a success.
pub fn parse_rules(text: &str) -> Result<Rules, ParseError> {
    let raw: RawRules = data(text, "a Prometheus /api/v1/rules response")?;
    let rules = raw
        .groups
        .into_iter()
        .flat_map(|group| {
            let name = group.name;
            group.rules.into_iter().map(move |rule| Rule {
                group: name.clone(),
                name: rule.name,
                kind: rule.kind,
                health: rule.health,
                state: rule.state,
            })
        })
        .collect();
    Ok(Rules { rules })
}

impl Summary for Rules {
    fn summary(&self) -> String {
        let broken = self.rules.iter().filter(|rule| rule.health == "err").count();
        format!("{} rules loaded, {broken} failing to evaluate", self.rules.len())
    }
}

/// Alerts pending or firing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alerts {
    /// Every alert.
    pub alerts: Vec<Alert>,
}

/// One alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// `alertname`.
    pub name: String,
    /// `pending` or `firing`.
    pub state: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The `summary` annotation.
    pub summary: String,
}

#[derive(Deserialize)]
struct RawAlerts {
    alerts: Vec<RawAlert>,
}

#[derive(Deserialize)]
struct RawAlert {
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    state: String,
}

/// Parses `/api/v1/alerts`.
///
/// # Errors
/// Malformed JSON, or a response that is not a success.
pub fn parse_alerts(text: &str) -> Result<Alerts, ParseError> {
    let raw: RawAlerts = data(text, "a Prometheus /api/v1/alerts response")?;
    let alerts = raw
        .alerts
        .into_iter()
        .map(|alert| Alert {
            name: alert.labels.get("alertname").cloned().unwrap_or_default(),
            state: alert.state,
            summary: alert.annotations.get("summary").cloned().unwrap_or_default(),
            labels: alert.labels,
        })
        .collect();
    Ok(Alerts { alerts })
}

impl Summary for Alerts {
    fn summary(&self) -> String {
        let firing = self.alerts.iter().filter(|alert| alert.state == "firing").count();
        format!("{firing} alerts firing, {} pending", self.alerts.len() - firing)
    }
}

/// An instant query's vector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Vector {
    /// One sample per label set.
    pub samples: Vec<Sample>,
}

/// One sample of a vector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawVector {
    result_type: String,
    result: Vec<RawSample>,
}

#[derive(Deserialize)]
struct RawSample {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Parses `/api/v1/query` (an instant query whose result is a vector).
///
/// # Errors
/// Malformed JSON, a failed query, a result that is not a vector, or a value that is
/// not a finite number.
pub fn parse_vector(text: &str) -> Result<Vector, ParseError> {
    let raw: RawVector = data(text, "a Prometheus /api/v1/query response")?;
    result_type(&raw.result_type, "vector")?;
    let mut samples = Vec::with_capacity(raw.result.len());
    for entry in raw.result {
        samples.push(Sample { labels: entry.metric, value: float(&entry.value.1, 1, "a sample value")? });
    }
    Ok(Vector { samples })
}

impl Summary for Vector {
    fn summary(&self) -> String {
        format!("{} samples", self.samples.len())
    }
}

fn result_type(found: &str, wanted: &str) -> Result<(), ParseError> {
    if found == wanted { Ok(()) } else { Err(ParseError::at(1, format!("a {wanted} result"), format!("`{found}`"))) }
}

/// A range query's matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Matrix {
    /// One series per label set.
    pub series: Vec<Series>,
}

/// One series of a matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// `[unix seconds, value]` pairs in time order.
    pub points: Vec<[f64; 2]>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMatrix {
    result_type: String,
    result: Vec<RawSeries>,
}

#[derive(Deserialize)]
struct RawSeries {
    metric: BTreeMap<String, String>,
    values: Vec<(f64, String)>,
}

/// Parses `/api/v1/query_range`.
///
/// # Errors
/// Malformed JSON, a failed query, a result that is not a matrix, or a value that is
/// not a finite number.
pub fn parse_range(text: &str) -> Result<Matrix, ParseError> {
    let raw: RawMatrix = data(text, "a Prometheus /api/v1/query_range response")?;
    result_type(&raw.result_type, "matrix")?;
    let mut series = Vec::with_capacity(raw.result.len());
    for entry in raw.result {
        let mut points = Vec::with_capacity(entry.values.len());
        for (time, value) in entry.values {
            points.push([time, float(&value, 1, "a sample value")?]);
        }
        series.push(Series { labels: entry.metric, points });
    }
    Ok(Matrix { series })
}

impl Summary for Matrix {
    fn summary(&self) -> String {
        let points: usize = self.series.iter().map(|series| series.points.len()).sum();
        format!("{} series, {points} samples", self.series.len())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::read;
    use super::*;

    #[test]
    fn lab_targets_all_up() {
        let targets = parse_targets(&read("prometheus_2.42_api_targets.json")).expect("parses");
        let node: Vec<&str> = targets.targets.iter().filter(|t| t.job == "node").map(|t| t.instance.as_str()).collect();
        assert_eq!(node.len(), 7, "{node:?}");
        assert!(node.contains(&"leaf0") && node.contains(&"head"), "{node:?}");
        assert_eq!(targets.targets.iter().filter(|t| t.job == "frr").count(), 3);
        assert!(targets.targets.iter().all(|t| t.health == "up" && t.last_error.is_empty()));
        assert_eq!(targets.summary(), "11 of 11 targets up");
    }

    #[test]
    fn a_stopped_exporter_is_down_with_its_error() {
        let targets = parse_targets(&read("prometheus_2.42_api_targets_leaf0_down.json")).expect("parses");
        let down: Vec<&Target> = targets.targets.iter().filter(|t| t.health != "up").collect();
        assert_eq!(down.len(), 1, "{down:?}");
        assert_eq!((down[0].job.as_str(), down[0].instance.as_str()), ("node", "leaf0"));
        assert!(down[0].last_error.contains("connection refused"), "{}", down[0].last_error);
    }

    #[test]
    fn lab_rules_loaded() {
        let rules = parse_rules(&read("prometheus_2.42_api_rules.json")).expect("parses");
        assert!(rules.rules.iter().any(|r| r.name == "BgpSessionDown" && r.group == "toolkit-fabric"));
        assert!(rules.rules.iter().all(|r| r.kind == "alerting" && r.health == "ok"), "{rules:?}");
        assert_eq!(
            rules.rules.iter().find(|r| r.name == "NodeDown").and_then(|r| r.state.as_deref()),
            Some("inactive")
        );
    }

    #[test]
    fn firing_alerts_with_their_summary() {
        assert!(parse_alerts(&read("prometheus_2.42_api_alerts.json")).expect("parses").alerts.is_empty());
        let alerts = parse_alerts(&read("prometheus_2.42_api_alerts_leaf0_frr_stopped.json")).expect("parses");
        let bgp = alerts.alerts.iter().find(|a| a.name == "BgpSessionDown").expect("BGP alert");
        assert_eq!(bgp.state, "firing");
        assert_eq!(bgp.labels.get("peer_desc").map(String::as_str), Some("leaf0"));
        assert_eq!(bgp.summary, "BGP session spine0 - leaf0 (on spine0 port swp1) is down");
    }

    #[test]
    fn a_range_is_a_matrix_of_points() {
        let matrix = parse_range(&read("prometheus_2.42_api_range_up.json")).expect("parses");
        assert_eq!(matrix.series.len(), 1);
        let values: Vec<f64> = matrix.series[0].points.iter().map(|point| point[1]).collect();
        assert!(values.contains(&8.0) && values.contains(&7.0), "{values:?}");
        assert!(matrix.series[0].points.windows(2).all(|pair| pair[0][0] < pair[1][0]));
    }

    #[test]
    fn an_instant_query_is_a_vector_of_samples() {
        let vector = parse_vector(&read("prometheus_2.42_api_query_healthcheck_failing.json")).expect("parses");
        assert_eq!(vector.samples.len(), 3);
        assert!(vector.samples.iter().all(|sample| sample.value == 0.0));
        let subjects: Vec<&str> =
            vector.samples.iter().filter_map(|s| s.labels.get("subject").map(String::as_str)).collect();
        assert_eq!(subjects, ["node01+node02/rail1", "node02+node03/rail1", "node02"]);
        // A range answer is not a vector.
        assert!(parse_vector(&read("prometheus_2.42_api_range_up.json")).is_err());
        let empty_matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        let error = parse_vector(empty_matrix).expect_err("a matrix");
        assert!(error.to_string().contains("a vector result"), "{error}");
    }

    #[test]
    fn an_error_response_is_an_error() {
        let text = r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\""}"#;
        let error = parse_range(text).expect_err("refused");
        assert!(error.to_string().contains("invalid parameter"), "{error}");
    }
}
