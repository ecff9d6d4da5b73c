//! The faulty-host report of a node sent to RMA, gathered from where each piece lives:
//! the BMC (serial, model, parts, firmware, event log), the node's health metrics files
//! (failing checks and their raw output), Slurm (the drain reason), Prometheus (health
//! history) and the repair service's record of the steps tried.
//!
//! Stage: ops. Input: the node, its BMC's [`BmcConfig`], sessions to the node and the
//! controller, Prometheus' URL, the time window. Output: a [`Bundle`]
//! (`report::rma` lays it out) and its files ([`write`]). [`gather`] is what `toolkit rma`
//! and the repair service call; each `from_*` reads one source and never fails the
//! whole report: a source that cannot be read is [`Evidence::Missing`] with why.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;

use crate::bmc::{BmcConfig, Redfish};
use crate::health::prometheus::{history, history_query};
use crate::report::rma::{Bundle, Checks, Events, Evidence, History};
use crate::transport::Executor;

/// How long one Prometheus range query may take.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(30);

/// The health metrics files of a node (both cadences), as `status` reads them.
const HEALTH_FILES: &str = "cat /var/lib/prometheus/node-exporter/toolkit_health_fast.prom \
    /var/lib/prometheus/node-exporter/toolkit_health_slow.prom 2>/dev/null; true";

/// What the report is about and where its sources are.
#[derive(Debug, Clone)]
pub struct Request {
    /// Cluster name.
    pub cluster: String,
    /// The node.
    pub node: String,
    /// Its BMC, when the inventory has one.
    pub bmc: Option<BmcConfig>,
    /// Prometheus' base URL (`http://head:9090`), when monitoring is deployed.
    pub prometheus: Option<String>,
    /// The window around the failure: BMC log entries and health history within it.
    pub from: Timestamp,
    /// End of the window.
    pub to: Timestamp,
    /// The repair steps, as the repair service recorded them.
    pub ladder: Evidence<Vec<serde_json::Value>>,
}

/// The BMC's evidence: hardware, firmware, event log within the window.
pub async fn from_bmc(
    config: Option<BmcConfig>,
    from: Timestamp,
    to: Timestamp,
) -> (Evidence<crate::bmc::inspect::Hardware>, Evidence<std::collections::BTreeMap<String, String>>, Evidence<Events>) {
    let Some(config) = config else {
        let why = "the inventory has no BMC for this node".to_owned();
        return (Evidence::Missing(why.clone()), Evidence::Missing(why.clone()), Evidence::Missing(why));
    };
    let client = match Redfish::connect(config).await {
        Ok(client) => client,
        Err(error) => {
            let why = error.to_string();
            return (Evidence::Missing(why.clone()), Evidence::Missing(why.clone()), Evidence::Missing(why));
        }
    };
    let system = match client.system().await {
        Ok(system) => system,
        Err(error) => {
            let why = error.to_string();
            let _ = client.close().await;
            return (Evidence::Missing(why.clone()), Evidence::Missing(why.clone()), Evidence::Missing(why));
        }
    };
    let hardware =
        client.inspect(&system).await.map_or_else(|error| Evidence::Missing(error.to_string()), Evidence::Read);
    let firmware =
        client.firmware(&system).await.map_or_else(|error| Evidence::Missing(error.to_string()), Evidence::Read);
    let events = match client.event_log(&system, from, to).await {
        Ok(log) => Evidence::Read(Events { from: from.to_string(), to: to.to_string(), log }),
        Err(error) => Evidence::Missing(error.to_string()),
    };
    // A session left open holds one of the BMC's few session slots until it times out.
    let _ = client.close().await;
    (hardware, firmware, events)
}

/// The checks failing on the node's last runs, with the lines of its metrics files about
/// them (measurements, details).
pub async fn from_node(session: &impl Executor) -> Evidence<Checks> {
    let argv = ["sh".to_owned(), "-c".to_owned(), HEALTH_FILES.to_owned()];
    match session.exec(&argv).await {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout);
            if text.trim().is_empty() {
                return Evidence::Missing("the node has no health metrics (its checks have not run)".to_owned());
            }
            Evidence::Read(checks_of(&text))
        }
        Err(error) => Evidence::Missing(error.to_string()),
    }
}

/// The failing checks of a metrics file's text and its lines about them.
#[must_use]
pub fn checks_of(text: &str) -> Checks {
    let failing: Vec<_> =
        crate::health::status::parse(text).into_iter().filter(|status| status.verdict == "fail").collect();
    let raw = text
        .lines()
        .filter(|line| {
            failing.iter().any(|status| {
                line.contains(&format!("check=\"{}\"", status.check))
                    || line.starts_with(&format!("# toolkit:detail {} ", status.check))
            })
        })
        .collect::<Vec<_>>()
        .join("\n");
    Checks { failing, raw }
}

/// The node's drain reason, from Slurm on the controller.
pub async fn from_slurm(controller: &impl Executor, node: &str) -> Evidence<String> {
    use crate::deploy::scheduler::{Scheduler as _, Slurm};
    match Slurm::new(controller).nodes().await {
        Ok(Some(nodes)) => match nodes.get(node).and_then(|status| status.reason.clone()) {
            Some(reason) => Evidence::Read(reason),
            None => Evidence::Missing(format!("Slurm has no drain reason for `{node}`")),
        },
        Ok(None) => Evidence::Missing("Slurm does not answer".to_owned()),
        Err(error) => Evidence::Missing(error.to_string()),
    }
}

/// The node's health history over the window, one step per 1/120 of it (at least 30 s).
pub async fn from_prometheus(url: &str, node: &str, from: Timestamp, to: Timestamp) -> Evidence<History> {
    let span = to.as_second().saturating_sub(from.as_second()).max(0);
    let step = u64::try_from(span / 120).unwrap_or(0).max(30);
    let query = history_query(node, step);
    let client = match crate::http::client_builder(PROMETHEUS_TIMEOUT).build() {
        Ok(client) => client,
        Err(error) => return Evidence::Missing(error.to_string()),
    };
    let endpoint = format!("{}/api/v1/query_range", url.trim_end_matches('/'));
    let parameters = [
        ("query", query),
        ("start", from.as_second().to_string()),
        ("end", to.as_second().to_string()),
        ("step", step.to_string()),
    ];
    let url = match reqwest::Url::parse_with_params(&endpoint, &parameters) {
        Ok(url) => url,
        Err(error) => return Evidence::Missing(format!("`{endpoint}`: {error}")),
    };
    let body = match client.get(url).send().await {
        Ok(reply) => match reply.text().await {
            Ok(body) => body,
            Err(error) => return Evidence::Missing(format!("`{endpoint}`: {error}")),
        },
        Err(error) => return Evidence::Missing(format!("`{endpoint}`: {error}")),
    };
    match crate::parsers::prometheus::parse_range(&body) {
        Ok(matrix) => Evidence::Read(History {
            from: from.to_string(),
            to: to.to_string(),
            step_seconds: step,
            checks: history(&matrix, step),
        }),
        Err(error) => Evidence::Missing(format!("`{endpoint}`: {error}")),
    }
}

/// Gathers the whole report: the BMC, the node, Slurm and Prometheus are read side by
/// side. `node` and `controller` are sessions to the node and to the Slurm controller,
/// when they could be opened (else why not).
pub async fn gather<N: Executor, C: Executor>(
    request: Request,
    node: Result<&N, String>,
    controller: Result<&C, String>,
) -> Bundle {
    let bmc = from_bmc(request.bmc.clone(), request.from, request.to);
    let checks = async {
        match node {
            Ok(session) => from_node(session).await,
            Err(why) => Evidence::Missing(why),
        }
    };
    let reason = async {
        match controller {
            Ok(session) => from_slurm(session, &request.node).await,
            Err(why) => Evidence::Missing(why),
        }
    };
    let history = async {
        match &request.prometheus {
            Some(url) => from_prometheus(url, &request.node, request.from, request.to).await,
            None => Evidence::Missing("the blueprint deploys no monitoring".to_owned()),
        }
    };
    let ((hardware, firmware, events), checks, reason, history) = futures::join!(bmc, checks, reason, history);
    Bundle {
        cluster: request.cluster,
        node: request.node,
        generated: Timestamp::now().to_string(),
        reason,
        hardware,
        firmware,
        checks,
        events,
        history,
        ladder: request.ladder,
    }
}

/// Writes `rma-<node>.json` and `rma-<node>.md` into `dir` (created if needed), each
/// atomically; returns their paths.
///
/// # Errors
/// The directory or a file cannot be written.
pub fn write(bundle: &Bundle, dir: &Path) -> std::io::Result<[PathBuf; 2]> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(bundle).map_err(std::io::Error::other)?;
    let paths = [dir.join(format!("rma-{}.json", bundle.node)), dir.join(format!("rma-{}.md", bundle.node))];
    crate::plan::state::write_atomic(&paths[0], format!("{json}\n").as_bytes())?;
    crate::plan::state::write_atomic(&paths[1], crate::report::rma::markdown(bundle).as_bytes())?;
    Ok(paths)
}

/// The repair steps of `node` in the repair service's state file: the `steps` of
/// `nodes.<node>` (or of the document itself, or the document when it is a list).
///
/// # Errors
/// The file cannot be read or is not JSON.
pub fn ladder_from(path: &Path, node: &str) -> Result<Vec<serde_json::Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("`{}`: {error}", path.display()))?;
    let document: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| format!("`{}`: {error}", path.display()))?;
    let steps =
        document.pointer(&format!("/nodes/{node}/steps")).or_else(|| document.get("steps")).unwrap_or(&document);
    steps.as_array().cloned().ok_or_else(|| format!("`{}` has no list of steps for `{node}`", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_output_is_the_failing_checks_lines() {
        let text = r#"toolkit_healthcheck_ok{node="node02",check="rail-links",subject="node02",cadence="fast",action="drain"} 0
toolkit_healthcheck_ok{node="node02",check="mtu",subject="node02",cadence="fast",action="alert"} 1
toolkit_healthcheck_measurement{node="node02",check="rail-links",subject="node02",measurement="rails_up"} 1
# toolkit:detail rail-links node02 rail1 down, MTU 9000 (planned up, MTU 9000)
"#;
        let checks = checks_of(text);
        assert_eq!(checks.failing.len(), 1);
        assert_eq!(checks.failing[0].detail, "rail1 down, MTU 9000 (planned up, MTU 9000)");
        assert_eq!(checks.raw.lines().count(), 3, "{}", checks.raw);
        assert!(!checks.raw.contains("check=\"mtu\""));
    }

    #[test]
    fn the_ladder_is_read_from_the_nodes_entry_or_the_document() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("repair.json");
        std::fs::write(&path, r#"{"nodes":{"node03":{"steps":[{"step":"reboot"},{"step":"power-cycle"}]}}}"#)
            .expect("write");
        assert_eq!(ladder_from(&path, "node03").expect("steps").len(), 2);
        assert!(ladder_from(&path, "node04").expect_err("none").contains("no list of steps"));
        std::fs::write(&path, r#"[{"step":"reboot"}]"#).expect("write");
        assert_eq!(ladder_from(&path, "node04").expect("steps").len(), 1);
    }
}
