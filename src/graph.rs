//! The dependency graph of resources.
//!
//! Stage: graph. Input: `Vec<Resource>`. Output: [`ResourceGraph`], a petgraph DAG
//! with a topological order; an unknown dependency or a cycle is a diagnostic that
//! names the resources involved.

use std::collections::HashMap;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use petgraph::algo::kosaraju_scc;
use petgraph::graph::{DiGraph, NodeIndex};

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::resource::{Resource, ResourceId};

/// Resources as a DAG; edges run from a dependency to its dependent.
#[derive(Debug, Clone)]
pub struct ResourceGraph {
    /// The graph; node weights index into `resources`.
    pub graph: DiGraph<usize, ()>,
    /// The resources, in input order.
    pub resources: Vec<Resource>,
    /// Resource indexes in an order where every dependency comes first.
    pub order: Vec<usize>,
}

impl ResourceGraph {
    /// Indexes of the resources `index` depends on directly.
    pub fn dependencies(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        self.graph.neighbors_directed(NodeIndex::new(index), petgraph::Direction::Incoming).map(|n| self.graph[n])
    }

    /// Indexes of the resources that depend on `index` directly.
    pub fn dependents(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        self.graph.neighbors_directed(NodeIndex::new(index), petgraph::Direction::Outgoing).map(|n| self.graph[n])
    }
}

/// Builds the graph.
///
/// # Errors
/// `unknown-dependency` for every id that no resource has, `duplicate-resource`
/// for ids used twice, `dependency-cycle` naming every resource of each cycle.
pub fn build(mut resources: Vec<Resource>) -> Result<ResourceGraph, Diagnostics> {
    let mut diagnostics = Diagnostics::default();
    // foldhash: hundreds of thousands of ids at scale, none chosen by an adversary.
    let mut index: HashMap<&ResourceId, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(resources.len(), foldhash::fast::RandomState::default());
    for (position, resource) in resources.iter().enumerate() {
        if index.insert(&resource.id, position).is_some() {
            diagnostics.push(
                Diagnostic::error("duplicate-resource", format!("resource `{}` is rendered twice", resource.id))
                    .help("two templates write the same path on the same target; rename one"),
            );
        }
    }
    let mut graph = DiGraph::with_capacity(resources.len(), resources.len() * 2);
    for position in 0..resources.len() {
        graph.add_node(position);
    }
    // The resource each dependency names, in the order of the dependencies.
    let mut dependency_indexes: Vec<u32> = Vec::with_capacity(resources.len() * 2);
    for (position, resource) in resources.iter().enumerate() {
        for dependency in &resource.depends_on {
            match index.get(dependency) {
                Some(&from) => {
                    graph.add_edge(NodeIndex::new(from), NodeIndex::new(position), ());
                    dependency_indexes.push(from as u32);
                }
                None => diagnostics.push(
                    Diagnostic::error(
                        "unknown-dependency",
                        format!("`{}` depends on `{dependency}`, which is not rendered", resource.id),
                    )
                    .help("a dependency must name a resource id of the form `target:kind:name`"),
                ),
            }
        }
    }
    if diagnostics.has_errors() {
        return Err(diagnostics);
    }
    drop(index);
    share_dependency_ids(&mut resources, &dependency_indexes);
    let Some(order) = stable_order(&graph) else {
        for component in kosaraju_scc(&graph) {
            let is_cycle = component.len() > 1 || component.first().is_some_and(|&n| graph.contains_edge(n, n));
            if is_cycle {
                let mut names: Vec<&str> = component.iter().map(|&n| resources[graph[n]].id.as_str()).collect();
                names.sort_unstable();
                diagnostics.push(
                    Diagnostic::error("dependency-cycle", format!("dependency cycle: {}", names.join(" → ")))
                        .help("remove one of these dependencies"),
                );
            }
        }
        return Err(diagnostics);
    };
    Ok(ResourceGraph { graph, resources, order })
}

/// Points every dependency at the id of the resource it names (`named`: that
/// resource's index, dependency by dependency): renderers build the ids they depend
/// on afresh (a copied node's, another host's), and at scale those equal copies of
/// ids already held were several KiB per node.
fn share_dependency_ids(resources: &mut [Resource], named: &[u32]) {
    let mut named = named.iter();
    for position in 0..resources.len() {
        for slot in 0..resources[position].depends_on.len() {
            if let Some(&from) = named.next() {
                let id = resources[from as usize].id.clone();
                resources[position].depends_on[slot] = id;
            }
        }
    }
}

/// Kahn's algorithm taking the lowest input index among ready resources, so the
/// order is the render order wherever dependencies allow: plans read top-down the
/// way templates were written. `None` when there is a cycle.
fn stable_order(graph: &DiGraph<usize, ()>) -> Option<Vec<usize>> {
    let mut waiting: Vec<usize> =
        graph.node_indices().map(|n| graph.neighbors_directed(n, petgraph::Direction::Incoming).count()).collect();
    let mut ready: BinaryHeap<Reverse<usize>> =
        waiting.iter().enumerate().filter(|(_, count)| **count == 0).map(|(index, _)| Reverse(index)).collect();
    let mut order = Vec::with_capacity(waiting.len());
    while let Some(Reverse(index)) = ready.pop() {
        order.push(graph[NodeIndex::new(index)]);
        for next in graph.neighbors_directed(NodeIndex::new(index), petgraph::Direction::Outgoing) {
            // A duplicate edge counts twice in `waiting` and is visited twice here.
            waiting[next.index()] -= 1;
            if waiting[next.index()] == 0 {
                ready.push(Reverse(next.index()));
            }
        }
    }
    (order.len() == waiting.len()).then_some(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::{Desired, Target};

    fn package(target: &str, name: &str, after: &[&str]) -> Resource {
        Resource::new(Target::node(target), name, Desired::Package { name: name.to_owned() })
            .after(after.iter().map(|id| ResourceId((*id).into())))
    }

    #[test]
    fn orders_dependencies_first() {
        let graph = build(vec![
            package("node01", "slurmd", &["head:package:slurmctld"]),
            package("head", "slurmctld", &["head:package:munge"]),
            package("head", "munge", &[]),
        ])
        .expect("acyclic");
        let ids: Vec<&str> = graph.order.iter().map(|&i| graph.resources[i].id.as_str()).collect();
        assert_eq!(ids, ["head:package:munge", "head:package:slurmctld", "node01:package:slurmd"]);
    }

    #[test]
    fn dependencies_share_the_id_of_the_resource_they_name() {
        let graph = build(vec![package("head", "munge", &[]), package("node01", "slurmd", &["head:package:munge"])])
            .expect("acyclic");
        let dependency = &graph.resources[1].depends_on[0];
        assert!(dependency.0.shares(&graph.resources[0].id.0), "one allocation, not an equal copy");
    }

    #[test]
    fn names_the_cycle() {
        let error = build(vec![
            package("a", "x", &["a:package:y"]),
            package("a", "y", &["a:package:x"]),
            package("a", "z", &[]),
        ])
        .expect_err("cycle");
        let rendered = error.render();
        assert!(rendered.contains("dependency cycle: a:package:x → a:package:y"), "{rendered}");
        assert!(!rendered.contains("a:package:z"));
    }

    #[test]
    fn names_an_unknown_dependency() {
        let error = build(vec![package("a", "x", &["b:package:missing"])]).expect_err("unknown");
        assert_eq!(error.0[0].id, "unknown-dependency");
        assert!(error.0[0].message.contains("b:package:missing"));
    }
}
