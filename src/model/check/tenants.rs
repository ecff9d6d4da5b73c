//! Checks of tenants: unique names and users, guarantees that the cluster can
//! honour, and the accounting database that QOS-based guarantees need.

use std::collections::{BTreeSet, HashMap};

use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::{Role, SchedulerKind};
use crate::diagnostic::{Diagnostic, Diagnostics};

pub(super) fn check(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    names_and_users(loaded, out);
    guarantees(loaded, out);
    accounting(loaded, out);
}

fn names_and_users(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let tenants = &loaded.blueprint.tenants;
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut users: HashMap<&str, usize> = HashMap::new();
    for (index, tenant) in tenants.iter().enumerate() {
        if let Some(first) = names.get(tenant.name.as_str()) {
            out.push(
                Diagnostic::error("duplicate-tenant", format!("tenant `{}` is declared twice", tenant.name))
                    .at(&loaded.source, format!("tenants[{index}].name"))
                    .help(format!("merge it with `tenants[{first}]` or rename it")),
            );
        } else {
            names.insert(&tenant.name, index);
        }
        for (position, user) in tenant.users.iter().enumerate() {
            match users.get(user.as_str()) {
                Some(&owner) if owner != index => out.push(
                    Diagnostic::error(
                        "user-in-multiple-tenants",
                        format!("user `{user}` is in tenants `{}` and `{}`", tenants[owner].name, tenant.name),
                    )
                    .at(&loaded.source, format!("tenants[{index}].users[{position}]"))
                    .help("a user's jobs are charged to one tenant by default: keep the user in one tenant"),
                ),
                Some(_) => {}
                None => {
                    users.insert(user, index);
                }
            }
        }
    }
}

fn guarantees(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    let compute_gpus = || {
        blueprint
            .node_groups
            .iter()
            .filter(|g| g.roles.contains(&Role::Compute))
            // Spares are out of the tenants' partitions: they cannot back a guarantee.
            .filter_map(|g| g.gpu.as_ref().map(|gpu| (g.count.saturating_sub(g.spares), gpu.count)))
            .filter(|(_, per_node)| *per_node > 0)
    };
    let total: u64 = compute_gpus().map(|(nodes, per_node)| u64::from(nodes) * u64::from(per_node)).sum();
    let per_node: BTreeSet<u32> = compute_gpus().map(|(_, per_node)| per_node).collect();
    let mut guaranteed: u64 = 0;
    let mut reported = false;
    for (index, tenant) in blueprint.tenants.iter().enumerate() {
        let path = format!("tenants[{index}].guaranteed_gpus");
        guaranteed += u64::from(tenant.guaranteed_gpus);
        if guaranteed > total && !reported {
            reported = true;
            let all: u64 = blueprint.tenants.iter().map(|t| u64::from(t.guaranteed_gpus)).sum();
            out.push(
                Diagnostic::error(
                    "guarantees-exceed-gpus",
                    format!(
                        "tenants are guaranteed `{all}` GPUs but the compute nodes have `{total}`{}",
                        if blueprint.node_groups.iter().any(|g| g.spares > 0) { " besides the spares" } else { "" }
                    ),
                )
                .at(&loaded.source, &path)
                .help("lower the guarantees so they add up to at most the cluster's GPUs; borrowing covers the rest"),
            );
        }
        let guarantee = tenant.guaranteed_gpus;
        if guarantee > 0 && !per_node.is_empty() && !per_node.iter().any(|n| guarantee % n == 0) {
            let sizes: Vec<String> = per_node.iter().map(|n| format!("`{n}`")).collect();
            out.push(
                Diagnostic::warning(
                    "guarantee-not-node-multiple",
                    format!(
                        "tenant `{}` is guaranteed `{guarantee}` GPUs, not a multiple of the GPUs per node ({})",
                        tenant.name,
                        sizes.join(", ")
                    ),
                )
                .at(&loaded.source, &path)
                .help("whole-node jobs leave part of the guarantee unusable: round it to whole nodes"),
            );
        }
    }
}

fn accounting(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    if blueprint.tenants.is_empty() || blueprint.scheduler.kind != SchedulerKind::Slurm {
        return;
    }
    if blueprint.scheduler.slurm.as_ref().is_some_and(|slurm| !slurm.accounting) {
        out.push(
            Diagnostic::error(
                "tenants-need-accounting",
                format!("`{}` tenants are declared but Slurm accounting is off", blueprint.tenants.len()),
            )
            .at(&loaded.source, "scheduler.slurm.accounting")
            .help("set `accounting: true`: tenant guarantees are QOS limits, and QOS lives in slurmdbd"),
        );
    }
}
