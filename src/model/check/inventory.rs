//! Checks of an inventory against its blueprint: every node and planned switch is
//! there, nothing unknown is, bastions exist, addresses are unique.
//!
//! Diagnostics point into the inventory's own file.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::Facts;
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::FabricKind;
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::inventory::{LoadedInventory, SwitchOs};
use crate::model::{self, hostlist};
use crate::source::{SourceFile, join_key};
use crate::topology::ports::is_interface_name;

/// "Did you mean" is computed for this many unknown names at most: each costs one
/// edit distance per blueprint host.
const MAX_SUGGESTIONS: usize = 16;

pub(super) fn check(
    loaded: &LoadedBlueprint,
    inventory: &LoadedInventory,
    facts: &Facts,
    blueprint_is_valid: bool,
    out: &mut Diagnostics,
) {
    version(inventory, out);
    if let Some(names) = &facts.hostnames {
        let hosts: Vec<&str> = names.iter().map(|(_, name)| name.as_str()).collect();
        // Nodes of cloud groups get their host entries from the instances deploy runs.
        let cloud_groups = inventory.inventory.cloud.as_ref().map(|cloud| &cloud.node_groups);
        let listed: Vec<&str> = names
            .iter()
            .filter(|(group, _)| {
                !cloud_groups.is_some_and(|groups| groups.contains_key(&loaded.blueprint.node_groups[*group].name))
            })
            .map(|(_, name)| name.as_str())
            .collect();
        missing_hosts(inventory, &listed, out);
        unknown_hosts(inventory, &hosts, out);
    }
    // Switch names come from the planned fabric, which only a valid blueprint has.
    if blueprint_is_valid && let Ok(model) = model::expand(&loaded.blueprint) {
        let planned: Vec<&str> = model.fabric.switches.iter().map(|s| s.name.as_str()).collect();
        switches(inventory, &planned, loaded.blueprint.fabric.compute.kind, out);
    }
    bastions(inventory, out);
    duplicate_addresses(inventory, out);
    let mut macs = BTreeSet::new();
    rail_macs(loaded, inventory, &mut macs, out);
    port_macs(inventory, &mut macs, out);
}

fn version(inventory: &LoadedInventory, out: &mut Diagnostics) {
    let version = inventory.inventory.version;
    if version != 1 {
        out.push(
            Diagnostic::error("unsupported-version", format!("inventory version `{version}` is not supported"))
                .at(&inventory.source, "version")
                .help("write `version: 1`, the only schema version"),
        );
    }
}

fn missing_hosts(inventory: &LoadedInventory, hosts: &[&str], out: &mut Diagnostics) {
    let listed = &inventory.inventory.hosts;
    let missing: Vec<&str> = hosts.iter().copied().filter(|name| !listed.contains_key(*name)).collect();
    if missing.is_empty() {
        return;
    }
    out.push(
        Diagnostic::error(
            "inventory-missing-hosts",
            format!(
                "`{}` node(s) of the blueprint have no entry in `hosts`: `{}`",
                missing.len(),
                hostlist::compress(missing.iter().copied())
            ),
        )
        .at(&inventory.source, "hosts")
        .help("add each node with its management address, e.g. `node01: { address: 10.10.0.11 }`"),
    );
}

fn suggestion(name: &str, candidates: &[&str], budget: &mut usize) -> Option<String> {
    if *budget == 0 {
        return None;
    }
    *budget -= 1;
    did_you_mean(name, candidates.iter().copied()).map(|close| format!("did you mean `{close}`? "))
}

fn unknown_hosts(inventory: &LoadedInventory, hosts: &[&str], out: &mut Diagnostics) {
    let known: HashSet<&str> = hosts.iter().copied().collect();
    let all = hostlist::compress(hosts.iter().copied());
    let mut budget = MAX_SUGGESTIONS;
    let sections: [(&str, Vec<&String>); 2] =
        [("hosts", inventory.inventory.hosts.keys().collect()), ("bmcs", inventory.inventory.bmcs.keys().collect())];
    for (section, names) in sections {
        for name in names {
            if known.contains(name.as_str()) {
                continue;
            }
            let close = suggestion(name, hosts, &mut budget).unwrap_or_default();
            push_at_key(
                out,
                Diagnostic::warning(
                    "inventory-unknown-host",
                    format!("`{section}` names `{name}`, which is not a node of the blueprint"),
                )
                .at(&inventory.source, join_key(section, name))
                .help(format!("{close}the blueprint's nodes are `{all}`")),
                &inventory.source,
            );
        }
    }
}

/// Moves a diagnostic about an entry's name from its value to its key.
fn push_at_key(out: &mut Diagnostics, diagnostic: Diagnostic, source: &SourceFile) {
    let key = diagnostic.key_path.as_deref().and_then(|path| source.map.locate_key(path));
    out.push(match key {
        Some(position) => diagnostic.at_position(source, position),
        None => diagnostic,
    });
}

fn switches(inventory: &LoadedInventory, planned: &[&str], kind: FabricKind, out: &mut Diagnostics) {
    let listed = &inventory.inventory.switches;
    let known: HashSet<&str> = planned.iter().copied().collect();
    let all = hostlist::compress(planned.iter().copied());
    let mut budget = MAX_SUGGESTIONS;
    for name in listed.keys() {
        if known.contains(name.as_str()) {
            continue;
        }
        let close = suggestion(name, planned, &mut budget).unwrap_or_default();
        push_at_key(
            out,
            Diagnostic::error(
                "inventory-unknown-switch",
                format!("switch `{name}` is not a switch of the planned fabric"),
            )
            .at(&inventory.source, join_key("switches", name))
            .help(format!("{close}the planned switches are `{all}` (`toolkit topology` shows the plan)")),
            &inventory.source,
        );
    }
    // InfiniBand switches are managed by the subnet manager, not over SSH.
    if kind == FabricKind::Roce {
        let missing: Vec<&str> = planned.iter().copied().filter(|name| !listed.contains_key(*name)).collect();
        if !missing.is_empty() {
            out.push(
                Diagnostic::warning(
                    "inventory-missing-switches",
                    format!(
                        "`{}` planned switch(es) have no entry in `switches`: `{}`",
                        missing.len(),
                        hostlist::compress(missing.iter().copied())
                    ),
                )
                .at(&inventory.source, "switches")
                .help("their configs are rendered but cannot be deployed: add them with their management address and `os`"),
            );
        }
    }
}

fn bastions(inventory: &LoadedInventory, out: &mut Diagnostics) {
    let inv = &inventory.inventory;
    let names: Vec<&str> = inv.bastions.keys().map(String::as_str).collect();
    let mut references: Vec<(String, &str)> = Vec::new();
    if let Some(jump) = &inv.defaults.proxy_jump {
        references.push(("defaults.proxy_jump".to_owned(), jump));
    }
    for (section, hosts) in [("bastions", &inv.bastions), ("hosts", &inv.hosts)] {
        for (name, host) in hosts {
            if let Some(jump) = &host.proxy_jump {
                references.push((format!("{}.proxy_jump", join_key(section, name)), jump));
            }
        }
    }
    for (path, jump) in references {
        if !inv.bastions.contains_key(jump) {
            out.push(
                Diagnostic::error("unknown-bastion", format!("`proxy_jump: {jump}` names no bastion"))
                    .at(&inventory.source, path)
                    .help(super::unknown_name_help(jump, names.iter().copied(), "bastion")),
            );
        }
    }
}

fn duplicate_addresses(inventory: &LoadedInventory, out: &mut Diagnostics) {
    let inv = &inventory.inventory;
    let entries = inv
        .hosts
        .iter()
        .map(|(name, host)| ("hosts", name, &host.address))
        .chain(inv.switches.iter().map(|(name, switch)| ("switches", name, &switch.address)));
    let mut seen: HashMap<String, String> = HashMap::new();
    for (section, name, address) in entries {
        let key = address.trim().to_ascii_lowercase();
        let path = join_key(section, name);
        if let Some(first) = seen.get(&key) {
            out.push(
                Diagnostic::error("duplicate-address", format!("`{path}` has address `{address}`, as does `{first}`"))
                    .at(&inventory.source, format!("{path}.address"))
                    .help("each host and switch needs its own management address"),
            );
        } else {
            seen.insert(key, path);
        }
    }
}

fn is_mac(text: &str) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    parts.len() == 6 && parts.iter().all(|part| part.len() == 2 && part.chars().all(|c| c.is_ascii_hexdigit()))
}

fn rail_macs(
    loaded: &LoadedBlueprint,
    inventory: &LoadedInventory,
    macs: &mut BTreeSet<String>,
    out: &mut Diagnostics,
) {
    let rails = loaded.blueprint.fabric.compute.rails;
    for (name, host) in &inventory.inventory.hosts {
        for (rail, mac) in &host.rail_macs {
            let path = format!("{}.rail_macs.{rail}", join_key("hosts", name));
            if *rail >= rails {
                out.push(
                    Diagnostic::error(
                        "invalid-rail-mac",
                        format!("rail `{rail}` does not exist: the fabric has `{rails}` rails"),
                    )
                    .at(&inventory.source, path)
                    .help(format!("rails are numbered from 0 to {}", rails.saturating_sub(1))),
                );
            } else if !is_mac(mac) {
                out.push(
                    Diagnostic::error("invalid-rail-mac", format!("`{mac}` is not a MAC address"))
                        .at(&inventory.source, path)
                        .help("write six hex pairs separated by `:`, e.g. `b8:3f:d2:00:00:10`"),
                );
            } else if !macs.insert(mac.to_ascii_lowercase()) {
                out.push(
                    Diagnostic::error("invalid-rail-mac", format!("MAC `{mac}` is listed twice"))
                        .at(&inventory.source, path)
                        .help("each rail NIC has its own MAC address"),
                );
            }
        }
    }
}

/// Ports renamed by MAC: MACs, names Linux accepts, on switches whose OS lets toolkit
/// name ports (plain FRR on Linux; Cumulus and SONiC name their own).
fn port_macs(inventory: &LoadedInventory, macs: &mut BTreeSet<String>, out: &mut Diagnostics) {
    for (name, switch) in &inventory.inventory.switches {
        let switch_path = join_key("switches", name);
        if switch.os != SwitchOs::Frr && !switch.port_macs.is_empty() {
            out.push(
                Diagnostic::error(
                    "invalid-port-mac",
                    format!("switch `{name}` names its own ports: `port_macs` would rename them under its OS"),
                )
                .at(&inventory.source, format!("{switch_path}.port_macs"))
                .help("remove `port_macs`; it is for Linux switches running FRR (`os: frr`)"),
            );
            continue;
        }
        for (port, mac) in &switch.port_macs {
            let path = format!("{switch_path}.port_macs.{port}");
            let problem = if !is_interface_name(port) {
                Some((
                    format!("`{port}` is not an interface name"),
                    "use 1 to 15 letters, digits, `-`, `_` or `.`, as frr.conf names the port (`swp26`, `hosts`)",
                ))
            } else if !is_mac(mac) {
                Some((
                    format!("`{mac}` is not a MAC address"),
                    "write six hex pairs separated by `:`, e.g. `02:42:0a:c8:00:01`",
                ))
            } else if !macs.insert(mac.to_ascii_lowercase()) {
                Some((format!("MAC `{mac}` is listed twice"), "each port has its own MAC address"))
            } else {
                None
            };
            if let Some((message, help)) = problem {
                out.push(Diagnostic::error("invalid-port-mac", message).at(&inventory.source, path).help(help));
            }
        }
    }
}
