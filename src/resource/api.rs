//! The desired state of API objects: a BMC's power state, boot override and BIOS
//! attributes, cloud instances and placement groups, and Kubernetes objects.
//!
//! Stage: render → graph → plan (core data). Input: what render decides for each
//! node. Output: [`ApiDesired`] values, carried by [`Desired::Api`](super::Desired::Api),
//! with the id, kind, name and value every other resource has. Pure data: the HTTP
//! clients that observe and change these objects live in `bmc` and `cloud`, and the
//! comparison with what they observed in `plan`.
//!
//! Values compared are short texts (`On`, `Pxe/Once`, `Enabled`,
//! `p5.48xlarge ami-…`): they are what a plan shows as before and after.

use std::collections::BTreeMap;

use serde_json::Value;

pub use super::kube::KubeObject;

/// A system's power state as Redfish reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PowerState {
    /// Running.
    On,
    /// Off.
    Off,
    /// Turning on.
    PoweringOn,
    /// Turning off.
    PoweringOff,
    /// Paused (virtual systems).
    Paused,
}

impl PowerState {
    /// The Redfish spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "On",
            Self::Off => "Off",
            Self::PoweringOn => "PoweringOn",
            Self::PoweringOff => "PoweringOff",
            Self::Paused => "Paused",
        }
    }

    /// Parses the Redfish spelling.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::On, Self::Off, Self::PoweringOn, Self::PoweringOff, Self::Paused]
            .into_iter()
            .find(|state| state.as_str() == text)
    }
}

/// Boot source override targets used by toolkit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootTarget {
    /// Network boot (PXE).
    Pxe,
    /// Local disk.
    Hdd,
    /// Virtual or physical CD.
    Cd,
    /// UEFI HTTP boot.
    UefiHttp,
    /// BIOS setup.
    BiosSetup,
    /// No override.
    None,
}

impl BootTarget {
    /// The Redfish spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pxe => "Pxe",
            Self::Hdd => "Hdd",
            Self::Cd => "Cd",
            Self::UefiHttp => "UefiHttp",
            Self::BiosSetup => "BiosSetup",
            Self::None => "None",
        }
    }
}

/// One network interface of a node: one per rail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailInterface {
    /// Subnet of the rail.
    pub subnet_id: String,
    /// Network card (multi-card instances such as p5 have one per rail).
    pub network_card_index: u32,
    /// Device index on the instance.
    pub device_index: u32,
    /// Security groups.
    pub security_group_ids: Vec<String>,
    /// `efa` for Elastic Fabric Adapter rails; `None` for a plain ENA interface.
    pub interface_type: Option<String>,
}

/// Whether a boot override lasts for one boot or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootEnabled {
    /// The next boot only (what provisioning uses).
    Once,
    /// Every boot until changed.
    Continuous,
}

impl BootEnabled {
    /// The Redfish spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "Once",
            Self::Continuous => "Continuous",
        }
    }
}

/// One API object as it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiDesired {
    /// A node's power state (through its BMC).
    Power {
        /// Node (inventory host).
        host: String,
        /// `On` or `Off`.
        state: PowerState,
    },
    /// A node's boot override. A `Once` override is consumed by the boot it
    /// causes, after which it plans again: it belongs to a provisioning step.
    BootOverride {
        /// Node.
        host: String,
        /// Target.
        target: BootTarget,
        /// Once or continuous.
        enabled: BootEnabled,
    },
    /// One BIOS attribute of a node.
    BiosAttribute {
        /// Node.
        host: String,
        /// Attribute name.
        name: String,
        /// Value.
        value: Value,
    },
    /// One firmware component of a node, flashed through the BMC's UpdateService
    /// from `image` when it reports another version.
    Firmware {
        /// Node.
        host: String,
        /// `BIOS`, `BMC`, or a firmware inventory `Id`.
        component: String,
        /// The version wanted, as the BMC reports it.
        version: String,
        /// `http(s)://` URL of the image.
        image: String,
        /// SHA-256 of the image.
        sha256: String,
        /// Flash even when the running version is newer or not comparable.
        allow_downgrade: bool,
    },
    /// A cloud instance of a cluster.
    Instance {
        /// Cluster (`toolkit:cluster` tag).
        cluster: String,
        /// Node (`toolkit:node` tag).
        node: String,
        /// Instance type.
        instance_type: String,
        /// AMI.
        image_id: String,
        /// Present, or absent (to be terminated).
        present: bool,
        /// SSH key pair.
        key_name: Option<String>,
        /// Interfaces: management first, then one per rail.
        interfaces: Vec<RailInterface>,
        /// Cluster placement group to run in.
        placement_group: Option<String>,
    },
    /// A cluster placement group (`cloud:placement-group:<name>`).
    PlacementGroup {
        /// Cluster that owns it.
        cluster: String,
        /// Group name.
        name: String,
    },
    /// A Kubernetes object applied with server-side apply
    /// (`kubernetes:k8s:ClusterQueue/team-a`).
    Kubernetes(Box<KubeObject>),
}

/// Whether a plan change of this kind is an API object (see [`ApiDesired::kind`]).
#[must_use]
pub fn is_api_kind(kind: &str) -> bool {
    matches!(kind, "power" | "boot" | "bios" | "firmware" | "instance" | "placement-group" | KUBERNETES_KIND)
}

/// Kind of every Kubernetes object in ids and plans.
pub const KUBERNETES_KIND: &str = "k8s";

/// Target name of Kubernetes objects: the cluster's API server.
pub const KUBERNETES_TARGET: &str = "kubernetes";

/// Target name of cluster-wide cloud objects (placement groups).
pub const CLOUD_TARGET: &str = "cloud";

/// Observed values by resource id; `None` when the object does not exist.
pub type Observed = BTreeMap<String, Option<String>>;

/// A JSON value as a plan shows it: a string without its quotes, anything else as JSON.
#[must_use]
pub fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

impl ApiDesired {
    /// The host or node the object belongs to.
    #[must_use]
    pub fn target(&self) -> &str {
        match self {
            Self::Power { host, .. }
            | Self::BootOverride { host, .. }
            | Self::BiosAttribute { host, .. }
            | Self::Firmware { host, .. } => host,
            Self::Instance { node, .. } => node,
            Self::PlacementGroup { .. } => CLOUD_TARGET,
            Self::Kubernetes(_) => KUBERNETES_TARGET,
        }
    }

    /// Whether it is set on a node's BMC (power, boot override, BIOS, firmware).
    #[must_use]
    pub fn is_bmc(&self) -> bool {
        matches!(
            self,
            Self::Power { .. } | Self::BootOverride { .. } | Self::BiosAttribute { .. } | Self::Firmware { .. }
        )
    }

    /// The Kubernetes object, when it is one.
    #[must_use]
    pub fn kubernetes(&self) -> Option<&KubeObject> {
        match self {
            Self::Kubernetes(object) => Some(object),
            _ => None,
        }
    }

    /// Whether it lives at a cloud provider (not on a BMC).
    #[must_use]
    pub fn is_cloud(&self) -> bool {
        matches!(self, Self::Instance { .. } | Self::PlacementGroup { .. })
    }

    /// Kind, as in ids and plans.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Power { .. } => "power",
            Self::BootOverride { .. } => "boot",
            Self::BiosAttribute { .. } => "bios",
            Self::Firmware { .. } => "firmware",
            Self::Instance { .. } => "instance",
            Self::PlacementGroup { .. } => "placement-group",
            Self::Kubernetes(_) => KUBERNETES_KIND,
        }
    }

    /// Name within the target.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Self::Power { .. } => "system".to_owned(),
            Self::BootOverride { .. } => "override".to_owned(),
            Self::BiosAttribute { name, .. } | Self::PlacementGroup { name, .. } => name.clone(),
            Self::Firmware { component, .. } => component.clone(),
            Self::Instance { cluster, .. } => cluster.clone(),
            Self::Kubernetes(object) => object.display(),
        }
    }

    /// Stable id `<target>:<kind>:<name>`, like every other resource's.
    #[must_use]
    pub fn id(&self) -> String {
        format!("{}:{}:{}", self.target(), self.kind(), self.name())
    }

    /// The value it should have; `None` for an instance that should not exist.
    #[must_use]
    pub fn value(&self) -> Option<String> {
        match self {
            Self::Power { state, .. } => Some(state.as_str().to_owned()),
            Self::BootOverride { target, enabled, .. } => Some(format!("{}/{}", target.as_str(), enabled.as_str())),
            Self::BiosAttribute { value, .. } => Some(value_text(value)),
            Self::Firmware { version, .. } => Some(version.clone()),
            Self::Instance { instance_type, image_id, present, .. } => {
                present.then(|| format!("{instance_type} {image_id}"))
            }
            Self::PlacementGroup { .. } => Some("cluster".to_owned()),
            Self::Kubernetes(object) => Some(object.yaml()),
        }
    }
}
