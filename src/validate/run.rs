//! The validator runner: which validators run on which subjects, the commands over
//! SSH in parallel with timeouts, the outputs parsed and measured, the thresholds
//! judged, and the second pass of pairwise tests.
//!
//! Stage: validate. Input: a [`Catalog`], the [`Model`], the [`Site`] and a
//! [`Connector`] (the SSH pool; a scripted fake in unit tests). Output: a
//! [`RunOutcome`]: one [`ValidatorResult`] per validator, in catalog order, and the
//! verdict each validator gave each node (for `--drain-failed`).
//!
//! [`plan`] is pure: it selects validators (blueprint `acceptance`, `--only`),
//! resolves threshold overrides, checks requirements and expands subjects.
//! [`execute`] runs one validator after another — so a storage test never shares a
//! node with an NCCL test — and each validator's subjects in parallel, bounded.
//! A command that cannot run, times out or prints what its parser cannot read is an
//! `error` (no verdict on the hardware), never a `failed`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use minijinja::value::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::cabling::{self, CablingPlan};
use super::catalog::Catalog;
use super::derived::{self, DeriveInput};
use super::expr;
use super::pairwise::{self, PairOutcome, PairResult};
use super::spec::{
    Aggregate, Analysis, MeasurementSpec, ProgramsOn, Requirement, SeriesScale, Severity, SpecScope, ValidatorSpec,
};
use super::subjects::{self, Expansion, Site, Subject};
use super::timeline;
use crate::blueprint::schema::{AcceptanceMode, FabricKind, SchedulerKind};
use crate::model::Model;
use crate::results::{
    AxisScale, Comparison, Docs, Evidence, Measurement, Provenance, ProvenanceKind, Scope, Series, SubjectResult,
    Threshold, ValidatorResult, Verdict, format_number,
};
use crate::transport::{Connector, Executor as _, ExitStatus};

/// Lines of output kept as evidence.
pub const EVIDENCE_LINES: usize = 20;

/// Seconds the remote `timeout` waits after TERM before KILL.
const KILL_AFTER_SECONDS: u64 = 5;

/// Seconds the runner waits beyond a command's timeout before giving up on it locally
/// (the remote `timeout` should have ended it by then).
const LOCAL_GRACE_SECONDS: u64 = 15;

/// Seconds a server command may outlive its client before it is abandoned.
const SERVER_GRACE_SECONDS: u64 = 10;

/// What the user asked for on the command line.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// `--only`: run exactly these validators (even ones the blueprint skips).
    pub only: Option<BTreeSet<String>>,
    /// `--nodes`: restrict node subjects (and pairs) to these nodes.
    pub nodes: Option<BTreeSet<String>>,
    /// Subjects run at once within a validator.
    pub parallel: usize,
    /// Stops starting new subjects when cancelled (Ctrl-C).
    pub cancel: Option<CancellationToken>,
    /// Called as subjects finish.
    pub progress: Option<ProgressFn>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunOptions")
            .field("only", &self.only)
            .field("nodes", &self.nodes)
            .field("parallel", &self.parallel)
            .finish_non_exhaustive()
    }
}

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// What happened, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A validator starts on `subjects` subjects.
    Started {
        /// Validator id.
        id: String,
        /// Subjects to run.
        subjects: usize,
    },
    /// One subject's commands finished (its verdict comes with the validator's end).
    Ran {
        /// Validator id.
        id: String,
        /// Subject.
        subject: String,
    },
    /// A validator finished.
    Finished {
        /// Validator id.
        id: String,
        /// Its verdict.
        verdict: Verdict,
        /// Wall time.
        seconds: f64,
    },
}

/// Where a threshold's limit comes from, once overrides are applied.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitSource {
    /// The validator's number and its reference.
    Fixed {
        /// The limit.
        value: f64,
        /// Where it comes from.
        reference: String,
    },
    /// Computed from the model per subject.
    Derived(String),
    /// Another measurement of the same subject: its name and label.
    Measurement {
        /// The measurement's `name`.
        name: String,
        /// Its label, the provenance shown.
        label: String,
    },
    /// Set in the blueprint.
    Blueprint {
        /// The limit.
        value: f64,
        /// The key path (`acceptance.validators[0].thresholds.busbw`).
        key: String,
    },
}

/// A threshold ready to judge.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Measurement name.
    pub measurement: String,
    /// Comparison.
    pub comparison: Comparison,
    /// Limit source.
    pub source: LimitSource,
    /// What missing it means.
    pub severity: Severity,
}

/// What will happen to one validator.
#[derive(Debug)]
pub enum Disposition {
    /// It runs on these subjects.
    Run {
        /// The subjects.
        expansion: Expansion,
        /// Parameters after overrides.
        params: BTreeMap<String, f64>,
        /// Thresholds after overrides and `when`.
        limits: Vec<Limit>,
    },
    /// It does not apply (or the blueprint skips it): why.
    Skip(String),
    /// It cannot run at all (e.g. no controller): why.
    Fail(String),
}

/// One validator and what will happen to it.
#[derive(Debug)]
pub struct Planned<'a> {
    /// The validator.
    pub spec: &'a ValidatorSpec,
    /// What will happen.
    pub disposition: Disposition,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// One result per validator, in run order.
    pub validators: Vec<ValidatorResult>,
    /// The verdict each validator gave each node, where it can be attributed to the
    /// node (`node → validator id → passed | failed`).
    pub node_verdicts: BTreeMap<String, BTreeMap<String, Verdict>>,
}

/// Selects, checks and expands the validators of a run (no network).
///
/// # Errors
/// Every problem with the selection: unknown ids in `--only` or the blueprint,
/// unknown override names, unknown `--nodes`.
pub fn plan<'a>(
    catalog: &'a Catalog,
    model: &Model,
    site: &Site,
    options: &RunOptions,
) -> Result<Vec<Planned<'a>>, Vec<String>> {
    let mut problems = Vec::new();
    let ids: Vec<&str> = catalog.ids().collect();
    let unknown = |id: &str| match crate::diagnostic::did_you_mean(id, ids.iter().copied()) {
        Some(close) => format!("unknown validator `{id}` (did you mean `{close}`?)"),
        None => format!("unknown validator `{id}`; known: {}", ids.join(", ")),
    };
    if let Some(only) = &options.only {
        problems
            .extend(only.iter().filter(|id| catalog.get(id).is_none()).map(|id| format!("--only: {}", unknown(id))));
    }
    if let Some(nodes) = &options.nodes {
        let known: BTreeSet<&str> = model.nodes.iter().map(|node| node.name.as_str()).collect();
        for name in nodes.iter().filter(|name| !known.contains(name.as_str())) {
            let hint = crate::diagnostic::did_you_mean(name, known.iter().copied())
                .map(|close| format!(" (did you mean `{close}`?)"))
                .unwrap_or_default();
            problems.push(format!("--nodes: `{name}` is not a node of `{}`{hint}", model.name));
        }
    }
    let acceptance = &model.blueprint.acceptance;
    let mut references: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, reference) in acceptance.validators.iter().enumerate() {
        let at = format!("acceptance.validators[{index}]");
        let Some(spec) = catalog.get(&reference.id) else {
            problems.push(format!("{at}.id: {}", unknown(&reference.id)));
            continue;
        };
        references.insert(reference.id.as_str(), index);
        let allowed = spec.overridable();
        for key in reference.thresholds.keys().filter(|key| !allowed.contains(key.as_str())) {
            problems.push(format!(
                "{at}.thresholds.{key}: `{}` has no threshold or parameter `{key}`; it has: {}",
                spec.id,
                allowed.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut planned = Vec::new();
    for spec in &catalog.specs {
        let reference = references.get(spec.id.as_str()).map(|&index| (index, &acceptance.validators[index]));
        let disposition = match (&options.only, reference) {
            (Some(only), _) if !only.contains(&spec.id) => continue,
            (None, Some((index, reference))) if reference.skip => {
                Disposition::Skip(format!("skipped by the blueprint (`acceptance.validators[{index}].skip`)"))
            }
            (None, None) if acceptance.mode == AcceptanceMode::Explicit => continue,
            _ => dispose(spec, model, site, options, reference),
        };
        planned.push(Planned { spec, disposition });
    }
    Ok(planned)
}

fn dispose(
    spec: &ValidatorSpec,
    model: &Model,
    site: &Site,
    options: &RunOptions,
    reference: Option<(usize, &crate::blueprint::schema::ValidatorRef)>,
) -> Disposition {
    if let Some(reason) = unmet(model, &spec.requires) {
        return Disposition::Skip(reason);
    }
    let mut params = spec.params.clone();
    let mut overrides: BTreeMap<&str, (f64, String)> = BTreeMap::new();
    if let Some((index, reference)) = reference {
        for (key, value) in &reference.thresholds {
            let path = format!("acceptance.validators[{index}].thresholds.{key}");
            if let Some(param) = params.get_mut(key) {
                *param = *value;
            }
            overrides.insert(key.as_str(), (*value, path));
        }
    }
    let limits = spec
        .thresholds
        .iter()
        .filter(|threshold| unmet(model, &threshold.when).is_none())
        .filter(|threshold| spec.measurement(&threshold.measurement).is_some_and(|m| unmet(model, &m.when).is_none()))
        .map(|threshold| Limit {
            measurement: threshold.measurement.clone(),
            comparison: threshold.comparison,
            source: match (overrides.get(threshold.measurement.as_str()), threshold.value, &threshold.derived) {
                (Some((value, key)), _, _) => LimitSource::Blueprint { value: *value, key: key.clone() },
                (None, None, None) if let Some(name) = &threshold.of => LimitSource::Measurement {
                    name: name.clone(),
                    label: spec.measurement(name).map_or_else(|| name.clone(), |m| m.label.clone()),
                },
                (None, Some(value), _) => {
                    LimitSource::Fixed { value, reference: threshold.reference.clone().unwrap_or_default() }
                }
                (None, None, Some(name)) => LimitSource::Derived(name.clone()),
                (None, None, None) => LimitSource::Derived(String::new()),
            },
            severity: threshold.severity.unwrap_or(spec.severity),
        })
        .collect();
    match subjects::expand(spec, model, site, options.nodes.as_ref(), &params) {
        Ok(expansion) => match &expansion.empty_reason {
            Some(reason) => Disposition::Skip(reason.clone()),
            None => Disposition::Run { expansion, params, limits },
        },
        Err(reason) => Disposition::Fail(format!("cannot run: {reason}")),
    }
}

/// Why the cluster does not meet `requirements`, or `None` when it does.
#[must_use]
pub fn unmet(model: &Model, requirements: &[Requirement]) -> Option<String> {
    let slurm = model.blueprint.scheduler.kind == SchedulerKind::Slurm;
    requirements.iter().find_map(|requirement| {
        let (met, why) = match requirement {
            Requirement::Gpu => (model.total_gpus() > 0, "needs GPUs: no node group has any"),
            Requirement::Nvlink => (
                model.groups.iter().any(|group| group.gpu.is_some_and(|gpu| gpu.nvlink_gbps > 0)),
                "needs NVLink: no node group's GPUs have it",
            ),
            Requirement::Infiniband => {
                (model.fabric.kind == FabricKind::Infiniband, "applies to InfiniBand fabrics; this one is RoCE")
            }
            Requirement::Roce => {
                (model.fabric.kind == FabricKind::Roce, "applies to RoCE fabrics; this one is InfiniBand")
            }
            Requirement::RoceQos => (
                model.fabric.kind == FabricKind::Roce && model.fabric.roce.is_some() && model.groups.iter().any(has_ofed),
                "needs a RoCE fabric with `roce:` QoS and a node group with DOCA-OFED or MLNX_OFED (`software.network`)",
            ),
            Requirement::Rails => (
                model.nodes.iter().any(|node| !node.rails.is_empty()),
                "needs nodes on the compute fabric: no node has rail NICs",
            ),
            Requirement::Slurm => (slurm, "needs Slurm as the scheduler"),
            Requirement::Accounting => (
                slurm && model.blueprint.scheduler.slurm.as_ref().is_some_and(|settings| settings.accounting),
                "needs Slurm accounting (`scheduler.slurm.accounting: true`)",
            ),
            Requirement::Tenants => (!model.tenants.is_empty(), "needs tenants: the blueprint declares none"),
            Requirement::GpuDriver => (
                model.groups.iter().any(|group| group.software.as_ref().is_some_and(|stack| stack.driver.is_some())),
                "needs a GPU driver in the blueprint (`software.gpu_driver`)",
            ),
            Requirement::SharedFilesystem => (
                derived::benchmark_filesystem(model).is_some(),
                "needs a shared filesystem mounted by the compute nodes: `storage.filesystems` declares none",
            ),
            Requirement::Monitoring => (
                model.blueprint.monitoring.as_ref().is_some_and(|section| section.enabled),
                "needs monitoring: the blueprint has no `monitoring` section, or it is off",
            ),
        };
        (!met).then(|| why.to_owned())
    })
}

/// Whether `group` installs an OFED stack (from NVIDIA's repository), which brings
/// `mlnx_qos` and `cma_roce_tos`.
fn has_ofed(group: &crate::model::Group) -> bool {
    group.software.as_ref().is_some_and(|stack| stack.network_repo().is_some())
}

/// Where a validator's commands run: the SSH pool for every validator, or one
/// connector per validator (Kubernetes: a Job per command, in the validator's image).
pub trait Hosts: Sync {
    /// The connector one validator's subjects use.
    type Connector<'a>: Connector
    where
        Self: 'a;

    /// The connector for `spec`'s commands.
    fn for_validator<'a>(&'a self, spec: &ValidatorSpec) -> Self::Connector<'a>;

    /// Whether a validator's `programs` are looked up before it runs (`command -v`
    /// on the host); where every command starts a container, the image answers that.
    fn looks_up_programs(&self) -> bool {
        true
    }

    /// Seconds the runner waits beyond a command's timeout before giving up on it:
    /// the connector's own start-up (a Job's pod is scheduled and its image pulled).
    fn grace_seconds(&self) -> u64 {
        LOCAL_GRACE_SECONDS
    }
}

impl<C: Connector> Hosts for C {
    type Connector<'a>
        = &'a C
    where
        C: 'a;

    fn for_validator<'a>(&'a self, _spec: &ValidatorSpec) -> &'a C {
        self
    }
}

/// Runs every planned validator, one after another.
pub async fn execute<H: Hosts>(
    planned: &[Planned<'_>],
    model: &Model,
    site: &Site,
    hosts: &H,
    options: &RunOptions,
) -> RunOutcome {
    let mut outcome = RunOutcome { validators: Vec::new(), node_verdicts: BTreeMap::new() };
    for item in planned {
        let started = Instant::now();
        let spec = item.spec;
        let (subjects, verdicts) = match &item.disposition {
            Disposition::Skip(reason) => (vec![SubjectResult::skipped(&model.name, reason.clone())], BTreeMap::new()),
            Disposition::Fail(reason) => (vec![SubjectResult::error(&model.name, reason.clone())], BTreeMap::new()),
            Disposition::Run { expansion, limits, .. } => {
                let connector = hosts.for_validator(spec);
                let runner = ValidatorRun {
                    spec,
                    model,
                    site,
                    connector: &connector,
                    looks_up_programs: hosts.looks_up_programs(),
                    grace_seconds: hosts.grace_seconds(),
                    options,
                    limits,
                    selected: expansion.selected.len(),
                };
                runner.run(expansion).await
            }
        };
        for (node, verdict) in verdicts {
            outcome.node_verdicts.entry(node).or_default().insert(spec.id.clone(), verdict);
        }
        let result = ValidatorResult {
            id: spec.id.clone(),
            title: spec.title.clone(),
            failure: spec.failure.clone(),
            docs: Docs { what: spec.docs.what.clone(), why: spec.docs.why.clone(), fix: spec.docs.fix.clone() },
            scope: scope(spec.scope),
            duration_seconds: Some(started.elapsed().as_secs_f64()),
            subjects,
        };
        report(
            options,
            &Progress::Finished {
                id: spec.id.clone(),
                verdict: result.verdict(),
                seconds: started.elapsed().as_secs_f64(),
            },
        );
        outcome.validators.push(result);
    }
    outcome
}

const fn scope(scope: SpecScope) -> Scope {
    match scope {
        SpecScope::Node => Scope::Node,
        SpecScope::NodePair => Scope::NodePair,
        SpecScope::Rail => Scope::Rail,
        SpecScope::Switch => Scope::Switch,
        SpecScope::Cluster => Scope::Cluster,
    }
}

fn report(options: &RunOptions, progress: &Progress) {
    if let Some(callback) = &options.progress {
        callback(progress);
    }
}

/// What running one subject's commands gave.
#[derive(Debug, Clone)]
struct Record {
    /// Parsed outputs: the parser's value, or `{step: value}` for steps.
    output: serde_json::Value,
    /// Exit codes by step (`main` for a single command).
    status: serde_json::Map<String, serde_json::Value>,
    /// The command(s) and the end of the output.
    evidence: Option<Evidence>,
    /// Wall time.
    seconds: f64,
    /// Why there is no usable output.
    problem: Option<Problem>,
}

#[derive(Debug, Clone)]
enum Problem {
    Error(String),
    Skipped(String),
}

impl Record {
    fn empty() -> Self {
        Self {
            output: serde_json::Value::Null,
            status: serde_json::Map::new(),
            evidence: None,
            seconds: 0.0,
            problem: None,
        }
    }

    fn stopped(problem: Problem) -> Self {
        Self { problem: Some(problem), ..Self::empty() }
    }
}

/// One validator being run.
struct ValidatorRun<'a, C> {
    spec: &'a ValidatorSpec,
    model: &'a Model,
    site: &'a Site,
    connector: &'a C,
    looks_up_programs: bool,
    grace_seconds: u64,
    options: &'a RunOptions,
    limits: &'a [Limit],
    selected: usize,
}

impl<C: Connector> ValidatorRun<'_, C> {
    async fn run(&self, expansion: &Expansion) -> (Vec<SubjectResult>, BTreeMap<String, Verdict>) {
        let subjects = expansion.subjects(self.model);
        report(self.options, &Progress::Started { id: self.spec.id.clone(), subjects: subjects.len() });
        let mut records = self.run_all(&subjects).await;
        if self.spec.analysis == Some(Analysis::Cabling) {
            self.add_cabling(&subjects, &mut records);
        }
        let mut results: Vec<SubjectResult> =
            subjects.iter().zip(&records).map(|(subject, record)| self.judge(subject, record)).collect();
        let mut verdicts = BTreeMap::new();
        if self.spec.second_pass {
            self.second_pass(expansion, &subjects, &mut results, &mut verdicts).await;
        } else {
            for (subject, result) in subjects.iter().zip(&results) {
                self.attribute(subject, result.verdict, &mut verdicts);
            }
        }
        (results, verdicts)
    }

    /// Node verdicts that follow from a subject alone: a node subject's verdict is its
    /// node's; a passing pair or cluster run clears every node in it; a failing pair
    /// says nothing about which node.
    fn attribute(&self, subject: &Subject, verdict: Verdict, verdicts: &mut BTreeMap<String, Verdict>) {
        let names = || subject.nodes.iter().map(|&index| self.model.nodes[index].name.clone());
        match verdict {
            Verdict::Passed | Verdict::Warning => {
                for name in names() {
                    verdicts.entry(name).or_insert(Verdict::Passed);
                }
            }
            Verdict::Failed if subject.nodes.len() == 1 && self.spec.scope == SpecScope::Node => {
                for name in names() {
                    verdicts.insert(name, Verdict::Failed);
                }
            }
            _ => {}
        }
    }

    async fn run_all(&self, subjects: &[Subject]) -> Vec<Record> {
        let bound = self.options.parallel.max(1).min(self.spec.concurrency.unwrap_or(usize::MAX));
        let mut indexed: Vec<(usize, Record)> = futures::stream::iter(subjects.iter().enumerate())
            .map(|(index, subject)| async move {
                let record = self.run_subject(subject).await;
                report(self.options, &Progress::Ran { id: self.spec.id.clone(), subject: subject.name.clone() });
                (index, record)
            })
            .buffer_unordered(bound)
            .collect()
            .await;
        indexed.sort_by_key(|(index, _)| *index);
        indexed.into_iter().map(|(_, record)| record).collect()
    }

    async fn run_subject(&self, subject: &Subject) -> Record {
        if self.options.cancel.as_ref().is_some_and(CancellationToken::is_cancelled) {
            return Record::stopped(Problem::Skipped("interrupted before it started (Ctrl-C)".to_owned()));
        }
        for host in
            std::iter::once(&subject.host).chain(subject.server_host.as_ref().filter(|_| self.spec.server.is_some()))
        {
            if !self.site.hosts.contains(host) {
                return Record::stopped(Problem::Skipped(format!("`{host}` is not in the inventory")));
            }
        }
        let started = Instant::now();
        let work = self.run_commands(subject);
        let mut record = match &self.options.cancel {
            Some(cancel) => tokio::select! {
                record = work => record,
                () = cancel.cancelled() => Record::stopped(Problem::Error("interrupted while running (Ctrl-C)".to_owned())),
            },
            None => work.await,
        };
        record.seconds = started.elapsed().as_secs_f64();
        record
    }

    async fn run_commands(&self, subject: &Subject) -> Record {
        let session = match self.connector.connect(&subject.host).await {
            Ok(session) => session,
            Err(error) => return Record::stopped(Problem::Error(format!("cannot reach `{}`: {error}", subject.host))),
        };
        if let Some(record) = self.missing_programs(session.as_ref(), subject).await {
            return record;
        }
        let Some(server) = &self.spec.server else {
            return self.run_steps(session.as_ref(), subject).await;
        };
        let Some(server_host) = &subject.server_host else {
            return self.run_steps(session.as_ref(), subject).await;
        };
        let script = match expr::render_command(&server.command, &subject.context) {
            Ok(script) => script,
            Err(error) => {
                return Record::stopped(Problem::Error(format!("the server command does not render: {error}")));
            }
        };
        let peer = match self.connector.connect(server_host).await {
            Ok(peer) => peer,
            Err(error) => return Record::stopped(Problem::Error(format!("cannot reach `{server_host}`: {error}"))),
        };
        let client_done = tokio::sync::Notify::new();
        let argv = self.wrapped(&script);
        let limit = Duration::from_secs(self.spec.timeout + self.grace_seconds);
        let server_run = async {
            tokio::select! {
                output = tokio::time::timeout(limit, peer.exec(&argv)) => Some(output),
                () = async {
                    client_done.notified().await;
                    tokio::time::sleep(Duration::from_secs(SERVER_GRACE_SECONDS)).await;
                } => None,
            }
        };
        let client_run = async {
            tokio::time::sleep(Duration::from_secs_f64(server.ready)).await;
            let record = self.run_steps(session.as_ref(), subject).await;
            client_done.notify_one();
            record
        };
        let (server_output, mut record) = tokio::join!(server_run, client_run);
        let server_text = match server_output {
            Some(Ok(Ok(output))) => {
                let code = match &output.status {
                    ExitStatus::Code(code) => code.to_string(),
                    other => other.to_string(),
                };
                format!("{}{}[server exit {code}]", output.stdout_text(), String::from_utf8_lossy(&output.stderr))
            }
            Some(Ok(Err(error))) => format!("[server failed: {error}]"),
            Some(Err(_)) => format!("[server timed out after {} s]", self.spec.timeout),
            None => format!("[server still running {SERVER_GRACE_SECONDS} s after the client ended; abandoned]"),
        };
        if let Some(evidence) = &mut record.evidence {
            let mut lines = evidence.output_tail.clone();
            lines.push(format!("--- server on {server_host}: {script}"));
            lines.extend(server_text.lines().map(str::to_owned));
            let keep = lines.len().saturating_sub(EVIDENCE_LINES);
            evidence.omitted_lines += keep;
            evidence.output_tail = lines.split_off(keep);
        }
        if let Some(Problem::Error(message)) = &mut record.problem {
            let _ = write!(message, " (server on `{server_host}`: {})", server_text.lines().last().unwrap_or_default());
        }
        record
    }

    /// Looks up the validator's `programs` on the subject's host with `command -v`:
    /// `None` when all are there (or none are declared), else the record that stops
    /// the subject — `skipped` naming what is missing and where, or an `error` when
    /// the lookup itself could not run.
    async fn missing_programs<E: crate::transport::Executor>(&self, session: &E, subject: &Subject) -> Option<Record> {
        if self.spec.programs.is_empty() || !self.looks_up_programs {
            return None;
        }
        let script = self.lookup_script(subject);
        let limit = Duration::from_secs(self.spec.timeout + self.grace_seconds);
        let output = match tokio::time::timeout(limit, session.exec(&self.wrapped(&script))).await {
            Err(_) => {
                return Some(Record::stopped(Problem::Error(format!(
                    "looking up {} timed out after {} s",
                    self.spec.programs.join(", "),
                    self.spec.timeout
                ))));
            }
            Ok(Err(error)) => {
                return Some(Record::stopped(Problem::Error(format!("could not run on `{}`: {error}", subject.host))));
            }
            Ok(Ok(output)) => output,
        };
        let stdout = output.stdout_text();
        let evidence = Evidence::from_output(
            script.clone(),
            match &output.status {
                ExitStatus::Code(code) => i32::try_from(*code).ok(),
                _ => None,
            },
            &stdout,
            EVIDENCE_LINES,
        );
        if output.status != ExitStatus::Code(0) {
            let said = String::from_utf8_lossy(&output.stderr);
            let said = said.lines().rfind(|line| !line.trim().is_empty()).unwrap_or("no output").trim().to_owned();
            let mut record = Record::stopped(Problem::Error(format!(
                "looking up {} with `command -v` failed ({}): {said}",
                self.spec.programs.join(", "),
                output.status
            )));
            record.evidence = Some(evidence);
            return Some(record);
        }
        // `program` (on the host) or `node program` (through srun), one a line.
        let mut missing: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for line in stdout.lines() {
            let mut words = line.split_whitespace().rev();
            let Some(program) = words.next().and_then(|word| self.spec.programs.iter().find(|known| *known == word))
            else {
                continue;
            };
            let host = words.next().unwrap_or(subject.host.as_str());
            missing.entry(program.as_str()).or_default().insert(host);
        }
        if missing.is_empty() {
            return None;
        }
        let listed: Vec<String> = missing
            .iter()
            .map(|(program, hosts)| {
                let hosts: Vec<String> = hosts.iter().map(|host| format!("`{host}`")).collect();
                format!("`{program}` is not installed on {}", hosts.join(", "))
            })
            .collect();
        let programs: Vec<&str> = missing.keys().copied().collect();
        let mut record = Record::stopped(Problem::Skipped(format!(
            "{} (`command -v` finds no such program): install the {} package{}, \
             or make it visible to non-interactive shells (e.g. `module load {}` in /etc/profile.d), \
             or skip the validator (`acceptance.validators: [{{ id: {}, skip: true }}]`)",
            listed.join("; "),
            programs.join(" and "),
            if programs.len() == 1 { "" } else { "s" },
            programs[0],
            self.spec.id
        )));
        record.evidence = Some(evidence);
        Some(record)
    }

    /// The shell script that prints each missing program: its name on the host, or
    /// `node name` from one `srun` task on each of the subject's nodes.
    fn lookup_script(&self, subject: &Subject) -> String {
        let names: Vec<String> =
            self.spec.programs.iter().map(|name| crate::transport::quote::quote(name).into_owned()).collect();
        match self.spec.programs_on {
            ProgramsOn::Host => format!(
                "for program in {}; do command -v \"$program\" >/dev/null 2>&1 || echo \"$program\"; done",
                names.join(" ")
            ),
            ProgramsOn::Nodes => {
                let nodes: Vec<&str> =
                    subject.nodes.iter().map(|&index| self.model.nodes[index].name.as_str()).collect();
                let inner = format!(
                    "for program in {}; do command -v \"$program\" >/dev/null 2>&1 || echo \"$(hostname -s) $program\"; done",
                    names.join(" ")
                );
                let hostlist = crate::model::hostlist::compress(nodes.iter().copied());
                format!(
                    "srun --nodes={} --nodelist={} --ntasks-per-node=1 --immediate=60 sh -c {}",
                    nodes.len(),
                    crate::transport::quote::quote(&hostlist),
                    crate::transport::quote::quote(&inner)
                )
            }
        }
    }

    /// The argv that runs `script` under the remote `timeout`, so a hung command is
    /// killed on the host and not only abandoned here.
    fn wrapped(&self, script: &str) -> Vec<String> {
        vec![
            "timeout".to_owned(),
            format!("--kill-after={KILL_AFTER_SECONDS}"),
            self.spec.timeout.to_string(),
            "sh".to_owned(),
            "-c".to_owned(),
            script.to_owned(),
        ]
    }

    async fn run_steps<E: crate::transport::Executor>(&self, session: &E, subject: &Subject) -> Record {
        let steps: Vec<_> =
            self.spec.steps().into_iter().filter(|step| unmet(self.model, &step.when).is_none()).collect();
        let mut record = Record::empty();
        let mut outputs = serde_json::Map::new();
        let mut scripts = Vec::new();
        let mut transcript = String::new();
        let mut last_code = None;
        for step in &steps {
            let key = step.name.clone().unwrap_or_else(|| "main".to_owned());
            let script = match expr::render_command(&step.command, &subject.context) {
                Ok(script) => script,
                Err(error) => {
                    record.problem = Some(Problem::Error(format!("the command of `{key}` does not render: {error}")));
                    break;
                }
            };
            if steps.len() > 1 {
                let _ = writeln!(transcript, "$ {script}");
            }
            scripts.push(script.clone());
            let limit = Duration::from_secs(self.spec.timeout + self.grace_seconds);
            let output = match tokio::time::timeout(limit, session.exec(&self.wrapped(&script))).await {
                Err(_) => {
                    record.problem = Some(Problem::Error(format!("timed out after {} s", self.spec.timeout)));
                    break;
                }
                Ok(Err(error)) => {
                    record.problem = Some(Problem::Error(format!("could not run on `{}`: {error}", subject.host)));
                    break;
                }
                Ok(Ok(output)) => output,
            };
            let code = match &output.status {
                ExitStatus::Code(code) => i32::try_from(*code).ok(),
                _ => None,
            };
            last_code = code;
            let stdout = output.stdout_text();
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            transcript.push_str(&stdout);
            if !stdout.is_empty() && !stdout.ends_with('\n') {
                transcript.push('\n');
            }
            transcript.push_str(&stderr);
            record.status.insert(key.clone(), code.map_or(serde_json::Value::Null, serde_json::Value::from));
            match code {
                Some(124) => {
                    record.problem = Some(Problem::Error(format!("timed out after {} s", self.spec.timeout)));
                    break;
                }
                Some(137) => {
                    record.problem = Some(Problem::Error(format!(
                        "killed (SIGKILL): it ignored the stop signal at the {} s timeout, or ran out of memory",
                        self.spec.timeout
                    )));
                    break;
                }
                _ => {}
            }
            match expr::parse(&step.parser, &stdout) {
                Ok(value) => {
                    outputs.insert(key, value);
                }
                Err(message) => {
                    let failed = match &output.status {
                        ExitStatus::Code(0) => None,
                        status => Some(status.to_string()),
                    };
                    record.problem = Some(Problem::Error(match failed {
                        Some(status) => {
                            let said = stderr
                                .lines()
                                .chain(stdout.lines())
                                .rfind(|line| !line.trim().is_empty())
                                .unwrap_or("no output");
                            format!("`{}` failed ({status}): {}", first_line(&script), said.trim())
                        }
                        None => format!("{} parser: {message}", step.parser),
                    }));
                    break;
                }
            }
        }
        record.output = match steps.first() {
            Some(step) if step.name.is_none() => outputs.remove("main").unwrap_or(serde_json::Value::Null),
            _ => serde_json::Value::Object(outputs),
        };
        if !scripts.is_empty() {
            record.evidence = Some(Evidence::from_output(scripts.join("\n"), last_code, &transcript, EVIDENCE_LINES));
        }
        record
    }

    /// Adds `output.cabling` to every switch that reported its LLDP neighbours.
    fn add_cabling(&self, subjects: &[Subject], records: &mut [Record]) {
        let plan = CablingPlan::new(self.model, self.site);
        let mut observed = Vec::new();
        let mut seen = BTreeSet::new();
        for (subject, record) in subjects.iter().zip(records.iter_mut()) {
            if record.problem.is_some() {
                continue;
            }
            match cabling::neighbors(&record.output) {
                Ok(neighbors) => {
                    observed.extend(plan.observe(&subject.name, &neighbors));
                    seen.insert(subject.name.clone());
                }
                Err(message) => record.problem = Some(Problem::Error(message)),
            }
        }
        let diff = plan.diff(&observed, &seen);
        for (subject, record) in subjects.iter().zip(records.iter_mut()) {
            if !seen.contains(&subject.name) {
                continue;
            }
            let findings: Vec<String> = diff
                .findings
                .iter()
                .filter(|finding| finding.devices().contains(subject.name.as_str()))
                .map(ToString::to_string)
                .collect();
            let expected = plan.views().iter().filter(|view| view.local.device == subject.name).count();
            let verified = diff.verified.iter().filter(|view| view.local.device == subject.name).count();
            if let serde_json::Value::Object(map) = &mut record.output {
                map.insert(
                    "cabling".to_owned(),
                    json!({ "findings": findings, "expected": expected, "verified": verified }),
                );
            }
        }
    }

    async fn second_pass(
        &self,
        expansion: &Expansion,
        subjects: &[Subject],
        results: &mut Vec<SubjectResult>,
        verdicts: &mut BTreeMap<String, Verdict>,
    ) {
        let name = |index: usize| self.model.nodes[index].name.as_str();
        let lanes: BTreeSet<Option<u32>> = subjects.iter().map(|subject| subject.rail).collect();
        let index_of: BTreeMap<&str, usize> =
            self.model.nodes.iter().enumerate().map(|(index, node)| (node.name.as_str(), index)).collect();
        let mut judgements = BTreeMap::new();
        let mut views = subjects::NodeViews::new(self.model);
        for lane in lanes {
            let first: Vec<PairResult> = subjects
                .iter()
                .zip(results.iter())
                .filter(|(subject, _)| subject.rail == lane && subject.nodes.len() == 2)
                .map(|(subject, result)| {
                    PairResult::new(name(subject.nodes[0]), name(subject.nodes[1]), outcome(result.verdict))
                })
                .collect();
            let retests: Vec<Subject> = pairwise::second_pass(&first)
                .iter()
                .filter_map(|(suspect, partner)| {
                    let (a, b) = (index_of.get(suspect.as_str())?, index_of.get(partner.as_str())?);
                    Some(expansion.pair(&mut views, *a, *b, lane, " (second pass)"))
                })
                .collect();
            let records = self.run_all(&retests).await;
            let mut second = Vec::new();
            for (subject, record) in retests.iter().zip(&records) {
                let result = self.judge(subject, record);
                second.push(PairResult::new(name(subject.nodes[0]), name(subject.nodes[1]), outcome(result.verdict)));
                results.push(result);
            }
            judgements.insert(lane, (pairwise::judge(&first, &second), second));
        }
        for (subject, result) in subjects.iter().zip(results.iter_mut()) {
            let Some((judgement, second)) = judgements.get(&subject.rail) else { continue };
            if result.verdict != Verdict::Failed || subject.nodes.len() != 2 {
                continue;
            }
            let pair = [name(subject.nodes[0]), name(subject.nodes[1])];
            let bad: Vec<&str> = pair.iter().copied().filter(|node| judgement.failed.contains(*node)).collect();
            let retested = |node: &str| {
                second.iter().find(|retest| retest.first == node).map(|retest| {
                    let how = match retest.outcome {
                        PairOutcome::Passed => "passed",
                        PairOutcome::Failed => "failed again",
                        PairOutcome::Error => "could not be re-tested",
                    };
                    format!("{node} {how} with {}", retest.second)
                })
            };
            let story: Vec<String> = pair.iter().filter_map(|node| retested(node)).collect();
            let story = if story.is_empty() { "no node passed to re-test with".to_owned() } else { story.join("; ") };
            let reason = result.reason.clone().unwrap_or_default();
            if bad.is_empty() {
                result.verdict = Verdict::Warning;
                result.reason =
                    Some(format!("{reason} — on the first pass only: second pass cleared both nodes ({story})"));
            } else {
                result.reason = Some(format!("{reason} — second pass: {} bad ({story})", bad.join(" and ")));
            }
        }
        for (judgement, _) in judgements.values() {
            for node in &judgement.passed {
                verdicts.entry(node.clone()).or_insert(Verdict::Passed);
            }
            for node in &judgement.failed {
                verdicts.insert(node.clone(), Verdict::Failed);
            }
        }
    }

    /// Measures, compares and decides one subject.
    fn judge(&self, subject: &Subject, record: &Record) -> SubjectResult {
        let mut result = match &record.problem {
            Some(Problem::Skipped(reason)) => SubjectResult::skipped(&subject.name, reason.clone()),
            Some(Problem::Error(reason)) => SubjectResult::error(&subject.name, reason.clone()),
            None => self.measure(subject, record),
        };
        result.evidence.clone_from(&record.evidence);
        if record.seconds > 0.0 {
            result.duration_seconds = Some(record.seconds);
        }
        result
    }

    fn measure(&self, subject: &Subject, record: &Record) -> SubjectResult {
        let context = minijinja::value::merge_maps([
            expr::to_value(&json!({ "output": record.output, "status": record.status })),
            subject.context.clone(),
        ]);
        let nodes: Vec<&crate::model::Node> = subject.nodes.iter().map(|&index| &self.model.nodes[index]).collect();
        let derive_input =
            DeriveInput { model: self.model, nodes: &nodes, switch: subject.switch, selected: self.selected };
        let mut measurements = Vec::new();
        let mut values: BTreeMap<String, f64> = BTreeMap::new();
        let mut missing = Vec::new();
        let mut unlimited = Vec::new();
        let mut failing: Vec<(Severity, String)> = Vec::new();
        for spec in self.spec.measurements.iter().filter(|m| unmet(self.model, &m.when).is_none()) {
            let limits: Vec<&Limit> = self.limits.iter().filter(|limit| limit.measurement == spec.name).collect();
            let value = match measure(spec, &context) {
                Ok(value) => value,
                Err(problem) => {
                    if !limits.is_empty() {
                        missing.push(format!("{}: {problem}", spec.label));
                    }
                    continue;
                }
            };
            values.insert(spec.name.clone(), value);
            if limits.is_empty() {
                measurements.push(Measurement {
                    name: spec.label.clone(),
                    value,
                    unit: spec.unit.clone(),
                    threshold: None,
                });
                continue;
            }
            for limit in limits {
                let resolved = match &limit.source {
                    LimitSource::Measurement { name, label } => values
                        .get(name)
                        .map(|value| Threshold {
                            comparison: limit.comparison,
                            value: *value,
                            source: Provenance { kind: ProvenanceKind::Measurement, detail: label.clone() },
                        })
                        .ok_or_else(|| format!("`{label}` was not measured")),
                    _ => resolve(limit, &derive_input),
                };
                let threshold = match resolved {
                    Ok(threshold) => Some(threshold),
                    Err(why) => {
                        unlimited.push(format!("no limit for {}: {why}", spec.label));
                        None
                    }
                };
                if let Some(threshold) = &threshold
                    && !threshold.admits(value)
                {
                    failing.push((limit.severity, sentence(&spec.label, value, &spec.unit, threshold)));
                }
                measurements.push(Measurement { name: spec.label.clone(), value, unit: spec.unit.clone(), threshold });
            }
        }
        let first_of = |severity: Severity| failing.iter().find(|(s, _)| *s == severity).map(|(_, text)| text.clone());
        let (verdict, reason) = if let Some(reason) = first_of(Severity::Failure) {
            (Verdict::Failed, Some(reason))
        } else if !missing.is_empty() {
            (Verdict::Error, Some(format!("could not measure {}", missing.join("; "))))
        } else if let Some(reason) = first_of(Severity::Warning) {
            (Verdict::Warning, Some(reason))
        } else if !unlimited.is_empty() {
            (Verdict::Warning, Some(unlimited.join("; ")))
        } else {
            (Verdict::Passed, None)
        };
        let reason = match (reason, &self.spec.explain) {
            (Some(reason), Some(template)) if verdict != Verdict::Error => {
                let explain_context =
                    minijinja::value::merge_maps([expr::to_value(&json!({ "measured": values })), context.clone()]);
                match expr::render_text(template, &explain_context) {
                    Ok(text) if text.is_empty() => Some(reason),
                    Ok(text) => Some(format!("{reason}: {text}")),
                    Err(error) => Some(format!("{reason} (the explanation did not render: {error})")),
                }
            }
            (reason, _) => reason,
        };
        SubjectResult {
            subject: subject.name.clone(),
            verdict,
            reason,
            measurements,
            series: self.series(&context),
            timelines: self.spec.timelines.iter().filter_map(|spec| timeline::build(spec, &context)).collect(),
            evidence: None,
            duration_seconds: None,
        }
    }

    fn series(&self, context: &Value) -> Vec<Series> {
        self.spec
            .series
            .iter()
            .filter_map(|spec| {
                let items = expr::evaluate(&spec.items, context).ok()?;
                let log2 = spec.x_scale == SeriesScale::Log2;
                let points: Vec<(f64, f64)> = items
                    .try_iter()
                    .ok()?
                    .filter_map(|item| {
                        let scoped = expr::with_item(context, item);
                        let x = expr::as_number(&expr::evaluate(&spec.x, &scoped).ok()?)?;
                        let y = expr::as_number(&expr::evaluate(&spec.y, &scoped).ok()?)?;
                        (!log2 || x > 0.0).then_some((x, y))
                    })
                    .collect();
                (!points.is_empty()).then(|| Series {
                    name: spec.name.clone(),
                    x_label: spec.x_label.clone(),
                    x_unit: spec.x_unit.clone(),
                    x_scale: if log2 { AxisScale::Log2 } else { AxisScale::Linear },
                    y_label: spec.y_label.clone(),
                    y_unit: spec.y_unit.clone(),
                    points,
                })
            })
            .collect()
    }
}

fn outcome(verdict: Verdict) -> PairOutcome {
    match verdict {
        Verdict::Passed | Verdict::Warning => PairOutcome::Passed,
        Verdict::Failed => PairOutcome::Failed,
        Verdict::Skipped | Verdict::Error => PairOutcome::Error,
    }
}

fn first_line(script: &str) -> String {
    let line = script.lines().next().unwrap_or_default();
    if line.chars().count() > 80 || script.lines().count() > 1 {
        format!("{}…", line.chars().take(80).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// A threshold's limit for one subject.
fn resolve(limit: &Limit, input: &DeriveInput<'_>) -> Result<Threshold, String> {
    let (value, source) = match &limit.source {
        LimitSource::Fixed { value, reference } => {
            (*value, Provenance { kind: ProvenanceKind::Default, detail: reference.clone() })
        }
        LimitSource::Blueprint { value, key } => {
            (*value, Provenance { kind: ProvenanceKind::Blueprint, detail: key.clone() })
        }
        LimitSource::Derived(name) => {
            let derived = derived::derive(name, input)?;
            (derived.value, Provenance { kind: ProvenanceKind::Model, detail: derived.detail })
        }
        LimitSource::Measurement { label, .. } => return Err(format!("`{label}` is resolved per subject")),
    };
    Ok(Threshold { comparison: limit.comparison, value, source })
}

/// `busbw is 12.5 GB/s, required >= 320 GB/s (model: 8 rails x …)`.
fn sentence(label: &str, value: f64, unit: &str, threshold: &Threshold) -> String {
    let with_unit = |number: f64| format!("{} {unit}", format_number(number)).trim_end().to_owned();
    format!(
        "{label} is {}, required {} {} ({})",
        with_unit(value),
        threshold.comparison,
        with_unit(threshold.value),
        threshold.source
    )
}

/// One measurement's number.
fn measure(spec: &MeasurementSpec, context: &Value) -> Result<f64, String> {
    let Some(items) = &spec.items else {
        let expression = spec.value.as_deref().unwrap_or_default();
        let value = expr::evaluate(expression, context)?;
        return expr::as_number(&value).ok_or_else(|| format!("`{expression}` is {}, not a number", describe(&value)));
    };
    let list = expr::evaluate(items, context)?;
    let iterator = list.try_iter().map_err(|_| format!("`{items}` is {}, not a list", describe(&list)))?;
    let mut kept = Vec::new();
    for item in iterator {
        let scoped = expr::with_item(context, item);
        let keep = match &spec.filter {
            Some(filter) => expr::evaluate(filter, &scoped)?.is_true(),
            None => true,
        };
        if keep {
            kept.push(scoped);
        }
    }
    let aggregate = spec.aggregate.unwrap_or(Aggregate::Count);
    if aggregate == Aggregate::Count {
        return Ok(kept.len() as f64);
    }
    let expression = spec.value.as_deref().unwrap_or_default();
    let values: Vec<Value> = kept.iter().map(|scoped| expr::evaluate(expression, scoped)).collect::<Result<_, _>>()?;
    if aggregate == Aggregate::Distinct {
        let distinct: BTreeSet<String> = values.iter().filter(|v| !v.is_none()).map(ToString::to_string).collect();
        return Ok(distinct.len() as f64);
    }
    let numbers: Vec<f64> = values.iter().filter_map(expr::as_number).collect();
    match aggregate {
        Aggregate::Sum => Ok(numbers.iter().sum()),
        _ if numbers.is_empty() => Err(format!("no values: `{items}` has no item with a number for `{expression}`")),
        Aggregate::Min => Ok(numbers.iter().copied().fold(f64::INFINITY, f64::min)),
        Aggregate::Max => Ok(numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        _ => Ok(numbers.iter().sum::<f64>() / numbers.len() as f64),
    }
}

fn describe(value: &Value) -> String {
    if value.is_none() {
        "none".to_owned()
    } else if value.is_undefined() {
        "undefined".to_owned()
    } else {
        let text = value.to_string();
        let short: String = text.chars().take(40).collect();
        if text.chars().count() > 40 { format!("`{short}…`") } else { format!("`{short}`") }
    }
}

#[cfg(test)]
mod tests;
