//! Checks of the `monitoring` section: durations in Prometheus form, a monitoring
//! host that is a node of the cluster, unique receivers with exactly one kind each,
//! addresses that Alertmanager accepts, health-check names, the repair service's
//! budgets, durations and ladders; and, with an inventory,
//! that every secret a receiver names is declared in its `secrets.named`.

use std::collections::HashMap;

use super::{Facts, is_simple_name};
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::duration;
use crate::blueprint::schema::{Monitoring, Receiver};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::inventory::LoadedInventory;
use crate::source::join_key;

/// Longest receiver or health-check name.
const MAX_NAME: usize = 40;

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let Some(monitoring) = &loaded.blueprint.monitoring else { return };
    durations(loaded, monitoring, out);
    host(loaded, monitoring, facts, out);
    receivers(loaded, monitoring, out);
    health_check_names(loaded, monitoring, out);
    availability_target(loaded, monitoring, out);
    repair(loaded, monitoring, out);
}

fn repair(loaded: &LoadedBlueprint, monitoring: &Monitoring, out: &mut Diagnostics) {
    let Some(repair) = &monitoring.repair else { return };
    let source = &loaded.source;
    if loaded.blueprint.scheduler.kind != crate::blueprint::schema::SchedulerKind::Slurm {
        out.push(
            Diagnostic::error("repair-needs-slurm", "the repair service drains, reboots and resumes through Slurm")
                .at(source, "monitoring.repair")
                .help("remove `monitoring.repair` on a Kubernetes cluster"),
        );
    }
    for (key, value) in [("max_in_repair", repair.max_in_repair), ("max_repairs_per_day", repair.max_repairs_per_day)] {
        if value == 0 {
            out.push(
                Diagnostic::error("invalid-repair-budget", format!("`{key}: 0` would never repair a node"))
                    .at(source, format!("monitoring.repair.{key}"))
                    .help("give at least 1, or remove `monitoring.repair`"),
            );
        }
    }
    for (key, text) in [("interval", &repair.interval), ("settle", &repair.settle)] {
        let problem = match duration::parse(text) {
            Err(why) => Some(why),
            Ok(length) if length.is_zero() => Some(format!("`{text}` is zero: it must be positive")),
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            out.push(
                Diagnostic::error("invalid-duration", problem)
                    .at(source, format!("monitoring.repair.{key}"))
                    .help("write it the way Prometheus does, e.g. `30s`, `15m`"),
            );
        }
    }
    if repair.diagnose.as_deref().is_some_and(|command| command.trim().is_empty() || command.contains('\n')) {
        out.push(
            Diagnostic::error("invalid-repair-diagnose", "`diagnose` must be one command line")
                .at(source, "monitoring.repair.diagnose")
                .help("e.g. `dcgmi diag --host {node} -r 3`; `{node}` is replaced by the node's name"),
        );
    }
    for (check, ladder) in &repair.checks {
        let key = join_key("monitoring.repair.checks", check);
        if !is_simple_name(check, MAX_NAME) {
            out.push(
                Diagnostic::error("invalid-health-check-name", format!("`{check}` is not a health check name"))
                    .at(source, &key)
                    .help("health checks are named with lowercase letters, digits and `-`, e.g. `rail-links`"),
            );
        }
        if let Some(problem) = crate::blueprint::schema::RepairStep::ladder_problem(ladder) {
            out.push(
                Diagnostic::error("invalid-repair-ladder", problem)
                    .at(source, &key)
                    .help("list each step once and end with `rma`, e.g. `[reboot, power-cycle, diagnose, rma]`"),
            );
        }
    }
}

/// A share of hours: above 0 (a target of 0 never fires) and at most 1.
fn availability_target(loaded: &LoadedBlueprint, monitoring: &Monitoring, out: &mut Diagnostics) {
    let Some(target) = monitoring.availability_target else { return };
    if target > 0.0 && target <= 1.0 {
        return;
    }
    let help = if target > 1.0 && target <= 100.0 {
        format!("it is a fraction, not a percentage: `{}`", target / 100.0)
    } else {
        "give a fraction of the node-hours, e.g. `0.99`".to_owned()
    };
    out.push(
        Diagnostic::error(
            "invalid-availability-target",
            format!("availability target `{target}` is not within (0, 1]"),
        )
        .at(&loaded.source, "monitoring.availability_target")
        .help(help),
    );
}

/// Every receiver's secret is declared in the inventory (by name, never by value).
pub(super) fn secrets(loaded: &LoadedBlueprint, inventory: &LoadedInventory, out: &mut Diagnostics) {
    let Some(monitoring) = &loaded.blueprint.monitoring else { return };
    let declared = &inventory.inventory.secrets.named;
    for (index, receiver) in monitoring.receivers.iter().enumerate() {
        for (key, name) in secret_references(receiver) {
            if declared.contains_key(name) {
                continue;
            }
            out.push(
                Diagnostic::error(
                    "unknown-secret",
                    format!("receiver `{}` names secret `{name}`, which the inventory does not declare", receiver.name),
                )
                .at(&loaded.source, format!("monitoring.receivers[{index}].{key}"))
                .help(format!("add it to the inventory: `secrets: {{ named: {{ {name}: {{ env: VARIABLE }} }} }}`")),
            );
        }
    }
}

/// Every BMC read over IPMI has an address: its own, or a Redfish endpoint with a host.
pub(super) fn bmc_addresses(loaded: &LoadedBlueprint, inventory: &LoadedInventory, out: &mut Diagnostics) {
    if !loaded.blueprint.monitoring.as_ref().is_some_and(|monitoring| monitoring.enabled) {
        return;
    }
    for (node, bmc) in &inventory.inventory.bmcs {
        let Some(ipmi) = &bmc.ipmi else { continue };
        let host = reqwest::Url::parse(&bmc.endpoint).ok().and_then(|url| url.host_str().map(str::to_owned));
        if ipmi.address.is_none() && host.is_none() {
            out.push(
                Diagnostic::error(
                    "bmc-ipmi-address",
                    format!("BMC of `{node}`: endpoint `{}` has no host to read IPMI from", bmc.endpoint),
                )
                .at(&inventory.source, format!("bmcs.{node}.ipmi"))
                .help("give the IPMI interface's address: `ipmi: { address: 10.0.1.5 }`"),
            );
        }
    }
}

/// The secrets a receiver references, with their key below the receiver.
fn secret_references(receiver: &Receiver) -> Vec<(&'static str, &str)> {
    let mut names = Vec::new();
    if let Some(webhook) = &receiver.webhook {
        names.push(("webhook.url_secret", webhook.url_secret.as_str()));
    }
    if let Some(password) = receiver.email.as_ref().and_then(|email| email.password_secret.as_deref()) {
        names.push(("email.password_secret", password));
    }
    names
}

fn durations(loaded: &LoadedBlueprint, monitoring: &Monitoring, out: &mut Diagnostics) {
    let health = &monitoring.health;
    let values = [
        ("monitoring.retention", &monitoring.retention),
        ("monitoring.scrape_interval", &monitoring.scrape_interval),
        ("monitoring.bmc_scrape_interval", &monitoring.bmc_scrape_interval),
        ("monitoring.alert_after", &monitoring.alert_after),
        ("monitoring.health.fast_interval", &health.fast_interval),
        ("monitoring.health.slow_interval", &health.slow_interval),
        ("monitoring.health.cluster_interval", &health.cluster_interval),
    ];
    for (key, text) in values {
        match duration::parse(text) {
            Err(why) => out.push(
                Diagnostic::error("invalid-duration", why)
                    .at(&loaded.source, key)
                    .help("write it the way Prometheus does, e.g. `15s`, `5m`, `1h30m`, `15d`"),
            ),
            Ok(length) if length.is_zero() && key != "monitoring.alert_after" => out.push(
                Diagnostic::error("invalid-duration", format!("`{text}` is zero: an interval must be positive"))
                    .at(&loaded.source, key)
                    .help("give it a length, e.g. `15s`"),
            ),
            Ok(_) => {}
        }
    }
}

fn host(loaded: &LoadedBlueprint, monitoring: &Monitoring, facts: &Facts, out: &mut Diagnostics) {
    let Some(host) = &monitoring.host else { return };
    let Some(names) = &facts.hostnames else { return };
    if names.iter().any(|(_, name)| name == host) {
        return;
    }
    let known: Vec<&str> = names.iter().map(|(_, name)| name.as_str()).take(1000).collect();
    out.push(
        Diagnostic::error(
            "unknown-monitoring-host",
            format!("monitoring host `{host}` is not a node of the blueprint"),
        )
        .at(&loaded.source, "monitoring.host")
        .help(super::unknown_name_help(host, known, "node")),
    );
}

fn receivers(loaded: &LoadedBlueprint, monitoring: &Monitoring, out: &mut Diagnostics) {
    let source = &loaded.source;
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (index, receiver) in monitoring.receivers.iter().enumerate() {
        let at = format!("monitoring.receivers[{index}]");
        if !is_simple_name(&receiver.name, MAX_NAME) {
            out.push(
                Diagnostic::error(
                    "invalid-receiver-name",
                    format!("receiver name `{}` is not a simple name", receiver.name),
                )
                .at(source, format!("{at}.name"))
                .help(format!("use lowercase letters, digits and `-`, starting with a letter, at most {MAX_NAME}")),
            );
        }
        if let Some(first) = seen.insert(&receiver.name, index) {
            out.push(
                Diagnostic::error("duplicate-receiver", format!("receiver `{}` is declared twice", receiver.name))
                    .at(source, format!("{at}.name"))
                    .help(format!("merge it with `monitoring.receivers[{first}]` or rename it")),
            );
        }
        match (&receiver.webhook, &receiver.email) {
            (Some(_), Some(_)) => out.push(
                Diagnostic::error(
                    "receiver-kind",
                    format!("receiver `{}` is both a webhook and an email", receiver.name),
                )
                .at(source, format!("{at}.email"))
                .help("declare two receivers, one of each kind"),
            ),
            (None, None) => out.push(
                Diagnostic::error(
                    "receiver-kind",
                    format!("receiver `{}` has neither `webhook` nor `email`", receiver.name),
                )
                .at(source, at.clone())
                .help("add `webhook: { url_secret: NAME }` or `email: { to: ..., smarthost: host:port }`"),
            ),
            _ => {}
        }
        if let Some(email) = &receiver.email {
            email_values(loaded, &at, email, out);
        }
        for (key, name) in secret_references(receiver) {
            if !is_secret_name(name) {
                out.push(
                    Diagnostic::error("invalid-secret-name", format!("`{name}` is not a secret name"))
                        .at(source, format!("{at}.{key}"))
                        .help(
                            "a secret is named by its inventory key: letters, digits and `_`, e.g. `alert_webhook_url`",
                        ),
                );
            }
        }
    }
}

fn email_values(
    loaded: &LoadedBlueprint,
    at: &str,
    email: &crate::blueprint::schema::EmailReceiver,
    out: &mut Diagnostics,
) {
    let addresses = [("to", Some(&email.to)), ("from", email.from.as_ref())];
    for (key, address) in addresses {
        let Some(address) = address else { continue };
        if !is_address(address) {
            out.push(
                Diagnostic::error("invalid-email", format!("`{address}` is not an email address"))
                    .at(&loaded.source, format!("{at}.email.{key}"))
                    .help("write one address, `user@example.org`"),
            );
        }
    }
    let port_ok = email.smarthost.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
            && port.parse::<u16>().is_ok_and(|port| port > 0)
    });
    if !port_ok {
        out.push(
            Diagnostic::error("invalid-smarthost", format!("`{}` is not `host:port`", email.smarthost))
                .at(&loaded.source, format!("{at}.email.smarthost"))
                .help("Alertmanager needs the port: write e.g. `mail.example.org:587`"),
        );
    }
}

fn health_check_names(loaded: &LoadedBlueprint, monitoring: &Monitoring, out: &mut Diagnostics) {
    for name in monitoring.health.checks.keys() {
        if !is_simple_name(name, MAX_NAME) {
            out.push(
                Diagnostic::error("invalid-health-check-name", format!("`{name}` is not a health check name"))
                    .at(&loaded.source, join_key("monitoring.health.checks", name))
                    .help("health checks are named with lowercase letters, digits and `-`, e.g. `rail-links`"),
            );
        }
    }
}

/// Inventory secret names: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_secret_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One plain address: text, `@`, a domain; no spaces, quotes or list separators.
fn is_address(text: &str) -> bool {
    let Some((user, domain)) = text.split_once('@') else { return false };
    !user.is_empty()
        && domain.contains('.')
        && text.len() <= 254
        && user.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
        && domain.chars().all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
}
