//! Monitoring: Prometheus and Alertmanager on the monitoring host, node exporter on
//! every node and switch, the FRR exporter on FRR switches, and the Slurm view on the
//! controller — Debian packages configured like everything else toolkit deploys.
//!
//! Stage: render. Input: [`MonitoringModel`] (from the model and inventory) and the
//! named secrets and BMC credentials. Output: resources appended to `out`. Prometheus' config and rules and
//! Alertmanager's config are checked on the host (`promtool check rules`, `promtool
//! check config`, `amtool check-config`) before they replace the active files, and a
//! change restarts the daemon that reads them.
//!
//! NVIDIA's DCGM exporter (from NVIDIA's CUDA repository, not Debian) runs on nodes with
//! real GPUs and DCGM 4, with toolkit's counters ([`dcgm`]), and is scraped on its port
//! (9400); the lab's fake-GPU nodes get none (nothing there could answer). BMCs with
//! an IPMI interface in the inventory are read through the IPMI exporter ([`ipmi`]).

pub mod cabling_check;
pub mod cluster_checks;
pub mod config;
pub mod dcgm;
pub mod ipmi;
pub mod rules;

use std::collections::BTreeMap;

use crate::inventory::Inventory;
use crate::model::Model;
use crate::model::monitoring::{self as monitoring_model, MonitoringModel};
use crate::render::common::{file, owned_file, package, service};
use crate::render::slurm::Secrets;
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] =
    &[("monitoring/toolkit-slurm-view.sh", include_str!("../../../templates/monitoring/toolkit-slurm-view.sh"))];

/// Prometheus' configuration file (the Debian package's default path).
pub const PROMETHEUS_YML: &str = "/etc/prometheus/prometheus.yml";
/// Alertmanager's configuration file (the Debian package's default path).
pub const ALERTMANAGER_YML: &str = "/etc/prometheus/alertmanager.yml";
/// The Slurm view's program on the controller.
pub const SLURM_VIEW: &str = "/usr/local/sbin/toolkit-slurm-view";
const SLURM_VIEW_SERVICE: &str = "/etc/systemd/system/toolkit-slurm-view.service";
const SLURM_VIEW_TIMER: &str = "/etc/systemd/system/toolkit-slurm-view.timer";

/// Appends the monitoring resources, if the blueprint deploys monitoring.
///
/// # Errors
/// None yet; the signature matches the other render modules.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    secrets: &Secrets,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let Some(monitoring) = monitoring_model::monitoring(model, inventory) else { return Ok(()) };
    server(&monitoring, &secrets.named, out);
    ipmi::render(&monitoring, &secrets.bmcs, out);
    for node in &monitoring.nodes {
        node_exporter(&Target::node(&node.name), out);
    }
    for switch in &monitoring.switches {
        node_exporter(&Target::switch(&switch.name), out);
    }
    for switch in &monitoring.frr_switches {
        frr_exporter(&Target::switch(&switch.name), out);
    }
    for exporter in &monitoring.dcgm_exporters {
        dcgm::render(exporter, out);
    }
    cluster_checks::render(&monitoring, out);
    cabling_check::render(model, inventory, &monitoring, renderer, out);
    if let Some(controller) = &monitoring.slurm_controller {
        slurm_view(&monitoring, &Target::node(controller), out);
        if monitoring.settings.repair.is_some() {
            repair_credentials(model, inventory, &secrets.bmcs, &Target::node(controller), out);
        }
    }
    Ok(())
}

/// Where the repair service reads the BMC credentials its `power-cycle` step uses.
pub const REPAIR_BMC_CREDENTIALS: &str = "/etc/toolkit/repair/bmc.json";

/// The BMC credentials of every node the inventory gives a BMC, for the repair service
/// on the controller: a 0600 root file, never shown in a plan; none without BMCs.
fn repair_credentials(
    model: &Model,
    inventory: Option<&Inventory>,
    credentials: &BTreeMap<String, (String, String)>,
    target: &Target,
    out: &mut Vec<Resource>,
) {
    let Some(inventory) = inventory else { return };
    let nodes: Vec<&str> =
        model.nodes.iter().map(|node| node.name.as_str()).filter(|name| inventory.bmcs.contains_key(*name)).collect();
    if nodes.is_empty() {
        return;
    }
    let known: Option<BTreeMap<&str, serde_json::Value>> = nodes
        .iter()
        .map(|node| {
            let (username, password) = credentials.get(*node)?;
            Some((*node, serde_json::json!({ "username": username, "password": password })))
        })
        .collect();
    let content = known.map_or_else(Content::unresolved_secret, |known| {
        Content::new(serde_json::to_string(&known).unwrap_or_default() + "\n")
    });
    // The service makes /etc/toolkit/repair (the health stage renders it): written after it.
    let directory = ResourceId::new(&target.name, "dir", "/etc/toolkit/repair");
    out.push(secret(file(target, REPAIR_BMC_CREDENTIALS, content, 0o600).after([directory])));
}

/// A file `check` accepts (run on the host with `{}` as the new file) before it is
/// moved into place.
fn checked(mut resource: Resource, check: &[&str]) -> Resource {
    if let Desired::File { check: slot, .. } = std::sync::Arc::make_mut(&mut resource.desired) {
        *slot = Some(check.iter().map(|word| (*word).to_owned()).collect());
    }
    resource
}

fn secret(mut resource: Resource) -> Resource {
    if let Desired::File { secret: slot, .. } = std::sync::Arc::make_mut(&mut resource.desired) {
        *slot = true;
    }
    resource
}

/// `/etc/default/<package>`: the Debian units read `ARGS` from it.
fn defaults(target: &Target, package_name: &str, args: &str) -> Resource {
    let text = format!("# Rendered by toolkit: arguments of {package_name}.service.\nARGS=\"{args}\"\n");
    file(target, &format!("/etc/default/{package_name}"), Content::new(text), 0o644).after([ResourceId::new(
        &target.name,
        "package",
        package_name,
    )])
}

fn server(monitoring: &MonitoringModel, secrets: &BTreeMap<String, String>, out: &mut Vec<Resource>) {
    let target = Target::node(&monitoring.host);
    let prometheus_package = ResourceId::new(&target.name, "package", "prometheus");
    let alertmanager_package = ResourceId::new(&target.name, "package", "prometheus-alertmanager");
    out.push(package(&target, "prometheus"));
    out.push(package(&target, "prometheus-alertmanager"));

    let rules = checked(
        file(&target, config::RULES_PATH, Content::new(rules::rules(monitoring)), 0o644)
            .after([prometheus_package.clone()]),
        &["promtool", "check", "rules", "{}"],
    );
    // promtool reads the rule files the config names: the new rules go first.
    let prometheus_yml = checked(
        file(&target, PROMETHEUS_YML, Content::new(config::prometheus(monitoring)), 0o644)
            .after([prometheus_package, rules.id.clone()]),
        &["promtool", "check", "config", "{}"],
    );
    let retention = &monitoring.settings.retention;
    let prometheus_defaults = defaults(&target, "prometheus", &format!("--storage.tsdb.retention.time={retention}"));
    let watched = vec![rules.id.clone(), prometheus_yml.id.clone(), prometheus_defaults.id.clone()];
    out.extend([rules, prometheus_yml, prometheus_defaults]);
    out.push(service(&target, "prometheus", watched, OnChange::Restart));

    let referenced: Vec<&str> = monitoring
        .settings
        .receivers
        .iter()
        .flat_map(|receiver| {
            let webhook = receiver.webhook.as_ref().map(|webhook| webhook.url_secret.as_str());
            let password = receiver.email.as_ref().and_then(|email| email.password_secret.as_deref());
            webhook.into_iter().chain(password)
        })
        .collect();
    let has_secrets = !referenced.is_empty();
    // A secret not readable here (an offline plan in CI): the file is not compared.
    let content = if referenced.iter().all(|name| secrets.contains_key(*name)) {
        Content::new(config::alertmanager(monitoring, secrets))
    } else {
        Content::unresolved_secret()
    };
    // Alertmanager runs as `prometheus`: it reads the file through its group.
    let mut alertmanager_yml = checked(
        owned_file(&target, ALERTMANAGER_YML, content, 0o640, "root", "prometheus").after([alertmanager_package]),
        &["amtool", "check-config", "{}"],
    );
    if has_secrets {
        alertmanager_yml = secret(alertmanager_yml);
    }
    // One Alertmanager: the HA gossip port the package opens by default stays closed.
    let alertmanager_defaults = defaults(&target, "prometheus-alertmanager", "--cluster.listen-address=");
    let watched = vec![alertmanager_yml.id.clone(), alertmanager_defaults.id.clone()];
    out.extend([alertmanager_yml, alertmanager_defaults]);
    out.push(service(&target, "prometheus-alertmanager", watched, OnChange::Restart));
}

fn node_exporter(target: &Target, out: &mut Vec<Resource>) {
    let package_id = ResourceId::new(&target.name, "package", "prometheus-node-exporter");
    out.push(package(target, "prometheus-node-exporter"));
    out.push(service(target, "prometheus-node-exporter", vec![], OnChange::Restart).after([package_id]));
}

fn frr_exporter(target: &Target, out: &mut Vec<Resource>) {
    out.push(package(target, "prometheus-frr-exporter"));
    // Peer descriptions (frr.conf names each neighbor after the switch at its other end)
    // let a BGP alert name both ends of the session; as plain text, since by default the
    // exporter reads them as JSON. OSPF and BFD are not run by toolkit: their collectors
    // would only log a failure every scrape.
    let args = defaults(
        target,
        "prometheus-frr-exporter",
        "--collector.bgp.peer-descriptions --collector.bgp.peer-descriptions.plain-text --no-collector.ospf --no-collector.bfd",
    );
    let watched = vec![args.id.clone()];
    out.push(args);
    out.push(service(target, "prometheus-frr-exporter", watched, OnChange::Restart));
}

/// The Slurm view: a timer on the controller runs the script, which writes
/// `slurm_*` and `toolkit_tenant_*` metrics for node exporter's textfile collector.
fn slurm_view(monitoring: &MonitoringModel, target: &Target, out: &mut Vec<Resource>) {
    let script = file(target, SLURM_VIEW, Content::new(TEMPLATES[0].1.to_owned()), 0o755);
    // Tenant names are checked at lint (lowercase letters, digits, `-`): safe as words.
    let tenants: Vec<String> = monitoring.tenants.iter().map(|(name, gpus)| format!("{name}={gpus}")).collect();
    let unit = format!(
        "# Rendered by toolkit: the Slurm view for Prometheus (node exporter textfile).\n[Unit]\n\
         Description=toolkit Slurm view for Prometheus\nAfter=slurmctld.service\n\n[Service]\nType=oneshot\n\
         ExecStart={SLURM_VIEW} {}\n",
        tenants.join(" ")
    );
    let interval = crate::blueprint::duration::parse(&monitoring.settings.scrape_interval)
        .map_or(15, |length| length.as_secs().max(5));
    let timer = format!(
        "# Rendered by toolkit: refreshes the Slurm view every scrape interval.\n[Unit]\n\
         Description=toolkit Slurm view for Prometheus, every {interval} s\n\n[Timer]\nOnActiveSec=0\n\
         OnUnitActiveSec={interval}s\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n"
    );
    let service_file = file(target, SLURM_VIEW_SERVICE, Content::new(unit), 0o644);
    let timer_file = file(target, SLURM_VIEW_TIMER, Content::new(timer), 0o644);
    let watched = vec![script.id.clone(), service_file.id.clone(), timer_file.id.clone()];
    out.extend([script, service_file, timer_file]);
    out.push(service(target, "toolkit-slurm-view.timer", watched, OnChange::Restart).after([ResourceId::new(
        &target.name,
        "service",
        "prometheus-node-exporter",
    )]));
}
