//! Per-node bare-metal provisioning records, kept in the state file so a killed
//! deploy resumes where each node was and a timeout can name the last step seen.
//!
//! Stage: data (written by `deploy::provision`, read by the plan and `status`).

use serde::{Deserialize, Serialize};

/// Where one node is on its way from the rack to a configured host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProvisioning {
    /// The step it reached.
    pub step: ProvisionStep,
    /// When it reached that step (RFC 3339, UTC).
    pub since: String,
    /// Every MAC its BMC reported (any of them may network-boot).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub macs: Vec<String>,
    /// The MAC it booted the installer from, once seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mac: Option<String>,
    /// SHA-256 of the image written to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The disk the image was written to (the device the agent saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    /// The public half of the SSH host key toolkit generated for it (the private
    /// half is a secret file, never here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
    /// The last thing observed on its way (`lease given`, `kernel fetched`, `image written`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What inspection read from its BMC (`bmc::inspect::Hardware`, kept as data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<serde_json::Value>,
}

/// The provisioning steps, in order (Ironic's enroll → inspect → deploy → active,
/// with the step SSH proves added).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProvisionStep {
    /// Known by its BMC; nothing read yet.
    Enrolled,
    /// Hardware read and found as the blueprint says.
    Inspected,
    /// Booted into the installer; the disk may be half written.
    Installing,
    /// The image and its node files are on the disk.
    Installed,
    /// Booted from disk, SSH answers with the host key toolkit generated.
    Reachable,
    /// Stopped at a step: `error` says which and why.
    Failed,
}

impl NodeProvisioning {
    /// A record at `step`, since `since`, with nothing else known yet.
    #[must_use]
    pub fn new(step: ProvisionStep, since: String) -> Self {
        Self {
            step,
            since,
            macs: Vec::new(),
            boot_mac: None,
            image: None,
            disk: None,
            host_key: None,
            last_seen: None,
            error: None,
            hardware: None,
        }
    }
}

impl ProvisionStep {
    /// The name used in the state file and in messages.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enrolled => "enrolled",
            Self::Inspected => "inspected",
            Self::Installing => "installing",
            Self::Installed => "installed",
            Self::Reachable => "reachable",
            Self::Failed => "failed",
        }
    }
}
