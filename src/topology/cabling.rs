//! The cabling plan as rows: every node NIC → leaf port and switch → switch cable,
//! for a work order, a CSV for the cabling crew, or a diff against LLDP.
//!
//! Stage: expand (output view). Input: [`Model`]. Output: [`Cable`] rows.

use std::fmt::Write as _;

use serde::Serialize;

use super::LinkKind;
use crate::model::Model;

/// One cable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cable {
    /// `node-leaf`, `leaf-spine` or `spine-core`.
    pub kind: &'static str,
    /// Rail, for node-to-leaf cables.
    pub rail: Option<u32>,
    /// Lower device (node or switch).
    pub src_device: String,
    /// Its port (NIC name or switch port number).
    pub src_port: String,
    /// Upper device.
    pub dst_device: String,
    /// Its port number.
    pub dst_port: u32,
}

/// Every cable of the compute fabric: node cables first (node, rail order), then
/// leaf-spine, then spine-core.
#[must_use]
pub fn cables(model: &Model) -> Vec<Cable> {
    let switches = &model.fabric.switches;
    let mut rows = Vec::with_capacity(model.fabric.links.len() + model.nodes.len() * 8);
    for node in &model.nodes {
        for port in &node.rails {
            rows.push(Cable {
                kind: "node-leaf",
                rail: Some(port.rail),
                src_device: node.name.clone(),
                src_port: port.netdev.clone(),
                dst_device: switches[port.leaf].name.clone(),
                dst_port: port.leaf_port,
            });
        }
    }
    for link in &model.fabric.links {
        rows.push(Cable {
            kind: match link.kind {
                LinkKind::LeafSpine => "leaf-spine",
                LinkKind::SpineCore => "spine-core",
            },
            rail: None,
            src_device: switches[link.lower].name.clone(),
            src_port: link.lower_port.to_string(),
            dst_device: switches[link.upper].name.clone(),
            dst_port: link.upper_port,
        });
    }
    rows
}

/// The rows as CSV with a header line.
#[must_use]
pub fn csv(rows: &[Cable]) -> String {
    let mut out = String::from("kind,rail,src_device,src_port,dst_device,dst_port\n");
    for row in rows {
        let rail = row.rail.map(|r| r.to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{rail},{},{},{},{}",
            row.kind, row.src_device, row.src_port, row.dst_device, row.dst_port
        );
    }
    out
}
