//! Checks of the `os` sections (top level and each group's own) and of the
//! inventory's `provisioning` network they install through: a known suite, a disk
//! rule that names a disk, values that reach file paths and package names, and
//! addresses that fit the provisioning subnet.

use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::{Distribution, Os};
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::inventory::LoadedInventory;

/// The releases an image can be built of, by distribution (what debootstrap knows).
const SUITES: &[(Distribution, &[&str])] =
    &[(Distribution::Debian, &["bookworm", "trixie"]), (Distribution::Ubuntu, &["jammy", "noble"])];

pub(super) fn check(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    if let Some(os) = &loaded.blueprint.os {
        values(loaded, os, "os", out);
    }
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        if let Some(os) = &group.os {
            values(loaded, os, &format!("node_groups[{index}].os"), out);
        }
    }
}

fn values(loaded: &LoadedBlueprint, os: &Os, at: &str, out: &mut Diagnostics) {
    let source = &loaded.source;
    let suites = SUITES.iter().find(|(distribution, _)| *distribution == os.distribution).map_or(&[][..], |s| s.1);
    if !suites.contains(&os.suite.as_str()) {
        let help = match did_you_mean(&os.suite, suites.iter().copied()) {
            Some(near) => format!("did you mean `{near}`?"),
            None => format!("one of {}", suites.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")),
        };
        out.push(
            Diagnostic::error("unknown-os-suite", format!("`{}` is not a release toolkit builds images of", os.suite))
                .at(source, format!("{at}.suite"))
                .help(help),
        );
    }
    if os.disk.is_empty() {
        out.push(
            Diagnostic::error("os-disk-without-hint", "`disk` names no disk: toolkit never picks \"the first disk\"")
                .at(source, format!("{at}.disk"))
                .help("give `path: /dev/disk/by-path/…`, `serial`, `wwn`, `model` or `min_gib`/`max_gib`"),
        );
    }
    if let (Some(min), Some(max)) = (os.disk.min_gib, os.disk.max_gib)
        && min > max
    {
        out.push(
            Diagnostic::error("os-disk-size-range", format!("`min_gib` {min} is larger than `max_gib` {max}"))
                .at(source, format!("{at}.disk.min_gib"))
                .help("swap them"),
        );
    }
    if let Some(path) = &os.disk.path
        && !(path.starts_with("/dev/disk/by-path/") || path.starts_with("/dev/disk/by-id/"))
    {
        out.push(
            Diagnostic::error("os-disk-unstable-path", format!("`{path}` is not a stable device path"))
                .at(source, format!("{at}.disk.path"))
                .help("use `/dev/disk/by-path/…` (the slot) or `/dev/disk/by-id/…`: `/dev/sda` can name another disk at the next boot"),
        );
    }
    for (index, package) in os.packages.iter().enumerate() {
        if !is_package_name(package) {
            out.push(
                Diagnostic::error("invalid-package-name", format!("`{package}` is not a Debian package name"))
                    .at(source, format!("{at}.packages[{index}]"))
                    .help("lower-case letters, digits, `+`, `-` and `.`, starting with a letter or digit"),
            );
        }
    }
    if let Some(kernel) = &os.kernel
        && !is_package_name(kernel)
    {
        out.push(
            Diagnostic::error("invalid-package-name", format!("`{kernel}` is not a Debian package name"))
                .at(source, format!("{at}.kernel"))
                .help("a kernel package such as `linux-image-amd64`"),
        );
    }
    if let Some(mirror) = &os.mirror
        && !(mirror.starts_with("http://") || mirror.starts_with("https://"))
    {
        out.push(
            Diagnostic::error("invalid-mirror", format!("mirror `{mirror}` is not an http(s) URL"))
                .at(source, format!("{at}.mirror"))
                .help("e.g. `http://deb.debian.org/debian`"),
        );
    }
    let path_safe = |text: &str| {
        !text.is_empty()
            && !text.contains("..")
            && text.chars().all(|c| c.is_ascii_alphanumeric() || "_+-./@".contains(c))
            && !text.starts_with('/')
    };
    if !path_safe(&os.timezone) {
        out.push(
            Diagnostic::error("invalid-timezone", format!("`{}` is not a time zone name", os.timezone))
                .at(source, format!("{at}.timezone"))
                .help("a tz database name such as `Europe/Paris` or `Etc/UTC`"),
        );
    }
    if !path_safe(&os.locale) || os.locale.contains('/') {
        out.push(
            Diagnostic::error("invalid-locale", format!("`{}` is not a locale name", os.locale))
                .at(source, format!("{at}.locale"))
                .help("e.g. `C.UTF-8` or `en_US.UTF-8`"),
        );
    }
}

/// Debian policy 5.6.1: `[a-z0-9][a-z0-9+.-]+`.
fn is_package_name(name: &str) -> bool {
    name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

/// The inventory side: nodes toolkit would install need a provisioning network, and
/// their addresses must be on it.
pub(super) fn inventory(loaded: &LoadedBlueprint, inventory: &LoadedInventory, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    let has_os = blueprint.os.is_some() || blueprint.node_groups.iter().any(|group| group.os.is_some());
    let Some(provisioning) = &inventory.inventory.provisioning else {
        if has_os && !inventory.inventory.bmcs.is_empty() {
            out.push(
                Diagnostic::warning(
                    "os-without-provisioning",
                    "the blueprint has an `os` section but the inventory no `provisioning` network: no node is installed",
                )
                .in_file(&inventory.source.path)
                .help("add `provisioning: { interface: IFACE, address: IP, subnet: CIDR }` for the network the BMCs' nodes boot from"),
            );
        }
        return;
    };
    if !provisioning.subnet.contains(&provisioning.address) {
        out.push(
            Diagnostic::error(
                "provisioning-address-outside-subnet",
                format!("`{}` is not in the provisioning subnet `{}`", provisioning.address, provisioning.subnet),
            )
            .at(&inventory.source, "provisioning.address")
            .help("the server's address must be on the nodes' management subnet, or they cannot reach it"),
        );
    }
    for (name, host) in &inventory.inventory.hosts {
        if !inventory.inventory.bmcs.contains_key(name) {
            continue;
        }
        match host.address.parse::<std::net::Ipv4Addr>() {
            Ok(address) if provisioning.subnet.contains(&address) => {}
            _ => out.push(
                Diagnostic::error(
                    "host-outside-provisioning-subnet",
                    format!("`{name}` at `{}` is not in the provisioning subnet `{}`", host.address, provisioning.subnet),
                )
                .at(&inventory.source, format!("hosts.{name}.address"))
                .help("an installed node gets its inventory address on the provisioning subnet: give it an IPv4 address there"),
            ),
        }
    }
}
