//! Cabling against the plan, continuously: on every FRR switch, a systemd timer every
//! `monitoring.health.cluster_interval` runs a program that compares lldpd's
//! neighbours with the switch's share of the cabling plan and writes
//! `toolkit_healthcheck_*{check="cabling", subject=<port>}` (cadence `cluster`,
//! action `alert`) for the switch's own node exporter, so Prometheus'
//! `HealthCheckFailing` and `toolkit status` see a miscabled port like a failing node
//! check.
//!
//! Stage: render. Input: the [`Model`], the inventory (port prefixes, rail MACs) and
//! the [`MonitoringModel`]. Output: resources appended to `out`. The plan is a JSON
//! data file per switch ([`LldpPlan::switch_plans`], the same expectations and naming
//! rule `toolkit validate --only cabling` uses); the program
//! (`templates/monitoring/toolkit-cabling-check.py`) holds nothing cluster-specific.
//!
//! Why on the switch and not on the controller: the LLDP table is on the switch, and
//! reading it from elsewhere needs SSH keys to every switch on the controller (which
//! it does not have) or an LLDP exporter; the switch already runs lldpd, python3 (FRR's
//! tools) and node exporter, so each switch checks its own ports and the cost is spread
//! over the fabric. Why alert and not drain: a switch cannot drain a node (it has no
//! Slurm credentials, and a wrong cable may be the neighbour's fault or a spine's), so
//! the action is always `alert`; the operator follows the detail, and `toolkit
//! validate --only cabling` gives the cable-level work order.

use crate::inventory::Inventory;
use crate::model::Model;
use crate::model::monitoring::{MonitoringModel, TEXTFILE_DIR};
use crate::render::Renderer;
use crate::render::common::{file, service};
use crate::resource::{Content, OnChange, Resource, ResourceId, Target};
use crate::topology::lldp::{self, LldpPlan};

/// The program.
pub const PROGRAM: &str = "/usr/local/sbin/toolkit-cabling-check";
/// The switch's share of the cabling plan.
pub const PLAN: &str = "/usr/local/etc/toolkit-cabling.json";
/// Since when each port has lacked its neighbour (tmpfs: a reboot restarts the grace).
pub const STATE: &str = "/run/toolkit-cabling-check.json";
const SERVICE: &str = "/etc/systemd/system/toolkit-cabling-check.service";
const TIMER: &str = "/etc/systemd/system/toolkit-cabling-check.timer";
/// The program's text (not a minijinja template: Python's `%` formats would read as tags).
pub const PROGRAM_TEXT: &str = include_str!("../../../templates/monitoring/toolkit-cabling-check.py");

/// The timer, program, plan and unit on every FRR switch with planned cables.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    monitoring: &MonitoringModel,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) {
    if monitoring.frr_switches.is_empty() {
        return;
    }
    let (prefixes, macs) =
        inventory.map(|inventory| (lldp::port_prefixes(inventory), lldp::rail_macs(inventory))).unwrap_or_default();
    let lldp_plan = LldpPlan::new(model, &prefixes, &macs);
    let shares = lldp_plan.shares();
    let interval = crate::blueprint::duration::parse(&monitoring.settings.health.cluster_interval)
        .map_or(600, |length| length.as_secs().max(5));
    let unit = Content::new(format!(
        "# Rendered by toolkit: this switch's cabling against the plan (LLDP neighbours).\n\
         [Unit]\nDescription=toolkit cabling check\nAfter=lldpd.service\n\n\
         [Service]\nType=oneshot\nExecStart=/usr/bin/python3 {PROGRAM} {PLAN} {TEXTFILE_DIR} {STATE}\n"
    ));
    // The first run one interval after the timer starts: lldpd (re)started by the same
    // deploy has an empty table for its first announce interval.
    let timer = Content::new(format!(
        "# Rendered by toolkit: checks the cabling every cluster_interval.\n[Unit]\n\
         Description=toolkit cabling check, every {interval} s\n\n[Timer]\nOnActiveSec={interval}s\n\
         OnUnitActiveSec={interval}s\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n"
    ));
    // One copy of the texts every switch shares (content is reference-counted).
    let program_text = Content::new(PROGRAM_TEXT.to_owned());
    for switch in &monitoring.frr_switches {
        let Some(switch_plan) = shares.get(&switch.name) else { continue };
        let target = Target::switch(&switch.name);
        let program = file(&target, PROGRAM, program_text.clone(), 0o755);
        // Each switch's own (~16 KB): only its hash when the plan keeps no texts.
        let plan = file(&target, PLAN, renderer.json_content(&switch_plan), 0o644);
        let unit = file(&target, SERVICE, unit.clone(), 0o644);
        let timer = file(&target, TIMER, timer.clone(), 0o644);
        let watched = vec![program.id.clone(), plan.id.clone(), unit.id.clone(), timer.id.clone()];
        out.extend([program, plan, unit, timer]);
        out.push(service(&target, "toolkit-cabling-check.timer", watched, OnChange::Restart).after([
            ResourceId::new(&target.name, "service", "prometheus-node-exporter"),
            ResourceId::new(&target.name, "service", "lldpd"),
        ]));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    use super::*;
    use crate::health::status::{self, CheckStatus};
    use crate::topology::lldp::{End, Neighbor};

    fn lab_plan() -> LldpPlan {
        let loaded = crate::blueprint::load(Path::new("blueprints/lab.yaml")).expect("loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        LldpPlan::new(&model, &BTreeMap::new(), &BTreeMap::new())
    }

    fn recorded(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/monitoring").join(name)
    }

    /// The program run as the timer runs it, with `lldpcli` answering `lldpcli` (a
    /// shell command) and `state` as the state file's text; the metrics file's checks,
    /// or `None` without python3.
    fn run(plan: &serde_json::Value, lldpcli: &str, state: Option<&str>) -> Option<(Vec<CheckStatus>, String)> {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let fake = bin.join("lldpcli");
        std::fs::write(&fake, format!("#!/bin/sh\n{lldpcli}\n")).expect("write lldpcli");
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let program = dir.path().join("cabling-check");
        std::fs::write(&program, PROGRAM_TEXT).expect("write program");
        let plan_path = dir.path().join("plan.json");
        std::fs::write(&plan_path, plan.to_string()).expect("write plan");
        let state_path = dir.path().join("state.json");
        if let Some(state) = state {
            std::fs::write(&state_path, state).expect("write state");
        }
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let output = Command::new("python3")
            .arg(&program)
            .arg(&plan_path)
            .arg(dir.path())
            .arg(&state_path)
            .env("PATH", path)
            .output()
            .ok()?;
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let text = std::fs::read_to_string(dir.path().join("toolkit_health_cluster.prom")).expect("metrics written");
        Some((status::parse(&text), text))
    }

    fn plan_of(switch: &str, grace: u64) -> serde_json::Value {
        let plans = lab_plan();
        let mut value = serde_json::to_value(&plans.switch_plans()[switch]).expect("plan is JSON");
        value["grace"] = grace.into();
        value
    }

    fn verdicts(statuses: &[CheckStatus]) -> Vec<String> {
        statuses
            .iter()
            .map(|status| {
                let detail = if status.detail.is_empty() { String::new() } else { format!(": {}", status.detail) };
                format!("{} {} {}{detail}", status.subject, status.verdict, status.node)
            })
            .collect()
    }

    #[test]
    fn the_lab_switches_as_cabled_pass_every_port() {
        for (switch, ports) in [("leaf0", 5), ("spine0", 2)] {
            let answer = format!("cat '{}'", recorded(&format!("lldpcli_1.0.16_json0_{switch}.json")).display());
            let Some((statuses, text)) = run(&plan_of(switch, 60), &answer, None) else { return };
            assert_eq!(statuses.len(), ports, "{text}");
            for status in &statuses {
                assert_eq!(
                    (status.verdict, status.check.as_str(), status.cadence.as_str(), status.action.as_str()),
                    ("pass", "cabling", "cluster", "alert"),
                    "{text}"
                );
                assert_eq!(status.node, switch);
            }
            assert!(!text.contains("# toolkit:detail"), "{text}");
        }
    }

    #[test]
    fn a_renamed_peer_and_a_silent_one_fail_after_the_grace() {
        let answer =
            format!("cat '{}'", recorded("lldpcli_1.0.16_json0_leaf0_wrongname_node03_stopped.json").display());
        // node02 renamed 3 s before the recording: within a 60 s grace, a warning.
        let Some((statuses, _)) = run(&plan_of("leaf0", 60), &answer, None) else { return };
        assert_eq!(
            verdicts(&statuses),
            [
                "swp1 pass leaf0",
                "swp2 warn leaf0: swp2: expected node02 rail0, seen on hosts wrongname rail0 (changed 3 s ago, within the 60 s grace)",
                "swp26 pass leaf0",
                "swp3 warn leaf0: swp3: expected node03 rail0, seen on hosts wrongname rail0 (changed 3 s ago, within the 60 s grace)",
                "swp4 pass leaf0",
            ]
        );
        let Some((statuses, text)) = run(&plan_of("leaf0", 2), &answer, None) else { return };
        assert_eq!(
            verdicts(&statuses),
            [
                "swp1 pass leaf0",
                "swp2 fail leaf0: swp2: expected node02 rail0, seen on hosts wrongname rail0",
                "swp26 pass leaf0",
                "swp3 fail leaf0: swp3: expected node03 rail0, seen on hosts wrongname rail0",
                "swp4 pass leaf0",
            ]
        );
        assert!(text.contains(
            "toolkit_healthcheck_ok{node=\"leaf0\",check=\"cabling\",subject=\"swp2\",cadence=\"cluster\",action=\"alert\"} 0"
        ));
    }

    #[test]
    fn a_port_without_its_neighbour_fails_once_it_has_been_missing_for_the_grace() {
        // spine0's plan against leaf0's table: nothing on swp1 or swp2.
        let answer = format!("cat '{}'", recorded("lldpcli_1.0.16_json0_leaf0.json").display());
        let Some((statuses, _)) = run(&plan_of("spine0", 60), &answer, None) else { return };
        assert_eq!(
            verdicts(&statuses),
            [
                "swp1 warn spine0: swp1: expected leaf0 swp26, no neighbour (for 0 s, within the 60 s grace)",
                "swp2 warn spine0: swp2: expected leaf1 swp26, no neighbour (for 0 s, within the 60 s grace)",
            ]
        );
        let long_ago = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
            .saturating_sub(120);
        let state = format!("{{\"swp1\": {long_ago}}}");
        let Some((statuses, _)) = run(&plan_of("spine0", 60), &answer, Some(&state)) else { return };
        assert_eq!(statuses[0].verdict, "fail");
        assert_eq!(statuses[0].detail, "swp1: expected leaf0 swp26, no neighbour");
        assert_eq!(statuses[1].verdict, "warn");
        // The state file forgets a port whose neighbour is back: the next loss starts
        // a new grace.
        let answer = format!("cat '{}'", recorded("lldpcli_1.0.16_json0_spine0.json").display());
        let Some((statuses, _)) = run(&plan_of("spine0", 60), &answer, Some(&state)) else { return };
        assert!(statuses.iter().all(|status| status.verdict == "pass"), "{statuses:?}");
    }

    #[test]
    fn lldpd_not_answering_fails_every_port() {
        let Some((statuses, _)) = run(&plan_of("spine0", 60), "echo 'unable to connect to socket' >&2; exit 1", None)
        else {
            return;
        };
        assert_eq!(statuses.len(), 2);
        assert!(statuses.iter().all(|status| status.verdict == "fail"), "{statuses:?}");
        assert!(statuses[0].detail.starts_with("swp1: lldpd's neighbours unreadable: "), "{}", statuses[0].detail);
    }

    /// The program names neighbours by the validator's rule: both run on the recorded
    /// neighbours and on variations of them (MAC port ids in any case, names with and
    /// without a domain, unknown devices, no system name, a port known only by its id).
    #[test]
    fn the_program_names_neighbours_as_the_validator_does() {
        let Ok(model) = crate::blueprint::load(Path::new("blueprints/lab.yaml")) else { panic!("loads") };
        let model = crate::model::expand(&model.blueprint).expect("expands");
        let macs = [("node02".to_owned(), [(0, "02:42:0a:b6:00:03".to_owned())].into())].into();
        let lldp_plan = LldpPlan::new(&model, &BTreeMap::new(), &macs);
        let plans = lldp_plan.switch_plans();
        let leaf0 = &plans["leaf0"];
        let text = std::fs::read_to_string(recorded("lldpcli_1.0.16_json0_leaf0_wrongname_node03_stopped.json"))
            .expect("fixture");
        let parsed = crate::parsers::lldpctl::parse(&text).expect("parses");
        let mut neighbors: Vec<Neighbor> = parsed
            .neighbors
            .iter()
            .map(|n| Neighbor {
                local_interface: n.local_interface.clone(),
                system_name: n.system_name.clone(),
                chassis_id: n.chassis_id.clone(),
                port_id: n.port_id.clone(),
                port_description: n.port_description.clone(),
            })
            .collect();
        let variant =
            |system: Option<&str>, chassis: Option<&str>, port_id: Option<&str>, descr: Option<&str>| Neighbor {
                local_interface: "hosts".to_owned(),
                system_name: system.map(str::to_owned),
                chassis_id: chassis.map(str::to_owned),
                port_id: port_id.map(str::to_owned),
                port_description: descr.map(str::to_owned),
            };
        neighbors.extend([
            variant(Some("whatever"), Some("aa"), Some("02:42:0A:B6:00:03"), None),
            variant(Some("node01"), None, Some("rail0"), Some("eth9")),
            variant(Some("node01.example.com"), None, None, Some("rail1")),
            variant(Some("leaf1.lab.internal"), None, Some("swp26"), Some("swp26")),
            variant(None, Some("02:42:0a:b6:00:99"), Some("x"), None),
            variant(None, None, None, None),
            variant(Some("spine0"), None, Some("swp1"), Some("uplink to leaf0")),
        ]);
        let inputs: Vec<serde_json::Value> = neighbors
            .iter()
            .map(|n| serde_json::json!([n.system_name, n.chassis_id, n.port_id, n.port_description]))
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let module = dir.path().join("cabling_check.py");
        std::fs::write(&module, PROGRAM_TEXT).expect("write");
        let script = "import importlib.util, json, sys\n\
            spec = importlib.util.spec_from_file_location('check', sys.argv[1])\n\
            check = importlib.util.module_from_spec(spec); spec.loader.exec_module(check)\n\
            plan = json.loads(sys.argv[2])\n\
            print(json.dumps([list(check.remote_end(plan, *args)) for args in json.loads(sys.argv[3])]))";
        let Ok(output) = Command::new("python3")
            .args(["-c", script])
            .arg(&module)
            .arg(serde_json::to_string(leaf0).expect("plain data"))
            .arg(serde_json::Value::from(inputs).to_string())
            .output()
        else {
            return;
        };
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let named: Vec<(String, String)> = serde_json::from_slice(&output.stdout).expect("JSON");
        let expected: Vec<&End> = leaf0.ports.iter().map(|port| port.expected).collect();
        for (neighbor, (device, port)) in neighbors.iter().zip(named) {
            let by_validator = lldp_plan.remote_end(neighbor);
            let by_program = End::new(&device, &port);
            if leaf0.devices.contains_key(by_validator.device.as_str()) || by_validator == by_program {
                assert_eq!(by_program, by_validator, "{neighbor:?}");
            } else {
                // A device this switch has no cable to is named by its full system
                // name on the switch: either way it is not what any port expects.
                assert!(!expected.contains(&&by_program) && !expected.contains(&&by_validator), "{neighbor:?}");
            }
        }
    }
}
