//! Integration tests of the Kubernetes API client (`toolkit::kube`) against
//! `tests/support/kube_apiserver.py`: a stand-in that answers with kube-apiserver's
//! response shapes (tests/support/kube-responses/SOURCE.md), keeps field ownership as
//! server-side apply does, and validates what it is sent (Kueue kinds against their
//! CRDs, core kinds with `kubernetes-validate`). No real API server runs here: the
//! README says so. TLS is real (a CA made with openssl per test), and so are the
//! credentials: bearer tokens, client certificates and exec plugins.

use std::path::{Path, PathBuf};
use std::process::Command;

use data_encoding::BASE64;
use serde_json::{Value, json};
use toolkit::kube::{ApplyOptions, Connection, Deleted, KubeClient, KubeError};
use toolkit::resource::kube::KubeObject;

use crate::redfish::{Server, free_port, venv_program};

pub(crate) const TOKEN: &str = "k8s-Bearer-T0ken-never-shown";

/// A CA, a server certificate for 127.0.0.1 and client certificates (CN `toolkit-admin`, and
/// `system:node:dgx01` as a kubelet's), made with openssl.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub(crate) fn make() -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = crate::pki::TestCa::new(dir.path(), "/CN=test CA")?;
        ca.issue(
            "server",
            "/CN=kube-apiserver",
            "subjectAltName=DNS:api.lab.example,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        ca.issue("client", "/CN=toolkit-admin/O=system:masters", "extendedKeyUsage=clientAuth\n");
        // A kubelet's client certificate, as its TLS bootstrap gets it (kube_health.rs).
        ca.issue("node", "/CN=system:node:dgx01/O=system:nodes", "extendedKeyUsage=clientAuth\n");
        Some(Self { dir })
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn base64(&self, name: &str) -> String {
        BASE64.encode(&std::fs::read(self.path(name)).expect("pem"))
    }
}

/// The stand-in API server over TLS: bearer `TOKEN`, client certificates of the
/// test CA, the Kueue and Network Operator CRDs unless `crds` is false, `seed`
/// objects made by other managers first.
pub(crate) fn apiserver(pki: &Pki, crds: bool, seed: &Value, extra: &[&str]) -> Option<Server> {
    let python = venv_program("python")?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("seed.json"), seed.to_string()).expect("seed");
    let port = free_port();
    let mut args: Vec<String> = vec![
        root.join("tests/support/kube_apiserver.py").display().to_string(),
        "--port".into(),
        port.to_string(),
        "--cert".into(),
        pki.path("server.pem").display().to_string(),
        "--key".into(),
        pki.path("server.key").display().to_string(),
        "--client-ca".into(),
        pki.path("ca.pem").display().to_string(),
        "--token".into(),
        TOKEN.into(),
        "--seed".into(),
        "seed.json".into(),
    ];
    if crds {
        for folder in ["kueue-crds", "network-operator-crds"] {
            args.extend(["--crds".into(), root.join("tests/fixtures/kubernetes").join(folder).display().to_string()]);
        }
    }
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    Some(Server::start(&python, &args, port, dir))
}

/// What the server was sent, one JSON object per request.
pub(crate) fn requests(server: &Server) -> Vec<Value> {
    std::fs::read_to_string(server.dir.path().join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect()
}

/// A kubeconfig in `dir` with one context `test` whose user is `user` (YAML).
pub(crate) fn kubeconfig(dir: &Path, port: u16, cluster: &str, user: &str) -> PathBuf {
    let path = dir.join(format!("kubeconfig-{}", free_port()));
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: lab\n  cluster:\n    server: https://127.0.0.1:{port}\n{cluster}\
         users:\n- name: someone\n  user:\n{user}contexts:\n- name: test\n  context: {{cluster: lab, user: someone}}\n"
    );
    std::fs::write(&path, text).expect("kubeconfig");
    path
}

pub(crate) fn client(path: &Path) -> KubeClient {
    KubeClient::new(Connection::load(path, None).expect("kubeconfig loads")).expect("client")
}

/// The example blueprint's objects, by `Kind/[namespace/]name`.
fn example_objects() -> Vec<KubeObject> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = toolkit::blueprint::load(&root.join("blueprints/h100-kubernetes.yaml")).expect("loads");
    let model = toolkit::model::expand(&loaded.blueprint).expect("expands");
    toolkit::render::kubernetes::objects(&model).into_iter().map(|planned| planned.object).collect()
}

fn find<'a>(objects: &'a [KubeObject], display: &str) -> &'a KubeObject {
    objects.iter().find(|object| object.display() == display).unwrap_or_else(|| panic!("{display}"))
}

/// Nodes as their kubelets registered them: each with its hostname label, owned by `kubelet`.
fn kubelet_nodes(objects: &[KubeObject]) -> Value {
    let nodes: Vec<Value> = objects
        .iter()
        .filter(|object| object.kind == "Node")
        .map(|node| {
            json!({"path": node.path(), "manager": "kubelet", "operation": "Update", "object": {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node.name, "labels": {"kubernetes.io/hostname": node.name}}}})
        })
        .collect();
    Value::Array(nodes)
}

/// The kubelets' nodes, and someone's label on dgx01 by hand before toolkit (manager
/// `kubectl-label`): one of toolkit's labels with another value. Returns the seed,
/// the label and toolkit's value for it.
fn hand_labelled(objects: &[KubeObject]) -> (Value, String, String) {
    let mut seed = kubelet_nodes(objects);
    let dgx01 = find(objects, "Node/dgx01");
    let (label, value) = dgx01.body["metadata"]["labels"]
        .as_object()
        .expect("labels")
        .iter()
        .find(|(key, _)| key.starts_with("toolkit.io/"))
        .map(|(key, value)| (key.clone(), value.as_str().expect("text").to_owned()))
        .expect("a toolkit label");
    seed.as_array_mut().expect("seed").push(json!({"path": dgx01.path(), "manager": "kubectl-label", "object": {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx01", "labels": {&label: "hand-made"}}}}));
    (seed, label, value)
}

/// Schema errors of a request body: Kueue, mpi-operator and Network Operator kinds
/// against their CRD (strict: an unknown field is an error, as the server would prune it).
pub(crate) fn crd_errors(body: &Value) -> Vec<String> {
    let kind = body["kind"].as_str().expect("kind");
    let (group, version) = body["apiVersion"].as_str().expect("apiVersion").rsplit_once('/').expect("group");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubernetes");
    let folder = match group {
        "kueue.x-k8s.io" => "kueue-crds",
        "kubeflow.org" => "mpi-operator-crds",
        _ => "network-operator-crds",
    };
    let file = std::fs::read_dir(root.join(folder))
        .expect("CRDs")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "yaml"))
        .find(|path| {
            let crd: Value = serde_norway::from_str(&std::fs::read_to_string(path).expect("CRD")).expect("YAML");
            crd["spec"]["names"]["kind"] == kind
        })
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let crd: Value = serde_norway::from_str(&std::fs::read_to_string(file).expect("CRD")).expect("YAML");
    let served = crd["spec"]["versions"].as_array().expect("versions").iter().find(|v| v["name"] == version);
    let mut schema = served.expect("version served")["schema"]["openAPIV3Schema"].clone();
    close(&mut schema);
    let validator = jsonschema::draft4::new(&schema).expect("schema compiles");
    validator.iter_errors(body).map(|error| format!("{kind}: {}: {error}", error.instance_path())).collect()
}

fn close(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".to_owned(), json!(false));
            }
            map.values_mut().for_each(close);
        }
        Value::Array(items) => items.iter_mut().for_each(close),
        _ => {}
    }
}

#[tokio::test]
async fn apply_creates_updates_converges_conflicts_refuses_and_deletes() {
    let Some(pki) = Pki::make() else { return };
    let objects = example_objects();
    let (seed, label, value) = hand_labelled(&objects);
    let dgx01 = find(&objects, "Node/dgx01").clone();
    let Some(server) = apiserver(&pki, true, &seed, &[]) else { return };
    let config = kubeconfig(
        server.dir.path(),
        server.port,
        &format!("    certificate-authority-data: {}\n", pki.base64("ca.pem")),
        &format!("    token: {TOKEN}\n"),
    );
    let kube = client(&config);
    assert!(!format!("{kube:?}").contains(TOKEN), "the token never prints");

    // Create: everything but the hand-labelled node, in the renderer's order.
    let queue = find(&objects, "ClusterQueue/research");
    assert_eq!(kube.get(queue).await.expect("GET"), None, "absent before");
    for object in objects.iter().filter(|object| object.display() != "Node/dgx01") {
        let applied = kube.apply(object, ApplyOptions::default()).await.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(applied.created, object.kind != "Node", "{}: nodes exist already", object.display());
    }
    let live = kube.get(queue).await.expect("GET").expect("present");
    assert_eq!(toolkit::resource::kube::project(&queue.body, &live), queue.body, "as applied");
    let managers: Vec<&str> = live["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["toolkit"]);
    let version = live["metadata"]["resourceVersion"].clone();

    // No change: a second apply leaves the object as it is.
    let again = kube.apply(queue, ApplyOptions::default()).await.expect("apply again");
    assert!(!again.created);
    assert_eq!(again.object["metadata"]["resourceVersion"], version, "nothing changed");

    // Update.
    let mut smaller = queue.clone();
    let quota = smaller.body.pointer_mut("/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota").expect("quota");
    *quota = json!(8);
    let updated = kube.apply(&smaller, ApplyOptions::default()).await.expect("update");
    assert!(!updated.created);
    assert_ne!(updated.object["metadata"]["resourceVersion"], version);
    assert_eq!(updated.object.pointer("/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota"), Some(&json!(8)));

    // Conflict: the label someone set by hand is theirs until toolkit is told to take it.
    let error = kube.apply(&dgx01, ApplyOptions::default()).await.expect_err("409");
    let KubeError::Conflict { conflicts, .. } = &error else { panic!("{error}") };
    assert_eq!(conflicts.len(), 1, "{error}");
    assert_eq!(conflicts[0].field, format!(".metadata.labels.{label}"));
    assert_eq!(conflicts[0].manager, "\"kubectl-label\" using v1");
    assert!(error.to_string().contains("--force-conflicts"), "{error}");
    let forced = kube.apply(&dgx01, ApplyOptions { force: true, dry_run: false }).await.expect("forced");
    assert_eq!(forced.object["metadata"]["labels"][&label], json!(value));
    assert_eq!(forced.object["metadata"]["labels"]["kubernetes.io/hostname"], "dgx01", "the kubelet's label stays");

    // Invalid: a Topology whose levels repeat breaks the CRD's CEL rule.
    let topology = objects.iter().find(|object| object.kind == "Topology").expect("topology");
    let mut broken = topology.clone();
    let levels = broken.body.pointer_mut("/spec/levels").and_then(Value::as_array_mut).expect("levels");
    levels.insert(0, levels[0].clone());
    let error = kube.apply(&broken, ApplyOptions::default()).await.expect_err("422");
    let KubeError::Invalid { causes, .. } = &error else { panic!("{error}") };
    assert_eq!(causes[0].field, "spec.levels", "{error}");
    assert!(error.to_string().contains("must be unique"), "{error}");

    // Dry run: the server answers as for a create and keeps nothing.
    let mut extra = find(&objects, "WorkloadPriorityClass/product").clone();
    extra.name = "dry".into();
    extra.body["metadata"]["name"] = json!("dry");
    let dry = kube.apply(&extra, ApplyOptions { force: false, dry_run: true }).await.expect("dry run");
    assert!(dry.created);
    assert_eq!(kube.get(&extra).await.expect("GET"), None, "a dry run persists nothing");

    // Listed by toolkit's label: what it applied, and only that.
    let listed = kube.list_managed("kueue.x-k8s.io/v1beta2", "clusterqueues").await.expect("list").expect("served");
    assert_eq!(listed.len(), 2);
    assert_eq!(kube.list_managed("jobset.x-k8s.io/v1alpha2", "jobsets").await.expect("list"), None, "not served");

    // Delete, and again.
    assert_eq!(kube.delete(&queue.path(), false).await.expect("delete"), Deleted::Deleted);
    assert_eq!(kube.get(queue).await.expect("GET"), None);
    assert_eq!(kube.delete(&queue.path(), false).await.expect("delete again"), Deleted::Absent);

    // What was sent: server-side apply as toolkit, forced only once, bodies valid for their CRDs.
    let sent = requests(&server);
    let patches: Vec<&Value> = sent.iter().filter(|request| request["method"] == "PATCH").collect();
    assert!(patches.len() > objects.len(), "{sent:?}");
    for patch in &patches {
        assert_eq!(patch["content_type"], "application/apply-patch+yaml");
        assert_eq!(patch["query"]["fieldManager"], "toolkit");
        assert_eq!(patch["auth"], "bearer");
        let body = &patch["body"];
        assert!(body["metadata"].get("managedFields").is_none() && body["metadata"].get("resourceVersion").is_none());
        if body["apiVersion"].as_str().is_some_and(|version| version.contains('/')) && body["kind"] != "Topology" {
            assert_eq!(crd_errors(body), Vec::<String>::new());
        }
    }
    assert_eq!(patches.iter().filter(|patch| patch["query"]["force"] == "true").count(), 1);
    assert!(!std::fs::read_to_string(server.dir.path().join("server.log")).unwrap_or_default().contains(TOKEN));
}

#[tokio::test]
async fn client_certificates_exec_plugins_and_bad_credentials() {
    let Some(pki) = Pki::make() else { return };
    let Some(server) = apiserver(&pki, false, &json!([]), &[]) else { return };
    let dir = server.dir.path();
    let ca = format!("    certificate-authority-data: {}\n", pki.base64("ca.pem"));
    let namespace = KubeObject::new(
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}}),
    );
    let queue = KubeObject::new(
        "clusterqueues",
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "research"}}),
    );

    // Client certificate files, relative to the kubeconfig.
    for name in ["client.pem", "client.key"] {
        std::fs::copy(pki.path(name), dir.join(name)).expect("copy");
    }
    let certificate =
        client(&kubeconfig(dir, server.port, &ca, "    client-certificate: client.pem\n    client-key: client.key\n"));
    assert_eq!(certificate.get(&namespace).await.expect("authenticated by certificate"), None);
    // Kueue is not installed on this server: said so, with how to fix it.
    let error = certificate.get(&queue).await.expect_err("not served").to_string();
    assert!(
        error.contains("does not serve `ClusterQueue` in `kueue.x-k8s.io/v1beta2`: Kueue is not installed"),
        "{error}"
    );
    assert!(error.contains("kueue_version"), "{error}");

    // An exec plugin that prints a token: run once, cached (no expiry), given the cluster.
    let plugin = dir.join("token-plugin.sh");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\necho run >> \"$(dirname \"$0\")/plugin-runs\"\nprintf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$(dirname \"$0\")/exec-info.json\"\n\
             printf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{TOKEN}\"}}}}'\n"
        ),
    )
    .expect("plugin");
    make_executable(&plugin);
    let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./token-plugin.sh\n      \
                interactiveMode: Never\n      provideClusterInfo: true\n";
    let by_plugin = client(&kubeconfig(dir, server.port, &ca, exec));
    assert_eq!(by_plugin.get(&namespace).await.expect("token from the plugin"), None);
    assert_eq!(by_plugin.get(&namespace).await.expect("again"), None);
    assert_eq!(std::fs::read_to_string(dir.join("plugin-runs")).expect("runs").lines().count(), 1, "cached");
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("exec-info.json")).expect("info")).expect("JSON");
    assert_eq!(info["spec"]["interactive"], false);
    assert_eq!(info["spec"]["cluster"]["server"], format!("https://127.0.0.1:{}", server.port));
    assert_eq!(info["spec"]["cluster"]["certificate-authority-data"], pki.base64("ca.pem"));

    // A cached token the server no longer takes (401): the plugin runs again, once.
    let rotating = dir.join("rotating-plugin.sh");
    std::fs::write(
        &rotating,
        format!(
            "#!/bin/sh\nruns=\"$(dirname \"$0\")/rotating-runs\"\necho run >> \"$runs\"\n\
             if [ \"$(wc -l < \"$runs\")\" -eq 1 ]; then token=revoked-token; else token={TOKEN}; fi\n\
             printf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"%s\"}}}}' \"$token\"\n"
        ),
    )
    .expect("plugin");
    make_executable(&rotating);
    let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./rotating-plugin.sh\n      \
                interactiveMode: Never\n";
    let renewed = client(&kubeconfig(dir, server.port, &ca, exec));
    assert_eq!(renewed.get(&namespace).await.expect("renewed after a 401"), None);
    assert_eq!(std::fs::read_to_string(dir.join("rotating-runs")).expect("runs").lines().count(), 2);

    // An exec plugin that prints a client certificate and key.
    let cert_plugin = dir.join("cert-plugin.sh");
    let credential = json!({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {
        "clientCertificateData": std::fs::read_to_string(pki.path("client.pem")).expect("pem"),
        "clientKeyData": std::fs::read_to_string(pki.path("client.key")).expect("key"),
        "expirationTimestamp": "2099-01-01T00:00:00Z"}});
    std::fs::write(dir.join("credential.json"), credential.to_string()).expect("credential");
    std::fs::write(&cert_plugin, "#!/bin/sh\ncat \"$(dirname \"$0\")/credential.json\"\n").expect("plugin");
    make_executable(&cert_plugin);
    let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: ./cert-plugin.sh\n";
    assert_eq!(
        client(&kubeconfig(dir, server.port, &ca, exec)).get(&namespace).await.expect("certificate from the plugin"),
        None
    );

    // A plugin that fails: its stderr and install hint, never its output.
    let failing = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /nonexistent/plugin\n      \
                   interactiveMode: Never\n      installHint: install the cloud CLI\n";
    let error =
        client(&kubeconfig(dir, server.port, &ca, failing)).get(&namespace).await.expect_err("no plugin").to_string();
    assert!(
        error.contains("exec plugin `/nonexistent/plugin`: cannot run it") && error.contains("install the cloud CLI"),
        "{error}"
    );

    // A wrong token: 401 names the user and context, not the token.
    let error = client(&kubeconfig(dir, server.port, &ca, "    token: wrong-Secret-token\n"))
        .get(&namespace)
        .await
        .expect_err("401")
        .to_string();
    assert!(
        error.contains("401 Unauthorized") && error.contains("user `someone` (kubeconfig context `test`)"),
        "{error}"
    );
    assert!(!error.contains("wrong-Secret-token"), "{error}");

    // `tls-server-name`: the certificate is checked for that name, the address stays the server's.
    let named = format!("{ca}    tls-server-name: api.lab.example\n");
    let by_name = client(&kubeconfig(dir, server.port, &named, &format!("    token: {TOKEN}\n")));
    assert_eq!(by_name.get(&namespace).await.expect("verified as api.lab.example"), None);
    let wrong = format!("{ca}    tls-server-name: other.lab.example\n");
    let error = client(&kubeconfig(dir, server.port, &wrong, &format!("    token: {TOKEN}\n")))
        .get(&namespace)
        .await
        .expect_err("not the certificate's name")
        .to_string();
    assert!(error.contains("certificate"), "{error}");

    // Without the cluster's CA, the server's certificate is not trusted.
    let error = client(&kubeconfig(dir, server.port, "", &format!("    token: {TOKEN}\n")))
        .get(&namespace)
        .await
        .expect_err("untrusted")
        .to_string();
    assert!(error.contains("certificate"), "{error}");
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// `toolkit ARGS` from the repository root.
pub(crate) fn toolkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs toolkit")
}

/// `(name, action)` of each Kubernetes change of a JSON plan that is not a no-op.
fn kube_changes(output: &std::process::Output) -> Vec<(String, String)> {
    let plan: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("plan JSON: {}", String::from_utf8_lossy(&output.stderr)));
    plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|change| change["kind"] == "k8s" && change["action"] != "no-op")
        .map(|change| {
            (change["name"].as_str().expect("name").to_owned(), change["action"].as_str().expect("action").to_owned())
        })
        .collect()
}

#[test]
fn plan_and_deploy_the_example_through_the_inventorys_kubeconfig() {
    let Some(pki) = Pki::make() else { return };
    let objects = example_objects();
    let (seed, label, _) = hand_labelled(&objects);
    let Some(server) = apiserver(&pki, true, &seed, &[]) else { return };
    let dir = server.dir.path();
    let config = kubeconfig(
        dir,
        server.port,
        &format!("    certificate-authority-data: {}\n", pki.base64("ca.pem")),
        &format!("    token: {TOKEN}\n"),
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inventory = dir.join("inventory.yaml");
    let example = std::fs::read_to_string(root.join("inventories/h100-kubernetes.yaml")).expect("inventory");
    let example: Vec<&str> = example.lines().filter(|line| !line.starts_with("kubernetes:")).collect();
    let example = example.join("\n") + "\n";
    std::fs::write(&inventory, format!("{example}kubernetes: {{kubeconfig: {}}}\n", config.display()))
        .expect("inventory");
    let inventory = inventory.to_str().expect("utf8");
    let blueprint = "blueprints/h100-kubernetes.yaml";
    let plan = |blueprint: &str| toolkit(&["plan", blueprint, "-i", inventory, "--stage", "api", "--output", "json"]);

    // Nothing applied yet: every object is a create, the nodes' labels updates.
    let first = plan(blueprint);
    assert_eq!(first.status.code(), Some(2), "{}", String::from_utf8_lossy(&first.stderr));
    let changes = kube_changes(&first);
    assert!(changes.contains(&("ClusterQueue/research".into(), "create".into())), "{changes:?}");
    assert!(changes.contains(&("LocalQueue/product/product".into(), "create".into())), "{changes:?}");
    assert!(
        changes.contains(&("Node/dgx01".into(), "update".into())),
        "labels added to a registered node: {changes:?}"
    );
    assert_eq!(changes.len(), objects.len(), "{changes:?}");
    // The dry run met the hand-made label: the plan says so before any deploy.
    let warnings = String::from_utf8_lossy(&first.stderr);
    let conflict = format!(
        "warning: the API server would refuse it (dry run): Node/dgx01: apply conflicts with other managers: \
         `.metadata.labels.{label}` is owned by \"kubectl-label\" using v1"
    );
    assert!(warnings.contains(&conflict), "{warnings}");

    // Deploy refuses to take the label over unless told to.
    let deploy = |blueprint: &str, extra: &[&str]| {
        toolkit(&[&["deploy", blueprint, "-i", inventory, "--stage", "api", "--yes"][..], extra].concat())
    };
    let refused = deploy(blueprint, &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", String::from_utf8_lossy(&refused.stderr));
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(text.contains("--force-conflicts"), "{text}");
    let remaining = kube_changes(&plan(blueprint));
    assert!(remaining.contains(&("Node/dgx01".into(), "update".into())), "{remaining:?}");
    // What does not wait for the node's labels was applied; the Topology levelled on
    // them, its flavors and their queues were skipped.
    assert!(!remaining.iter().any(|(name, _)| name.starts_with("WorkloadPriorityClass/")), "{remaining:?}");
    assert!(remaining.contains(&("ClusterQueue/research".into(), "create".into())), "{remaining:?}");
    let applied = deploy(blueprint, &["--force-conflicts"]);
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&applied.stdout),
        String::from_utf8_lossy(&applied.stderr)
    );

    // Converged: the live objects are what the blueprint says.
    let second = plan(blueprint);
    assert_eq!(second.status.code(), Some(0), "{:?}", kube_changes(&second));

    // A tenant leaves: its queues and priority class are deleted, found by toolkit's
    // label on the live objects (its namespace stays: it holds the tenant's workloads).
    let mut text = std::fs::read_to_string(root.join(blueprint)).expect("blueprint");
    for line in [
        "  - { name: product, guaranteed_gpus: 16, borrow: true, priority: 2000 }\n",
        "        - { name: product, pkey: \"0x0a02\", tenants: [product] }\n",
    ] {
        assert!(text.contains(line), "update this test: {line}");
        text = text.replace(line, "");
    }
    let edited = dir.join("h100-kubernetes.yaml");
    std::fs::write(&edited, text).expect("blueprint");
    let edited = edited.to_str().expect("utf8");
    let third = plan(edited);
    let mut removed: Vec<(String, String)> = kube_changes(&third);
    removed.sort();
    assert_eq!(
        removed,
        [
            ("ClusterQueue/product".to_owned(), "remove".to_owned()),
            ("LocalQueue/product/product".to_owned(), "remove".to_owned()),
            ("WorkloadPriorityClass/product".to_owned(), "remove".to_owned()),
        ],
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    let pruned = deploy(edited, &[]);
    assert_eq!(pruned.status.code(), Some(0), "{}", String::from_utf8_lossy(&pruned.stderr));
    let deleted: Vec<String> = requests(&server)
        .iter()
        .filter(|request| request["method"] == "DELETE")
        .map(|request| request["path"].as_str().expect("path").to_owned())
        .collect();
    assert_eq!(
        deleted,
        [
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/product/localqueues/product",
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/product",
            "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses/product",
        ]
    );
    let fourth = plan(edited);
    assert_eq!(fourth.status.code(), Some(0), "{:?}", kube_changes(&fourth));
}
