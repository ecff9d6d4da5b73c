//! API objects planned: desired × observed → changes, in the same shape as file
//! changes so they merge into one plan.
//!
//! Stage: plan (API targets). Input: [`ApiDesired`] items and the [`Observed`]
//! values `bmc::resources` read. Output: [`Change`]s (create / update / remove /
//! no-op, with before and after). Pure: it reads no network.

use super::{Action, Change};
use crate::resource::api::{ApiDesired, Observed};
use crate::text::Text;

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
                (ApiDesired::Kubernetes(_), None, Some(_)) if known => (Action::Create, "absent".to_owned()),
                (ApiDesired::Kubernetes(_), Some(have), Some(want)) if have != want => {
                    (Action::Update, "live fields differ".to_owned())
                }
                (_, None, Some(_)) if !known => (Action::Update, "not observed".to_owned()),
                (_, None, Some(_)) => (Action::Update, "not reported by the BMC".to_owned()),
                (_, Some(have), Some(want)) if have != want => (Action::Update, format!("{have} → {want}")),
                _ => (Action::NoOp, "as desired".to_owned()),
            };
            let diff = match (item.kubernetes(), &before, &after) {
                (Some(object), Some(have), Some(want)) if have != want => {
                    Some(Text::from(super::diff::unified_diff(&format!("/{}", object.display()), have, want)))
                }
                _ => None,
            };
            Change {
                id: id.into(),
                name: item.name().into(),
                action,
                reason: reason.into(),
                delta: crate::plan::Delta::new(before.map(Text::from), diff, crate::plan::Values::default()),
                after: after.map(Text::from),
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
    use crate::resource::api::{BootEnabled, BootTarget, PowerState};

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
        let summary: Vec<(Text, Action, Option<Text>, Option<Text>)> = changes
            .into_iter()
            .map(|change| (change.id.clone(), change.action, change.before().cloned(), change.after.clone()))
            .collect();
        let text = |value: &str| Some(Text::from(value));
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
