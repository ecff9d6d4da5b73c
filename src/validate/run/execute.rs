//! Running the planned validators: one validator after another, each validator's
//! subjects in parallel (bounded), each subject's commands over a [`Connector`] with
//! timeouts, then the second pass of pairwise tests; every subject's record is handed
//! to `judge`.
//!
//! Stage: validate (network). Input: the [`Planned`] validators, the model, the site
//! and a [`Hosts`] (the SSH pool, Kubernetes Jobs, or a scripted fake in unit tests).
//! Output: a [`RunOutcome`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Disposition, Limit, Planned, Progress, RunOptions, RunOutcome, unmet};
use crate::model::Model;
use crate::results::{Docs, Evidence, Scope, SubjectResult, ValidatorResult, Verdict};
use crate::transport::{Connector, Executor as _, ExitStatus};
use crate::validate::cabling::{self, CablingPlan};
use crate::validate::expr;
use crate::validate::pairwise::{self, PairOutcome, PairResult};
use crate::validate::spec::{Analysis, ProgramsOn, SpecScope, ValidatorSpec};
use crate::validate::subjects::{self, Expansion, Site, Subject};

/// Lines of output kept as evidence.
pub const EVIDENCE_LINES: usize = 20;

/// Seconds the remote `timeout` waits after TERM before KILL.
const KILL_AFTER_SECONDS: u64 = 5;

/// Seconds the runner waits beyond a command's timeout before giving up on it locally
/// (the remote `timeout` should have ended it by then).
const LOCAL_GRACE_SECONDS: u64 = 15;

/// Seconds a server command may outlive its client before it is abandoned.
const SERVER_GRACE_SECONDS: u64 = 10;

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
pub(super) struct Record {
    /// Parsed outputs: the parser's value, or `{step: value}` for steps.
    pub(super) output: serde_json::Value,
    /// Exit codes by step (`main` for a single command).
    pub(super) status: serde_json::Map<String, serde_json::Value>,
    /// The command(s) and the end of the output.
    pub(super) evidence: Option<Evidence>,
    /// Wall time.
    pub(super) seconds: f64,
    /// Why there is no usable output.
    pub(super) problem: Option<Problem>,
}

#[derive(Debug, Clone)]
pub(super) enum Problem {
    Error(String),
    Skipped(String),
}

impl Record {
    pub(super) fn empty() -> Self {
        Self {
            output: serde_json::Value::Null,
            status: serde_json::Map::new(),
            evidence: None,
            seconds: 0.0,
            problem: None,
        }
    }

    pub(super) fn stopped(problem: Problem) -> Self {
        Self { problem: Some(problem), ..Self::empty() }
    }
}

/// One validator being run.
pub(super) struct ValidatorRun<'a, C> {
    pub(super) spec: &'a ValidatorSpec,
    pub(super) model: &'a Model,
    pub(super) site: &'a Site,
    pub(super) connector: &'a C,
    pub(super) looks_up_programs: bool,
    pub(super) grace_seconds: u64,
    pub(super) options: &'a RunOptions,
    pub(super) limits: &'a [Limit],
    pub(super) selected: usize,
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
