//! Slurm as the cluster needs it: every value of slurm.conf, gres.conf,
//! topology.conf, cgroup.conf and slurmdbd.conf, the hosts that run each daemon,
//! and the accounting objects (QOS, accounts, users) of the tenants.
//!
//! Stage: expand. Input: [`Model`]. Output: [`SlurmConfig`], which the templates
//! under `templates/slurm/` only lay out.
//!
//! Every key produced is valid on Slurm 22.05 (Debian 12) and on current releases
//! (`fabric_scheduler.md` §8): the select, priority and topology plugins are always
//! explicit because their defaults changed in 23.11, no `*/none` value is written
//! (those plugins were removed in 23.11; the key is left out instead), and no key
//! newer than 22.05 appears. Nodes and partitions are one line per group, never per
//! node, so slurm.conf stays a few kilobytes at 32,768 nodes.

use std::collections::BTreeMap;

use serde::Serialize;
use thiserror::Error;

use super::{Group, Model, hostlist};
use crate::blueprint::release::{SlurmRelease, parse_slurm_release};
use crate::blueprint::schema::{self, GpuSharingMode, PreemptMode, Role, SchedulerKind, SlurmTopology};

/// Memory kept back from Slurm on every node, in percent, for the OS and daemons.
pub const MEMORY_RESERVE_PERCENT: u64 = 5;

/// MPS shares per GPU when the blueprint does not say (Slurm's documented convention).
pub const DEFAULT_MPS_PER_GPU: u32 = 100;

/// Name of the preemptible QOS every borrowing tenant may use.
pub const BORROW_QOS: &str = "borrow";

/// Name of the topology switch above every scalable unit.
pub const TOP_SWITCH: &str = "fabric";

/// Name of the topology switch for compute nodes without compute-fabric NICs.
pub const OFF_FABRIC_SWITCH: &str = "nofabric";

/// First release with `topology/block` (tag `slurm-23-11-0-0rc1` adds the plugin).
pub const BLOCK_TOPOLOGY_SINCE: SlurmRelease = (23, 11);
/// First release whose topology.conf takes `BlockSizes` (24.05 RELEASE_NOTES: "Replaced
/// the BlockLevels with BlockSizes"), `--segment` and `switch/nvidia_imex`. 23.11 reads
/// neither `BlockSizes` nor blocks of unequal size.
pub const BLOCK_SIZES_SINCE: SlurmRelease = (24, 5);

/// What topology.conf says of its lines when blocks are NVLink domains.
const NVLINK_TOPOLOGY_TITLE: &str = "One block per NVLink domain: its nodes' GPUs share the rack's NVLink switches.";
/// What topology.conf says of its lines otherwise.
const FABRIC_TOPOLOGY_TITLE: &str = "One switch per scalable unit: its nodes share every rail leaf.";

/// Why the Slurm configuration cannot be derived (run `toolkit lint` for located details).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SlurmError {
    /// `scheduler.kind` is `slurm` but `scheduler.slurm` is absent.
    #[error("`scheduler.kind` is `slurm` but `scheduler.slurm` is missing")]
    MissingSettings,
    /// No node group has the `controller` role.
    #[error("no node group has the `controller` role: slurmctld has nowhere to run")]
    NoController,
    /// A partition names a group that does not exist.
    #[error("partition `{partition}` names node group `{group}`, which does not exist")]
    UnknownGroup {
        /// Partition.
        partition: String,
        /// The missing group.
        group: String,
    },
    /// Tenants are declared but accounting is off: QOS and quotas live in slurmdbd.
    #[error("tenants need `scheduler.slurm.accounting: true` (QOS and GPU quotas live in slurmdbd)")]
    TenantsNeedAccounting,
    /// Tenants are declared but no compute group has GPUs to guarantee.
    #[error("tenants are guaranteed GPUs, but no compute node group has GPUs")]
    TenantsNeedGpus,
    /// `preempt_mode: suspend` would keep borrowed GPUs allocated.
    #[error("`preempt_mode: suspend` does not release GPUs of preempted jobs; use `requeue` or `cancel`")]
    SuspendKeepsGpus,
    /// Shard sharing without a shard count.
    #[error("`gpu_sharing.mode: shard` needs `gpu_sharing.per_gpu` (shards per GPU)")]
    ShardCountMissing,
    /// MIG devices need ids that only exist on the nodes.
    #[error(
        "`gpu_sharing.mode: mig` is not rendered yet: MIG device files depend on GPU instance ids the driver assigns, \
         which must be read from each node (`nvidia-smi mig -lgi`)"
    )]
    MigNeedsDiscovery,
    /// An `extra` entry that would not be one `Key=Value` line.
    #[error("`scheduler.slurm.extra` entry `{key}` is not a single `Key=Value` line")]
    BadExtra {
        /// The key as written.
        key: String,
    },
}

/// One `Key=Value` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setting {
    /// Key as Slurm spells it.
    pub key: String,
    /// Value, verbatim.
    pub value: String,
}

impl Setting {
    fn new(key: &str, value: impl Into<String>) -> Self {
        Self { key: key.to_owned(), value: value.into() }
    }
}

/// A titled block of global slurm.conf settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Section {
    /// Comment above the block.
    pub title: &'static str,
    /// The settings, in order.
    pub settings: Vec<Setting>,
}

/// A `NodeName=` line: one per compute group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeLine {
    /// Hostlist of the group (`node[01-04]`).
    pub names: String,
    /// `SocketsPerBoard`.
    pub sockets: u32,
    /// `CoresPerSocket`.
    pub cores_per_socket: u32,
    /// `ThreadsPerCore`.
    pub threads_per_core: u32,
    /// `CPUs`: sockets × cores × threads.
    pub cpus: u32,
    /// `RealMemory` in MiB, after the reserve.
    pub real_memory: u64,
    /// `Gres=` items (`gpu:h100:8`, `shard:64`); empty without GPUs.
    pub gres: Vec<String>,
}

/// A `PartitionName=` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLine {
    /// Name.
    pub name: String,
    /// Hostlist of its groups' nodes.
    pub nodes: String,
    /// `Default=YES`.
    pub default: bool,
    /// `MaxTime`.
    pub max_time: String,
    /// `OverSubscribe`: `EXCLUSIVE` for exclusive partitions, else `NO`.
    pub over_subscribe: &'static str,
    /// `DefCpuPerGPU`, when every GPU group of the partition has at least one CPU per GPU.
    pub def_cpu_per_gpu: Option<u32>,
}

/// A gres.conf line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GresLine {
    /// `NodeName=` hostlist.
    pub nodes: String,
    /// `Name=`: `gpu`, `shard` or `mps`.
    pub name: &'static str,
    /// `Type=` (GPU model), for `gpu`.
    pub gres_type: Option<String>,
    /// `File=` device path or range.
    pub file: Option<String>,
    /// `Count=`, for `shard` and `mps`.
    pub count: Option<u64>,
    /// `Cores=`: logical core indexes of the socket the devices hang off.
    pub cores: Option<String>,
}

/// A topology.conf line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopologyLine {
    /// `SwitchName` (tree) or `BlockName` (block).
    pub keyword: &'static str,
    /// Switch or block name.
    pub name: String,
    /// `Nodes=` hostlist, for a leaf switch or block.
    pub nodes: Option<String>,
    /// `Switches=` hostlist, for a switch over switches.
    pub switches: Option<String>,
}

/// A QOS and what `sacctmgr modify qos … set` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Qos {
    /// Name.
    pub name: String,
    /// `Priority`.
    pub priority: u32,
    /// `GrpTRES`, e.g. `gres/gpu=8`.
    pub grp_tres: Option<String>,
    /// `Preempt`: QOS this one may preempt.
    pub preempt: Option<String>,
    /// `PreemptMode` (lowercase, as sacctmgr takes it).
    pub preempt_mode: Option<String>,
    /// `Flags`.
    pub flags: Option<String>,
}

/// An account (one per tenant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Account {
    /// Name.
    pub name: String,
    /// `Fairshare`, when the tenant sets one.
    pub fairshare: Option<u32>,
    /// QOS the account may use.
    pub qos: Vec<String>,
    /// `DefaultQOS`.
    pub default_qos: String,
}

/// A user of an account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    /// Unix user name.
    pub name: String,
    /// Account (also its default account).
    pub account: String,
}

/// What runs on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmHost {
    /// Host name.
    pub name: String,
    /// Runs slurmctld.
    pub controller: bool,
    /// Runs slurmdbd and MariaDB.
    pub database: bool,
    /// Runs slurmd.
    pub compute: bool,
}

/// The whole Slurm stack of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmConfig {
    /// `ClusterName`.
    pub cluster_name: String,
    /// The oldest Slurm release the files are written for, as the blueprint gives it.
    pub min_version: String,
    /// The host running slurmctld.
    pub controller: String,
    /// The host running slurmdbd and MariaDB, when accounting is on.
    pub database: Option<String>,
    /// Every host with a Slurm daemon or client, in model order.
    pub hosts: Vec<SlurmHost>,
    /// Global slurm.conf settings, with `extra` values already substituted.
    pub sections: Vec<Section>,
    /// `extra` entries whose keys are not among `sections`, appended at the end.
    pub extra: Vec<Setting>,
    /// `NodeName=` lines.
    pub nodes: Vec<NodeLine>,
    /// `PartitionName=` lines.
    pub partitions: Vec<PartitionLine>,
    /// gres.conf lines; empty when no node has GPUs.
    pub gres: Vec<GresLine>,
    /// topology.conf lines; empty when there is no topology plugin.
    pub topology: Vec<TopologyLine>,
    /// The comment above them.
    pub topology_title: &'static str,
    /// topology.conf `BlockSizes`: the planning base block size, in nodes (blocks of
    /// NVLink domains on Slurm 24.05 and later).
    pub block_sizes: Option<usize>,
    /// cgroup.conf settings.
    pub cgroup: Vec<Setting>,
    /// QOS in creation order (the borrow QOS first: others preempt it).
    pub qos: Vec<Qos>,
    /// Accounts, one per tenant.
    pub accounts: Vec<Account>,
    /// Users, with their accounts.
    pub users: Vec<User>,
}

impl SlurmConfig {
    /// Whether slurmdbd accounting is on.
    #[must_use]
    pub fn accounting(&self) -> bool {
        self.database.is_some()
    }

    /// The value of a global slurm.conf key (case-insensitive), after `extra`.
    #[must_use]
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.sections
            .iter()
            .flat_map(|section| &section.settings)
            .chain(&self.extra)
            .find(|setting| setting.key.eq_ignore_ascii_case(key))
            .map(|setting| setting.value.as_str())
    }
}

/// Derives the Slurm configuration; `None` when the scheduler is not Slurm.
///
/// # Errors
/// [`SlurmError`] for blueprints `check` should have rejected.
pub fn slurm(model: &Model) -> Result<Option<SlurmConfig>, SlurmError> {
    let scheduler = &model.blueprint.scheduler;
    if scheduler.kind != SchedulerKind::Slurm {
        return Ok(None);
    }
    let settings = scheduler.slurm.as_ref().ok_or(SlurmError::MissingSettings)?;
    let controller = model.first_with(Role::Controller).ok_or(SlurmError::NoController)?.name.clone();
    let database = settings.accounting.then(|| {
        // A cluster without a database group keeps slurmdbd next to slurmctld.
        model.first_with(Role::Database).map_or_else(|| controller.clone(), |node| node.name.clone())
    });
    let tenants = &model.tenants;
    if !tenants.is_empty() && database.is_none() {
        return Err(SlurmError::TenantsNeedAccounting);
    }
    if !tenants.is_empty() && settings.preempt_mode == PreemptMode::Suspend {
        return Err(SlurmError::SuspendKeepsGpus);
    }
    let sharing = Sharing::of(&settings.gpu_sharing)?;
    let compute: Vec<&Group> = model.groups_with(Role::Compute).collect();
    // QOS limits name `gres/gpu`, a TRES slurmctld registers only when nodes have GPUs.
    if !tenants.is_empty() && !compute.iter().any(|group| group.gpu.is_some()) {
        return Err(SlurmError::TenantsNeedGpus);
    }

    let nodes: Vec<NodeLine> = compute.iter().map(|group| node_line(group, sharing)).collect();
    let gres: Vec<GresLine> = compute.iter().flat_map(|group| gres_lines(group, sharing)).collect();
    let partitions =
        settings.partitions.iter().map(|partition| partition_line(model, partition)).collect::<Result<Vec<_>, _>>()?;
    let release = parse_slurm_release(&settings.min_version).unwrap_or((22, 5));
    let nvlink_blocks = settings.topology == SlurmTopology::Block && !model.nvlink_domains.is_empty();
    let topology = if nvlink_blocks { nvlink_block_lines(model) } else { topology_lines(model, settings.topology) };
    // Each block must hold at least the base size (24.05+ fatals otherwise), so the
    // smallest domain sets it; 23.11 has no `BlockSizes` and wants equal blocks (lint).
    let block_sizes = (nvlink_blocks && release >= BLOCK_SIZES_SINCE)
        .then(|| model.nvlink_domains.iter().map(|domain| domain.nodes.len()).min())
        .flatten();

    let mut sections = global_sections(&GlobalInput {
        model,
        settings,
        controller: &controller,
        database: database.as_deref(),
        nodes: &nodes,
        gpu_types: gpu_types(&compute),
        sharing,
        has_topology: !topology.is_empty(),
        imex_channels: !model.nvlink_domains.is_empty() && release >= BLOCK_SIZES_SINCE,
    });
    let extra = apply_extra(&mut sections, &settings.extra)?;

    let (qos, accounts, users) = tenancy(tenants, settings.preempt_mode);
    Ok(Some(SlurmConfig {
        cluster_name: model.name.clone(),
        min_version: settings.min_version.clone(),
        hosts: hosts(model, &controller, database.as_deref()),
        controller,
        database,
        sections,
        extra,
        nodes,
        partitions,
        gres,
        topology,
        topology_title: if nvlink_blocks { NVLINK_TOPOLOGY_TITLE } else { FABRIC_TOPOLOGY_TITLE },
        block_sizes,
        cgroup: cgroup_settings(),
        qos,
        accounts,
        users,
    }))
}

/// GPU sharing, resolved to what the lines need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sharing {
    None,
    Shard(u32),
    Mps(u32),
}

impl Sharing {
    fn of(spec: &schema::GpuSharing) -> Result<Self, SlurmError> {
        match spec.mode {
            GpuSharingMode::None => Ok(Self::None),
            GpuSharingMode::Shard => spec.per_gpu.map(Self::Shard).ok_or(SlurmError::ShardCountMissing),
            GpuSharingMode::Mps => Ok(Self::Mps(spec.per_gpu.unwrap_or(DEFAULT_MPS_PER_GPU))),
            GpuSharingMode::Mig => Err(SlurmError::MigNeedsDiscovery),
        }
    }

    /// The GRES name of the shares, besides `gpu`.
    fn gres_name(self) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::Shard(_) => Some("shard"),
            Self::Mps(_) => Some("mps"),
        }
    }
}

fn cpus(group: &Group) -> u32 {
    group.cpu.sockets * group.cpu.cores_per_socket * group.cpu.threads_per_core
}

/// Memory Slurm may hand out: the node's memory less the reserve, and at least 1
/// (Slurm's own default) when the blueprint does not say.
fn real_memory(group: &Group) -> u64 {
    let reserve = (group.memory_mib * MEMORY_RESERVE_PERCENT).div_ceil(100);
    group.memory_mib.saturating_sub(reserve).max(1)
}

fn node_line(group: &Group, sharing: Sharing) -> NodeLine {
    let mut gres = Vec::new();
    if let Some(gpu) = group.gpu {
        let gpus = u64::from(group.gpus_per_node);
        gres.push(format!("gpu:{}:{gpus}", gpu.name));
        match sharing {
            Sharing::None => {}
            Sharing::Shard(per_gpu) => gres.push(format!("shard:{}", gpus * u64::from(per_gpu))),
            Sharing::Mps(per_gpu) => gres.push(format!("mps:{}", gpus * u64::from(per_gpu))),
        }
    }
    NodeLine {
        names: group.hostlist.clone(),
        sockets: group.cpu.sockets,
        cores_per_socket: group.cpu.cores_per_socket,
        threads_per_core: group.cpu.threads_per_core,
        cpus: cpus(group),
        real_memory: real_memory(group),
        gres,
    }
}

/// `first-last`, or `first` alone.
fn range(first: u64, last: u64) -> String {
    if first == last { first.to_string() } else { format!("{first}-{last}") }
}

/// GPUs of a group split evenly over its sockets, as (first GPU, last GPU, socket):
/// GRES–CPU binding works per socket, so each line carries its socket's cores.
fn gpus_per_socket(group: &Group) -> Vec<(u64, u64, u64)> {
    let gpus = u64::from(group.gpus_per_node);
    let sockets = u64::from(group.cpu.sockets.max(1));
    let per_socket = gpus.div_ceil(sockets);
    (0..sockets)
        .map(|socket| (socket * per_socket, ((socket + 1) * per_socket).min(gpus), socket))
        .filter(|(first, end, _)| first < end)
        .map(|(first, end, socket)| (first, end - 1, socket))
        .collect()
}

/// Logical core indexes (not CPU ids) of one socket, as gres.conf `Cores=` wants them.
fn socket_cores(group: &Group, socket: u64) -> String {
    let per_socket = u64::from(group.cpu.cores_per_socket.max(1));
    range(socket * per_socket, (socket + 1) * per_socket - 1)
}

fn gres_lines(group: &Group, sharing: Sharing) -> Vec<GresLine> {
    let Some(gpu) = group.gpu else { return Vec::new() };
    let mut lines = Vec::new();
    for (first, last, socket) in gpus_per_socket(group) {
        let file = if first == last { format!("/dev/nvidia{first}") } else { format!("/dev/nvidia[{first}-{last}]") };
        lines.push(GresLine {
            nodes: group.hostlist.clone(),
            name: "gpu",
            gres_type: Some(gpu.name.to_owned()),
            file: Some(file),
            count: None,
            cores: Some(socket_cores(group, socket)),
        });
    }
    let gpus = u64::from(group.gpus_per_node);
    match sharing {
        Sharing::None => {}
        // Without File, Slurm spreads the shards evenly over the node's GPUs
        // ("Type and Cores parameters for gres/shard are ignored").
        Sharing::Shard(per_gpu) => lines.push(GresLine {
            nodes: group.hostlist.clone(),
            name: "shard",
            gres_type: None,
            file: None,
            count: Some(gpus * u64::from(per_gpu)),
            cores: None,
        }),
        // MPS shares are tied to one GPU each, as gres.conf(5) shows them.
        Sharing::Mps(per_gpu) => {
            for (first, last, socket) in gpus_per_socket(group) {
                for index in first..=last {
                    lines.push(GresLine {
                        nodes: group.hostlist.clone(),
                        name: "mps",
                        gres_type: None,
                        file: Some(format!("/dev/nvidia{index}")),
                        count: Some(u64::from(per_gpu)),
                        cores: Some(socket_cores(group, socket)),
                    });
                }
            }
        }
    }
    lines
}

fn partition_line(model: &Model, partition: &schema::Partition) -> Result<PartitionLine, SlurmError> {
    let groups = partition
        .groups
        .iter()
        .map(|name| {
            model
                .groups
                .iter()
                .find(|group| &group.name == name)
                .ok_or_else(|| SlurmError::UnknownGroup { partition: partition.name.clone(), group: name.clone() })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let nodes = groups.iter().map(|group| group.hostlist.as_str()).collect::<Vec<_>>().join(",");
    // A job asking for every GPU of a node must still fit its CPUs, so the
    // default is the smallest whole ratio and is left out when it would be 0.
    let def_cpu_per_gpu = groups
        .iter()
        .filter(|group| group.gpu.is_some() && group.gpus_per_node > 0)
        .map(|group| cpus(group) / group.gpus_per_node)
        .min()
        .filter(|ratio| *ratio > 0);
    Ok(PartitionLine {
        name: partition.name.clone(),
        nodes,
        default: partition.default,
        max_time: partition.max_time.clone().unwrap_or_else(|| "INFINITE".to_owned()),
        over_subscribe: if partition.exclusive { "EXCLUSIVE" } else { "NO" },
        def_cpu_per_gpu,
    })
}

/// One switch per scalable unit under one top switch (tree), or one block per
/// scalable unit (block): every node of an SU shares all its rail leaves, so the SU
/// is the scheduling domain, not the leaf.
fn topology_lines(model: &Model, topology: SlurmTopology) -> Vec<TopologyLine> {
    if topology == SlurmTopology::None {
        return Vec::new();
    }
    let mut units: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    let mut off_fabric: Vec<&str> = Vec::new();
    for group in model.groups_with(Role::Compute) {
        for node in model.group_nodes(group) {
            if node.rails.is_empty() {
                off_fabric.push(&node.name);
            } else {
                units.entry(node.su).or_default().push(&node.name);
            }
        }
    }
    let keyword = if topology == SlurmTopology::Block { "BlockName" } else { "SwitchName" };
    let mut lines: Vec<TopologyLine> = units
        .iter()
        .map(|(su, names)| TopologyLine {
            keyword,
            name: format!("su{su}"),
            nodes: Some(hostlist::compress(names.iter().copied())),
            switches: None,
        })
        .collect();
    if topology == SlurmTopology::Tree {
        // Slurm only spans jobs over nodes under one connected tree, so nodes
        // without fabric NICs get their own leaf rather than none.
        if !off_fabric.is_empty() {
            lines.push(TopologyLine {
                keyword,
                name: OFF_FABRIC_SWITCH.to_owned(),
                nodes: Some(hostlist::compress(off_fabric.iter().copied())),
                switches: None,
            });
        }
        if !lines.is_empty() {
            let mut below = vec![unpadded_hostlist("su", units.keys().copied())];
            below.retain(|list| !list.is_empty());
            if !off_fabric.is_empty() {
                below.push(OFF_FABRIC_SWITCH.to_owned());
            }
            let below = below.join(",");
            lines.push(TopologyLine { keyword, name: TOP_SWITCH.to_owned(), nodes: None, switches: Some(below) });
        }
    }
    lines
}

/// One block per NVLink domain, in blueprint order (Slurm pairs neighbouring blocks
/// into larger ones, so racks that sit together stay together).
fn nvlink_block_lines(model: &Model) -> Vec<TopologyLine> {
    model
        .nvlink_domains
        .iter()
        .filter(|domain| !domain.nodes.is_empty())
        .map(|domain| TopologyLine {
            keyword: "BlockName",
            name: domain.name.clone(),
            nodes: Some(hostlist::compress(domain.nodes.iter().map(|&index| model.nodes[index].name.as_str()))),
            switches: None,
        })
        .collect()
}

/// `prefix[0-9,12]` for ascending numbers without padding: `hostlist::compress`
/// keeps digit widths apart (`su[0-9],su[10-63]`), which Slurm does not need.
fn unpadded_hostlist(prefix: &str, numbers: impl IntoIterator<Item = u32>) -> String {
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for number in numbers {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == number => *end = number,
            _ => ranges.push((number, number)),
        }
    }
    match ranges.as_slice() {
        [] => String::new(),
        [(start, end)] if start == end => format!("{prefix}{start}"),
        _ => {
            let inner: Vec<String> = ranges
                .iter()
                .map(|(start, end)| if start == end { start.to_string() } else { format!("{start}-{end}") })
                .collect();
            format!("{prefix}[{}]", inner.join(","))
        }
    }
}

/// Distinct GPU models of the compute groups, in blueprint order.
fn gpu_types(compute: &[&Group]) -> Vec<&'static str> {
    let mut types: Vec<&'static str> = Vec::new();
    for gpu in compute.iter().filter_map(|group| group.gpu) {
        if !types.contains(&gpu.name) {
            types.push(gpu.name);
        }
    }
    types
}

struct GlobalInput<'a> {
    model: &'a Model,
    settings: &'a schema::Slurm,
    controller: &'a str,
    database: Option<&'a str>,
    nodes: &'a [NodeLine],
    gpu_types: Vec<&'static str>,
    sharing: Sharing,
    has_topology: bool,
    /// Slurm hands each job its own IMEX channel (`switch/nvidia_imex`).
    imex_channels: bool,
}

fn global_sections(input: &GlobalInput<'_>) -> Vec<Section> {
    let has_tenants = !input.model.tenants.is_empty();
    let control = vec![
        Setting::new("ClusterName", &input.model.name),
        Setting::new("SlurmctldHost", input.controller),
        Setting::new("SlurmUser", "slurm"),
        Setting::new("AuthType", "auth/munge"),
        Setting::new("StateSaveLocation", "/var/lib/slurm/slurmctld"),
        Setting::new("SlurmdSpoolDir", "/var/lib/slurm/slurmd"),
        Setting::new("SlurmctldLogFile", "/var/log/slurm/slurmctld.log"),
        Setting::new("SlurmdLogFile", "/var/log/slurm/slurmd.log"),
        Setting::new("SlurmctldPidFile", "/run/slurmctld.pid"),
        Setting::new("SlurmdPidFile", "/run/slurmd.pid"),
        Setting::new("ReturnToService", "2"),
        // Debian's default /bin/mail is absent: slurmctld reports an invalid MailProg.
        Setting::new("MailProg", "/bin/true"),
    ];
    let containment = vec![
        Setting::new("ProctrackType", "proctrack/cgroup"),
        Setting::new("TaskPlugin", "task/cgroup,task/affinity"),
        Setting::new("JobAcctGatherType", "jobacct_gather/cgroup"),
        Setting::new("PrologFlags", "Contain"),
    ];
    let mut scheduling = vec![
        Setting::new("SchedulerType", "sched/backfill"),
        Setting::new("SelectType", "select/cons_tres"),
        Setting::new("SelectTypeParameters", "CR_Core_Memory"),
    ];
    // With CR_*_Memory a job without a memory request would otherwise take the
    // whole node; the smallest node's share per CPU keeps every node usable.
    let def_mem_per_cpu = input
        .nodes
        .iter()
        .filter(|node| node.real_memory > 1 && node.cpus > 0)
        .map(|node| node.real_memory / u64::from(node.cpus))
        .min()
        .filter(|mem| *mem > 0);
    if let Some(mem) = def_mem_per_cpu {
        scheduling.push(Setting::new("DefMemPerCPU", mem.to_string()));
    }
    if !input.gpu_types.is_empty() {
        let mut types = vec!["gpu"];
        types.extend(input.sharing.gres_name());
        scheduling.push(Setting::new("GresTypes", types.join(",")));
    }
    if input.has_topology {
        let plugin = match input.settings.topology {
            SlurmTopology::Block => "topology/block",
            SlurmTopology::Tree | SlurmTopology::None => "topology/tree",
        };
        scheduling.push(Setting::new("TopologyPlugin", plugin));
    }

    let mut sections = vec![
        Section { title: "Control", settings: control },
        Section { title: "Process tracking and containment", settings: containment },
        Section { title: "Scheduling", settings: scheduling },
    ];
    if input.imex_channels {
        sections.push(Section {
            title: "NVLink domains: one IMEX channel per job (switch/nvidia_imex, 24.05+)",
            settings: vec![Setting::new("SwitchType", "switch/nvidia_imex")],
        });
    }

    if let Some(database) = input.database {
        let mut accounting = vec![
            Setting::new("AccountingStorageType", "accounting_storage/slurmdbd"),
            Setting::new("AccountingStorageHost", database),
        ];
        if !input.gpu_types.is_empty() {
            let mut tres = vec!["gres/gpu".to_owned()];
            tres.extend(input.gpu_types.iter().map(|name| format!("gres/gpu:{name}")));
            tres.extend(input.sharing.gres_name().map(|name| format!("gres/{name}")));
            accounting.push(Setting::new("AccountingStorageTRES", tres.join(",")));
        }
        // Enforcing associations without tenants would reject every job: nobody
        // would have an account.
        if has_tenants {
            accounting.push(Setting::new("AccountingStorageEnforce", "associations,limits,qos,safe"));
        }
        sections.push(Section { title: "Accounting", settings: accounting });
    }

    let mut priority = vec![Setting::new("PriorityType", "priority/multifactor")];
    if let Some(half_life) = &input.settings.fairshare_half_life {
        priority.push(Setting::new("PriorityDecayHalfLife", half_life));
    }
    if has_tenants {
        priority.push(Setting::new("PriorityWeightQOS", "100000"));
    }
    // Fair share and age come from the accounting database; without it slurmctld
    // ignores them with a warning.
    if input.database.is_some() {
        priority.push(Setting::new("PriorityWeightFairshare", "10000"));
        priority.push(Setting::new("PriorityWeightAge", "1000"));
    }
    sections.push(Section { title: "Priority", settings: priority });

    if has_tenants {
        let mode = match input.settings.preempt_mode {
            PreemptMode::Cancel => "CANCEL",
            PreemptMode::Requeue | PreemptMode::Suspend => "REQUEUE",
        };
        sections.push(Section {
            title: "Preemption: tenants borrow idle GPUs under a preemptible QOS",
            settings: vec![
                Setting::new("PreemptType", "preempt/qos"),
                Setting::new("PreemptMode", mode),
                Setting::new("JobRequeue", "1"),
            ],
        });
    }
    if let Some(health) = health_settings(input.model) {
        sections.push(Section { title: "Node health: toolkit's fast checks (monitoring.health)", settings: health });
    }
    sections
}

/// The node health program toolkit renders from its validators (`check` runs the
/// fast checks, `check slow` the slow ones).
pub const HEALTH_PROGRAM: &str = "/usr/local/lib/toolkit/health/check";

/// With a `monitoring` section: slurmd runs the health program every
/// `monitoring.health.fast_interval` on nodes in any state (a node running jobs is
/// drained, not killed), cycled through the interval so slurmctld sees the nodes'
/// drains and resumes spread out rather than all at once.
fn health_settings(model: &Model) -> Option<Vec<Setting>> {
    let monitoring = model.blueprint.monitoring.as_ref()?;
    // Lint rejects a malformed duration; the default stands in for a model built without it.
    let seconds = crate::blueprint::duration::parse(&monitoring.health.fast_interval)
        .map_or(300, |interval| interval.as_secs().max(1));
    Some(vec![
        Setting::new("HealthCheckProgram", HEALTH_PROGRAM),
        Setting::new("HealthCheckInterval", seconds.to_string()),
        Setting::new("HealthCheckNodeState", "ANY,CYCLE"),
    ])
}

/// Substitutes `extra` values for keys already rendered (Slurm warns on a
/// duplicate key and the last one wins silently) and returns the rest, to append.
fn apply_extra(sections: &mut [Section], extra: &BTreeMap<String, String>) -> Result<Vec<Setting>, SlurmError> {
    let mut appended = Vec::new();
    for (key, value) in extra {
        let key_ok = !key.is_empty() && !key.contains(|c: char| c == '=' || c == '#' || c.is_whitespace());
        if !key_ok || value.contains(['\n', '\r']) {
            return Err(SlurmError::BadExtra { key: key.clone() });
        }
        let existing = sections
            .iter_mut()
            .flat_map(|section| section.settings.iter_mut())
            .find(|setting| setting.key.eq_ignore_ascii_case(key));
        match existing {
            Some(setting) => value.clone_into(&mut setting.value),
            None => appended.push(Setting::new(key, value.clone())),
        }
    }
    Ok(appended)
}

/// The subset valid from 22.05 to current: no Kmem keys (fatal since 23.11), no
/// `CgroupAutomount` (an error since 23.11).
fn cgroup_settings() -> Vec<Setting> {
    vec![
        Setting::new("CgroupPlugin", "autodetect"),
        Setting::new("ConstrainCores", "yes"),
        Setting::new("ConstrainDevices", "yes"),
        Setting::new("ConstrainRAMSpace", "yes"),
        Setting::new("ConstrainSwapSpace", "yes"),
    ]
}

fn hosts(model: &Model, controller: &str, database: Option<&str>) -> Vec<SlurmHost> {
    let mut hosts = Vec::new();
    for group in &model.groups {
        let client = [Role::Controller, Role::Database, Role::Login, Role::Compute];
        let is_compute = group.has_role(Role::Compute);
        let in_slurm = client.iter().any(|role| group.has_role(*role));
        for node in model.group_nodes(group) {
            let is_controller = node.name == controller;
            let is_database = database == Some(node.name.as_str());
            if in_slurm || is_controller || is_database {
                hosts.push(SlurmHost {
                    name: node.name.clone(),
                    controller: is_controller,
                    database: is_database,
                    compute: is_compute,
                });
            }
        }
    }
    hosts
}

/// Guaranteed GPUs as a per-tenant QOS cap, borrowing as a shared preemptible QOS
/// (§5.7): a guarantee on the account association would count the tenant's own
/// borrowed jobs against it and block its guaranteed ones.
fn tenancy(tenants: &[schema::Tenant], mode: PreemptMode) -> (Vec<Qos>, Vec<Account>, Vec<User>) {
    let mut qos = Vec::new();
    let any_borrow = tenants.iter().any(|tenant| tenant.borrow);
    if any_borrow {
        let preempt_mode = match mode {
            PreemptMode::Cancel => "cancel",
            PreemptMode::Requeue | PreemptMode::Suspend => "requeue",
        };
        qos.push(Qos {
            name: BORROW_QOS.to_owned(),
            priority: 0,
            grp_tres: None,
            preempt: None,
            preempt_mode: Some(preempt_mode.to_owned()),
            flags: Some("NoReserve".to_owned()),
        });
    }
    let mut accounts = Vec::new();
    let mut users = Vec::new();
    for tenant in tenants {
        qos.push(Qos {
            name: tenant.name.clone(),
            priority: tenant.priority,
            grp_tres: Some(format!("gres/gpu={}", tenant.guaranteed_gpus)),
            preempt: any_borrow.then(|| BORROW_QOS.to_owned()),
            preempt_mode: None,
            flags: None,
        });
        let mut allowed = vec![tenant.name.clone()];
        if tenant.borrow {
            allowed.push(BORROW_QOS.to_owned());
        }
        accounts.push(Account {
            name: tenant.name.clone(),
            fairshare: tenant.fairshare,
            qos: allowed,
            default_qos: tenant.name.clone(),
        });
        users.extend(tenant.users.iter().map(|user| User { name: user.clone(), account: tenant.name.clone() }));
    }
    (qos, accounts, users)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(path: &str) -> SlurmConfig {
        let loaded = crate::blueprint::load(Path::new(path)).expect("blueprint loads");
        let model = crate::model::expand(&loaded.blueprint).expect("blueprint expands");
        slurm(&model).expect("slurm config").expect("scheduler is slurm")
    }

    fn model_from(text: &str) -> Model {
        let loaded =
            crate::blueprint::load::load_text(Path::new("test.yaml"), text.to_owned()).expect("blueprint loads");
        crate::model::expand(&loaded.blueprint).expect("blueprint expands")
    }

    #[test]
    fn lab_has_one_node_line_and_socket_split_gres() {
        let lab = config("blueprints/lab.yaml");
        assert_eq!(lab.controller, "head");
        assert_eq!(lab.database.as_deref(), Some("head"));
        assert_eq!(lab.nodes.len(), 1);
        let node = &lab.nodes[0];
        assert_eq!(node.names, "node[01-04]");
        assert_eq!((node.cpus, node.real_memory), (2, 972));
        assert_eq!(node.gres, ["gpu:h100:4"]);
        assert_eq!(lab.gres.len(), 1);
        assert_eq!(lab.gres[0].file.as_deref(), Some("/dev/nvidia[0-3]"));
        assert_eq!(lab.gres[0].cores.as_deref(), Some("0-1"));
        assert_eq!(lab.setting("AccountingStorageTRES"), Some("gres/gpu,gres/gpu:h100"));
        assert_eq!(lab.setting("PreemptType"), Some("preempt/qos"));
        // 2 CPUs for 4 GPUs: a default of 1 CPU per GPU would make 4-GPU jobs unrunnable.
        assert_eq!(lab.partitions[0].def_cpu_per_gpu, None);
    }

    #[test]
    fn superpod_splits_gpus_per_socket_and_is_exclusive() {
        let spod = config("blueprints/h100-superpod-1su.yaml");
        let files: Vec<(&str, &str)> = spod
            .gres
            .iter()
            .map(|line| (line.file.as_deref().unwrap_or(""), line.cores.as_deref().unwrap_or("")))
            .collect();
        assert_eq!(files, [("/dev/nvidia[0-3]", "0-55"), ("/dev/nvidia[4-7]", "56-111")]);
        assert_eq!(spod.partitions[0].over_subscribe, "EXCLUSIVE");
        assert_eq!(spod.partitions[0].def_cpu_per_gpu, Some(28));
        // Accounting without tenants: no association enforcement, no preemption.
        assert_eq!(spod.setting("AccountingStorageEnforce"), None);
        assert_eq!(spod.setting("PreemptType"), None);
        assert!(spod.qos.is_empty());
    }

    #[test]
    fn tenants_become_qos_accounts_and_users() {
        let roce = config("blueprints/h200-roce-64.yaml");
        let names: Vec<&str> = roce.qos.iter().map(|qos| qos.name.as_str()).collect();
        assert_eq!(names, ["borrow", "research", "product"]);
        assert_eq!(roce.qos[1].grp_tres.as_deref(), Some("gres/gpu=256"));
        assert_eq!(roce.qos[1].preempt.as_deref(), Some("borrow"));
        assert_eq!(roce.accounts[0].qos, ["research", "borrow"]);
        assert_eq!(roce.users.len(), 4);
        // nfs01 runs no Slurm daemon or client.
        assert!(roce.hosts.iter().all(|host| host.name != "nfs01"));
        assert_eq!(roce.hosts.len(), 65);
    }

    #[test]
    fn topology_has_one_switch_per_su_under_a_top_switch() {
        let mut text = std::fs::read_to_string("blueprints/h200-roce-64.yaml").expect("read");
        text = text.replace("count: 64", "count: 200");
        let model = model_from(&text);
        let config = slurm(&model).expect("ok").expect("slurm");
        let lines: Vec<String> =
            config.topology.iter().map(|line| format!("{} {:?} {:?}", line.name, line.nodes, line.switches)).collect();
        // SN5600 at 400G (radix 128, 1:1): 64 nodes per SU.
        assert_eq!(
            lines,
            [
                "su0 Some(\"gpu[001-064]\") None",
                "su1 Some(\"gpu[065-128]\") None",
                "su2 Some(\"gpu[129-192]\") None",
                "su3 Some(\"gpu[193-200]\") None",
                "fabric None Some(\"su[0-3]\")",
            ]
        );
    }

    #[test]
    fn nvlink_domains_become_blocks_with_imex_channels() {
        let nvl72 = config("blueprints/gb200-nvl72.yaml");
        let lines: Vec<String> =
            nvl72.topology.iter().map(|line| format!("{}={} {:?}", line.keyword, line.name, line.nodes)).collect();
        assert_eq!(lines, ["BlockName=rack1 Some(\"gb[001-018]\")", "BlockName=rack2 Some(\"gb[019-036]\")"]);
        assert_eq!(nvl72.block_sizes, Some(18));
        assert_eq!(nvl72.setting("TopologyPlugin"), Some("topology/block"));
        assert_eq!(nvl72.setting("SwitchType"), Some("switch/nvidia_imex"));

        // 23.11 reads neither BlockSizes nor switch/nvidia_imex.
        let text = std::fs::read_to_string("blueprints/gb200-nvl72.yaml").expect("read");
        let old = slurm(&model_from(&text.replace("\"24.11\"", "\"23.11\""))).expect("ok").expect("slurm");
        assert_eq!((old.topology.len(), old.block_sizes, old.setting("SwitchType")), (2, None, None));

        // The smallest domain is the base block: every block must hold at least that many.
        let uneven = text.replace("\"gb[019-036]\"", "\"gb[019-030]\"");
        assert_eq!(slurm(&model_from(&uneven)).expect("ok").expect("slurm").block_sizes, Some(12));

        // Tree topology ignores the domains; without domains nothing changes.
        let tree = slurm(&model_from(&text.replace("topology: block", "topology: tree"))).expect("ok").expect("slurm");
        assert_eq!(tree.topology.last().map(|line| line.name.as_str()), Some(TOP_SWITCH));
        assert_eq!(tree.block_sizes, None);
        assert_eq!(config("blueprints/h200-roce-64.yaml").setting("SwitchType"), None);
    }

    #[test]
    fn extra_replaces_existing_keys_and_appends_new_ones() {
        let lab = std::fs::read_to_string("blueprints/lab.yaml").expect("read");
        let start = lab.find("    extra:\n").expect("the lab blueprint has `extra`");
        let end = lab.find("\n\ntenants:").expect("tenants follow the scheduler");
        let text = format!(
            "{}    extra:\n      proctracktype: proctrack/linuxproc\n      SlurmdParameters: config_overrides{}",
            &lab[..start],
            &lab[end..]
        );
        let config = slurm(&model_from(&text)).expect("ok").expect("slurm");
        assert_eq!(config.setting("ProctrackType"), Some("proctrack/linuxproc"));
        let all: Vec<&Setting> = config.sections.iter().flat_map(|s| &s.settings).chain(&config.extra).collect();
        assert_eq!(all.iter().filter(|s| s.key.eq_ignore_ascii_case("ProctrackType")).count(), 1);
        assert_eq!(config.extra, [Setting::new("SlurmdParameters", "config_overrides")]);
    }

    #[test]
    fn rejects_what_slurm_cannot_do() {
        let lab = std::fs::read_to_string("blueprints/lab.yaml").expect("read");
        let no_accounting = lab.replace("accounting: true", "accounting: false");
        assert_eq!(slurm(&model_from(&no_accounting)), Err(SlurmError::TenantsNeedAccounting));
        let suspend = lab.replace("preempt_mode: requeue", "preempt_mode: suspend");
        assert_eq!(slurm(&model_from(&suspend)), Err(SlurmError::SuspendKeepsGpus));
        let shard = lab.replace("gpu_sharing: { mode: none }", "gpu_sharing: { mode: shard }");
        assert_eq!(slurm(&model_from(&shard)), Err(SlurmError::ShardCountMissing));
        let bad_extra = lab.replace("    extra:\n", "    extra:\n      \"Bad Key\": x\n");
        assert_eq!(slurm(&model_from(&bad_extra)), Err(SlurmError::BadExtra { key: "Bad Key".to_owned() }));
    }

    #[test]
    fn sharing_adds_shares_to_nodes_gres_and_tres() {
        let lab = std::fs::read_to_string("blueprints/lab.yaml").expect("read");
        let shard = lab.replace("gpu_sharing: { mode: none }", "gpu_sharing: { mode: shard, per_gpu: 8 }");
        let config = slurm(&model_from(&shard)).expect("ok").expect("slurm");
        assert_eq!(config.nodes[0].gres, ["gpu:h100:4", "shard:32"]);
        assert_eq!(config.gres.last().map(|line| (line.name, line.count)), Some(("shard", Some(32))));
        assert_eq!(config.setting("GresTypes"), Some("gpu,shard"));
        assert_eq!(config.setting("AccountingStorageTRES"), Some("gres/gpu,gres/gpu:h100,gres/shard"));

        let mps = lab.replace("gpu_sharing: { mode: none }", "gpu_sharing: { mode: mps }");
        let config = slurm(&model_from(&mps)).expect("ok").expect("slurm");
        assert_eq!(config.nodes[0].gres, ["gpu:h100:4", "mps:400"]);
        let mps_files: Vec<&str> =
            config.gres.iter().filter(|line| line.name == "mps").filter_map(|line| line.file.as_deref()).collect();
        assert_eq!(mps_files, ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]);
    }
}
