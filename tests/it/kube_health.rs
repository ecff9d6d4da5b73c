//! The node health program of a Kubernetes node, cordoning and uncordoning its own node:
//! the script rendered from the real template run with `sh`, its probes reading files
//! the test writes, its API calls made by the real `kubectl` with the kubelet's kind of
//! credentials (a client certificate `CN=system:node:dgx01`) over TLS to
//! `tests/support/kube_apiserver.py`, which refuses what the Node authorizer and the
//! NodeRestriction admission plugin refuse a node. No real API server or kubelet runs
//! here: the README says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use toolkit::health::script::{self, KUBECONFIG, KUBECTL_CACHE, LOCK, TEXTFILE_DIR};
use toolkit::health::{CORDON_ANNOTATION, Check, NodeChecks, NodeControl, OnFailure, ResolvedLimit};
use toolkit::render::Renderer;
use toolkit::validate::spec::Cadence;

use crate::kube_api::{Pki, apiserver, kubeconfig, requests};
use crate::redfish::{Server, system_program};

/// A fast check of dgx01 whose probe prints the file `name` in `dir`.
fn check(dir: &Path, id: &str, subject: &str, action: OnFailure, measurement: &str, limit: f64) -> Check {
    Check {
        id: id.to_owned(),
        subject: subject.to_owned(),
        cadence: Cadence::Fast,
        action,
        timeout: 5,
        probe: Some(format!("cat '{}'", dir.join(id).display())),
        skipped: None,
        limits: vec![ResolvedLimit {
            measurement: measurement.to_owned(),
            comparison: "==",
            value: limit,
            warning: false,
        }],
    }
}

/// dgx01's program with a drain check (`rail-links`) and an alert-only one (`mtu`),
/// its node paths moved into `dir`.
fn program(dir: &Path, kubeconfig: &Path) -> PathBuf {
    let checks = NodeChecks {
        node: "dgx01".to_owned(),
        checks: vec![
            check(dir, "rail-links", "dgx01", OnFailure::Drain, "rails_up", 8.0),
            check(dir, "mtu", "dgx01+dgx02/rail0", OnFailure::Alert, "lost", 0.0),
        ],
    };
    let renderer = Renderer::embedded().expect("templates");
    let mut text = script::render(&checks, NodeControl::Kubernetes, &renderer).expect("renders");
    for (path, moved) in [
        (KUBECONFIG, kubeconfig.to_path_buf()),
        (LOCK, dir.join("health.lock")),
        (KUBECTL_CACHE, dir.join("kubectl-cache")),
        (TEXTFILE_DIR, dir.join("textfile")),
    ] {
        assert!(text.contains(path), "the program names {path}");
        text = text.replace(path, &moved.display().to_string());
    }
    let path = dir.join("check");
    std::fs::write(&path, text).expect("program");
    path
}

/// Writes what the probes print next.
fn probes(dir: &Path, rails_up: u32, lost: u32) {
    let detail = if rails_up < 8 { "detail ib3 down, rate 0 (planned up, 400 Gb/s)\n" } else { "" };
    std::fs::write(dir.join("rail-links"), format!("rails_up {rails_up}\n{detail}")).expect("probe");
    std::fs::write(dir.join("mtu"), format!("lost {lost}\n")).expect("probe");
}

/// One fast run, as toolkit-health-fast.service starts it; prints its wall time.
fn run(program: &Path) -> String {
    let started = std::time::Instant::now();
    let output = Command::new("sh").arg(program).arg("fast").output().expect("sh runs");
    eprintln!("MEASURE fast run with kubectl: wall {:.2} s", started.elapsed().as_secs_f64());
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `kubectl` with `config`, its cache in `dir`.
fn kubectl(kubectl: &Path, dir: &Path, config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(kubectl)
        .args([
            "--kubeconfig",
            &config.display().to_string(),
            "--cache-dir",
            &dir.join("admin-cache").display().to_string(),
        ])
        .args(args)
        .output()
        .expect("kubectl runs")
}

/// dgx01 as the API server has it.
fn node(server: &Server, tool: &Path, admin: &Path) -> Value {
    let output = kubectl(tool, server.dir.path(), admin, &["get", "node", "dgx01", "-o", "json"]);
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("node JSON")
}

/// `(unschedulable, toolkit's annotation)` of dgx01.
fn cordon(node: &Value) -> (bool, Option<String>) {
    (
        node["spec"]["unschedulable"].as_bool().unwrap_or(false),
        node["metadata"]["annotations"][CORDON_ANNOTATION].as_str().map(str::to_owned),
    )
}

fn patches(server: &Server) -> usize {
    requests(server).iter().filter(|request| request["method"] == "PATCH").count()
}

fn drained_metric(dir: &Path) -> String {
    let metrics = std::fs::read_to_string(dir.join("textfile/toolkit_health_fast.prom")).expect("metrics written");
    metrics
        .lines()
        .find(|line| line.starts_with("toolkit_healthcheck_drained{"))
        .expect("drained metric")
        .rsplit(' ')
        .next()
        .expect("value")
        .to_owned()
}

#[test]
fn a_failing_drain_check_cordons_the_node_and_only_toolkits_cordon_is_lifted() {
    let Some(tool) = system_program("kubectl", "kubectl") else { return };
    let Some(pki) = Pki::make() else { return };
    let seed = json!([
        {"path": "/api/v1/nodes/dgx01", "manager": "kubelet", "object": {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "dgx01", "labels": {"kubernetes.io/hostname": "dgx01"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}}},
        {"path": "/api/v1/nodes/dgx02", "manager": "kubelet", "object": {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "dgx02"}}},
    ]);
    let Some(server) = apiserver(&pki, false, &seed, &[]) else { return };
    let dir = server.dir.path();
    let ca = format!("    certificate-authority-data: {}\n", pki.base64("ca.pem"));
    let cert = |name: &str| {
        format!(
            "    client-certificate: {}\n    client-key: {}\n",
            pki.path(&format!("{name}.pem")).display(),
            pki.path(&format!("{name}.key")).display()
        )
    };
    // The kubelet's kubeconfig as kubeadm writes it: the CA inline, the rotated client
    // certificate by path; and an operator's.
    let kubelet = kubeconfig(dir, server.port, &ca, &cert("node"));
    let admin = kubeconfig(dir, server.port, &ca, &cert("client"));
    let program = program(dir, &kubelet);

    // rail-links fails: the node cordons itself, marked with the checks and the detail.
    probes(dir, 7, 0);
    let said = run(&program);
    let (unschedulable, held) = cordon(&node(&server, &tool, &admin));
    assert!(unschedulable, "{said}");
    assert_eq!(held.as_deref(), Some("rail-links: ib3 down, rate 0 (planned up, 400 Gb/s)"));
    assert_eq!(drained_metric(dir), "1");
    let sent: Vec<Value> = requests(&server).into_iter().filter(|request| request["method"] == "PATCH").collect();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0]["auth"], "client-certificate", "the kubelet's own certificate");
    assert_eq!(sent[0]["content_type"], "application/merge-patch+json");
    assert!(sent[0]["body"]["metadata"]["resourceVersion"].is_string(), "a conditional patch: {:#}", sent[0]);
    // Failing again changes nothing.
    run(&program);
    assert_eq!(patches(&server), 1);

    // Passing again: uncordoned, the annotation gone, the kubelet's taint untouched.
    probes(dir, 8, 0);
    run(&program);
    let now = node(&server, &tool, &admin);
    assert_eq!(cordon(&now), (false, None), "{now:#}");
    assert_eq!(now["spec"]["taints"][0]["key"], "nvidia.com/gpu");
    assert_eq!(drained_metric(dir), "0");

    // An alert-only check that fails never cordons.
    let before = patches(&server);
    probes(dir, 8, 3);
    run(&program);
    assert_eq!(cordon(&node(&server, &tool, &admin)), (false, None));
    assert_eq!(patches(&server), before);

    // Cordoned by an operator (what `kubectl cordon` sets): a failing and a passing run
    // leave it cordoned and unmarked.
    let cordoned = kubectl(
        &tool,
        dir,
        &admin,
        &["patch", "node", "dgx01", "--type", "merge", "-p", r#"{"spec":{"unschedulable":true}}"#],
    );
    assert!(cordoned.status.success(), "{cordoned:?}");
    for rails in [7, 8] {
        probes(dir, rails, 0);
        run(&program);
        assert_eq!(cordon(&node(&server, &tool, &admin)), (true, None), "after a run with {rails} rails up");
        assert_eq!(drained_metric(dir), "0");
    }
    // kubectl's discovery cache in the program's own directory: the API server's resource
    // lists are read once over all the runs (and once by the operator's kubectl).
    let discovery = requests(&server).iter().filter(|request| request["path"] == "/api/v1").count();
    assert_eq!(discovery, 2, "{:#?}", requests(&server));
}

#[test]
fn a_kubelets_credentials_may_cordon_its_own_node_but_not_taint_it_or_touch_another() {
    let Some(tool) = system_program("kubectl", "kubectl") else { return };
    let Some(pki) = Pki::make() else { return };
    let seed = json!([
        {"path": "/api/v1/nodes/dgx01", "manager": "kubelet", "object": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx01"}}},
        {"path": "/api/v1/nodes/dgx02", "manager": "kubelet", "object": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx02"}}},
    ]);
    let Some(server) = apiserver(&pki, false, &seed, &[]) else { return };
    let dir = server.dir.path();
    let ca = format!("    certificate-authority-data: {}\n", pki.base64("ca.pem"));
    let user = format!(
        "    client-certificate: {}\n    client-key: {}\n",
        pki.path("node.pem").display(),
        pki.path("node.key").display()
    );
    let kubelet = kubeconfig(dir, server.port, &ca, &user);
    let patch =
        |name: &str, body: &str| kubectl(&tool, dir, &kubelet, &["patch", "node", name, "--type", "merge", "-p", body]);
    let own = patch("dgx01", r#"{"metadata":{"annotations":{"toolkit.io/health":"x"}},"spec":{"unschedulable":true}}"#);
    assert!(own.status.success(), "{own:?}");
    let taint = patch("dgx01", r#"{"spec":{"taints":[{"key":"toolkit.io/health","effect":"NoSchedule"}]}}"#);
    assert!(
        String::from_utf8_lossy(&taint.stderr).contains(r#"node "dgx01" is not allowed to modify taints"#),
        "{taint:?}"
    );
    // kubectl reads the object before patching it: the Node authorizer refuses that
    // read already (NodeRestriction would refuse the patch itself).
    let other = patch("dgx02", r#"{"spec":{"unschedulable":true}}"#);
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("node 'dgx01' cannot read 'dgx02', only its own Node object"),
        "{other:?}"
    );
    assert!(
        requests(&server)
            .iter()
            .all(|request| request["method"] != "PATCH" || request["path"] != "/api/v1/nodes/dgx02"),
        "no patch of dgx02 was sent"
    );
}
