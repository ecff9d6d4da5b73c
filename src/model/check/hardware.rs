//! Checks of hardware profiles: references resolve, firmware versions are non-empty,
//! firmware images are http(s) URLs with a SHA-256, BIOS values are scalars a BMC accepts.

use super::unknown_name_help;
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::FirmwareWanted;
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

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit())
}

fn is_image_url(text: &str) -> bool {
    let rest = text.strip_prefix("https://").or_else(|| text.strip_prefix("http://"));
    rest.is_some_and(|rest| {
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        !host.is_empty() && !rest.chars().any(|c| c.is_whitespace() || c.is_control())
    })
}

fn firmware(loaded: &LoadedBlueprint, base: &str, component: &str, wanted: &FirmwareWanted, out: &mut Diagnostics) {
    let key = join_key(&join_key(base, "firmware"), component);
    if !is_firmware_version(&wanted.version) {
        out.push(
            Diagnostic::error(
                "invalid-firmware-version",
                format!(
                    "firmware version `{}` of `{component}` is empty or has control characters",
                    wanted.version.escape_debug()
                ),
            )
            .at(&loaded.source, key.clone())
            .help("write the version exactly as the BMC reports it, e.g. `2.75.75.75` or `U46 v2.70 (01/11/2023)`"),
        );
    }
    if let Some(image) = &wanted.image
        && !is_image_url(image)
    {
        out.push(
            Diagnostic::error(
                "invalid-firmware-image",
                format!("firmware image `{image}` of `{component}` is not an http(s) URL"),
            )
            .at(&loaded.source, join_key(&key, "image"))
            .help("give the URL the BMC downloads the image from, e.g. `http://10.0.0.2/fw/bios-2.70.bin`"),
        );
    }
    match (&wanted.image, &wanted.sha256) {
        (Some(_), None) => out.push(
            Diagnostic::error("firmware-image-without-sha256", format!("firmware image of `{component}` has no `sha256`"))
                .at(&loaded.source, join_key(&key, "image"))
                .help("add `sha256:` with the image's SHA-256 (`sha256sum IMAGE`): toolkit checks it before the BMC takes the image"),
        ),
        (None, Some(_)) => out.push(
            Diagnostic::error("firmware-sha256-without-image", format!("`{component}` has a `sha256` but no `image`"))
                .at(&loaded.source, join_key(&key, "sha256"))
                .help("add the `image:` URL the checksum is of, or write the version alone to only expect it"),
        ),
        _ => {}
    }
    if let Some(sha256) = &wanted.sha256
        && !is_sha256(sha256)
    {
        out.push(
            Diagnostic::error("invalid-firmware-sha256", format!("`sha256` of `{component}` is not 64 hex digits"))
                .at(&loaded.source, join_key(&key, "sha256"))
                .help("write the image's SHA-256 as `sha256sum` prints it"),
        );
    }
}

fn profiles(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (name, profile) in &loaded.blueprint.hardware_profiles {
        let base = join_key("hardware_profiles", name);
        for (component, wanted) in &profile.firmware {
            firmware(loaded, &base, component, wanted, out);
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
