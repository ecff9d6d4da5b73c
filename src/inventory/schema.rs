//! Inventory schema v1: where the hardware of a blueprint is and how to reach it.
//!
//! Stage: load. Input: YAML text. Output: [`Inventory`]. Credentials are only ever
//! references ([`SecretRef`]: an environment variable or a file); an inline secret
//! is rejected when the file is read, so it never enters a plan, log or state.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// Where each node, switch and BMC is.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Schema version; only `1` exists.
    pub version: u32,
    /// Settings every host and switch inherits.
    #[serde(default)]
    pub defaults: Connection,
    /// SSH jump hosts by name, referenced by `proxy_jump`.
    #[serde(default)]
    pub bastions: BTreeMap<String, Host>,
    /// Nodes by host name (as the blueprint names them).
    #[serde(default)]
    pub hosts: BTreeMap<String, Host>,
    /// Switches by name (as the topology names them: `leaf0`, `spine0`…).
    #[serde(default)]
    pub switches: BTreeMap<String, Switch>,
    /// BMCs by node host name.
    #[serde(default)]
    pub bmcs: BTreeMap<String, Bmc>,
    /// Secrets the deploy generates or distributes.
    #[serde(default)]
    pub secrets: Secrets,
    /// Where the offline state of the last deploy is kept.
    #[serde(default)]
    pub state_file: Option<PathBuf>,
    /// Nodes run as cloud instances instead of listed under `hosts`.
    #[serde(default)]
    pub cloud: Option<Cloud>,
    /// The Kubernetes API server of a cluster scheduled by Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesAccess>,
    /// How toolkit's SSH connections behave across runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshSettings>,
    /// The network blank bare-metal nodes boot their OS install from: toolkit runs
    /// DHCP/TFTP/HTTP there while it installs (the blueprint's `os` says what).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
}

/// Where blank nodes network-boot toolkit's installer: an interface of the machine
/// running toolkit on the nodes' management network (as an Ironic conductor or a
/// MAAS rack controller is), served only while nodes install.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Provisioning {
    /// The interface DHCP and TFTP listen on (`br-prov`, `eno2`).
    pub interface: String,
    /// This machine's IPv4 address on that interface: the TFTP and HTTP server the
    /// nodes boot from.
    pub address: std::net::Ipv4Addr,
    /// The management subnet of the nodes (`10.0.0.0/24`): each installed node gets
    /// its inventory `address` with this prefix.
    #[schemars(with = "String")]
    pub subnet: ipnet::Ipv4Net,
    /// The default gateway of the installed nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<std::net::Ipv4Addr>,
    /// DNS servers of the installed nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<std::net::Ipv4Addr>,
    /// TCP port of the HTTP server (default 8069).
    #[serde(default = "default_provisioning_port")]
    pub port: u16,
    /// `dhcp`: toolkit's DHCP answers the nodes it installs, and only them (by MAC);
    /// `proxy`: the site's DHCP gives addresses and toolkit only adds the boot
    /// information (proxy-DHCP), and the installed nodes keep using DHCP.
    #[serde(default)]
    pub dhcp: DhcpMode,
    /// How the installer reaches the nodes: `network` (PXE: DHCP, TFTP, HTTP from
    /// this machine) or `virtual-media` (each node's BMC fetches a boot ISO from this
    /// machine and shows it as a CD: no DHCP or TFTP on the nodes' network; with
    /// `dhcp: dhcp` the agent takes the node's inventory address).
    #[serde(default)]
    pub boot: BootMedium,
    /// Directory of the SSH host keys toolkit generates for the nodes it installs
    /// (private keys, 0600; default `.toolkit/host-keys` next to the inventory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_keys: Option<PathBuf>,
    /// The public key installed for the SSH user (default: `defaults.identity_file` + `.pub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorized_key: Option<PathBuf>,
    /// Where images are built and kept (default `$XDG_CACHE_HOME/toolkit/os`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<PathBuf>,
    /// Run the provisioning service (dnsmasq, the HTTP server) on this host over SSH
    /// instead of on the machine running toolkit — the controller, or a boot server
    /// on the nodes' network; `interface` and `address` are then that host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<ProvisioningHost>,
    /// Seconds a node may take from power-on to its first DHCP request (default 180).
    #[serde(default = "default_dhcp_timeout")]
    pub dhcp_timeout: u64,
    /// Seconds a node may take for the whole install, power-on to SSH (default 1800).
    #[serde(default = "default_install_timeout")]
    pub install_timeout: u64,
}

const fn default_provisioning_port() -> u16 {
    8069
}

const fn default_dhcp_timeout() -> u64 {
    180
}

const fn default_install_timeout() -> u64 {
    1800
}

/// The host the provisioning service runs on. It needs dnsmasq and ipxe (Debian's
/// packages) for network boot, root (DHCP's port), and this machine's architecture:
/// toolkit copies itself there and runs as `toolkit provision-service`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvisioningHost {
    /// SSH address (IP or DNS name).
    pub address: String,
    /// SSH port (default: `defaults.port`, else 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// SSH user (default: `defaults.user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Private key file (default: `defaults.identity_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<PathBuf>,
    /// Directory for toolkit's copy of itself and the files it serves (kept between
    /// runs, named by content; default `/var/lib/toolkit/provision`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// How the installer reaches a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BootMedium {
    /// PXE: toolkit's DHCP (or proxy-DHCP) and TFTP, then HTTP.
    #[default]
    Network,
    /// The BMC's virtual CD (Redfish `VirtualMedia.InsertMedia`), then HTTP.
    VirtualMedia,
}

/// Who gives installing nodes their addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DhcpMode {
    /// toolkit's DHCP, answering only the MACs of the nodes it installs.
    #[default]
    Dhcp,
    /// The site's DHCP; toolkit answers as proxy-DHCP with the boot file only.
    Proxy,
}

/// SSH settings of the controller (not of a host).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SshSettings {
    /// Seconds a background process keeps the connections open after a run for
    /// the next run to reuse; 60 (the default) is Ansible's ControlPersist; 0
    /// closes them when the run ends. `--ssh-persist` overrides it.
    #[serde(default)]
    pub persist: Option<u64>,
}

/// How toolkit reaches the cluster's API server: a kubeconfig, which holds (or
/// points at) the credentials, so none is in the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesAccess {
    /// The kubeconfig file (relative: from where toolkit runs).
    pub kubeconfig: PathBuf,
    /// Its context to use (default: its `current-context`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// What `kubeadm init` and `kubeadm join` need (blueprint mode `kubeadm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm: Option<KubeadmAccess>,
}

/// The cluster CA and the bootstrap token of a kubeadm cluster, by reference: the CA
/// is pushed to the control plane before `kubeadm init` so the joins' `caCertHashes`
/// are known at plan time.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubeadmAccess {
    /// The cluster CA certificate (PEM; relative: from where toolkit runs).
    pub ca_cert: PathBuf,
    /// The CA's private key (PEM), a secret.
    pub ca_key: SecretRef,
    /// The bootstrap token joins authenticate with (`[a-z0-9]{6}.[a-z0-9]{16}`, as
    /// `kubeadm token generate` prints), a secret.
    pub bootstrap_token: SecretRef,
}

/// Cloud provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CloudProvider {
    /// Amazon EC2.
    Aws,
}

/// Nodes of some node groups as cloud instances: one per node, in a placement group,
/// one network interface on the management subnet and one per rail. `toolkit deploy`
/// (API stage) runs them and writes their addresses to `hosts_file`, which this
/// inventory then includes as `hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cloud {
    /// Provider; only `aws`.
    pub provider: CloudProvider,
    /// Region (`us-east-1`).
    #[serde(default)]
    pub region: Option<String>,
    /// API endpoint instead of the region's (an AWS-compatible endpoint, a test server).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Access key id, by reference.
    pub access_key_id: SecretRef,
    /// Secret access key, by reference.
    pub secret_access_key: SecretRef,
    /// Default image (AMI) for every group.
    #[serde(default)]
    pub image_id: Option<String>,
    /// SSH key pair name given to instances.
    #[serde(default)]
    pub key_name: Option<String>,
    /// Cluster placement group holding every instance (created when missing).
    #[serde(default)]
    pub placement_group: Option<String>,
    /// Subnet of the management interface (device 0): the address the SSH stage uses.
    pub management_subnet: String,
    /// One subnet per rail, rail 0 first; each node gets one interface per rail.
    #[serde(default)]
    pub rail_subnets: Vec<String>,
    /// Security groups of every interface.
    #[serde(default)]
    pub security_groups: Vec<String>,
    /// Rail interfaces are Elastic Fabric Adapters, one per network card (p4d, p5).
    #[serde(default)]
    pub efa: bool,
    /// Instance settings by blueprint node group; only these groups run in the cloud.
    pub node_groups: BTreeMap<String, CloudGroup>,
    /// Where deploy writes the instances' addresses (an inventory `hosts` map);
    /// default: `<inventory file stem>.cloud-hosts.yaml` beside the inventory.
    #[serde(default)]
    pub hosts_file: Option<PathBuf>,
}

/// Instance settings of one node group.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloudGroup {
    /// Instance type (`p5.48xlarge`).
    pub instance_type: String,
    /// Image for this group instead of the cloud's `image_id`.
    #[serde(default)]
    pub image_id: Option<String>,
}

/// SSH connection settings; every field optional so hosts inherit `defaults`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// SSH port.
    #[serde(default)]
    pub port: Option<u16>,
    /// SSH user.
    #[serde(default)]
    pub user: Option<String>,
    /// Run commands through sudo.
    #[serde(default)]
    #[serde(rename = "become")]
    pub sudo: Option<bool>,
    /// Private key file.
    #[serde(default)]
    pub identity_file: Option<PathBuf>,
    /// known_hosts file used to check host keys.
    #[serde(default)]
    pub known_hosts: Option<PathBuf>,
    /// Bastion name from `bastions`.
    #[serde(default)]
    pub proxy_jump: Option<String>,
}

/// A host reachable over SSH.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Management address (IP or DNS name).
    pub address: String,
    /// SSH port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// SSH user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Run commands through sudo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "become")]
    pub sudo: Option<bool>,
    /// Private key file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<PathBuf>,
    /// Bastion name from `bastions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_jump: Option<String>,
    /// Rail NIC MAC addresses by rail. Deploy names each NIC after its rail
    /// (`rail0`…) by this MAC, where the OS has not named it so already.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rail_macs: BTreeMap<u32, String>,
    /// MACs of the node's Ethernet interfaces as its BMC reports them (`toolkit inspect
    /// --write-inventory` fills them in): network boot answers any of them, so nobody
    /// types MACs or guesses which port the firmware boots from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boot_macs: Vec<String>,
    /// No GPUs here (a lab or CI container): deploy creates the character devices
    /// `/dev/nvidia0…` (major 195) that Slurm's `gres.conf` names, so slurmd starts.
    /// Never set it on a machine with NVIDIA GPUs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fake_gpu_devices: bool,
    /// Host variables for `toolkit push` manifests (`{{ name }}` in templates and paths).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
}

/// Switch operating system flavour: decides which config is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchOs {
    /// Plain FRR on Linux (`/etc/frr/frr.conf`).
    Frr,
    /// NVIDIA Cumulus Linux with NVUE startup YAML.
    CumulusNvue,
    /// SONiC (CONFIG_DB JSON).
    Sonic,
}

/// A switch.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// Management address.
    pub address: String,
    /// OS flavour.
    pub os: SwitchOs,
    /// SSH port.
    #[serde(default)]
    pub port: Option<u16>,
    /// SSH user.
    #[serde(default)]
    pub user: Option<String>,
    /// Switch ports in the order the cabling plan numbers them (`swp1`, `eth1`…);
    /// defaults to `swp<n>`.
    #[serde(default)]
    pub port_prefix: Option<String>,
    /// MAC address of each port by the name toolkit gives it (`swp26`, and `hosts`
    /// for a leaf's interface toward its nodes). On a switch whose OS names ports
    /// otherwise (a Linux box running FRR, the lab's containers), deploy renames the
    /// interface with that MAC to that name before FRR starts. Cumulus and SONiC name
    /// their ports themselves: leave it empty there.
    #[serde(default)]
    pub port_macs: BTreeMap<String, String>,
}

/// A BMC reachable over Redfish.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bmc {
    /// Redfish base URL.
    pub endpoint: String,
    /// User name.
    pub username: SecretRef,
    /// Password.
    pub password: SecretRef,
    /// CA bundle for the BMC's TLS certificate.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification for this endpoint only.
    #[serde(default)]
    pub insecure: bool,
    /// Its IPMI-over-LAN interface, scraped by the monitoring host's IPMI exporter
    /// with the same user and password; a BMC without it is not scraped (many ship
    /// with IPMI over LAN off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipmi: Option<BmcIpmi>,
}

/// How the IPMI exporter reaches a BMC over LAN (FreeIPMI's settings).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BmcIpmi {
    /// Address of the BMC's IPMI interface (UDP 623); default: the host of `endpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `LAN_2_0` (RMCP+, the default) or `LAN` (IPMI 1.5, older or simulated BMCs).
    #[serde(default)]
    pub driver: IpmiDriver,
}

/// FreeIPMI's out-of-band driver types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
pub enum IpmiDriver {
    /// IPMI 2.0 RMCP+.
    #[default]
    #[serde(rename = "LAN_2_0")]
    Lan20,
    /// IPMI 1.5.
    #[serde(rename = "LAN")]
    Lan,
}

impl IpmiDriver {
    /// The name FreeIPMI (and the exporter's `driver:`) uses.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lan20 => "LAN_2_0",
            Self::Lan => "LAN",
        }
    }
}

/// Secrets of the cluster, by reference.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Secrets {
    /// The munge key: generated into this file on first deploy when absent.
    #[serde(default)]
    pub munge_key: Option<SecretRef>,
    /// The slurmdbd database password.
    #[serde(default)]
    pub slurmdbd_password: Option<SecretRef>,
    /// Secrets the blueprint references by name (an alert webhook's URL, an SMTP
    /// password: `url_secret: alert_webhook_url`).
    #[serde(default)]
    pub named: BTreeMap<String, SecretRef>,
}

/// A reference to a secret: `{env: NAME}` or `{file: PATH}`, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SecretRef {
    /// An environment variable's name.
    Env(String),
    /// A file holding the secret.
    File(PathBuf),
}

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SecretRefVisitor)
    }
}

struct SecretRefVisitor;

const INLINE_SECRET: &str = "secrets are never written inline: use `{env: VARIABLE}` or `{file: PATH}`";

impl<'de> Visitor<'de> for SecretRefVisitor {
    type Value = SecretRef;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("`{env: VARIABLE}` or `{file: PATH}`")
    }

    fn visit_str<E: de::Error>(self, _value: &str) -> Result<SecretRef, E> {
        Err(E::custom(INLINE_SECRET))
    }

    fn visit_i64<E: de::Error>(self, _value: i64) -> Result<SecretRef, E> {
        Err(E::custom(INLINE_SECRET))
    }

    fn visit_u64<E: de::Error>(self, _value: u64) -> Result<SecretRef, E> {
        Err(E::custom(INLINE_SECRET))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SecretRef, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::custom("empty secret reference: use `{env: VARIABLE}` or `{file: PATH}`"));
        };
        let reference = match key.as_str() {
            "env" => SecretRef::Env(map.next_value()?),
            "file" => SecretRef::File(map.next_value()?),
            other => return Err(de::Error::unknown_field(other, &["env", "file"])),
        };
        if map.next_key::<String>()?.is_some() {
            return Err(de::Error::custom("a secret reference has exactly one of `env` or `file`"));
        }
        Ok(reference)
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(name) => write!(formatter, "env:{name}"),
            Self::File(path) => write!(formatter, "file:{}", path.display()),
        }
    }
}
