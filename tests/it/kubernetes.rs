//! Integration tests of the Kubernetes flavor: the example blueprint's objects
//! (core kinds checked by PyPI `kubernetes-validate` against the upstream schemas of
//! the targeted release; Kueue kinds are checked against Kueue's CRDs in
//! `src/render/kubernetes/tests.rs`, since `kubernetes-validate` passes custom
//! resources without a word), and offline plans of changes to them.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolkit::blueprint;

use crate::redfish::venv_program;

const BLUEPRINT: &str = "blueprints/h100-kubernetes.yaml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn toolkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolkit")).args(args).current_dir(root()).output().expect("runs toolkit")
}

fn model(path: &Path) -> toolkit::model::Model {
    let loaded = blueprint::load(path).expect("loads");
    toolkit::model::expand(&loaded.blueprint).expect("expands")
}

#[test]
fn core_objects_validate_against_the_targeted_kubernetes_release() {
    let Some(validate) = venv_program("kubernetes-validate") else { return };
    let objects = toolkit::render::kubernetes::objects(&model(&root().join(BLUEPRINT)));
    let core: Vec<String> = objects
        .iter()
        .filter(|planned| planned.object.group().is_empty())
        .map(|planned| planned.object.yaml())
        .collect();
    assert!(core.len() >= 6, "nodes and namespaces: {core:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("core.yaml");
    std::fs::write(&file, core.join("---\n")).expect("writes");
    let output = Command::new(&validate)
        .args(["-k", "1.33", "--strict", file.to_str().expect("utf8")])
        .output()
        .expect("runs kubernetes-validate");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(text.matches("passed").count(), core.len(), "{text}");
    // The same tool on a broken object: the check can fail.
    std::fs::write(&file, "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\nspec: {finalizers: 3}\n")
        .expect("writes");
    let broken =
        Command::new(&validate).args(["-k", "1.33", "--strict", file.to_str().expect("utf8")]).output().expect("runs");
    assert_eq!(broken.status.code(), Some(1), "{}", String::from_utf8_lossy(&broken.stdout));
}

#[test]
fn the_example_plans_every_object_offline() {
    let output = toolkit(&["plan", BLUEPRINT, "-i", "inventories/h100-kubernetes.yaml", "--offline"]);
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    for object in [
        "Node/dgx01",
        "Topology/h100k8s-fabric",
        "Namespace/research",
        "WorkloadPriorityClass/product",
        "ResourceFlavor/h100",
        "ClusterQueue/research",
        "LocalQueue/product/product",
    ] {
        assert!(text.contains(&format!("+ k8s {object} on kubernetes")), "{object} in\n{text}");
    }
    assert!(text.contains("        nominalQuota: 16\n"), "the object's YAML is shown:\n{text}");
}

/// An offline plan of the example with `edits`, against a state recording the
/// unedited example as applied.
fn plan_after_edit(edits: &[(&str, &str)]) -> serde_json::Value {
    crate::plan::offline_plan_after_edit("h100-kubernetes.yaml", edits)
}

fn changed(plan: &serde_json::Value) -> Vec<(String, String)> {
    plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|change| change["action"] != "no-op")
        .map(|change| {
            (change["id"].as_str().expect("id").to_owned(), change["action"].as_str().expect("action").to_owned())
        })
        .collect()
}

#[test]
fn a_smaller_guarantee_updates_only_that_tenants_queue_with_a_diff() {
    let plan = plan_after_edit(&[(
        "guaranteed_gpus: 16, borrow: true, priority: 1000",
        "guaranteed_gpus: 8, borrow: true, priority: 1000",
    )]);
    assert_eq!(changed(&plan), [("kubernetes:k8s:ClusterQueue/research".to_owned(), "update".to_owned())]);
    let change = plan["changes"].as_array().expect("changes").iter().find(|c| c["action"] == "update").expect("update");
    let diff = change["diff"].as_str().expect("a diff");
    assert!(diff.contains("-        nominalQuota: 16\n+        nominalQuota: 8\n"), "{diff}");
}

#[test]
fn a_tenant_that_leaves_takes_its_objects_with_it() {
    let plan = plan_after_edit(&[
        ("  - { name: product, guaranteed_gpus: 16, borrow: true, priority: 2000 }\n", ""),
        ("        - { name: product, pkey: \"0x0a02\", tenants: [product] }\n", ""),
    ]);
    let removed: Vec<String> =
        changed(&plan).into_iter().filter(|(_, action)| action == "remove").map(|(id, _)| id).collect();
    assert_eq!(
        removed,
        [
            "kubernetes:k8s:LocalQueue/product/product",
            "kubernetes:k8s:ClusterQueue/product",
            "kubernetes:k8s:WorkloadPriorityClass/product",
            "kubernetes:k8s:Namespace/product",
        ],
        "{plan}"
    );
}

/// `plan --out DIR` writes every Kubernetes object under `DIR/kubernetes/`, one YAML
/// file each, in the order deploy applies them, each equal to the body deploy sends.
#[test]
fn plan_out_writes_the_objects_deploy_applies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("tree");
    let output = toolkit(&[
        "plan",
        BLUEPRINT,
        "-i",
        "inventories/h100-kubernetes.yaml",
        "--offline",
        "--out",
        out.to_str().expect("utf8"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    let mut files: Vec<PathBuf> = std::fs::read_dir(out.join("kubernetes"))
        .expect("a kubernetes directory")
        .map(|entry| entry.expect("entry").path())
        .collect();
    files.sort();
    let written: Vec<serde_json::Value> = files
        .iter()
        .map(|file| serde_norway::from_str(&std::fs::read_to_string(file).expect("reads")).expect("YAML"))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = blueprint::load(&root.join(BLUEPRINT)).expect("loads");
    let model = toolkit::model::expand(&loaded.blueprint).expect("expands");
    let applied: Vec<serde_json::Value> =
        toolkit::render::kubernetes::objects(&model).into_iter().map(|planned| planned.object.body).collect();
    assert!(!applied.is_empty());
    assert_eq!(written.len(), applied.len(), "{files:?}");
    for body in &applied {
        assert!(written.contains(body), "not written: {body:#}");
    }
    // A Namespace comes before what lives in it.
    let position = |kind: &str| files.iter().position(|file| file.to_string_lossy().contains(kind));
    assert!(position("-namespace-research") < position("-localqueue-research"), "{files:?}");
    let first = files[0].file_name().expect("name").to_string_lossy().into_owned();
    assert!(first.starts_with("0001-"), "{first}");
}
