//! The cluster's current health as the nodes' health program last wrote it: read
//! back from the metrics files (`toolkit_health_<cadence>.prom`) for `toolkit status`.
//!
//! Stage: health (pure; `toolkit status` reads with it). Input: one node's metrics files' text. Output: one
//! [`CheckStatus`] per check and subject, with the detail the program recorded.

use std::collections::BTreeMap;

use serde::Serialize;

/// The last verdict of one check on one subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckStatus {
    /// Node that ran it.
    pub node: String,
    /// Check (validator) id.
    pub check: String,
    /// Subject (`node02`, `node01+node02/rail1`).
    pub subject: String,
    /// `fast` or `slow`.
    pub cadence: String,
    /// `drain` or `alert`.
    pub action: String,
    /// `pass`, `warn`, `fail` or `skipped`.
    pub verdict: &'static str,
    /// What the program recorded: the failure's detail or why it was skipped.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// When it last ran (seconds since the epoch), when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<u64>,
}

/// Every check status a metrics file holds.
#[must_use]
pub fn parse(text: &str) -> Vec<CheckStatus> {
    let mut found: BTreeMap<(String, String), CheckStatus> = BTreeMap::new();
    let mut notes: BTreeMap<(String, String), String> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# toolkit:detail ").or_else(|| line.strip_prefix("# toolkit:skipped ")) {
            let mut words = rest.splitn(3, ' ');
            if let (Some(check), Some(subject), Some(detail)) = (words.next(), words.next(), words.next()) {
                notes.insert((check.to_owned(), subject.to_owned()), detail.to_owned());
            }
            continue;
        }
        let Some((name, labels, value)) = sample(line) else { continue };
        let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
        let key = (label("check"), label("subject"));
        let entry = found.entry(key).or_insert_with(|| CheckStatus {
            node: label("node"),
            check: label("check"),
            subject: label("subject"),
            cadence: label("cadence"),
            action: label("action"),
            verdict: "pass",
            detail: String::new(),
            last_run: None,
        });
        match (name, value) {
            ("toolkit_healthcheck_ok", "0") => entry.verdict = "fail",
            ("toolkit_healthcheck_warning", "1") if entry.verdict == "pass" => entry.verdict = "warn",
            ("toolkit_healthcheck_skipped", "1") => entry.verdict = "skipped",
            ("toolkit_healthcheck_last_run_timestamp_seconds", seconds) => entry.last_run = seconds.parse().ok(),
            _ => {}
        }
    }
    found
        .into_iter()
        .filter(|((check, _), _)| !check.is_empty())
        .map(|(key, mut status)| {
            if let Some(detail) = notes.remove(&key) {
                status.detail = detail;
            }
            status
        })
        .collect()
}

/// `name{a="x",b="y"} value` of the check metrics (the program writes no escapes:
/// its label values are ids and host names).
fn sample(line: &str) -> Option<(&str, BTreeMap<&str, String>, &str)> {
    let (name, rest) = line.split_once('{')?;
    if !matches!(
        name,
        "toolkit_healthcheck_ok"
            | "toolkit_healthcheck_warning"
            | "toolkit_healthcheck_skipped"
            | "toolkit_healthcheck_last_run_timestamp_seconds"
    ) {
        return None;
    }
    let (labels, value) = rest.rsplit_once("} ")?;
    let labels = labels
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key, value.trim_matches('"').to_owned()))
        .collect();
    Some((name, labels, value.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_program_wrote() {
        let text = r#"# HELP toolkit_healthcheck_ok 1 when the check met every limit on its last run, 0 when it failed.
# TYPE toolkit_healthcheck_ok gauge
toolkit_healthcheck_ok{node="node02",check="rail-links",subject="node02",cadence="fast",action="drain"} 0
toolkit_healthcheck_ok{node="node02",check="mtu",subject="node02+node03/rail1",cadence="fast",action="alert"} 1
# HELP toolkit_healthcheck_last_run_timestamp_seconds When the check last ran, seconds since the epoch.
# TYPE toolkit_healthcheck_last_run_timestamp_seconds gauge
toolkit_healthcheck_last_run_timestamp_seconds{node="node02",check="rail-links",subject="node02",cadence="fast",action="drain"} 1764120000
toolkit_healthcheck_skipped{node="node02",check="gpu-health",subject="node02",cadence="fast",action="drain"} 1
toolkit_healthcheck_measurement{node="node02",check="rail-links",subject="node02",measurement="rails_up"} 1
toolkit_healthcheck_drained{node="node02",cadence="fast"} 1
# toolkit:detail rail-links node02 rail1 down, MTU 9000 (planned up, MTU 9000)
# toolkit:skipped gpu-health node02 the node's GPUs are device files (`fake_gpu_devices`)
"#;
        let statuses = parse(text);
        let short: Vec<(&str, &str, &str, &str)> =
            statuses.iter().map(|s| (s.check.as_str(), s.subject.as_str(), s.verdict, s.detail.as_str())).collect();
        assert_eq!(
            short,
            [
                ("gpu-health", "node02", "skipped", "the node's GPUs are device files (`fake_gpu_devices`)"),
                ("mtu", "node02+node03/rail1", "pass", ""),
                ("rail-links", "node02", "fail", "rail1 down, MTU 9000 (planned up, MTU 9000)"),
            ]
        );
        assert_eq!(statuses[2].last_run, Some(1_764_120_000));
        assert_eq!(statuses[2].action, "drain");
    }
}
