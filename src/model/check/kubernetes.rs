//! Checks of the Kubernetes flavor: names that become Kubernetes object names, the
//! Kueue version against the API toolkit writes, the `kubeadm` section, and GPU
//! sharing (MIG profiles that exist on each GPU model).

use crate::blueprint::LoadedBlueprint;
use crate::blueprint::kueue::{KUEUE_TOPOLOGY_SINCE, parse_kueue_version};
use crate::blueprint::schema::{GpuSharingMode, Kubernetes, KubernetesMode, SchedulerKind};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::model::gpu::{self, GpuModel};
use crate::resource::kube::{dns1123_label_error, dns1123_subdomain_error};

const BASE: &str = "scheduler.kubernetes";

pub(super) fn check(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    if blueprint.scheduler.kind != SchedulerKind::Kubernetes {
        return;
    }
    let Some(settings) = &blueprint.scheduler.kubernetes else { return };
    names(loaded, settings, out);
    kueue_version(loaded, settings, out);
    kubeadm(loaded, settings, out);
    mig_profiles(loaded, settings, out);
}

fn name_error(
    loaded: &LoadedBlueprint,
    path: String,
    what: &str,
    name: &str,
    error: Option<&'static str>,
    out: &mut Diagnostics,
) {
    if let Some(error) = error {
        out.push(
            Diagnostic::error("kubernetes-invalid-name", format!("{what} `{name}` {error}"))
                .at(&loaded.source, path)
                .help("Kubernetes names are lowercase letters, digits and `-` (DNS-1123), e.g. `team-a`"),
        );
    }
}

/// Tenants become namespaces, queues and label values (DNS-1123 labels); hosts
/// become Node names (DNS-1123 subdomains); the cohort and operator namespaces too.
fn names(loaded: &LoadedBlueprint, settings: &Kubernetes, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    for (index, tenant) in blueprint.tenants.iter().enumerate() {
        let error = dns1123_label_error(&tenant.name);
        name_error(loaded, format!("tenants[{index}].name"), "tenant (namespace)", &tenant.name, error, out);
    }
    if let Some(cohort) = &settings.cohort {
        name_error(loaded, format!("{BASE}.cohort"), "cohort", cohort, dns1123_label_error(cohort), out);
    } else if let Some(error) = dns1123_label_error(&blueprint.cluster.name) {
        name_error(
            loaded,
            "cluster.name".to_owned(),
            "cluster name (the cohort)",
            &blueprint.cluster.name,
            Some(error),
            out,
        );
    }
    let namespace = &settings.gpu_operator.namespace;
    let error = dns1123_label_error(namespace);
    name_error(loaded, format!("{BASE}.gpu_operator.namespace"), "namespace", namespace, error, out);
    if let Some(network) = &settings.network_operator {
        let error = dns1123_label_error(&network.namespace);
        name_error(loaded, format!("{BASE}.network_operator.namespace"), "namespace", &network.namespace, error, out);
    }
    for (index, group) in blueprint.node_groups.iter().enumerate() {
        // The pattern's own characters: `{index:02}` becomes digits.
        let sample = group.hostname.replace("{index:02}", "01").replace("{index:03}", "001").replace("{index}", "1");
        let error = dns1123_subdomain_error(&sample);
        name_error(loaded, format!("node_groups[{index}].hostname"), "host name (Node)", &group.hostname, error, out);
    }
}

fn kueue_version(loaded: &LoadedBlueprint, settings: &Kubernetes, out: &mut Diagnostics) {
    let path = format!("{BASE}.kueue_version");
    let Some(version) = parse_kueue_version(&settings.kueue_version) else {
        out.push(
            Diagnostic::error("invalid-kueue-version", format!("`{}` is not a Kueue release", settings.kueue_version))
                .at(&loaded.source, path)
                .help("write the release as a quoted string, e.g. `\"0.15.0\"`"),
        );
        return;
    };
    if settings.topology_aware && version < KUEUE_TOPOLOGY_SINCE {
        out.push(
            Diagnostic::error(
                "kueue-too-old-for-topology",
                format!("Kueue `{}` has no beta `Topology` API (v0.14 and later)", settings.kueue_version),
            )
            .at(&loaded.source, path)
            .help("upgrade Kueue to 0.14 or later, or set `topology_aware: false`"),
        );
    }
}

fn kubeadm(loaded: &LoadedBlueprint, settings: &Kubernetes, out: &mut Diagnostics) {
    if settings.mode != KubernetesMode::Kubeadm {
        return;
    }
    match &settings.kubeadm {
        Some(kubeadm) => super::kubeadm::blueprint(loaded, &settings.version, kubeadm, out),
        None => out.push(
            Diagnostic::error("kubeadm-settings-missing", "`mode: kubeadm` needs a `kubeadm:` section")
                .at(&loaded.source, format!("{BASE}.mode"))
                .help("add `kubeadm: { pod_subnet: 10.244.0.0/16 }` (the CNI's pod network)"),
        ),
    }
}

/// Memory slices (of 8) a MIG profile with `compute` slices may have.
fn memory_slices(compute: u32) -> &'static [u32] {
    match compute {
        1 => &[1, 2],
        2 => &[2],
        3 | 4 => &[4],
        7 => &[8],
        _ => &[],
    }
}

/// The MIG profiles of `model` (`1g.10gb`… on an 80 GB GPU): memory is the GPU's
/// divided in eighths, rounded.
fn profiles_of(model: &GpuModel) -> Vec<String> {
    [1, 2, 3, 4, 7]
        .into_iter()
        .flat_map(|compute| {
            memory_slices(compute)
                .iter()
                .map(move |&slices| format!("{compute}g.{}gb", (model.memory_gib * slices + 4) / 8))
        })
        .collect()
}

fn mig_profiles(loaded: &LoadedBlueprint, settings: &Kubernetes, out: &mut Diagnostics) {
    let sharing = &settings.gpu_sharing;
    let path = format!("{BASE}.gpu_sharing");
    match sharing.mode {
        GpuSharingMode::Shard | GpuSharingMode::Mps if sharing.per_gpu.is_none_or(|n| n == 0) => out.push(
            Diagnostic::error("gpu-sharing-incomplete", "time-slicing and MPS need `per_gpu` of at least 1")
                .at(&loaded.source, format!("{path}.per_gpu"))
                .help("set how many pods may share one GPU, e.g. `per_gpu: 4`"),
        ),
        GpuSharingMode::Mig if sharing.mig_profiles.is_empty() => out.push(
            Diagnostic::error("gpu-sharing-incomplete", "`mode: mig` needs `mig_profiles`")
                .at(&loaded.source, format!("{path}.mig_profiles"))
                .help("list the MIG instances of each GPU, e.g. `mig_profiles: [3g.40gb, 2g.20gb, 1g.10gb]`"),
        ),
        _ => {}
    }
    if sharing.mode != GpuSharingMode::Mig {
        return;
    }
    for group in &loaded.blueprint.node_groups {
        let Some(model) = group.gpu.as_ref().and_then(|g| gpu::find(&g.model)) else { continue };
        if !model.mig {
            continue;
        }
        let valid = profiles_of(model);
        for (index, profile) in sharing.mig_profiles.iter().enumerate() {
            if !valid.contains(profile) {
                out.push(
                    Diagnostic::error(
                        "invalid-mig-profile",
                        format!("`{profile}` is not a MIG profile of `{}` (group `{}`)", model.name, group.name),
                    )
                    .at(&loaded.source, format!("{path}.mig_profiles[{index}]"))
                    .help(format!("`{}` offers {}", model.name, valid.join(", "))),
                );
            }
        }
    }
    let slices: u32 =
        sharing.mig_profiles.iter().filter_map(|p| p.split_once('g').and_then(|(n, _)| n.parse::<u32>().ok())).sum();
    if slices > 7 {
        out.push(
            Diagnostic::error(
                "mig-profiles-exceed-gpu",
                format!("the MIG profiles use `{slices}` compute slices, a GPU has `7`"),
            )
            .at(&loaded.source, format!("{path}.mig_profiles"))
            .help("drop or shrink profiles until their `Ng` parts add up to 7 or less"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../blueprints/h100-kubernetes.yaml");

    fn ids(edits: &[(&str, &str)]) -> Vec<(&'static str, String)> {
        let mut text = EXAMPLE.to_owned();
        for (from, to) in edits {
            assert!(text.contains(from), "`{from}`");
            text = text.replacen(from, to, 1);
        }
        let loaded = crate::blueprint::load::load_text(std::path::Path::new("bp.yaml"), text).expect("loads");
        let mut out = Diagnostics::default();
        check(&loaded, &mut out);
        out.0.iter().map(|d| (d.id, d.key_path.clone().unwrap_or_default())).collect()
    }

    #[test]
    fn the_example_is_clean_and_each_mistake_is_located() {
        assert_eq!(ids(&[]), []);
        let found = ids(&[
            ("name: research, guaranteed_gpus", "name: Research_1, guaranteed_gpus"),
            ("kueue_version: \"0.15.0\"", "kueue_version: \"0.13.0\""),
            ("mode: existing", "mode: kubeadm"),
            ("gpu_sharing: { mode: none }", "gpu_sharing: { mode: mig, mig_profiles: [3g.40gb, 1g.18gb, 4g.40gb] }"),
        ]);
        let expected = [
            ("kubernetes-invalid-name", "tenants[0].name"),
            ("kueue-too-old-for-topology", "scheduler.kubernetes.kueue_version"),
            ("kubeadm-settings-missing", "scheduler.kubernetes.mode"),
            ("invalid-mig-profile", "scheduler.kubernetes.gpu_sharing.mig_profiles[1]"),
            ("mig-profiles-exceed-gpu", "scheduler.kubernetes.gpu_sharing.mig_profiles"),
        ];
        assert_eq!(found, expected.map(|(id, path)| (id, path.to_owned())));
    }

    #[test]
    fn mig_profiles_follow_the_gpu_memory() {
        let h100 = gpu::find("h100").expect("h100");
        assert_eq!(profiles_of(h100), ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]);
        let h200 = gpu::find("h200").expect("h200");
        assert_eq!(profiles_of(h200), ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]);
        let a100 = gpu::find("a100-40gb").expect("a100");
        assert!(profiles_of(a100).contains(&"1g.5gb".to_owned()));
    }
}
