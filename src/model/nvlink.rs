//! NVLink domains: the compute trays of a GB200/GB300 NVL72 rack share one NVLink
//! fabric through the rack's NVLink switch trays, so a job (or a segment of one) inside
//! a domain talks over NVLink, not the rail fabric.
//!
//! Stage: expand. Input: the blueprint's `nvlink_domains` and the expanded nodes.
//! Output: [`NvlinkDomain`]s with node indexes, which Slurm's block topology, the IMEX
//! node lists and the Kubernetes node labels are laid out from.

use std::collections::HashMap;

use serde::Serialize;

use super::{Node, hostlist};
use crate::blueprint::schema;

/// Compute trays of the largest NVLink domain (NVL72: 18 trays).
pub const MAX_TRAYS: usize = 18;
/// GPUs of the largest NVLink domain (NVL72: 72 GPUs).
pub const MAX_GPUS: u64 = 72;

/// One NVLink domain, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvlinkDomain {
    /// Name, as the blueprint gives it.
    pub name: String,
    /// Indexes into [`Model::nodes`](super::Model::nodes), in the blueprint's order.
    pub nodes: Vec<usize>,
    /// NVLink switch trays of the rack.
    pub switch_trays: u32,
}

/// Resolves each domain's hostlist against the nodes; names that are not nodes, and
/// malformed lists, are left out (lint reports both with their location).
#[must_use]
pub fn resolve(domains: &[schema::NvlinkDomain], nodes: &[Node]) -> Vec<NvlinkDomain> {
    if domains.is_empty() {
        return Vec::new();
    }
    let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, node)| (node.name.as_str(), i)).collect();
    domains
        .iter()
        .map(|domain| NvlinkDomain {
            name: domain.name.clone(),
            nodes: hostlist::expand(&domain.nodes)
                .unwrap_or_default()
                .iter()
                .filter_map(|name| index.get(name.as_str()).copied())
                .collect(),
            switch_trays: domain.switch_trays,
        })
        .collect()
}

/// The domain of each node that has one: node index → domain index.
#[must_use]
pub fn domain_of(domains: &[NvlinkDomain]) -> HashMap<usize, usize> {
    let mut out = HashMap::new();
    for (domain_index, domain) in domains.iter().enumerate() {
        for &node in &domain.nodes {
            out.entry(node).or_insert(domain_index);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_hostlists_to_node_indexes() {
        let loaded =
            crate::blueprint::load(std::path::Path::new("blueprints/gb200-nvl72.yaml")).expect("blueprint loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        assert_eq!(model.nvlink_domains.len(), 2);
        for domain in &model.nvlink_domains {
            assert_eq!(domain.nodes.len(), MAX_TRAYS, "{}", domain.name);
            assert_eq!(domain.switch_trays, 9);
        }
        let first = &model.nodes[model.nvlink_domains[1].nodes[0]];
        assert_eq!(first.name, "gb019");
        assert_eq!(domain_of(&model.nvlink_domains).len(), 36);
    }
}
