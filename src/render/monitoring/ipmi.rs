//! The IPMI exporter (Debian's `prometheus-ipmi-exporter`) on the monitoring host, in
//! remote mode: Prometheus asks it for one BMC per request (job `ipmi`, see
//! [`super::config`]) and it runs FreeIPMI's tools against that BMC over LAN.
//!
//! Stage: render. Input: [`MonitoringModel`] (the inventory's BMCs with an `ipmi`
//! interface) and their credentials. Output: the package, its configuration (one
//! module per BMC, named after its node, holding the BMC's user and password), its
//! arguments and the watched service. The configuration is a secret: mode 0600, owned
//! by `prometheus` (the unit's user), never shown in a plan; a credential not readable
//! where the plan is made leaves the file uncompared, as with Alertmanager's receivers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::model::monitoring::{IPMI_EXPORTER_PORT, MonitoringModel};
use crate::render::common::{owned_file, package, service};
use crate::resource::{Content, OnChange, Resource, ResourceId, Target};

/// The exporter's configuration (the package's own `ipmi_remote.yml` is left alone).
pub const IPMI_CONFIG: &str = "/etc/prometheus/toolkit-ipmi.yml";
const PACKAGE: &str = "prometheus-ipmi-exporter";
/// What is read from each BMC: sensors (temperatures, fans, power supplies…), chassis
/// power and the BMC's firmware. DCMI power readings are left out: many BMCs (and
/// ipmi_sim) do not implement DCMI, and its collector would report down on every scrape.
const COLLECTORS: [&str; 3] = ["bmc", "ipmi", "chassis"];

/// How often and how patiently BMCs are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    /// Prometheus' `scrape_interval` of job `ipmi` (the blueprint's `bmc_scrape_interval`).
    pub interval: String,
    /// Its `scrape_timeout`: the interval, at most 30 s.
    pub scrape_timeout: String,
    /// FreeIPMI's session timeout per collector, ms.
    pub session_timeout_ms: u64,
}

impl Timing {
    /// From the blueprint's `bmc_scrape_interval` (checked by lint; `1m` if unreadable).
    #[must_use]
    pub fn of(model: &MonitoringModel) -> Self {
        let interval = crate::blueprint::duration::parse(&model.settings.bmc_scrape_interval)
            .ok()
            .filter(|length| !length.is_zero())
            .unwrap_or(Duration::from_mins(1));
        let timeout = interval.min(Duration::from_secs(30));
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(30_000);
        // An unreachable BMC costs each collector about 1.6 session timeouts (measured
        // against ipmi_sim: 2.0 s per collector at 1,250 ms), run one after the other:
        // a sixth of the scrape timeout per collector lets the exporter answer
        // `ipmi_up 0` in time instead of the whole scrape failing. FreeIPMI needs it above
        // its 1 s retransmission timeout; 10 s is plenty for a slow BMC.
        let session_timeout_ms = (timeout_ms / 6).clamp(1_100, 10_000);
        Self {
            interval: model.settings.bmc_scrape_interval.clone(),
            scrape_timeout: format!("{timeout_ms}ms"),
            session_timeout_ms,
        }
    }
}

#[derive(Serialize)]
struct Config<'a> {
    modules: BTreeMap<&'a str, Module<'a>>,
}

#[derive(Serialize)]
struct Module<'a> {
    user: &'a str,
    pass: &'a str,
    driver: &'static str,
    privilege: &'static str,
    timeout: u64,
    collectors: [&'static str; 3],
}

/// The exporter's configuration: one module per BMC, named after its node, with the
/// credentials of `credentials` (node → user, password). `None` when one is missing.
#[must_use]
pub fn config(model: &MonitoringModel, credentials: &BTreeMap<String, (String, String)>) -> Option<String> {
    let timeout = Timing::of(model).session_timeout_ms;
    let mut modules = BTreeMap::new();
    for bmc in &model.bmcs {
        let (user, pass) = credentials.get(&bmc.node)?;
        // Reading sensors needs no more than the `user` privilege.
        let module = Module { user, pass, driver: bmc.driver, privilege: "user", timeout, collectors: COLLECTORS };
        modules.insert(bmc.node.as_str(), module);
    }
    let body = serde_norway::to_string(&Config { modules }).unwrap_or_default();
    Some(format!("# Rendered by toolkit from the inventory's BMCs; changes here are overwritten.\n{body}"))
}

/// The exporter on the monitoring host, when some BMC is scraped.
pub fn render(model: &MonitoringModel, credentials: &BTreeMap<String, (String, String)>, out: &mut Vec<Resource>) {
    if model.bmcs.is_empty() {
        return;
    }
    let target = Target::node(&model.host);
    let package_id = ResourceId::new(&target.name, "package", PACKAGE);
    out.push(package(&target, PACKAGE));
    let content = config(model, credentials).map_or_else(Content::unresolved_secret, Content::new);
    let file =
        super::secret(owned_file(&target, IPMI_CONFIG, content, 0o600, "prometheus", "prometheus").after([package_id]));
    // Only Prometheus on this host asks it: the port is not opened to the network.
    let args = super::defaults(
        &target,
        PACKAGE,
        &format!("--config.file={IPMI_CONFIG} --web.listen-address=localhost:{IPMI_EXPORTER_PORT}"),
    );
    let watched = vec![file.id.clone(), args.id.clone()];
    out.extend([file, args]);
    out.push(service(&target, PACKAGE, watched, OnChange::Restart));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::monitoring::BmcTarget;

    fn model(interval: &str) -> MonitoringModel {
        let text = format!("bmc_scrape_interval: {interval}\n");
        let settings = serde_norway::from_str(&text).expect("settings");
        MonitoringModel {
            cluster: "c".into(),
            host: "head".into(),
            settings,
            nodes: vec![],
            switches: vec![],
            frr_switches: vec![],
            gpu_nodes: vec![],
            dcgm_exporters: vec![],
            rails: vec![],
            mounts: vec![],
            tenants: vec![],
            slurm_controller: None,
            cluster_checks_host: "head".into(),
            bgp_plan: vec![],
            bmcs: vec![
                BmcTarget { node: "node01".into(), address: "10.0.1.1".into(), driver: "LAN_2_0" },
                BmcTarget { node: "node02".into(), address: "10.0.1.2".into(), driver: "LAN" },
            ],
        }
    }

    #[test]
    fn timeouts_follow_the_interval() {
        assert_eq!(
            Timing::of(&model("1m")),
            Timing { interval: "1m".into(), scrape_timeout: "30000ms".into(), session_timeout_ms: 5_000 }
        );
        assert_eq!(Timing::of(&model("10s")).session_timeout_ms, 1_666);
        // Never under FreeIPMI's retransmission timeout.
        assert_eq!(Timing::of(&model("2s")).session_timeout_ms, 1_100);
        assert_eq!(Timing::of(&model("2s")).scrape_timeout, "2000ms");
    }

    #[test]
    fn one_module_per_bmc_with_its_credentials() {
        let credentials = BTreeMap::from([
            ("node01".to_owned(), ("op".to_owned(), "pw1".to_owned())),
            ("node02".to_owned(), ("op2".to_owned(), "pw2".to_owned())),
        ]);
        let text = config(&model("1m"), &credentials).expect("all credentials");
        let parsed: serde_json::Value = serde_norway::from_str(&text).expect("yaml");
        assert_eq!(parsed["modules"]["node01"]["pass"], "pw1");
        assert_eq!(parsed["modules"]["node02"]["driver"], "LAN");
        assert_eq!(parsed["modules"]["node02"]["timeout"], 5000);
        assert_eq!(parsed["modules"]["node01"]["collectors"], serde_json::json!(["bmc", "ipmi", "chassis"]));
        // One BMC's password unreadable here: no file text at all, not a partial one.
        let partial = BTreeMap::from([("node01".to_owned(), ("op".to_owned(), "pw1".to_owned()))]);
        assert_eq!(config(&model("1m"), &partial), None);
    }

    #[test]
    fn the_configuration_is_a_secret_only_prometheus_reads() {
        let mut out = Vec::new();
        render(&model("1m"), &BTreeMap::new(), &mut out);
        let file = out.iter().find(|r| r.id.as_str() == format!("head:file:{IPMI_CONFIG}")).expect("config file");
        let crate::resource::Desired::File { mode, owner, group, secret, .. } = &*file.desired else {
            panic!("not a file")
        };
        assert_eq!((*mode, owner.as_str(), group.as_str(), *secret), (0o600, "prometheus", "prometheus", true));
        let defaults =
            out.iter().find(|r| r.id.as_str() == "head:file:/etc/default/prometheus-ipmi-exporter").expect("arguments");
        let crate::resource::Desired::File { content, .. } = &*defaults.desired else { panic!("not a file") };
        assert!(content.text().contains("--web.listen-address=localhost:9290"), "{}", content.text());
    }
}
