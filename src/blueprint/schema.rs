//! Blueprint schema v1: serde types that mirror the YAML file, nothing more.
//!
//! Stage: load. Input: YAML text (after `vars` interpolation). Output: [`Blueprint`].
//! Every struct denies unknown keys so a typo is an error with a location, and
//! free-form values (GPU models, ratios, names) stay strings here so `check` can
//! say what is wrong with them and suggest a fix. Meaning lives in `model`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod monitoring;
mod os;
pub use monitoring::{
    EmailReceiver, HealthChecks, Monitoring, OnFailure, Receiver, Repair, RepairStep, WebhookReceiver,
};
pub use os::{BootMode, Distribution, Os, OsBoot, OsDisk};

/// A GPU cluster as designed: what it is, never where it is (that is the inventory).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Blueprint {
    /// Schema version; only `1` exists.
    pub version: u32,
    /// Cluster identity.
    pub cluster: Cluster,
    /// Values substituted into any string as `${name}` before the file is read.
    #[serde(default)]
    pub vars: BTreeMap<String, serde_json::Value>,
    /// Groups of identical nodes.
    pub node_groups: Vec<NodeGroup>,
    /// Networks: compute fabric, storage and management.
    pub fabric: Fabric,
    /// Shared and local storage.
    #[serde(default)]
    pub storage: Storage,
    /// The workload manager.
    pub scheduler: Scheduler,
    /// Who uses the cluster and what they are guaranteed.
    #[serde(default)]
    pub tenants: Vec<Tenant>,
    /// How the cluster is accepted at handover.
    #[serde(default)]
    pub acceptance: Acceptance,
    /// Hardware profiles by name, referenced by `node_groups[].hardware_profile`:
    /// what each node's BMC should report (power, BIOS, firmware) before the OS is
    /// configured.
    #[serde(default)]
    pub hardware_profiles: BTreeMap<String, HardwareProfile>,
    /// The GPU node software stack of real hardware (driver, fabric manager, RDMA
    /// stack, DCGM, containers); a node group may replace it with its own.
    #[serde(default)]
    pub software: Option<Software>,
    /// The OS toolkit installs on blank bare-metal nodes (those with a BMC in the
    /// inventory and a `provisioning` network); a node group may replace it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<Os>,
    /// Where the nodes' package manager gets packages: a cache on one node that fetches
    /// each package once for the whole cluster, or the site's own proxy.
    #[serde(default)]
    pub package_cache: PackageCache,
    /// Prometheus, Alertmanager, exporters and continuous health checks; without this
    /// section no monitoring is deployed.
    #[serde(default)]
    pub monitoring: Option<Monitoring>,
    /// NVLink domains (GB200/GB300 NVL72 racks): compute trays whose GPUs share one
    /// NVLink fabric. Slurm gets one `topology/block` block each, IMEX one domain each,
    /// Kubernetes one node label value each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink_domains: Vec<NvlinkDomain>,
}

/// One NVLink domain: the compute trays of a rack whose GPUs meet at the rack's NVLink
/// switch trays (18 trays × 4 GPUs in a GB200 or GB300 NVL72).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NvlinkDomain {
    /// Name: the Slurm block, the IMEX domain and the node label value (`rack1`).
    pub name: String,
    /// Its compute trays (nodes of the blueprint), as a Slurm hostlist: `gb[001-018]`.
    pub nodes: String,
    /// NVLink switch trays of the rack (9 in an NVL72).
    #[serde(default = "default_switch_trays")]
    pub switch_trays: u32,
}

const fn default_switch_trays() -> u32 {
    9
}

/// The cluster's package cache (apt-cacher-ng on Debian and Ubuntu nodes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PackageCache {
    /// `true` or `false`; absent: a cache when the cluster has more than
    /// [`PACKAGE_CACHE_AUTO_NODES`] nodes, where fetching every package once per node
    /// starts to cost.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The node that runs the cache (default: the Slurm controller, else the first node).
    #[serde(default)]
    pub host: Option<String>,
    /// Port the cache listens on (default 3142, apt-cacher-ng's).
    #[serde(default)]
    pub port: Option<u16>,
    /// The cache's own way out, when the site reaches mirrors through an HTTP proxy
    /// (`http://proxy.example.org:3128`).
    #[serde(default)]
    pub upstream_proxy: Option<String>,
    /// The site's existing apt proxy or cache (`http://apt.example.org:3142`): every
    /// node uses it and no cache is deployed.
    #[serde(default)]
    pub site_proxy: Option<String>,
}

/// Clusters with more nodes than this get a package cache unless it is turned off.
pub const PACKAGE_CACHE_AUTO_NODES: usize = 8;

/// What a bare-metal node's BMC should report, set through Redfish before the node
/// is configured over SSH.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HardwareProfile {
    /// Power state the node should be in.
    #[serde(default)]
    pub power: DesiredPower,
    /// BIOS attributes by Redfish name (`ProcTurboMode: Enabled`). Most BMCs apply
    /// them at the next boot, so a change restarts a node that is on.
    #[serde(default)]
    pub bios: BTreeMap<String, serde_json::Value>,
    /// Wanted firmware by component (`BIOS`, `BMC`, or a firmware inventory `Id`): a
    /// version only (`BMC: "7.10"`: expected, a mismatch is a plan warning), or
    /// `{version, image, sha256}`, flashed through the BMC's UpdateService when
    /// firmware updates are on (`firmware_updates`, or `--firmware`).
    #[serde(default)]
    pub firmware: BTreeMap<String, FirmwareWanted>,
    /// Flash the components that name an `image` (`--firmware` does it for every
    /// profile of one run). Off: mismatches are only reported.
    #[serde(default)]
    pub firmware_updates: bool,
    /// Flash a wanted version older than the running one, or one the vendor-aware
    /// comparison cannot order (see docs/firmware.md); refused otherwise.
    #[serde(default)]
    pub allow_downgrade: bool,
    /// Boot from the network once when the node is provisioned (powered on from off).
    #[serde(default)]
    pub pxe_on_provision: bool,
}

/// One firmware component a hardware profile wants: written as the version alone
/// (expected only, nothing is flashed) or as `{version, image, sha256}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FirmwareWanted {
    /// The version, exactly as the BMC reports it (`U46 v2.70 (01/11/2023)`, `2.75.75.75`).
    pub version: String,
    /// Where the BMC (or toolkit, for a push) fetches the image: an `http(s)://` URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// SHA-256 of the image, checked before the BMC is asked to take it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The long form of [`FirmwareWanted`], as written in YAML.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FirmwareImage {
    /// The version the image installs, exactly as the BMC reports it afterwards.
    pub version: String,
    /// `http(s)://` URL of the image.
    #[serde(default)]
    pub image: Option<String>,
    /// SHA-256 of the image (64 hex digits).
    #[serde(default)]
    pub sha256: Option<String>,
}

impl From<FirmwareImage> for FirmwareWanted {
    fn from(long: FirmwareImage) -> Self {
        Self { version: long.version, image: long.image, sha256: long.sha256 }
    }
}

impl FirmwareWanted {
    /// A version that is only expected (no image).
    #[must_use]
    pub fn expected(version: &str) -> Self {
        Self { version: version.to_owned(), image: None, sha256: None }
    }
}

impl<'de> Deserialize<'de> for FirmwareWanted {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FirmwareWantedVisitor)
    }
}

struct FirmwareWantedVisitor;

impl<'de> serde::de::Visitor<'de> for FirmwareWantedVisitor {
    type Value = FirmwareWanted;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a version string, or `{version, image, sha256}`")
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<FirmwareWanted, E> {
        Ok(FirmwareWanted::expected(value))
    }

    // YAML reads `2.40` as the number 2.4: the version it meant is lost, so say so.
    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<FirmwareWanted, E> {
        Err(E::custom(format!(
            "YAML reads this version as the number {value}: quote it (`\"2.40\"`) so it stays as the vendor writes it"
        )))
    }

    // A whole number (`7`) reads the same as text.

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<FirmwareWanted, E> {
        Ok(FirmwareWanted::expected(&value.to_string()))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<FirmwareWanted, E> {
        Ok(FirmwareWanted::expected(&value.to_string()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<FirmwareWanted, A::Error> {
        FirmwareImage::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(FirmwareWanted::from)
    }
}

impl JsonSchema for FirmwareWanted {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FirmwareWanted".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let long = generator.subschema_for::<FirmwareImage>();
        schemars::json_schema!({
            "description": "A version only (expected: reported, never flashed), or `{version, image, sha256}`.",
            "anyOf": [{ "type": "string" }, long]
        })
    }
}

impl Blueprint {
    /// Turns firmware updates on for every hardware profile (`--firmware`).
    pub fn enable_firmware_updates(&mut self) {
        for profile in self.hardware_profiles.values_mut() {
            profile.firmware_updates = true;
        }
    }
}

/// Power state of a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DesiredPower {
    /// Powered on (the default).
    #[default]
    On,
    /// Powered off.
    Off,
}

/// Cluster identity.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Short name: Slurm `ClusterName`, resource ids, lock owner. Lowercase letters, digits, `-`.
    pub name: String,
    /// DNS domain appended to host names in `/etc/hosts`.
    #[serde(default)]
    pub domain: Option<String>,
    /// Free text for the report.
    #[serde(default)]
    pub description: Option<String>,
}

/// What a node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Runs the scheduler controller (slurmctld).
    Controller,
    /// Runs the accounting database (slurmdbd + MariaDB).
    Database,
    /// User login node.
    Login,
    /// Runs jobs (slurmd).
    Compute,
    /// Serves shared storage (NFS).
    Storage,
}

/// A set of identical nodes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    /// Group name, referenced by partitions, storage and the inventory.
    pub name: String,
    /// How many nodes.
    pub count: u32,
    /// Host name pattern: `{index}` or `{index:02}` (zero-padded) is the node's number.
    /// Without a placeholder the group must have exactly one node.
    pub hostname: String,
    /// First number given to `{index}`.
    #[serde(default = "default_start_index")]
    pub start_index: u32,
    /// What these nodes do.
    pub roles: Vec<Role>,
    /// CPU topology, as Slurm sees it.
    #[serde(default)]
    pub cpu: Option<Cpu>,
    /// Memory in GiB.
    #[serde(default)]
    pub memory_gib: Option<u32>,
    /// GPUs per node.
    #[serde(default)]
    pub gpu: Option<Gpu>,
    /// Compute-fabric NICs, one per rail.
    #[serde(default)]
    pub rail_nics: Option<RailNics>,
    /// Local NVMe drives (scratch tier).
    #[serde(default)]
    pub local_nvme: Option<LocalNvme>,
    /// Name of a `hardware_profiles` entry its bare-metal nodes' BMCs are set to.
    #[serde(default)]
    pub hardware_profile: Option<String>,
    /// This group's software stack, replacing the top-level `software` as a whole.
    #[serde(default)]
    pub software: Option<Software>,
    /// This group's OS, replacing the top-level `os` as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<Os>,
    /// Kernel module parameters, by module (`nvidia: "NVreg_EnableGpuFirmware=0"`):
    /// written to `/etc/modprobe.d/`, read only when the module loads, so a change
    /// reboots the node (through the rolling rollout on a running cluster).
    #[serde(default)]
    pub module_options: std::collections::BTreeMap<String, String>,
    /// Nodes of a compute group kept healthy but out of the tenants' partitions (in a
    /// low-priority `spare` partition): when a node goes to RMA, a spare of the same
    /// scalable unit takes its place, so the tenants' guarantees stay met.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spares: u32,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_zero(value: &u32) -> bool {
    *value == 0
}

const fn default_start_index() -> u32 {
    1
}

/// CPU topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// Sockets per node.
    pub sockets: u32,
    /// Cores per socket.
    pub cores_per_socket: u32,
    /// Hardware threads per core.
    #[serde(default = "one")]
    pub threads_per_core: u32,
}

const fn one() -> u32 {
    1
}

/// GPUs of a node.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Model: `a100`, `h100`, `h200`, `b200`, `gb200`, `l40s`…
    pub model: String,
    /// GPUs per node.
    pub count: u32,
}

/// Link layer of a NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LinkLayer {
    /// InfiniBand.
    Infiniband,
    /// Ethernet (RoCE).
    Ethernet,
}

/// One NIC per rail.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RailNics {
    /// NICs per node, one per rail.
    pub count: u32,
    /// Port speed in Gb/s.
    pub speed_gbps: u32,
    /// InfiniBand or Ethernet.
    pub link_layer: LinkLayer,
    /// Host MTU (Ethernet); defaults to the fabric's host MTU.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Interface name pattern, `{rail}` is the rail number.
    #[serde(default = "default_netdev")]
    pub netdev: String,
}

fn default_netdev() -> String {
    "rail{rail}".to_owned()
}

/// Local NVMe drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalNvme {
    /// Drives per node.
    pub count: u32,
    /// Size of each drive in GB.
    pub size_gb: u32,
}

/// All networks.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    /// The GPU (east-west) fabric.
    pub compute: ComputeFabric,
    /// Storage network, when separate from management.
    #[serde(default)]
    pub storage: Option<Network>,
    /// In-band and out-of-band management.
    pub management: Management,
}

/// Compute fabric technology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FabricKind {
    /// InfiniBand with a subnet manager.
    Infiniband,
    /// RDMA over Converged Ethernet, routed (BGP) leaf/spine.
    Roce,
}

/// Fabric shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FabricTopology {
    /// One leaf per (rail, scalable unit); all rails meet at the spines.
    #[default]
    RailOptimized,
}

/// The compute fabric.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComputeFabric {
    /// `infiniband` or `roce`.
    pub kind: FabricKind,
    /// Only `rail-optimized` for now.
    #[serde(default)]
    pub topology: FabricTopology,
    /// Number of rails (NICs per node used for compute).
    pub rails: u32,
    /// Link speed in Gb/s (switch port speed at NIC speed).
    pub link_speed_gbps: u32,
    /// Switch model and radix.
    pub switch: SwitchSpec,
    /// Leaf downlink:uplink bandwidth ratio, `1:1` is non-blocking.
    #[serde(default = "default_oversubscription")]
    pub oversubscription: String,
    /// Uplinks per leaf, when not derived from radix and oversubscription.
    #[serde(default)]
    pub uplinks_per_leaf: Option<u32>,
    /// Switch port MTU (9216 Ethernet, 4096 InfiniBand).
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Host MTU on rail interfaces (9000 converged, 4200 RDMA-only).
    #[serde(default)]
    pub host_mtu: Option<u32>,
    /// RoCE lossless settings (Ethernet only).
    #[serde(default)]
    pub roce: Option<RoceQos>,
    /// InfiniBand settings.
    #[serde(default)]
    pub infiniband: Option<InfinibandSpec>,
    /// Address and ASN pools.
    pub addressing: Addressing,
}

fn default_oversubscription() -> String {
    "1:1".to_owned()
}

/// Switch hardware.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// Model, e.g. `qm9700`, `sn5600`, `frr-container`.
    pub model: String,
    /// Ports at link speed.
    pub radix: u32,
}

/// RoCE congestion handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RoceMode {
    /// PFC on the RoCE priority plus ECN.
    #[default]
    Lossless,
    /// ECN only.
    Lossy,
}

/// RoCE QoS, NVIDIA defaults: DSCP 26 → priority 3 (PFC), CNP DSCP 48 → priority 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoceQos {
    /// `lossless` (PFC + ECN) or `lossy` (ECN only).
    #[serde(default)]
    pub mode: RoceMode,
    /// Priority with PFC enabled; required for lossless.
    #[serde(default)]
    pub pfc_priority: Option<u8>,
    /// ECN marking on the RoCE traffic class.
    #[serde(default)]
    pub ecn: bool,
    /// DSCP of RoCE data.
    #[serde(default = "default_dscp")]
    pub dscp: u8,
    /// DSCP of congestion notification packets.
    #[serde(default = "default_cnp_dscp")]
    pub cnp_dscp: u8,
}

const fn default_dscp() -> u8 {
    26
}

const fn default_cnp_dscp() -> u8 {
    48
}

/// InfiniBand settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InfinibandSpec {
    /// Subnet manager placement.
    pub subnet_manager: SubnetManager,
    /// Partitions (PKeys), typically one per tenant.
    #[serde(default)]
    pub pkeys: Vec<PKey>,
}

/// Where the subnet manager runs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubnetManager {
    /// `opensm` on hosts, or `ufm` appliances.
    pub kind: SubnetManagerKind,
    /// Node groups that run OpenSM (master = highest priority).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Routing engines in order (`ftree,updn` suits rail-optimized fat trees).
    #[serde(default = "default_routing_engine")]
    pub routing_engine: String,
}

fn default_routing_engine() -> String {
    "ftree,updn".to_owned()
}

/// Subnet manager implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubnetManagerKind {
    /// Upstream OpenSM on hosts.
    Opensm,
    /// NVIDIA UFM appliance (partitions via its API).
    Ufm,
}

/// An InfiniBand partition.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PKey {
    /// Partition name.
    pub name: String,
    /// PKey, hex `0x0001`–`0x7ffe`.
    pub pkey: String,
    /// Tenants that are full members.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Create an IPoIB interface for it.
    #[serde(default)]
    pub ipoib: bool,
}

/// Address and ASN pools of the compute fabric.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Addressing {
    /// Pool split into one subnet per (rail, leaf), e.g. `10.200.0.0/16`.
    pub rail_pool: String,
    /// Pool for switch loopbacks (router ids), e.g. `10.0.0.0/24`.
    pub loopback_pool: String,
    /// ASN shared by all spines (RFC 7938).
    #[serde(default = "default_spine_asn")]
    pub spine_asn: u32,
    /// First leaf ASN; leaf `n` gets `leaf_asn_base + n`.
    #[serde(default = "default_leaf_asn_base")]
    pub leaf_asn_base: u32,
    /// ASN shared by all core switches (3-tier fabrics).
    #[serde(default = "default_core_asn")]
    pub core_asn: u32,
}

const fn default_spine_asn() -> u32 {
    4_200_000_000
}

const fn default_leaf_asn_base() -> u32 {
    4_200_000_100
}

const fn default_core_asn() -> u32 {
    4_200_000_001
}

/// A plain IP network.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Subnet in CIDR form.
    pub subnet: String,
    /// MTU on hosts.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Port speed in Gb/s.
    #[serde(default)]
    pub speed_gbps: Option<u32>,
}

/// Management networks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Management {
    /// In-band (SSH, scheduler, DNS).
    pub inband: Network,
    /// Out-of-band (BMCs, switch management).
    #[serde(default)]
    pub oob: Option<Network>,
}

/// Storage.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    /// Shared filesystems, mounted on nodes.
    #[serde(default)]
    pub filesystems: Vec<Filesystem>,
    /// Node-local scratch on NVMe.
    #[serde(default)]
    pub scratch: Option<Scratch>,
    /// An object store endpoint for datasets and checkpoints.
    #[serde(default)]
    pub object: Option<ObjectStore>,
}

/// Shared filesystem kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FilesystemKind {
    /// NFS served by a node group of this cluster, or an external server.
    Nfs,
    /// Lustre (external MGS).
    Lustre,
}

/// Storage tier of a filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Shared, persistent.
    #[default]
    Shared,
    /// Home directories.
    Home,
    /// Fast scratch.
    Scratch,
}

/// A shared filesystem.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Filesystem {
    /// Name.
    pub name: String,
    /// `nfs` or `lustre`.
    pub kind: FilesystemKind,
    /// Node group that serves it (NFS inside the cluster).
    #[serde(default)]
    pub server_group: Option<String>,
    /// External endpoint: `host:/export` (NFS) or `mgs@tcp:/fsname` (Lustre).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Exported directory on the server group.
    #[serde(default)]
    pub export: Option<String>,
    /// Where nodes mount it.
    pub mount: String,
    /// Mount options.
    #[serde(default)]
    pub options: Option<String>,
    /// Node groups that mount it; all non-server groups when empty.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Tier.
    #[serde(default)]
    pub tier: Tier,
    /// Performance the filesystem is expected to deliver (vendor-committed or designed),
    /// aggregate over all compute nodes; the `storage-ior` and `storage-mdtest`
    /// acceptance tests require it. Without it they use conservative floors that only
    /// catch a broken or misrouted filesystem.
    #[serde(default)]
    pub expected: Option<FilesystemExpectation>,
}

/// Aggregate performance a shared filesystem must deliver to all compute nodes at
/// once: bandwidth in GB/s (10^9 bytes per second, not gigabits) and metadata rates in
/// operations per second. Each value is optional; a missing one keeps the default floor.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilesystemExpectation {
    /// Aggregate sequential read, GB/s (IOR file-per-process).
    #[serde(default)]
    pub read_gb_per_s: Option<f64>,
    /// Aggregate sequential write, GB/s (IOR file-per-process).
    #[serde(default)]
    pub write_gb_per_s: Option<f64>,
    /// File creations per second, all clients together (mdtest).
    #[serde(default)]
    pub create_ops: Option<f64>,
    /// File stats per second, all clients together (mdtest).
    #[serde(default)]
    pub stat_ops: Option<f64>,
    /// File removals per second, all clients together (mdtest).
    #[serde(default)]
    pub remove_ops: Option<f64>,
}

impl FilesystemExpectation {
    /// Every value with its key and unit, in a fixed order.
    #[must_use]
    pub fn values(&self) -> [(&'static str, Option<f64>, &'static str); 5] {
        [
            ("read_gb_per_s", self.read_gb_per_s, "GB/s"),
            ("write_gb_per_s", self.write_gb_per_s, "GB/s"),
            ("create_ops", self.create_ops, "ops/s"),
            ("stat_ops", self.stat_ops, "ops/s"),
            ("remove_ops", self.remove_ops, "ops/s"),
        ]
    }
}

/// Node-local scratch.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scratch {
    /// Mount point.
    pub mount: String,
    /// Filesystem made on the NVMe RAID 0.
    #[serde(default = "default_scratch_fs")]
    pub filesystem: String,
}

fn default_scratch_fs() -> String {
    "xfs".to_owned()
}

/// Object storage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectStore {
    /// S3-compatible endpoint URL.
    pub endpoint: String,
    /// Bucket.
    #[serde(default)]
    pub bucket: Option<String>,
}

/// Scheduler kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerKind {
    /// Slurm.
    Slurm,
    /// Kubernetes with Kueue.
    Kubernetes,
}

/// The workload manager.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scheduler {
    /// `slurm` or `kubernetes`.
    pub kind: SchedulerKind,
    /// Slurm settings (kind `slurm`).
    #[serde(default)]
    pub slurm: Option<Slurm>,
    /// Kubernetes settings (kind `kubernetes`).
    #[serde(default)]
    pub kubernetes: Option<Kubernetes>,
}

/// Slurm settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Slurm {
    /// Oldest Slurm release the configs must run on (`22.05` is Debian 12's).
    #[serde(default = "default_slurm_version")]
    pub min_version: String,
    /// Partitions.
    pub partitions: Vec<Partition>,
    /// GPU sharing.
    #[serde(default)]
    pub gpu_sharing: GpuSharing,
    /// Topology plugin: `tree` (one switch per scalable unit), `block` (23.11+), `none`.
    #[serde(default)]
    pub topology: SlurmTopology,
    /// Accounting through slurmdbd (required for QOS, quotas and fair share).
    #[serde(default = "yes")]
    pub accounting: bool,
    /// Fair-share half life (`7-0` = 7 days).
    #[serde(default)]
    pub fairshare_half_life: Option<String>,
    /// How borrowed GPUs are reclaimed: `requeue` or `cancel` (`suspend` keeps GPUs held).
    #[serde(default)]
    pub preempt_mode: PreemptMode,
    /// Extra lines for slurm.conf, `Key=Value`, checked against the target version.
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

fn default_slurm_version() -> String {
    "22.05".to_owned()
}

const fn yes() -> bool {
    true
}

/// A Slurm partition.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    /// Name.
    pub name: String,
    /// Node groups in it.
    pub groups: Vec<String>,
    /// The default partition.
    #[serde(default)]
    pub default: bool,
    /// Max wall time (`INFINITE`, `2-00:00:00`).
    #[serde(default)]
    pub max_time: Option<String>,
    /// Exclusive node allocation (rendered as `OverSubscribe=EXCLUSIVE`).
    #[serde(default)]
    pub exclusive: bool,
    /// The job shapes the partition must run: lint refuses one that no NVLink domain
    /// of the partition can hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_shapes: Vec<JobShape>,
}

/// A job the partition must run: so many nodes, in segments that each stay inside one
/// NVLink domain (`sbatch --nodes=N --segment=S`, Slurm 24.05+ with `topology/block`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobShape {
    /// Nodes of the job.
    pub nodes: u32,
    /// Nodes per segment; each segment is placed inside one NVLink domain. Without it
    /// the job may span domains.
    #[serde(default)]
    pub segment: Option<u32>,
}

/// GPU sharing mode.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuSharing {
    /// `none`, `shard`, `mps` or `mig`.
    #[serde(default)]
    pub mode: GpuSharingMode,
    /// Shards per GPU (mode `shard`) or MPS share count (mode `mps`).
    #[serde(default)]
    pub per_gpu: Option<u32>,
    /// MIG profiles per GPU, e.g. `[1g.10gb, 1g.10gb, 2g.20gb]` (mode `mig`).
    #[serde(default)]
    pub mig_profiles: Vec<String>,
}

/// GPU sharing mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuSharingMode {
    /// Whole GPUs only.
    #[default]
    None,
    /// Slurm `gres/shard` (unfenced sharing).
    Shard,
    /// CUDA MPS.
    Mps,
    /// Multi-Instance GPU partitions.
    Mig,
}

/// Slurm topology plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SlurmTopology {
    /// `topology/tree`: one switch per scalable unit under one spine switch.
    #[default]
    Tree,
    /// `topology/block` (Slurm 23.11+).
    Block,
    /// No topology.
    None,
}

/// Slurm preemption mode for borrowed GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreemptMode {
    /// Requeue the borrowing job.
    #[default]
    Requeue,
    /// Cancel the borrowing job.
    Cancel,
    /// Suspend it (does not release GPUs: rejected).
    Suspend,
}

/// Kubernetes settings: the cluster's mode, Kueue for tenant quotas, and the NVIDIA
/// GPU and Network Operators for the GPU platform layer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Kubernetes {
    /// `existing`: a managed or already-installed cluster (toolkit adds the GPU
    /// platform layer and the quotas); `kubeadm`: bare metal that toolkit bootstraps.
    #[serde(default)]
    pub mode: KubernetesMode,
    /// Kubernetes release the objects are written for (`1.33`): the schemas they are
    /// checked against, and kubeadm's `kubernetesVersion`.
    #[serde(default = "default_kubernetes_version")]
    pub version: String,
    /// Kueue version (decides `v1beta1` before 0.15, `v1beta2` from 0.15 on).
    #[serde(default = "default_kueue_version")]
    pub kueue_version: String,
    /// Cohort every tenant's ClusterQueue joins (lends and borrows in); defaults to the
    /// cluster name.
    #[serde(default)]
    pub cohort: Option<String>,
    /// Topology-aware scheduling: a Kueue `Topology` built from the fabric (superpod,
    /// scalable unit, host), referenced by every GPU ResourceFlavor (Kueue 0.14+).
    #[serde(default = "yes")]
    pub topology_aware: bool,
    /// GPU sharing through the GPU Operator: `shard` is time-slicing, `mps` CUDA MPS,
    /// `mig` MIG partitions.
    #[serde(default)]
    pub gpu_sharing: GpuSharing,
    /// The NVIDIA GPU Operator's chart, namespace and driver.
    #[serde(default)]
    pub gpu_operator: GpuOperator,
    /// The NVIDIA Network Operator (RDMA devices for the rails); none without rails.
    #[serde(default)]
    pub network_operator: Option<NetworkOperator>,
    /// Bare-metal bootstrap settings (mode `kubeadm`).
    #[serde(default)]
    pub kubeadm: Option<Kubeadm>,
}

fn default_kubernetes_version() -> String {
    "1.33".to_owned()
}

fn default_kueue_version() -> String {
    "0.15.0".to_owned()
}

/// How toolkit finds the Kubernetes cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KubernetesMode {
    /// A cluster that already runs (managed, or installed by other means).
    #[default]
    Existing,
    /// Bare metal: toolkit writes containerd and kubeadm configurations and joins the nodes.
    Kubeadm,
}

/// The NVIDIA GPU Operator chart toolkit installs (or renders values for).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuOperator {
    /// Chart version (`v25.10.0`).
    #[serde(default = "default_gpu_operator_version")]
    pub version: String,
    /// Namespace the operator runs in.
    #[serde(default = "default_gpu_operator_namespace")]
    pub namespace: String,
    /// Driver container tag when the operator builds the driver (no
    /// `software.gpu_driver`); the chart's default when absent.
    #[serde(default)]
    pub driver_version: Option<String>,
    /// Kernel modules of the operator's driver: `open` or `proprietary`.
    #[serde(default)]
    pub kernel_modules: KernelModules,
}

impl Default for GpuOperator {
    fn default() -> Self {
        Self {
            version: default_gpu_operator_version(),
            namespace: default_gpu_operator_namespace(),
            driver_version: None,
            kernel_modules: KernelModules::default(),
        }
    }
}

fn default_gpu_operator_version() -> String {
    "v25.10.0".to_owned()
}

fn default_gpu_operator_namespace() -> String {
    "gpu-operator".to_owned()
}

/// The NVIDIA Network Operator.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkOperator {
    /// Chart version (`25.7.0`).
    pub version: String,
    /// Namespace the operator runs in.
    #[serde(default = "default_network_operator_namespace")]
    pub namespace: String,
    /// How pods get the rail NICs: `shared` (RDMA shared device plugin, one resource
    /// per rail) or `sriov` (one virtual function per pod and rail).
    #[serde(default)]
    pub rdma: RdmaMode,
    /// Virtual functions per rail NIC (`sriov` only).
    #[serde(default)]
    pub vfs_per_nic: Option<u32>,
}

fn default_network_operator_namespace() -> String {
    "nvidia-network-operator".to_owned()
}

/// How pods reach the rail NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RdmaMode {
    /// RDMA shared device plugin: every pod on a node shares the rail HCAs.
    #[default]
    Shared,
    /// SR-IOV: one virtual function per pod and rail.
    Sriov,
}

/// kubeadm bootstrap settings. The Kubernetes `version` must be an exact release
/// (`1.33.4`): kubeadm's `kubernetesVersion` and the pinned kubelet, kubeadm and
/// kubectl packages from pkgs.k8s.io.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Kubeadm {
    /// Pod network (the CNI's CIDR), e.g. `10.244.0.0/16`.
    pub pod_subnet: String,
    /// Service network.
    #[serde(default = "default_service_subnet")]
    pub service_subnet: String,
    /// API server endpoint `host:port` (a load balancer or VIP for several control
    /// planes); defaults to the first controller's management address, port 6443.
    #[serde(default)]
    pub api_endpoint: Option<String>,
}

fn default_service_subnet() -> String {
    "10.96.0.0/12".to_owned()
}

/// A tenant: a team with a guaranteed share that may borrow idle GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// Name (Slurm account and QOS).
    pub name: String,
    /// Unix user names.
    #[serde(default)]
    pub users: Vec<String>,
    /// GPUs always available to the tenant.
    pub guaranteed_gpus: u32,
    /// May run preemptible jobs on other tenants' idle GPUs.
    #[serde(default = "yes")]
    pub borrow: bool,
    /// Scheduling priority of guaranteed jobs.
    #[serde(default = "default_priority")]
    pub priority: u32,
    /// Fair-share weight.
    #[serde(default)]
    pub fairshare: Option<u32>,
}

const fn default_priority() -> u32 {
    1000
}

/// Acceptance criteria.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    /// `auto`: every built-in validator that applies, thresholds from the model.
    #[serde(default)]
    pub mode: AcceptanceMode,
    /// Validators and threshold overrides.
    #[serde(default)]
    pub validators: Vec<ValidatorRef>,
    /// Fraction of the theoretical bus bandwidth NCCL must reach (default 0.8).
    #[serde(default)]
    pub nccl_efficiency: Option<f64>,
}

/// Acceptance mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AcceptanceMode {
    /// All applicable validators.
    #[default]
    Auto,
    /// Only the listed validators.
    Explicit,
}

/// A validator selection.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidatorRef {
    /// Validator id (`nccl-multi-node`).
    pub id: String,
    /// Threshold overrides by name.
    #[serde(default)]
    pub thresholds: BTreeMap<String, f64>,
    /// Skip it.
    #[serde(default)]
    pub skip: bool,
}

/// The software a GPU node on real hardware needs beyond the OS: rendered for nodes
/// with GPUs (never for the lab's `fake_gpu_devices` nodes).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Software {
    /// Distribution of the nodes: picks the NVIDIA and DOCA repository paths.
    pub os: SoftwareOs,
    /// The NVIDIA GPU driver, from NVIDIA's CUDA apt repository.
    #[serde(default)]
    pub gpu_driver: Option<GpuDriver>,
    /// NVIDIA Fabric Manager: `auto` runs it on GPU models whose GPUs meet at NVSwitches
    /// (A100/H100/H200/H20/B200/B300 SXM baseboards); always the driver's exact version.
    #[serde(default)]
    pub fabric_manager: FabricManagerMode,
    /// The RDMA stack of the rail NICs.
    #[serde(default)]
    pub network: Option<NetworkStack>,
    /// Load `nvidia-peermem` (GPUDirect RDMA through the DOCA/MLNX OFED peer-memory API).
    #[serde(default)]
    pub peermem: bool,
    /// NVIDIA DCGM (health, diagnostics); its `diag_level` is what `dcgm-diag` runs.
    #[serde(default)]
    pub dcgm: Option<Dcgm>,
    /// enroot and the pyxis Slurm plugin (`srun --container-image`).
    #[serde(default)]
    pub containers: Option<Containers>,
    /// Run `nvidia-persistenced` (keeps the driver loaded between jobs).
    #[serde(default = "yes")]
    pub persistenced: bool,
    /// The NVIDIA Container Toolkit on the host (`nvidia-container-toolkit` from the CUDA
    /// repository): under Kubernetes mode `kubeadm` containerd runs GPU nodes' pods with
    /// the NVIDIA runtime by default, and the GPU Operator leaves its own toolkit off.
    #[serde(default)]
    pub container_toolkit: bool,
}

/// Distribution of the GPU nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum SoftwareOs {
    /// Debian 12 (bookworm).
    #[serde(rename = "debian12")]
    Debian12,
    /// Ubuntu 22.04 (jammy).
    #[serde(rename = "ubuntu2204")]
    Ubuntu2204,
}

/// The NVIDIA driver: one exact `version`, or the newest of a `branch`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuDriver {
    /// Exact version, e.g. `550.127.05`: pinned in apt and expected by `gpu-inventory`.
    #[serde(default)]
    pub version: Option<String>,
    /// Driver branch, e.g. `550`: the newest release of it (when no `version` is given).
    #[serde(default)]
    pub branch: Option<u32>,
    /// `open` (required from Blackwell on, recommended from Turing) or `proprietary`.
    #[serde(default)]
    pub kernel_modules: KernelModules,
}

/// Flavour of the NVIDIA kernel modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KernelModules {
    /// The open GPU kernel modules.
    #[default]
    Open,
    /// The proprietary kernel modules.
    Proprietary,
}

/// Whether Fabric Manager runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FabricManagerMode {
    /// On for GPU models with NVSwitch, off otherwise.
    #[default]
    Auto,
    /// Always (an error on GPUs without NVSwitch).
    Enabled,
    /// Never (an error on NVSwitch systems: their GPUs do not initialize without it).
    Disabled,
}

/// The RDMA stack.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkStack {
    /// `doca-ofed`, `mlnx-ofed` or `inbox` (the distribution's rdma-core).
    pub stack: NetworkStackKind,
    /// Release of DOCA (`2.9.1`) or MLNX_OFED (`24.10-1.1.4.0`); none for `inbox`.
    #[serde(default)]
    pub version: Option<String>,
}

/// Which RDMA stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkStackKind {
    /// DOCA-Host's `doca-ofed` profile (successor of MLNX_OFED).
    DocaOfed,
    /// MLNX_OFED (`mlnx-ofed-all`).
    MlnxOfed,
    /// The distribution's own rdma-core.
    Inbox,
}

/// NVIDIA DCGM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dcgm {
    /// Major version: `3` (`datacenter-gpu-manager`) or `4` (`datacenter-gpu-manager-4-cudaN`).
    pub major: u32,
    /// `dcgmi diag -r` level for acceptance: 1 quick, 2 medium, 3 long, 4 extended.
    #[serde(default = "default_diag_level")]
    pub diag_level: u32,
}

const fn default_diag_level() -> u32 {
    3
}

/// Container runtime for Slurm jobs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Containers {
    /// enroot release (`3.5.0`), installed from its GitHub release `.deb`s.
    pub enroot: String,
    /// pyxis release (`0.20.0`), built against the node's Slurm headers.
    pub pyxis: String,
}
