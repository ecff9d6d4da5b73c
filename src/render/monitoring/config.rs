//! Prometheus' and Alertmanager's configuration files, as typed values serialized to
//! YAML: scrape jobs from the model's targets, Alertmanager receivers from the
//! blueprint with their secrets filled in from the inventory.
//!
//! Stage: render. Input: [`MonitoringModel`] and the resolved named secrets. Output:
//! file texts. Each target carries its name as the `instance` label, so alerts name
//! `leaf0`, not `10.10.0.200:9100`, and its group (node group or switch role).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::monitoring::{
    DCGM_EXPORTER_PORT, FRR_EXPORTER_PORT, IPMI_EXPORTER_PORT, MonitoringModel, NODE_EXPORTER_PORT, PROMETHEUS_PORT,
    ScrapeTarget,
};

/// Where the rule file lives on the monitoring host.
pub const RULES_PATH: &str = "/etc/prometheus/toolkit.rules.yml";

#[derive(Serialize)]
struct Prometheus<'a> {
    global: Global<'a>,
    alerting: Alerting,
    rule_files: [&'static str; 1],
    scrape_configs: Vec<ScrapeConfig>,
}

#[derive(Serialize)]
struct Global<'a> {
    scrape_interval: &'a str,
    evaluation_interval: &'a str,
    external_labels: BTreeMap<&'static str, &'a str>,
}

#[derive(Serialize)]
struct Alerting {
    alertmanagers: [StaticConfigs; 1],
}

#[derive(Serialize)]
struct StaticConfigs {
    static_configs: Vec<StaticConfig>,
}

#[derive(Serialize)]
struct ScrapeConfig {
    job_name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    scrape_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scrape_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics_path: Option<&'static str>,
    static_configs: Vec<StaticConfig>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    relabel_configs: Vec<Relabel>,
}

impl ScrapeConfig {
    fn new(job_name: &'static str, static_configs: Vec<StaticConfig>) -> Self {
        Self {
            job_name,
            scrape_interval: None,
            scrape_timeout: None,
            metrics_path: None,
            static_configs,
            relabel_configs: Vec::new(),
        }
    }
}

/// A `replace` relabelling: `target_label` gets `source_labels` (joined), else `replacement`.
#[derive(Serialize)]
struct Relabel {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    source_labels: Vec<&'static str>,
    target_label: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    replacement: Option<String>,
}

#[derive(Serialize)]
struct StaticConfig {
    targets: [String; 1],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<&'static str, String>,
}

fn job(name: &'static str, targets: &[&ScrapeTarget], port: u16) -> ScrapeConfig {
    ScrapeConfig::new(
        name,
        targets
            .iter()
            .map(|target| StaticConfig {
                targets: [host_port(&target.address, port)],
                labels: BTreeMap::from([("instance", target.name.clone()), ("group", target.group.clone())]),
            })
            .collect(),
    )
}

/// Job `ipmi`: every BMC through the IPMI exporter on the monitoring host, in its
/// multi-target form: the BMC's address is the `target` parameter, its module (named
/// after the node: its credentials) the `module` parameter, and the request goes to
/// the exporter. The node's name is `instance`, the BMC's address `bmc`.
fn ipmi_job(model: &MonitoringModel) -> ScrapeConfig {
    let targets = model
        .bmcs
        .iter()
        .map(|bmc| StaticConfig {
            targets: [bmc.address.clone()],
            labels: BTreeMap::from([("instance", bmc.node.clone()), ("__param_module", bmc.node.clone())]),
        })
        .collect();
    let copy = |target_label| Relabel { source_labels: vec!["__address__"], target_label, replacement: None };
    let mut job = ScrapeConfig::new("ipmi", targets);
    let timing = super::ipmi::Timing::of(model);
    job.scrape_interval = Some(timing.interval.clone());
    job.scrape_timeout = Some(timing.scrape_timeout.clone());
    job.metrics_path = Some("/ipmi");
    job.relabel_configs = vec![
        copy("__param_target"),
        copy("bmc"),
        Relabel {
            source_labels: vec![],
            target_label: "__address__",
            replacement: Some(format!("localhost:{IPMI_EXPORTER_PORT}")),
        },
    ];
    job
}

/// `address:port`, with brackets around an IPv6 address.
fn host_port(address: &str, port: u16) -> String {
    if address.contains(':') { format!("[{address}]:{port}") } else { format!("{address}:{port}") }
}

/// `prometheus.yml`: node exporter on every node and switch (job `node`, the job the
/// node-mixin expects), FRR exporter on FRR switches, DCGM exporter on nodes with
/// real GPUs, the BMCs through the IPMI exporter, Prometheus itself, and the local
/// Alertmanager.
#[must_use]
pub fn prometheus(model: &MonitoringModel) -> String {
    let all: Vec<&ScrapeTarget> = model.nodes.iter().chain(&model.switches).collect();
    let frr: Vec<&ScrapeTarget> = model.frr_switches.iter().collect();
    let gpus: Vec<&ScrapeTarget> = model.gpu_nodes.iter().collect();
    let mut scrape_configs = vec![
        ScrapeConfig::new(
            "prometheus",
            vec![StaticConfig { targets: [format!("localhost:{PROMETHEUS_PORT}")], labels: BTreeMap::new() }],
        ),
        job("node", &all, NODE_EXPORTER_PORT),
    ];
    if !frr.is_empty() {
        scrape_configs.push(job("frr", &frr, FRR_EXPORTER_PORT));
    }
    if !gpus.is_empty() {
        scrape_configs.push(job("dcgm", &gpus, DCGM_EXPORTER_PORT));
    }
    if !model.bmcs.is_empty() {
        scrape_configs.push(ipmi_job(model));
    }
    let interval = model.settings.scrape_interval.as_str();
    let config = Prometheus {
        global: Global {
            scrape_interval: interval,
            evaluation_interval: interval,
            external_labels: BTreeMap::from([("cluster", model.cluster.as_str())]),
        },
        alerting: Alerting {
            alertmanagers: [StaticConfigs {
                static_configs: vec![StaticConfig { targets: ["localhost:9093".to_owned()], labels: BTreeMap::new() }],
            }],
        },
        rule_files: [RULES_PATH],
        scrape_configs,
    };
    with_header(&serde_norway::to_string(&config).unwrap_or_default())
}

#[derive(Serialize)]
struct Alertmanager {
    route: Route,
    receivers: Vec<AmReceiver>,
}

#[derive(Serialize)]
struct Route {
    receiver: String,
    group_by: [&'static str; 3],
    group_wait: &'static str,
    group_interval: &'static str,
    repeat_interval: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<ChildRoute>,
}

#[derive(Serialize)]
struct ChildRoute {
    receiver: String,
    matchers: [&'static str; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    group_wait: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group_interval: Option<&'static str>,
    #[serde(rename = "continue")]
    keep_going: bool,
}

/// The receiver of the repair service's webhook on the Slurm controller.
const REPAIR: &str = "toolkit-repair";

#[derive(Serialize)]
struct AmReceiver {
    name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    webhook_configs: Vec<BTreeMap<&'static str, serde_json::Value>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    email_configs: Vec<BTreeMap<&'static str, serde_json::Value>>,
}

/// Name of the receiver that sends nowhere: the root route's when the blueprint
/// declares none, so alerts stay visible in Prometheus and `amtool`.
const NOWHERE: &str = "toolkit-none";

/// `alertmanager.yml`: every alert to every declared receiver (sibling routes with
/// `continue`, since a matching child stops the walk otherwise). `secrets` holds the
/// named secrets that could be read; a missing one leaves an empty value, which only
/// a plan without the secrets sees (deploy requires them).
#[must_use]
pub fn alertmanager(model: &MonitoringModel, secrets: &BTreeMap<String, String>) -> String {
    let secret = |name: &str| serde_json::Value::String(secrets.get(name).cloned().unwrap_or_default());
    let mut receivers = vec![AmReceiver { name: NOWHERE.to_owned(), webhook_configs: vec![], email_configs: vec![] }];
    for receiver in &model.settings.receivers {
        let mut entry = AmReceiver { name: receiver.name.clone(), webhook_configs: vec![], email_configs: vec![] };
        if let Some(webhook) = &receiver.webhook {
            entry.webhook_configs.push(BTreeMap::from([
                ("url", secret(&webhook.url_secret)),
                ("send_resolved", serde_json::Value::Bool(true)),
            ]));
        }
        if let Some(email) = &receiver.email {
            let from = email.from.clone().unwrap_or_else(|| format!("alertmanager@{}", model.cluster));
            let mut config = BTreeMap::from([
                ("to", serde_json::Value::String(email.to.clone())),
                ("from", serde_json::Value::String(from.clone())),
                ("smarthost", serde_json::Value::String(email.smarthost.clone())),
                ("send_resolved", serde_json::Value::Bool(true)),
            ]);
            if let Some(password) = &email.password_secret {
                config.insert("auth_username", serde_json::Value::String(email.username.clone().unwrap_or(from)));
                config.insert("auth_password", secret(password));
            }
            entry.email_configs.push(config);
        }
        receivers.push(entry);
    }
    let mut routes: Vec<ChildRoute> = model
        .settings
        .receivers
        .iter()
        .map(|receiver| ChildRoute {
            receiver: receiver.name.clone(),
            matchers: ["severity=~\".+\""],
            group_wait: None,
            group_interval: None,
            keep_going: true,
        })
        .collect();
    // The repair service is woken by toolkit's failing health checks (and their
    // resolution), at once rather than after the default 30 s wait; its timer is the
    // fallback, so a lost post only delays a step.
    if let Some(url) = repair_webhook(model) {
        receivers.push(AmReceiver {
            name: REPAIR.to_owned(),
            webhook_configs: vec![BTreeMap::from([
                ("url", serde_json::Value::String(url)),
                ("send_resolved", serde_json::Value::Bool(true)),
            ])],
            email_configs: vec![],
        });
        routes.insert(
            0,
            ChildRoute {
                receiver: REPAIR.to_owned(),
                matchers: ["alertname=\"HealthCheckFailing\""],
                group_wait: Some("1s"),
                group_interval: Some("10s"),
                keep_going: true,
            },
        );
    }
    let config = Alertmanager {
        route: Route {
            receiver: NOWHERE.to_owned(),
            group_by: ["alertname", "cluster", "instance"],
            group_wait: "30s",
            group_interval: "5m",
            repeat_interval: "4h",
            routes,
        },
        receivers,
    };
    with_header(&serde_norway::to_string(&config).unwrap_or_default())
}

/// The repair service's webhook URL, with `monitoring.repair` on a Slurm cluster.
fn repair_webhook(model: &MonitoringModel) -> Option<String> {
    model.settings.repair.as_ref()?;
    let controller = model.slurm_controller.as_ref()?;
    let target = model.nodes.iter().find(|node| &node.name == controller)?;
    Some(crate::model::monitoring::repair_webhook_url(&target.address))
}

fn with_header(body: &str) -> String {
    format!("# Rendered by toolkit from the blueprint; changes here are overwritten.\n{body}")
}
