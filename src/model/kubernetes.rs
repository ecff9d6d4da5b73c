//! The Kubernetes view of the cluster: GPU flavors, each tenant's share of them,
//! the Kueue API version, and the topology labels of every GPU node.
//!
//! Stage: expand. Input: the [`Model`] of a blueprint with `scheduler.kind:
//! kubernetes`. Output: [`KubeModel`]. Every number a Kueue object carries is decided
//! here (quota splits, borrowing limits, device units per GPU); `render::kubernetes`
//! only lays the numbers out as objects.

use std::collections::BTreeMap;

use serde::Serialize;

use super::gpu::GpuModel;
use super::{Model, Node};
use crate::blueprint::schema::{GpuSharing, GpuSharingMode, Kubernetes, Role, SchedulerKind};

/// Prefix of the node labels toolkit owns.
pub const LABEL_PREFIX: &str = "toolkit.io";
/// Node label naming the GPU model (a ResourceFlavor's `nodeLabels`). GFD's
/// `nvidia.com/gpu.product` is not used: MIG changes it on the node.
pub const GPU_MODEL_LABEL: &str = "toolkit.io/gpu-model";
/// Node label of the superpod (pod of a 3-tier fabric).
pub const SUPERPOD_LABEL: &str = "toolkit.io/superpod";
/// Node label of the scalable unit.
pub const SU_LABEL: &str = "toolkit.io/su";
/// Node label of the leaf group: the rail-0 leaf the node hangs from (every rail's
/// leaf of a scalable unit serves the same nodes, so one names them all).
pub const LEAF_LABEL: &str = "toolkit.io/leaf";
/// Node label of the NVLink domain (NVL72 rack) from the blueprint. GFD's
/// `nvidia.com/gpu.clique` (`<cluster UUID>.<clique id>`, read from NVML's fabric
/// info) names the same domain but belongs to GFD, which would overwrite it.
pub const NVLINK_DOMAIN_LABEL: &str = "toolkit.io/nvlink-domain";
/// The node's own name, set by the kubelet: Kueue's lowest topology level.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The device plugin's whole-GPU resource.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

pub use crate::blueprint::kueue::{KUEUE_TOPOLOGY_SINCE, KUEUE_V1BETA2_SINCE, KueueVersion, parse_kueue_version};

/// The Kueue API toolkit writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum KueueApi {
    /// `kueue.x-k8s.io/v1beta1`: ClusterQueue `spec.cohort`.
    V1beta1,
    /// `kueue.x-k8s.io/v1beta2`: ClusterQueue `spec.cohortName`.
    V1beta2,
}

impl KueueApi {
    /// The API of a Kueue release.
    #[must_use]
    pub fn of(version: KueueVersion) -> Self {
        if version >= KUEUE_V1BETA2_SINCE { Self::V1beta2 } else { Self::V1beta1 }
    }

    /// `apiVersion` of its objects.
    #[must_use]
    pub const fn api_version(self) -> &'static str {
        match self {
            Self::V1beta1 => "kueue.x-k8s.io/v1beta1",
            Self::V1beta2 => "kueue.x-k8s.io/v1beta2",
        }
    }

    /// The version alone (`v1beta2`), as the CRDs name it.
    #[must_use]
    pub const fn version(self) -> &'static str {
        match self {
            Self::V1beta1 => "v1beta1",
            Self::V1beta2 => "v1beta2",
        }
    }

    /// The ClusterQueue field naming its cohort.
    #[must_use]
    pub const fn cohort_field(self) -> &'static str {
        match self {
            Self::V1beta1 => "cohort",
            Self::V1beta2 => "cohortName",
        }
    }
}

/// One GPU model's nodes: a ResourceFlavor.
#[derive(Debug, Clone, Serialize)]
pub struct Flavor {
    /// Flavor name: the GPU model (`h100`).
    pub name: String,
    /// The model.
    pub gpu: &'static GpuModel,
    /// Indexes of its nodes in [`Model::nodes`].
    pub nodes: Vec<usize>,
    /// Physical GPUs.
    pub gpus: u64,
    /// Logical CPUs of its nodes (`None`: a group does not declare its CPUs).
    pub cpus: Option<u64>,
    /// Memory of its nodes in MiB (`None`: a group does not declare it).
    pub memory_mib: Option<u64>,
}

/// A device resource pods request, and how many a physical GPU provides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceResource {
    /// `nvidia.com/gpu`, or `nvidia.com/mig-1g.10gb` under mixed MIG.
    pub name: String,
    /// Units per GPU: 1, the time-slicing replicas, or MIG instances of the profile.
    pub per_gpu: u64,
}

/// The resources the device plugin advertises per GPU under `sharing`.
#[must_use]
pub fn device_resources(sharing: &GpuSharing) -> Vec<DeviceResource> {
    let whole = |per_gpu: u64| vec![DeviceResource { name: GPU_RESOURCE.to_owned(), per_gpu }];
    match sharing.mode {
        GpuSharingMode::None => whole(1),
        GpuSharingMode::Shard | GpuSharingMode::Mps => whole(u64::from(sharing.per_gpu.unwrap_or(1).max(1))),
        GpuSharingMode::Mig => {
            let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
            for profile in &sharing.mig_profiles {
                *counts.entry(profile.as_str()).or_default() += 1;
            }
            if counts.len() == 1 {
                // `single` strategy: every slice is advertised as a whole `nvidia.com/gpu`.
                whole(sharing.mig_profiles.len() as u64)
            } else {
                counts
                    .into_iter()
                    .map(|(profile, per_gpu)| DeviceResource { name: format!("nvidia.com/mig-{profile}"), per_gpu })
                    .collect()
            }
        }
    }
}

/// One tenant's nominal quota on one flavor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlavorQuota {
    /// Flavor name.
    pub flavor: String,
    /// Guaranteed physical GPUs on this flavor.
    pub gpus: u64,
    /// Guaranteed CPUs, in proportion to the GPUs (`None`: not declared).
    pub cpus: Option<u64>,
    /// Guaranteed memory in MiB, in proportion (`None`: not declared).
    pub memory_mib: Option<u64>,
    /// Physical GPUs it may borrow on top (`0`: none); the rest of the flavor.
    pub borrow_gpus: u64,
}

/// A tenant as Kueue sees it.
#[derive(Debug, Clone, Serialize)]
pub struct TenantQueue {
    /// Tenant name: namespace, ClusterQueue, LocalQueue and priority class name.
    pub name: String,
    /// Priority of its workloads (`WorkloadPriorityClass` value).
    pub priority: u32,
    /// Its share of each flavor, in flavor order.
    pub quotas: Vec<FlavorQuota>,
}

/// Topology labels of one GPU node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeLabels {
    /// Node name.
    pub node: String,
    /// Label → value, sorted.
    pub labels: BTreeMap<String, String>,
}

/// The cluster as Kubernetes, Kueue and the GPU Operator see it.
#[derive(Debug, Clone, Serialize)]
pub struct KubeModel {
    /// The blueprint's settings.
    pub settings: Kubernetes,
    /// Kueue API written.
    pub kueue: KueueApi,
    /// Cohort name.
    pub cohort: String,
    /// GPU flavors, in blueprint order of their first group.
    pub flavors: Vec<Flavor>,
    /// Device resources per GPU.
    pub devices: Vec<DeviceResource>,
    /// Tenants, in blueprint order.
    pub tenants: Vec<TenantQueue>,
    /// Topology levels, coarsest first, ending with the host name; empty without
    /// topology-aware scheduling.
    pub topology_levels: Vec<&'static str>,
    /// Labels of every GPU node.
    pub nodes: Vec<NodeLabels>,
}

/// The Kubernetes view of `model`; `None` unless the scheduler is Kubernetes.
#[must_use]
pub fn expand(model: &Model) -> Option<KubeModel> {
    let scheduler = &model.blueprint.scheduler;
    if scheduler.kind != SchedulerKind::Kubernetes {
        return None;
    }
    let settings = scheduler.kubernetes.clone()?;
    let kueue = KueueApi::of(parse_kueue_version(&settings.kueue_version).unwrap_or(KUEUE_V1BETA2_SINCE));
    let flavors = flavors(model);
    let three_tier = model.fabric.sizing.tiers >= 3;
    let topology_levels = if settings.topology_aware {
        let mut levels = Vec::new();
        if three_tier {
            levels.push(SUPERPOD_LABEL);
        }
        levels.push(SU_LABEL);
        // A rack's trays talk over NVLink: the level below the scalable unit.
        if !model.nvlink_domains.is_empty() {
            levels.push(NVLINK_DOMAIN_LABEL);
        }
        levels.push(HOSTNAME_LABEL);
        levels
    } else {
        Vec::new()
    };
    let domain_of = super::nvlink::domain_of(&model.nvlink_domains);
    let nodes = flavors
        .iter()
        .flat_map(|flavor| flavor.nodes.iter().map(move |&index| (flavor, index)))
        .map(|(flavor, index)| {
            let domain = domain_of.get(&index).map(|&domain| model.nvlink_domains[domain].name.as_str());
            node_labels(model, flavor, &model.nodes[index], three_tier, domain)
        })
        .collect();
    let tenants = tenant_queues(model, &flavors);
    Some(KubeModel {
        cohort: settings.cohort.clone().unwrap_or_else(|| model.name.clone()),
        devices: device_resources(&settings.gpu_sharing),
        settings,
        kueue,
        flavors,
        tenants,
        topology_levels,
        nodes,
    })
}

fn flavors(model: &Model) -> Vec<Flavor> {
    let mut flavors: Vec<Flavor> = Vec::new();
    for (index, group) in model.groups.iter().enumerate() {
        let Some(gpu) = group.gpu.filter(|_| group.has_role(Role::Compute) && group.gpus_per_node > 0) else {
            continue;
        };
        let schema = &model.blueprint.node_groups[index];
        let count = group.nodes.len() as u64;
        let cpus = schema.cpu.map(|cpu| {
            u64::from(cpu.sockets) * u64::from(cpu.cores_per_socket) * u64::from(cpu.threads_per_core) * count
        });
        let memory = schema.memory_gib.map(|gib| u64::from(gib) * 1024 * count);
        if !flavors.iter().any(|flavor| flavor.name == gpu.name) {
            flavors.push(Flavor {
                name: gpu.name.to_owned(),
                gpu,
                nodes: Vec::new(),
                gpus: 0,
                cpus: Some(0),
                memory_mib: Some(0),
            });
        }
        let Some(flavor) = flavors.iter_mut().find(|flavor| flavor.name == gpu.name) else { continue };
        flavor.nodes.extend(group.nodes.clone());
        flavor.gpus += u64::from(group.gpus_per_node) * count;
        flavor.cpus = flavor.cpus.zip(cpus).map(|(a, b)| a + b);
        flavor.memory_mib = flavor.memory_mib.zip(memory).map(|(a, b)| a + b);
    }
    flavors
}

/// Splits `total` over `weights` in proportion, whole units, the remainders to the
/// largest fractions (ties: the earlier weight), so the parts add up to `total`.
fn split(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u64 = weights.iter().sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<(u64, u64)> = weights
        .iter()
        .map(|&weight| {
            let product = u128::from(total) * u128::from(weight);
            ((product / u128::from(sum)) as u64, (product % u128::from(sum)) as u64)
        })
        .collect();
    let mut parts: Vec<u64> = exact.iter().map(|(whole, _)| *whole).collect();
    let mut left = total - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&index| std::cmp::Reverse(exact[index].1));
    for index in order {
        if left == 0 {
            break;
        }
        parts[index] += 1;
        left -= 1;
    }
    parts
}

/// `part` of `whole`, applied to `amount`, rounded down.
fn proportion(amount: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 { 0 } else { (u128::from(amount) * u128::from(part) / u128::from(whole)) as u64 }
}

fn tenant_queues(model: &Model, flavors: &[Flavor]) -> Vec<TenantQueue> {
    let weights: Vec<u64> = flavors.iter().map(|flavor| flavor.gpus).collect();
    model
        .tenants
        .iter()
        .map(|tenant| {
            let shares = split(u64::from(tenant.guaranteed_gpus), &weights);
            let quotas = flavors
                .iter()
                .zip(shares)
                .map(|(flavor, gpus)| {
                    let gpus = gpus.min(flavor.gpus);
                    FlavorQuota {
                        flavor: flavor.name.clone(),
                        gpus,
                        cpus: flavor.cpus.map(|cpus| proportion(cpus, gpus, flavor.gpus)),
                        memory_mib: flavor.memory_mib.map(|memory| proportion(memory, gpus, flavor.gpus)),
                        borrow_gpus: if tenant.borrow { flavor.gpus - gpus } else { 0 },
                    }
                })
                .collect();
            TenantQueue { name: tenant.name.clone(), priority: tenant.priority, quotas }
        })
        .collect()
}

fn node_labels(model: &Model, flavor: &Flavor, node: &Node, three_tier: bool, domain: Option<&str>) -> NodeLabels {
    let mut labels = BTreeMap::new();
    labels.insert(GPU_MODEL_LABEL.to_owned(), flavor.name.clone());
    if let Some(domain) = domain {
        labels.insert(NVLINK_DOMAIN_LABEL.to_owned(), domain.to_owned());
    }
    if let Some(leaf) = node.rails.first().and_then(|port| model.fabric.switches.get(port.leaf)) {
        labels.insert(SU_LABEL.to_owned(), format!("su{}", node.su));
        labels.insert(LEAF_LABEL.to_owned(), leaf.name.clone());
        if three_tier && let Some(pod) = leaf.pod {
            labels.insert(SUPERPOD_LABEL.to_owned(), format!("pod{pod}"));
        }
    }
    NodeLabels { node: node.name.clone(), labels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kueue_versions_pick_the_api() {
        assert_eq!(parse_kueue_version("0.15.0"), Some((0, 15, 0)));
        assert_eq!(parse_kueue_version("v0.14"), Some((0, 14, 0)));
        assert_eq!(parse_kueue_version("0.x"), None);
        assert_eq!(parse_kueue_version("0.15.0.1"), None);
        assert_eq!(KueueApi::of((0, 14, 3)), KueueApi::V1beta1);
        assert_eq!(KueueApi::of((0, 15, 0)).cohort_field(), "cohortName");
        assert_eq!(KueueApi::of((0, 13, 0)).cohort_field(), "cohort");
    }

    #[test]
    fn nvlink_domains_label_their_nodes_and_add_a_topology_level() {
        let text = std::fs::read_to_string("blueprints/h100-kubernetes.yaml").expect("read");
        let with_domain = format!("{text}\nnvlink_domains:\n  - {{ name: rack1, nodes: \"dgx[01-02]\" }}\n");
        let kube = |text: &str| {
            let loaded =
                crate::blueprint::load::load_text(std::path::Path::new("k.yaml"), text.to_owned()).expect("loads");
            expand(&crate::model::expand(&loaded.blueprint).expect("expands")).expect("kubernetes")
        };
        let plain = kube(&text);
        assert!(!plain.topology_levels.contains(&NVLINK_DOMAIN_LABEL));
        assert!(plain.nodes.iter().all(|node| !node.labels.contains_key(NVLINK_DOMAIN_LABEL)));
        let racked = kube(&with_domain);
        assert_eq!(racked.topology_levels, [SU_LABEL, NVLINK_DOMAIN_LABEL, HOSTNAME_LABEL]);
        let domains: Vec<Option<&str>> =
            racked.nodes.iter().map(|node| node.labels.get(NVLINK_DOMAIN_LABEL).map(String::as_str)).collect();
        assert_eq!(domains, [Some("rack1"), Some("rack1"), None, None]);
    }

    #[test]
    fn guarantees_split_over_flavors_add_up() {
        assert_eq!(split(16, &[32]), vec![16]);
        assert_eq!(split(10, &[16, 16, 32]), vec![3, 2, 5]);
        assert_eq!(split(7, &[0, 8]), vec![0, 7]);
        assert_eq!(split(5, &[]), Vec::<u64>::new());
        for total in 0..40 {
            assert_eq!(split(total, &[24, 8, 56]).iter().sum::<u64>(), total);
        }
    }

    #[test]
    fn sharing_multiplies_or_splits_the_gpu_resource() {
        let sharing = |mode, per_gpu, profiles: &[&str]| GpuSharing {
            mode,
            per_gpu,
            mig_profiles: profiles.iter().map(|p| (*p).to_owned()).collect(),
        };
        assert_eq!(device_resources(&sharing(GpuSharingMode::None, None, &[]))[0].per_gpu, 1);
        assert_eq!(device_resources(&sharing(GpuSharingMode::Shard, Some(4), &[]))[0].per_gpu, 4);
        let single = device_resources(&sharing(GpuSharingMode::Mig, None, &["1g.10gb"; 7]));
        assert_eq!(single, vec![DeviceResource { name: GPU_RESOURCE.into(), per_gpu: 7 }]);
        let mixed = device_resources(&sharing(GpuSharingMode::Mig, None, &["3g.40gb", "1g.10gb", "1g.10gb"]));
        assert_eq!(
            mixed,
            vec![
                DeviceResource { name: "nvidia.com/mig-1g.10gb".into(), per_gpu: 2 },
                DeviceResource { name: "nvidia.com/mig-3g.40gb".into(), per_gpu: 1 },
            ]
        );
    }
}
