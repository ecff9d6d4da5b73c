//! BIOS values queued on a BMC for the next reset, in the plan.
//!
//! Stage: plan (API targets; pure). Input: the plan's API changes, the BIOS values the
//! blueprint wants by node, and each node's [`BiosSettings`] as observed. Output: the
//! changes adjusted and the changes added, each labelled `pending on BMC`.
//!
//! A reset applies every queued value. One the blueprint wants is shown as applying at
//! the next reset; one it does not want is shown as what the API stage overwrites
//! before any reset: with the wanted value when the blueprint names the attribute,
//! else with the value in effect (a change of its own, not in the graph).

use std::collections::BTreeMap;

use serde_json::Value;

use super::ApiObservation;
use crate::bmc::{BiosSettings, PendingSetting};
use crate::plan::{Action, Change};
use crate::resource::Disruption;
use crate::resource::api::value_text;

/// Adjusts `changes` for the values queued on each node's BMC and returns the
/// changes that set back queued values the blueprint does not name. Nodes whose BMC
/// could not be read are left as they are.
pub(super) fn plan(
    changes: &mut [Change],
    wanted: &BTreeMap<String, BTreeMap<String, Value>>,
    observation: &ApiObservation,
) -> Vec<Change> {
    let none = BTreeMap::new();
    let mut added = Vec::new();
    for (host, bios) in &observation.bios {
        if observation.unreachable.contains_key(host) {
            continue;
        }
        let unwanted = bios.unwanted(wanted.get(host).unwrap_or(&none));
        for name in bios.pending.keys() {
            let id = format!("{host}:bios:{name}");
            let setting = unwanted.iter().find(|setting| setting.name == *name);
            match (changes.iter_mut().find(|change| change.id == id), setting) {
                (Some(change), None) => {
                    // Queued as the blueprint wants it: the next reset applies it.
                    change.reason = format!("{}: pending on BMC, applies at the next reset", change.reason).into();
                }
                (Some(change), Some(setting)) => overwritten(change, setting),
                (None, Some(setting)) => added.push(set_back(host, bios, setting)),
                (None, None) => {}
            }
        }
    }
    added
}

/// A value as the plan shows it; an empty string as `""`.
fn shown(value: Option<&Value>) -> String {
    match value.map(value_text) {
        None => "(not reported)".to_owned(),
        Some(text) if text.is_empty() => "\"\"".to_owned(),
        Some(text) => text,
    }
}

/// A blueprint attribute queued with another value: the API stage writes the wanted one.
fn overwritten(change: &mut Change, setting: &PendingSetting) {
    let pending = value_text(&setting.pending);
    let wanted = shown(setting.wanted.as_ref());
    change.reason =
        format!("pending on BMC: {} = {pending} (unwanted), overwritten with {wanted}", setting.name).into();
    change.delta =
        change.delta.with_before(Some(format!("{} (pending: {pending})", shown(setting.current.as_ref())).into()));
    change.action = Action::Update;
}

/// An attribute the blueprint does not name, queued: set back to the value in effect.
fn set_back(host: &str, bios: &BiosSettings, setting: &PendingSetting) -> Change {
    let pending = value_text(&setting.pending);
    let reason = match &setting.current {
        Some(current) => format!(
            "pending on BMC: {} = {pending} (unwanted), set back to {} before any reset",
            setting.name,
            shown(Some(current))
        ),
        None => format!(
            "pending on BMC: {} = {pending} (unwanted) and not in effect, so it cannot be set back: \
             clear it on the BMC (`{}`); toolkit does not reset this node while it is queued",
            setting.name, bios.settings_uri
        ),
    };
    Change {
        id: format!("{host}:bios:{}", setting.name).into(),
        name: setting.name.as_str().into(),
        action: Action::Update,
        reason: reason.into(),
        after: Some(shown(setting.current.as_ref()).into()),
        secret: false,
        disruption: Disruption::None,
        delta: crate::plan::Delta::from_before(
            format!("{} (pending: {pending})", shown(setting.current.as_ref())).into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn observation(bios: &Value, queued: &Value) -> ApiObservation {
        let mut observation = ApiObservation::default();
        let settings = BiosSettings::read("/redfish/v1/Systems/1/Bios", bios, Some(queued));
        observation.bios.insert("n1".into(), settings);
        observation
    }

    #[test]
    fn a_queued_attribute_the_bios_does_not_report_cannot_be_set_back_and_says_so() {
        let observation = observation(
            &json!({ "Attributes": { "ProcTurboMode": "Enabled" } }),
            &json!({ "Attributes": { "SecretNewKnob": "On" } }),
        );
        let added = plan(&mut [], &BTreeMap::new(), &observation);
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].id, "n1:bios:SecretNewKnob");
        assert!(added[0].reason.starts_with("pending on BMC: SecretNewKnob = On (unwanted) and not in effect"));
        assert!(added[0].reason.contains("`/redfish/v1/Systems/1/Bios`"), "{}", added[0].reason);
        assert_eq!(added[0].before().map(crate::text::Text::as_str), Some("(not reported) (pending: On)"));
    }

    #[test]
    fn a_node_whose_bmc_could_not_be_read_is_left_as_it_is() {
        let mut observation = observation(
            &json!({ "Attributes": { "ProcTurboMode": "Enabled" } }),
            &json!({ "Attributes": { "ProcTurboMode": "Disabled" } }),
        );
        observation.unreachable.insert("n1".into(), "connection refused".into());
        assert!(plan(&mut [], &BTreeMap::new(), &observation).is_empty());
    }
}
