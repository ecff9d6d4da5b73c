//! Alert rules from the blueprint: one rule file for Prometheus, whose rules name the
//! host, rail, switch, peer, mount, tenant or check that is wrong.
//!
//! Stage: render. Input: [`MonitoringModel`]. Output: the rule file's text, checked on
//! the host by `promtool check rules` before it replaces the active one, and tested
//! rule by rule with `promtool test rules` (`tests/fixtures/monitoring/`).
//!
//! Every value rule has a companion for its series vanishing: `NodeDown` (node and
//! switch exporters), `FrrBgpNotAnswering` (bgpd gone: the FRR exporter's BGP collector
//! fails and every peer series vanishes), `FilesystemNotMounted` (no series at all).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::monitoring::MonitoringModel;

/// XID codes that need a node taken out of service (Azure's `check_gpu_xid` list,
/// `/work/shared/reference/validators.md` §2).
pub const FATAL_XIDS: &str = "48|56|57|58|62|63|64|65|68|69|73|74|79|80|81|92|119|120";
/// GPU temperature above which an alert fires, °C (a placeholder to tune per model).
pub const GPU_TEMPERATURE_LIMIT: u32 = 85;

#[derive(Serialize)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Serialize)]
struct Group {
    name: &'static str,
    rules: Vec<Rule>,
}

/// A rule: an alert, or a recording rule (`record`) whose series other rules and the
/// report read.
#[derive(Serialize)]
struct Rule {
    #[serde(skip_serializing_if = "str::is_empty")]
    record: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    alert: &'static str,
    expr: String,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    hold: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'static str, String>,
}

impl Rule {
    fn new(alert: &'static str, severity: &str, expr: String, summary: &str) -> Self {
        Self {
            record: "",
            alert,
            expr,
            hold: None,
            labels: BTreeMap::from([("severity", severity.to_owned())]),
            annotations: BTreeMap::from([("summary", summary.to_owned())]),
        }
    }

    fn recording(record: &'static str, expr: String) -> Self {
        Self { record, alert: "", expr, hold: None, labels: BTreeMap::new(), annotations: BTreeMap::new() }
    }

    fn held(mut self, hold: &str) -> Self {
        self.hold = Some(hold.to_owned());
        self
    }

    fn label(mut self, name: &'static str, value: String) -> Self {
        self.labels.insert(name, value);
        self
    }
}

/// The rule file of the cluster.
#[must_use]
pub fn rules(model: &MonitoringModel) -> String {
    let hold = model.settings.alert_after.as_str();
    let mut file = RuleFile {
        groups: vec![
            Group { name: "toolkit-hosts", rules: host_rules(hold) },
            Group { name: "toolkit-fabric", rules: fabric_rules(model, hold) },
            Group { name: "toolkit-gpus", rules: gpu_rules(hold) },
            Group { name: "toolkit-storage", rules: storage_rules(model, hold) },
            Group { name: "toolkit-slurm", rules: slurm_rules(model, hold) },
            Group { name: "toolkit-health", rules: health_rules(model) },
        ],
    };
    if !model.bmcs.is_empty() {
        file.groups.push(Group { name: "toolkit-bmcs", rules: bmc_rules(hold) });
    }
    if model.slurm_controller.is_some() {
        file.groups.push(Group { name: "toolkit-availability", rules: availability_rules(model, hold) });
    }
    let mut text = String::from("# Rendered by toolkit from the blueprint; changes here are overwritten.\n");
    // Plain data of strings and maps: serialization cannot fail.
    text.push_str(&serde_norway::to_string(&file).unwrap_or_default());
    text
}

fn host_rules(hold: &str) -> Vec<Rule> {
    vec![
        Rule::new(
            "NodeDown",
            "critical",
            r#"up{job="node"} == 0"#.to_owned(),
            "{{ $labels.instance }} ({{ $labels.group }}) does not answer: host down or node exporter stopped",
        )
        .held(hold),
    ]
}

fn fabric_rules(model: &MonitoringModel, hold: &str) -> Vec<Rule> {
    let mut rules = Vec::new();
    for (rail, netdev) in &model.rails {
        rules.push(
            Rule::new(
                "RailLinkDown",
                "critical",
                format!(r#"node_network_up{{job="node",device="{netdev}"}} == 0"#),
                &format!("rail {rail} ({netdev}) is down on {{{{ $labels.instance }}}}"),
            )
            .held(hold)
            .label("rail", rail.to_string()),
        );
        rules.push(
            Rule::new(
                "RailLinkFlapping",
                "warning",
                format!(r#"increase(node_network_carrier_changes_total{{job="node",device="{netdev}"}}[15m]) > 2"#),
                &format!("rail {rail} ({netdev}) on {{{{ $labels.instance }}}} changed carrier {{{{ $value }}}} times in 15 minutes"),
            )
            .label("rail", rail.to_string()),
        );
    }
    if !model.frr_switches.is_empty() {
        rules.push(
            Rule::new(
                "BgpSessionDown",
                "critical",
                r#"frr_bgp_peer_state{job="frr"} == 0"#.to_owned(),
                "BGP session {{ $labels.instance }} - {{ $labels.peer_desc }} (on {{ $labels.instance }} port {{ $labels.peer }}) is down",
            )
            .held(hold),
        );
        rules.push(
            Rule::new(
                "FrrBgpNotAnswering",
                "critical",
                r#"frr_collector_up{job="frr",collector="bgp"} == 0"#.to_owned(),
                "bgpd on {{ $labels.instance }} does not answer: all of its BGP sessions are down",
            )
            .held(hold),
        );
    }
    rules
}

fn gpu_rules(hold: &str) -> Vec<Rule> {
    vec![
        Rule::new(
            "GpuXidError",
            "critical",
            format!(r#"DCGM_EXP_XID_ERRORS_COUNT{{job="dcgm",xid=~"{FATAL_XIDS}"}} > 0"#),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} reported XID {{ $labels.xid }}",
        ),
        Rule::new(
            "GpuDoubleBitEcc",
            "critical",
            r#"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{job="dcgm"}[10m]) > 0"#.to_owned(),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} had uncorrectable (double-bit) ECC errors",
        ),
        Rule::new(
            "GpuRetiredPagesPending",
            "warning",
            r#"DCGM_FI_DEV_RETIRED_PENDING{job="dcgm"} > 0"#.to_owned(),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} has pages waiting to be retired: reset it when empty",
        ),
        Rule::new(
            "GpuRowRemapFailure",
            "critical",
            r#"DCGM_FI_DEV_ROW_REMAP_FAILURE{job="dcgm"} > 0"#.to_owned(),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} failed to remap a memory row: replace it",
        ),
        Rule::new(
            "GpuTooHot",
            "warning",
            format!(r#"DCGM_FI_DEV_GPU_TEMP{{job="dcgm"}} > {GPU_TEMPERATURE_LIMIT}"#),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is at {{ $value }} °C",
        )
        .held(hold),
    ]
}

fn storage_rules(model: &MonitoringModel, hold: &str) -> Vec<Rule> {
    let mut rules = Vec::new();
    for (mount, groups) in &model.mounts {
        rules.push(
            Rule::new(
                "FilesystemHung",
                "critical",
                format!(r#"node_filesystem_device_error{{job="node",mountpoint="{mount}"}} == 1"#),
                &format!("{mount} on {{{{ $labels.instance }}}} does not answer (statfs failed or timed out)"),
            )
            .held(hold)
            .label("mount", mount.clone()),
        );
        rules.push(
            Rule::new(
                "FilesystemNotMounted",
                "critical",
                format!(
                    r#"up{{job="node",group=~"{}"}} == 1 unless on(instance) node_filesystem_size_bytes{{job="node",mountpoint="{mount}"}}"#,
                    groups.join("|")
                ),
                &format!("{mount} is not mounted on {{{{ $labels.instance }}}}"),
            )
            .held(hold)
            .label("mount", mount.clone()),
        );
    }
    rules
}

fn slurm_rules(model: &MonitoringModel, hold: &str) -> Vec<Rule> {
    if model.slurm_controller.is_none() {
        return Vec::new();
    }
    let mut rules = vec![
        Rule::new(
            "SlurmNodeUnavailable",
            "warning",
            r#"slurm_node_state_info{state=~"(down|drain|fail).*"} == 1 unless on(node) slurm_node_reason_info{reason=~"toolkit.*"}"#
                .to_owned(),
            "Slurm node {{ $labels.node }} is {{ $labels.state }}, not by toolkit",
        )
        .held(hold),
        Rule::new(
            "SlurmViewStale",
            "warning",
            "time() - toolkit_slurm_view_last_run_timestamp_seconds > 300".to_owned(),
            "the Slurm view on {{ $labels.instance }} has not been updated for {{ $value }} s",
        ),
    ];
    for (tenant, guaranteed) in &model.tenants {
        rules.push(
            Rule::new(
                "TenantBelowGuarantee",
                "warning",
                format!(
                    r#"toolkit_tenant_gpus_used{{tenant="{tenant}"}} < {guaranteed} and toolkit_tenant_gpus_pending{{tenant="{tenant}"}} > 0"#
                ),
                &format!("tenant {tenant} runs on {{{{ $value }}}} of its {guaranteed} guaranteed GPUs while its jobs wait"),
            )
            .held(hold)
            .label("guaranteed", guaranteed.to_string())
            .label("tenant", tenant.clone()),
        );
    }
    rules
}

/// One rule per cadence, each held for longer than its checks' interval plus two
/// scrapes: one failing run (a rail bouncing while a deploy restarts networkd, a
/// switch's exporter restarting) stays quiet; the next run failing too fires. A slow
/// run's verdict stands for its whole interval (an hour), so it fires after
/// `alert_after`, like the other rules.
fn health_rules(model: &MonitoringModel) -> Vec<Rule> {
    let parse = |text: &str| crate::blueprint::duration::parse(text).unwrap_or_default();
    let settings = &model.settings;
    let alert_after = parse(&settings.alert_after);
    let two_scrapes = parse(&settings.scrape_interval) * 2;
    let cadences = [
        ("fast", parse(&settings.health.fast_interval) + two_scrapes),
        ("cluster", parse(&settings.health.cluster_interval) + two_scrapes),
        ("slow", alert_after),
    ];
    cadences
        .into_iter()
        .map(|(cadence, hold)| {
            Rule::new(
                "HealthCheckFailing",
                "critical",
                format!(r#"toolkit_healthcheck_ok{{cadence="{cadence}"}} == 0"#),
                "toolkit health check {{ $labels.check }} fails on {{ $labels.subject }} (checked on {{ $labels.instance }})",
            )
            .held(&format!("{}s", hold.max(alert_after).as_secs()))
        })
        .collect()
}

/// States in which a Slurm node serves no job (`sinfo %T`, long form: `drained`,
/// `draining`, `down*`, `fail`, `maint`), as the Slurm view's queries match them.
const OUT_OF_SERVICE_STATES: &str = "(down|drain|fail|maint).*";

/// Node availability from the Slurm view (`slurm_node_state_info`, `slurm_node_reason_info`,
/// `slurm_node_gpus`): each node in service (1) or not (0) at every evaluation, the
/// share of node-hours in service over a day and a week (samples in service over
/// samples: independent of the interval), the GPUs out of service by cause, and the
/// GPU-hours lost per cause over a day (samples × the evaluation interval, which is
/// the scrape interval). With a blueprint target, an alert when the day's share is
/// below it. Causes are toolkit's drain reasons by kind and check (`health rail-links`,
/// `rma gpu-health`, `rollout`), `other` for anyone else's.
fn availability_rules(model: &MonitoringModel, hold: &str) -> Vec<Rule> {
    let interval = crate::blueprint::duration::parse(&model.settings.scrape_interval).unwrap_or_default().as_secs();
    let states = OUT_OF_SERVICE_STATES;
    let mut rules = vec![
        Rule::recording(
            "toolkit:node_in_service:bool",
            format!(
                r#"max by (node) (slurm_node_state_info{{state!~"{states}"}}) or on (node) (max by (node) (slurm_node_state_info) * 0)"#
            ),
        ),
        Rule::recording(
            "toolkit:node_availability:ratio_1d",
            "avg_over_time(toolkit:node_in_service:bool[1d])".to_owned(),
        ),
        Rule::recording(
            "toolkit:cluster_availability:ratio_1d",
            "sum(sum_over_time(toolkit:node_in_service:bool[1d])) / sum(count_over_time(toolkit:node_in_service:bool[1d]))"
                .to_owned(),
        ),
        Rule::recording(
            "toolkit:cluster_availability:ratio_7d",
            "sum(sum_over_time(toolkit:node_in_service:bool[7d])) / sum(count_over_time(toolkit:node_in_service:bool[7d]))"
                .to_owned(),
        ),
        Rule::recording(
            "toolkit:gpus_out_of_service:by_cause",
            concat!(
                r#"sum by (cause) ("#,
                r#"label_replace(label_replace(label_replace(slurm_node_reason_info, "cause", "other", "reason", ".*"), "#,
                r#""cause", "$1", "reason", "toolkit:(rollout).*"), "#,
                r#""cause", "$1 $2", "reason", "toolkit:(health|rma|repair) ([^: ]+).*")"#,
                r#" * on (node) group_left () max by (node) (slurm_node_gpus)"#,
                r#" * on (node) group_left () (1 - toolkit:node_in_service:bool))"#,
            )
            .to_owned(),
        ),
        Rule::recording(
            "toolkit:gpu_hours_lost:sum_1d",
            format!("sum_over_time(toolkit:gpus_out_of_service:by_cause[1d]) * {interval} / 3600"),
        ),
    ];
    if let Some(target) = model.settings.availability_target {
        rules.push(
            Rule::new(
                "AvailabilityBelowTarget",
                "warning",
                format!("toolkit:cluster_availability:ratio_1d < {target}"),
                &format!("the compute nodes were in service {{{{ $value | humanizePercentage }}}} of the last day, below the target of {target}"),
            )
            .held(hold)
            .label("target", target.to_string()),
        );
    }
    rules
}

/// BMCs read through the IPMI exporter (job `ipmi`; its metric names and the sensor
/// states 0 nominal, 1 warning, 2 critical are the exporter's, `docs/metrics.md` of
/// prometheus-community/ipmi_exporter 1.6). A BMC that does not answer makes the
/// exporter report `ipmi_up 0`, or, slower than the scrape timeout, the scrape fail.
fn bmc_rules(hold: &str) -> Vec<Rule> {
    vec![
        Rule::new(
            "BmcUnreachable",
            "warning",
            r#"ipmi_up{job="ipmi",collector="ipmi"} == 0 or up{job="ipmi"} == 0"#.to_owned(),
            "the BMC of {{ $labels.instance }} ({{ $labels.bmc }}) does not answer IPMI: its sensors are not read",
        )
        .held(hold),
        Rule::new(
            "BmcPowerSupplyCritical",
            "critical",
            r#"ipmi_sensor_state{job="ipmi",type="Power Supply"} == 2"#.to_owned(),
            "power supply {{ $labels.name }} of {{ $labels.instance }} is critical (BMC sensor {{ $labels.id }})",
        ),
        Rule::new(
            "BmcFanCritical",
            "critical",
            r#"ipmi_fan_speed_state{job="ipmi"} == 2"#.to_owned(),
            "fan {{ $labels.name }} of {{ $labels.instance }} is critical (BMC sensor {{ $labels.id }})",
        )
        .held(hold),
        Rule::new(
            "BmcTemperatureCritical",
            "critical",
            r#"ipmi_temperature_state{job="ipmi"} == 2"#.to_owned(),
            "temperature {{ $labels.name }} of {{ $labels.instance }} is critical (BMC sensor {{ $labels.id }})",
        )
        .held(hold),
    ]
}
