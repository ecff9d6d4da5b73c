//! Checks of Kubernetes mode `kubeadm`: an exact release, networks that are CIDRs
//! and overlap neither each other nor the blueprint's IP plan, an endpoint with a
//! port, a controller node for `kubeadm init`; and in the inventory, the CA and the
//! bootstrap token (their format, where they can be read here).

use std::path::Path;

use ipnet::Ipv4Net;

use crate::blueprint::LoadedBlueprint;
use crate::blueprint::release::parse_release;
use crate::blueprint::schema::{Kubeadm, KubernetesMode, Role, SchedulerKind};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::inventory::LoadedInventory;
use crate::inventory::kubeadm::{ca_cert_hash, is_bootstrap_token};
use crate::inventory::secrets::resolve;

const BASE: &str = "scheduler.kubernetes";

/// The blueprint's `kubeadm` section (mode `kubeadm` only).
pub(super) fn blueprint(loaded: &LoadedBlueprint, version: &str, kubeadm: &Kubeadm, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    if parse_release(version).is_none() {
        out.push(
            Diagnostic::error("kubeadm-version-not-exact", format!("`{version}` is not an exact Kubernetes release"))
                .at(&loaded.source, format!("{BASE}.version"))
                .help("kubeadm and the pinned packages need MAJOR.MINOR.PATCH, e.g. `version: \"1.33.4\"`"),
        );
    }
    if !blueprint.node_groups.iter().any(|group| group.roles.contains(&Role::Controller) && group.count > 0) {
        out.push(
            Diagnostic::error(
                "kubeadm-no-control-plane",
                "no node group has the `controller` role to run `kubeadm init`",
            )
            .at(&loaded.source, format!("{BASE}.mode"))
            .help("give one node group `roles: [controller]`: its first node becomes the control plane"),
        );
    }
    if let Some(endpoint) = &kubeadm.api_endpoint {
        let port = endpoint.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
        if port.and_then(|port| port.parse::<u16>().ok()).is_none_or(|port| port == 0) {
            out.push(
                Diagnostic::error("kubeadm-invalid-endpoint", format!("`{endpoint}` is not `host:port`"))
                    .at(&loaded.source, format!("{BASE}.kubeadm.api_endpoint"))
                    .help("write the load balancer's or VIP's address with its port, e.g. `k8s-api.example.com:6443`"),
            );
        }
    }
    let mut plan: Vec<(String, Ipv4Net)> = Vec::new();
    let fabric = &blueprint.fabric;
    let mut planned = vec![("fabric.management.inband.subnet", &fabric.management.inband.subnet)];
    if let Some(oob) = &fabric.management.oob {
        planned.push(("fabric.management.oob.subnet", &oob.subnet));
    }
    let addressing = &fabric.compute.addressing;
    planned.push(("fabric.compute.addressing.rail_pool", &addressing.rail_pool));
    planned.push(("fabric.compute.addressing.loopback_pool", &addressing.loopback_pool));
    for (path, text) in planned {
        if let Ok(net) = text.parse::<Ipv4Net>() {
            plan.push((path.to_owned(), net));
        }
    }
    for (key, value) in [("pod_subnet", &kubeadm.pod_subnet), ("service_subnet", &kubeadm.service_subnet)] {
        let path = format!("{BASE}.kubeadm.{key}");
        let Ok(net) = value.parse::<Ipv4Net>() else {
            out.push(
                Diagnostic::error("kubeadm-invalid-subnet", format!("`{value}` is not an IPv4 network in CIDR form"))
                    .at(&loaded.source, path)
                    .help("write it as `10.244.0.0/16`"),
            );
            continue;
        };
        if let Some((other, taken)) =
            plan.iter().find(|(_, taken)| taken.contains(&net.network()) || net.contains(&taken.network()))
        {
            out.push(
                Diagnostic::error(
                    "kubeadm-subnet-overlap",
                    format!("`{net}` overlaps `{taken}` of `{other}`: pods or services would shadow those hosts"),
                )
                .at(&loaded.source, path.clone())
                .help("choose a range no other network of the blueprint uses, e.g. `10.244.0.0/16` for pods"),
            );
        }
        plan.push((path, net));
    }
}

/// The inventory's `kubernetes.kubeadm` section, for a blueprint in mode `kubeadm`.
/// Secrets not readable here (a CI runner) are left to the deploy, which refuses them.
pub(super) fn inventory(loaded: &LoadedBlueprint, inventory: &LoadedInventory, out: &mut Diagnostics) {
    let scheduler = &loaded.blueprint.scheduler;
    let kubeadm_mode = scheduler.kind == SchedulerKind::Kubernetes
        && scheduler.kubernetes.as_ref().is_some_and(|kubernetes| kubernetes.mode == KubernetesMode::Kubeadm);
    if !kubeadm_mode {
        return;
    }
    let access = inventory.inventory.kubernetes.as_ref().and_then(|kubernetes| kubernetes.kubeadm.as_ref());
    let Some(access) = access else {
        out.push(
            Diagnostic::error("kubeadm-access-missing", "mode `kubeadm` needs the cluster CA and a bootstrap token")
                .in_file(&inventory.source.path)
                .help(
                    "add `kubernetes: { kubeconfig: PATH, kubeadm: { ca_cert: PATH, ca_key: {file: PATH}, \
                     bootstrap_token: {env: VARIABLE} } }` (make the token with `kubeadm token generate`)",
                ),
        );
        return;
    };
    let base = Path::new(".");
    if let Ok(token) = resolve(&access.bootstrap_token, base)
        && !is_bootstrap_token(&token)
    {
        out.push(
            Diagnostic::error(
                "kubeadm-invalid-token",
                format!("bootstrap token `{}` is not `[a-z0-9]{{6}}.[a-z0-9]{{16}}`", access.bootstrap_token),
            )
            .at(&inventory.source, "kubernetes.kubeadm.bootstrap_token")
            .help("make one with `kubeadm token generate` (or `openssl rand -hex 3`.`openssl rand -hex 8`)"),
        );
    }
    let cert = if access.ca_cert.is_absolute() { access.ca_cert.clone() } else { base.join(&access.ca_cert) };
    match std::fs::read_to_string(&cert) {
        Ok(pem) => {
            if let Err(error) = ca_cert_hash(&pem) {
                out.push(
                    Diagnostic::error(
                        "kubeadm-invalid-ca",
                        format!("`{}` is not a CA certificate: {error}", cert.display()),
                    )
                    .at(&inventory.source, "kubernetes.kubeadm.ca_cert")
                    .help("name the PEM certificate of the cluster CA (`openssl x509 -in FILE -noout -text` reads it)"),
                );
            }
        }
        Err(error) => out.push(
            Diagnostic::error("kubeadm-invalid-ca", format!("cannot read `{}`: {error}", cert.display()))
                .at(&inventory.source, "kubernetes.kubeadm.ca_cert")
                .help("the joins pin this certificate's key: give its path from where toolkit runs"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::check::check;

    const EXAMPLE: &str = include_str!("../../../blueprints/h100-kubeadm.yaml");

    fn loaded(edits: &[(&str, &str)]) -> LoadedBlueprint {
        let mut text = EXAMPLE.to_owned();
        for (from, to) in edits {
            assert!(text.contains(from), "`{from}`");
            text = text.replacen(from, to, 1);
        }
        crate::blueprint::load::load_text(Path::new("bp.yaml"), text).expect("loads")
    }

    fn ids(loaded: &LoadedBlueprint, inventory: Option<&LoadedInventory>) -> Vec<(&'static str, String)> {
        let mut found: Vec<_> = check(loaded, inventory)
            .0
            .iter()
            .filter(|d| d.id.starts_with("kubeadm"))
            .map(|d| (d.id, d.key_path.clone().unwrap_or_default()))
            .collect();
        found.sort();
        found
    }

    fn inventory(text: &str) -> LoadedInventory {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("inventory.yaml");
        std::fs::write(&path, text).expect("writes");
        crate::inventory::load(&path).expect("loads")
    }

    #[test]
    fn the_example_is_clean_and_each_mistake_is_located() {
        let example = std::fs::read_to_string("inventories/h100-kubeadm.yaml").expect("example inventory");
        assert_eq!(ids(&loaded(&[]), Some(&inventory(&example))), []);
        let wrong = loaded(&[
            ("version: \"1.33.4\"", "version: \"1.33\""),
            ("pod_subnet: 10.244.0.0/16", "pod_subnet: 10.10.0.0/16, api_endpoint: k8s-api"),
            ("service_subnet: 10.96.0.0/12", "service_subnet: 10.96.0/12"),
            ("roles: [controller, login]", "roles: [login]"),
        ]);
        let expected = [
            ("kubeadm-invalid-endpoint", "scheduler.kubernetes.kubeadm.api_endpoint"),
            ("kubeadm-invalid-subnet", "scheduler.kubernetes.kubeadm.service_subnet"),
            ("kubeadm-no-control-plane", "scheduler.kubernetes.mode"),
            ("kubeadm-subnet-overlap", "scheduler.kubernetes.kubeadm.pod_subnet"),
            ("kubeadm-version-not-exact", "scheduler.kubernetes.version"),
        ];
        assert_eq!(ids(&wrong, None), expected.map(|(id, path)| (id, path.to_owned())));
        let services_in_pods = loaded(&[("service_subnet: 10.96.0.0/12", "service_subnet: 10.244.128.0/20")]);
        assert_eq!(
            ids(&services_in_pods, None),
            [("kubeadm-subnet-overlap", "scheduler.kubernetes.kubeadm.service_subnet".to_owned())]
        );
    }

    #[test]
    fn the_inventory_needs_a_ca_and_a_token_of_kubeadms_format() {
        let blueprint = loaded(&[]);
        let hosts = "version: 1\nhosts:\n  ctl01: {address: 10.10.0.10}\n  dgx01: {address: 10.10.0.11}\n  dgx02: {address: 10.10.0.12}\n  dgx03: {address: 10.10.0.13}\n  dgx04: {address: 10.10.0.14}\n";
        let without = inventory(&format!("{hosts}kubernetes: {{kubeconfig: k.yaml}}\n"));
        assert_eq!(ids(&blueprint, Some(&without)), [("kubeadm-access-missing", String::new())]);
        // A token in the wrong format, and a file that is no certificate.
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, "ABCDEF.0123456789abcdef\n").expect("writes");
        let wrong = inventory(&format!(
            "{hosts}kubernetes:\n  kubeconfig: k.yaml\n  kubeadm:\n    ca_cert: Cargo.toml\n    ca_key: {{file: {key}}}\n    bootstrap_token: {{file: {key}}}\n",
            key = token.display()
        ));
        let found = ids(&blueprint, Some(&wrong));
        assert_eq!(
            found,
            [
                ("kubeadm-invalid-ca", "kubernetes.kubeadm.ca_cert".to_owned()),
                ("kubeadm-invalid-token", "kubernetes.kubeadm.bootstrap_token".to_owned()),
            ]
        );
        let messages: Vec<String> = check(&blueprint, Some(&wrong)).0.iter().map(|d| d.message.clone()).collect();
        assert!(messages.iter().all(|message| !message.contains("ABCDEF")), "{messages:?}");
    }
}
