//! Checks of storage: mount points, NFS servers and endpoints, Lustre endpoints,
//! node group references, node-local scratch and expected performance.

use std::collections::HashMap;

use super::{Facts, unknown_name_help};
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::{FilesystemKind, Role};
use crate::diagnostic::{Diagnostic, Diagnostics};

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    duplicate_names(loaded, out);
    mounts(loaded, out);
    servers_and_endpoints(loaded, out);
    group_references(loaded, facts, out);
    scratch(loaded, out);
    expectations(loaded, out);
}

fn duplicate_names(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (index, fs) in loaded.blueprint.storage.filesystems.iter().enumerate() {
        if let Some(first) = seen.get(fs.name.as_str()) {
            out.push(
                Diagnostic::error("duplicate-filesystem", format!("filesystem `{}` is declared twice", fs.name))
                    .at(&loaded.source, format!("storage.filesystems[{index}].name"))
                    .help(format!("rename it: `filesystems[{first}]` already uses that name")),
            );
        } else {
            seen.insert(&fs.name, index);
        }
    }
}

/// Most characters of a mount point: PATH_MAX is 4096, but a systemd unit name
/// (the escaped path plus `.mount`) is at most 255.
const MAX_MOUNT: usize = 200;

/// Why `mount` cannot be a mount point, if it cannot.
fn mount_problem(mount: &str) -> Option<String> {
    if !mount.starts_with('/') {
        Some("is not an absolute path".to_owned())
    } else if mount.trim_end_matches('/').is_empty() {
        Some("would hide the root filesystem".to_owned())
    } else if mount.split('/').any(|part| part == "..") || mount.split('/').any(|part| part == ".") {
        Some("contains `.` or `..`".to_owned())
    } else if mount.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("contains whitespace (fstab cannot hold it unescaped)".to_owned())
    } else if let Some(c) = mount.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))) {
        // systemd escapes other characters in unit names (`\x24`) and fstab and
        // exports(5) have their own escapes: one name, three spellings to get right.
        Some(format!(
            "contains `{}`, which systemd mount units, fstab and exports(5) each escape differently",
            c.escape_debug()
        ))
    } else if mount.len() > MAX_MOUNT {
        Some(format!("is {} characters long, more than {MAX_MOUNT} (a systemd unit name holds 255)", mount.len()))
    } else {
        None
    }
}

/// `/a//b/` → `/a/b`, for comparing mount points.
fn normalize(mount: &str) -> String {
    let parts: Vec<&str> = mount.split('/').filter(|part| !part.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

fn mounts(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let storage = &loaded.blueprint.storage;
    let mut mounts: Vec<(String, String, &str)> = storage
        .filesystems
        .iter()
        .enumerate()
        .map(|(index, fs)| {
            (format!("storage.filesystems[{index}].mount"), format!("filesystem `{}`", fs.name), fs.mount.as_str())
        })
        .collect();
    if let Some(scratch) = &storage.scratch {
        mounts.push(("storage.scratch.mount".to_owned(), "scratch".to_owned(), scratch.mount.as_str()));
    }
    let mut valid: Vec<(usize, String)> = Vec::with_capacity(mounts.len());
    for (index, (path, what, mount)) in mounts.iter().enumerate() {
        if let Some(problem) = mount_problem(mount) {
            out.push(
                Diagnostic::error("invalid-mount", format!("mount point `{mount}` of {what} {problem}"))
                    .at(&loaded.source, path.as_str())
                    .help("use an absolute directory of letters, digits, `/`, `.`, `_` and `-`, such as `/home`, `/data` or `/scratch`"),
            );
        } else {
            valid.push((index, normalize(mount)));
        }
    }
    for (position, (index, mount)) in valid.iter().enumerate() {
        for (other_index, other) in &valid[..position] {
            let relation = if mount == other {
                "is the same as"
            } else if mount.starts_with(&format!("{other}/")) {
                "is inside"
            } else if other.starts_with(&format!("{mount}/")) {
                "contains"
            } else {
                continue;
            };
            let (path, what, original) = &mounts[*index];
            let (_, other_what, other_original) = &mounts[*other_index];
            out.push(
                Diagnostic::error(
                    "mount-collision",
                    format!("mount point `{original}` of {what} {relation} `{other_original}` of {other_what}"),
                )
                .at(&loaded.source, path.as_str())
                .help("mount each filesystem on its own directory, not inside another mount: the order of mounts would decide what users see"),
            );
        }
    }
}

fn servers_and_endpoints(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, fs) in loaded.blueprint.storage.filesystems.iter().enumerate() {
        let base = format!("storage.filesystems[{index}]");
        match fs.kind {
            FilesystemKind::Nfs => match (&fs.server_group, &fs.endpoint) {
                (None, None) => out.push(
                    Diagnostic::error(
                        "nfs-without-server",
                        format!("NFS filesystem `{}` has neither `server_group` nor `endpoint`", fs.name),
                    )
                    .at(&loaded.source, &base)
                    .help(
                        "add `server_group: <group>` to serve it from the cluster, or `endpoint: \"server:/export\"`",
                    ),
                ),
                (Some(_), Some(_)) => out.push(
                    Diagnostic::warning(
                        "nfs-server-and-endpoint",
                        format!("NFS filesystem `{}` has both `server_group` and `endpoint`", fs.name),
                    )
                    .at(&loaded.source, format!("{base}.endpoint"))
                    .help("keep one: `server_group` serves it from the cluster, `endpoint` mounts an external server"),
                ),
                (None, Some(endpoint)) if !is_nfs_endpoint(endpoint) => out.push(
                    Diagnostic::error("invalid-endpoint", format!("NFS endpoint `{endpoint}` is not `server:/export`"))
                        .at(&loaded.source, format!("{base}.endpoint"))
                        .help("write the server and the absolute export path, e.g. `nfs01:/export/home`"),
                ),
                _ => {}
            },
            FilesystemKind::Lustre => match &fs.endpoint {
                None => out.push(
                    Diagnostic::error(
                        "lustre-without-endpoint",
                        format!("Lustre filesystem `{}` has no `endpoint`", fs.name),
                    )
                    .at(&loaded.source, &base)
                    .help("add the MGS and filesystem, e.g. `endpoint: \"10.30.0.10@o2ib:/lustre\"`"),
                ),
                Some(endpoint) if !is_lustre_endpoint(endpoint) => out.push(
                    Diagnostic::error(
                        "invalid-endpoint",
                        format!("Lustre endpoint `{endpoint}` is not `mgs@network:/fsname`"),
                    )
                    .at(&loaded.source, format!("{base}.endpoint"))
                    .help("write the MGS NID and the filesystem name, e.g. `10.30.0.10@o2ib:/lustre`"),
                ),
                Some(_) => {}
            },
        }
    }
}

fn is_nfs_endpoint(endpoint: &str) -> bool {
    endpoint.split_once(":/").is_some_and(|(server, _)| !server.is_empty() && !server.contains(char::is_whitespace))
}

fn is_lustre_endpoint(endpoint: &str) -> bool {
    endpoint.split_once(":/").is_some_and(|(nids, fsname)| {
        nids.contains('@') && !fsname.is_empty() && !endpoint.contains(char::is_whitespace)
    })
}

fn group_references(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    let names: Vec<&str> = blueprint.node_groups.iter().map(|g| g.name.as_str()).collect();
    let unknown = |name: &str, path: String| {
        Diagnostic::error("unknown-group", format!("node group `{name}` does not exist"))
            .at(&loaded.source, path)
            .help(unknown_name_help(name, names.iter().copied(), "node group"))
    };
    for (index, fs) in blueprint.storage.filesystems.iter().enumerate() {
        let base = format!("storage.filesystems[{index}]");
        if let Some(server) = &fs.server_group {
            match facts.groups.get(server) {
                None => out.push(unknown(server, format!("{base}.server_group"))),
                Some(&group) if !blueprint.node_groups[group].roles.contains(&Role::Storage) => out.push(
                    Diagnostic::warning(
                        "server-group-without-storage-role",
                        format!("`{server}` serves `{}` but does not have the `storage` role", fs.name),
                    )
                    .at(&loaded.source, format!("{base}.server_group"))
                    .help(format!("add `storage` to the roles of `{server}`")),
                ),
                Some(_) => {}
            }
        }
        for (member, group) in fs.groups.iter().enumerate() {
            if !facts.has_group(group) {
                out.push(unknown(group, format!("{base}.groups[{member}]")));
            }
        }
    }
}

fn scratch(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    if blueprint.storage.scratch.is_some()
        && !blueprint.node_groups.iter().any(|g| g.local_nvme.as_ref().is_some_and(|nvme| nvme.count > 0))
    {
        out.push(
            Diagnostic::warning("scratch-without-nvme", "scratch is declared but no node group has `local_nvme`")
                .at(&loaded.source, "storage.scratch")
                .help("add `local_nvme: { count: N, size_gb: S }` to the groups that have local drives, or remove `scratch:`"),
        );
    }
}

/// Largest bandwidth (GB/s) a filesystem is believed to reach: an order of magnitude
/// above the fastest parallel filesystems built (Frontier's Orion, ~10 TB/s). Above it
/// the value is most likely in MB/s or Gb/s.
const MAX_PLAUSIBLE_GB_PER_S: f64 = 100_000.0;

/// Largest metadata rate (ops/s) believed reachable; IO500 leaders are near 10^7.
const MAX_PLAUSIBLE_OPS: f64 = 1.0e9;

fn expectations(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, fs) in loaded.blueprint.storage.filesystems.iter().enumerate() {
        let Some(expected) = &fs.expected else { continue };
        for (key, value, unit) in expected.values() {
            let Some(value) = value else { continue };
            let path = format!("storage.filesystems[{index}].expected.{key}");
            if !value.is_finite() || value <= 0.0 {
                out.push(
                    Diagnostic::error(
                        "invalid-expected-performance",
                        format!("expected `{key}: {value}` of filesystem `{}` is not a positive number", fs.name),
                    )
                    .at(&loaded.source, path)
                    .help(format!("give the aggregate the filesystem must deliver, in {unit}, or remove the key")),
                );
                continue;
            }
            let limit = if unit == "GB/s" { MAX_PLAUSIBLE_GB_PER_S } else { MAX_PLAUSIBLE_OPS };
            if value > limit {
                out.push(
                    Diagnostic::warning(
                        "implausible-expected-performance",
                        format!(
                            "expected `{key}: {value}` of filesystem `{}` is above any filesystem built ({limit} {unit})",
                            fs.name
                        ),
                    )
                    .at(&loaded.source, path)
                    .help(format!(
                        "the unit is {unit}{}",
                        if unit == "GB/s" { " (gigabytes, not megabytes or gigabits)" } else { "" }
                    )),
                );
            }
        }
    }
}
