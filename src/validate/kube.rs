//! Validators as Kubernetes Jobs: when the scheduler is Kubernetes, each command a
//! node-scope validator would run over SSH runs in a `batch/v1` Job pinned to the
//! node, and its pod's log is the output the same parsers read.
//!
//! Stage: validate (Kubernetes). Input: a [`KubeClient`], the [`Model`] (GPUs per
//! node) and [`JobSettings`] (namespace, run id, image overrides). Output:
//! [`JobHosts`], the runner's [`Hosts`]: per validator a [`JobConnector`] whose
//! executor creates the Job (server-side apply), polls it until `Complete` or
//! `Failed`, reads the log of its pod's container and deletes the Job (background
//! propagation, so its pods go with it). A Job that outlives the validator's timeout
//! plus the start-up allowance is deleted and reported by name; Jobs a Ctrl-C left
//! behind are deleted by [`JobHosts::delete_leftovers`].
//!
//! Node-scope validators run as Jobs; a validator whose `kubernetes` section says `mpi`
//! (NCCL across nodes) runs as one Kubeflow `MPIJob` (`kubeflow.org/v2beta1`): MPI is
//! what nccl-tests needs across nodes, and the mpi-operator starts the workers, writes
//! the hostfile and runs `mpirun` in a launcher whose log is the output; a JobSet would
//! leave all of that to toolkit. Other multi-node validators (IOR, mdtest, the pairs)
//! go through Slurm and are skipped on Kubernetes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::catalog::Catalog;
use super::run::{Disposition, Hosts, Planned};
use super::spec::{Requirement, SpecScope, ValidatorSpec};
use crate::kube::{ApplyOptions, KubeClient, KubeError};
use crate::model::Model;
use crate::resource::kube::{FIELD_MANAGER, KubeObject, MANAGED_BY_LABEL};
use crate::transport::{Connector, Executor, ExitStatus, Output, TransportError};

/// The namespace validator Jobs run in unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "toolkit-validate";

/// The container that runs the command in each Job.
pub const CONTAINER: &str = "validator";

/// Label naming the run a Job belongs to.
pub const RUN_LABEL: &str = "toolkit.io/run";

/// Label naming the validator a Job runs.
pub const VALIDATOR_LABEL: &str = "toolkit.io/validator";

/// Label naming the node a Job runs on.
pub const NODE_LABEL: &str = "toolkit.io/node";

/// How a run's Jobs are made.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// Namespace of the Jobs (applied at the start of the run).
    pub namespace: String,
    /// Distinguishes this run's Jobs from another's (lowercase letters and digits).
    pub run_id: String,
    /// `--image ID=REF`: the image of a validator for this run.
    pub images: BTreeMap<String, String>,
    /// Seconds allowed for a Job's pod to be scheduled and its image pulled, on top
    /// of the validator's timeout.
    pub start_seconds: u64,
    /// Pause between two reads of a Job's status.
    pub poll: Duration,
    /// `--nodes`: the nodes an MPIJob's workers run on (default: every GPU node).
    pub nodes: Option<BTreeSet<String>>,
}

/// Label the mpi-operator sets on an MPIJob's pods: its name.
const MPI_JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";

/// Label the mpi-operator sets on an MPIJob's pods: `launcher` or `worker`.
const MPI_JOB_ROLE_LABEL: &str = "training.kubeflow.org/job-role";

/// Replaces, in every validator with a Kubernetes `command`, the command it runs; an
/// MPI validator no longer requires Slurm (its MPIJob replaces `srun`).
pub fn adapt(catalog: &mut Catalog) {
    for spec in &mut catalog.specs {
        let Some(kubernetes) = &spec.kubernetes else { continue };
        if let Some(command) = &kubernetes.command {
            spec.command = Some(command.clone());
            spec.steps.clear();
        }
        if kubernetes.mpi {
            spec.requires.retain(|requirement| *requirement != Requirement::Slurm);
        }
    }
}

/// What a validator's Jobs look like.
#[derive(Debug, Clone)]
struct Template {
    validator: String,
    /// One MPIJob over these nodes instead of a Job on the subject's node.
    mpi_workers: Option<Vec<String>>,
    image: String,
    privileged: bool,
    host_paths: Vec<String>,
    gpus: bool,
    timeout: u64,
}

/// State every executor of a run shares.
#[derive(Debug)]
struct Shared {
    client: KubeClient,
    settings: JobSettings,
    gpus: BTreeMap<String, u32>,
    /// Jobs created and not yet deleted.
    live: Mutex<BTreeSet<(Workload, String)>>,
    sequence: AtomicUsize,
}

/// The runner's [`Hosts`] on Kubernetes.
#[derive(Debug, Clone)]
pub struct JobHosts {
    shared: Arc<Shared>,
}

impl JobHosts {
    /// Jobs for `model`'s nodes through `client`.
    #[must_use]
    pub fn new(client: KubeClient, model: &Model, settings: JobSettings) -> Self {
        let gpus = model.nodes.iter().map(|node| (node.name.clone(), model.groups[node.group].gpus_per_node)).collect();
        Self {
            shared: Arc::new(Shared {
                client,
                settings,
                gpus,
                live: Mutex::new(BTreeSet::new()),
                sequence: AtomicUsize::new(0),
            }),
        }
    }

    /// Applies the run's namespace (labelled as toolkit's).
    ///
    /// # Errors
    /// The API server's refusal or no answer (auth, transport).
    pub async fn prepare(&self) -> Result<(), KubeError> {
        let namespace = KubeObject::new(
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": self.shared.settings.namespace, "labels": {MANAGED_BY_LABEL: FIELD_MANAGER}}}),
        );
        self.shared.client.apply(&namespace, ApplyOptions::default()).await.map(|_| ())
    }

    /// Deletes the Jobs still there (a Ctrl-C or a timeout of the runner dropped
    /// their executors); returns what could not be deleted.
    pub async fn delete_leftovers(&self) -> Vec<String> {
        let names: Vec<(Workload, String)> =
            self.shared.live.lock().map(|live| live.iter().cloned().collect()).unwrap_or_default();
        let mut failed = Vec::new();
        for (kind, name) in names {
            if let Err(error) = self.shared.delete(kind, &name).await {
                failed.push(format!("{} `{}/{name}`: {error}", kind.kind(), self.shared.settings.namespace));
            }
        }
        failed
    }
}

impl Hosts for JobHosts {
    type Connector<'a> = JobConnector;

    fn for_validator(&self, spec: &ValidatorSpec) -> JobConnector {
        let kubernetes = spec.kubernetes.clone();
        let image = self
            .shared
            .settings
            .images
            .get(&spec.id)
            .cloned()
            .or_else(|| kubernetes.as_ref().and_then(|section| section.image.clone()))
            .unwrap_or_default();
        let mpi_workers = kubernetes.as_ref().is_some_and(|section| section.mpi).then(|| {
            let selected = self.shared.settings.nodes.as_ref();
            let gpu_nodes = self.shared.gpus.iter().filter(|(_, gpus)| **gpus > 0);
            gpu_nodes
                .map(|(name, _)| name.clone())
                .filter(|name| selected.is_none_or(|nodes| nodes.contains(name)))
                .collect()
        });
        JobConnector {
            shared: Arc::clone(&self.shared),
            template: Arc::new(Template {
                validator: spec.id.clone(),
                mpi_workers,
                image,
                privileged: kubernetes.as_ref().is_some_and(|section| section.privileged),
                host_paths: kubernetes.map(|section| section.host_paths).unwrap_or_default(),
                gpus: spec
                    .requires
                    .iter()
                    .any(|requirement| matches!(requirement, Requirement::Gpu | Requirement::Nvlink)),
                timeout: spec.timeout,
            }),
        }
    }

    fn looks_up_programs(&self) -> bool {
        false
    }

    fn grace_seconds(&self) -> u64 {
        // Beyond the executor's own deadline, so the Job is deleted and named first.
        self.shared.settings.start_seconds + 15
    }
}

/// One validator's Jobs.
#[derive(Debug, Clone)]
pub struct JobConnector {
    shared: Arc<Shared>,
    template: Arc<Template>,
}

impl Connector for JobConnector {
    type Executor = JobExecutor;

    async fn connect(&self, host: &str) -> Result<Arc<JobExecutor>, Arc<TransportError>> {
        Ok(Arc::new(JobExecutor {
            shared: Arc::clone(&self.shared),
            template: Arc::clone(&self.template),
            node: host.to_owned(),
        }))
    }
}

/// Runs commands on one node as Jobs.
#[derive(Debug)]
pub struct JobExecutor {
    shared: Arc<Shared>,
    template: Arc<Template>,
    node: String,
}

impl Executor for JobExecutor {
    fn host(&self) -> &str {
        &self.node
    }

    async fn exec(&self, argv: &[String]) -> Result<Output, TransportError> {
        let sequence = self.shared.sequence.fetch_add(1, Ordering::Relaxed);
        let name = job_name(&self.template.validator, &self.node, &self.shared.settings.run_id, sequence);
        // An MPIJob's subject is the cluster: each worker holds its node's GPUs (the
        // selected GPU nodes are alike, as the srun command assumes too).
        let gpu_node = self.template.mpi_workers.as_ref().and_then(|workers| workers.first()).unwrap_or(&self.node);
        let gpus = if self.template.gpus { self.shared.gpus.get(gpu_node).copied().unwrap_or(0) } else { 0 };
        let deadline = self.template.timeout + self.shared.settings.start_seconds;
        let request = JobRequest {
            name: &name,
            namespace: &self.shared.settings.namespace,
            run_id: &self.shared.settings.run_id,
            validator: &self.template.validator,
            node: &self.node,
            image: &self.template.image,
            argv,
            gpus,
            privileged: self.template.privileged,
            host_paths: &self.template.host_paths,
            deadline_seconds: deadline,
        };
        let (job, kind) = match &self.template.mpi_workers {
            Some(workers) => (mpijob_object(&request, workers), Workload::MpiJob),
            None => (job_object(&request), Workload::Job),
        };
        let fail = |reason: String| TransportError::Platform { host: self.node.clone(), reason };
        let display = format!("{} `{}/{name}`", kind.kind(), self.shared.settings.namespace);
        self.shared.client.apply(&job, ApplyOptions::default()).await.map_err(|error| fail(error.to_string()))?;
        if let Ok(mut live) = self.shared.live.lock() {
            live.insert((kind, name.clone()));
        }
        let finished = self.shared.wait(kind, &name, Duration::from_secs(deadline)).await;
        let outcome = match finished {
            Ok(Some(job)) => {
                self.shared.collect(kind, &name, &job).await.map_err(|error| fail(format!("{display}: {error}")))
            }
            Ok(None) => Err(fail(format!(
                "{display} did not finish within {deadline} s (the validator's {} s and {} s to schedule and \
                 pull `{}`); it was deleted: see `kubectl -n {} describe {} {name}` next time, or raise \
                 `--kube-start-timeout`",
                self.template.timeout,
                self.shared.settings.start_seconds,
                self.template.image,
                self.shared.settings.namespace,
                kind.kind().to_lowercase()
            ))),
            Err(error) => Err(fail(format!("{display}: {error}"))),
        };
        if let Err(error) = self.shared.delete(kind, &name).await {
            tracing::warn!(job = name, "validator {} not deleted: {error}", kind.kind());
        }
        outcome
    }

    async fn exec_with_input(&self, _argv: &[String], _input: &[u8]) -> Result<Output, TransportError> {
        Err(TransportError::Platform {
            host: self.node.clone(),
            reason: "a Kubernetes Job takes no standard input".to_owned(),
        })
    }
}

/// What runs a command: a Job on one node, or an MPIJob over several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Workload {
    Job,
    MpiJob,
}

impl Workload {
    const fn kind(self) -> &'static str {
        match self {
            Self::Job => "Job",
            Self::MpiJob => "MPIJob",
        }
    }
}

impl Shared {
    fn path(&self, kind: Workload, name: &str) -> String {
        let namespace = &self.settings.namespace;
        match kind {
            Workload::Job => format!("/apis/batch/v1/namespaces/{namespace}/jobs/{name}"),
            Workload::MpiJob => format!("/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs/{name}"),
        }
    }

    /// The Job once a `Complete` (MPIJob: `Succeeded`) or `Failed` condition is true;
    /// `None` at the deadline.
    async fn wait(&self, kind: Workload, name: &str, limit: Duration) -> Result<Option<Value>, KubeError> {
        let started = Instant::now();
        loop {
            let job = self.client.get_path(&self.path(kind, name)).await?;
            if let Some(job) = job
                && finished(&job).is_some()
            {
                return Ok(Some(job));
            }
            if started.elapsed() >= limit {
                return Ok(None);
            }
            tokio::time::sleep(self.settings.poll.min(limit.saturating_sub(started.elapsed()))).await;
        }
    }

    /// The output of a finished Job: its pod's log and its container's exit code (an
    /// MPIJob's: its launcher's).
    async fn collect(&self, kind: Workload, name: &str, job: &Value) -> Result<Output, KubeError> {
        let path = format!("/api/v1/namespaces/{}/pods", self.settings.namespace);
        let selector = match kind {
            Workload::Job => format!("batch.kubernetes.io/job-name={name}"),
            Workload::MpiJob => format!("{MPI_JOB_NAME_LABEL}={name},{MPI_JOB_ROLE_LABEL}=launcher"),
        };
        let mut pods = self.client.list_selected(&path, &selector).await?;
        if pods.is_empty() && kind == Workload::Job {
            // Before Kubernetes 1.27 the Job controller sets only the legacy label.
            pods = self.client.list_selected(&path, &format!("job-name={name}")).await?;
        }
        let (failed, reason) = finished(job).unwrap_or((false, String::new()));
        // backoffLimit 0: one pod; the newest if a node lost one and it was recreated.
        pods.sort_by_key(|pod| text(pod, "/metadata/creationTimestamp"));
        let Some(pod) = pods.last() else {
            return Ok(Output {
                status: ExitStatus::Unknown,
                stdout: Vec::new(),
                stderr: format!("the Job {} without a pod: {reason}", if failed { "failed" } else { "ended" })
                    .into_bytes(),
            });
        };
        let pod_name = text(pod, "/metadata/name");
        let code = pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .and_then(|statuses| statuses.iter().find(|status| status["name"] == CONTAINER))
            .and_then(|status| status.pointer("/state/terminated/exitCode"))
            .and_then(Value::as_u64)
            .and_then(|code| u32::try_from(code).ok());
        let log = self.client.pod_log(&self.settings.namespace, &pod_name, CONTAINER).await?;
        let status = code.map_or(ExitStatus::Unknown, ExitStatus::Code);
        let stderr =
            if failed && code.is_none() { format!("pod `{pod_name}`: {reason}").into_bytes() } else { Vec::new() };
        Ok(Output { status, stdout: log, stderr })
    }

    async fn delete(&self, kind: Workload, name: &str) -> Result<(), KubeError> {
        self.client.delete(&self.path(kind, name), false).await?;
        if let Ok(mut live) = self.live.lock() {
            live.remove(&(kind, name.to_owned()));
        }
        Ok(())
    }
}

/// `Some((failed, "reason: message"))` once the Job's `Complete` (an MPIJob's `Succeeded`) or `Failed`
/// condition is true.
fn finished(job: &Value) -> Option<(bool, String)> {
    job.pointer("/status/conditions")?.as_array()?.iter().find_map(|condition| {
        let kind = condition["type"].as_str()?;
        (condition["status"] == "True" && matches!(kind, "Complete" | "Succeeded" | "Failed"))
            .then(|| (kind == "Failed", format!("{}: {}", text(condition, "/reason"), text(condition, "/message"))))
    })
}

fn text(value: &Value, pointer: &str) -> String {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Everything one Job is made from.
#[derive(Debug)]
pub struct JobRequest<'a> {
    /// Its name (from [`job_name`]).
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// The run it belongs to.
    pub run_id: &'a str,
    /// The validator it runs.
    pub validator: &'a str,
    /// The node it runs on (its `kubernetes.io/hostname`).
    pub node: &'a str,
    /// The container image.
    pub image: &'a str,
    /// The command (the runner's argv: `timeout … sh -c SCRIPT`).
    pub argv: &'a [String],
    /// `nvidia.com/gpu` to request (0: none).
    pub gpus: u32,
    /// Run the container privileged.
    pub privileged: bool,
    /// Host directories mounted at the same path.
    pub host_paths: &'a [String],
    /// `activeDeadlineSeconds`: the API server ends the Job even if toolkit is gone.
    pub deadline_seconds: u64,
}

/// Seconds a finished Job is kept if toolkit could not delete it.
const TTL_AFTER_FINISHED_SECONDS: u64 = 3600;

/// The `batch/v1` Job of one command on one node.
#[must_use]
pub fn job_object(request: &JobRequest<'_>) -> KubeObject {
    let labels = json!({
        MANAGED_BY_LABEL: FIELD_MANAGER,
        RUN_LABEL: request.run_id,
        VALIDATOR_LABEL: request.validator,
        NODE_LABEL: request.node,
    });
    let mut container = json!({
        "name": CONTAINER,
        "image": request.image,
        "command": request.argv,
    });
    if request.gpus > 0 {
        let gpus = request.gpus.to_string();
        container["resources"] = json!({"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}});
    }
    if request.privileged {
        container["securityContext"] = json!({"privileged": true});
    }
    let volume_name = |index: usize| format!("host-{index}");
    if !request.host_paths.is_empty() {
        container["volumeMounts"] = request
            .host_paths
            .iter()
            .enumerate()
            .map(|(index, path)| json!({"name": volume_name(index), "mountPath": path}))
            .collect();
    }
    let mut pod = json!({
        "restartPolicy": "Never",
        // The scheduler places it (and waits for GPUs in use) on exactly this node.
        "nodeSelector": {"kubernetes.io/hostname": request.node},
        // GPU nodes are often tainted for GPU work only; the test must run there anyway.
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
    });
    if !request.host_paths.is_empty() {
        pod["volumes"] = request
            .host_paths
            .iter()
            .enumerate()
            .map(|(index, path)| json!({"name": volume_name(index), "hostPath": {"path": path, "type": "Directory"}}))
            .collect();
    }
    KubeObject::new(
        "jobs",
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": request.name, "namespace": request.namespace, "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": request.deadline_seconds,
                "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_SECONDS,
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        }),
    )
}

/// The MPIJob of one multi-node command: the launcher runs `request.argv` (its
/// container named [`CONTAINER`], placed anywhere), one worker per node in `workers`
/// holds that node's GPUs (`request.gpus` each) and runs the image's `sshd` for
/// `mpirun` to reach.
#[must_use]
pub fn mpijob_object(request: &JobRequest<'_>, workers: &[String]) -> KubeObject {
    let labels = json!({
        MANAGED_BY_LABEL: FIELD_MANAGER,
        RUN_LABEL: request.run_id,
        VALIDATOR_LABEL: request.validator,
    });
    let gpus = request.gpus.to_string();
    let mut worker = json!({
        "name": "worker",
        "image": request.image,
        "command": ["/usr/sbin/sshd", "-De"],
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
    });
    if request.privileged {
        worker["securityContext"] = json!({"privileged": true});
    }
    let hostname_in = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": workers}]}]});
    // One worker per node: never two on the same host.
    let spread = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {RUN_LABEL: request.run_id, VALIDATOR_LABEL: request.validator}},
        "topologyKey": "kubernetes.io/hostname"}]});
    KubeObject::new(
        "mpijobs",
        json!({
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": request.name, "namespace": request.namespace, "labels": labels},
            "spec": {
                "slotsPerWorker": request.gpus.max(1),
                "mpiImplementation": "OpenMPI",
                // mpirun starts only once every worker's sshd is up.
                "launcherCreationPolicy": "WaitForWorkersReady",
                "runPolicy": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": request.deadline_seconds,
                    "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_SECONDS,
                    "cleanPodPolicy": "Running",
                },
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": {
                        "metadata": {"labels": labels},
                        "spec": {"tolerations": [{"operator": "Exists"}],
                                 "containers": [{"name": CONTAINER, "image": request.image, "command": request.argv}]}}},
                    "Worker": {"replicas": workers.len(), "restartPolicy": "Never", "template": {
                        "metadata": {"labels": labels},
                        "spec": {"tolerations": [{"operator": "Exists"}],
                                 "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": hostname_in},
                                              "podAntiAffinity": spread},
                                 "containers": [worker]}}},
                },
            },
        }),
    )
}

/// Marks as skipped the validators that cannot run on Kubernetes: not node-scope (or
/// cluster-scope with `kubernetes.mpi`), no `kubernetes` section, or no image (the
/// section's, or one in `images`, from `--image`).
pub fn restrict(planned: &mut [Planned<'_>], images: &BTreeMap<String, String>) {
    for item in planned.iter_mut() {
        if let Disposition::Run { .. } = item.disposition
            && let Some(reason) = unsupported(item.spec, images)
        {
            item.disposition = Disposition::Skip(reason);
        }
    }
}

fn unsupported(spec: &ValidatorSpec, images: &BTreeMap<String, String>) -> Option<String> {
    let mpi = spec.kubernetes.as_ref().is_some_and(|section| section.mpi);
    if spec.scope != SpecScope::Node && !(mpi && spec.scope == SpecScope::Cluster) {
        return Some(
            "runs only over SSH: on Kubernetes toolkit runs node-scope validators as Jobs and cluster-scope ones \
             with `kubernetes.mpi` as an MPIJob"
                .to_owned(),
        );
    }
    let Some(kubernetes) = &spec.kubernetes else {
        return Some(format!(
            "has no `kubernetes` section (the container it would run in): copy validators/{}.yaml into \
             `--validators DIR` and add one",
            spec.id
        ));
    };
    if kubernetes.image.is_none() && !images.contains_key(&spec.id) {
        return Some(format!("has no container image for Kubernetes: name one with `--image {}=REF`", spec.id));
    }
    None
}

/// A Job name: `<validator>-<node>-<run>-<n>`, lowercased to DNS-1123 and cut to
/// 63 characters (the Job controller puts it in a label value) with the unique
/// tail kept.
#[must_use]
pub fn job_name(validator: &str, node: &str, run_id: &str, sequence: usize) -> String {
    let clean = |text: &str| -> String {
        text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect()
    };
    let tail = format!("-{}-{sequence}", clean(run_id));
    let mut head = clean(&format!("{validator}-{node}"));
    head.truncate(63usize.saturating_sub(tail.len()));
    let head = head.trim_matches('-');
    format!("{head}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_dns_labels_that_keep_their_unique_tail() {
        assert_eq!(job_name("gpu-inventory", "dgx01", "a1b2c3", 0), "gpu-inventory-dgx01-a1b2c3-0");
        let long = job_name("nccl-single-node", "gpu-node-with-a-very-long-hostname.example.com", "a1b2c3", 12);
        assert!(long.len() <= 63, "{long}");
        assert!(long.ends_with("-a1b2c3-12"), "{long}");
        assert!(crate::resource::kube::dns1123_label_error(&long).is_none(), "{long}");
    }

    #[test]
    fn a_job_requests_the_nodes_gpus_on_that_node_only() {
        let argv =
            vec!["timeout".to_owned(), "60".to_owned(), "sh".to_owned(), "-c".to_owned(), "nvidia-smi".to_owned()];
        let job = job_object(&JobRequest {
            name: "gpu-inventory-dgx01-r-0",
            namespace: DEFAULT_NAMESPACE,
            run_id: "r",
            validator: "gpu-inventory",
            node: "dgx01",
            image: "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04",
            argv: &argv,
            gpus: 8,
            privileged: false,
            host_paths: &["/var/tmp".to_owned()],
            deadline_seconds: 360,
        });
        assert_eq!(job.path(), "/apis/batch/v1/namespaces/toolkit-validate/jobs/gpu-inventory-dgx01-r-0");
        let pod = &job.body["spec"]["template"]["spec"];
        assert_eq!(pod["nodeSelector"]["kubernetes.io/hostname"], "dgx01");
        assert_eq!(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "8");
        assert_eq!(pod["containers"][0]["command"][4], "nvidia-smi");
        assert_eq!(pod["volumes"][0]["hostPath"]["path"], "/var/tmp");
        assert_eq!(job.body["metadata"]["labels"][MANAGED_BY_LABEL], "toolkit");
        assert_eq!(job.body["spec"]["template"]["metadata"]["labels"][RUN_LABEL], "r");
        assert!(pod["containers"][0].get("securityContext").is_none());
    }

    #[test]
    fn only_a_true_complete_or_failed_condition_ends_a_job() {
        let running = json!({"status": {"active": 1, "conditions": [{"type": "Suspended", "status": "False"}]}});
        assert_eq!(finished(&running), None);
        let failed = json!({"status": {"conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "m"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}});
        assert_eq!(
            finished(&failed),
            Some((true, "BackoffLimitExceeded: Job has reached the specified backoff limit".to_owned()))
        );
        let complete = json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(finished(&complete).map(|(failed, _)| failed), Some(false));
    }
}
