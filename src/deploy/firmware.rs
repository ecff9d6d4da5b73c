//! BMC-side changes of a node — firmware flashed, BIOS attributes staged — judged
//! for the plan, made through the node's BMC, and read back after the reset.
//!
//! Stage: plan → roll out (BMC). Input: API [`Change`]s with their [`ApiDesired`]
//! items, and the inventory's BMCs ([`BmcChanges`]). Output: firmware changes with
//! their verdict (upgrade, same, downgrade refused or allowed, cannot compare), and
//! per node the outcome of making the changes and of checking them after the reset.
//!
//! Where they run: a node the scheduler runs jobs on, and that is on, gets its BIOS
//! and firmware changes inside its rollout wave — drained, changed, reset, checked,
//! resumed — so it is never reset under running jobs; any other node (off and being
//! provisioned, or a controller) gets them in the API stage, as before.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::bmc::redfish::update::FirmwareImage;
use crate::bmc::version::{Comparison, compare};
use crate::bmc::{BmcConfig, Redfish, bios_diff};
use crate::plan::{Action, Change};
use crate::resource::api::ApiDesired;

/// Ends the reason of a BIOS or firmware change made in its node's rollout wave.
pub const IN_ROLLOUT_WAVE: &str = "in the node's rollout wave: drain, change, reset, check, resume";

/// Starts the reason of a firmware change toolkit refuses to make.
pub const REFUSED: &str = "refused: ";

/// Whether `change` waits for its node's rollout wave (see [`IN_ROLLOUT_WAVE`]).
#[must_use]
pub fn in_rollout_wave(change: &Change) -> bool {
    change.reason.ends_with(IN_ROLLOUT_WAVE)
}

/// Kinds of change that act on a node's BMC and take effect at its next reset.
#[must_use]
pub fn is_bmc_side(kind: &str) -> bool {
    matches!(kind, "bios" | "firmware")
}

/// Judges a firmware change with the vendor-aware comparison: an upgrade stays an
/// update; the same version (`2.4` = `2.4.0`) is a no-op; a downgrade, or versions
/// that cannot be compared, are refused (a no-op whose reason starts with
/// [`REFUSED`]) unless the profile allows downgrades.
pub fn judge(change: &mut Change, item: &ApiDesired) {
    let ApiDesired::Firmware { component, version: wanted, allow_downgrade, .. } = item else { return };
    if change.action != Action::Update {
        return;
    }
    let Some(current) = change.before().cloned() else {
        // Not reported (yet): the BMC says after the update.
        return;
    };
    let (verdict, risky) = match compare(&current, wanted) {
        Comparison::Ordered(Ordering::Less) => (format!("upgrade {current} → {wanted}"), false),
        Comparison::Ordered(Ordering::Equal) => {
            change.action = Action::NoOp;
            change.reason = format!("as desired (`{current}` is `{wanted}`)").into();
            return;
        }
        Comparison::Ordered(Ordering::Greater) => (format!("downgrade {current} → {wanted}"), true),
        Comparison::CannotCompare(reason) => (format!("{current} → {wanted} (cannot compare: {reason})"), true),
    };
    if risky && !allow_downgrade {
        change.action = Action::NoOp;
        change.reason = format!(
            "{REFUSED}{verdict} of `{component}`; set `allow_downgrade: true` in the hardware profile to flash it"
        )
        .into();
    } else if risky {
        change.reason = format!("{verdict} (allow_downgrade)").into();
    } else {
        change.reason = verdict.into();
    }
}

/// One line per refused firmware change, for people: `node01: firmware BIOS: refused: …`.
#[must_use]
pub fn refused(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .filter(|change| change.kind() == "firmware" && change.reason.starts_with(REFUSED))
        .map(|change| format!("{}: firmware `{}`: {}", change.target(), change.name, change.reason))
        .collect()
}

/// Flashes the firmware items (in order), then stages the BIOS attributes in one
/// PATCH; other items are not this function's.
///
/// # Errors
/// The first failure, naming the component or the attributes.
pub async fn apply(redfish: &Redfish, system: &str, items: &[&ApiDesired]) -> Result<(), String> {
    for item in items {
        if let ApiDesired::Firmware { component, image, sha256, version, .. } = item {
            let update = redfish
                .update_firmware(system, component, &FirmwareImage { uri: image, sha256 })
                .await
                .map_err(|error| format!("firmware `{component}` → `{version}`: {error}"))?;
            tracing::info!(host = redfish.host(), component, version, apply_time = ?update.apply_time, "firmware update task done");
        }
    }
    let bios = bios_of(items);
    if !bios.is_empty() {
        redfish.set_bios(system, &bios).await.map_err(|error| format!("BIOS settings: {error}"))?;
    }
    Ok(())
}

/// After the reset: every firmware item reports its wanted version (by the
/// vendor-aware comparison) and every BIOS attribute its value.
///
/// # Errors
/// What differs, per component and attribute.
pub async fn verify(redfish: &Redfish, system: &str, items: &[&ApiDesired]) -> Result<(), String> {
    let mut problems = Vec::new();
    let firmware = redfish.firmware(system).await.map_err(|error| error.to_string())?;
    for item in items {
        if let ApiDesired::Firmware { component, version, .. } = item {
            let found = firmware.get(component);
            let same = found.is_some_and(|found| compare(found, version) == Comparison::Ordered(Ordering::Equal));
            if !same {
                problems.push(format!(
                    "firmware `{component}` is `{}`, wanted `{version}`",
                    found.map_or("not reported", String::as_str)
                ));
            }
        }
    }
    let wanted = bios_of(items);
    if !wanted.is_empty() {
        let actual = redfish.bios(system).await.map_err(|error| error.to_string())?;
        for change in bios_diff(&wanted, &actual) {
            problems.push(format!(
                "BIOS `{}` is {}, wanted {}",
                change.name,
                change.actual.map_or_else(|| "absent".to_owned(), |value| value.to_string()),
                change.desired
            ));
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// The BIOS attributes among `items`, by name.
fn bios_of(items: &[&ApiDesired]) -> BTreeMap<String, serde_json::Value> {
    items
        .iter()
        .filter_map(|item| match item {
            ApiDesired::BiosAttribute { name, value, .. } => Some((name.clone(), value.clone())),
            _ => None,
        })
        .collect()
}

/// The inventory's BMCs, for the rollout: BIOS and firmware changes of a drained
/// node, and their check after its reset.
#[derive(Debug, Clone, Default)]
pub struct BmcChanges {
    bmcs: BTreeMap<String, BmcConfig>,
}

impl BmcChanges {
    /// For the hosts of `bmcs` (keyed by [`BmcConfig::host`]).
    pub fn new(bmcs: impl IntoIterator<Item = BmcConfig>) -> Self {
        Self { bmcs: bmcs.into_iter().map(|config| (config.host.clone(), config)).collect() }
    }

    async fn connect(&self, host: &str) -> Result<(Redfish, String), String> {
        let config = self.bmcs.get(host).ok_or_else(|| format!("`{host}` has no BMC in the inventory (`bmcs:`)"))?;
        let redfish = Redfish::connect(config.clone()).await.map_err(|error| error.to_string())?;
        let system = redfish.system().await.map_err(|error| error.to_string())?;
        Ok((redfish, system))
    }

    /// [`apply`] on `host`'s BMC.
    ///
    /// # Errors
    /// See [`apply`]; or the BMC could not be reached.
    pub async fn apply(&self, host: &str, items: &[&ApiDesired]) -> Result<(), String> {
        let (redfish, system) = self.connect(host).await?;
        let result = apply(&redfish, &system, items).await;
        let _ = redfish.close().await;
        result
    }

    /// [`verify`] on `host`'s BMC.
    ///
    /// # Errors
    /// See [`verify`]; or the BMC could not be reached.
    pub async fn verify(&self, host: &str, items: &[&ApiDesired]) -> Result<(), String> {
        let (redfish, system) = self.connect(host).await?;
        let result = verify(&redfish, &system, items).await;
        let _ = redfish.close().await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(version: &str, allow_downgrade: bool) -> ApiDesired {
        ApiDesired::Firmware {
            host: "n1".into(),
            component: "BIOS".into(),
            version: version.into(),
            image: "http://fw/bios.bin".into(),
            sha256: "0".repeat(64),
            allow_downgrade,
        }
    }

    fn judged(current: &str, wanted: &str, allow_downgrade: bool) -> (Action, String) {
        let item = item(wanted, allow_downgrade);
        let mut change = crate::plan::api::diff(
            std::slice::from_ref(&item),
            &BTreeMap::from([(item.id(), Some(current.to_owned()))]),
        )
        .remove(0);
        judge(&mut change, &item);
        (change.action, change.reason.to_string())
    }

    #[test]
    fn firmware_changes_are_upgrades_or_refused() {
        assert_eq!(
            judged("U46 v1.56 (11/29/2021)", "U46 v2.70 (01/11/2023)", false),
            (Action::Update, "upgrade U46 v1.56 (11/29/2021) → U46 v2.70 (01/11/2023)".into())
        );
        assert_eq!(judged("2.4", "2.4.0", false), (Action::NoOp, "as desired (`2.4` is `2.4.0`)".into()));
        let (action, reason) = judged("2.75.75.75", "2.70.70.70", false);
        assert_eq!(action, Action::NoOp);
        assert_eq!(
            reason,
            "refused: downgrade 2.75.75.75 → 2.70.70.70 of `BIOS`; set `allow_downgrade: true` in the hardware profile to flash it"
        );
        assert_eq!(
            judged("2.75.75.75", "2.70.70.70", true),
            (Action::Update, "downgrade 2.75.75.75 → 2.70.70.70 (allow_downgrade)".into())
        );
        let (action, reason) = judged("U46 v2.70", "U50 v2.80", false);
        assert_eq!(action, Action::NoOp);
        assert!(reason.starts_with("refused: U46 v2.70 → U50 v2.80 (cannot compare: different families"), "{reason}");
        let mut changes = vec![];
        let item = item("2.70.70.70", false);
        let mut change = crate::plan::api::diff(
            std::slice::from_ref(&item),
            &BTreeMap::from([(item.id(), Some("2.75.75.75".into()))]),
        )
        .remove(0);
        judge(&mut change, &item);
        changes.push(change);
        assert_eq!(refused(&changes).len(), 1);
        assert!(refused(&changes)[0].starts_with("n1: firmware `BIOS`: refused: downgrade"));
    }
}
