//! Checks of hardware profiles: references resolve, firmware versions are version
//! strings, BIOS values are scalars a BMC accepts.

use super::unknown_name_help;
use crate::blueprint::LoadedBlueprint;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::source::join_key;

pub(super) fn check(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    references(loaded, out);
    profiles(loaded, out);
}

fn references(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let profiles = &loaded.blueprint.hardware_profiles;
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let Some(name) = &group.hardware_profile else { continue };
        if !profiles.contains_key(name) {
            out.push(
                Diagnostic::error("unknown-hardware-profile", format!("hardware profile `{name}` is not declared"))
                    .at(&loaded.source, format!("node_groups[{index}].hardware_profile"))
                    .help(unknown_name_help(name, profiles.keys().map(String::as_str), "hardware profile")),
            );
        }
    }
}

/// A firmware version as vendors write them: `2.3.1`, `U50_1.60`, `1.2.3-4`,
/// `P89 v2.80`: starts with a letter or digit, then letters, digits, `.`, `_`, `-`,
/// `(`, `)` or single spaces, with at least one digit.
pub(crate) fn is_firmware_version(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|first| first.is_ascii_alphanumeric())
        && text.len() <= 64
        && text.chars().any(|c| c.is_ascii_digit())
        && !text.ends_with(' ')
        && !text.contains("  ")
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '(' | ')' | ' '))
}

fn profiles(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (name, profile) in &loaded.blueprint.hardware_profiles {
        let base = join_key("hardware_profiles", name);
        for (component, version) in &profile.firmware {
            if !is_firmware_version(version) {
                out.push(
                    Diagnostic::error(
                        "invalid-firmware-version",
                        format!("firmware version `{version}` of `{component}` is not a version"),
                    )
                    .at(&loaded.source, join_key(&join_key(&base, "firmware"), component))
                    .help("write the version exactly as the BMC reports it, e.g. `2.3.1` or `U50_1.60`"),
                );
            }
        }
        for (attribute, value) in &profile.bios {
            if value.is_object() || value.is_array() || value.is_null() {
                out.push(
                    Diagnostic::error(
                        "invalid-bios-value",
                        format!("BIOS attribute `{attribute}` must be a string, number or boolean"),
                    )
                    .at(&loaded.source, join_key(&join_key(&base, "bios"), attribute))
                    .help("Redfish BIOS attributes are scalars: `ProcTurboMode: Enabled`, `NumCores: 10`"),
                );
            }
        }
        let used = loaded.blueprint.node_groups.iter().any(|g| g.hardware_profile.as_deref() == Some(name));
        if !used {
            out.push(
                Diagnostic::warning("unused-hardware-profile", format!("hardware profile `{name}` is not used"))
                    .at(&loaded.source, base)
                    .help("reference it from a node group's `hardware_profile`, or remove it"),
            );
        }
    }
}
