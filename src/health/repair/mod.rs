//! Self-repair: what happens to a node after its own health check drained it. A
//! service on the controller walks the failing check's repair ladder — relink and
//! reboot (over the controller's root SSH to the node), power-cycle (through the BMC),
//! diagnose (a command on the controller) — and sends what no step
//! repaired to RMA, under a budget; the node's own checks decide whether a step worked
//! (they resume it).
//!
//! Stage: health (render-time, pure; `deploy` calls it). Input: the validator
//! [`Catalog`] (each check's ladder next to its probe), the blueprint's
//! `monitoring.repair` and the model. Output: the [`Policy`] the service runs with,
//! [`decide`] (the service's decision, in Rust for tests and `toolkit status`),
//! [`state`] (the service's state file) and [`resources`] (the service on the
//! controller).
//!
//! Why a Python script on the controller and not toolkit's binary: toolkit runs where
//! the operator is (a laptop, CI), possibly another OS or architecture than the
//! controller, and nothing of it is installed on the cluster; the controller is Debian
//! with `python3` already (Prometheus' and the Slurm view's tools use it), and a
//! rendered script is a planned, diffed file like the node health program. The
//! decision is written twice — here and in the script — and a test runs both on the
//! same cases.

pub mod decide;
pub mod resources;
pub mod state;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::blueprint::schema::{RepairStep, Role};
use crate::model::Model;
use crate::validate::catalog::Catalog;

pub use decide::{Action, Observed, decide};

/// The start of the drain reasons the node health checks set (the only drains a
/// step acts on).
pub const HEALTH_PREFIX: &str = super::REASON_PREFIX;

/// The start of the drain reason of a node sent to RMA: `toolkit:rma <check>: <detail>`.
pub const RMA_PREFIX: &str = "toolkit:rma";

/// The drain reason of a node sent to RMA for `check`: what the RMA report bundle and
/// `toolkit status` key on. Slurm keeps reasons short: the detail is cut at 200 bytes.
#[must_use]
pub fn rma_reason(check: &str, detail: &str) -> String {
    let mut reason = format!("{RMA_PREFIX} {check}: {detail}").replace(['"', '\n'], "");
    if reason.len() > 200 {
        let mut end = 200;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// What the service runs with: `policy.json` on the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Policy {
    /// Nodes in repair at once.
    pub max_in_repair: u32,
    /// Repairs a node may start in 24 h before it goes to RMA.
    pub max_repairs_per_day: u32,
    /// Seconds between two passes of the timer.
    pub interval_seconds: u64,
    /// Seconds a step waits for the node's checks to resume it.
    pub settle_seconds: u64,
    /// The diagnose step's command, `{node}` replaced.
    pub diagnose: String,
    /// Per check, its ladder (the blueprint's override, else its validator's).
    pub ladders: BTreeMap<String, Vec<RepairStep>>,
    /// Per compute node, its rail interfaces (what `relink` takes down and up).
    pub rails: BTreeMap<String, Vec<String>>,
    /// Per compute node with a BMC in the inventory, how to reach its Redfish service
    /// (the credentials are in a separate 0600 file, never here).
    pub bmcs: BTreeMap<String, BmcAccess>,
}

/// A node's Redfish service as the controller reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BmcAccess {
    /// Redfish base URL.
    pub endpoint: String,
    /// Skip TLS verification (the inventory's `insecure`); otherwise the controller's
    /// CA store verifies it.
    pub insecure: bool,
}

impl Policy {
    /// The ladder of `check`, if it has one.
    #[must_use]
    pub fn ladder(&self, check: &str) -> Option<&[RepairStep]> {
        self.ladders.get(check).map(Vec::as_slice).filter(|ladder| !ladder.is_empty())
    }
}

/// DCGM level 3 against the node's host engine, from the controller.
pub const DEFAULT_DIAGNOSE: &str = "dcgmi diag --host {node} -r 3";

/// The policy of the blueprint's `monitoring.repair`, or `None` without it (no service).
///
/// # Errors
/// A duration that does not parse (lint reports it with its location first).
pub fn policy(
    catalog: &Catalog,
    model: &Model,
    inventory: Option<&crate::inventory::Inventory>,
) -> Result<Option<Policy>, String> {
    let Some(repair) = model.blueprint.monitoring.as_ref().and_then(|monitoring| monitoring.repair.as_ref()) else {
        return Ok(None);
    };
    let seconds = |key: &str, text: &str| {
        crate::blueprint::duration::parse(text)
            .map(|length| length.as_secs().max(1))
            .map_err(|problem| format!("monitoring.repair.{key}: {problem}"))
    };
    let mut ladders: BTreeMap<String, Vec<RepairStep>> = catalog
        .specs
        .iter()
        .filter_map(|spec| Some((spec.id.clone(), spec.health.as_ref()?.repair.clone())))
        .filter(|(_, ladder)| !ladder.is_empty())
        .collect();
    ladders.extend(repair.checks.iter().map(|(check, ladder)| (check.clone(), ladder.clone())));
    let compute = model.nodes.iter().filter(|node| model.groups[node.group].has_role(Role::Compute));
    let rails = compute
        .clone()
        .filter(|node| !node.rails.is_empty())
        .map(|node| (node.name.clone(), node.rails.iter().map(|port| port.netdev.clone()).collect()))
        .collect();
    let bmcs = inventory
        .map(|inventory| {
            compute
                .filter_map(|node| {
                    let bmc = inventory.bmcs.get(&node.name)?;
                    Some((node.name.clone(), BmcAccess { endpoint: bmc.endpoint.clone(), insecure: bmc.insecure }))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(Policy {
        max_in_repair: repair.max_in_repair,
        max_repairs_per_day: repair.max_repairs_per_day,
        interval_seconds: seconds("interval", &repair.interval)?,
        settle_seconds: seconds("settle", &repair.settle)?,
        diagnose: repair.diagnose.clone().unwrap_or_else(|| DEFAULT_DIAGNOSE.to_owned()),
        ladders,
        rails,
        bmcs,
    }))
}
