//! API objects as desired state: a BMC's power state, boot override and BIOS
//! attributes, and cloud instances, observed and diffed like files are.
//!
//! Stage: observe → plan (API targets). Input: [`ApiDesired`] items and a connected
//! [`Redfish`] or [`Ec2`]. Output: [`Observed`] values by resource id, then
//! [`plan::Change`](crate::plan::Change)s (create / update / remove / no-op with
//! before and after) in the same shape as file changes, so the lead can merge them
//! into a plan. [`diff`] is pure; only the `observe_*` functions touch the network.
//!
//! Values compared are short texts (`On`, `Pxe/Once`, `Enabled`,
//! `p5.48xlarge ami-…`): they are what a plan shows as before and after.

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::BmcError;
use super::redfish::{BootTarget, PowerState, Redfish};
use crate::cloud::{CLUSTER_TAG, CloudError, Ec2, NODE_TAG, NodeSpec, RailInterface};
use crate::plan::{Action, Change};

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
}

/// Whether a plan change of this kind is an API object (see [`ApiDesired::kind`]).
#[must_use]
pub fn is_api_kind(kind: &str) -> bool {
    matches!(kind, "power" | "boot" | "bios" | "instance" | "placement-group")
}

/// Target name of cluster-wide cloud objects (placement groups).
pub const CLOUD_TARGET: &str = "cloud";

/// Observed values by resource id; `None` when the object does not exist.
pub type Observed = BTreeMap<String, Option<String>>;

fn value_text(value: &Value) -> String {
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
            Self::Power { host, .. } | Self::BootOverride { host, .. } | Self::BiosAttribute { host, .. } => host,
            Self::Instance { node, .. } => node,
            Self::PlacementGroup { .. } => CLOUD_TARGET,
        }
    }

    /// Whether it lives at a cloud provider (not on a BMC).
    #[must_use]
    pub fn is_cloud(&self) -> bool {
        matches!(self, Self::Instance { .. } | Self::PlacementGroup { .. })
    }

    /// What `RunInstances` needs for an instance item.
    #[must_use]
    pub fn node_spec(&self) -> Option<NodeSpec> {
        match self {
            Self::Instance { node, instance_type, image_id, key_name, interfaces, .. } => Some(NodeSpec {
                name: node.clone(),
                image_id: image_id.clone(),
                instance_type: instance_type.clone(),
                key_name: key_name.clone(),
                rails: interfaces.clone(),
            }),
            _ => None,
        }
    }

    /// Kind, as in ids and plans.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Power { .. } => "power",
            Self::BootOverride { .. } => "boot",
            Self::BiosAttribute { .. } => "bios",
            Self::Instance { .. } => "instance",
            Self::PlacementGroup { .. } => "placement-group",
        }
    }

    /// Name within the target.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Self::Power { .. } => "system".to_owned(),
            Self::BootOverride { .. } => "override".to_owned(),
            Self::BiosAttribute { name, .. } | Self::PlacementGroup { name, .. } => name.clone(),
            Self::Instance { cluster, .. } => cluster.clone(),
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
            Self::Instance { instance_type, image_id, present, .. } => {
                present.then(|| format!("{instance_type} {image_id}"))
            }
            Self::PlacementGroup { .. } => Some("cluster".to_owned()),
        }
    }
}

/// Reads what the desired BMC objects of `redfish`'s node are now. Items of other
/// hosts and instances are skipped; the BIOS is read once.
///
/// # Errors
/// See [`BmcError`]; a BMC without a BIOS resource leaves BIOS attributes unobserved
/// (`None`), which plans them as changes that apply will report unsupported.
pub async fn observe_bmc(redfish: &Redfish, desired: &[ApiDesired]) -> Result<Observed, BmcError> {
    observe_node(redfish, desired).await.map(|(observed, _)| observed)
}

/// [`observe_bmc`], and the firmware versions the BMC reports (empty when no item
/// is this node's).
///
/// # Errors
/// See [`BmcError`].
pub async fn observe_node(
    redfish: &Redfish,
    desired: &[ApiDesired],
) -> Result<(Observed, BTreeMap<String, String>), BmcError> {
    let mine: Vec<&ApiDesired> =
        desired.iter().filter(|item| item.target() == redfish.host() && !item.is_cloud()).collect();
    let mut observed = Observed::new();
    if mine.is_empty() {
        return Ok((observed, BTreeMap::new()));
    }
    let system = redfish.system().await?;
    let info = redfish.discover(&system).await?;
    let bios = if mine.iter().any(|item| matches!(item, ApiDesired::BiosAttribute { .. })) && info.has_bios {
        redfish.bios(&system).await?
    } else {
        BTreeMap::new()
    };
    for item in mine {
        let value = match item {
            ApiDesired::Power { .. } => info.power_state.map(|state| state.as_str().to_owned()),
            ApiDesired::BootOverride { .. } => Some(format!(
                "{}/{}",
                info.boot.target.as_deref().unwrap_or("None"),
                info.boot.enabled.as_deref().unwrap_or("Disabled")
            )),
            ApiDesired::BiosAttribute { name, .. } => bios.get(name).map(value_text),
            ApiDesired::Instance { .. } | ApiDesired::PlacementGroup { .. } => continue,
        };
        observed.insert(item.id(), value);
    }
    Ok((observed, info.firmware))
}

/// Reads `cluster`'s instances for the desired instance items of that cluster.
///
/// # Errors
/// See [`CloudError`].
pub async fn observe_cloud(ec2: &Ec2, cluster: &str, desired: &[ApiDesired]) -> Result<Observed, CloudError> {
    let instances = ec2.cluster_instances(cluster).await?;
    let mut observed = Observed::new();
    for item in desired {
        if let ApiDesired::Instance { cluster: owner, node, .. } = item
            && owner == cluster
        {
            let found = instances.iter().find(|instance| {
                instance.tag(CLUSTER_TAG) == Some(cluster) && instance.tag(NODE_TAG) == Some(node.as_str())
            });
            observed
                .insert(item.id(), found.map(|instance| format!("{} {}", instance.instance_type, instance.image_id)));
        }
        if let ApiDesired::PlacementGroup { name, .. } = item {
            let exists = ec2.placement_group_exists(name).await?;
            observed.insert(item.id(), exists.then(|| "cluster".to_owned()));
        }
    }
    Ok(observed)
}

/// Desired × observed → changes. An id missing from `observed` was not read (no
/// connection): it plans as an update from an unknown value.
#[must_use]
pub fn diff(desired: &[ApiDesired], observed: &Observed) -> Vec<Change> {
    desired
        .iter()
        .map(|item| {
            let id = item.id();
            let after = item.value();
            let before = observed.get(&id).cloned().flatten();
            let known = observed.contains_key(&id);
            let (action, reason) = match (item, &before, &after) {
                (ApiDesired::Instance { .. }, None, Some(_)) => (Action::Create, "not running".to_owned()),
                (ApiDesired::PlacementGroup { .. }, None, Some(_)) => (Action::Create, "absent".to_owned()),
                (ApiDesired::Instance { .. }, Some(_), None) => (Action::Remove, "no longer desired".to_owned()),
                (ApiDesired::Instance { .. }, None, None) => (Action::NoOp, "absent".to_owned()),
                (ApiDesired::Instance { .. }, Some(have), Some(want)) if have != want => {
                    (Action::Update, "replace: type or image changed".to_owned())
                }
                (_, None, Some(_)) if !known => (Action::Update, "not observed".to_owned()),
                (_, None, Some(_)) => (Action::Update, "not reported by the BMC".to_owned()),
                (_, Some(have), Some(want)) if have != want => (Action::Update, format!("{have} → {want}")),
                _ => (Action::NoOp, "as desired".to_owned()),
            };
            Change {
                id,
                target: item.target().to_owned(),
                kind: item.kind().to_owned(),
                name: item.name(),
                action,
                reason,
                before,
                after,
                diff: None,
                secret: false,
                disruption: crate::resource::Disruption::None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn diffs_power_boot_bios_and_instances() {
        let desired = vec![
            ApiDesired::Power { host: "n1".into(), state: PowerState::On },
            ApiDesired::BootOverride { host: "n1".into(), target: BootTarget::Pxe, enabled: BootEnabled::Once },
            ApiDesired::BiosAttribute { host: "n1".into(), name: "ProcTurboMode".into(), value: json!("Enabled") },
            ApiDesired::BiosAttribute { host: "n1".into(), name: "NumCores".into(), value: json!(10) },
            ApiDesired::Instance {
                cluster: "c".into(),
                node: "g1".into(),
                instance_type: "p5.48xlarge".into(),
                image_id: "ami-1".into(),
                present: true,
                key_name: None,
                interfaces: Vec::new(),
                placement_group: None,
            },
            ApiDesired::Instance {
                cluster: "c".into(),
                node: "g2".into(),
                instance_type: "p5.48xlarge".into(),
                image_id: "ami-1".into(),
                present: false,
                key_name: None,
                interfaces: Vec::new(),
                placement_group: None,
            },
        ];
        let observed: Observed = [
            ("n1:power:system", Some("Off")),
            ("n1:boot:override", Some("Pxe/Once")),
            ("n1:bios:ProcTurboMode", Some("Disabled")),
            ("n1:bios:NumCores", Some("10")),
            ("g1:instance:c", None),
            ("g2:instance:c", Some("p5.48xlarge ami-1")),
        ]
        .into_iter()
        .map(|(id, value)| (id.to_owned(), value.map(str::to_owned)))
        .collect();
        let changes = diff(&desired, &observed);
        let summary: Vec<(String, Action, Option<String>, Option<String>)> =
            changes.into_iter().map(|change| (change.id, change.action, change.before, change.after)).collect();
        let text = |value: &str| Some(value.to_owned());
        assert_eq!(
            summary,
            vec![
                ("n1:power:system".into(), Action::Update, text("Off"), text("On")),
                ("n1:boot:override".into(), Action::NoOp, text("Pxe/Once"), text("Pxe/Once")),
                ("n1:bios:ProcTurboMode".into(), Action::Update, text("Disabled"), text("Enabled")),
                ("n1:bios:NumCores".into(), Action::NoOp, text("10"), text("10")),
                ("g1:instance:c".into(), Action::Create, None, text("p5.48xlarge ami-1")),
                ("g2:instance:c".into(), Action::Remove, text("p5.48xlarge ami-1"), None),
            ]
        );
    }

    #[test]
    fn unobserved_items_plan_as_updates() {
        let desired = [ApiDesired::Power { host: "n9".into(), state: PowerState::Off }];
        let changes = diff(&desired, &Observed::new());
        assert_eq!(changes[0].action, Action::Update);
        assert_eq!(changes[0].reason, "not observed");
    }
}
