//! The `monitoring:` section: Prometheus, Alertmanager and the exporters `toolkit
//! deploy` brings up, and what the continuous health checks do when one fails.
//!
//! Stage: load. Serde types mirroring the YAML, nothing more: durations stay strings
//! (Prometheus form, `15s`, `1h30m`) so `check` can point at a malformed one, and
//! secrets are names of inventory `secrets.named` entries, never values.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Monitoring of the cluster. Without this section toolkit deploys no monitoring;
/// with it, monitoring is on unless `enabled: false`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Monitoring {
    /// Deploy monitoring (default `true`).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Node that runs Prometheus and Alertmanager; default: the Slurm controller.
    #[serde(default)]
    pub host: Option<String>,
    /// How long Prometheus keeps samples (`--storage.tsdb.retention.time`).
    #[serde(default = "default_retention")]
    pub retention: String,
    /// How often every target is scraped and every rule evaluated.
    #[serde(default = "default_scrape_interval")]
    pub scrape_interval: String,
    /// How often the IPMI exporter reads each BMC (default `1m`: BMCs answer slowly
    /// and a read costs their controller more than a node exporter scrape).
    #[serde(default = "default_bmc_scrape_interval")]
    pub bmc_scrape_interval: String,
    /// How long a condition must hold before its alert fires (the rules' `for:`),
    /// default `2m`; a test cluster shortens it.
    #[serde(default = "default_alert_after")]
    pub alert_after: String,
    /// Where Alertmanager sends alerts; with none, alerts are only visible in
    /// Prometheus and `amtool`.
    #[serde(default)]
    pub receivers: Vec<Receiver>,
    /// Continuous node health checks: when they run and what a failure does.
    #[serde(default)]
    pub health: HealthChecks,
    /// Share of the compute nodes' hours they must be in service (`0.99`): below it over
    /// a day, the `AvailabilityBelowTarget` alert fires. Without it, availability is
    /// recorded and reported but never alerted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_target: Option<f64>,
    /// Self-repair of nodes the health checks drained: a service on the controller walks
    /// each failing check's repair ladder. Without this section nothing is repaired.
    #[serde(default)]
    pub repair: Option<Repair>,
}

/// The repair service: budgets, pacing and per-check ladders.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Repair {
    /// Nodes in repair at once (a node waiting for its turn stays drained).
    #[serde(default = "default_max_in_repair")]
    pub max_in_repair: u32,
    /// Repairs one node may start in 24 h; the next failure sends it to RMA instead
    /// (a flapping node is not cycled for ever).
    #[serde(default = "default_max_repairs_per_day")]
    pub max_repairs_per_day: u32,
    /// How often the service looks at the drained nodes (Alertmanager's webhook also
    /// wakes it when a health check alert fires).
    #[serde(default = "default_repair_interval")]
    pub interval: String,
    /// How long a step waits for the node's own checks to pass and resume it before
    /// the next step is taken (a reboot of a GPU server takes minutes of firmware).
    #[serde(default = "default_repair_settle")]
    pub settle: String,
    /// The `diagnose` step's command, run on the controller with `{node}` replaced by the
    /// node's name; exit 0 passes. Default: DCGM level 3 against the node's host engine
    /// (`dcgmi diag --host {node} -r 3`).
    #[serde(default)]
    pub diagnose: Option<String>,
    /// Per check id, a ladder instead of the one its validator declares.
    #[serde(default)]
    pub checks: BTreeMap<String, Vec<RepairStep>>,
}

/// One rung of a repair ladder. Every step acts only on a node drained and empty with
/// toolkit's health reason; an operator's drain is never touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RepairStep {
    /// Take the node's rail links down and up again (the controller's root SSH to the node).
    Relink,
    /// Reboot once empty: `systemctl reboot` over the controller's root SSH, as the rollout reboots.
    Reboot,
    /// Power-cycle through the node's BMC (Redfish `ComputerSystem.Reset`).
    PowerCycle,
    /// Deep diagnostics (`monitoring.repair.diagnose`): a failure sends the node to RMA.
    Diagnose,
    /// Leave the node drained as `toolkit:rma <check>: <detail>` for a hardware ticket.
    Rma,
}

impl RepairStep {
    /// The name in YAML, the state file and the drain reasons.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Relink => "relink",
            Self::Reboot => "reboot",
            Self::PowerCycle => "power-cycle",
            Self::Diagnose => "diagnose",
            Self::Rma => "rma",
        }
    }

    /// What is wrong with `ladder`, if anything: each step at most once, and `rma`
    /// last, so what happens to a node that no step repaired is written down.
    #[must_use]
    pub fn ladder_problem(ladder: &[Self]) -> Option<String> {
        if ladder.last() != Some(&Self::Rma) {
            return Some("a repair ladder must end with `rma`".to_owned());
        }
        let mut seen = std::collections::BTreeSet::new();
        ladder
            .iter()
            .find(|step| !seen.insert(**step))
            .map(|step| format!("`{}` appears twice in the repair ladder", step.as_str()))
    }
}

/// An Alertmanager receiver: exactly one of `webhook` or `email`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Receiver {
    /// Receiver name, unique.
    pub name: String,
    /// POST each alert group as JSON to a URL.
    #[serde(default)]
    pub webhook: Option<WebhookReceiver>,
    /// Send each alert group by email.
    #[serde(default)]
    pub email: Option<EmailReceiver>,
}

/// A webhook receiver; the URL often carries a token, so it is a secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookReceiver {
    /// Name of the inventory secret (`secrets.named`) holding the URL.
    pub url_secret: String,
}

/// An email receiver.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailReceiver {
    /// Recipient address.
    pub to: String,
    /// Sender address; default `alertmanager@<cluster name>`.
    #[serde(default)]
    pub from: Option<String>,
    /// SMTP relay, `host:port`.
    pub smarthost: String,
    /// SMTP user name; default: the sender address.
    #[serde(default)]
    pub username: Option<String>,
    /// Name of the inventory secret (`secrets.named`) holding the SMTP password.
    #[serde(default)]
    pub password_secret: Option<String>,
}

/// Continuous node health checks after handover.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthChecks {
    /// Slurm `HealthCheckInterval` for the fast node checks.
    #[serde(default = "default_fast_interval")]
    pub fast_interval: String,
    /// systemd timer period of the slow node checks (DCGM diagnostics).
    #[serde(default = "default_slow_interval")]
    pub slow_interval: String,
    /// Period of the controller-side cluster checks.
    #[serde(default = "default_cluster_interval")]
    pub cluster_interval: String,
    /// What a failing check does unless `checks` says otherwise.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Per-check override of `on_failure`, by check name.
    #[serde(default)]
    pub checks: BTreeMap<String, OnFailure>,
}

impl Default for HealthChecks {
    fn default() -> Self {
        Self {
            fast_interval: default_fast_interval(),
            slow_interval: default_slow_interval(),
            cluster_interval: default_cluster_interval(),
            on_failure: OnFailure::default(),
            checks: BTreeMap::new(),
        }
    }
}

/// What a failing health check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Drain the node in Slurm (reason names toolkit and the check) and alert.
    #[default]
    Drain,
    /// Only alert.
    Alert,
}

const fn yes() -> bool {
    true
}

fn default_retention() -> String {
    "15d".to_owned()
}

fn default_scrape_interval() -> String {
    "15s".to_owned()
}

fn default_bmc_scrape_interval() -> String {
    "1m".to_owned()
}

fn default_alert_after() -> String {
    "2m".to_owned()
}

fn default_fast_interval() -> String {
    "5m".to_owned()
}

fn default_slow_interval() -> String {
    "1h".to_owned()
}

const fn default_max_in_repair() -> u32 {
    1
}

const fn default_max_repairs_per_day() -> u32 {
    3
}

fn default_repair_interval() -> String {
    "30s".to_owned()
}

fn default_repair_settle() -> String {
    "15m".to_owned()
}

fn default_cluster_interval() -> String {
    "10m".to_owned()
}
