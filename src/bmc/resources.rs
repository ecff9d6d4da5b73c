//! Reads a BMC's API objects as they are: power state, boot override, BIOS
//! attributes and firmware versions (a cluster's cloud instances are read by
//! [`crate::cloud::observe`]).
//!
//! Stage: observe (API targets). Input: [`ApiDesired`] items and a connected
//! [`Redfish`]. Output: [`Observed`] values by resource id, in the same
//! short texts as [`ApiDesired::value`], which
//! [`plan::api::diff`](crate::plan::api::diff) turns into changes. The data types live
//! in the core ([`crate::resource::api`]); this module only knows HTTP.

use std::collections::BTreeMap;

use super::error::BmcError;
use super::redfish::Redfish;
use super::redfish::settings::BiosSettings;
use crate::resource::api::{ApiDesired, Observed, value_text};

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
    observe_node_facts(redfish, desired).await.map(|facts| (facts.observed, facts.firmware))
}

/// What one BMC reports about its node.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// Observed values by resource id.
    pub observed: Observed,
    /// Firmware versions by component.
    pub firmware: BTreeMap<String, String>,
    /// The BIOS in effect and queued for the next reset (`None`: no `Bios` resource).
    pub bios: Option<BiosSettings>,
}

/// [`observe_node`], and the node's BIOS with the values queued for the next reset:
/// read whenever the system has a `Bios` resource, since any reset applies what is
/// queued, BIOS attributes in the blueprint or not.
///
/// # Errors
/// See [`BmcError`].
pub async fn observe_node_facts(redfish: &Redfish, desired: &[ApiDesired]) -> Result<NodeFacts, BmcError> {
    let mine: Vec<&ApiDesired> =
        desired.iter().filter(|item| item.target() == redfish.host() && item.is_bmc()).collect();
    let mut facts = NodeFacts::default();
    if mine.is_empty() {
        return Ok(facts);
    }
    let system = redfish.system().await?;
    let info = redfish.discover(&system).await?;
    facts.bios = if info.has_bios { Some(redfish.bios_settings(&system).await?) } else { None };
    for item in mine {
        let value = match item {
            ApiDesired::Power { .. } => info.power_state.map(|state| state.as_str().to_owned()),
            ApiDesired::BootOverride { .. } => Some(format!(
                "{}/{}",
                info.boot.target.as_deref().unwrap_or("None"),
                info.boot.enabled.as_deref().unwrap_or("Disabled")
            )),
            ApiDesired::BiosAttribute { name, .. } => {
                facts.bios.as_ref().and_then(|bios| bios.current.get(name)).map(value_text)
            }
            ApiDesired::Firmware { component, .. } => info.firmware.get(component).cloned(),
            ApiDesired::Instance { .. } | ApiDesired::PlacementGroup { .. } | ApiDesired::Kubernetes(_) => continue,
        };
        facts.observed.insert(item.id(), value);
    }
    facts.firmware = info.firmware;
    Ok(facts)
}
