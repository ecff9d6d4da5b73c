//! Cluster-scope health checks on the controller: a systemd timer every
//! `monitoring.health.cluster_interval` runs a program that compares each FRR
//! switch's BGP sessions (read from its FRR exporter) with the cabling plan and writes
//! `toolkit_healthcheck_*` metrics (cadence `cluster`) for node exporter's textfile
//! collector, so Prometheus' `HealthCheckFailing` and `toolkit status` see them like
//! the nodes' own checks.
//!
//! Stage: render. Input: [`MonitoringModel`]. Output: resources appended to `out`. The
//! plan is a JSON data file; the program (`templates/monitoring/toolkit-cluster-checks.py`)
//! holds no cluster-specific text, so a changed fabric changes only the data file.
//!
//! Why from the controller and over HTTP: one request per switch to an exporter that is
//! already there, no SSH keys to switches on the controller; a session missing from
//! frr.conf has no exporter series at all, so only a comparison with the plan finds it.

use serde::Serialize;

use crate::model::monitoring::{FRR_EXPORTER_PORT, MonitoringModel, TEXTFILE_DIR};
use crate::render::common::{file, service};
use crate::resource::{Content, OnChange, Resource, ResourceId, Target};

/// The program.
pub const PROGRAM: &str = "/usr/local/sbin/toolkit-cluster-checks";
/// What it checks against.
pub const PLAN: &str = "/usr/local/etc/toolkit-cluster-checks.json";
const SERVICE: &str = "/etc/systemd/system/toolkit-cluster-checks.service";
const TIMER: &str = "/etc/systemd/system/toolkit-cluster-checks.timer";
/// The program's text (not a minijinja template: Python's `%` formats would read as tags).
const PROGRAM_TEXT: &str = include_str!("../../../templates/monitoring/toolkit-cluster-checks.py");

#[derive(Serialize)]
struct Plan<'a> {
    /// The host whose metrics carry the results (`node` label).
    node: &'a str,
    switches: Vec<Switch<'a>>,
}

#[derive(Serialize)]
struct Switch<'a> {
    name: &'a str,
    url: String,
    /// Links to each neighbour switch, by name (`peer_desc` in the exporter's series).
    peers: &'a std::collections::BTreeMap<String, u32>,
}

/// The plan file's text: every FRR switch, its exporter's URL and its planned sessions.
#[must_use]
pub fn plan(monitoring: &MonitoringModel) -> String {
    let switches = monitoring
        .frr_switches
        .iter()
        .zip(&monitoring.bgp_plan)
        .map(|(target, (_, peers))| {
            let host =
                if target.address.contains(':') { format!("[{}]", target.address) } else { target.address.clone() };
            Switch { name: &target.name, url: format!("http://{host}:{FRR_EXPORTER_PORT}/metrics"), peers }
        })
        .collect();
    let plan = Plan { node: &monitoring.cluster_checks_host, switches };
    // Plain data of strings and maps: serialization cannot fail.
    serde_json::to_string_pretty(&plan).unwrap_or_default() + "\n"
}

/// The timer, program, plan and unit on the controller; nothing without FRR switches.
pub fn render(monitoring: &MonitoringModel, out: &mut Vec<Resource>) {
    if monitoring.frr_switches.is_empty() {
        return;
    }
    let target = Target::node(&monitoring.cluster_checks_host);
    let interval = crate::blueprint::duration::parse(&monitoring.settings.health.cluster_interval)
        .map_or(600, |length| length.as_secs().max(5));
    let program = file(&target, PROGRAM, Content::new(PROGRAM_TEXT.to_owned()), 0o755);
    let plan = file(&target, PLAN, Content::new(plan(monitoring)), 0o644);
    let unit = format!(
        "# Rendered by toolkit: cluster-scope health checks (BGP sessions against the cabling plan).\n\
         [Unit]\nDescription=toolkit cluster-scope health checks\nAfter=network-online.target\n\n\
         [Service]\nType=oneshot\nExecStart=/usr/bin/python3 {PROGRAM} {PLAN} {TEXTFILE_DIR}\n"
    );
    // The first run one interval after the timer starts, not at once: a deploy that
    // (re)starts it has often just restarted FRR, whose sessions take seconds to come up,
    // and a failure would stand until the next run.
    let timer = format!(
        "# Rendered by toolkit: runs the cluster-scope health checks every cluster_interval.\n[Unit]\n\
         Description=toolkit cluster-scope health checks, every {interval} s\n\n[Timer]\nOnActiveSec={interval}s\n\
         OnUnitActiveSec={interval}s\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n"
    );
    let unit = file(&target, SERVICE, Content::new(unit), 0o644);
    let timer = file(&target, TIMER, Content::new(timer), 0o644);
    let watched = vec![program.id.clone(), plan.id.clone(), unit.id.clone(), timer.id.clone()];
    out.extend([program, plan, unit, timer]);
    out.push(service(&target, "toolkit-cluster-checks.timer", watched, OnChange::Restart).after([ResourceId::new(
        &target.name,
        "service",
        "prometheus-node-exporter",
    )]));
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;

    /// Runs the program on `plan` (exporters read from `file://` URLs of recorded
    /// answers); its metrics file's text, or `None` without python3.
    fn run(plan: &serde_json::Value) -> Option<String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let program = dir.path().join("cluster-checks");
        std::fs::write(&program, PROGRAM_TEXT).expect("write program");
        let plan_path = dir.path().join("plan.json");
        std::fs::write(&plan_path, plan.to_string()).expect("write plan");
        let output = Command::new("python3").arg(&program).arg(&plan_path).arg(dir.path()).output().ok()?;
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        Some(std::fs::read_to_string(dir.path().join("toolkit_health_cluster.prom")).expect("metrics written"))
    }

    fn recorded(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/monitoring").join(name);
        format!("file://{}", path.display())
    }

    #[test]
    fn sessions_are_counted_per_neighbour_against_the_plan() {
        let plan = serde_json::json!({
            "node": "head",
            "switches": [
                { "name": "spine0", "url": recorded("frr_exporter_1.1.4_spine0.prom"), "peers": { "leaf0": 1, "leaf1": 1 } },
                { "name": "spine1", "url": recorded("frr_exporter_1.1.4_spine0_leaf0_frr_stopped.prom"),
                  "peers": { "leaf0": 1, "leaf1": 1 } },
                { "name": "leaf0", "url": recorded("frr_exporter_1.1.4_leaf0_frr_stopped.prom"), "peers": { "spine0": 1 } },
                // Two links planned, one session configured: the missing one fails too.
                { "name": "spine2", "url": recorded("frr_exporter_1.1.4_spine0.prom"), "peers": { "leaf0": 2, "leaf1": 1 } },
                { "name": "spine3", "url": recorded("absent.prom"), "peers": { "leaf0": 1 } },
            ]
        });
        let Some(text) = run(&plan) else { return };
        let ok = |subject: &str| {
            text.lines()
                .find(|line| {
                    line.starts_with("toolkit_healthcheck_ok{") && line.contains(&format!("subject=\"{subject}\""))
                })
                .and_then(|line| line.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(ok("spine0").as_deref(), Some("1"), "{text}");
        for failing in ["spine1", "leaf0", "spine2", "spine3"] {
            assert_eq!(ok(failing).as_deref(), Some("0"), "{failing}: {text}");
        }
        for detail in [
            "# toolkit:detail fabric-bgp spine1 BGP sessions established to leaf0 0 of 1",
            "# toolkit:detail fabric-bgp leaf0 BGP sessions established to spine0 0 of 1",
            "# toolkit:detail fabric-bgp spine2 BGP sessions established to leaf0 1 of 2",
            "# toolkit:detail fabric-bgp spine3 FRR exporter at file://",
        ] {
            assert!(text.contains(detail), "`{detail}` missing:\n{text}");
        }
        assert!(text.contains(
            "toolkit_healthcheck_measurement{node=\"head\",check=\"fabric-bgp\",subject=\"spine0\",cadence=\"cluster\",action=\"alert\",measurement=\"sessions_established\"} 2"
        ));
        // The status reader understands the file as it does the nodes' own.
        let statuses = crate::health::status::parse(&text);
        let spine1 = statuses.iter().find(|status| status.subject == "spine1").expect("spine1");
        assert_eq!((spine1.verdict, spine1.cadence.as_str()), ("fail", "cluster"));
        assert_eq!(spine1.detail, "BGP sessions established to leaf0 0 of 1");
    }
}
