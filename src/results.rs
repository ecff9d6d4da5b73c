//! Acceptance results: what every validator found on every subject, as one
//! versioned document (`docs/results-format.md`).
//!
//! Stage: data between validate and report (as `plan` is between plan and deploy;
//! it imports nothing of the project). Input: verdicts, measurements, series and evidence
//! recorded by the validator runner, or a results JSON file read back with
//! [`Results::from_json`]. Output: [`Results`], which `report` renders and
//! `toolkit validate` turns into an exit code ([`Results::exit_status`]).
//!
//! Timestamps are [`jiff::Timestamp`]: an absolute instant that serializes as
//! RFC 3339 (`2026-11-20T14:03:11Z`) and parses any RFC 3339 offset, with no time
//! zone database needed (`humantime` only accepts `Z`, `time` needs serde
//! adapters per field, `chrono` carries a larger API we do not use).

use std::collections::BTreeSet;
use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The results format this toolkit writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Exit status when every validator passed (warnings and skips allowed).
pub const EXIT_PASSED: u8 = 0;
/// Exit status when any subject failed or could not be checked (`error`).
pub const EXIT_FAILED: u8 = 2;

/// Relative tolerance of `==` thresholds: a count parsed as `8.000000001` still
/// equals 8, and a bandwidth never compares equal by accident of rounding.
const EQUAL_TOLERANCE: f64 = 1e-9;

/// One acceptance run: who was tested, with what, and what every validator found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Results {
    /// Always [`FORMAT_VERSION`]; readers refuse versions they do not know.
    pub format_version: u32,
    /// Identity of the run: cluster, inputs, toolkit, time.
    pub run: Run,
    /// Counts and the overall verdict; must agree with `validators`.
    pub summary: Summary,
    /// Every validator, in the order they ran.
    pub validators: Vec<ValidatorResult>,
}

/// The identity of a run, printed at the top of every report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// Cluster name from the blueprint.
    pub cluster: String,
    /// The blueprint the cluster was built from.
    pub blueprint: InputFile,
    /// The inventory used, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<InputFile>,
    /// `toolkit --version` of the run.
    pub toolkit_version: String,
    /// When the first validator started.
    pub started: Timestamp,
    /// When the last validator finished.
    pub finished: Timestamp,
}

/// An input file named by its path and pinned by its content hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFile {
    /// The path as given on the command line.
    pub path: String,
    /// SHA-256 of the file's bytes, 64 lowercase hex digits.
    pub sha256: String,
}

/// Counts per verdict and the overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// `failed` when any subject failed or errored, else `passed`.
    pub verdict: Overall,
    /// Validators by their verdict ([`ValidatorResult::verdict`]).
    pub validators: Counts,
    /// Subjects by their verdict, over all validators.
    pub subjects: Counts,
}

/// The overall verdict of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overall {
    /// No subject failed or errored (warnings and skips allowed).
    Passed,
    /// At least one subject failed or errored.
    Failed,
}

impl Overall {
    /// `passed` / `failed`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "failed",
        }
    }
}

/// How many of something have each verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Passed with a warning.
    pub warning: usize,
    /// Not run on purpose.
    pub skipped: usize,
    /// Could not run or could not parse.
    pub error: usize,
}

impl Counts {
    /// Counts one more `verdict`.
    pub fn add(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Passed => self.passed += 1,
            Verdict::Failed => self.failed += 1,
            Verdict::Warning => self.warning += 1,
            Verdict::Skipped => self.skipped += 1,
            Verdict::Error => self.error += 1,
        }
    }

    /// The number with `verdict`.
    #[must_use]
    pub const fn get(&self, verdict: Verdict) -> usize {
        match verdict {
            Verdict::Passed => self.passed,
            Verdict::Failed => self.failed,
            Verdict::Warning => self.warning,
            Verdict::Skipped => self.skipped,
            Verdict::Error => self.error,
        }
    }

    /// All of them.
    #[must_use]
    pub const fn total(&self) -> usize {
        self.passed + self.failed + self.warning + self.skipped + self.error
    }
}

/// One validator's outcome on all of its subjects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidatorResult {
    /// Stable id (`nccl-pairwise`), as in `validators/*.yaml` and the blueprint.
    pub id: String,
    /// Short title for people (`NCCL all_reduce between node pairs`).
    pub title: String,
    /// Stable name of the failing condition (`nccl-bus-bandwidth-low`), what a
    /// failure is filed under.
    pub failure: String,
    /// What it checks, why it matters, how to fix a failure.
    pub docs: Docs,
    /// What a subject is.
    pub scope: Scope,
    /// Wall time of the whole validator, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
    /// One entry per node, pair, rail, switch, or the cluster.
    pub subjects: Vec<SubjectResult>,
}

impl ValidatorResult {
    /// The worst subject verdict (see [`Verdict::worst`]); `skipped` when there are none.
    #[must_use]
    pub fn verdict(&self) -> Verdict {
        Verdict::worst(self.subjects.iter().map(|subject| subject.verdict))
    }

    /// Subject counts by verdict.
    #[must_use]
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for subject in &self.subjects {
            counts.add(subject.verdict);
        }
        counts
    }
}

/// A validator's documentation, carried into the report so it stands alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Docs {
    /// What it checks.
    pub what: String,
    /// Why it matters.
    pub why: String,
    /// How to fix a failure.
    pub fix: String,
}

/// What a validator's subjects are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// One node (`node01`).
    Node,
    /// Two nodes tested together (`node01+node02`).
    NodePair,
    /// One rail of the fabric (`rail0`).
    Rail,
    /// One switch (`leaf0`).
    Switch,
    /// The whole cluster (subject: the cluster name).
    Cluster,
}

impl Scope {
    /// The name used in JSON and reports.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::NodePair => "node-pair",
            Self::Rail => "rail",
            Self::Switch => "switch",
            Self::Cluster => "cluster",
        }
    }
}

/// The outcome of one validator on one subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectResult {
    /// The node, pair, rail, switch or cluster name.
    pub subject: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in one sentence; required unless `passed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Numbers compared with thresholds (or recorded for information).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurements: Vec<Measurement>,
    /// Curves for charts (e.g. bus bandwidth by message size).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<Series>,
    /// Checks over time per node (the health history), drawn as a strip chart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timelines: Vec<Timeline>,
    /// The command and the end of its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// Wall time on this subject, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
}

impl SubjectResult {
    /// A subject judged by its measurements alone: `failed` with the first
    /// violated threshold as the reason, else `passed`.
    #[must_use]
    pub fn judged(subject: impl Into<String>, measurements: Vec<Measurement>) -> Self {
        let reason = failure_reason(&measurements);
        let verdict = if reason.is_some() { Verdict::Failed } else { Verdict::Passed };
        Self {
            subject: subject.into(),
            verdict,
            reason,
            measurements,
            series: Vec::new(),
            timelines: Vec::new(),
            evidence: None,
            duration_seconds: None,
        }
    }

    /// A subject the validator could not check (`error`): the command did not run,
    /// timed out, or its output did not parse. Not a hardware verdict.
    #[must_use]
    pub fn error(subject: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::with_reason(subject, Verdict::Error, reason)
    }

    /// A subject not checked on purpose (`skipped`), with why.
    #[must_use]
    pub fn skipped(subject: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::with_reason(subject, Verdict::Skipped, reason)
    }

    fn with_reason(subject: impl Into<String>, verdict: Verdict, reason: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            verdict,
            reason: Some(reason.into()),
            measurements: Vec::new(),
            series: Vec::new(),
            timelines: Vec::new(),
            evidence: None,
            duration_seconds: None,
        }
    }
}

/// A subject's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every threshold met.
    Passed,
    /// A threshold missed or a check found a fault.
    Failed,
    /// Passed, with something worth a look.
    Warning,
    /// Not run on purpose (not applicable, excluded).
    Skipped,
    /// Could not run or could not parse: no verdict on the hardware.
    Error,
}

impl Verdict {
    /// Every verdict, worst first: the order reports list them in.
    pub const BY_SEVERITY: [Self; 5] = [Self::Error, Self::Failed, Self::Warning, Self::Passed, Self::Skipped];

    /// The name used in JSON and reports.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::Warning => "warning",
            Self::Skipped => "skipped",
            Self::Error => "error",
        }
    }

    /// `failed` or `error`: what makes the run fail.
    #[must_use]
    pub const fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::Error)
    }

    /// Higher is worse. `skipped` ranks below `passed` so that a validator whose
    /// subjects passed except a skipped one still reads `passed`; it reads
    /// `skipped` only when nothing was checked at all.
    #[must_use]
    pub const fn severity(self) -> u8 {
        match self {
            Self::Skipped => 0,
            Self::Passed => 1,
            Self::Warning => 2,
            Self::Failed => 3,
            Self::Error => 4,
        }
    }

    /// The worst of `verdicts`; `skipped` for none.
    pub fn worst(verdicts: impl IntoIterator<Item = Self>) -> Self {
        verdicts.into_iter().max_by_key(|verdict| verdict.severity()).unwrap_or(Self::Skipped)
    }

    /// `failed` when any measurement misses its threshold, else `passed`.
    #[must_use]
    pub fn from_measurements(measurements: &[Measurement]) -> Self {
        if measurements.iter().any(|measurement| measurement.passes() == Some(false)) {
            Self::Failed
        } else {
            Self::Passed
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// One number a validator measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    /// What was measured (`busbw at 16 GiB, in-place`).
    pub name: String,
    /// The value, in `unit`.
    pub value: f64,
    /// Unit (`GB/s`, `MB/s`, `IOPS`, `ms`); empty for plain counts.
    pub unit: String,
    /// The acceptance limit; absent for numbers recorded for information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<Threshold>,
}

impl Measurement {
    /// Whether the value meets its threshold; `None` without one.
    #[must_use]
    pub fn passes(&self) -> Option<bool> {
        self.threshold.as_ref().map(|threshold| threshold.admits(self.value))
    }
}

/// The first measurement that misses its threshold, said as a sentence.
fn failure_reason(measurements: &[Measurement]) -> Option<String> {
    let failing = measurements.iter().find(|measurement| measurement.passes() == Some(false))?;
    let threshold = failing.threshold.as_ref()?;
    let with_unit = |value: f64| format!("{} {}", format_number(value), failing.unit).trim_end().to_owned();
    Some(format!(
        "{} is {}, required {} {} ({})",
        failing.name,
        with_unit(failing.value),
        threshold.comparison,
        with_unit(threshold.value),
        threshold.source,
    ))
}

/// A number as people read it: at most two decimals, no trailing zeros.
#[must_use]
pub fn format_number(value: f64) -> String {
    let text = format!("{value:.2}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    if text == "-0" { "0".to_owned() } else { text.to_owned() }
}

/// An acceptance limit and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// How the measured value must compare with `value`.
    pub comparison: Comparison,
    /// The limit, in the measurement's unit.
    pub value: f64,
    /// Where the limit came from.
    pub source: Provenance,
}

impl Threshold {
    /// Whether `measured` meets this threshold.
    #[must_use]
    pub fn admits(&self, measured: f64) -> bool {
        self.comparison.holds(measured, self.value)
    }
}

/// How a measured value must compare with its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparison {
    /// `>=`: at least (bandwidth, IOPS).
    #[serde(rename = ">=")]
    AtLeast,
    /// `<=`: at most (latency, error counts).
    #[serde(rename = "<=")]
    AtMost,
    /// `==`: exactly (GPU count, active ports), within a relative 1e-9.
    #[serde(rename = "==")]
    Equal,
}

impl Comparison {
    /// Whether `measured` compared with `limit` holds. NaN never holds.
    #[must_use]
    pub fn holds(self, measured: f64, limit: f64) -> bool {
        match self {
            Self::AtLeast => measured >= limit,
            Self::AtMost => measured <= limit,
            Self::Equal => (measured - limit).abs() <= EQUAL_TOLERANCE * limit.abs().max(1.0),
        }
    }

    /// `>=`, `<=` or `==`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AtLeast => ">=",
            Self::AtMost => "<=",
            Self::Equal => "==",
        }
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Where a threshold came from, so a reader can challenge it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The kind of source.
    pub kind: ProvenanceKind,
    /// The key, formula or reference (`8 rails x 400 Gb/s x 0.8 efficiency`).
    pub detail: String,
}

impl fmt::Display for Provenance {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}: {}", self.kind.as_str(), self.detail)
    }
}

/// The kinds of threshold source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProvenanceKind {
    /// Set in the blueprint (`acceptance.validators[].thresholds`).
    Blueprint,
    /// Computed from the expanded model (rails × link speed × efficiency).
    Model,
    /// The validator's built-in default, with its reference.
    Default,
    /// Another measurement of the same subject (`detail` is its label).
    Measurement,
}

impl ProvenanceKind {
    /// `blueprint`, `model`, `default` or `measurement`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Blueprint => "blueprint",
            Self::Model => "model",
            Self::Default => "default",
            Self::Measurement => "measurement",
        }
    }
}

/// A curve for a chart: y against x, e.g. bus bandwidth against message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Series {
    /// Name of the curve (`busbw, in-place`).
    pub name: String,
    /// What x is (`message size`).
    pub x_label: String,
    /// Unit of x; `B` means bytes and is labelled KiB/MiB/GiB.
    pub x_unit: String,
    /// How the x axis is drawn.
    pub x_scale: AxisScale,
    /// What y is (`bus bandwidth`).
    pub y_label: String,
    /// Unit of y.
    pub y_unit: String,
    /// `[x, y]` pairs, in the order measured.
    pub points: Vec<(f64, f64)>,
}

/// Which rows failed what, bucket by bucket: the health history of a cluster as
/// Prometheus kept it. Only rows that failed in the window get cells; the others
/// are named in `passing`, so a 4,096-node cluster with three bad nodes is three rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeline {
    /// What the rows failed (`toolkit health checks`).
    pub name: String,
    /// Start of each bucket, unix seconds, ascending.
    pub times: Vec<f64>,
    /// Rows that failed or went silent at least once, by name.
    pub rows: Vec<TimelineRow>,
    /// Rows that never failed and always reported in the window.
    pub passing: Vec<String>,
}

/// One row of a [`Timeline`]: a node and what it failed in each bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineRow {
    /// The node.
    pub name: String,
    /// One entry per bucket of `times`: the checks failing in it, empty if none.
    pub failing: Vec<Vec<String>>,
    /// One entry per bucket of `times`: true when the node reported nothing in it (no
    /// data: it was down or its checks did not run, so it is not passing either);
    /// empty when it reported in every bucket.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub silent: Vec<bool>,
}

impl TimelineRow {
    /// Whether the node reported nothing in bucket `index`.
    #[must_use]
    pub fn is_silent(&self, index: usize) -> bool {
        self.silent.get(index).copied().unwrap_or(false)
    }
}

/// The scale of a chart axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AxisScale {
    /// Evenly spaced values.
    Linear,
    /// Powers of two evenly spaced; every x must be > 0.
    Log2,
}

/// What was run and how it ended, for a person checking the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The command, as run on the subject.
    pub command: String,
    /// Its exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The last lines of its output (stdout and stderr interleaved).
    pub output_tail: Vec<String>,
    /// How many earlier lines were not kept.
    #[serde(default)]
    pub omitted_lines: usize,
}

impl Evidence {
    /// Keeps the last `keep` lines of `output`.
    #[must_use]
    pub fn from_output(command: impl Into<String>, exit_code: Option<i32>, output: &str, keep: usize) -> Self {
        let lines: Vec<&str> = output.lines().collect();
        let start = lines.len().saturating_sub(keep);
        Self {
            command: command.into(),
            exit_code,
            output_tail: lines[start..].iter().map(|line| (*line).to_owned()).collect(),
            omitted_lines: start,
        }
    }
}

/// A results document that cannot be used.
#[derive(Debug, Error)]
pub enum ResultsError {
    /// Not JSON, or not the results shape.
    #[error("{origin}:{line}:{column}: {message}")]
    Syntax {
        /// The file (or `-`) it came from.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong, with the key path where known.
        message: String,
    },
    /// A format version this toolkit does not read.
    #[error("{origin}: `format_version: {found}` is not supported; this toolkit reads version {FORMAT_VERSION}")]
    Version {
        /// The file it came from.
        origin: String,
        /// The version found.
        found: u64,
    },
    /// Well-formed but inconsistent: every problem found.
    #[error("{origin}: {} problem(s) in the results:\n{}", problems.len(), render_problems(problems))]
    Invalid {
        /// The file it came from.
        origin: String,
        /// The problems, in document order.
        problems: Vec<Problem>,
    },
}

/// One inconsistency in a results document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Key path (`validators[1].subjects[0].reason`).
    pub at: String,
    /// What is wrong.
    pub message: String,
}

fn render_problems(problems: &[Problem]) -> String {
    problems.iter().map(|problem| format!("  {}: {}", problem.at, problem.message)).collect::<Vec<_>>().join("\n")
}

impl Results {
    /// A results document with its summary computed.
    #[must_use]
    pub fn new(run: Run, validators: Vec<ValidatorResult>) -> Self {
        let summary = Self::summarize(&validators);
        Self { format_version: FORMAT_VERSION, run, summary, validators }
    }

    /// Counts and overall verdict of `validators`.
    #[must_use]
    pub fn summarize(validators: &[ValidatorResult]) -> Summary {
        let mut by_validator = Counts::default();
        let mut by_subject = Counts::default();
        for validator in validators {
            by_validator.add(validator.verdict());
            for subject in &validator.subjects {
                by_subject.add(subject.verdict);
            }
        }
        let verdict = if by_subject.failed + by_subject.error > 0 { Overall::Failed } else { Overall::Passed };
        Summary { verdict, validators: by_validator, subjects: by_subject }
    }

    /// The overall verdict, computed from the validators (not the stored summary).
    #[must_use]
    pub fn verdict(&self) -> Overall {
        Self::summarize(&self.validators).verdict
    }

    /// [`EXIT_PASSED`] (0) when no subject failed or errored — warnings and skips
    /// allowed — else [`EXIT_FAILED`] (2), as `terraform plan -detailed-exitcode`.
    #[must_use]
    pub fn exit_status(&self) -> u8 {
        match self.verdict() {
            Overall::Passed => EXIT_PASSED,
            Overall::Failed => EXIT_FAILED,
        }
    }

    /// Reads a results document: JSON syntax and shape (with line and column),
    /// then the format version, then every consistency problem at once.
    ///
    /// # Errors
    /// [`ResultsError`] naming `origin` (the file) and the place.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, ResultsError> {
        // The version is read first, leniently, so a newer file is refused for its
        // version and not for the first field this toolkit does not know.
        #[derive(Deserialize)]
        struct Versioned {
            format_version: Option<serde_json::Value>,
        }
        // Any other JSON value would be reported against the private probe type below.
        if let Some((offset, found)) = text.char_indices().find(|(_, found)| !found.is_whitespace())
            && found != '{'
        {
            let before = &text[..offset];
            return Err(ResultsError::Syntax {
                origin: origin.to_owned(),
                line: before.matches('\n').count() + 1,
                column: before.rsplit('\n').next().map_or(0, |line| line.chars().count()) + 1,
                message: "expected a JSON object (a toolkit results document)".to_owned(),
            });
        }
        let versioned: Versioned = serde_json::from_str(text).map_err(|error| syntax(origin, &error, None))?;
        match versioned.format_version {
            None => {
                return Err(ResultsError::Syntax {
                    origin: origin.to_owned(),
                    line: 1,
                    column: 1,
                    message: "missing field `format_version`: is this a toolkit results file?".to_owned(),
                });
            }
            Some(serde_json::Value::Number(number)) if number.as_u64() == Some(u64::from(FORMAT_VERSION)) => {}
            Some(serde_json::Value::Number(number)) if number.as_u64().is_some() => {
                return Err(ResultsError::Version { origin: origin.to_owned(), found: number.as_u64().unwrap_or(0) });
            }
            // Any other type is reported by the typed parse below, with its position.
            Some(_) => {}
        }
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let results: Self = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            let path = error.path().to_string();
            syntax(origin, error.inner(), Some(path))
        })?;
        deserializer.end().map_err(|error| syntax(origin, &error, None))?;
        let problems = results.problems();
        if problems.is_empty() {
            Ok(results)
        } else {
            Err(ResultsError::Invalid { origin: origin.to_owned(), problems })
        }
    }

    /// The document as pretty JSON with a final newline.
    ///
    /// # Errors
    /// Only a non-finite number, which JSON cannot hold (a validator bug).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        Ok(text)
    }

    /// Every inconsistency: what a runner must not write and a report must not show.
    #[must_use]
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Problems::default();
        if self.format_version != FORMAT_VERSION {
            out.push("format_version", format!("must be {FORMAT_VERSION}"));
        }
        check_run(&self.run, &mut out);
        let computed = Self::summarize(&self.validators);
        if computed != self.summary {
            out.push(
                "summary",
                format!(
                    "does not match the validators (stored {}, computed {}): the file was edited or written by a broken runner",
                    describe_summary(&self.summary),
                    describe_summary(&computed)
                ),
            );
        }
        if self.validators.is_empty() {
            out.push("validators", "is empty: a run that checked nothing cannot pass");
        }
        let mut ids = BTreeSet::new();
        for (index, validator) in self.validators.iter().enumerate() {
            let at = format!("validators[{index}]");
            if !ids.insert(validator.id.as_str()) {
                out.push(format!("{at}.id"), format!("`{}` appears more than once", validator.id));
            }
            check_validator(validator, &at, &mut out);
        }
        out.0
    }
}

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, at: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem { at: at.into(), message: message.into() });
    }

    fn non_empty(&mut self, at: &str, value: &str) {
        if value.trim().is_empty() {
            self.push(at, "must not be empty");
        }
    }

    fn duration(&mut self, at: &str, value: Option<f64>) {
        if let Some(seconds) = value
            && !(seconds.is_finite() && seconds >= 0.0)
        {
            self.push(at, format!("`{seconds}` is not a duration in seconds"));
        }
    }
}

fn describe_summary(summary: &Summary) -> String {
    let counts = &summary.subjects;
    format!(
        "{}: {} passed, {} failed, {} warning, {} skipped, {} error",
        summary.verdict.as_str(),
        counts.passed,
        counts.failed,
        counts.warning,
        counts.skipped,
        counts.error
    )
}

fn check_run(run: &Run, out: &mut Problems) {
    out.non_empty("run.cluster", &run.cluster);
    out.non_empty("run.toolkit_version", &run.toolkit_version);
    check_file(&run.blueprint, "run.blueprint", out);
    if let Some(inventory) = &run.inventory {
        check_file(inventory, "run.inventory", out);
    }
    if run.finished < run.started {
        out.push("run.finished", format!("`{}` is before `started` `{}`", run.finished, run.started));
    }
}

fn check_file(file: &InputFile, at: &str, out: &mut Problems) {
    out.non_empty(&format!("{at}.path"), &file.path);
    let hash = &file.sha256;
    if hash.len() != 64 || !hash.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)) {
        out.push(format!("{at}.sha256"), format!("`{hash}` is not 64 lowercase hex digits"));
    }
}

fn check_validator(validator: &ValidatorResult, at: &str, out: &mut Problems) {
    out.non_empty(&format!("{at}.id"), &validator.id);
    out.non_empty(&format!("{at}.title"), &validator.title);
    out.non_empty(&format!("{at}.failure"), &validator.failure);
    out.non_empty(&format!("{at}.docs.what"), &validator.docs.what);
    out.non_empty(&format!("{at}.docs.why"), &validator.docs.why);
    out.non_empty(&format!("{at}.docs.fix"), &validator.docs.fix);
    out.duration(&format!("{at}.duration_seconds"), validator.duration_seconds);
    if validator.subjects.is_empty() {
        out.push(
            format!("{at}.subjects"),
            "is empty: a validator that checked nothing records a `skipped` subject with the reason",
        );
    }
    let mut names = BTreeSet::new();
    for (index, subject) in validator.subjects.iter().enumerate() {
        let at = format!("{at}.subjects[{index}]");
        out.non_empty(&format!("{at}.subject"), &subject.subject);
        if !names.insert(subject.subject.as_str()) {
            out.push(format!("{at}.subject"), format!("`{}` appears more than once", subject.subject));
        }
        check_subject(subject, &at, out);
    }
}

fn check_subject(subject: &SubjectResult, at: &str, out: &mut Problems) {
    let has_reason = subject.reason.as_deref().is_some_and(|reason| !reason.trim().is_empty());
    if subject.verdict != Verdict::Passed && !has_reason {
        out.push(format!("{at}.reason"), format!("is required when the verdict is `{}`", subject.verdict));
    }
    out.duration(&format!("{at}.duration_seconds"), subject.duration_seconds);
    for (index, measurement) in subject.measurements.iter().enumerate() {
        let at = format!("{at}.measurements[{index}]");
        out.non_empty(&format!("{at}.name"), &measurement.name);
        if !measurement.value.is_finite() {
            out.push(format!("{at}.value"), "must be a finite number");
        }
        if let Some(threshold) = &measurement.threshold {
            if !threshold.value.is_finite() {
                out.push(format!("{at}.threshold.value"), "must be a finite number");
            }
            out.non_empty(&format!("{at}.threshold.source.detail"), &threshold.source.detail);
            if subject.verdict == Verdict::Passed && !threshold.admits(measurement.value) {
                out.push(
                    format!("{at}.value"),
                    format!(
                        "{} {} misses its threshold {} {} but the subject is `passed`",
                        format_number(measurement.value),
                        measurement.unit,
                        threshold.comparison,
                        format_number(threshold.value),
                    ),
                );
            }
        }
    }
    for (index, series) in subject.series.iter().enumerate() {
        check_series(series, &format!("{at}.series[{index}]"), out);
    }
    for (index, timeline) in subject.timelines.iter().enumerate() {
        check_timeline(timeline, &format!("{at}.timelines[{index}]"), out);
    }
    if let Some(evidence) = &subject.evidence {
        out.non_empty(&format!("{at}.evidence.command"), &evidence.command);
    }
}

fn check_timeline(timeline: &Timeline, at: &str, out: &mut Problems) {
    out.non_empty(&format!("{at}.name"), &timeline.name);
    if !timeline.times.windows(2).all(|pair| pair[0] < pair[1]) {
        out.push(format!("{at}.times"), "must be ascending");
    }
    for (index, row) in timeline.rows.iter().enumerate() {
        if row.failing.len() != timeline.times.len() {
            out.push(
                format!("{at}.rows[{index}].failing"),
                format!("has {} buckets but `times` has {}", row.failing.len(), timeline.times.len()),
            );
        }
    }
}

fn check_series(series: &Series, at: &str, out: &mut Problems) {
    out.non_empty(&format!("{at}.name"), &series.name);
    if series.points.is_empty() {
        out.push(format!("{at}.points"), "is empty");
    }
    for (index, (x, y)) in series.points.iter().enumerate() {
        if !(x.is_finite() && y.is_finite()) {
            out.push(format!("{at}.points[{index}]"), "must be finite numbers");
        } else if series.x_scale == AxisScale::Log2 && *x <= 0.0 {
            out.push(format!("{at}.points[{index}]"), format!("x `{x}` must be > 0 on a log2 axis"));
        }
    }
}

fn syntax(origin: &str, error: &serde_json::Error, path: Option<String>) -> ResultsError {
    // serde_json appends " at line L column C" to its message; the location is
    // printed in front instead, compiler style.
    let text = error.to_string();
    let message = text.rfind(" at line ").map_or(text.as_str(), |cut| &text[..cut]).to_owned();
    let message = match path {
        Some(path) if !path.is_empty() && path != "." => format!("{path}: {message}"),
        _ => message,
    };
    ResultsError::Syntax { origin: origin.to_owned(), line: error.line(), column: error.column(), message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threshold(comparison: Comparison, value: f64) -> Threshold {
        Threshold {
            comparison,
            value,
            source: Provenance { kind: ProvenanceKind::Model, detail: "8 rails x 400 Gb/s x 0.8 efficiency".into() },
        }
    }

    fn measurement(value: f64, comparison: Comparison, limit: f64) -> Measurement {
        Measurement { name: "busbw".into(), value, unit: "GB/s".into(), threshold: Some(threshold(comparison, limit)) }
    }

    fn validator(id: &str, subjects: Vec<SubjectResult>) -> ValidatorResult {
        ValidatorResult {
            id: id.into(),
            title: format!("{id} title"),
            failure: format!("{id}-failed"),
            docs: Docs { what: "what".into(), why: "why".into(), fix: "fix".into() },
            scope: Scope::Node,
            duration_seconds: Some(1.5),
            subjects,
        }
    }

    fn run() -> Run {
        Run {
            cluster: "lab".into(),
            blueprint: InputFile { path: "blueprints/lab.yaml".into(), sha256: "a".repeat(64) },
            inventory: None,
            toolkit_version: "0.1.0".into(),
            started: "2026-11-20T10:00:00Z".parse().expect("timestamp"),
            finished: "2026-11-20T11:05:00+01:00".parse().expect("timestamp"),
        }
    }

    fn with_verdict(subject: &str, verdict: Verdict) -> SubjectResult {
        let mut result = SubjectResult::judged(subject, Vec::new());
        result.verdict = verdict;
        if verdict != Verdict::Passed {
            result.reason = Some(format!("{verdict} because"));
        }
        result
    }

    #[test]
    fn comparisons_hold_at_the_limit_and_not_past_it() {
        assert!(Comparison::AtLeast.holds(320.0, 320.0));
        assert!(Comparison::AtLeast.holds(469.1, 320.0));
        assert!(!Comparison::AtLeast.holds(319.99, 320.0));
        assert!(Comparison::AtMost.holds(10.0, 10.0));
        assert!(!Comparison::AtMost.holds(10.01, 10.0));
        assert!(Comparison::Equal.holds(8.0, 8.0));
        assert!(Comparison::Equal.holds(8.000_000_000_1, 8.0));
        assert!(!Comparison::Equal.holds(7.0, 8.0));
        assert!(!Comparison::Equal.holds(8.001, 8.0));
        assert!(!Comparison::AtLeast.holds(f64::NAN, 1.0));
        assert!(!Comparison::AtMost.holds(f64::NAN, 1.0));
        assert!(!Comparison::Equal.holds(f64::NAN, 1.0));
    }

    #[test]
    fn a_measurement_without_threshold_neither_passes_nor_fails() {
        let info = Measurement { name: "ranks".into(), value: 16.0, unit: String::new(), threshold: None };
        assert_eq!(info.passes(), None);
        assert_eq!(Verdict::from_measurements(&[info]), Verdict::Passed);
    }

    #[test]
    fn judged_subject_fails_on_the_first_missed_threshold_and_says_why() {
        let subject = SubjectResult::judged(
            "dgx003+dgx004",
            vec![measurement(469.1, Comparison::AtLeast, 320.0), measurement(0.0, Comparison::AtLeast, 320.0)],
        );
        assert_eq!(subject.verdict, Verdict::Failed);
        assert_eq!(
            subject.reason.as_deref(),
            Some("busbw is 0 GB/s, required >= 320 GB/s (model: 8 rails x 400 Gb/s x 0.8 efficiency)")
        );
        let passing = SubjectResult::judged("dgx001+dgx002", vec![measurement(469.1, Comparison::AtLeast, 320.0)]);
        assert_eq!(passing.verdict, Verdict::Passed);
        assert_eq!(passing.reason, None);
    }

    #[test]
    fn worst_verdict_orders_error_failed_warning_passed_skipped() {
        use Verdict::{Error, Failed, Passed, Skipped, Warning};
        assert_eq!(Verdict::worst([]), Skipped);
        assert_eq!(Verdict::worst([Skipped, Skipped]), Skipped);
        assert_eq!(Verdict::worst([Passed, Skipped]), Passed);
        assert_eq!(Verdict::worst([Passed, Warning, Skipped]), Warning);
        assert_eq!(Verdict::worst([Warning, Failed, Passed]), Failed);
        assert_eq!(Verdict::worst([Failed, Error]), Error);
    }

    #[test]
    fn exit_status_is_zero_with_warnings_and_skips_and_two_on_failure_or_error() {
        use Verdict::{Error, Failed, Passed, Skipped, Warning};
        let cases = [
            (vec![Passed, Passed], EXIT_PASSED),
            (vec![Passed, Warning], EXIT_PASSED),
            (vec![Passed, Skipped], EXIT_PASSED),
            (vec![Skipped], EXIT_PASSED),
            (vec![Passed, Failed], EXIT_FAILED),
            (vec![Passed, Error], EXIT_FAILED),
            (vec![Warning, Error, Skipped], EXIT_FAILED),
        ];
        for (verdicts, expected) in cases {
            let subjects = verdicts
                .iter()
                .enumerate()
                .map(|(index, verdict)| with_verdict(&format!("node{index}"), *verdict))
                .collect();
            let results = Results::new(run(), vec![validator("check", subjects)]);
            assert_eq!(results.exit_status(), expected, "{verdicts:?}");
            assert_eq!(results.summary.verdict == Overall::Failed, expected == EXIT_FAILED);
            assert!(results.problems().is_empty(), "{:?}", results.problems());
        }
    }

    #[test]
    fn summary_counts_validators_by_worst_and_subjects_each() {
        let results = Results::new(
            run(),
            vec![
                validator("a", vec![with_verdict("n1", Verdict::Passed), with_verdict("n2", Verdict::Failed)]),
                validator("b", vec![with_verdict("n1", Verdict::Warning), with_verdict("n2", Verdict::Skipped)]),
                validator("c", vec![with_verdict("n1", Verdict::Skipped)]),
            ],
        );
        let summary = results.summary;
        assert_eq!(summary.validators, Counts { passed: 0, failed: 1, warning: 1, skipped: 1, error: 0 });
        assert_eq!(summary.subjects, Counts { passed: 1, failed: 1, warning: 1, skipped: 2, error: 0 });
        assert_eq!(summary.subjects.total(), 5);
        assert_eq!(summary.verdict, Overall::Failed);
    }

    #[test]
    fn json_round_trips_and_names_are_the_documented_ones() {
        let mut subject = SubjectResult::judged("node01", vec![measurement(469.1, Comparison::AtLeast, 320.0)]);
        subject.series.push(Series {
            name: "busbw, in-place".into(),
            x_label: "message size".into(),
            x_unit: "B".into(),
            x_scale: AxisScale::Log2,
            y_label: "bus bandwidth".into(),
            y_unit: "GB/s".into(),
            points: vec![(8.0, 0.0), (16.0, 0.01)],
        });
        subject.evidence = Some(Evidence::from_output("all_reduce_perf -b 8", Some(0), "a\nb\nc\n", 2));
        let results = Results::new(run(), vec![validator("nccl", vec![subject])]);
        let text = results.to_json().expect("json");
        let back = Results::from_json(&text, "r.json").expect("parses");
        assert_eq!(back, results);
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(value["format_version"], 1);
        assert_eq!(value["run"]["started"], "2026-11-20T10:00:00Z");
        // An offset is kept as the same instant, written in UTC.
        assert_eq!(value["run"]["finished"], "2026-11-20T10:05:00Z");
        let first = &value["validators"][0]["subjects"][0];
        assert_eq!(first["verdict"], "passed");
        assert_eq!(first["measurements"][0]["threshold"]["comparison"], ">=");
        assert_eq!(first["measurements"][0]["threshold"]["source"]["kind"], "model");
        assert_eq!(first["series"][0]["points"][1], serde_json::json!([16.0, 0.01]));
        assert_eq!(first["evidence"]["output_tail"], serde_json::json!(["b", "c"]));
        assert_eq!(first["evidence"]["omitted_lines"], 1);
        assert_eq!(value["validators"][0]["scope"], "node");
        assert_eq!(value["summary"]["verdict"], "passed");
    }

    #[test]
    fn evidence_keeps_everything_when_output_is_short() {
        let evidence = Evidence::from_output("true", None, "one\ntwo", 10);
        assert_eq!(evidence.output_tail, ["one", "two"]);
        assert_eq!(evidence.omitted_lines, 0);
        assert!(Evidence::from_output("true", None, "", 10).output_tail.is_empty());
    }

    #[test]
    fn malformed_json_is_located() {
        let error = Results::from_json("{\n  \"format_version\": 1,\n  \"run\": [,\n}", "bad.json").expect_err("fails");
        let text = error.to_string();
        assert!(text.starts_with("bad.json:3:"), "{text}");
        assert!(!text.contains(" at line "), "{text}");
    }

    #[test]
    fn a_wrong_field_type_names_its_key_path_and_position() {
        let mut value =
            serde_json::to_value(Results::new(run(), vec![validator("a", vec![with_verdict("n1", Verdict::Passed)])]))
                .expect("value");
        value["validators"][0]["subjects"][0]["verdict"] = "pass".into();
        let text = serde_json::to_string_pretty(&value).expect("text");
        let error = Results::from_json(&text, "r.json").expect_err("fails").to_string();
        assert!(error.contains("validators[0].subjects[0].verdict: unknown variant `pass`"), "{error}");
        let line = text.lines().position(|line| line.contains("\"pass\"")).expect("line") + 1;
        assert!(error.starts_with(&format!("r.json:{line}:")), "{error}");
    }

    #[test]
    fn newer_versions_and_non_results_are_refused_clearly() {
        let error = Results::from_json(r#"{"format_version": 2, "future": true}"#, "r.json").expect_err("fails");
        assert!(matches!(error, ResultsError::Version { found: 2, .. }), "{error}");
        let error = Results::from_json(r#"{"plan": []}"#, "r.json").expect_err("fails").to_string();
        assert!(error.contains("missing field `format_version`"), "{error}");
        let error = Results::from_json("\n  [1, 2]", "r.json").expect_err("fails").to_string();
        assert_eq!(error, "r.json:2:3: expected a JSON object (a toolkit results document)");
    }

    #[test]
    fn inconsistencies_are_all_reported() {
        let mut failing = with_verdict("n1", Verdict::Failed);
        failing.reason = None;
        let mut lying = SubjectResult::judged("n2", vec![measurement(10.0, Comparison::AtLeast, 320.0)]);
        lying.verdict = Verdict::Passed;
        lying.reason = None;
        let mut results = Results::new(run(), vec![validator("a", vec![failing, lying]), validator("a", Vec::new())]);
        results.run.blueprint.sha256 = "XYZ".into();
        results.run.finished = "2026-11-20T09:00:00Z".parse().expect("timestamp");
        results.summary.subjects.passed += 7;
        let problems = results.problems();
        let at: Vec<&str> = problems.iter().map(|problem| problem.at.as_str()).collect();
        assert_eq!(
            at,
            [
                "run.blueprint.sha256",
                "run.finished",
                "summary",
                "validators[0].subjects[0].reason",
                "validators[0].subjects[1].measurements[0].value",
                "validators[1].id",
                "validators[1].subjects",
            ],
            "{problems:#?}"
        );
        let text = ResultsError::Invalid { origin: "r.json".into(), problems }.to_string();
        assert!(text.starts_with("r.json: 7 problem(s)"), "{text}");
    }

    #[test]
    fn a_run_without_validators_is_refused() {
        let problems = Results::new(run(), Vec::new()).problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].at, "validators");
    }

    #[test]
    fn log2_series_refuse_non_positive_x() {
        let mut subject = with_verdict("n1", Verdict::Passed);
        subject.series.push(Series {
            name: "s".into(),
            x_label: "size".into(),
            x_unit: "B".into(),
            x_scale: AxisScale::Log2,
            y_label: "bw".into(),
            y_unit: "GB/s".into(),
            points: vec![(0.0, 1.0)],
        });
        let results = Results::new(run(), vec![validator("a", vec![subject])]);
        let problems = results.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].at, "validators[0].subjects[0].series[0].points[0]");
    }

    #[test]
    fn numbers_print_with_at_most_two_decimals() {
        assert_eq!(format_number(469.10), "469.1");
        assert_eq!(format_number(52_820.401_293), "52820.4");
        assert_eq!(format_number(320.0), "320");
        assert_eq!(format_number(0.004), "0");
        assert_eq!(format_number(-0.001), "0");
        assert_eq!(format_number(10.289_152), "10.29");
    }
}
