//! Tests of the kubeadm resources on the example `blueprints/h100-kubeadm.yaml`:
//! golden files, every kubeadm document against the schema written from the published
//! Go types (tests/fixtures/kubeadm), containerd loading the rendered config.toml,
//! the CA pin against openssl's, graph order across hosts, and secrets kept out of
//! everything but secret files.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use serde::Deserialize as _;
use serde_json::{Value, json};

use super::*;
use crate::resource::Desired;

const EXAMPLE: &str = "blueprints/h100-kubeadm.yaml";
const CA_CERT: &str = "inventories/h100-kubeadm/ca.crt";
const TOKEN: &str = "abcdef.0123456789abcdef";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn model() -> Model {
    let loaded = crate::blueprint::load::load(&root().join(EXAMPLE)).expect("the example loads");
    crate::model::expand(&loaded.blueprint).expect("expands")
}

fn secrets() -> KubeadmSecrets {
    KubeadmSecrets {
        ca_cert: Some(std::fs::read_to_string(root().join(CA_CERT)).expect("CA fixture")),
        ca_key: Some("the CA key".to_owned()),
        token: Some(TOKEN.to_owned()),
    }
}

fn rendered(secrets: &KubeadmSecrets) -> Vec<Resource> {
    render(&model(), None, secrets, &Renderer::embedded().expect("templates")).expect("renders")
}

fn find<'a>(resources: &'a [Resource], id: &str) -> &'a Resource {
    resources.iter().find(|resource| resource.id.as_str() == id).unwrap_or_else(|| panic!("no `{id}`"))
}

fn text<'a>(resources: &'a [Resource], target: &str, path: &str) -> &'a str {
    match &*find(resources, &format!("{target}:file:{path}")).desired {
        Desired::File { content, .. } => content.text(),
        other => panic!("{other:?}"),
    }
}

/// The YAML documents of a kubeadm file, as JSON.
fn documents(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml).map(|document| Value::deserialize(document).expect("YAML")).collect()
}

/// Schema errors of one document, validated against its kind's definition.
fn schema_errors(document: &Value) -> Vec<String> {
    let path = root().join("tests/fixtures/kubeadm/config.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("schema")).expect("JSON");
    let kind = document["kind"].as_str().expect("a kind");
    assert!(schema["definitions"].get(kind).is_some(), "no schema for `{kind}`");
    let wrapped = json!({ "$ref": format!("#/definitions/{kind}"), "definitions": schema["definitions"] });
    let validator = jsonschema::draft7::new(&wrapped).expect("the schema compiles");
    validator.iter_errors(document).map(|error| format!("{kind} {}: {error}", error.instance_path())).collect()
}

fn kubeadm_documents(resources: &[Resource]) -> Vec<Value> {
    let mut all = documents(text(resources, "ctl01", INIT_CONFIG));
    all.extend(documents(text(resources, "dgx01", JOIN_CONFIG)));
    all
}

#[test]
fn rendered_files_match_the_goldens() {
    let resources = rendered(&secrets());
    let mut snapshot = String::new();
    for (target, path) in [
        ("ctl01", MODULES),
        ("ctl01", SYSCTL),
        ("ctl01", CONTAINERD_CONFIG),
        ("dgx01", CONTAINERD_CONFIG),
        ("ctl01", KUBERNETES_SOURCE),
        ("ctl01", KUBERNETES_PIN),
        ("ctl01", INIT_CONFIG),
        ("dgx01", JOIN_CONFIG),
    ] {
        let _ = writeln!(snapshot, "==> {target}:{path}\n{}", text(&resources, target, path));
    }
    insta::assert_snapshot!("h100_kubeadm_files", snapshot);
}

#[test]
fn every_kubeadm_document_matches_the_published_types() {
    let resources = rendered(&secrets());
    let all = kubeadm_documents(&resources);
    let kinds: BTreeSet<&str> = all.iter().filter_map(|document| document["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["ClusterConfiguration", "InitConfiguration", "JoinConfiguration", "KubeletConfiguration"])
    );
    for document in &all {
        assert_eq!(schema_errors(document), Vec::<String>::new());
    }
    for worker in ["dgx02", "dgx03", "dgx04"] {
        for document in documents(text(&resources, worker, JOIN_CONFIG)) {
            assert_eq!(schema_errors(&document), Vec::<String>::new(), "{worker}");
        }
    }
}

#[test]
fn the_schema_check_fails_on_misspelled_and_old_style_fields() {
    let resources = rendered(&secrets());
    let all = kubeadm_documents(&resources);
    let by_kind = |kind: &str| all.iter().find(|d| d["kind"] == kind).cloned().expect("kind");
    let mut cluster = by_kind("ClusterConfiguration");
    cluster["networking"]["podSubnets"] = cluster["networking"]["podSubnet"].take();
    let mut init = by_kind("InitConfiguration");
    // v1beta3's map-style extra arguments.
    init["nodeRegistration"]["kubeletExtraArgs"] = json!({ "node-ip": "10.10.0.10" });
    let mut join = by_kind("JoinConfiguration");
    join["discovery"]["bootstrapToken"]["caCertHashes"] = json!(["sha256:XYZ"]);
    let mut kubelet = by_kind("KubeletConfiguration");
    kubelet["cgroupdriver"] = json!("systemd");
    let mut wrong_api = by_kind("InitConfiguration");
    wrong_api["apiVersion"] = json!("kubeadm.k8s.io/v1beta3");
    for (what, document) in [
        ("misspelled field", cluster),
        ("map-style kubeletExtraArgs", init),
        ("bad CA hash", join),
        ("case of a kubelet field", kubelet),
        ("v1beta3", wrong_api),
    ] {
        assert!(!schema_errors(&document).is_empty(), "{what} passed the schema");
    }
}

#[test]
fn the_ca_pin_is_the_one_openssl_computes() {
    let pin = secrets().ca_cert.as_deref().map(ca_cert_hash).expect("a cert").expect("a pin");
    let script = format!("openssl x509 -pubkey -noout -in {CA_CERT} | openssl pkey -pubin -outform der | sha256sum");
    let Ok(output) = Command::new("sh").args(["-c", &script]).current_dir(root()).output() else {
        eprintln!("skipped: no sh");
        return;
    };
    let printed = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || printed.starts_with("e3b0c442") {
        eprintln!("skipped: no openssl here");
        return;
    }
    let hex = printed.split_whitespace().next().expect("a digest");
    assert_eq!(pin, format!("sha256:{hex}"));
    let resources = rendered(&secrets());
    assert!(text(&resources, "dgx01", JOIN_CONFIG).contains(&pin));
}

/// containerd itself loads each rendered config.toml and reports the values the CRI
/// plugin took from it (the test fails on TOML containerd cannot decode, and on a
/// setting that lands in the wrong table).
#[test]
fn containerd_loads_the_rendered_configs() {
    if Command::new("containerd").arg("--version").output().is_err() {
        eprintln!("skipped: no containerd here (.ci/setup installs it)");
        return;
    }
    let resources = rendered(&secrets());
    let dir = tempfile::tempdir().expect("tempdir");
    for (target, runtime) in [("ctl01", "runc"), ("dgx01", "nvidia")] {
        let path = dir.path().join(format!("{target}.toml"));
        std::fs::write(&path, text(&resources, target, CONTAINERD_CONFIG)).expect("writes");
        let output = Command::new("containerd")
            .arg("--config")
            .arg(&path)
            .args(["config", "dump"])
            .output()
            .expect("containerd runs");
        let dump = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{target}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(dump.contains(&format!("default_runtime_name = \"{runtime}\"")), "{target}:\n{dump}");
        assert!(dump.contains(&format!("sandbox_image = \"{SANDBOX_IMAGE}\"")), "{target}");
        let runc = dump
            .split("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]")
            .nth(1)
            .expect("runc's options table");
        assert!(runc.lines().take(20).any(|line| line.trim() == "SystemdCgroup = true"), "{target}:\n{runc}");
        assert_eq!(dump.contains("BinaryName = \"/usr/bin/nvidia-container-runtime\""), runtime == "nvidia");
    }
    // What containerd rejects, the file check (the same command) rejects before the
    // file replaces a working one.
    let broken = text(&resources, "ctl01", CONTAINERD_CONFIG)
        .replace("default_runtime_name = \"runc\"", "default_runtime_name = 3");
    let path = dir.path().join("broken.toml");
    std::fs::write(&path, broken).expect("writes");
    let status = Command::new("containerd").arg("--config").arg(&path).args(["config", "dump"]).output().expect("runs");
    assert!(!status.status.success());
    let Desired::File { check: Some(check), .. } =
        &*find(&resources, &format!("ctl01:file:{CONTAINERD_CONFIG}")).desired
    else {
        panic!("config.toml has a check")
    };
    assert_eq!(check, &["containerd", "--config", "{}", "config", "dump"]);
}

#[test]
fn joins_wait_for_the_token_which_waits_for_init() {
    let resources = rendered(&secrets());
    let token = find(&resources, "ctl01:command:kubeadm-token");
    let init = find(&resources, "ctl01:command:kubeadm-init");
    assert!(token.depends_on.contains(&init.id));
    for name in ["ctl01:file:/etc/kubernetes/pki/ca.crt", "ctl01:file:/etc/kubernetes/pki/ca.key"] {
        assert!(init.depends_on.iter().any(|id| id.as_str() == name), "{name}");
    }
    for worker in ["dgx01", "dgx02", "dgx03", "dgx04"] {
        let join = find(&resources, &format!("{worker}:command:kubeadm-join"));
        assert!(join.depends_on.contains(&token.id), "{worker}");
        let Desired::Command { creates, argv, .. } = &*join.desired else { panic!("a command") };
        assert_eq!(creates.as_deref(), Some(KUBELET_CONF));
        assert_eq!(argv, &["kubeadm", "join", "--config", JOIN_CONFIG]);
    }
    let Desired::Command { creates, .. } = &*init.desired else { panic!("a command") };
    assert_eq!(creates.as_deref(), Some(ADMIN_CONF));
}

#[test]
fn the_token_and_the_ca_key_are_only_in_secret_files() {
    let resources = rendered(&secrets());
    for resource in &resources {
        match &*resource.desired {
            Desired::File { content, secret, path, .. } => {
                let holds = content.text().contains(TOKEN) || content.text().contains("the CA key");
                assert_eq!(holds, *secret, "{path}");
            }
            Desired::Command { argv, unless, description, .. } => {
                let words = argv.iter().chain(unless.iter().flatten()).chain([description]);
                assert!(words.clone().all(|word| !word.contains(TOKEN)), "{}", resource.id);
            }
            _ => {}
        }
    }
    // Without the inventory's secrets the files are planned unresolved: a deploy
    // refuses them instead of writing a config without a token or CA pin.
    let resources = rendered(&KubeadmSecrets::default());
    for (target, path) in
        [("ctl01", INIT_CONFIG), ("ctl01", TOKEN_FILE), ("ctl01", "/etc/kubernetes/pki/ca.key"), ("dgx01", JOIN_CONFIG)]
    {
        let Desired::File { content, .. } = &*find(&resources, &format!("{target}:file:{path}")).desired else {
            panic!("a file")
        };
        assert!(content.is_unresolved(), "{path}");
    }
}

#[test]
fn a_malformed_token_or_ca_stops_the_render_without_showing_it() {
    let renderer = Renderer::embedded().expect("templates");
    let bad_token = KubeadmSecrets { token: Some("Not-A-Token".to_owned()), ..secrets() };
    let error = render(&model(), None, &bad_token, &renderer).expect_err("refused").to_string();
    assert!(error.contains("bootstrap_token") && !error.contains("Not-A-Token"), "{error}");
    let bad_ca = KubeadmSecrets { ca_cert: Some("not a certificate".to_owned()), ..secrets() };
    let error = render(&model(), None, &bad_ca, &renderer).expect_err("refused").to_string();
    assert!(error.contains("ca_cert"), "{error}");
}
