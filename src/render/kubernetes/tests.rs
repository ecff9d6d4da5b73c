//! Every rendered Kueue object against Kueue's own CRD schema (tests/fixtures/kubernetes/kueue-crds),
//! strict like kubeconform (no field the schema does not declare, which the API server
//! would prune without a word), plus the CRDs' CEL rules toolkit's objects could break,
//! re-implemented here since no JSON Schema validator evaluates CEL.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::blueprint::load::load_text;
use crate::model::Model;
use crate::model::kubernetes::KubeModel;
use crate::resource::kube::{dns1123_label_error, dns1123_subdomain_error, label_value_error};

const EXAMPLE: &str = include_str!("../../../blueprints/h100-kubernetes.yaml");

/// The CRD fixture of a custom kind, under tests/fixtures/kubernetes/.
fn crd_file(kind: &str) -> &'static str {
    match kind {
        "ClusterQueue" => "kueue-crds/kueue.x-k8s.io_clusterqueues.yaml",
        "LocalQueue" => "kueue-crds/kueue.x-k8s.io_localqueues.yaml",
        "ResourceFlavor" => "kueue-crds/kueue.x-k8s.io_resourceflavors.yaml",
        "Topology" => "kueue-crds/kueue.x-k8s.io_topologies.yaml",
        "WorkloadPriorityClass" => "kueue-crds/kueue.x-k8s.io_workloadpriorityclasses.yaml",
        "Cohort" => "kueue-crds/kueue.x-k8s.io_cohorts.yaml",
        "NicClusterPolicy" => "network-operator-crds/mellanox.com_nicclusterpolicies.yaml",
        "SriovNetworkNodePolicy" => "network-operator-crds/sriovnetwork.openshift.io_sriovnetworknodepolicies.yaml",
        other => panic!("no CRD for `{other}`"),
    }
}

/// Closes every object schema that lists its properties (as kubeconform's
/// openapi2jsonschema does), so an unknown field is an error.
fn strict(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".to_owned(), json!(false));
            }
            map.values_mut().for_each(strict);
        }
        Value::Array(items) => items.iter_mut().for_each(strict),
        _ => {}
    }
}

fn schema(kind: &str, version: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubernetes").join(crd_file(kind));
    let text = std::fs::read_to_string(&path).expect("CRD fixture");
    let crd: Value = serde_norway::from_str(&text).expect("CRD YAML");
    let versions = crd["spec"]["versions"].as_array().expect("versions");
    let served = versions.iter().find(|v| v["name"] == version).unwrap_or_else(|| panic!("{kind} {version} served"));
    let mut schema = served["schema"]["openAPIV3Schema"].clone();
    strict(&mut schema);
    schema
}

/// Schema errors of one custom object, as `path: message` lines.
fn schema_errors(object: &KubeObject) -> Vec<String> {
    let version = object.api_version.rsplit('/').next().unwrap_or_default();
    let schema = schema(&object.kind, version);
    let validator = jsonschema::draft4::new(&schema).expect("the CRD schema compiles");
    validator.iter_errors(&object.body).map(|error| format!("{}: {error}", error.instance_path())).collect()
}

/// The CEL rules of the CRDs that toolkit's objects could break.
fn cel_errors(object: &KubeObject) -> Vec<String> {
    let spec = &object.body["spec"];
    let mut errors = Vec::new();
    match object.kind.as_str() {
        "ClusterQueue" => {
            let cohort = spec.get("cohortName").or_else(|| spec.get("cohort"));
            for group in spec["resourceGroups"].as_array().into_iter().flatten() {
                let covered: Vec<&Value> = group["coveredResources"].as_array().expect("covered").iter().collect();
                for flavor in group["flavors"].as_array().expect("flavors") {
                    let names: Vec<&Value> =
                        flavor["resources"].as_array().expect("resources").iter().map(|r| &r["name"]).collect();
                    if names != covered {
                        errors.push(format!(
                            "flavor {} resources {names:?} differ from coveredResources",
                            flavor["name"]
                        ));
                    }
                    if cohort.is_none()
                        && flavor["resources"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|r| r.get("borrowingLimit").is_some())
                    {
                        errors.push("borrowingLimit must be nil when cohort is empty".to_owned());
                    }
                }
            }
            let preemption = &spec["preemption"];
            if preemption["reclaimWithinCohort"] == "Never" && preemption["borrowWithinCohort"]["policy"] != "Never" {
                errors.push("reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never".to_owned());
            }
        }
        "ResourceFlavor"
            if spec.get("topologyName").is_some()
                && spec["nodeLabels"].as_object().is_none_or(serde_json::Map::is_empty) =>
        {
            errors.push("at least one nodeLabel is required when topology is set".to_owned());
        }
        "Topology" => {
            let levels: Vec<&str> = spec["levels"]
                .as_array()
                .expect("levels")
                .iter()
                .map(|l| l["nodeLabel"].as_str().expect("label"))
                .collect();
            if levels.iter().collect::<BTreeSet<_>>().len() != levels.len() {
                errors.push("levels must be unique".to_owned());
            }
            if levels.iter().position(|l| *l == "kubernetes.io/hostname").is_some_and(|p| p != levels.len() - 1) {
                errors.push("the kubernetes.io/hostname label can only be used at the lowest level".to_owned());
            }
        }
        _ => {}
    }
    errors
}

/// Object names and label values by the API server's rules.
fn name_errors(object: &KubeObject) -> Vec<String> {
    let mut errors = Vec::new();
    let rule = if object.kind == "Namespace" { dns1123_label_error } else { dns1123_subdomain_error };
    if let Some(error) = rule(&object.name) {
        errors.push(format!("name `{}` {error}", object.name));
    }
    for (key, value) in object.body["metadata"]["labels"].as_object().into_iter().flatten() {
        if let Some(error) = label_value_error(value.as_str().unwrap_or("not a string")) {
            errors.push(format!("label {key}={value} {error}"));
        }
    }
    errors
}

fn model_of(text: &str) -> Model {
    let loaded = load_text(Path::new("bp.yaml"), text.to_owned()).expect("loads");
    let diagnostics = crate::model::check::check(&loaded, None);
    assert!(!diagnostics.has_errors(), "{diagnostics:?}");
    crate::model::expand(&loaded.blueprint).expect("expands")
}

fn kube_model(text: &str) -> KubeModel {
    crate::model::kubernetes::expand(&model_of(text)).expect("a Kubernetes blueprint")
}

/// Every Kueue object of `kube` is valid; returns all objects.
fn assert_valid(kube: &KubeModel) -> Vec<Planned> {
    let objects = objects_of(kube);
    for planned in &objects {
        let object = &planned.object;
        let mut errors = name_errors(object);
        if !object.group().is_empty() {
            errors.extend(schema_errors(object));
            errors.extend(cel_errors(object));
        }
        assert!(errors.is_empty(), "{}:\n{}\n{}", object.display(), errors.join("\n"), object.yaml());
    }
    objects
}

fn edited(replacements: &[(&str, &str)]) -> String {
    let mut text = EXAMPLE.to_owned();
    for (from, to) in replacements {
        assert!(text.contains(from), "`{from}` in the example");
        text = text.replacen(from, to, 1);
    }
    text
}

#[test]
fn the_example_renders_valid_v1beta2_objects_in_dependency_order() {
    let objects = assert_valid(&kube_model(EXAMPLE));
    let names: Vec<String> = objects.iter().map(|planned| planned.object.display()).collect();
    assert_eq!(
        names,
        [
            "Node/dgx01",
            "Node/dgx02",
            "Node/dgx03",
            "Node/dgx04",
            "Topology/h100k8s-fabric",
            "Namespace/research",
            "Namespace/product",
            "WorkloadPriorityClass/research",
            "WorkloadPriorityClass/product",
            "ResourceFlavor/h100",
            "ClusterQueue/research",
            "LocalQueue/research/research",
            "ClusterQueue/product",
            "LocalQueue/product/product",
        ]
    );
    let queue = objects.iter().find(|p| p.object.display() == "ClusterQueue/research").expect("queue");
    assert_eq!(queue.object.body["spec"]["cohortName"], "h100k8s");
    assert_eq!(
        queue.object.body["spec"]["resourceGroups"][0]["flavors"][0]["resources"],
        json!([
            { "name": "cpu", "nominalQuota": 448, "borrowingLimit": 448 },
            { "name": "memory", "nominalQuota": "4096Gi", "borrowingLimit": "4096Gi" },
            { "name": "nvidia.com/gpu", "nominalQuota": 16, "borrowingLimit": 16 },
        ])
    );
    let ids = |planned: &Planned| planned.after.iter().map(|id| id.as_str().to_owned()).collect::<Vec<_>>();
    let topology = objects.iter().find(|p| p.object.kind == "Topology").expect("topology");
    assert_eq!(ids(topology).len(), 4, "the topology waits for every node's labels");
    let local = objects.iter().find(|p| p.object.kind == "LocalQueue").expect("local queue");
    assert_eq!(ids(local), ["kubernetes:k8s:ClusterQueue/research", "kubernetes:k8s:Namespace/research"]);
}

#[test]
fn kueue_before_0_15_gets_v1beta1_with_cohort() {
    let objects = assert_valid(&kube_model(&edited(&[("kueue_version: \"0.15.0\"", "kueue_version: \"0.14.2\"")])));
    let queue = objects.iter().find(|p| p.object.kind == "ClusterQueue").expect("queue");
    assert_eq!(queue.object.api_version, "kueue.x-k8s.io/v1beta1");
    assert_eq!(queue.object.body["spec"]["cohort"], "h100k8s");
    assert!(queue.object.body["spec"].get("cohortName").is_none());
}

#[test]
fn sharing_and_no_borrowing_stay_valid() {
    for sharing in [
        "{ mode: shard, per_gpu: 4 }",
        "{ mode: mig, mig_profiles: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb] }",
        "{ mode: mig, mig_profiles: [1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb] }",
    ] {
        let text = edited(&[
            ("gpu_sharing: { mode: none }", &format!("gpu_sharing: {sharing}")),
            ("guaranteed_gpus: 16, borrow: true, priority: 1000", "guaranteed_gpus: 16, borrow: false, priority: 1000"),
        ]);
        let objects = assert_valid(&kube_model(&text));
        let queue = objects.iter().find(|p| p.object.display() == "ClusterQueue/research").expect("queue");
        let resources = &queue.object.body["spec"]["resourceGroups"][0]["flavors"][0]["resources"];
        assert!(
            resources
                .as_array()
                .expect("list")
                .iter()
                .all(|r| r["borrowingLimit"] == 0 || r["borrowingLimit"] == "0Gi"),
            "{resources}"
        );
    }
}

#[test]
fn without_topology_aware_scheduling_flavors_name_no_topology() {
    let objects = assert_valid(&kube_model(&edited(&[("topology_aware: true", "topology_aware: false")])));
    assert!(objects.iter().all(|p| p.object.kind != "Topology"));
    let flavor = objects.iter().find(|p| p.object.kind == "ResourceFlavor").expect("flavor");
    assert!(flavor.object.body["spec"].get("topologyName").is_none());
}

#[test]
fn the_validator_catches_what_the_api_server_would_reject_or_prune() {
    let objects = objects_of(&kube_model(EXAMPLE));
    let mut queue = objects.iter().find(|p| p.object.kind == "ClusterQueue").expect("queue").object.clone();
    queue.body["spec"]["unknownField"] = json!(1);
    queue.body["spec"]["queueingStrategy"] = json!("Fastest");
    let errors = schema_errors(&queue);
    assert_eq!(errors.len(), 2, "{errors:?}");
    queue.body["spec"]["resourceGroups"][0]["flavors"][0]["resources"].as_array_mut().expect("list").pop();
    assert_eq!(cel_errors(&queue).len(), 1);
    let mut topology = objects.iter().find(|p| p.object.kind == "Topology").expect("topology").object.clone();
    topology.body["spec"]["levels"] =
        json!([{ "nodeLabel": "kubernetes.io/hostname" }, { "nodeLabel": "toolkit.io/su" }]);
    assert_eq!(cel_errors(&topology), ["the kubernetes.io/hostname label can only be used at the lowest level"]);
}

/// The values files and custom objects of the operators, as a golden file: what
/// `toolkit plan --out` writes and a GitOps user takes.
fn operator_snapshot(model: &Model) -> String {
    let kube = crate::model::kubernetes::expand(model).expect("Kubernetes");
    let mut text = String::new();
    for (chart, values) in charts(model, &kube) {
        text.push_str(&helm::values_text(&chart, &values));
        text.push_str("---\n");
    }
    if let Some(settings) = &kube.settings.network_operator {
        for planned in network_operator::objects(model, &kube, settings) {
            let mut errors = schema_errors(&planned.object);
            errors.extend(name_errors(&planned.object));
            assert!(errors.is_empty(), "{}: {errors:?}", planned.object.display());
            text.push_str(&planned.object.yaml());
            text.push_str("---\n");
        }
    }
    text
}

#[test]
fn operator_values_follow_the_software_section() {
    insta::assert_snapshot!("example_operators", operator_snapshot(&model_of(EXAMPLE)));
    // No host software section: the operator builds the driver.
    let operator_driver = edited(&[
        (
            "gpu_operator: { version: v25.10.0, namespace: gpu-operator }",
            "gpu_operator: { version: v25.10.0, driver_version: 570.195.03, kernel_modules: proprietary }",
        ),
        ("gpu_sharing: { mode: none }", "gpu_sharing: { mode: shard, per_gpu: 4 }"),
        ("rdma: shared }", "rdma: sriov, vfs_per_nic: 4 }"),
    ]);
    let operator_driver = operator_driver.split("# The host stack").next().expect("text").to_owned();
    insta::assert_snapshot!("operator_driver_time_slicing_sriov", operator_snapshot(&model_of(&operator_driver)));
    let mig = edited(&[(
        "gpu_sharing: { mode: none }",
        "gpu_sharing: { mode: mig, mig_profiles: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb] }",
    )]);
    insta::assert_snapshot!("mig_mixed", operator_snapshot(&model_of(&mig)));
}

#[test]
fn charts_install_from_the_control_host_after_their_values() {
    let resources = resources(&model_of(EXAMPLE));
    let on_ctl: Vec<(&str, Vec<&str>)> = resources
        .iter()
        .filter(|r| r.target() == "ctl01")
        .map(|r| (r.id.as_str(), r.depends_on.iter().map(ResourceId::as_str).collect()))
        .collect();
    assert_eq!(
        on_ctl,
        [
            ("ctl01:file:/etc/toolkit/helm/gpu-operator.yaml", vec![]),
            ("ctl01:command:helm-gpu-operator", vec!["ctl01:file:/etc/toolkit/helm/gpu-operator.yaml"]),
            ("ctl01:file:/etc/toolkit/helm/network-operator.yaml", vec![]),
            ("ctl01:command:helm-network-operator", vec!["ctl01:file:/etc/toolkit/helm/network-operator.yaml"]),
        ]
    );
    let install = resources.iter().find(|r| r.id.as_str() == "ctl01:command:helm-gpu-operator").expect("install");
    let Desired::Command { argv, creates, .. } = &*install.desired else { panic!("a command") };
    // Blueprint values are positional parameters, never part of the script.
    assert!(!argv[2].contains("v25.10.0") && !argv[2].contains("gpu-operator "), "{}", argv[2]);
    assert_eq!(&argv[3..6], ["helm", "gpu-operator", "gpu-operator"]);
    assert!(creates.as_deref().is_some_and(|marker| argv[2].ends_with(marker)));
}
