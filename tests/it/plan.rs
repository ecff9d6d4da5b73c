//! Integration tests: `toolkit plan --offline` on the example blueprints, against
//! an empty state, a state recording everything, and a state from an older blueprint.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolkit::blueprint;
use toolkit::deploy::health::compile;
use toolkit::inventory;
use toolkit::plan::state::State;
use toolkit::render::Renderer;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn toolkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolkit")).args(args).current_dir(root()).output().expect("runs toolkit")
}

/// Records every resource of `blueprint` as applied, as a deploy would (in the
/// order it applies them).
fn applied_state(blueprint_path: &Path, state_path: &Path) {
    let loaded = blueprint::load(blueprint_path).expect("loads");
    let compiled = compile(&loaded, None, &Renderer::embedded().expect("templates")).expect("compiles");
    let mut state = State::empty(&compiled.model.name);
    for (rank, index) in compiled.graph.ordered().enumerate() {
        state.record_at(&compiled.graph.resources[index], rank as u64 + 1);
    }
    state.save(state_path).expect("saves state");
}

/// `toolkit plan --offline --output json` of `blueprint` with each `from` replaced
/// by its `to`, against a state recording the unedited blueprint as applied.
pub(crate) fn offline_plan_after_edit(blueprint: &str, edits: &[(&str, &str)]) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    let original = root().join("blueprints").join(blueprint);
    applied_state(&original, &state);
    let mut text = std::fs::read_to_string(&original).expect("reads");
    for (from, to) in edits {
        assert!(text.contains(from), "{blueprint} no longer has `{from}`: update this test");
        text = text.replace(from, to);
    }
    let edited_path = dir.path().join(blueprint);
    std::fs::write(&edited_path, text).expect("writes");
    let output = toolkit(&[
        "plan",
        edited_path.to_str().expect("utf8"),
        "--offline",
        "--state",
        state.to_str().expect("utf8"),
        "--output",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("plan JSON")
}

/// Asserts a plan changes slurm.conf and tells slurmctld/slurmd, nothing else;
/// returns `target kind name action` of each change.
pub(crate) fn assert_only_slurm_config_changes(plan: &serde_json::Value) -> Vec<String> {
    let mut changed = Vec::new();
    for change in plan["changes"].as_array().expect("changes").iter().filter(|c| c["action"] != "no-op") {
        let words = [&change["target"], &change["kind"], &change["name"], &change["action"]]
            .map(|value| value.as_str().unwrap_or_default());
        let [target, kind, name, _] = words;
        match kind {
            "file" => assert_eq!(name, "/etc/slurm/slurm.conf", "only slurm.conf changes ({target})"),
            "service" => assert!(["slurmctld", "slurmd"].contains(&name), "unexpected restart of {name} on {target}"),
            other => panic!("unexpected {other} change: {name} on {target}"),
        }
        changed.push(words.join(" "));
    }
    assert!(!changed.is_empty(), "the plan changes nothing");
    changed
}

#[test]
fn every_example_plans_changes_against_an_empty_state() {
    for name in ["lab", "h100-superpod-1su", "h200-roce-64", "h100-kubernetes", "h100-kubeadm", "gb200-nvl72"] {
        let blueprint = format!("blueprints/{name}.yaml");
        let output = toolkit(&["plan", &blueprint, "--offline", "--output", "json"]);
        assert_eq!(output.status.code(), Some(2), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("plan JSON");
        assert_eq!(plan["format_version"], 1);
        assert!(plan["summary"]["create"].as_u64().expect("count") > 0, "{name} creates resources");
        assert_eq!(plan["summary"]["update"], 0);
    }
}

#[test]
fn examples_with_their_inventories_lint_clean() {
    for name in ["lab", "h100-superpod-1su", "h200-roce-64", "h100-kubernetes", "h100-kubeadm", "gb200-nvl72"] {
        let output = toolkit(&["lint", &format!("blueprints/{name}.yaml"), "-i", &format!("inventories/{name}.yaml")]);
        assert_eq!(output.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        let inventory = inventory::load(&root().join(format!("inventories/{name}.yaml")));
        assert!(inventory.is_ok());
    }
}

#[test]
fn a_recorded_deploy_plans_no_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    applied_state(&root().join("blueprints/lab.yaml"), &state);
    let output = toolkit(&["plan", "blueprints/lab.yaml", "--offline", "--state", state.to_str().expect("utf8")]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("No changes."), "{stdout}");
    assert!(stdout.contains("0 to create, 0 to update, 0 to remove"), "{stdout}");
}

#[test]
fn a_recorded_deploy_of_the_gpu_software_plans_no_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    applied_state(&root().join("blueprints/h200-roce-64.yaml"), &state);
    let output =
        toolkit(&["plan", "blueprints/h200-roce-64.yaml", "--offline", "--state", state.to_str().expect("utf8")]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("No changes."), "{stdout}");
}

#[test]
fn a_new_driver_version_moves_the_pin_and_reinstalls_the_driver_with_fabric_manager() {
    let plan = offline_plan_after_edit("h200-roce-64.yaml", &[("version: 570.124.06", "version: 570.133.20")]);
    let mut changed: Vec<String> = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|change| change["action"] != "no-op" && change["action"] != "noop")
        .filter_map(|change| change["id"].as_str())
        .filter(|id| id.starts_with("gpu001:"))
        .map(str::to_owned)
        .collect();
    changed.sort();
    assert_eq!(
        changed,
        [
            "gpu001:command:apt-update-nvidia",
            "gpu001:command:nvidia-driver",
            "gpu001:file:/etc/apt/preferences.d/nvidia-driver.pref"
        ],
        "{plan}"
    );
}

#[test]
fn a_changed_partition_changes_only_slurm_config_and_restarts_its_daemons() {
    let plan = offline_plan_after_edit("lab.yaml", &[("max_time: INFINITE", "max_time: 2-00:00:00")]);
    assert_only_slurm_config_changes(&plan);
    let diff = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find_map(|c| c["diff"].as_str())
        .expect("a diff of slurm.conf");
    assert!(diff.contains("-PartitionName=gpu") && diff.contains("MaxTime=2-00:00:00"), "{diff}");
}

/// The lab without `topology` and without tenant `team-b`.
pub(crate) const DROP_TOPOLOGY_AND_TEAM_B: &[(&str, &str)] = &[
    ("    topology: tree\n", "    topology: none\n"),
    ("  - { name: team-b, users: [bob], guaranteed_gpus: 8, borrow: true, fairshare: 50 }\n", ""),
];

#[test]
fn dropping_topology_and_a_tenant_plans_their_removal_in_reverse_order() {
    let plan = offline_plan_after_edit("lab.yaml", DROP_TOPOLOGY_AND_TEAM_B);
    let removed: Vec<String> = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|change| change["action"] == "remove")
        .map(|change| {
            format!("{} ({})", change["id"].as_str().unwrap_or_default(), change["reason"].as_str().unwrap_or_default())
        })
        .collect();
    assert_eq!(
        removed,
        [
            "head:command:sacctmgr-user-team-b-bob (no longer in the blueprint: run its undo)",
            "head:command:sacctmgr-account-team-b-settings (no longer in the blueprint: nothing to undo)",
            "head:command:sacctmgr-account-team-b (no longer in the blueprint: run its undo)",
            "head:command:sacctmgr-qos-team-b-settings (no longer in the blueprint: nothing to undo)",
            "head:command:sacctmgr-qos-team-b (no longer in the blueprint: run its undo)",
            "node04:file:/etc/slurm/topology.conf (no longer in the blueprint: delete)",
            "node03:file:/etc/slurm/topology.conf (no longer in the blueprint: delete)",
            "node02:file:/etc/slurm/topology.conf (no longer in the blueprint: delete)",
            "node01:file:/etc/slurm/topology.conf (no longer in the blueprint: delete)",
            "head:file:/etc/slurm/topology.conf (no longer in the blueprint: delete)",
        ],
        "{plan}"
    );
    // slurm.conf drops the plugin, and that restarts the daemons that read topology.conf.
    let change = |id: &str| {
        plan["changes"].as_array().expect("changes").iter().find(|c| c["id"] == id).cloned().unwrap_or_default()
    };
    let conf = change("head:file:/etc/slurm/slurm.conf");
    assert_eq!(conf["action"], "update", "{conf}");
    assert!(conf["diff"].as_str().unwrap_or_default().contains("-TopologyPlugin=topology/tree"), "{conf}");
    for daemon in ["head:service:slurmctld", "node01:service:slurmd"] {
        assert_eq!(change(daemon)["reason"], "restart: `/etc/slurm/slurm.conf` changed", "{daemon}");
    }
}

#[test]
fn a_changed_guarantee_shows_the_qos_limit_old_to_new() {
    let from = "{ name: team-a, users: [alice], guaranteed_gpus: 8,";
    let plan = offline_plan_after_edit("lab.yaml", &[(from, "{ name: team-a, users: [alice], guaranteed_gpus: 4,")]);
    let changed: Vec<&serde_json::Value> =
        plan["changes"].as_array().expect("changes").iter().filter(|c| c["action"] != "no-op").collect();
    let ids: Vec<&str> = changed.iter().map(|c| c["id"].as_str().unwrap_or_default()).collect();
    // Monitoring follows the guarantee too: the tenant's alert rule and the Slurm view.
    let (monitoring, slurm): (Vec<&str>, Vec<&str>) =
        ids.iter().partition(|id| id.contains("prometheus") || id.contains("slurm-view"));
    assert_eq!(slurm, ["head:command:sacctmgr-qos-team-a-settings"], "{plan}");
    assert!(monitoring.contains(&"head:file:/etc/prometheus/toolkit.rules.yml"), "{monitoring:?}");
    assert_eq!(changed[0]["action"], "update");
    assert_eq!(changed[0]["reason"], "GrpTRES changed");
    assert_eq!(
        changed[0]["values"],
        serde_json::json!([{ "key": "GrpTRES", "before": "gres/gpu=8", "after": "gres/gpu=4" }])
    );
}

#[test]
fn out_dir_holds_every_rendered_file_and_no_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("rendered");
    let output = toolkit(&["plan", "blueprints/lab.yaml", "--offline", "--out", out.to_str().expect("utf8")]);
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(out.join("node01/etc/slurm/slurm.conf").is_file());
    assert!(out.join("leaf0/etc/frr/frr.conf").is_file());
    assert!(out.join("plan.json").is_file());
    assert!(!out.join("node01/etc/munge/munge.key").exists(), "secrets are not written");
    let secrets = std::fs::read_to_string(out.join("SECRETS.txt")).expect("lists secrets");
    assert!(secrets.contains("/etc/munge/munge.key"));
}

#[test]
fn schema_describes_both_files() {
    for which in ["blueprint", "inventory"] {
        let output = toolkit(&["schema", which]);
        assert!(output.status.success());
        let schema: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON schema");
        assert!(schema["properties"]["version"].is_object(), "{which}");
    }
    let output = toolkit(&["schema", "blueprint"]);
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON schema");
    assert_eq!(schema["additionalProperties"], false, "unknown keys are rejected by editors too");
}

#[test]
fn secrets_never_reach_plans_rendered_trees_or_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let munge = "MUNGE-KEY-CANARY-3f9a1c7e5b2d4068a1c3e5f7091b2d4f";
    let password = "DB-PASSWORD-CANARY-8c6e4a2f";
    std::fs::write(dir.path().join("munge.key"), munge).expect("key");
    std::fs::write(dir.path().join("db.password"), password).expect("password");
    let inventory = std::fs::read_to_string(root().join("inventories/lab.yaml"))
        .expect("inventory")
        .replace(".toolkit/lab/munge.key", &dir.path().join("munge.key").display().to_string())
        .replace(".toolkit/lab/slurmdbd.password", &dir.path().join("db.password").display().to_string());
    let inventory_path = dir.path().join("inventory.yaml");
    std::fs::write(&inventory_path, inventory).expect("inventory");
    let out = dir.path().join("rendered");
    let inventory_arg = inventory_path.to_str().expect("utf8");
    for args in [
        vec!["plan", "blueprints/lab.yaml", "-i", inventory_arg, "--offline"],
        vec!["plan", "blueprints/lab.yaml", "-i", inventory_arg, "--offline", "--output", "json"],
        vec!["plan", "blueprints/lab.yaml", "-i", inventory_arg, "--offline", "--out", out.to_str().expect("utf8")],
    ] {
        let output = toolkit(&args);
        let shown = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(2), "{shown}");
        assert!(!shown.contains(munge) && !shown.contains(password), "a secret reached the output of {args:?}");
    }
    for entry in walk(&out) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(!text.contains(munge) && !text.contains(password), "a secret reached {}", entry.display());
    }
    // The secrets were really used: the state of a deploy records their files by hash only.
    let loaded = blueprint::load(&root().join("blueprints/lab.yaml")).expect("loads");
    let inventory = inventory::load(&inventory_path).expect("inventory");
    let compiled = compile(&loaded, Some(&inventory), &Renderer::embedded().expect("templates")).expect("compiles");
    let mut state = State::empty("lab");
    for resource in &compiled.graph.resources {
        state.record(resource);
    }
    let state_path = dir.path().join("state.json");
    state.save(&state_path).expect("saves");
    let saved = std::fs::read_to_string(&state_path).expect("state");
    assert!(saved.contains("/etc/munge/munge.key"));
    assert!(!saved.contains(munge) && !saved.contains(password), "a secret reached the state file");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { files.extend(walk(&path)) } else { files.push(path) }
    }
    files
}

/// The plan says what each change does to running work and the waves it takes: a new
/// rail MTU drains every compute node (one wave each at the default budget), new
/// module parameters reboot them, slurm.conf alone restarts daemons only.
#[test]
fn plans_class_every_change_and_show_the_waves() {
    let mtu = offline_plan_after_edit("lab.yaml", &[("rail_mtu: 9000", "rail_mtu: 8000")]);
    let rollout = &mtu["rollout"];
    assert_eq!(rollout["max_unavailable"], "1");
    assert_eq!(rollout["waves"], serde_json::json!([["node01"], ["node02"], ["node03"], ["node04"]]));
    assert_eq!(rollout["hosts"]["node01"]["class"], "drain");
    assert_eq!(rollout["hosts"]["node01"]["because"][0], "node01:file:/etc/netplan/60-toolkit-rails.yaml");
    let netplan = mtu["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|change| change["id"] == "node02:file:/etc/netplan/60-toolkit-rails.yaml")
        .expect("netplan change");
    assert_eq!(netplan["disruption"], "drain");

    let anchor = "    gpu: { model: h100, count: \"${gpus_per_node}\" }\n";
    let modules = offline_plan_after_edit(
        "lab.yaml",
        &[(anchor, &format!("{anchor}    module_options: {{ nvidia: \"NVreg_EnableGpuFirmware=0\" }}\n"))],
    );
    assert_eq!(modules["rollout"]["hosts"]["node03"]["class"], "reboot");
    assert_eq!(modules["rollout"]["hosts"]["node03"]["because"][0], "node03:file:/etc/modprobe.d/90-toolkit.conf");

    let partition = offline_plan_after_edit("lab.yaml", &[("max_time: INFINITE", "max_time: 2-00:00:00")]);
    assert_eq!(partition["rollout"]["waves"], serde_json::json!([]));
    assert_eq!(partition["rollout"]["hosts"]["head"]["class"], "restart");
    assert_eq!(partition["rollout"]["hosts"]["node01"]["class"], "restart");
}

/// The lab with one spare and guarantees it can keep (3 nodes × 4 GPUs serve the tenants).
const LAB_WITH_A_SPARE: &[(&str, &str)] = &[
    ("    hostname: \"node{index:02}\"\n", "    hostname: \"node{index:02}\"\n    spares: 1\n"),
    ("{ name: team-a, users: [alice], guaranteed_gpus: 8,", "{ name: team-a, users: [alice], guaranteed_gpus: 4,"),
];

/// `toolkit plan --offline` (text) of the lab with a spare against the recorded lab, with
/// `extra` arguments: the Spares section and the partition lines of slurm.conf's diff.
fn spares_plan(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    applied_state(&root().join("blueprints/lab.yaml"), &state);
    let mut text = std::fs::read_to_string(root().join("blueprints/lab.yaml")).expect("reads");
    for (from, to) in LAB_WITH_A_SPARE {
        assert!(text.contains(from), "lab.yaml no longer has `{from}`: update this test");
        text = text.replacen(from, to, 1);
    }
    let blueprint = dir.path().join("lab.yaml");
    std::fs::write(&blueprint, text).expect("writes");
    let mut args =
        vec!["plan", blueprint.to_str().expect("utf8"), "--offline", "--state", state.to_str().expect("utf8")];
    args.extend_from_slice(extra);
    let output = toolkit(&args);
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut shown: Vec<&str> = stdout
        .lines()
        .filter(|line| line.trim_start().starts_with(['+', '-']) && line.contains("PartitionName="))
        .collect();
    let spares = stdout.find("Spares:").map(|at| &stdout[at..]).unwrap_or_default();
    shown.extend(spares.lines().take_while(|line| !line.is_empty()));
    shown.join("\n")
}

#[test]
fn a_spare_stands_by_in_its_partition_and_takes_a_failed_nodes_place() {
    insta::assert_snapshot!("lab_spare_standing_by", spares_plan(&[]));
    insta::assert_snapshot!("lab_spare_serving_for_node02", spares_plan(&["--rma", "node02"]));
    insta::assert_snapshot!("lab_node02_back_as_the_spare", spares_plan(&["--returned", "node02"]));
}

#[test]
fn a_gpu_count_change_drains_every_node_and_says_which_side_goes_first() {
    let more = offline_plan_after_edit("lab.yaml", &[("gpus_per_node: 4", "gpus_per_node: 8")]);
    let rollout = &more["rollout"];
    assert_eq!(rollout["waves"], serde_json::json!([["node01"], ["node02"], ["node03"], ["node04"]]));
    let agreement = &rollout["agreement"];
    assert_eq!(agreement["controller"], "head");
    assert_eq!(agreement["nodes"]["node01"]["direction"], "increase");
    assert_eq!(agreement["nodes"]["node01"]["changes"], serde_json::json!(["gres gpu:h100 4 → 8"]));
    let old = agreement["nodes"]["node04"]["old"].as_str().expect("the old line");
    assert!(old.contains("Gres=gpu:h100:4"), "{old}");
    // Each node's own slurm.conf is what the new definition reaches slurmd with: a drain.
    let node_conf = more["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|change| change["id"] == "node03:file:/etc/slurm/slurm.conf")
        .expect("node03's slurm.conf");
    assert_eq!(node_conf["disruption"], "drain");

    // The text people read says the order.
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    let original = root().join("blueprints/lab.yaml");
    applied_state(&original, &state);
    let edited = dir.path().join("lab.yaml");
    let text = std::fs::read_to_string(&original).expect("reads").replace("gpus_per_node: 4", "gpus_per_node: 8");
    std::fs::write(&edited, text).expect("writes");
    let output = toolkit(&[
        "plan",
        edited.to_str().expect("utf8"),
        "--offline",
        "--state",
        state.to_str().expect("utf8"),
        "--max-unavailable",
        "1",
    ]);
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        shown.contains("Rollout: gres on node[01-04] (increase): nodes first in 4 waves of 1, then slurmctld with each wave's new lines"),
        "{shown}"
    );

    // Fewer cores (two GPUs would break the tenants' guarantees).
    let fewer = offline_plan_after_edit(
        "lab.yaml",
        &[("cores_per_socket: 2 }\n    memory_gib: 1\n", "cores_per_socket: 1 }\n    memory_gib: 1\n")],
    );
    let node02 = &fewer["rollout"]["agreement"]["nodes"]["node02"];
    assert_eq!(node02["direction"], "decrease");
    assert_eq!(node02["changes"], serde_json::json!(["cores 2 → 1", "cpus 2 → 1"]));
    // A partition's MaxTime is no node's definition: nothing to agree on, no wave.
    let partition = offline_plan_after_edit("lab.yaml", &[("max_time: INFINITE", "max_time: 2-00:00:00")]);
    assert!(partition["rollout"].get("agreement").is_none(), "{}", partition["rollout"]);
}
