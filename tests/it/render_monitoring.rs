//! Integration tests: render_monitoring — Prometheus' config, its rules and
//! Alertmanager's config rendered from the lab blueprint, checked by the real tools
//! (`promtool check config`, `promtool test rules` for every rule, `amtool
//! check-config`), and scrape targets that follow the blueprint's nodes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use toolkit::inventory::Inventory;
use toolkit::model::{self, Model};
use toolkit::render::monitoring::{cluster_checks, config, dcgm, rules};
use toolkit::render::{self, Renderer};
use toolkit::resource::{Desired, Resource};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The lab blueprint with `edits` applied, expanded.
fn lab_model(edits: &[(&str, &str)]) -> Model {
    let path = root().join("blueprints/lab.yaml");
    let mut text = std::fs::read_to_string(&path).expect("lab blueprint");
    for (from, to) in edits {
        assert!(text.contains(from), "`{from}` is not in the lab blueprint");
        text = text.replacen(from, to, 1);
    }
    let loaded = toolkit::blueprint::load::load_text(&path, text).expect("blueprint loads");
    model::expand(&loaded.blueprint).expect("blueprint expands")
}

fn lab_inventory() -> Inventory {
    toolkit::inventory::load(&root().join("inventories/lab.yaml")).expect("inventory loads").inventory
}

/// The lab's inventory with BMCs for node01 (IPMI 1.5, at its own address) and node02
/// (IPMI at the Redfish endpoint's host), and one for node03 without IPMI.
fn lab_inventory_with_bmcs() -> Inventory {
    let text = std::fs::read_to_string(root().join("inventories/lab.yaml")).expect("lab inventory");
    let bmcs = "bmcs:\n  node01:\n    endpoint: https://10.10.1.11\n    username: { env: BMC_USER }\n    \
                password: { env: BMC_PASSWORD }\n    ipmi: { address: 10.10.0.11, driver: LAN }\n  node02:\n    \
                endpoint: https://10.10.0.12:8443/redfish/v1\n    username: { env: BMC_USER }\n    \
                password: { env: BMC_PASSWORD }\n    ipmi: {}\n  node03:\n    endpoint: https://10.10.0.13\n    \
                username: { env: BMC_USER }\n    password: { env: BMC_PASSWORD }\n";
    serde_norway::from_str(&format!("{text}{bmcs}")).expect("inventory with BMCs")
}

/// The lab with /home on NFS from the head and alerts after 2 minutes: the blueprint
/// the rule tests in `tests/fixtures/monitoring/` are written for.
const RULE_TEST_EDITS: &[(&str, &str)] = &[
    (
        "scheduler:\n",
        "storage:\n  filesystems:\n    - { name: home, kind: nfs, server_group: head, export: /export/home, mount: /home }\n\nscheduler:\n",
    ),
    ("  scrape_interval: 15s\n", "  scrape_interval: 15s\n  alert_after: 2m\n  availability_target: 0.9\n"),
];

/// Whether `program` can be run (a failure without it, see [`crate::support::cannot_run`]).
fn tool(program: &str) -> bool {
    super::render_network::tool(program, "prometheus prometheus-alertmanager")
}

fn run(dir: &Path, argv: &[&str]) -> (bool, String) {
    let output = Command::new(argv[0]).args(&argv[1..]).current_dir(dir).output().expect("runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

fn resources(model: &Model, inventory: &Inventory) -> Vec<Resource> {
    let renderer = Renderer::embedded().expect("templates");
    render::render(model, Some(inventory), &render::slurm::Secrets::default(), &renderer).expect("renders")
}

fn file_text<'a>(resources: &'a [Resource], id: &str) -> &'a str {
    let resource = resources.iter().find(|r| r.id.as_str() == id).unwrap_or_else(|| panic!("no `{id}`"));
    let Desired::File { content, .. } = &*resource.desired else { panic!("`{id}` is not a file") };
    content.text()
}

#[test]
fn every_rule_passes_its_promtool_unit_test() {
    if !tool("promtool") {
        return;
    }
    let monitoring =
        model::monitoring::monitoring(&lab_model(RULE_TEST_EDITS), Some(&lab_inventory_with_bmcs())).expect("on");
    assert_eq!(monitoring.bmcs.len(), 2, "the BMC rules are rendered");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("toolkit.rules.yml"), rules::rules(&monitoring)).expect("write rules");
    let (ok, output) = run(dir.path(), &["promtool", "check", "rules", "toolkit.rules.yml"]);
    assert!(ok, "{output}");
    // The availability rules are tested at the rendered evaluation interval (15 s), the
    // others every minute: one file each.
    let mut tests = String::new();
    for file in ["toolkit.rules.test.yml", "toolkit.availability.test.yml"] {
        let path = root().join("tests/fixtures/monitoring").join(file);
        std::fs::copy(&path, dir.path().join(file)).expect("copy tests");
        let (ok, output) = run(dir.path(), &["promtool", "test", "rules", file]);
        assert!(ok, "{file}: {output}");
        tests.push_str(&std::fs::read_to_string(&path).expect("tests"));
    }
    // Every alert the file defines has a test that expects it to fire.
    let rules = rules::rules(&monitoring);
    for line in rules.lines().filter_map(|line| line.trim().strip_prefix("- alert: ")) {
        assert!(
            tests.contains(&format!("alertname: {line}\n        exp_alerts:")),
            "alert `{line}` has no promtool test that expects it to fire"
        );
    }
}

#[test]
fn the_rendered_configs_pass_promtool_and_amtool() {
    if !tool("promtool") || !tool("amtool") {
        return;
    }
    let model = lab_model(&[(
        "  scrape_interval: 15s\n",
        "  scrape_interval: 15s\n  receivers:\n    - name: ops\n      webhook: { url_secret: hook }\n    \
         - name: mail\n      email: { to: ops@example.org, smarthost: mail.example.org:587, password_secret: smtp }\n",
    )]);
    let monitoring = model::monitoring::monitoring(&model, Some(&lab_inventory_with_bmcs())).expect("on");
    let dir = tempfile::tempdir().expect("tempdir");
    let rules_path = dir.path().join("toolkit.rules.yml");
    std::fs::write(&rules_path, rules::rules(&monitoring)).expect("write rules");
    let prometheus = config::prometheus(&monitoring).replace(config::RULES_PATH, &rules_path.display().to_string());
    std::fs::write(dir.path().join("prometheus.yml"), prometheus).expect("write config");
    let (ok, output) = run(dir.path(), &["promtool", "check", "config", "prometheus.yml"]);
    assert!(ok, "{output}");
    // The BMCs (not node03's, without IPMI) through the exporter on the monitoring host.
    let parsed: serde_json::Value = serde_norway::from_str(&config::prometheus(&monitoring)).expect("yaml");
    let jobs = parsed["scrape_configs"].as_array().expect("jobs");
    let ipmi = jobs.iter().find(|job| job["job_name"] == "ipmi").expect("job ipmi");
    assert_eq!(ipmi["metrics_path"], "/ipmi");
    assert_eq!(ipmi["scrape_interval"], "1m");
    let targets: Vec<(String, String)> = ipmi["static_configs"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|entry| (entry["targets"][0].as_str().unwrap_or("").to_owned(), entry["labels"]["instance"].to_string()))
        .collect();
    assert_eq!(
        targets,
        [("10.10.0.11".to_owned(), "\"node01\"".to_owned()), ("10.10.0.12".to_owned(), "\"node02\"".to_owned())]
    );
    assert!(ipmi["relabel_configs"].to_string().contains("localhost:9290"), "{ipmi}");
    let secrets = BTreeMap::from([
        ("hook".to_owned(), "https://hooks.example.org/T0/secret".to_owned()),
        ("smtp".to_owned(), "pw".to_owned()),
    ]);
    std::fs::write(dir.path().join("alertmanager.yml"), config::alertmanager(&monitoring, &secrets)).expect("write");
    let (ok, output) = run(dir.path(), &["amtool", "check-config", "alertmanager.yml"]);
    assert!(ok && output.contains("3 receivers"), "{output}");
}

#[test]
fn scrape_targets_follow_the_blueprint_nodes() {
    let inventory = lab_inventory();
    let all = resources(&lab_model(&[]), &inventory);
    let prometheus = file_text(&all, "head:file:/etc/prometheus/prometheus.yml");
    for (name, address) in
        [("node04", "10.10.0.14:9100"), ("leaf1", "10.10.0.201:9100"), ("spine0", "10.10.0.210:9342")]
    {
        assert!(prometheus.contains(address) && prometheus.contains(&format!("instance: {name}")), "{prometheus}");
    }
    // The lab's GPUs are fake device files: no DCGM exporter could answer there.
    assert!(!prometheus.contains("job_name: dcgm"), "{prometheus}");
    assert!(all.iter().any(|r| r.id.as_str() == "node04:service:prometheus-node-exporter"));

    let fewer = resources(
        &lab_model(&[(
            "    count: 4\n    hostname: \"node{index:02}\"",
            "    count: 3\n    hostname: \"node{index:02}\"",
        )]),
        &inventory,
    );
    let prometheus = file_text(&fewer, "head:file:/etc/prometheus/prometheus.yml");
    assert!(!prometheus.contains("node04") && prometheus.contains("node03"), "{prometheus}");
    assert!(!fewer.iter().any(|r| r.target() == "node04"));
}

#[test]
fn configs_are_checked_before_activation_and_restart_their_daemon() {
    let all = resources(&lab_model(&[]), &lab_inventory());
    for (id, check) in [
        ("head:file:/etc/prometheus/toolkit.rules.yml", "promtool check rules {}"),
        ("head:file:/etc/prometheus/prometheus.yml", "promtool check config {}"),
        ("head:file:/etc/prometheus/alertmanager.yml", "amtool check-config {}"),
    ] {
        let resource = all.iter().find(|r| r.id.as_str() == id).unwrap_or_else(|| panic!("no `{id}`"));
        let Desired::File { check: Some(argv), .. } = &*resource.desired else { panic!("`{id}` has no check") };
        assert_eq!(argv.join(" "), check);
    }
    let prometheus = all.iter().find(|r| r.id.as_str() == "head:service:prometheus").expect("prometheus service");
    let watches: Vec<_> = prometheus.watches().collect();
    assert!(watches.iter().any(|id| id.as_str() == "head:file:/etc/prometheus/toolkit.rules.yml"), "{watches:?}");
}

#[test]
fn no_monitoring_section_renders_no_monitoring() {
    let model = lab_model(&[("monitoring:\n  retention: 15d\n  scrape_interval: 15s\n", "")]);
    let all = resources(&model, &lab_inventory());
    assert!(!all.iter().any(|r| r.id.as_str().contains("prometheus")));
}

/// A blueprint of `blueprints/` with a default `monitoring:` section, expanded.
fn with_monitoring(name: &str) -> Model {
    let path = root().join("blueprints").join(name);
    let text = std::fs::read_to_string(&path).expect("blueprint") + "\nmonitoring: {}\n";
    let loaded = toolkit::blueprint::load::load_text(&path, text).expect("blueprint loads");
    model::expand(&loaded.blueprint).expect("blueprint expands")
}

#[test]
fn gpu_nodes_with_dcgm_4_run_the_dcgm_exporter_with_toolkits_counters() {
    let model = with_monitoring("h200-roce-64.yaml");
    let renderer = Renderer::embedded().expect("templates");
    let all = render::render(&model, None, &render::slurm::Secrets::default(), &renderer).expect("renders");
    // Scraped from the compiled model: every GPU node, on the exporter's port.
    let monitoring = model::monitoring::monitoring(&model, None).expect("on");
    assert_eq!(monitoring.gpu_nodes.len(), 64);
    let prometheus = config::prometheus(&monitoring);
    assert_eq!(prometheus.matches(":9400").count(), 64, "{prometheus}");
    assert!(prometheus.contains("job_name: dcgm"));
    let node = monitoring.gpu_nodes[0].name.clone();
    let counters = file_text(&all, &format!("{node}:file:{}", dcgm::COUNTERS_PATH));
    assert!(counters.contains("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, "), "{counters}");
    let unit = file_text(&all, &format!("{node}:file:{}", dcgm::UNIT_PATH));
    assert!(unit.contains(&format!("--collectors {}", dcgm::COUNTERS_PATH)), "{unit}");
    let pin = file_text(&all, &format!("{node}:file:{}", dcgm::PIN_PATH));
    assert!(pin.contains("Package: datacenter-gpu-manager-exporter\nPin: version 4.*\n"), "{pin}");
    let package = all
        .iter()
        .find(|r| r.id.as_str() == format!("{node}:package:datacenter-gpu-manager-exporter"))
        .expect("the exporter's package");
    assert!(
        package.depends_on.iter().any(|id| id.as_str() == format!("{node}:package:datacenter-gpu-manager-4-cuda12")),
        "installed after DCGM: {:?}",
        package.depends_on
    );
    let service = all
        .iter()
        .find(|r| r.id.as_str() == format!("{node}:service:nvidia-dcgm-exporter"))
        .expect("the exporter runs");
    let Desired::Service { watches, .. } = &*service.desired else { panic!("not a service") };
    assert_eq!(watches.len(), 2, "restarted when its counters or unit change: {watches:?}");
}

#[test]
fn rules_use_only_exported_counters() {
    let monitoring = model::monitoring::monitoring(&with_monitoring("h200-roce-64.yaml"), None).expect("on");
    let rules = rules::rules(&monitoring);
    let exported: Vec<&str> = dcgm::COUNTERS.iter().map(|counter| counter.field).collect();
    let mut used = Vec::new();
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("DCGM_") && !used.contains(&word) {
            used.push(word);
        }
    }
    assert!(used.len() >= 5, "{used:?}");
    for name in used {
        assert!(exported.contains(&name), "rule metric `{name}` is not in toolkit's DCGM counters file");
    }
}

/// The BMC rules read series the real exporter gives: every `ipmi_*` metric and the
/// power supplies' `type` label they name are in prometheus-ipmi-exporter's answers
/// recorded against the lab's ipmi_sim BMC, where the failing BMC's sensors are in
/// state 2 and the unreachable one's collectors are `ipmi_up 0`.
#[test]
fn bmc_rules_use_the_exporters_series() {
    let monitoring =
        model::monitoring::monitoring(&lab_model(RULE_TEST_EDITS), Some(&lab_inventory_with_bmcs())).expect("on");
    let rules = rules::rules(&monitoring);
    let fixture = |name: &str| {
        std::fs::read_to_string(root().join("tests/fixtures/monitoring").join(name)).expect("recorded answer")
    };
    let (nominal, failing, unreachable) = (
        fixture("ipmi_exporter_1.6.1_ipmi_sim_nominal.prom"),
        fixture("ipmi_exporter_1.6.1_ipmi_sim_failing.prom"),
        fixture("ipmi_exporter_1.6.1_ipmi_sim_unreachable.prom"),
    );
    let mut used: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("ipmi_"))
        .collect();
    used.sort_unstable();
    used.dedup();
    assert_eq!(used, ["ipmi_fan_speed_state", "ipmi_sensor_state", "ipmi_temperature_state", "ipmi_up"]);
    for name in used {
        assert!(nominal.lines().any(|line| line.starts_with(&format!("{name}{{"))), "`{name}` is not exported");
    }
    assert!(rules.contains(r#"type="Power Supply""#) && nominal.contains(r#"type="Power Supply"} 0"#), "{nominal}");
    assert!(
        failing.contains(r#"type="Power Supply"} 2"#)
            && failing.contains("ipmi_temperature_state{id=\"1\",name=\"Inlet Temp\"} 2")
    );
    assert!(unreachable.contains("ipmi_up{collector=\"ipmi\"} 0") && !unreachable.contains("ipmi_temperature"));
}

/// promtool on the config and rules of a 4,096-node blueprint (`benches/plan_scale.py`'s,
/// with monitoring on): prints the scrape-target count and promtool's times. Run with
/// `cargo test --release --test it monitoring_at_scale -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: prints figures"]
fn monitoring_at_scale() {
    if !tool("promtool") {
        return;
    }
    let nodes: usize = std::env::var("NODES").ok().and_then(|n| n.parse().ok()).unwrap_or(4096);
    let script = format!(
        "import sys; sys.path.insert(0, 'benches'); import plan_scale; print(plan_scale.blueprint({nodes}, True))"
    );
    let output = Command::new("python3").args(["-c", &script]).current_dir(root()).output().expect("python3");
    let text = String::from_utf8(output.stdout).expect("utf-8") + "monitoring: {}\n";
    let path = root().join("scale.yaml");
    let loaded = toolkit::blueprint::load::load_text(&path, text).expect("blueprint loads");
    let model = model::expand(&loaded.blueprint).expect("blueprint expands");
    let monitoring = model::monitoring::monitoring(&model, None).expect("on");
    let dir = tempfile::tempdir().expect("tempdir");
    let rules_path = dir.path().join("toolkit.rules.yml");
    let rule_text = rules::rules(&monitoring);
    std::fs::write(&rules_path, &rule_text).expect("write rules");
    let prometheus = config::prometheus(&monitoring).replace(config::RULES_PATH, &rules_path.display().to_string());
    // Node exporter on every node and switch, FRR and DCGM exporters, Prometheus itself.
    let targets = monitoring.nodes.len()
        + monitoring.switches.len()
        + monitoring.frr_switches.len()
        + monitoring.gpu_nodes.len()
        + 1;
    // Every static config but Alertmanager's is a scrape target.
    assert_eq!(prometheus.matches("- targets:").count(), targets + 1);
    std::fs::write(dir.path().join("prometheus.yml"), &prometheus).expect("write config");
    for argv in
        [&["promtool", "check", "rules", "toolkit.rules.yml"][..], &["promtool", "check", "config", "prometheus.yml"]]
    {
        let started = std::time::Instant::now();
        let (ok, output) = run(dir.path(), argv);
        let seconds = started.elapsed().as_secs_f64();
        assert!(ok, "{output}");
        eprintln!("MEASURE {nodes} nodes: `{}` {seconds:.2} s", argv.join(" "));
    }
    eprintln!(
        "MEASURE {nodes} nodes: {targets} scrape targets ({} nodes, {} switches, {} FRR, {} DCGM), config {} KiB, {} rules",
        monitoring.nodes.len(),
        monitoring.switches.len(),
        monitoring.frr_switches.len(),
        monitoring.gpu_nodes.len(),
        prometheus.len() / 1024,
        rule_text.matches("- alert: ").count()
    );
}

#[test]
fn the_controller_checks_bgp_sessions_against_the_cabling_plan() {
    let inventory = lab_inventory();
    let model = lab_model(&[]);
    let monitoring = model::monitoring::monitoring(&model, Some(&inventory)).expect("on");
    let plan: serde_json::Value = serde_json::from_str(&cluster_checks::plan(&monitoring)).expect("JSON");
    assert_eq!(plan["node"], "head");
    let switches = plan["switches"].as_array().expect("switches");
    assert_eq!(switches.len(), 3, "{plan:#}");
    let spine = switches.iter().find(|switch| switch["name"] == "spine0").expect("spine0");
    assert_eq!(spine["url"], "http://10.10.0.210:9342/metrics");
    assert_eq!(spine["peers"], serde_json::json!({ "leaf0": 1, "leaf1": 1 }), "{plan:#}");
    let all = resources(&model, &inventory);
    let timer = file_text(&all, "head:file:/etc/systemd/system/toolkit-cluster-checks.timer");
    assert!(timer.contains("OnUnitActiveSec=600s"), "cluster_interval's default, 10m: {timer}");
    assert!(all.iter().any(|r| r.id.as_str() == "head:service:toolkit-cluster-checks.timer"));
}

/// Kills the Prometheus a test started, even when an assertion fails.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The faulty-host report's health history, read from a real Prometheus on loopback
/// through `query_range`: a recording rule stands in for node03's health program writing
/// `toolkit_healthcheck_ok` (gpu-health failing, mtu passing) every second.
#[tokio::test]
async fn the_rma_history_is_read_from_a_real_prometheus() {
    use toolkit::report::rma::Evidence;
    if !tool("prometheus") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = r#"groups:
- name: node03-health
  interval: 1s
  rules:
  - record: toolkit_healthcheck_ok
    expr: label_replace(label_replace(vector(0), "node", "node03", "", ""), "check", "gpu-health", "", "")
  - record: toolkit_healthcheck_ok
    expr: label_replace(label_replace(vector(1), "node", "node03", "", ""), "check", "mtu", "", "")
"#;
    std::fs::write(dir.path().join("rules.yml"), rules).expect("rules");
    std::fs::write(dir.path().join("prometheus.yml"), "global: { evaluation_interval: 1s }\nrule_files: [rules.yml]\n")
        .expect("config");
    let port = super::redfish::free_port();
    let child = Command::new("prometheus")
        .current_dir(dir.path())
        .args(["--config.file=prometheus.yml", "--storage.tsdb.path=data"])
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts prometheus");
    let _running = Running(child);
    // The history's step is at least 30 s, evaluated from the window's start: a start
    // 25 s back puts the second step 5 s after Prometheus starts.
    let started = jiff::Timestamp::now().checked_sub(jiff::SignedDuration::from_secs(25)).expect("time");
    let url = format!("http://127.0.0.1:{port}");
    // Until a few evaluations are stored (the rules run every second once it is ready).
    let mut checks = Vec::new();
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let until = jiff::Timestamp::now();
        if let Evidence::Read(history) = toolkit::deploy::rma::from_prometheus(&url, "node03", started, until).await {
            checks = history.checks;
            if checks.iter().any(|check| check.failing_steps > 0) {
                break;
            }
        }
    }
    let gpu = checks.iter().find(|check| check.check == "gpu-health").unwrap_or_else(|| panic!("{checks:#?}"));
    assert!(gpu.failing_steps > 0 && gpu.passing_steps == 0, "{gpu:?}");
    assert_eq!(gpu.failing.len(), 1, "one failing period: {gpu:?}");
    let mtu = checks.iter().find(|check| check.check == "mtu").expect("mtu");
    assert_eq!(mtu.failing_steps, 0, "{mtu:?}");
    assert_eq!(checks[0].check, "gpu-health", "the failing check first");
    // Another node's history is empty, not an error.
    let other = toolkit::deploy::rma::from_prometheus(&url, "node04", started, jiff::Timestamp::now()).await;
    assert!(matches!(other, Evidence::Read(ref history) if history.checks.is_empty()), "{other:?}");
}

/// `monitoring.repair` as the lab test sets it.
const REPAIR_EDITS: &[(&str, &str)] = &[(
    "  scrape_interval: 15s\n",
    "  scrape_interval: 15s\n  repair:\n    max_in_repair: 1\n    interval: 5s\n    settle: 2m\n    \
     diagnose: ping -c 1 -W 2 {node}\n    checks: { rail-links: [reboot, diagnose, rma] }\n",
)];

/// With `monitoring.repair`: the service on the controller (program, policy, timer,
/// webhook), Alertmanager routing the health alert to its webhook (amtool accepts it),
/// and the BMC credentials as a secret file; without it,
/// none of these.
#[test]
fn the_repair_service_runs_on_the_controller_fed_by_alertmanager() {
    let renderer = Renderer::embedded().expect("templates");
    let inventory = lab_inventory_with_bmcs();
    let model = lab_model(REPAIR_EDITS);
    let mut out = Vec::new();
    toolkit::health::programs(&model, Some(&inventory), &renderer).expect("health programs").attach(&mut out);
    let policy: serde_json::Value =
        serde_json::from_str(file_text(&out, "head:file:/etc/toolkit/repair/policy.json")).expect("json");
    insta::assert_snapshot!("lab_repair_policy", serde_json::to_string_pretty(&policy).expect("json"));
    assert_eq!(policy["ladders"]["rail-links"], serde_json::json!(["reboot", "diagnose", "rma"]), "overridden");
    assert_eq!(policy["ladders"]["gpu-inventory"], serde_json::json!(["reboot", "power-cycle", "diagnose", "rma"]));
    assert!(policy.get("ladders").and_then(|l| l.get("mounts")).is_none(), "mounts has no ladder");
    let units: Vec<String> = out
        .iter()
        .filter(|resource| resource.target() == "head" && resource.id.as_str().contains("repair"))
        .map(|resource| resource.id.as_str().to_owned())
        .collect();
    insta::assert_snapshot!("lab_repair_resources", units.join("\n"));
    insta::assert_snapshot!(
        "lab_repair_webhook_unit",
        file_text(&out, "head:file:/etc/systemd/system/toolkit-repair-webhook.service")
    );

    let monitoring = model::monitoring::monitoring(&model, Some(&inventory)).expect("on");
    let alertmanager = config::alertmanager(&monitoring, &BTreeMap::new());
    insta::assert_snapshot!("lab_repair_alertmanager", alertmanager);
    if tool("amtool") {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("alertmanager.yml"), &alertmanager).expect("write");
        let (ok, output) = run(dir.path(), &["amtool", "check-config", "alertmanager.yml"]);
        assert!(ok && output.contains("2 receivers"), "{output}");
    }

    let secrets = render::slurm::Secrets {
        bmcs: ["node01", "node02", "node03"]
            .into_iter()
            .map(|node| (node.to_owned(), ("admin".to_owned(), format!("pw-{node}"))))
            .collect(),
        ..render::slurm::Secrets::default()
    };
    let hosts = render::render(&model, Some(&inventory), &secrets, &renderer).expect("renders");
    let credentials = hosts
        .iter()
        .find(|resource| resource.id.as_str() == "head:file:/etc/toolkit/repair/bmc.json")
        .expect("the BMC credentials on the controller");
    let Desired::File { content, mode, secret, .. } = &*credentials.desired else { panic!("a file") };
    assert!(*secret && *mode == 0o600, "a 0600 secret file");
    let known: serde_json::Value = serde_json::from_str(content.text()).expect("json");
    assert_eq!(known["node02"]["password"], "pw-node02");

    // Without `monitoring.repair`: nothing of it.
    let plain = lab_model(&[]);
    let hosts = render::render(&plain, Some(&inventory), &secrets, &renderer).expect("renders");
    assert!(!hosts.iter().any(|resource| resource.id.as_str().contains("repair")));
    let monitoring = model::monitoring::monitoring(&plain, Some(&inventory)).expect("on");
    assert!(!config::alertmanager(&monitoring, &BTreeMap::new()).contains("toolkit-repair"));
    let mut out = Vec::new();
    toolkit::health::programs(&plain, Some(&inventory), &renderer).expect("health programs").attach(&mut out);
    assert!(!out.iter().any(|resource| resource.id.as_str().contains("repair")));
}
