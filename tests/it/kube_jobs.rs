//! `toolkit validate` on a Kubernetes blueprint against `tests/support/kube_apiserver.py`:
//! the node-scope validators run as Jobs, the stand-in finishes each with a pod whose
//! log is a real recorded output (tests/fixtures/parsers, SOURCE.md there) chosen by
//! validator and node, and the verdicts in the results JSON come from parsing those
//! logs. No real API server, kubelet or GPU is involved: the README says so.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::kube_api::{Pki, TOKEN, apiserver, client, crd_errors, kubeconfig, requests, toolkit};
use crate::redfish::Server;

const BLUEPRINT: &str = "blueprints/h100-kubernetes.yaml";

/// `--job-log VALIDATOR[@NODE]=<recorded file>:EXIT`.
fn job_log(target: &str, fixture: &str, exit: u32) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers").join(fixture);
    assert!(path.is_file(), "{}", path.display());
    format!("--job-log={target}={}:{exit}", path.display())
}

/// The example inventory with its `kubernetes` line pointing at `config`.
fn inventory(dir: &Path, config: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("inventories/h100-kubernetes.yaml")).expect("inventory");
    let kept: Vec<&str> = example.lines().filter(|line| !line.starts_with("kubernetes:")).collect();
    let path = dir.join("inventory.yaml");
    std::fs::write(&path, format!("{}\nkubernetes: {{kubeconfig: {}}}\n", kept.join("\n"), config.display()))
        .expect("inventory");
    path
}

/// A token kubeconfig for the stand-in, trusting its CA.
fn token_config(pki: &Pki, server: &Server, token: &str) -> PathBuf {
    kubeconfig(
        server.dir.path(),
        server.port,
        &format!("    certificate-authority-data: {}\n", pki.base64("ca.pem")),
        &format!("    token: {token}\n"),
    )
}

/// The stand-in API server started with `server_args`, a kubeconfig holding `token`
/// and the example inventory pointing at it.
struct Cluster {
    server: Server,
    config: PathBuf,
    inventory: PathBuf,
}

impl Cluster {
    fn start(pki: &Pki, token: &str, server_args: &[&str]) -> Option<Self> {
        let server = apiserver(pki, false, &Value::Array(Vec::new()), server_args)?;
        let config = token_config(pki, &server, token);
        let inventory = inventory(server.dir.path(), &config);
        Some(Self { server, config, inventory })
    }

    fn dir(&self) -> &Path {
        self.server.dir.path()
    }

    /// `toolkit validate` of the example blueprint with `extra` arguments, writing
    /// its results to `results.json` in the server's directory.
    fn validate(&self, extra: &[&str]) -> (std::process::Output, PathBuf) {
        let out = self.dir().join("results.json");
        let mut args = vec!["validate", BLUEPRINT, "-i", self.inventory.to_str().expect("utf8")];
        args.extend_from_slice(extra);
        args.extend(["--results", out.to_str().expect("utf8")]);
        (toolkit(&args), out)
    }
}

fn results(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("results written")).expect("results JSON")
}

/// `subject → verdict` of one validator in a results document.
fn verdicts(results: &Value, id: &str) -> Vec<(String, String)> {
    let validator = results["validators"].as_array().expect("validators").iter().find(|v| v["id"] == id);
    let validator = validator.unwrap_or_else(|| panic!("no {id}: {results}"));
    validator["subjects"]
        .as_array()
        .expect("subjects")
        .iter()
        .map(|subject| {
            (
                subject["subject"].as_str().expect("subject").to_owned(),
                subject["verdict"].as_str().expect("verdict").to_owned(),
            )
        })
        .collect()
}

fn text(output: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[tokio::test]
async fn validators_run_as_jobs_judged_on_their_logs_and_the_jobs_are_deleted() {
    let Some(pki) = Pki::make() else { return };
    let args = [
        job_log("gpu-inventory", "nvidia_smi_8xh100_table.txt", 0),
        job_log("nccl-single-node", "nccl_all_reduce_1node_8xh100_dgx_nvlink.txt", 0),
        // dgx04 prints what nccl-tests prints when the fabric manager is not running.
        job_log("nccl-single-node@dgx04", "nccl_all_reduce_1node_h100_fail_cuda_init.txt", 1),
        job_log("dcgm-diag", "dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt", 1),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(cluster) = Cluster::start(&pki, TOKEN, &args) else { return };
    let (run, out) =
        cluster.validate(&["--only", "gpu-inventory,nccl-single-node,dcgm-diag,storage-throughput,rail-links"]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let results = results(&out);
    let nodes = ["dgx01", "dgx02", "dgx03", "dgx04"];
    let all = |verdict: &str| nodes.iter().map(|node| ((*node).to_owned(), verdict.to_owned())).collect::<Vec<_>>();
    // The recorded nvidia-smi shows driver 560.35.03; the blueprint installs 570.124.06.
    assert_eq!(verdicts(&results, "gpu-inventory"), all("failed"), "{results:#}");
    let inventory_reason = results["validators"]
        .as_array()
        .and_then(|validators| validators.iter().find(|v| v["id"] == "gpu-inventory"))
        .and_then(|v| v["subjects"][0]["reason"].as_str())
        .unwrap_or_default();
    assert!(inventory_reason.contains("driver 560.35.03 is running"), "{inventory_reason}");
    let mut nccl = all("passed");
    nccl[3].1 = "failed".to_owned();
    assert_eq!(verdicts(&results, "nccl-single-node"), nccl, "{results:#}");
    assert_eq!(verdicts(&results, "dcgm-diag"), all("failed"), "{results:#}");
    // No image for fio and no `kubernetes` section for rail-links: skipped, saying why.
    let skipped = |id: &str| {
        let validator = results["validators"].as_array().expect("validators").iter().find(|v| v["id"] == id).cloned();
        validator.expect(id)["subjects"][0]["reason"].as_str().unwrap_or_default().to_owned()
    };
    assert!(skipped("storage-throughput").contains("--image storage-throughput=REF"), "{results:#}");
    assert!(skipped("rail-links").contains("no `kubernetes` section"), "{results:#}");
    // The bandwidth judged is the recorded one: 480.16 GB/s at 8 GiB.
    let busbw = results["validators"]
        .as_array()
        .expect("validators")
        .iter()
        .find(|v| v["id"] == "nccl-single-node")
        .and_then(|v| v["subjects"][0]["measurements"].as_array().cloned())
        .and_then(|measurements| measurements.into_iter().find(|m| m["unit"] == "GB/s"))
        .expect("busbw");
    assert_eq!(busbw["value"], 480.16, "{busbw}");

    let sent = requests(&cluster.server);
    let created: Vec<&Value> = sent
        .iter()
        .filter(|request| {
            request["method"] == "PATCH" && request["path"].as_str().is_some_and(|p| p.contains("/jobs/"))
        })
        .collect();
    assert_eq!(created.len(), 12, "one Job per node and validator");
    for request in &created {
        assert_eq!(request["query"]["fieldManager"], "toolkit");
        let job = &request["body"];
        let labels = &job["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "toolkit");
        let node = labels["toolkit.io/node"].as_str().expect("node label");
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["nodeSelector"]["kubernetes.io/hostname"], node);
        assert_eq!(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "8");
        assert!(labels["toolkit.io/run"].as_str().is_some_and(|run| !run.is_empty()));
    }
    let images: std::collections::BTreeSet<&str> = created
        .iter()
        .filter_map(|request| request["body"]["spec"]["template"]["spec"]["containers"][0]["image"].as_str())
        .collect();
    assert!(images.contains("nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"), "{images:?}");
    // Each Job was read, its pod's log fetched by container, and the Job deleted.
    let logs = sent.iter().filter(|request| request["path"].as_str().is_some_and(|p| p.ends_with("/log"))).count();
    assert_eq!(logs, 12);
    assert!(
        sent.iter()
            .filter(|r| r["path"].as_str().is_some_and(|p| p.ends_with("/log")))
            .all(|r| r["query"]["container"] == "validator")
    );
    let mut deleted: Vec<&str> = sent
        .iter()
        .filter(|request| request["method"] == "DELETE")
        .map(|request| {
            assert_eq!(request["query"]["propagationPolicy"], "Background");
            request["path"].as_str().expect("path")
        })
        .collect();
    let mut paths: Vec<&str> = created.iter().map(|request| request["path"].as_str().expect("path")).collect();
    deleted.sort_unstable();
    paths.sort_unstable();
    assert_eq!(deleted, paths);
    let kube = client(&cluster.config);
    let left = kube.list_selected("/apis/batch/v1/jobs", "app.kubernetes.io/managed-by=toolkit").await.expect("list");
    assert!(left.is_empty(), "{left:?}");
    let pods = kube.list_selected("/api/v1/pods", "app.kubernetes.io/managed-by=toolkit").await.expect("list");
    assert!(pods.is_empty(), "{pods:?}");
}

#[test]
fn a_job_that_never_finishes_is_named_deleted_and_an_error() {
    let Some(pki) = Pki::make() else { return };
    let Some(cluster) = Cluster::start(&pki, TOKEN, &["--job-hang", "gpu-inventory"]) else { return };
    // A copy of the validator with a one-second timeout, as `--validators` allows.
    let validators = cluster.dir().join("validators");
    std::fs::create_dir(&validators).expect("dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = std::fs::read_to_string(root.join("validators/gpu-inventory.yaml")).expect("spec");
    assert!(spec.contains("\ntimeout: 60\n"), "update this test");
    std::fs::write(validators.join("gpu-inventory.yaml"), spec.replace("\ntimeout: 60\n", "\ntimeout: 1\n"))
        .expect("spec");
    let (run, out) = cluster.validate(&[
        "--only",
        "gpu-inventory",
        "--nodes",
        "dgx01",
        "--validators",
        validators.to_str().expect("utf8"),
        "--kube-start-timeout",
        "1",
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let results = results(&out);
    let subject = &results["validators"][0]["subjects"][0];
    assert_eq!(subject["verdict"], "error", "{results:#}");
    let reason = subject["reason"].as_str().expect("reason");
    assert!(reason.contains("Job `toolkit-validate/gpu-inventory-dgx01-"), "{reason}");
    assert!(reason.contains("did not finish within 2 s"), "{reason}");
    let sent = requests(&cluster.server);
    let created: Vec<&str> = sent
        .iter()
        .filter(|r| r["method"] == "PATCH" && r["path"].as_str().is_some_and(|p| p.contains("/jobs/")))
        .filter_map(|r| r["path"].as_str())
        .collect();
    let deleted: Vec<&str> =
        sent.iter().filter(|r| r["method"] == "DELETE").filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(created.len(), 1);
    assert_eq!(deleted, created);
}

#[test]
fn bad_credentials_or_a_missing_kubeconfig_stop_before_any_job() {
    let Some(pki) = Pki::make() else { return };
    let Some(cluster) = Cluster::start(&pki, "expired-token", &[]) else { return };
    let (run, out) = cluster.validate(&[]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let said = text(&run);
    assert!(said.contains("401 Unauthorized") && said.contains("user `someone`"), "{said}");
    assert!(!said.contains("expired-token"), "the token is never shown: {said}");
    assert!(!out.exists(), "no results from a run that could not start");
    assert!(!requests(&cluster.server).iter().any(|r| r["path"].as_str().is_some_and(|p| p.contains("/jobs"))));

    // The example inventory as shipped: its kubeconfig is the user's to write.
    let run = toolkit(&[
        "validate",
        BLUEPRINT,
        "-i",
        "inventories/h100-kubernetes.yaml",
        "--results",
        out.to_str().expect("utf8"),
    ]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let said = text(&run);
    assert!(said.contains("inventories/h100-kubernetes.kubeconfig") && said.contains("does not exist"), "{said}");
}

#[test]
fn multi_node_nccl_runs_as_an_mpijob_that_validates_against_the_mpi_operators_crd() {
    let Some(pki) = Pki::make() else { return };
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubernetes/mpi-operator-crds");
    let recorded = job_log("nccl-multi-node", "nccl_all_reduce_2node_h100_ib_ndr_xe9680.txt", 0);
    let crds = crds.to_str().expect("utf8");
    let Some(cluster) = Cluster::start(&pki, TOKEN, &["--crds", crds, &recorded]) else { return };
    // Two nodes, as the recorded run (2x 8 H100, 16 ranks).
    let (run, out) = cluster.validate(&["--only", "nccl-multi-node", "--nodes", "dgx01,dgx02"]);
    let results = results(&out);
    assert_eq!(
        verdicts(&results, "nccl-multi-node"),
        [("h100k8s".to_owned(), "passed".to_owned())],
        "{results:#}\n{}",
        text(&run)
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let sent = requests(&cluster.server);
    let created: Vec<&Value> = sent
        .iter()
        .filter(|r| r["method"] == "PATCH" && r["path"].as_str().is_some_and(|p| p.contains("/mpijobs/")))
        .collect();
    assert_eq!(created.len(), 1);
    let mpijob = &created[0]["body"];
    assert_eq!(crd_errors(mpijob), Vec::<String>::new(), "{mpijob:#}");
    let spec = &mpijob["spec"];
    assert_eq!(spec["slotsPerWorker"], 8);
    assert_eq!(spec["mpiReplicaSpecs"]["Worker"]["replicas"], 2);
    let launcher = &spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0];
    let script = launcher["command"].as_array().and_then(|argv| argv.last()).and_then(Value::as_str).expect("script");
    assert!(script.starts_with("mpirun --allow-run-as-root -np 16 "), "{script}");
    let worker = &spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"];
    assert_eq!(
        worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
            [0]["values"],
        serde_json::json!(["dgx01", "dgx02"])
    );
    let deleted: Vec<&str> =
        sent.iter().filter(|r| r["method"] == "DELETE").filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(deleted, [created[0]["path"].as_str().expect("path")]);
    // Its log was read from the launcher's pod.
    assert!(sent.iter().any(|r| r["path"].as_str().is_some_and(|p| p.contains("-launcher-") && p.ends_with("/log"))));
}

#[test]
fn a_mutated_mpijob_fails_the_crd_check() {
    // The check above can fail: a field the CRD does not have, and a wrong type.
    let argv = vec!["mpirun".to_owned()];
    let request = toolkit::validate::kube::JobRequest {
        name: "nccl-multi-node-r-0",
        namespace: "toolkit-validate",
        run_id: "r",
        validator: "nccl-multi-node",
        node: "ctl01",
        image: "example/nccl-tests:1",
        argv: &argv,
        gpus: 8,
        privileged: false,
        host_paths: &[],
        deadline_seconds: 60,
    };
    let mut body = toolkit::validate::kube::mpijob_object(&request, &["dgx01".to_owned()]).body;
    assert_eq!(crd_errors(&body), Vec::<String>::new());
    body["spec"]["slotsPerWorker"] = Value::from("8");
    body["spec"]["runPolicy"]["cleanupPolicy"] = Value::from("All");
    assert_eq!(crd_errors(&body).len(), 2, "{:?}", crd_errors(&body));
}

#[test]
fn validator_jobs_validate_with_kubernetes_validate_strict() {
    let Some(validate) = crate::redfish::venv_program("kubernetes-validate") else { return };
    let argv: Vec<String> = ["timeout", "--kill-after=5", "900", "sh", "-c", "fio --output-format=json"]
        .iter()
        .map(|word| (*word).to_owned())
        .collect();
    let paths = ["/var/tmp".to_owned(), "/run/log/journal".to_owned()];
    let job = |gpus: u32, privileged: bool, host_paths: &[String]| {
        toolkit::validate::kube::job_object(&toolkit::validate::kube::JobRequest {
            name: "storage-throughput-dgx01-a1b2c3d4-0",
            namespace: "toolkit-validate",
            run_id: "a1b2c3d4",
            validator: "storage-throughput",
            node: "dgx01",
            image: "example/fio:3.36",
            argv: &argv,
            gpus,
            privileged,
            host_paths,
            deadline_seconds: 1200,
        })
        .yaml()
    };
    let documents = [job(0, false, &paths), job(8, true, &[])];
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("jobs.yaml");
    std::fs::write(&file, documents.join("---\n")).expect("writes");
    let output = std::process::Command::new(&validate)
        .args(["-k", "1.33", "--strict", file.to_str().expect("utf8")])
        .output()
        .expect("runs kubernetes-validate");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(said.matches("passed").count(), 2, "{said}");
    // A field a Job does not have fails the same check.
    std::fs::write(&file, documents[0].replace("backoffLimit: 0", "backoffLimit: 0\n  retries: 3")).expect("writes");
    let broken = std::process::Command::new(&validate)
        .args(["-k", "1.33", "--strict", file.to_str().expect("utf8")])
        .output()
        .expect("runs");
    assert_eq!(broken.status.code(), Some(1), "{}", String::from_utf8_lossy(&broken.stdout));
}
