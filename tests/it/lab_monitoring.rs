//! Monitoring on a running lab: after `toolkit deploy`, Prometheus on the head
//! scrapes every host and switch (node exporter) and every switch's FRR exporter,
//! has toolkit's rules loaded and the Slurm view's `toolkit_*` metrics; stopping FRR
//! on a leaf fires the BGP alert naming the leaf; a node removed from the blueprint
//! is no longer a target after the next deploy; each switch's cabling check fails the
//! port of a node that announces another name over LLDP. node01 has a simulated BMC (OpenIPMI's
//! `ipmi_sim`) that the head's IPMI exporter reads; stopped, it fires `BmcUnreachable`. Prometheus' HTTP API is read from
//! inside the head (python3 is in the image), as an operator there would.
//!
//! Runs under its own cluster name and subnets (`lab-mon`, 10.161.0.0/24, rail pool
//! 10.162.0.0/16), with a 5 s scrape interval and alerts after 10 s so it is quick.
//! `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lab::{lab_or_skip, text, toolkit};
use super::lab_e2e::{Teardown, assert_success, edited, exec_ok_in, fresh_lab};

const CLUSTER: &str = "lab-mon";
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-mon\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.161.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.162.0.0/16"),
    (
        "  scrape_interval: 15s\n",
        "  scrape_interval: 5s\n  bmc_scrape_interval: 10s\n  alert_after: 10s\n  health: { cluster_interval: 5s }\n",
    ),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.162 = `0a:a2`).
/// node01's BMC is the simulated one the test starts on node01 ([`start_bmc`]): IPMI
/// 1.5 at node01's management address, its user and password in files.
const INVENTORY_EDITS: &[(&str, &str)] = &[
    ("address: 10.10.0.", "address: 10.161.0."),
    (":0a:c8:", ":0a:a2:"),
    (
        "state_file:",
        "bmcs:\n  node01:\n    endpoint: https://10.161.0.11\n    username: { file: bmc-user }\n    \
         password: { file: bmc-password }\n    ipmi: { driver: LAN }\nstate_file:",
    ),
];
/// The simulated BMC's credentials (`tests/fixtures/monitoring/ipmi_sim/lan.conf`).
const BMC_USER: &str = "toolkit-mon";
const BMC_PASSWORD: &str = "lab-bmc-pw-7f3a";
const BMC_DIR: &str = "/var/lib/lab-bmc";
const HOSTS: [&str; 8] = ["head", "leaf0", "leaf1", "node01", "node02", "node03", "node04", "spine0"];
const SWITCHES: [&str; 3] = ["leaf0", "leaf1", "spine0"];

/// `GET http://localhost:9090<path>` on the head, as JSON `data`.
fn api(dir: &Path, path: &str) -> Value {
    api_in(dir, CLUSTER, path)
}

/// `GET http://localhost:9090<path>` on `cluster`'s head, as JSON `data`.
pub(crate) fn api_in(dir: &Path, cluster: &str, path: &str) -> Value {
    let script = "import sys, urllib.request; print(urllib.request.urlopen('http://localhost:9090' + sys.argv[1], timeout=10).read().decode())";
    let body = exec_ok_in(dir, cluster, "head", &["python3", "-c", script, path]);
    let value: Value = serde_json::from_str(&body).unwrap_or_else(|error| panic!("{path}: {error}: {body}"));
    assert_eq!(value["status"], "success", "{path}: {body}");
    value["data"].clone()
}

/// Waits up to `limit` for `probe` to return `Ok`; the last observation is in the panic.
pub(crate) fn wait_for<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match probe() {
            Ok(found) => return found,
            Err(last) => assert!(Instant::now() < deadline, "{what}: gave up after {limit:?}; last seen:\n{last}"),
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Active targets as (job, instance, health).
fn targets(dir: &Path) -> Vec<(String, String, String)> {
    let data = api(dir, "/api/v1/targets?state=active");
    let mut list: Vec<(String, String, String)> = data["activeTargets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|target| {
            let field = |name: &str| target["labels"][name].as_str().unwrap_or_default().to_owned();
            (field("job"), field("instance"), target["health"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    list.sort();
    list
}

fn instances(targets: &[(String, String, String)], job: &str) -> Vec<String> {
    targets.iter().filter(|(j, _, _)| j == job).map(|(_, instance, _)| instance.clone()).collect()
}

/// The cluster-scope checks' metrics file on the controller.
const CLUSTER_METRICS: &str = "/var/lib/prometheus/node-exporter/toolkit_health_cluster.prom";

/// Wall and CPU time of one cluster-scope cycle on the head (3 switches), run as the
/// timer runs it.
fn measure_cluster_checks(dir: &Path) {
    let script = "TIMEFORMAT='%R %U %S'; time /usr/bin/python3 /usr/local/sbin/toolkit-cluster-checks \
        /usr/local/etc/toolkit-cluster-checks.json /var/lib/prometheus/node-exporter";
    for _ in 0..3 {
        let output = super::lab_e2e::exec_in(dir, CLUSTER, "head", &["bash", "-c", script]);
        eprintln!(
            "MEASURE cluster-scope cycle on head (3 switches, one down): real user sys {}",
            text(&output.stderr).trim()
        );
    }
}

/// Starts OpenIPMI's `ipmi_sim` on node01 as a transient unit `lab-bmc`: an IPMI-over-LAN
/// BMC on UDP 623 of node01's addresses, with the sensors of `emu` (a file of
/// `tests/fixtures/monitoring/ipmi_sim/`).
fn start_bmc(dir: &Path, emu: &str) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/monitoring/ipmi_sim");
    for name in ["lan.conf", "bmc.sdrs", emu] {
        let text = std::fs::read_to_string(fixtures.join(name)).expect("ipmi_sim fixture");
        // The text goes in as an argument: `sh -c 'printf %s "$1" > file' sh TEXT`.
        let script = format!("mkdir -p {BMC_DIR} && printf %s \"$1\" > {BMC_DIR}/{name}");
        exec_ok_in(dir, CLUSTER, "node01", &["sh", "-c", &script, "sh", &text]);
    }
    let state = format!("{BMC_DIR}/state/ipmi_sim/lab-bmc");
    let script = format!(
        "mkdir -p {state} && sdrcomp -o {state}/sdr.20.main {BMC_DIR}/bmc.sdrs && \
         (systemctl reset-failed lab-bmc 2>/dev/null; true) && \
         systemd-run --unit=lab-bmc ipmi_sim -n -c {BMC_DIR}/lan.conf -f {BMC_DIR}/{emu} -s {BMC_DIR}/state"
    );
    exec_ok_in(dir, CLUSTER, "node01", &["sh", "-c", &script]);
}

/// The alerts firing now, as (alertname, instance, labels).
fn firing(dir: &Path) -> Vec<(String, String, Value)> {
    let data = api(dir, "/api/v1/alerts");
    data["alerts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|alert| alert["state"] == "firing")
        .map(|alert| {
            let label = |name: &str| alert["labels"][name].as_str().unwrap_or_default().to_owned();
            (label("alertname"), label("instance"), alert["labels"].clone())
        })
        .collect()
}

/// The BMC scraped through the IPMI exporter on the head: its sensors are in
/// Prometheus, its credentials in no plan, log or state; stopped, it fires
/// `BmcUnreachable`; back with a hot inlet and a failed power supply, the sensor alerts.
fn bmc_is_watched(dir: &Path, deploy_log: &str) {
    let query = "/api/v1/query?query=ipmi_temperature_celsius%7Bjob%3D%22ipmi%22%7D";
    let sample = wait_for(Duration::from_mins(1), "node01's BMC temperature in Prometheus", || {
        let data = api(dir, query);
        let result = data["result"].as_array().cloned().unwrap_or_default();
        result.first().filter(|s| s["metric"]["instance"] == "node01").cloned().ok_or_else(|| format!("{data}"))
    });
    assert_eq!(sample["metric"]["bmc"], "10.161.0.11", "{sample}");
    assert_eq!(sample["value"][1], "40", "{sample}");
    for _ in 0..3 {
        let exporter = api(dir, "/api/v1/query?query=ipmi_scrape_duration_seconds");
        let scrape = api(dir, "/api/v1/query?query=scrape_duration_seconds%7Bjob%3D%22ipmi%22%7D");
        eprintln!(
            "MEASURE ipmi scrape of node01's BMC (ipmi_sim, LAN, 3 collectors): exporter {} s, Prometheus scrape {} s",
            exporter["result"][0]["value"][1], scrape["result"][0]["value"][1]
        );
        std::thread::sleep(Duration::from_secs(10));
    }
    // The credentials are only in the exporter's file, which only `prometheus` reads.
    let mode = exec_ok_in(dir, CLUSTER, "head", &["stat", "-c", "%a %U", "/etc/prometheus/toolkit-ipmi.yml"]);
    assert_eq!(mode.trim(), "600 prometheus");
    let plan = toolkit(dir, &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    let state = std::fs::read_to_string(dir.join(".toolkit/lab/state.json")).expect("state file");
    for (what, text) in [
        ("deploy", deploy_log.to_owned()),
        ("plan", format!("{}{}", text(&plan.stdout), text(&plan.stderr))),
        ("state", state),
    ] {
        assert!(!text.contains(BMC_PASSWORD), "the BMC password is in the {what}");
    }

    exec_ok_in(dir, CLUSTER, "node01", &["systemctl", "stop", "lab-bmc"]);
    let stopped = Instant::now();
    let alert = wait_for(Duration::from_mins(2), "BmcUnreachable for node01", || {
        let found = firing(dir);
        found
            .iter()
            .find(|(name, instance, _)| name == "BmcUnreachable" && instance == "node01")
            .map(|(_, _, labels)| labels.clone())
            .ok_or_else(|| format!("{found:#?}"))
    });
    eprintln!(
        "MEASURE BmcUnreachable fired {:.0?} after the BMC stopped (10 s scrapes, alert after 10 s)",
        stopped.elapsed()
    );
    assert_eq!(alert["bmc"], "10.161.0.11", "{alert}");

    start_bmc(dir, "bmc-failing.emu");
    let alerts = wait_for(Duration::from_mins(2), "the BMC's sensor alerts for node01", || {
        let found = firing(dir);
        let names: Vec<&str> =
            found.iter().filter(|(_, instance, _)| instance == "node01").map(|(name, _, _)| name.as_str()).collect();
        let wanted = names.contains(&"BmcTemperatureCritical") && names.contains(&"BmcPowerSupplyCritical");
        if wanted && !names.contains(&"BmcUnreachable") { Ok(found) } else { Err(format!("{found:#?}")) }
    });
    eprintln!("BMC alerts: {alerts:?}");
}

/// `toolkit_healthcheck_ok{check="cabling"}` failing now, as (switch, port).
fn cabling_failing(dir: &Path) -> Vec<(String, String)> {
    let data = api(dir, "/api/v1/query?query=toolkit_healthcheck_ok%7Bcheck%3D%22cabling%22%7D%20%3D%3D%200");
    let mut failing = data["result"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|sample| {
            let label = |name: &str| sample["metric"][name].as_str().unwrap_or_default().to_owned();
            (label("node"), label("subject"))
        })
        .collect::<Vec<_>>();
    failing.sort();
    failing
}

/// The switches' own cabling check (a timer every `cluster_interval`, 5 s here): every
/// planned port passes as deployed; node02 announcing itself as `wrongname` over LLDP
/// fails leaf0's `swp2` (node02's rail-0 port) in Prometheus once the 60 s LLDP grace
/// is over, fires `HealthCheckFailing` naming the port, shows in `toolkit status`; its
/// own name back, the port passes again.
fn cabling_is_checked_on_the_switches(dir: &Path) {
    let ports = wait_for(Duration::from_mins(1), "every switch port's cabling check in Prometheus", || {
        let data = api(dir, "/api/v1/query?query=toolkit_healthcheck_ok%7Bcheck%3D%22cabling%22%7D");
        let result = data["result"].as_array().cloned().unwrap_or_default();
        // leaf0 and leaf1: 4 node ports and an uplink each; spine0: 2 downlinks.
        let passing = result.iter().filter(|sample| sample["value"][1] == "1").count();
        if result.len() == 12 && passing == 12 { Ok(result.len()) } else { Err(format!("{data:#}")) }
    });
    eprintln!("cabling checks passing on {ports} switch ports");
    let script = "TIMEFORMAT='%R %U %S'; time /usr/bin/python3 /usr/local/sbin/toolkit-cabling-check \
        /usr/local/etc/toolkit-cabling.json /var/lib/prometheus/node-exporter /run/toolkit-cabling-check.json";
    for _ in 0..3 {
        let output = super::lab_e2e::exec_in(dir, CLUSTER, "leaf0", &["bash", "-c", script]);
        eprintln!("MEASURE cabling check on leaf0 (5 ports): real user sys {}", text(&output.stderr).trim());
    }

    exec_ok_in(dir, CLUSTER, "node02", &["sh", "-c", "lldpcli configure system hostname wrongname && lldpcli update"]);
    let renamed = Instant::now();
    // Each switch's timer runs on its own clock, so leaf1 may fail a few seconds after leaf0.
    let failing = wait_for(Duration::from_mins(3), "leaf0's and leaf1's cabling checks failing on swp2", || {
        let failing = cabling_failing(dir);
        let both = ["leaf0", "leaf1"].iter().all(|leaf| failing.contains(&((*leaf).to_owned(), "swp2".to_owned())));
        if both { Ok(failing) } else { Err(format!("{failing:?}")) }
    });
    eprintln!(
        "MEASURE cabling check failing {:.0?} after node02 renamed itself (60 s grace, 5 s interval): {failing:?}",
        renamed.elapsed()
    );
    // Only node02's ports: rail 0 on leaf0, rail 1 on leaf1.
    assert_eq!(failing, [("leaf0".to_owned(), "swp2".to_owned()), ("leaf1".to_owned(), "swp2".to_owned())]);
    let metrics = exec_ok_in(dir, CLUSTER, "leaf0", &["cat", CLUSTER_METRICS]);
    assert!(
        metrics.contains("# toolkit:detail cabling swp2 swp2: expected node02 rail0, seen on hosts wrongname rail0"),
        "{metrics}"
    );
    wait_for(Duration::from_mins(1), "HealthCheckFailing for leaf0's swp2", || {
        let found = firing(dir);
        found
            .iter()
            .find(|(name, instance, labels)| {
                name == "HealthCheckFailing"
                    && instance == "leaf0"
                    && labels["check"] == "cabling"
                    && labels["subject"] == "swp2"
            })
            .map(|_| ())
            .ok_or_else(|| format!("{found:#?}"))
    });
    let status = toolkit(dir, &["status", "lab.yaml", "-i", "inventory.yaml"]);
    let printed = text(&status.stdout);
    assert!(printed.contains("fail cabling on swp2 (alert)"), "{printed}\n{}", text(&status.stderr));

    exec_ok_in(dir, CLUSTER, "node02", &["sh", "-c", "lldpcli unconfigure system hostname && lldpcli update"]);
    wait_for(Duration::from_mins(1), "every cabling check passing again", || {
        let failing = cabling_failing(dir);
        if failing.is_empty() { Ok(()) } else { Err(format!("{failing:?}")) }
    });
}

fn deploy(dir: &Path, why: &str) -> String {
    let started = Instant::now();
    let output = toolkit(dir, &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    eprintln!("deploy ({why}) took {:.0?}", started.elapsed());
    assert_success(&output, why);
    format!("{}{}", text(&output.stdout), text(&output.stderr))
}

#[test]
fn deploy_brings_up_monitoring_that_sees_the_fabric() {
    let Some(_one_lab) = lab_or_skip("lab monitoring test") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let _teardown = Teardown(dir.path(), CLUSTER);
    fresh_lab(dir.path(), CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    std::fs::write(dir.path().join("bmc-user"), BMC_USER).expect("write");
    std::fs::write(dir.path().join("bmc-password"), BMC_PASSWORD).expect("write");
    start_bmc(dir.path(), "bmc.emu");
    let deploy_log = deploy(dir.path(), "the first deploy");

    let all_up = wait_for(Duration::from_mins(2), "every target up", || {
        let found = targets(dir.path());
        let up = found.iter().all(|(_, _, health)| health == "up");
        let complete = instances(&found, "node") == HOSTS
            && instances(&found, "frr") == SWITCHES
            && instances(&found, "ipmi") == ["node01"];
        if up && complete { Ok(found) } else { Err(format!("{found:#?}")) }
    });
    eprintln!("targets: {all_up:?}");

    let rules = api(dir.path(), "/api/v1/rules");
    let names: Vec<&str> = rules["groups"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .flat_map(|group| group["rules"].as_array().map(Vec::as_slice).unwrap_or_default())
        .filter_map(|rule| rule["name"].as_str())
        .collect();
    for alert in
        ["NodeDown", "RailLinkDown", "BgpSessionDown", "SlurmNodeUnavailable", "TenantBelowGuarantee", "BmcUnreachable"]
    {
        assert!(names.contains(&alert), "rule `{alert}` is not loaded: {names:?}");
    }

    let guaranteed = wait_for(Duration::from_mins(1), "the Slurm view's toolkit_* metrics", || {
        let data = api(dir.path(), "/api/v1/query?query=toolkit_tenant_gpus_guaranteed");
        let result = data["result"].as_array().cloned().unwrap_or_default();
        if result.len() == 2 { Ok(result) } else { Err(format!("{data}")) }
    });
    for series in &guaranteed {
        assert_eq!(series["value"][1], "8", "{series}");
    }

    // Converged: a second plan has nothing to change (monitoring included).
    let plan = toolkit(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml"]);
    assert_success(&plan, "a second `toolkit plan` must have nothing to change");

    // The handover report's monitoring section: the `monitoring` validator passes and
    // the Markdown report shows it.
    let validate = toolkit(
        dir.path(),
        &["validate", "lab.yaml", "-i", "inventory.yaml", "--only", "monitoring", "--results", "monitoring.json"],
    );
    assert_success(&validate, "validate --only monitoring");
    let report = toolkit(dir.path(), &["report", "monitoring.json", "--format", "md"]);
    assert_success(&report, "report");
    let markdown = text(&report.stdout);
    assert!(markdown.contains("| passed | Monitoring sees the whole cluster (`monitoring`) | cluster |"), "{markdown}");
    // The week's health history from Prometheus: no node failed, every node counted.
    assert!(markdown.contains("## History: nodes failing toolkit health checks"), "{markdown}");
    assert!(!markdown.contains("- 0 nodes never failed"), "{markdown}");

    bmc_is_watched(dir.path(), &deploy_log);

    // FRR down on leaf0: spine0's session to it goes down, and the alert names both.
    exec_ok_in(dir.path(), CLUSTER, "leaf0", &["systemctl", "stop", "frr"]);
    let alert = wait_for(Duration::from_mins(2), "BgpSessionDown naming leaf0", || {
        let data = api(dir.path(), "/api/v1/alerts");
        let alerts = data["alerts"].as_array().cloned().unwrap_or_default();
        alerts
            .iter()
            .find(|alert| {
                alert["state"] == "firing"
                    && alert["labels"]["alertname"] == "BgpSessionDown"
                    && alert["labels"]["peer_desc"] == "leaf0"
            })
            .cloned()
            .ok_or_else(|| format!("{data:#}"))
    });
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default().to_owned();
    assert!(summary.contains("leaf0") && summary.contains("spine0"), "{alert:#}");
    // The controller's cluster-scope check compares every switch's sessions with the
    // cabling plan: spine0 has 0 of its 1 session to leaf0.
    let failing = wait_for(Duration::from_mins(1), "the fabric-bgp cluster check failing on spine0", || {
        let data =
            api(dir.path(), "/api/v1/query?query=toolkit_healthcheck_ok%7Bcheck%3D%22fabric-bgp%22%7D%20%3D%3D%200");
        let subjects: Vec<String> = data["result"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|sample| sample["metric"]["subject"].as_str().map(str::to_owned))
            .collect();
        if subjects.iter().any(|subject| subject == "spine0") { Ok(subjects) } else { Err(format!("{data:#}")) }
    });
    eprintln!("fabric-bgp failing on {failing:?}");
    let detail = exec_ok_in(dir.path(), CLUSTER, "head", &["cat", CLUSTER_METRICS]);
    assert!(detail.contains("# toolkit:detail fabric-bgp spine0 BGP sessions established to leaf0 0 of 1"), "{detail}");
    measure_cluster_checks(dir.path());
    exec_ok_in(dir.path(), CLUSTER, "leaf0", &["systemctl", "start", "frr"]);
    wait_for(Duration::from_mins(2), "every fabric-bgp cluster check passing again", || {
        let text = exec_ok_in(dir.path(), CLUSTER, "head", &["cat", CLUSTER_METRICS]);
        let ok = text.lines().filter(|line| line.starts_with("toolkit_healthcheck_ok{")).collect::<Vec<_>>();
        if ok.len() == SWITCHES.len() && ok.iter().all(|line| line.ends_with(" 1")) { Ok(()) } else { Err(text) }
    });

    cabling_is_checked_on_the_switches(dir.path());

    // node04 leaves the blueprint (and team-b's guarantee shrinks to fit the 12 GPUs
    // left): the next deploy stops scraping it.
    let blueprint = dir.path().join("lab.yaml");
    let smaller = edited(
        &std::fs::read_to_string(&blueprint).expect("blueprint"),
        &[
            ("    count: 4\n    hostname: \"node{index:02}\"", "    count: 3\n    hostname: \"node{index:02}\""),
            ("{ name: team-b, users: [bob], guaranteed_gpus: 8,", "{ name: team-b, users: [bob], guaranteed_gpus: 4,"),
        ],
        "the lab blueprint",
    );
    std::fs::write(&blueprint, smaller).expect("write");
    deploy(dir.path(), "the deploy without node04");
    // Prometheus restarts on its new configuration: until it has read it, the targets
    // API answers with no targets at all, which would prove nothing.
    let found = wait_for(Duration::from_mins(1), "the node targets after the deploy", || {
        let found = targets(dir.path());
        if instances(&found, "node").iter().any(|name| name == "node03") {
            Ok(found)
        } else {
            Err(format!("{found:#?}"))
        }
    });
    let nodes = instances(&found, "node");
    assert!(!nodes.iter().any(|name| name == "node04"), "node04 is still scraped: {found:#?}");
}
