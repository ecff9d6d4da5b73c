use std::path::Path;

use super::planner::Problems;
use super::*;
use crate::render::Renderer;

fn lab_model() -> Model {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/blueprints/lab.yaml")).expect("lab");
    let loaded = crate::blueprint::load::load_text(Path::new("lab.yaml"), text).expect("loads");
    crate::model::expand(&loaded.blueprint).expect("expands")
}

fn lab_settings() -> Settings {
    Settings { checks: [("dcgm-diag".to_owned(), OnFailure::Alert)].into(), ..Settings::default() }
}

fn lab_checks(fake: &[&str]) -> Vec<NodeChecks> {
    checks_of(&lab_model(), fake)
}

fn checks_of(model: &Model, fake: &[&str]) -> Vec<NodeChecks> {
    let catalog = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    let fake: BTreeSet<String> = fake.iter().map(|name| (*name).to_owned()).collect();
    plan(&catalog, model, &lab_settings(), &fake).expect("plans")
}

/// The lab with /home on NFS from the head and monitoring on.
fn lab_with_home() -> Model {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/blueprints/lab.yaml")).expect("lab");
    let storage = "storage:\n  filesystems:\n    - { name: home, kind: nfs, server_group: head, export: /export/home, mount: /home }\n\nscheduler:\n";
    let text = text.replacen("scheduler:\n", storage, 1);
    let loaded = crate::blueprint::load::load_text(Path::new("lab.yaml"), text).expect("loads");
    crate::model::expand(&loaded.blueprint).expect("expands")
}

#[test]
fn every_compute_node_gets_the_validators_with_probes_and_their_limits() {
    let nodes = lab_checks(&["node01", "node02", "node03", "node04"]);
    assert_eq!(nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["node01", "node02", "node03", "node04"]);
    let node02 = &nodes[1];
    let summary: Vec<String> = node02
        .checks
        .iter()
        .map(|check| {
            format!(
                "{} {} {} {} {}",
                check.id,
                check.subject,
                check.cadence.as_str(),
                check.action.as_str(),
                if check.skipped.is_some() { "skipped" } else { "runs" }
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "rail-links node02 fast drain runs",
            "mtu node02+node03/rail0 fast alert runs",
            "mtu node02+node03/rail1 fast alert runs",
            // The lab blueprint has no shared filesystem: no `mounts` check.
            "services node02 fast alert runs",
            "gpu-inventory node02 fast drain skipped",
            "gpu-health node02 fast drain skipped",
            "dcgm-diag node02 slow alert skipped",
        ]
    );
    let rails = node02.checks.iter().find(|check| check.id == "rail-links").expect("rail-links");
    // Derived from the model: 2 rails per node, both at the rail MTU.
    assert_eq!(
        rails.limits,
        [
            ResolvedLimit { measurement: "rails_up".into(), comparison: "==", value: 2.0, warning: false },
            ResolvedLimit { measurement: "rails_mtu".into(), comparison: "==", value: 2.0, warning: false },
        ]
    );
}

#[test]
fn the_script_of_a_lab_node() {
    let nodes = lab_checks(&["node01", "node02", "node03", "node04"]);
    let renderer = Renderer::embedded().expect("templates");
    let text = script::render(&nodes[1], NodeControl::Slurm, &renderer).expect("renders");
    // A plan that keeps no texts hashes the script as the template writes it: the same file.
    let hashed = script::content(&nodes[1], NodeControl::Slurm, &renderer.without_texts()).expect("renders");
    let kept = crate::resource::Content::new(text.clone());
    assert_eq!((hashed.sha256(), hashed.has_text()), (kept.sha256(), false));
    insta::assert_snapshot!(text);
}

#[test]
fn a_gpu_node_runs_its_gpu_checks() {
    let nodes = lab_checks(&[]);
    let node01 = &nodes[0];
    let inventory = node01.checks.iter().find(|check| check.id == "gpu-inventory").expect("gpu-inventory");
    assert_eq!(inventory.skipped, None);
    let probe = inventory.probe.as_deref().expect("a probe");
    assert!(probe.contains("awk -v product='NVIDIA H100 80GB HBM3' -v planned=4"), "{probe}");
    assert_eq!(
        inventory.limits.iter().filter(|limit| (limit.value - 4.0).abs() < 1e-9).count(),
        2,
        "{:?}",
        inventory.limits
    );
}

/// Runs `probe` with `sh`, the programs it calls replaced by scripts that print
/// recorded outputs; returns what it printed.
fn run_probe(probe: &str, programs: &[(&str, &str)]) -> String {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers");
    let bodies: Vec<(&str, String)> =
        programs.iter().map(|(name, fixture)| (*name, format!("cat '{}'", fixtures.join(fixture).display()))).collect();
    let bodies: Vec<(&str, &str)> = bodies.iter().map(|(name, body)| (*name, body.as_str())).collect();
    run_probe_with(probe, &bodies)
}

fn probe_of(id: &str) -> String {
    let nodes = lab_checks(&[]);
    nodes[0].checks.iter().find(|check| check.id == id).and_then(|check| check.probe.clone()).expect("a probe")
}

#[test]
fn probes_read_recorded_tool_outputs() {
    // 8 x H100 in the recorded table; the lab node plans 4.
    let printed = run_probe(&probe_of("gpu-inventory"), &[("nvidia-smi", "nvidia_smi_8xh100_table.txt")]);
    assert_eq!(
        printed,
        "gpus 8\nof_model 8\ndriver_major 560\ndetail 8 x NVIDIA H100 80GB HBM3 of 4 planned, driver 560.35.03\n"
    );

    let printed = run_probe(&probe_of("dcgm-diag"), &[("dcgmi", "dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt")]);
    assert!(printed.starts_with("level 1\nfailed 1\n"), "{printed}");
    assert!(printed.contains("runtime_error 0\n"), "{printed}");
    assert!(printed.contains("detail GPU Memory Fail - All"), "{printed}");

    let printed = run_probe(
        &probe_of("gpu-health"),
        &[
            ("nvidia-smi", "nvidia_smi_q_page_retirement_8gpu_azure.txt"),
            ("journalctl", "xid_journal_kernel_nvlink_open_gpu_kernel_modules_1150.txt"),
        ],
    );
    assert!(
        printed.starts_with("uncorrectable_ecc 0\nremap_pending 0\nretirement_pending 0\nthrottled 0\nkernel_log 0\n"),
        "{printed}"
    );
    assert!(printed.contains("fatal_xids "), "{printed}");
}

/// Runs `probe` with `sh`, the programs it calls replaced by the given `sh` bodies.
fn run_probe_with(probe: &str, programs: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, body) in programs {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("writes");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    }
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let output = std::process::Command::new("sh").arg("-c").arg(probe).env("PATH", path).output().expect("sh runs");
    String::from_utf8(output.stdout).expect("utf-8")
}

/// The action and probe of check `id` on node02 of the lab with /home on NFS.
fn node02_probe(id: &str) -> (OnFailure, String) {
    let nodes = checks_of(&lab_with_home(), &[]);
    let check = nodes[1].checks.iter().find(|check| check.id == id).unwrap_or_else(|| panic!("node02 runs {id}"));
    (check.action, check.probe.clone().expect("a probe"))
}

#[test]
fn the_mounts_check_finds_a_missing_and_a_hung_mount_without_hanging() {
    let (action, probe) = node02_probe("mounts");
    assert_eq!(action, OnFailure::Drain);
    let probe = probe.as_str();
    assert!(probe.contains("for mount in /home ; do"), "{probe}");
    // Not mounted: findmnt (util-linux) says so by its exit status.
    let printed = run_probe_with(probe, &[("findmnt", "exit 1")]);
    assert_eq!(printed, "missing 1\nhung 0\ndetail /home not mounted\n");
    // Mounted, and `stat -f` blocks as on a dead NFS server: the real `timeout` kills it.
    let started = std::time::Instant::now();
    let printed = run_probe_with(probe, &[("findmnt", "exit 0"), ("stat", "sleep 60")]);
    assert_eq!(printed, "missing 0\nhung 1\ndetail /home does not answer (stat -f over 5 s)\n");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "the probe waited for the hung stat");
    // Mounted and answering: the real `stat -f` on a directory that exists.
    let printed = run_probe_with(&probe.replace("/home ;", "/ ;"), &[("findmnt", "exit 0")]);
    assert_eq!(printed, "missing 0\nhung 0\ndetail \n");
}

#[test]
fn the_services_check_names_the_daemons_deployed_on_the_node() {
    let (action, probe) = node02_probe("services");
    assert_eq!(action, OnFailure::Alert);
    let probe = probe.as_str();
    // A compute node of the lab: Slurm's munge and slurmd, and node exporter (monitoring on).
    assert!(probe.contains("for service in munge slurmd prometheus-node-exporter ; do"), "{probe}");
    // `systemctl is-active` prints the state (and exits non-zero unless active).
    let printed =
        run_probe_with(probe, &[("systemctl", r#"case "$2" in munge) echo failed; exit 3 ;; *) echo active ;; esac"#)]);
    assert_eq!(printed, "inactive 1\ndetail munge failed\n");
}

/// blueprints/h100-kubeadm.yaml with monitoring on.
fn kubeadm_with_monitoring() -> (Model, Settings) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/blueprints/h100-kubeadm.yaml");
    let text = std::fs::read_to_string(path).expect("blueprint");
    let text = format!("{text}\nmonitoring:\n  health: {{ fast_interval: 5m, slow_interval: 1h }}\n");
    let loaded = crate::blueprint::load::load_text(Path::new("h100-kubeadm.yaml"), text).expect("loads");
    let settings = Settings::from_blueprint(&loaded.blueprint).expect("parses").expect("a monitoring section");
    (crate::model::expand(&loaded.blueprint).expect("expands"), settings)
}

#[test]
fn a_kubeadm_node_runs_its_fast_checks_from_a_timer_and_cordons_itself() {
    let (model, settings) = kubeadm_with_monitoring();
    assert_eq!(settings.control, NodeControl::Kubernetes);
    let catalog = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    let nodes = plan(&catalog, &model, &settings, &BTreeSet::new()).expect("plans");
    assert_eq!(nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["dgx01", "dgx02", "dgx03", "dgx04"]);
    let renderer = Renderer::embedded().expect("templates");
    let mut out = Vec::new();
    resources::resources(&nodes[..1], &settings, &renderer, &mut out).expect("renders");
    let shown: String = out
        .iter()
        .map(|resource| match resource.desired.as_ref() {
            crate::resource::Desired::File { path, content, mode, .. } => {
                format!("==> {path} ({mode:o})\n{}\n", content.text())
            }
            other => format!("==> {} {other:?}\n\n", resource.id.as_str()),
        })
        .collect();
    // The Slurm parts are not rendered: no scontrol, no slurmd.
    assert!(!shown.contains("scontrol"), "{shown}");
    assert!(shown.contains("toolkit-health-fast.timer"), "{shown}");
    insta::assert_snapshot!(shown);
}

#[test]
fn a_slurm_node_gets_no_fast_timer() {
    let nodes = lab_checks(&[]);
    let renderer = Renderer::embedded().expect("templates");
    let mut out = Vec::new();
    resources::resources(&nodes[..1], &lab_settings(), &renderer, &mut out).expect("renders");
    let ids: Vec<&str> = out.iter().map(|resource| resource.id.as_str()).collect();
    assert!(ids.iter().all(|id| !id.contains("toolkit-health-fast")), "{ids:?}");
    assert!(ids.iter().any(|id| id.contains("toolkit-health-slow.timer")), "{ids:?}");
}

#[test]
fn programs_made_in_runs_are_those_of_one_pass_over_the_nodes() {
    let model = lab_model();
    let (settings, renderer) = (lab_settings(), Renderer::embedded().expect("templates"));
    let catalog = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    let fake = BTreeSet::from(["node03".to_owned()]);
    let mut expected = Vec::new();
    let nodes = plan(&catalog, &model, &settings, &fake).expect("plans");
    let programs = resources::resources(&nodes, &settings, &renderer, &mut expected).expect("renders");
    let shown = |resources: &[crate::resource::Resource]| -> Vec<(String, String)> {
        resources.iter().map(|r| (r.id.as_str().to_owned(), r.desired.fingerprint())).collect()
    };
    // Runs of one node, of three (a short last run) and of every node at once.
    for run in [1, 3, 64] {
        let (planner, mut problems) = Planner::new(&catalog, &model, &settings, &fake).expect("plans");
        let made = planner.programs(&renderer, run, &mut problems);
        assert!(problems.into_result().is_ok());
        let made = made.expect("renders");
        assert_eq!(shown(&made.resources), shown(&expected), "runs of {run}");
        assert_eq!(made.by_node, programs, "runs of {run}");
    }
}

#[test]
fn every_node_shares_one_timer_and_a_plan_without_texts_keeps_its_units_hashes_only() {
    let model = lab_model();
    let settings = lab_settings();
    let catalog = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    let real = BTreeSet::new();
    let (planner, mut problems) = Planner::new(&catalog, &model, &settings, &real).expect("plans");
    let with = planner.programs(&Renderer::embedded().expect("templates"), 64, &mut problems).expect("renders");
    let hashed = Renderer::embedded().expect("templates").without_texts();
    let without = planner.programs(&hashed, 64, &mut problems).expect("renders");
    assert!(problems.into_result().is_ok());
    let fingerprints = |programs: &Programs| -> Vec<(String, String)> {
        programs.resources.iter().map(|r| (r.id.as_str().to_owned(), r.desired.fingerprint())).collect()
    };
    assert_eq!(fingerprints(&without), fingerprints(&with));
    let files = |programs: &Programs, suffix: &str| -> Vec<std::sync::Arc<crate::resource::Desired>> {
        let ids = programs.resources.iter().filter(|r| r.id.as_str().ends_with(suffix));
        ids.map(|r| r.desired.clone()).collect()
    };
    let timers = files(&with, ":file:/etc/systemd/system/toolkit-health-slow.timer");
    assert!(timers.len() > 1, "{} timers", timers.len());
    assert!(timers.iter().all(|timer| std::sync::Arc::ptr_eq(timer, &timers[0])));
    let units = files(&without, ":file:/etc/systemd/system/toolkit-health-slow.service");
    assert_eq!(units.len(), timers.len());
    for unit in units {
        let crate::resource::Desired::File { content, .. } = &*unit else { panic!("a file") };
        assert!(!content.has_text());
    }
}

#[test]
fn problems_found_node_by_node_are_reported_validator_by_validator() {
    let mut problems = Problems::default();
    // Node 1 then node 2, each with checks of validators 0 and 2; validator 1 failed whole.
    for (at, problem) in [((0, 0), "a node1"), ((2, 0), "c node1"), ((0, 1), "a node2"), ((2, 1), "c node2")] {
        problems.push(at, problem.to_owned());
    }
    problems.push((1, 0), "b".to_owned());
    assert_eq!(
        problems.into_result(),
        Err(["a node1", "a node2", "b", "c node1", "c node2"].map(str::to_owned).to_vec())
    );
    assert_eq!(Problems::default().into_result(), Ok(()));
}
