//! Checks of hardware profiles: references resolve, firmware versions are non-empty
//! text, BIOS values are scalars a BMC accepts.

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

/// A firmware version as the vendor writes it, compared as text: `2.3.1`,
/// `P79 v1.45 (12/06/2017)`, `1.45.455b66-rev4`, `U46 v2.70 (01/11/2023)`. Vendors
/// share no grammar, so only what no BMC reports is refused: an empty or blank
/// string, and control characters (a line break pasted along with the version).
pub(crate) fn is_firmware_version(text: &str) -> bool {
    !text.trim().is_empty() && !text.chars().any(char::is_control)
}

fn profiles(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (name, profile) in &loaded.blueprint.hardware_profiles {
        let base = join_key("hardware_profiles", name);
        for (component, version) in &profile.firmware {
            if !is_firmware_version(version) {
                out.push(
                    Diagnostic::error(
                        "invalid-firmware-version",
                        format!(
                            "firmware version `{}` of `{component}` is empty or has control characters",
                            version.escape_debug()
                        ),
                    )
                    .at(&loaded.source, join_key(&join_key(&base, "firmware"), component))
                    .help("write the version exactly as the BMC reports it, e.g. `2.3.1` or `P79 v1.45 (12/06/2017)`"),
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
