//! Thresholds derived from the model: expected counts and bandwidths computed from
//! what the blueprint says the cluster is, each with the formula as provenance.
//!
//! Stage: validate. Input: the model and the nodes or switch of one subject.
//! Output: a number and the sentence that explains it (`8 rails x 400 Gb/s / 8 x
//! 0.8 efficiency`), which the results record as a `model` threshold source.

use crate::blueprint::schema::{Role, Tier};
use crate::model::{Filesystem, Model, Node};

/// NCCL efficiency when the blueprint gives none (`acceptance.nccl_efficiency`).
pub const DEFAULT_NCCL_EFFICIENCY: f64 = 0.8;

/// Fraction of the port speed one RDMA write stream must reach: NVIDIA's NGC-Ready
/// multinode certification (`ngc_rdma_test.sh`) requires at least 90 %.
pub const RDMA_FRACTION: f64 = 0.9;

/// Every derived threshold, with what it computes.
pub const DERIVED: &[(&str, &str)] = &[
    ("gpus_per_node", "GPUs per node of the subject's node group"),
    ("gpu_count", "GPUs on all the subject's nodes"),
    ("node_count", "nodes selected for the validator"),
    ("rails_per_node", "compute-fabric NICs of the subject's node"),
    ("host_mtu", "MTU of the subject's rail interfaces"),
    ("link_speed_gbps", "compute-fabric link speed, Gb/s"),
    ("rdma_bandwidth_gbps", "90 % of the link speed, Gb/s (NGC-Ready multinode certification)"),
    ("nccl_busbw_inter_node", "rails x link speed / 8 x NCCL efficiency, GB/s"),
    ("nccl_busbw_intra_node", "single-node all_reduce bus bandwidth for the GPU model, GB/s"),
    ("nvlinks_per_gpu", "NVLink links per GPU of the GPU model"),
    ("bgp_sessions", "fabric ports of the switch: one BGP session each"),
    ("storage_read_mbps", "sequential read floor of node-local scratch, MB/s"),
    ("storage_write_mbps", "sequential write floor of node-local scratch, MB/s"),
    ("shared_read_gb_per_s", "aggregate read of the shared filesystem, GB/s: its `expected.read_gb_per_s`, or a floor"),
    (
        "shared_write_gb_per_s",
        "aggregate write of the shared filesystem, GB/s: its `expected.write_gb_per_s`, or a floor",
    ),
    ("shared_create_ops", "file creations per second on the shared filesystem: its `expected.create_ops`, or a floor"),
    ("shared_stat_ops", "file stats per second on the shared filesystem: its `expected.stat_ops`, or a floor"),
    ("shared_remove_ops", "file removals per second on the shared filesystem: its `expected.remove_ops`, or a floor"),
];

/// Single-node `all_reduce_perf` bus bandwidth (GB/s) that 8 GPUs of a model must reach,
/// and where the number comes from (`validators.md` §7).
const INTRA_NODE_BUSBW: &[(&str, f64, &str)] = &[
    ("h100", 460.0, "AzNHC ND96isr H100 v5 (8x H100 SXM): check_nccl_allreduce 460 GB/s at 16 GiB"),
    ("h200", 431.0, "AzNHC ND96isr H200 v5 (8x H200): check_nccl_allreduce 431 GB/s at 16 GiB"),
    ("a100", 228.0, "AzNHC ND96amsr A100 v4 (8x A100 80GB): check_nccl_allreduce 228 GB/s at 16 GiB"),
    ("a100-40gb", 228.0, "AzNHC A100 threshold, same NVLink 3 fabric (OCI 8x A100 40GB measured 232 GB/s)"),
];

/// NVLink links per GPU, from NVIDIA's data sheets (H100/H200 SXM: 18 NVLink 4 links,
/// A100 SXM: 12 NVLink 3 links, H100 NVL: 12 over its bridges, Blackwell: 18 NVLink 5).
const NVLINKS_PER_GPU: &[(&str, u32)] = &[
    ("a100", 12),
    ("a100-40gb", 12),
    ("h100", 18),
    ("h100-nvl", 12),
    ("h200", 18),
    ("h20", 18),
    ("b200", 18),
    ("gb200", 18),
    ("b300", 18),
];

/// Scratch floors per local NVMe drive, MB/s: about a sixth of a PCIe Gen4 data-centre
/// drive's sequential rate, so a drive that fell back to SATA-class speed, a RAID
/// member that is missing or a mount on the wrong device fails.
const NVME_READ_MBPS: f64 = 1000.0;
const NVME_WRITE_MBPS: f64 = 500.0;
/// Floor without declared NVMe: any working disk.
const DISK_MBPS: f64 = 100.0;

/// Shared-filesystem bandwidth floor without `expected`, GB/s: above what one 1 GbE
/// link carries (0.125 GB/s), so a filesystem reached over the management network, a
/// dead storage link or a hung server fails, and any working NFS or Lustre passes.
const SHARED_GB_PER_S: f64 = 0.2;
/// Metadata floors without `expected`, ops/s: a fraction of what one NFS client does
/// with `sync` exports (hundreds of creates, thousands of stats per second); the
/// recorded 2-node GPFS run does 632 creates, 28,997 stats and 601 removals per second.
const SHARED_CREATE_OPS: f64 = 100.0;
const SHARED_STAT_OPS: f64 = 1000.0;
const SHARED_REMOVE_OPS: f64 = 100.0;

/// The shared filesystem the storage benchmarks (`storage-ior`, `storage-mdtest`) run
/// on, as `cluster.shared` in templates: of the filesystems a compute group mounts, the
/// first of tier `scratch`, else of tier `shared`, else of tier `home` — the tier jobs
/// write their checkpoints to comes first.
#[must_use]
pub fn benchmark_filesystem(model: &Model) -> Option<&Filesystem> {
    let mounted = |fs: &&Filesystem| fs.client_groups.iter().any(|&group| model.groups[group].has_role(Role::Compute));
    [Tier::Scratch, Tier::Shared, Tier::Home]
        .into_iter()
        .find_map(|tier| model.filesystems.iter().filter(mounted).find(|fs| fs.tier == tier))
}

/// The shared-filesystem limit `name`: the blueprint's `expected` value when it
/// declares one, else the documented floor.
fn shared(name: &str, model: &Model) -> Result<Derived, String> {
    let fs = benchmark_filesystem(model).ok_or("no shared filesystem is mounted by the compute nodes")?;
    let index = model.filesystems.iter().position(|other| std::ptr::eq(other, fs)).unwrap_or_default();
    let expected = fs.expected.unwrap_or_default();
    let (key, declared, floor, unit, what) = match name {
        "shared_read_gb_per_s" => ("read_gb_per_s", expected.read_gb_per_s, SHARED_GB_PER_S, "GB/s", "read"),
        "shared_write_gb_per_s" => ("write_gb_per_s", expected.write_gb_per_s, SHARED_GB_PER_S, "GB/s", "write"),
        "shared_create_ops" => ("create_ops", expected.create_ops, SHARED_CREATE_OPS, "ops/s", "file creation"),
        "shared_stat_ops" => ("stat_ops", expected.stat_ops, SHARED_STAT_OPS, "ops/s", "file stat"),
        _ => ("remove_ops", expected.remove_ops, SHARED_REMOVE_OPS, "ops/s", "file removal"),
    };
    Ok(match declared {
        Some(value) => Derived {
            value,
            detail: format!("`storage.filesystems[{index}].expected.{key}` of `{}`: {value} {unit} {what}", fs.name),
        },
        None => Derived {
            value: floor,
            detail: format!(
                "`{}` declares no `expected.{key}`: {floor} {unit} {what} floor of any working shared filesystem",
                fs.name
            ),
        },
    })
}

/// What a derived threshold is computed from.
#[derive(Debug, Clone, Copy)]
pub struct DeriveInput<'a> {
    /// The cluster.
    pub model: &'a Model,
    /// The subject's nodes (one node, a pair, or every selected node for the cluster).
    pub nodes: &'a [&'a Node],
    /// The subject's switch, an index into the fabric's switches.
    pub switch: Option<usize>,
    /// Nodes selected for the validator.
    pub selected: usize,
}

/// A derived limit and how it was computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// The limit.
    pub value: f64,
    /// The formula with its numbers, for the results' provenance.
    pub detail: String,
}

/// What `name` computes, if it exists.
#[must_use]
pub fn describe(name: &str) -> Option<&'static str> {
    DERIVED.iter().find(|(known, _)| *known == name).map(|(_, description)| *description)
}

/// Every derived name.
pub fn names() -> impl Iterator<Item = &'static str> + Clone {
    DERIVED.iter().map(|(name, _)| *name)
}

/// Computes `name` for a subject.
///
/// # Errors
/// Why it cannot be computed for this subject (no GPU model with a known figure, no
/// switch…): the runner then records the measurement without a limit, as a warning.
pub fn derive(name: &str, input: &DeriveInput<'_>) -> Result<Derived, String> {
    let model = input.model;
    let first = input.nodes.first().copied();
    let group = first.map(|node| &model.groups[node.group]);
    let efficiency = model.blueprint.acceptance.nccl_efficiency.unwrap_or(DEFAULT_NCCL_EFFICIENCY);
    let link = model.fabric.link_speed_gbps;
    match name {
        "gpus_per_node" => {
            let group = group.ok_or("the subject has no node")?;
            let gpu = group.gpu.map_or("GPU", |gpu| gpu.name);
            Ok(Derived {
                value: f64::from(group.gpus_per_node),
                detail: format!("node group `{}`: {} x {gpu} per node", group.name, group.gpus_per_node),
            })
        }
        "gpu_count" => {
            let total: u64 = input.nodes.iter().map(|node| u64::from(model.groups[node.group].gpus_per_node)).sum();
            Ok(Derived { value: total as f64, detail: format!("{total} GPUs on {} node(s)", input.nodes.len()) })
        }
        "node_count" => {
            Ok(Derived { value: input.selected as f64, detail: format!("{} node(s) selected", input.selected) })
        }
        "rails_per_node" => {
            let node = first.ok_or("the subject has no node")?;
            Ok(Derived {
                value: node.rails.len() as f64,
                detail: format!(
                    "`{}` has {} rail NIC(s) in node group `{}`",
                    node.name,
                    node.rails.len(),
                    model.groups[node.group].name
                ),
            })
        }
        "host_mtu" => {
            let mtu = first.and_then(|node| node.rails.first()).map_or(model.fabric.host_mtu, |rail| rail.mtu);
            Ok(Derived { value: f64::from(mtu), detail: format!("rail host MTU {mtu}") })
        }
        "link_speed_gbps" => Ok(Derived { value: f64::from(link), detail: format!("fabric link speed {link} Gb/s") }),
        "rdma_bandwidth_gbps" => Ok(Derived {
            value: f64::from(link) * RDMA_FRACTION,
            detail: format!(
                "{link} Gb/s link x {RDMA_FRACTION} (NGC-Ready multinode certification: >= 90 % of port speed)"
            ),
        }),
        "nccl_busbw_inter_node" => {
            let rails = input.nodes.iter().map(|node| node.rails.len()).min().unwrap_or(0);
            if rails == 0 {
                return Err("the subject's nodes have no compute-fabric NICs".to_owned());
            }
            let value = rails as f64 * f64::from(link) / 8.0 * efficiency;
            Ok(Derived { value, detail: format!("{rails} rails x {link} Gb/s / 8 x {efficiency} efficiency") })
        }
        "nccl_busbw_intra_node" => {
            let gpu = group.and_then(|group| group.gpu).ok_or("the subject's node has no GPUs")?;
            if let Some((_, value, reference)) = INTRA_NODE_BUSBW.iter().find(|(known, _, _)| *known == gpu.name) {
                return Ok(Derived { value: *value, detail: (*reference).to_owned() });
            }
            if gpu.nvlink_gbps == 0 {
                return Err(format!("{} GPUs have no NVLink and no reference figure", gpu.name));
            }
            let value = f64::from(gpu.nvlink_gbps) / 2.0 * efficiency;
            Ok(Derived {
                value,
                detail: format!("{} NVLink {} GB/s both ways / 2 x {efficiency} efficiency", gpu.name, gpu.nvlink_gbps),
            })
        }
        "nvlinks_per_gpu" => {
            let gpu = group.and_then(|group| group.gpu).ok_or("the subject's node has no GPUs")?;
            let (_, links) = NVLINKS_PER_GPU
                .iter()
                .find(|(known, _)| *known == gpu.name)
                .ok_or_else(|| format!("{} GPUs have no NVLink figure", gpu.name))?;
            Ok(Derived {
                value: f64::from(*links),
                detail: format!("{}: {links} NVLink links per GPU (data sheet)", gpu.name),
            })
        }
        "bgp_sessions" => {
            let index = input.switch.ok_or("the subject is not a switch")?;
            let switch = model.fabric.switches.get(index).ok_or("the switch is not in the model")?;
            let ports = model.fabric.ports_of(index).len();
            Ok(Derived {
                value: ports as f64,
                detail: format!("`{}` has {ports} fabric port(s) in the cabling plan", switch.name),
            })
        }
        "storage_read_mbps" | "storage_write_mbps" => {
            let node = first.ok_or("the subject has no node")?;
            let read = name == "storage_read_mbps";
            let drives = model
                .blueprint
                .node_groups
                .get(node.group)
                .and_then(|group| group.local_nvme)
                .map_or(0, |nvme| nvme.count);
            if drives == 0 {
                return Ok(Derived {
                    value: DISK_MBPS,
                    detail: format!("no local NVMe declared: {DISK_MBPS} MB/s, any working disk"),
                });
            }
            let per_drive = if read { NVME_READ_MBPS } else { NVME_WRITE_MBPS };
            Ok(Derived {
                value: f64::from(drives) * per_drive,
                detail: format!(
                    "{drives} local NVMe x {per_drive} MB/s sequential {} floor",
                    if read { "read" } else { "write" }
                ),
            })
        }
        "shared_read_gb_per_s"
        | "shared_write_gb_per_s"
        | "shared_create_ops"
        | "shared_stat_ops"
        | "shared_remove_ops" => shared(name, model),
        other => Err(format!("unknown derived threshold `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blueprint;

    fn model(path: &str) -> Model {
        let loaded = blueprint::load(std::path::Path::new(path)).expect("blueprint loads");
        crate::model::expand(&loaded.blueprint).expect("expands")
    }

    fn value(model: &Model, name: &str, node: &str) -> Derived {
        let node = model.nodes.iter().find(|n| n.name == node).expect("node");
        derive(name, &DeriveInput { model, nodes: &[node], switch: None, selected: 1 }).expect("derives")
    }

    #[test]
    fn lab_thresholds() {
        let lab = model("blueprints/lab.yaml");
        // 2 rails x 200 Gb/s = 400 Gb/s = 50 GB/s, x 0.8 = 40 GB/s.
        let inter = value(&lab, "nccl_busbw_inter_node", "node01");
        assert!((inter.value - 40.0).abs() < 1e-9, "{inter:?}");
        assert_eq!(inter.detail, "2 rails x 200 Gb/s / 8 x 0.8 efficiency");
        assert!((value(&lab, "nccl_busbw_intra_node", "node01").value - 460.0).abs() < 1e-9);
        assert!((value(&lab, "gpus_per_node", "node01").value - 4.0).abs() < 1e-9);
        assert!((value(&lab, "rdma_bandwidth_gbps", "node01").value - 180.0).abs() < 1e-9);
        assert!((value(&lab, "host_mtu", "node01").value - 9000.0).abs() < 1e-9);
        assert!((value(&lab, "nvlinks_per_gpu", "node01").value - 18.0).abs() < 1e-9);
        // No local NVMe in the lab: the any-disk floor.
        assert!((value(&lab, "storage_read_mbps", "node01").value - 100.0).abs() < 1e-9);
        // leaf0 has one uplink; spine0 one port to each of the two leaves.
        let at = |switch: &str| {
            let index = lab.fabric.switches.iter().position(|s| s.name == switch).expect("switch");
            derive("bgp_sessions", &DeriveInput { model: &lab, nodes: &[], switch: Some(index), selected: 0 })
                .expect("derives")
                .value
        };
        assert!((at("leaf0") - 1.0).abs() < 1e-9 && (at("spine0") - 2.0).abs() < 1e-9);
        assert!(derive("gpus_per_node", &DeriveInput { model: &lab, nodes: &[], switch: None, selected: 0 }).is_err());
    }

    #[test]
    fn superpod_thresholds() {
        let spod = model("blueprints/h100-superpod-1su.yaml");
        // 8 rails x 400 Gb/s = 3200 Gb/s = 400 GB/s, x 0.8 (default) = 320 GB/s.
        assert!((value(&spod, "nccl_busbw_inter_node", "dgx001").value - 320.0).abs() < 1e-9);
        assert!((value(&spod, "nccl_busbw_intra_node", "dgx001").value - 460.0).abs() < 1e-9);
        assert!((value(&spod, "gpus_per_node", "dgx031").value - 8.0).abs() < 1e-9);
        assert!((value(&spod, "rdma_bandwidth_gbps", "dgx001").value - 360.0).abs() < 1e-9);
        assert!((value(&spod, "host_mtu", "dgx001").value - 4096.0).abs() < 1e-9);
        // 8 local NVMe: 8 x 1000 MB/s read, 8 x 500 MB/s write.
        assert!((value(&spod, "storage_read_mbps", "dgx001").value - 8000.0).abs() < 1e-9);
        assert!((value(&spod, "storage_write_mbps", "dgx001").value - 4000.0).abs() < 1e-9);
        assert!(
            derive(
                "nccl_busbw_intra_node",
                &DeriveInput { model: &spod, nodes: &[&spod.nodes[0]], switch: None, selected: 1 }
            )
            .is_err(),
            "mgmt01 has no GPUs"
        );
    }

    #[test]
    fn h200_thresholds() {
        let h200 = model("blueprints/h200-roce-64.yaml");
        // 8 rails x 400 Gb/s / 8 x 0.8 = 320 GB/s; intra-node from the H200 figure.
        assert!((value(&h200, "nccl_busbw_inter_node", "gpu001").value - 320.0).abs() < 1e-9);
        let intra = value(&h200, "nccl_busbw_intra_node", "gpu064");
        assert!((intra.value - 431.0).abs() < 1e-9 && intra.detail.contains("H200"), "{intra:?}");
        assert!((value(&h200, "host_mtu", "gpu001").value - 9000.0).abs() < 1e-9);
        let nodes: Vec<&Node> = h200.nodes.iter().filter(|n| n.name.starts_with("gpu")).collect();
        let total = derive("gpu_count", &DeriveInput { model: &h200, nodes: &nodes, switch: None, selected: 64 })
            .expect("derives");
        assert!((total.value - 512.0).abs() < 1e-9);
    }

    #[test]
    // The limits are copied, not computed: they compare exactly.
    #[allow(clippy::float_cmp)]
    fn shared_filesystem_limits_come_from_expected_or_a_floor() {
        // `data` (tier shared) is chosen over `home` (tier home), both mounted by the GPU nodes.
        let h200 = model("blueprints/h200-roce-64.yaml");
        let data = h200.filesystems.iter().position(|fs| fs.name == "data").expect("the h200 blueprint has /data");
        let at = |model: &Model, name: &str| {
            derive(name, &DeriveInput { model, nodes: &[], switch: None, selected: 0 }).expect("derives")
        };
        let floor = at(&h200, "shared_write_gb_per_s");
        assert_eq!(floor.value, SHARED_GB_PER_S);
        assert!(floor.detail.contains("declares no `expected.write_gb_per_s`"), "{floor:?}");
        assert!(floor.detail.starts_with("`data` declares"), "{floor:?}");
        assert_eq!(at(&h200, "shared_stat_ops").value, SHARED_STAT_OPS);
        let mut expecting = h200.clone();
        expecting.filesystems[data].expected = Some(crate::blueprint::schema::FilesystemExpectation {
            read_gb_per_s: Some(12.5),
            create_ops: Some(4000.0),
            ..Default::default()
        });
        let read = at(&expecting, "shared_read_gb_per_s");
        assert_eq!(read.value, 12.5);
        assert_eq!(
            read.detail,
            format!("`storage.filesystems[{data}].expected.read_gb_per_s` of `data`: 12.5 GB/s read")
        );
        assert_eq!(at(&expecting, "shared_create_ops").value, 4000.0);
        assert_eq!(at(&expecting, "shared_write_gb_per_s").value, SHARED_GB_PER_S, "a missing key keeps its floor");
        let bare = model("blueprints/lab.yaml");
        let none = derive("shared_read_gb_per_s", &DeriveInput { model: &bare, nodes: &[], switch: None, selected: 0 });
        assert_eq!(none.expect_err("no filesystem"), "no shared filesystem is mounted by the compute nodes");
    }

    #[test]
    fn every_derived_name_is_described_once() {
        let mut seen = std::collections::BTreeSet::new();
        for name in names() {
            assert!(seen.insert(name), "{name} twice");
            assert!(describe(name).is_some());
        }
        assert!(describe("nope").is_none());
    }
}
