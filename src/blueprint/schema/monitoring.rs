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

fn default_cluster_interval() -> String {
    "10m".to_owned()
}
