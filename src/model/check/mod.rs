//! Semantic checks: everything a valid YAML blueprint can still get wrong.
//!
//! Stage: check. Input: a loaded blueprint (and optionally an inventory). Output:
//! [`Diagnostics`], all at once, each with a stable id, a location and a fix hint.
//!
//! One submodule per part of the blueprint; each check is a small function that
//! pushes what it finds and never returns early, so one problem never hides another.
//! Facts several checks need (host names, fabric size) are computed once in
//! [`Facts`], with every arithmetic step bounded: a hostile count or radix yields a
//! diagnostic, never an overflow or a huge allocation.

mod acceptance;
mod cloud;
mod fabric;
mod hardware;
mod inventory;
mod kubeadm;
mod kubernetes;
mod monitoring;
mod names;
mod network;
mod nodes;
mod nvlink;
mod os;
mod packages;
mod scheduler;
mod software;
mod storage;
mod tenants;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::{Blueprint, Role};
use crate::diagnostic::{Diagnostics, did_you_mean};
use crate::inventory::LoadedInventory;
use crate::model::expand::hostname;
use crate::topology::{Sizing, SizingError, SizingInput, parse_ratio, size};

/// Most nodes a blueprint may declare: far above the largest fabric (32,768 nodes)
/// and low enough that listing every host name stays cheap.
pub const MAX_NODES: u64 = 1 << 20;
/// Most rails (NICs per node on the compute fabric).
pub const MAX_RAILS: u32 = 32;
/// Largest switch radix accepted (ports at link speed).
pub const MAX_RADIX: u32 = 4096;
/// Largest term of an oversubscription ratio.
pub const MAX_RATIO_TERM: u32 = 64;

/// Runs every check.
#[must_use]
pub fn check(loaded: &LoadedBlueprint, inventory: Option<&LoadedInventory>) -> Diagnostics {
    let facts = Facts::gather(&loaded.blueprint);
    let mut out = Diagnostics::default();
    nodes::check(loaded, &facts, &mut out);
    fabric::check(loaded, &facts, &mut out);
    network::check(loaded, &facts, &mut out);
    storage::check(loaded, &facts, &mut out);
    scheduler::check(loaded, &facts, &mut out);
    nvlink::check(loaded, &facts, &mut out);
    tenants::check(loaded, &mut out);
    names::check(loaded, &mut out);
    kubernetes::check(loaded, &mut out);
    acceptance::check(loaded, &mut out);
    hardware::check(loaded, &mut out);
    software::check(loaded, &mut out);
    os::check(loaded, &mut out);
    packages::check(loaded, &facts, &mut out);
    monitoring::check(loaded, &facts, &mut out);
    if let Some(inventory) = inventory {
        cloud::check(loaded, inventory, facts.hostnames.as_deref(), &mut out);
        monitoring::secrets(loaded, inventory, &mut out);
        kubeadm::inventory(loaded, inventory, &mut out);
        os::inventory(loaded, inventory, &mut out);
        monitoring::bmc_addresses(loaded, inventory, &mut out);
        let blueprint_is_valid = !out.has_errors();
        inventory::check(loaded, inventory, &facts, blueprint_is_valid, &mut out);
    }
    out.sort();
    out
}

/// Values several checks need, computed once and only from bounded inputs.
pub(crate) struct Facts {
    /// Index of the first group with each name.
    groups: HashMap<String, usize>,
    /// Nodes declared, summed without overflow.
    total_nodes: u64,
    /// Every node's host name with its group index, in blueprint order; `None` when
    /// the blueprint declares more than [`MAX_NODES`] (reported by `nodes`).
    hostnames: Option<Vec<(usize, String)>>,
    /// Nodes with rail NICs (on the compute fabric).
    fabric_nodes: u64,
    /// The fabric size; `None` when an input is out of range (reported elsewhere).
    sizing: Option<Result<Sizing, SizingError>>,
}

impl Facts {
    fn gather(blueprint: &Blueprint) -> Self {
        let mut groups = HashMap::new();
        for (index, group) in blueprint.node_groups.iter().enumerate() {
            groups.entry(group.name.clone()).or_insert(index);
        }
        let total_nodes: u64 = blueprint.node_groups.iter().map(|g| u64::from(g.count)).sum();
        let fabric_nodes: u64 = blueprint
            .node_groups
            .iter()
            .filter(|g| g.rail_nics.as_ref().is_some_and(|nics| nics.count > 0))
            .map(|g| u64::from(g.count))
            .sum();
        let hostnames = (total_nodes <= MAX_NODES).then(|| {
            let mut names = Vec::with_capacity(usize::try_from(total_nodes).unwrap_or(0));
            for (index, group) in blueprint.node_groups.iter().enumerate() {
                // A malformed pattern is reported by `nodes`; its group gets no names.
                if index_width(&group.hostname).is_err() {
                    continue;
                }
                for offset in 0..group.count {
                    // An index past u32::MAX is reported by `nodes`; stop the group there.
                    let Some(number) = group.start_index.checked_add(offset) else { break };
                    names.push((index, hostname(&group.hostname, number)));
                }
            }
            names
        });
        let sizing = sizing_input(blueprint, fabric_nodes).map(size);
        Self { groups, total_nodes, hostnames, fabric_nodes, sizing }
    }

    /// Whether a node group with this name exists.
    fn has_group(&self, name: &str) -> bool {
        self.groups.contains_key(name)
    }

    /// The fabric size when it could be computed.
    fn sizing(&self) -> Option<&Sizing> {
        self.sizing.as_ref().and_then(|result| result.as_ref().ok())
    }
}

/// The sizing inputs, or `None` when one is out of the range `size` is safe for.
fn sizing_input(blueprint: &Blueprint, fabric_nodes: u64) -> Option<SizingInput> {
    let compute = &blueprint.fabric.compute;
    let ratio = parse_ratio(&compute.oversubscription)?;
    let sane = (1..=MAX_RAILS).contains(&compute.rails)
        && (1..=MAX_RADIX).contains(&compute.switch.radix)
        && ratio.0 <= MAX_RATIO_TERM
        && ratio.1 <= MAX_RATIO_TERM
        && fabric_nodes <= MAX_NODES;
    sane.then(|| SizingInput {
        nodes: u32::try_from(fabric_nodes).unwrap_or(u32::MAX),
        rails: compute.rails,
        radix: compute.switch.radix,
        oversubscription: ratio,
        uplinks_override: compute.uplinks_per_leaf,
    })
}

/// Whether any group has `role`.
fn has_role(blueprint: &Blueprint, role: Role) -> bool {
    blueprint.node_groups.iter().any(|group| group.roles.contains(&role))
}

/// A fix hint for a name that is not among `known`: the closest one, and the list.
fn unknown_name_help<'a>(name: &str, known: impl IntoIterator<Item = &'a str> + Clone, what: &str) -> String {
    let list: Vec<String> = known.clone().into_iter().map(|k| format!("`{k}`")).collect();
    let declared =
        if list.is_empty() { format!("no {what} is declared") } else { format!("declared: {}", list.join(", ")) };
    match did_you_mean(name, known) {
        Some(close) => format!("did you mean `{close}`? {declared}"),
        None => declared,
    }
}

/// `[a-z][a-z0-9-]*` and at most `max` characters: names that are safe as Slurm,
/// file and resource names.
fn is_simple_name(name: &str, max: usize) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= max
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A name rewritten to pass [`is_simple_name`], for "did you mean" hints.
fn simple_name_suggestion(name: &str, max: usize) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed: String = out.trim_start_matches(|c: char| c.is_ascii_digit() || c == '-').chars().take(max).collect();
    let trimmed = trimmed.trim_end_matches('-').to_owned();
    if trimmed.is_empty() { "cluster".to_owned() } else { trimmed }
}

/// Most digits `{index:0N}` may pad to.
pub const MAX_INDEX_WIDTH: usize = 9;

/// The zero-padding width of a host name pattern's `{index}` placeholder: `None`
/// without a placeholder, or why the pattern is malformed.
fn index_width(pattern: &str) -> Result<Option<usize>, String> {
    let Some(start) = pattern.find("{index") else {
        return if pattern.contains(['{', '}']) {
            Err("the only placeholder is `{index}` (or `{index:02}` for zero-padding)".to_owned())
        } else {
            Ok(None)
        };
    };
    let rest = &pattern[start + "{index".len()..];
    let Some(end) = rest.find('}') else {
        return Err("`{index` is not closed with `}`".to_owned());
    };
    if rest[end + 1..].contains(['{', '}']) || pattern[..start].contains(['{', '}']) {
        return Err("a pattern has one `{index}` placeholder and no other braces".to_owned());
    }
    let spec = &rest[..end];
    if spec.is_empty() {
        return Ok(Some(0));
    }
    match spec.strip_prefix(":0").map(str::parse::<usize>) {
        Some(Ok(width)) if (1..=MAX_INDEX_WIDTH).contains(&width) => Ok(Some(width)),
        _ => Err(format!(
            "`{{index{spec}}}` is not a placeholder: write `{{index}}` or `{{index:0N}}` with N from 1 to {MAX_INDEX_WIDTH}"
        )),
    }
}
