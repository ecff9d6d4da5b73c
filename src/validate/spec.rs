//! The schema of a validator file (`validators/*.yaml`): one acceptance test as data.
//!
//! Stage: validate (load). Input: the YAML text of one validator. Output: a checked
//! [`ValidatorSpec`], or diagnostics with `file:line:col` for every problem found.
//!
//! A validator names what it checks (`id`, `title`, the failing condition
//! `failure`, `docs`), where it runs (`scope`, `nodes`, `pairing`, `runs_on`), when
//! it applies (`requires`), what it runs (`command` + `parser`, or several `steps`;
//! commands are minijinja templates over the model in which every `{{ … }}` becomes
//! one shell-quoted word), how numbers are read from the parsed output
//! (`measurements`: minijinja expressions over `output`, optionally aggregated over
//! `items`), and what they must meet (`thresholds`: a fixed `value` with its
//! `reference`, or a `derived` value computed from the model). The format is
//! documented with examples in `docs/validators.md`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::derived;
use super::expr;
use crate::blueprint::schema::RepairStep;
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::results::Comparison;
use crate::source::SourceFile;

/// Seconds a command may run when the validator does not say.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;

/// One acceptance test, as written in its YAML file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidatorSpec {
    /// Stable id (`nccl-pairwise`): lowercase letters, digits and `-`.
    pub id: String,
    /// Short title for people.
    pub title: String,
    /// Stable name of the failing condition (`nccl-bus-bandwidth-low`).
    pub failure: String,
    /// What it checks, why it matters, how to fix a failure.
    pub docs: SpecDocs,
    /// What one subject is.
    pub scope: SpecScope,
    /// Which nodes subjects are made of (node, node-pair and rail scopes).
    #[serde(default)]
    pub nodes: NodeSelection,
    /// How nodes are paired (node-pair and rail scopes).
    #[serde(default)]
    pub pairing: Pairing,
    /// Where the command runs.
    #[serde(default)]
    pub runs_on: RunsOn,
    /// What the cluster must have for this validator to apply; otherwise it is `skipped`.
    #[serde(default)]
    pub requires: Vec<Requirement>,
    /// Programs the commands need on the host they run on (the controller for jobs
    /// launched with `srun`), looked up with `command -v` before anything runs: a
    /// missing one makes the subject `skipped` with a reason that names it and the host
    /// — an optional benchmark that is not installed is no verdict on the hardware.
    #[serde(default)]
    pub programs: Vec<String>,
    /// Where `programs` are looked up: the host the command runs on (default), or every
    /// node of the subject through one `srun` task per node (for jobs launched with
    /// `srun`, whose programs run on the compute nodes).
    #[serde(default)]
    pub programs_on: ProgramsOn,
    /// Numeric parameters for the command (`{{ params.level }}`); the blueprint
    /// overrides them under `acceptance.validators[].thresholds`.
    #[serde(default)]
    pub params: BTreeMap<String, f64>,
    /// The command (a template), when the validator runs one command.
    #[serde(default)]
    pub command: Option<String>,
    /// The parser of `command`'s standard output.
    #[serde(default)]
    pub parser: Option<String>,
    /// Several commands run one after the other on the same host, each parsed on its
    /// own into `output.<name>`; instead of `command` and `parser`.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// A command started first on the peer (node-pair and rail scopes), e.g. the
    /// `ib_write_bw` server the subject's command connects to.
    #[serde(default)]
    pub server: Option<Server>,
    /// Numbers read from the parsed output.
    #[serde(default)]
    pub measurements: Vec<MeasurementSpec>,
    /// Curves recorded for the report's charts.
    #[serde(default)]
    pub series: Vec<SeriesSpec>,
    /// Rows failing over time, for the report's strip charts.
    #[serde(default)]
    pub timelines: Vec<TimelineSpec>,
    /// Limits the measurements must meet.
    #[serde(default)]
    pub thresholds: Vec<ThresholdSpec>,
    /// A template appended to the reason of a failing or warning subject, to name
    /// what exactly is wrong (`sessions down: {{ … }}`).
    #[serde(default)]
    pub explain: Option<String>,
    /// Seconds each command may run (the remote command is killed after it).
    #[serde(default = "default_timeout")]
    pub timeout: u64,
    /// What a missed threshold means, unless the threshold says otherwise.
    #[serde(default)]
    pub severity: Severity,
    /// Pairs that fail are re-tested with known-good partners to name the bad node
    /// (node-pair and rail scopes; CHS `determine_failed_components`).
    #[serde(default)]
    pub second_pass: bool,
    /// A cross-subject analysis computed in Rust and added to every subject's output.
    #[serde(default)]
    pub analysis: Option<Analysis>,
    /// Subjects run at once for this validator (default: the run's `--parallel`).
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// The same check as a continuous node health check: a POSIX `sh` probe that
    /// prints this validator's measurements, judged on the node against its thresholds.
    #[serde(default)]
    pub health: Option<HealthSpec>,
    /// How the validator runs as a Kubernetes Job when the scheduler is Kubernetes;
    /// without it the validator is skipped there (its command needs the host).
    #[serde(default)]
    pub kubernetes: Option<KubernetesSpec>,
}

/// The container a node-scope validator's commands run in on Kubernetes: one
/// `batch/v1` Job per node, the same commands and parsers as over SSH.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSpec {
    /// The image holding the validator's programs (`toolkit validate --image ID=REF`
    /// replaces or supplies it for one run; without any the validator is skipped).
    #[serde(default)]
    pub image: Option<String>,
    /// Run privileged (DCGM diagnostics and the kernel log need the host's devices).
    #[serde(default)]
    pub privileged: bool,
    /// Host directories mounted at the same path (the scratch a storage test writes,
    /// the journal the Xid scan reads).
    #[serde(default)]
    pub host_paths: Vec<String>,
    /// Run as one MPIJob (Kubeflow mpi-operator, `kubeflow.org/v2beta1`) over the
    /// selected GPU nodes instead of a Job per node: `command` runs in the launcher,
    /// one worker per node holds its GPUs (cluster scope; Slurm is then not required).
    #[serde(default)]
    pub mpi: bool,
    /// The command on Kubernetes, instead of the validator's (a template over the same
    /// context), e.g. `mpirun` where Slurm would use `srun`.
    #[serde(default)]
    pub command: Option<String>,
}

/// A validator as a continuous health check that runs on the node itself, without
/// toolkit: the probe prints the validator's measurements as `<name> <number>` lines
/// (and one `detail <text>` line naming what is wrong), and the node's health script
/// compares them with the validator's thresholds, resolved for the node at deploy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSpec {
    /// When it runs: with Slurm's health check (`fast`, killed after 60 s) or from a
    /// systemd timer (`slow`).
    pub cadence: Cadence,
    /// The probe: a POSIX `sh` template over the same context as `command`, every
    /// `{{ … }}` one shell-quoted word.
    pub probe: String,
    /// Seconds the probe may run on the node (default: 10 for fast, the validator's
    /// `timeout` for slow).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// What a failure does when the blueprint's `monitoring.health.checks` does not
    /// name this check, instead of its `on_failure`: `alert` for a check whose
    /// failure may be the peer's fault (a ping across a rail), which must not drain
    /// the node that saw it unless the blueprint says so.
    #[serde(default)]
    pub on_failure: Option<HealthAction>,
    /// What the repair service tries, in order, on a node this check drained
    /// (`monitoring.repair`), e.g. `[relink, reboot, power-cycle, diagnose, rma]`;
    /// empty: the check's drains are left to people.
    #[serde(default)]
    pub repair: Vec<RepairStep>,
}

/// What a failing health check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthAction {
    /// Drain the node.
    Drain,
    /// Only report it.
    Alert,
}

/// When a health check runs on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cadence {
    /// Every `monitoring.health.fast_interval`, by slurmd (`HealthCheckProgram`).
    Fast,
    /// Every `monitoring.health.slow_interval`, by a systemd timer.
    Slow,
}

impl Cadence {
    /// The name written in YAML, metrics and file names.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Fast => "fast",
            Self::Slow => "slow",
        }
    }
}

/// Seconds a fast probe may run when its validator does not say: Slurm kills the
/// whole health check program after 60 s.
pub const FAST_PROBE_TIMEOUT_SECONDS: u64 = 10;

const fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECONDS
}

/// What it checks, why it matters, how to fix a failure (carried into the report).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecDocs {
    /// What it checks.
    pub what: String,
    /// Why it matters.
    pub why: String,
    /// How to fix a failure.
    pub fix: String,
}

/// What one subject of a validator is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpecScope {
    /// Each selected node.
    Node,
    /// Pairs of selected nodes (`node01+node02`).
    NodePair,
    /// Each rail, for each pair of nodes on it (`node01+node02/rail0`).
    Rail,
    /// Each switch of the compute fabric.
    Switch,
    /// The cluster as a whole (one subject, run on the controller).
    Cluster,
}

/// Which nodes subjects are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeSelection {
    /// Nodes of groups with the `compute` role.
    #[default]
    Compute,
    /// Nodes with GPUs.
    Gpu,
    /// Nodes with NICs on the compute fabric.
    Rail,
    /// Every node.
    All,
}

/// How nodes are paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pairing {
    /// Each node with the next (the last with the first): every node is tested as
    /// client and as server once.
    #[default]
    Ring,
    /// Nodes two by two, each in one pair (an odd last node pairs with the first):
    /// the first pass of a pairwise test that a second pass bisects.
    Disjoint,
}

/// Where a subject's command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunsOn {
    /// The subject itself: the node, the first node of a pair, the switch; the
    /// controller for the cluster scope.
    #[default]
    Subject,
    /// The Slurm controller (jobs launched with `srun`).
    Controller,
}

/// Where a validator's `programs` are looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProgramsOn {
    /// The host the command runs on.
    #[default]
    Host,
    /// Every node of the subject, through `srun` (needs `requires: [slurm]`).
    Nodes,
}

/// Something the cluster must have for a validator (or a step) to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requirement {
    /// Nodes with GPUs.
    Gpu,
    /// GPUs connected by NVLink.
    Nvlink,
    /// An InfiniBand compute fabric.
    Infiniband,
    /// A RoCE (routed Ethernet) compute fabric.
    Roce,
    /// A RoCE fabric with a `roce:` QoS section and nodes whose group installs an
    /// OFED stack (DOCA-OFED or MLNX_OFED: the host QoS tools come with it).
    RoceQos,
    /// Nodes with compute-fabric NICs.
    Rails,
    /// Slurm as the scheduler.
    Slurm,
    /// Slurm accounting (slurmdbd), where QOS live.
    Accounting,
    /// Tenants declared in the blueprint.
    Tenants,
    /// A GPU driver declared in the blueprint's `software` (some GPU group has one).
    GpuDriver,
    /// A shared filesystem mounted by the compute nodes (`storage.filesystems`).
    SharedFilesystem,
    /// Monitoring deployed by toolkit (the blueprint's `monitoring` section).
    Monitoring,
}

impl Requirement {
    /// The name written in YAML.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Nvlink => "nvlink",
            Self::Infiniband => "infiniband",
            Self::Roce => "roce",
            Self::RoceQos => "roce-qos",
            Self::Rails => "rails",
            Self::Slurm => "slurm",
            Self::Accounting => "accounting",
            Self::Tenants => "tenants",
            Self::GpuDriver => "gpu-driver",
            Self::SharedFilesystem => "shared-filesystem",
            Self::Monitoring => "monitoring",
        }
    }
}

/// One command of a multi-step validator.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Key of its parsed output under `output` (`output.nodes`).
    pub name: String,
    /// The command (a template).
    pub command: String,
    /// The parser of its standard output.
    pub parser: String,
    /// Run only when the cluster has all of these.
    #[serde(default)]
    pub when: Vec<Requirement>,
}

/// A command started on the peer before the subject's command.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// The command (a template over the same context).
    pub command: String,
    /// Seconds to wait after starting it before the client command runs.
    #[serde(default = "default_ready")]
    pub ready: f64,
}

const fn default_ready() -> f64 {
    2.0
}

/// A number read from the parsed output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasurementSpec {
    /// Key (`busbw`), used by thresholds and blueprint overrides: lowercase, digits, `_`.
    pub name: String,
    /// What people read (`in-place bus bandwidth, peak`).
    pub label: String,
    /// Unit (`GB/s`); empty for counts.
    #[serde(default)]
    pub unit: String,
    /// An expression giving a list; the measurement aggregates over it.
    #[serde(default)]
    pub items: Option<String>,
    /// An expression over `item` that keeps an item when true.
    #[serde(default, rename = "where")]
    pub filter: Option<String>,
    /// The number: an expression (over `item` when `items` is set).
    #[serde(default)]
    pub value: Option<String>,
    /// How item values are combined (required with `items`).
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    /// Measured only when the cluster has all of these.
    #[serde(default)]
    pub when: Vec<Requirement>,
}

/// How the values of items are combined into one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    /// Items kept by `where` (no `value` needed).
    Count,
    /// Sum of values (none skipped).
    Sum,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
    /// Arithmetic mean.
    Mean,
    /// Number of different values.
    Distinct,
}

/// A strip chart for the report: which rows failed what, bucket by bucket. Items are
/// series of `[time, value]` points; a point whose value is 0 marks its row failing
/// `label` in the bucket it falls in.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineSpec {
    /// What the rows fail (`toolkit health checks`).
    pub name: String,
    /// An expression giving the start of every bucket, unix seconds, ascending.
    pub times: String,
    /// An expression giving every row name, so rows that never failed are counted.
    pub rows: String,
    /// An expression giving the series.
    pub items: String,
    /// The row of an item (`item.labels.node`).
    pub row: String,
    /// What an item checks (`item.labels.check`).
    pub label: String,
    /// The `[time, value]` points of an item.
    pub points: String,
    /// An expression giving the series of rows that reported nothing (their `points`
    /// are the buckets without data), read with the same `row` and `points`; a row
    /// silent in a bucket is "no data" there, not passing.
    #[serde(default)]
    pub silent: Option<String>,
}

/// A curve for the report: y against x over items.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeriesSpec {
    /// Curve name (`busbw, in-place`).
    pub name: String,
    /// An expression giving the list of points.
    pub items: String,
    /// x of an item.
    pub x: String,
    /// y of an item.
    pub y: String,
    /// What x is.
    pub x_label: String,
    /// Unit of x (`B` is drawn as KiB/MiB/GiB).
    pub x_unit: String,
    /// `log2` or `linear`.
    #[serde(default)]
    pub x_scale: SeriesScale,
    /// What y is.
    pub y_label: String,
    /// Unit of y.
    pub y_unit: String,
}

/// The scale of a series' x axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeriesScale {
    /// Evenly spaced values.
    #[default]
    Linear,
    /// Powers of two evenly spaced.
    Log2,
}

/// A limit one measurement must meet.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdSpec {
    /// The measurement's `name`.
    pub measurement: String,
    /// `>=`, `<=` or `==`.
    pub comparison: Comparison,
    /// A fixed limit.
    #[serde(default)]
    pub value: Option<f64>,
    /// A limit computed from the model (names in `docs/validators.md`).
    #[serde(default)]
    pub derived: Option<String>,
    /// The limit is another, earlier measurement of the same subject (`verified >=
    /// planned`); the report draws both as one chart.
    #[serde(default)]
    pub of: Option<String>,
    /// Where a fixed limit comes from (required with `value`).
    #[serde(default)]
    pub reference: Option<String>,
    /// What missing it means (default: the validator's `severity`).
    #[serde(default)]
    pub severity: Option<Severity>,
    /// Applies only when the cluster has all of these.
    #[serde(default)]
    pub when: Vec<Requirement>,
}

/// What a missed threshold means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The subject fails.
    #[default]
    Failure,
    /// The subject passes with a warning.
    Warning,
}

/// Cross-subject analyses computed in Rust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Analysis {
    /// LLDP neighbours of every switch against the cabling plan: adds
    /// `output.cabling` (`findings`, `verified`, `expected`) to each switch.
    Cabling,
}

/// A step with everything resolved: what the runner executes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedStep {
    /// `None` for a single-command validator (its output is `output` itself).
    pub name: Option<String>,
    /// The command template.
    pub command: String,
    /// The parser.
    pub parser: String,
    /// Requirements of the step.
    pub when: Vec<Requirement>,
}

impl ValidatorSpec {
    /// Reads and checks one validator file: YAML shape first (with locations), then
    /// every semantic problem at once.
    ///
    /// # Errors
    /// Diagnostics naming the file, line and key.
    pub fn from_source(source: &SourceFile) -> Result<Self, Diagnostics> {
        let value = crate::yaml::parse_value(source)?;
        let spec: Self = crate::yaml::deserialize(source, value)?;
        let problems = spec.problems(source);
        if problems.has_errors() { Err(problems) } else { Ok(spec) }
    }

    /// The commands to run, single-command validators as one unnamed step.
    #[must_use]
    pub fn steps(&self) -> Vec<ResolvedStep> {
        match (&self.command, &self.parser) {
            (Some(command), Some(parser)) => {
                vec![ResolvedStep { name: None, command: command.clone(), parser: parser.clone(), when: Vec::new() }]
            }
            _ => self
                .steps
                .iter()
                .map(|step| ResolvedStep {
                    name: Some(step.name.clone()),
                    command: step.command.clone(),
                    parser: step.parser.clone(),
                    when: step.when.clone(),
                })
                .collect(),
        }
    }

    /// The measurement called `name`.
    #[must_use]
    pub fn measurement(&self, name: &str) -> Option<&MeasurementSpec> {
        self.measurements.iter().find(|measurement| measurement.name == name)
    }

    /// Names the blueprint may override under `thresholds`: thresholded measurements
    /// and parameters.
    #[must_use]
    pub fn overridable(&self) -> BTreeSet<&str> {
        self.thresholds
            .iter()
            .map(|threshold| threshold.measurement.as_str())
            .chain(self.params.keys().map(String::as_str))
            .collect()
    }

    fn problems(&self, source: &SourceFile) -> Diagnostics {
        let mut out = Diagnostics::default();
        let mut error = |id: &'static str, at: &str, message: String, help: &str| {
            out.push(Diagnostic::error(id, message).at(source, at).help(help.to_owned()));
        };
        if !is_slug(&self.id, '-') {
            error(
                "validator-id",
                "id",
                format!("`{}` is not a validator id", self.id),
                "use lowercase letters, digits and `-`, e.g. `nccl-pairwise`",
            );
        }
        if !is_slug(&self.failure, '-') {
            error(
                "validator-failure",
                "failure",
                format!("`{}` is not a failure name", self.failure),
                "use lowercase letters, digits and `-`, e.g. `gpu-count-wrong`",
            );
        }
        for (index, program) in self.programs.iter().enumerate() {
            if !is_program_name(program) {
                error(
                    "validator-program",
                    &format!("programs[{index}]"),
                    format!("`{program}` is not a program name"),
                    "give the name `command -v` looks up on the PATH, e.g. `ior` (letters, digits, `.`, `_`, `+`, `-`)",
                );
            }
        }
        if self.programs_on == ProgramsOn::Nodes && !self.requires.contains(&Requirement::Slurm) {
            error(
                "validator-program",
                "programs_on",
                "`programs_on: nodes` looks programs up through `srun`".to_owned(),
                "add `slurm` to `requires`, or look them up on the host (`programs_on: host`)",
            );
        }
        for (key, text) in [
            ("title", &self.title),
            ("docs.what", &self.docs.what),
            ("docs.why", &self.docs.why),
            ("docs.fix", &self.docs.fix),
        ] {
            if text.trim().is_empty() {
                error(
                    "validator-empty",
                    key,
                    format!("`{key}` is empty"),
                    "say it in a sentence: the report shows it to the customer",
                );
            }
        }
        if self.timeout == 0 {
            error(
                "validator-timeout",
                "timeout",
                "`timeout: 0` would kill every command at once".to_owned(),
                "give seconds, e.g. `timeout: 300`",
            );
        }
        if self.concurrency == Some(0) {
            error(
                "validator-concurrency",
                "concurrency",
                "`concurrency: 0` would run nothing".to_owned(),
                "leave it out, or give at least 1",
            );
        }
        let pairs = matches!(self.scope, SpecScope::NodePair | SpecScope::Rail);
        if self.server.is_some() && !pairs {
            error(
                "validator-server",
                "server",
                "`server` needs a peer: only node-pair and rail scopes have one".to_owned(),
                "remove `server`, or use `scope: node-pair` or `rail`",
            );
        }
        if self.second_pass && !pairs {
            error(
                "validator-second-pass",
                "second_pass",
                "`second_pass` re-tests pairs: only node-pair and rail scopes have pairs".to_owned(),
                "remove `second_pass`",
            );
        }
        if self.analysis == Some(Analysis::Cabling) && self.scope != SpecScope::Switch {
            error(
                "validator-analysis",
                "analysis",
                "the cabling analysis reads every switch's LLDP neighbours: it needs `scope: switch`".to_owned(),
                "set `scope: switch`",
            );
        }
        for (name, value) in &self.params {
            if !is_slug(name, '_') || !value.is_finite() {
                error(
                    "validator-param",
                    &format!("params.{name}"),
                    format!("parameter `{name}: {value}` is not a name with a finite number"),
                    "use lowercase names with `_` and plain numbers",
                );
            }
        }
        self.check_steps(source, &mut out);
        self.check_measurements(source, &mut out);
        self.check_thresholds(source, &mut out);
        self.check_health(source, &mut out);
        if let Some(explain) = &self.explain
            && let Err(problem) = expr::check_text_template(explain)
        {
            out.push(
                Diagnostic::error("validator-template", format!("`explain` does not compile: {problem}"))
                    .at(source, "explain")
                    .help("see the minijinja syntax: `{{ … }}` and `{% … %}`"),
            );
        }
        out
    }

    fn check_health(&self, source: &SourceFile, out: &mut Diagnostics) {
        let Some(health) = &self.health else { return };
        if !matches!(self.scope, SpecScope::Node | SpecScope::Rail | SpecScope::NodePair)
            || self.runs_on != RunsOn::Subject
        {
            out.push(
                Diagnostic::error("validator-health", "`health` probes run on a node: the subject must run on one")
                    .at(source, "health")
                    .help("use `scope: node`, `rail` or `node-pair` with `runs_on: subject`, or remove `health`"),
            );
        }
        if let Err(problem) = expr::check_command_template(&health.probe) {
            out.push(
                Diagnostic::error("validator-template", format!("the health probe does not compile: {problem}"))
                    .at(source, "health.probe")
                    .help("see the minijinja syntax: `{{ … }}` and `{% … %}`"),
            );
        }
        let limit = if health.cadence == Cadence::Fast { 50 } else { 86_400 };
        if health.timeout.is_some_and(|seconds| seconds == 0 || seconds > limit) {
            out.push(
                Diagnostic::error(
                    "validator-health",
                    format!(
                        "`health.timeout` must be between 1 and {limit} seconds for a {} probe",
                        health.cadence.as_str()
                    ),
                )
                .at(source, "health.timeout")
                .help("Slurm kills the fast health check after 60 s: keep fast probes to a few seconds"),
            );
        }
        if let Some(problem) = (!health.repair.is_empty()).then(|| RepairStep::ladder_problem(&health.repair)).flatten()
        {
            out.push(
                Diagnostic::error("validator-repair", problem).at(source, "health.repair").help(
                    "list each step once and end with `rma`, e.g. `repair: [reboot, power-cycle, diagnose, rma]`",
                ),
            );
        }
        if !health.repair.is_empty() && health.on_failure == Some(HealthAction::Alert) {
            out.push(
                Diagnostic::error("validator-repair", "a check that only alerts drains no node: nothing to repair")
                    .at(source, "health.repair")
                    .help("remove `repair`, or let the check drain"),
            );
        }
    }

    fn check_steps(&self, source: &SourceFile, out: &mut Diagnostics) {
        match (&self.command, &self.parser, self.steps.is_empty()) {
            (Some(_), Some(_), true) | (None, None, false) => {}
            (Some(_), None, true) => out.push(
                Diagnostic::error("validator-parser", "`command` has no `parser`")
                    .at(source, "command")
                    .help(format!("add `parser:`, one of: {}", expr::parser_names().join(", "))),
            ),
            (None, Some(_), true) => out.push(
                Diagnostic::error("validator-command", "`parser` has no `command`")
                    .at(source, "parser")
                    .help("add the `command:` whose output it reads"),
            ),
            (None, None, true) => out.push(
                Diagnostic::error(
                    "validator-command",
                    "the validator runs nothing: give `command` and `parser`, or `steps`",
                )
                .in_file(&source.path)
                .help("add `command:` and `parser:`"),
            ),
            _ => out.push(
                Diagnostic::error("validator-command", "give either `command` and `parser`, or `steps`, not both")
                    .at(source, "steps")
                    .help("move the command into `steps`, or drop `steps`"),
            ),
        }
        let mut names = BTreeSet::new();
        for (index, step) in self.steps.iter().enumerate() {
            if !is_slug(&step.name, '_') {
                out.push(
                    Diagnostic::error("validator-step", format!("step name `{}` is not a key", step.name))
                        .at(source, format!("steps[{index}].name"))
                        .help("use lowercase letters, digits and `_`: it becomes `output.<name>`"),
                );
            } else if !names.insert(step.name.as_str()) {
                out.push(
                    Diagnostic::error("validator-step", format!("step `{}` appears twice", step.name))
                        .at(source, format!("steps[{index}].name"))
                        .help("give every step its own name"),
                );
            }
        }
        let keyed: Vec<(String, &str, &str)> = match (&self.command, &self.parser) {
            (Some(command), Some(parser)) => vec![(String::new(), command.as_str(), parser.as_str())],
            _ => self
                .steps
                .iter()
                .enumerate()
                .map(|(index, step)| (format!("steps[{index}]."), step.command.as_str(), step.parser.as_str()))
                .collect(),
        };
        for (prefix, command, parser) in keyed {
            if let Err(problem) = expr::check_command_template(command) {
                out.push(
                    Diagnostic::error("validator-template", format!("the command does not compile: {problem}"))
                        .at(source, format!("{prefix}command"))
                        .help("see the minijinja syntax: `{{ … }}` and `{% … %}`"),
                );
            }
            if !expr::parser_names().contains(&parser) {
                let help = match did_you_mean(parser, expr::parser_names()) {
                    Some(close) => {
                        format!("did you mean `{close}`? known parsers: {}", expr::parser_names().join(", "))
                    }
                    None => format!("known parsers: {}", expr::parser_names().join(", ")),
                };
                out.push(
                    Diagnostic::error("validator-parser", format!("unknown parser `{parser}`"))
                        .at(source, format!("{prefix}parser"))
                        .help(help),
                );
            }
        }
        if let Some(server) = &self.server {
            if let Err(problem) = expr::check_command_template(&server.command) {
                out.push(
                    Diagnostic::error("validator-template", format!("the server command does not compile: {problem}"))
                        .at(source, "server.command")
                        .help("see the minijinja syntax"),
                );
            }
            if !(server.ready.is_finite() && (0.0..=600.0).contains(&server.ready)) {
                out.push(
                    Diagnostic::error(
                        "validator-server",
                        format!("`ready: {}` is not a delay in seconds", server.ready),
                    )
                    .at(source, "server.ready")
                    .help("give seconds between 0 and 600"),
                );
            }
        }
    }

    fn check_measurements(&self, source: &SourceFile, out: &mut Diagnostics) {
        let mut names = BTreeSet::new();
        for (index, measurement) in self.measurements.iter().enumerate() {
            let at = |key: &str| format!("measurements[{index}].{key}");
            if !is_slug(&measurement.name, '_') {
                out.push(
                    Diagnostic::error(
                        "validator-measurement",
                        format!("`{}` is not a measurement key", measurement.name),
                    )
                    .at(source, at("name"))
                    .help("use lowercase letters, digits and `_`"),
                );
            } else if !names.insert(measurement.name.as_str()) {
                out.push(
                    Diagnostic::error(
                        "validator-measurement",
                        format!("measurement `{}` appears twice", measurement.name),
                    )
                    .at(source, at("name"))
                    .help("give every measurement its own name"),
                );
            }
            match (&measurement.items, measurement.aggregate, &measurement.value) {
                (None, None, Some(_)) | (Some(_), Some(Aggregate::Count), _) | (Some(_), Some(_), Some(_)) => {}
                (None, Some(_), _) => out.push(
                    Diagnostic::error("validator-measurement", "`aggregate` needs `items` to aggregate over")
                        .at(source, at("aggregate"))
                        .help("add `items:`, or drop `aggregate`"),
                ),
                (None, None, None) => out.push(
                    Diagnostic::error(
                        "validator-measurement",
                        format!("measurement `{}` has no `value`", measurement.name),
                    )
                    .at(source, at("name"))
                    .help("add `value:` (an expression over `output`)"),
                ),
                (Some(_), None, _) => out.push(
                    Diagnostic::error("validator-measurement", "`items` needs an `aggregate`")
                        .at(source, at("items"))
                        .help("add `aggregate:` (count, sum, min, max, mean or distinct)"),
                ),
                (Some(_), Some(_), None) => out.push(
                    Diagnostic::error("validator-measurement", "this aggregate needs a `value` per item")
                        .at(source, at("aggregate"))
                        .help("add `value:` (an expression over `item`)"),
                ),
            }
            if measurement.filter.is_some() && measurement.items.is_none() {
                out.push(
                    Diagnostic::error("validator-measurement", "`where` filters `items`, which is not set")
                        .at(source, at("where"))
                        .help("add `items:`, or drop `where`"),
                );
            }
            for (key, text) in
                [("items", &measurement.items), ("where", &measurement.filter), ("value", &measurement.value)]
            {
                if let Some(text) = text
                    && let Err(problem) = expr::check_expression(text)
                {
                    out.push(
                        Diagnostic::error("validator-expression", format!("`{key}` does not compile: {problem}"))
                            .at(source, at(key))
                            .help("an expression, e.g. `output.rows | length`"),
                    );
                }
            }
        }
        for (index, series) in self.series.iter().enumerate() {
            for (key, text) in [("items", &series.items), ("x", &series.x), ("y", &series.y)] {
                if let Err(problem) = expr::check_expression(text) {
                    out.push(
                        Diagnostic::error("validator-expression", format!("`{key}` does not compile: {problem}"))
                            .at(source, format!("series[{index}].{key}"))
                            .help("an expression over `item`"),
                    );
                }
            }
        }
        for (index, timeline) in self.timelines.iter().enumerate() {
            let keys = [
                ("times", &timeline.times),
                ("rows", &timeline.rows),
                ("items", &timeline.items),
                ("row", &timeline.row),
                ("label", &timeline.label),
                ("points", &timeline.points),
            ];
            for (key, text) in keys {
                if let Err(problem) = expr::check_expression(text) {
                    out.push(
                        Diagnostic::error("validator-expression", format!("`{key}` does not compile: {problem}"))
                            .at(source, format!("timelines[{index}].{key}"))
                            .help("an expression, over `item` for `row`, `label` and `points`"),
                    );
                }
            }
        }
    }

    fn check_thresholds(&self, source: &SourceFile, out: &mut Diagnostics) {
        for (index, threshold) in self.thresholds.iter().enumerate() {
            let at = |key: &str| format!("thresholds[{index}].{key}");
            if self.measurement(&threshold.measurement).is_none() {
                let names = self.measurements.iter().map(|m| m.name.as_str());
                let help = match did_you_mean(&threshold.measurement, names.clone()) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None => format!("measurements here: {}", names.collect::<Vec<_>>().join(", ")),
                };
                out.push(
                    Diagnostic::error("validator-threshold", format!("no measurement `{}`", threshold.measurement))
                        .at(source, at("measurement"))
                        .help(help),
                );
            }
            if let Some(other) = &threshold.of {
                let position = |name: &str| self.measurements.iter().position(|m| m.name == name);
                let earlier = match (position(other), position(&threshold.measurement)) {
                    (Some(limit), Some(measured)) => limit < measured,
                    _ => false,
                };
                if threshold.value.is_some() || threshold.derived.is_some() {
                    out.push(
                        Diagnostic::error("validator-threshold", "give exactly one of `value`, `derived` and `of`")
                            .at(source, at("of"))
                            .help("`of: <measurement>` takes its limit from that measurement alone"),
                    );
                } else if !earlier {
                    out.push(
                        Diagnostic::error(
                            "validator-threshold",
                            format!("`of: {other}` names no measurement listed before `{}`", threshold.measurement),
                        )
                        .at(source, at("of"))
                        .help("name a measurement of this validator that comes earlier in `measurements`"),
                    );
                }
                continue;
            }
            match (&threshold.value, &threshold.derived) {
                (Some(value), None) => {
                    if !value.is_finite() {
                        out.push(
                            Diagnostic::error(
                                "validator-threshold",
                                format!("`value: {value}` is not a finite number"),
                            )
                            .at(source, at("value"))
                            .help("give a number"),
                        );
                    }
                    if threshold.reference.as_deref().is_none_or(|reference| reference.trim().is_empty()) {
                        out.push(
                            Diagnostic::error(
                                "validator-threshold",
                                "a fixed threshold needs a `reference`: where the number comes from",
                            )
                            .at(source, at("value"))
                            .help("e.g. `reference: AzNHC ND96isr H100 v5, check_nccl_allreduce 460 GB/s at 16 GiB`"),
                        );
                    }
                }
                (None, Some(name)) => {
                    if derived::describe(name).is_none() {
                        let help = match did_you_mean(name, derived::names()) {
                            Some(close) => format!("did you mean `{close}`?"),
                            None => format!("known: {}", derived::names().collect::<Vec<_>>().join(", ")),
                        };
                        out.push(
                            Diagnostic::error("validator-threshold", format!("unknown derived threshold `{name}`"))
                                .at(source, at("derived"))
                                .help(help),
                        );
                    }
                }
                _ => out.push(
                    Diagnostic::error("validator-threshold", "give exactly one of `value` and `derived`")
                        .at(source, at("measurement"))
                        .help("`value: 0` with a `reference`, or `derived: gpus_per_node`"),
                ),
            }
        }
    }
}

/// Whether `text` is a plain program name: no path, no space, nothing the shell reads.
fn is_program_name(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
}

/// Whether `text` is lowercase letters and digits joined by `separator`, starting
/// with a letter.
fn is_slug(text: &str, separator: char) -> bool {
    text.starts_with(|c: char| c.is_ascii_lowercase())
        && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == separator)
        && !text.ends_with(separator)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<ValidatorSpec, Diagnostics> {
        ValidatorSpec::from_source(&SourceFile::new("t.yaml", text.to_owned()))
    }

    const MINIMAL: &str = "id: ping-self
title: Ping
failure: ping-lost
docs: { what: a, why: b, fix: c }
scope: node
command: ping -c 1 {{ node.address }}
parser: ping
measurements:
  - { name: loss, label: packet loss, unit: '%', value: output.statistics.loss_percent }
thresholds:
  - { measurement: loss, comparison: '<=', value: 0, reference: no loss on a healthy link }
";

    #[test]
    fn a_threshold_of_another_measurement_must_name_an_earlier_one() {
        let with = |threshold: &str| {
            MINIMAL.replace(
                "thresholds:\n",
                &format!("  - {{ name: sent, label: sent, value: '3' }}\nthresholds:\n  - {threshold}\n"),
            )
        };
        if let Err(problems) = load(&with("{ measurement: sent, comparison: '>=', of: loss }")) {
            panic!("{}", problems.render());
        }
        for bad in [
            "{ measurement: loss, comparison: '>=', of: sent }",
            "{ measurement: sent, comparison: '>=', of: nothing }",
            "{ measurement: sent, comparison: '>=', of: loss, value: 1, reference: r }",
        ] {
            let problems = load(&with(bad)).expect_err(bad).render();
            assert!(problems.contains("validator-threshold") && problems.contains("`of"), "{bad}: {problems}");
        }
    }

    #[test]
    fn a_minimal_validator_loads_as_one_step() {
        let spec = load(MINIMAL).expect("loads");
        assert_eq!(spec.steps().len(), 1);
        assert_eq!(spec.steps()[0].name, None);
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT_SECONDS);
        assert_eq!(spec.overridable().into_iter().collect::<Vec<_>>(), vec!["loss"]);
    }

    #[test]
    fn every_semantic_problem_is_reported_with_its_key() {
        let text = MINIMAL
            .replace("id: ping-self", "id: Ping_Self")
            .replace("parser: ping", "parser: pingg")
            .replace("measurement: loss,", "measurement: los,")
            .replace("reference: no loss on a healthy link", "reference: ''");
        let rendered = load(&text).expect_err("refused").render();
        assert!(rendered.contains("`Ping_Self` is not a validator id"), "{rendered}");
        assert!(rendered.contains("unknown parser `pingg`") && rendered.contains("did you mean `ping`?"), "{rendered}");
        assert!(rendered.contains("no measurement `los`") && rendered.contains("did you mean `loss`?"), "{rendered}");
        assert!(rendered.contains("needs a `reference`"), "{rendered}");
        assert!(rendered.contains("t.yaml:1:"), "located: {rendered}");
    }

    #[test]
    fn templates_and_expressions_are_compiled_when_loaded() {
        let text = MINIMAL
            .replace("{{ node.address }}", "{{ node.address ")
            .replace("output.statistics.loss_percent", "output.statistics.(");
        let rendered = load(&text).expect_err("refused").render();
        assert!(rendered.contains("the command does not compile"), "{rendered}");
        assert!(rendered.contains("`value` does not compile"), "{rendered}");
        let timeline = "timelines:\n  - { name: checks, times: '[1, 2]', rows: nodes, items: output.series,\n      row: item.labels.(, label: item.labels.check, points: item.points }\n";
        let rendered = load(&format!("{MINIMAL}{timeline}")).expect_err("refused").render();
        assert!(rendered.contains("`row` does not compile") && rendered.contains("t.yaml:14:12"), "{rendered}");
    }

    #[test]
    fn a_repair_ladder_is_checked_where_it_is_written() {
        let health =
            |ladder: &str| format!("{MINIMAL}health:\n  cadence: fast\n  probe: echo loss 0\n  repair: {ladder}\n");
        let spec = load(&health("[relink, reboot, power-cycle, diagnose, rma]")).expect("loads");
        let ladder = spec.health.expect("health").repair;
        assert_eq!(ladder.first(), Some(&RepairStep::Relink));
        assert_eq!(ladder.last(), Some(&RepairStep::Rma));
        let rendered = load(&health("[reboot, diagnose]")).expect_err("refused").render();
        assert!(rendered.contains("must end with `rma`") && rendered.contains("t.yaml:15:11"), "{rendered}");
        let rendered = load(&health("[reboot, reboot, rma]")).expect_err("refused").render();
        assert!(rendered.contains("`reboot` appears twice"), "{rendered}");
        let rendered = load(&health("[reboot, rma, diagnose]")).expect_err("refused").render();
        assert!(rendered.contains("must end with `rma`"), "{rendered}");
        let rendered = load(&health("[reboot, replace, rma]")).expect_err("refused").render();
        assert!(rendered.contains("replace") && rendered.contains("t.yaml:15:"), "{rendered}");
        let alert = health("[reboot, rma]").replace("  repair:", "  on_failure: alert\n  repair:");
        let rendered = load(&alert).expect_err("refused").render();
        assert!(rendered.contains("only alerts drains no node"), "{rendered}");
    }

    #[test]
    fn unknown_keys_and_derived_names_are_refused() {
        let rendered = load(&format!("{MINIMAL}colour: red\n")).expect_err("refused").render();
        assert!(rendered.contains("unknown key `colour`"), "{rendered}");
        let text = MINIMAL.replace("value: 0, reference: no loss on a healthy link", "derived: gpus_per_nod");
        let rendered = load(&text).expect_err("refused").render();
        assert!(
            rendered.contains("unknown derived threshold `gpus_per_nod`") && rendered.contains("`gpus_per_node`"),
            "{rendered}"
        );
    }

    #[test]
    fn scope_specific_options_are_checked() {
        let text = format!("{MINIMAL}second_pass: true\nserver: {{ command: sleep 1 }}\nanalysis: cabling\n");
        let rendered = load(&text).expect_err("refused").render();
        assert!(rendered.contains("`server` needs a peer"), "{rendered}");
        assert!(rendered.contains("`second_pass` re-tests pairs"), "{rendered}");
        assert!(rendered.contains("needs `scope: switch`"), "{rendered}");
    }

    #[test]
    fn steps_and_command_are_exclusive_and_aggregates_need_items() {
        let text = MINIMAL.replace(
            "measurements:\n",
            "steps:\n  - { name: a, command: 'true', parser: text }\nmeasurements:\n  - { name: n, label: n, aggregate: count }\n",
        );
        let rendered = load(&text).expect_err("refused").render();
        assert!(rendered.contains("not both"), "{rendered}");
        assert!(rendered.contains("`aggregate` needs `items`"), "{rendered}");
    }

    #[test]
    fn programs_are_plain_names() {
        let spec = load(&format!("{MINIMAL}programs: [ior, mdtest, g++-12]\n")).expect("loads");
        assert_eq!(spec.programs, ["ior", "mdtest", "g++-12"]);
        let rendered =
            load(&format!("{MINIMAL}programs: [ior, /usr/bin/ior, 'ior; rm -rf /']\n")).expect_err("refused").render();
        assert!(rendered.contains("`/usr/bin/ior` is not a program name"), "{rendered}");
        assert!(rendered.contains("`ior; rm -rf /` is not a program name"), "{rendered}");
        assert!(!rendered.contains("`ior` is not"), "{rendered}");
        let rendered = load(&format!("{MINIMAL}programs: [ior]\nprograms_on: nodes\n")).expect_err("refused").render();
        assert!(rendered.contains("`programs_on: nodes` looks programs up through `srun`"), "{rendered}");
        let spec = load(&format!("{MINIMAL}programs: [ior]\nprograms_on: nodes\nrequires: [slurm]\n")).expect("loads");
        assert_eq!(spec.programs_on, ProgramsOn::Nodes);
    }

    #[test]
    fn slugs() {
        assert!(is_slug("nccl-pairwise", '-'));
        assert!(is_slug("busbw_peak", '_'));
        assert!(!is_slug("-x", '-') && !is_slug("x-", '-') && !is_slug("1x", '-') && !is_slug("", '-'));
        assert!(!is_slug("a_b", '-'));
    }
}
