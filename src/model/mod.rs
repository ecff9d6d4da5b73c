//! The expanded cluster: every node, GPU, NIC, rail, switch, link, address and tenant.
//!
//! Stage: expand. Input: a checked [`Blueprint`](crate::blueprint::Blueprint) (and
//! optionally an inventory). Output: [`Model`]. Everything later stages need is
//! computed here once — templates only lay it out.

pub mod check;
pub mod expand;
pub mod gpu;
pub mod hostlist;
pub mod kubeadm;
pub mod kubernetes;
pub mod monitoring;
pub mod network;
pub mod nvlink;
pub mod slurm;
pub mod software;
pub mod spares;

use std::net::Ipv4Addr;

use serde::Serialize;

pub use expand::{ExpandError, expand};

use crate::blueprint::schema::{self, Role};
use crate::topology::Fabric;

/// The whole cluster, expanded.
#[derive(Debug, Clone, Serialize)]
pub struct Model {
    /// Cluster name.
    pub name: String,
    /// DNS domain, if any.
    pub domain: Option<String>,
    /// Node groups, in blueprint order.
    pub groups: Vec<Group>,
    /// Every node, grouped in blueprint order.
    pub nodes: Vec<Node>,
    /// The compute fabric: sizing, switches, cabling, addresses, ASNs.
    pub fabric: Fabric,
    /// Shared filesystems with resolved servers.
    pub filesystems: Vec<Filesystem>,
    /// Node-local scratch, if declared.
    pub scratch: Option<schema::Scratch>,
    /// Tenants as declared.
    pub tenants: Vec<schema::Tenant>,
    /// NVLink domains (NVL72 racks), in blueprint order; empty without any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nvlink_domains: Vec<nvlink::NvlinkDomain>,
    /// The blueprint, for settings used verbatim (scheduler, acceptance).
    pub blueprint: schema::Blueprint,
    /// Spares on standby and the swaps in effect (none until [`Model::with_rma`]).
    #[serde(skip_serializing_if = "spares::Roster::is_empty")]
    pub roster: spares::Roster,
}

/// A node group, expanded.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// Name.
    pub name: String,
    /// Roles.
    pub roles: Vec<Role>,
    /// Indexes into [`Model::nodes`].
    pub nodes: std::ops::Range<usize>,
    /// Slurm hostlist expression of its nodes (`node[01-04]`).
    pub hostlist: String,
    /// GPU model, when the group has GPUs.
    pub gpu: Option<&'static gpu::GpuModel>,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// CPU topology (defaults to 1 socket × 1 core when absent).
    pub cpu: schema::Cpu,
    /// Memory per node in MiB (0 = unknown).
    pub memory_mib: u64,
    /// Rail NICs per node.
    pub rail_nics: u32,
    /// Local NVMe drives per node (0 = none declared).
    pub local_nvme: u32,
    /// The software stack of a GPU group (its own `software`, else the blueprint's).
    pub software: Option<software::Stack>,
    /// Kernel module parameters, by module.
    pub module_options: std::collections::BTreeMap<String, String>,
}

impl Group {
    /// Whether the group has `role`.
    #[must_use]
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// One node.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    /// Host name.
    pub name: String,
    /// Index into [`Model::groups`].
    pub group: usize,
    /// In-band management address (from the blueprint's management subnet).
    pub mgmt_address: Ipv4Addr,
    /// Scalable unit (0-based) for nodes on the compute fabric.
    pub su: u32,
    /// Rail ports, one per rail, in rail order.
    pub rails: Vec<RailPort>,
}

/// A node's NIC on one rail.
#[derive(Debug, Clone, Serialize)]
pub struct RailPort {
    /// Rail number, from 0.
    pub rail: u32,
    /// Interface name (`rail0`).
    pub netdev: String,
    /// Address on the leaf's host subnet.
    pub address: Ipv4Addr,
    /// Prefix length of that subnet.
    pub prefix_len: u8,
    /// The leaf's address on that subnet (next hop).
    pub gateway: Ipv4Addr,
    /// Index into the fabric's switches.
    pub leaf: usize,
    /// Leaf port number, from 1.
    pub leaf_port: u32,
    /// Host MTU.
    pub mtu: u32,
}

/// A shared filesystem, resolved.
#[derive(Debug, Clone, Serialize)]
pub struct Filesystem {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: schema::FilesystemKind,
    /// Serving node (NFS served inside the cluster).
    pub server: Option<String>,
    /// Exported directory on the server.
    pub export: Option<String>,
    /// Source as `mount` sees it (`head:/export/home`, `mgs@tcp:/fs`).
    pub source: String,
    /// Mount point.
    pub mount: String,
    /// Mount options.
    pub options: String,
    /// Indexes of the node groups that mount it.
    pub client_groups: Vec<usize>,
    /// Tier (shared, home, scratch).
    pub tier: schema::Tier,
    /// Performance the blueprint expects of it, if it says.
    pub expected: Option<schema::FilesystemExpectation>,
}

impl Model {
    /// The nodes of a group.
    #[must_use]
    pub fn group_nodes(&self, group: &Group) -> &[Node] {
        &self.nodes[group.nodes.clone()]
    }

    /// The model with the spares' swaps for the nodes sent to RMA (`records`, in the
    /// order they went): what the partitions and the topology are rendered from.
    #[must_use]
    pub fn with_rma(mut self, records: &[spares::RmaRecord]) -> Self {
        if !records.is_empty() {
            self.roster = spares::roster(&self, records);
        }
        self
    }

    /// Groups with `role`.
    pub fn groups_with(&self, role: Role) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(move |group| group.has_role(role))
    }

    /// The first node of the first group with `role`.
    #[must_use]
    pub fn first_with(&self, role: Role) -> Option<&Node> {
        self.groups_with(role).find_map(|group| self.group_nodes(group).first())
    }

    /// The nodes the scheduler runs jobs on, by name: what a rolling change can drain.
    #[must_use]
    pub fn schedulable_nodes(&self) -> std::collections::BTreeSet<String> {
        if self.blueprint.scheduler.kind != schema::SchedulerKind::Slurm {
            return std::collections::BTreeSet::new();
        }
        self.groups_with(Role::Compute)
            .flat_map(|group| self.group_nodes(group))
            .map(|node| node.name.clone())
            .collect()
    }

    /// Total GPUs in the cluster.
    #[must_use]
    pub fn total_gpus(&self) -> u64 {
        self.groups.iter().map(|g| u64::from(g.gpus_per_node) * g.nodes.len() as u64).sum()
    }
}
