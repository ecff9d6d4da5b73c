//! The dependency graph of resources.
//!
//! Stage: graph. Input: `Vec<Resource>`. Output: [`ResourceGraph`], a DAG with a
//! topological order; an unknown dependency or a cycle is a diagnostic that names
//! the resources involved.
//!
//! Edges are kept as an adjacency list of `u32` indexes (each resource's
//! dependencies, packed): at 4,096 nodes the graph holds ~230,000 resources and
//! ~400,000 edges, 11 MB as a petgraph `DiGraph` (16 bytes per node and per edge,
//! edges sized for twice the resources), under 2.5 MB this way. The dependents are
//! listed only to order the resources: nothing after needs them, and at 4,096 nodes
//! keeping them was 2.5 MB more at a plan's peak. petgraph only names the cycles of
//! a graph that has some.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher as _;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use petgraph::algo::kosaraju_scc;
use petgraph::graph::{DiGraph, NodeIndex};

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::resource::{Resource, ResourceId};

/// Resources as a DAG; edges run from a dependency to its dependent.
#[derive(Debug, Clone)]
pub struct ResourceGraph {
    /// The resources, in input order.
    pub resources: Vec<Resource>,
    /// Resource indexes in an order where every dependency comes first: 4 bytes each
    /// (a graph holds fewer than 2^32 resources; its edges are `u32` too).
    pub order: Vec<u32>,
    /// Each resource's dependencies.
    dependencies: Adjacency,
}

impl ResourceGraph {
    /// [`ResourceGraph::order`] as indexes of [`ResourceGraph::resources`].
    #[must_use]
    pub fn ordered(&self) -> impl ExactSizeIterator<Item = usize> + DoubleEndedIterator + Clone + '_ {
        self.order.iter().map(|&index| index as usize)
    }

    /// Indexes of the resources `index` depends on directly, the last declared first
    /// (a dependency declared twice comes twice).
    pub fn dependencies(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        self.dependencies.of(index)
    }
}

/// Neighbour lists packed into one vector: `targets[starts[i]..starts[i + 1]]` are
/// the neighbours of resource `i`.
#[derive(Debug, Clone, Default)]
struct Adjacency {
    starts: Vec<u32>,
    targets: Vec<u32>,
}

impl Adjacency {
    /// The lists of `count` resources from `(resource, neighbour)` edges, each list
    /// in the reverse order of its edges in `edges` (the order petgraph walks them,
    /// kept so that nothing reading the lists changes).
    fn new(count: usize, edges: &[(u32, u32)]) -> Self {
        let mut starts = vec![0u32; count + 1];
        for &(from, _) in edges {
            starts[from as usize + 1] += 1;
        }
        for index in 0..count {
            starts[index + 1] += starts[index];
        }
        // Filled from each list's end, edges taken first to last.
        let mut next: Vec<u32> = starts[1..].to_vec();
        let mut targets = vec![0u32; edges.len()];
        for &(from, to) in edges {
            next[from as usize] -= 1;
            targets[next[from as usize] as usize] = to;
        }
        Self { starts, targets }
    }

    /// The lists of the reversed edges, each as [`Adjacency::new`] lists them from the
    /// edges reversed in place (`from` descending), for lists made of edges ordered by
    /// their first index, as [`resolve`] makes them.
    fn reversed(&self) -> Self {
        let count = self.starts.len() - 1;
        let mut starts = vec![0u32; count + 1];
        for &to in &self.targets {
            starts[to as usize + 1] += 1;
        }
        for index in 0..count {
            starts[index + 1] += starts[index];
        }
        // Filled from each list's end, `from` ascending.
        let mut next: Vec<u32> = starts[1..].to_vec();
        let mut targets = vec![0u32; self.targets.len()];
        for from in 0..count {
            for to in self.of(from) {
                next[to] -= 1;
                targets[next[to] as usize] = from as u32;
            }
        }
        Self { starts, targets }
    }

    fn of(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        let range = self.starts[index] as usize..self.starts[index + 1] as usize;
        self.targets[range].iter().map(|&neighbour| neighbour as usize)
    }
}

/// Builds the graph.
///
/// # Errors
/// `unknown-dependency` for every id that no resource has, `duplicate-resource`
/// for ids used twice, `dependency-cycle` naming every resource of each cycle.
pub fn build(resources: Vec<Resource>) -> Result<ResourceGraph, Diagnostics> {
    let edges = resolve(&resources)?;
    assemble(resources, edges)
}

/// The dependencies of resources, found by id: the first half of [`build`], which
/// only reads the resources (so other work on them can run beside it).
#[derive(Debug)]
pub struct Edges(Vec<(u32, u32)>);

/// Finds every dependency of `resources` by its id.
///
/// # Errors
/// `unknown-dependency` for every id that no resource has, `duplicate-resource`
/// for ids used twice.
pub fn resolve(resources: &[Resource]) -> Result<Edges, Diagnostics> {
    let mut diagnostics = Diagnostics::default();
    // Positions only, found by the hash of the id they index: 4 bytes a slot, not a
    // 16-byte (reference, position) pair. At 4,096 nodes the pairs' table was 9 MB, at
    // the plan's peak. foldhash: hundreds of thousands of ids, none chosen by an adversary.
    let hasher = foldhash::fast::RandomState::default();
    let hash = |id: &str| hasher.hash_one(id);
    let id_at = |position: &u32| resources[*position as usize].id.as_str();
    let mut index: HashTable<u32> = HashTable::with_capacity(resources.len());
    for (position, resource) in resources.iter().enumerate() {
        let id = resource.id.as_str();
        match index.entry(hash(id), |at| id_at(at) == id, |at| hash(id_at(at))) {
            Entry::Vacant(slot) => {
                slot.insert(position as u32);
            }
            Entry::Occupied(_) => diagnostics.push(
                Diagnostic::error("duplicate-resource", format!("resource `{}` is rendered twice", resource.id))
                    .help("two templates write the same path on the same target; rename one"),
            ),
        }
    }
    // Most dependencies name a resource rendered just before their dependent, with a
    // copy of its very id (half of them at 1,024 nodes within 4 resources): found by
    // pointer among those, they cost no hash and no trip to a random slot of the index.
    let near = |position: usize, dependency: &ResourceId| {
        let start = position.saturating_sub(NEAR);
        let before = resources[start..position].iter().rposition(|r| r.id.0.shares(&dependency.0));
        before.map(|offset| (start + offset) as u32)
    };
    // Every edge as (dependent, dependency), in the order the dependencies are declared:
    // ~400,000 lookups at 4,096 nodes, made on every core in runs of resources whose
    // edges join in order.
    let runs = crate::parallel::runs(resources.len(), RESOLVE_RUN);
    let found = crate::parallel::ordered(&runs, |run| {
        let mut edges = Vec::with_capacity(resources[run.clone()].iter().map(|r| r.depends_on.len()).sum());
        let mut unknown = Vec::new();
        for position in run.clone() {
            let resource = &resources[position];
            for dependency in &resource.depends_on {
                let found = near(position, dependency).or_else(|| {
                    let (text, id) = (&dependency.0, dependency.as_str());
                    let named = |at: &u32| resources[*at as usize].id.0.shares(text) || id_at(at) == id;
                    index.find(hash(id), named).copied()
                });
                match found {
                    Some(from) => edges.push((position as u32, from)),
                    None => unknown.push(
                        Diagnostic::error(
                            "unknown-dependency",
                            format!("`{}` depends on `{dependency}`, which is not rendered", resource.id),
                        )
                        .help("a dependency must name a resource id of the form `target:kind:name`"),
                    ),
                }
            }
        }
        (edges, unknown)
    });
    let mut edges = Vec::with_capacity(found.iter().map(|(edges, _)| edges.len()).sum());
    for (run_edges, unknown) in found {
        edges.extend(run_edges);
        diagnostics.0.extend(unknown);
    }
    if diagnostics.has_errors() {
        return Err(diagnostics);
    }
    Ok(Edges(edges))
}

/// Resources whose dependencies one thread looks up at a time.
const RESOLVE_RUN: usize = 16_384;

/// How many resources before a dependent are searched, by pointer, for its dependencies.
const NEAR: usize = 16;

/// The graph of `resources` and their [`resolve`]d `edges`.
///
/// # Errors
/// `dependency-cycle` naming every resource of each cycle.
pub fn assemble(mut resources: Vec<Resource>, Edges(edges): Edges) -> Result<ResourceGraph, Diagnostics> {
    let count = resources.len();
    // Freeing the ids (~15 ms at 4,096 nodes) and ordering need different parts: side by side.
    let ((), (dependencies, dependents, order)) = rayon::join(
        || forget_dependency_ids(&mut resources),
        || {
            let dependencies = Adjacency::new(count, &edges);
            // Freed before the dependents are listed, which take its place (3.2 MB at
            // 4,096 nodes).
            drop(edges);
            let dependents = dependencies.reversed();
            let order = stable_order(&dependencies, &dependents);
            (dependencies, dependents, order)
        },
    );
    let Some(order) = order else {
        let mut diagnostics = Diagnostics::default();
        let graph = petgraph_of(count, &dependents);
        for component in kosaraju_scc(&graph) {
            let is_cycle = component.len() > 1 || component.first().is_some_and(|&n| graph.contains_edge(n, n));
            if is_cycle {
                let mut names: Vec<&str> = component.iter().map(|&n| resources[n.index()].id.as_str()).collect();
                names.sort_unstable();
                diagnostics.push(
                    Diagnostic::error("dependency-cycle", format!("dependency cycle: {}", names.join(" → ")))
                        .help("remove one of these dependencies"),
                );
            }
        }
        return Err(diagnostics);
    };
    drop(dependents);
    Ok(ResourceGraph { resources, order, dependencies })
}

/// The graph as petgraph's, to find its cycles.
fn petgraph_of(count: usize, dependents: &Adjacency) -> DiGraph<(), ()> {
    let mut graph = DiGraph::with_capacity(count, dependents.targets.len());
    for _ in 0..count {
        graph.add_node(());
    }
    for from in 0..count {
        for to in dependents.of(from) {
            graph.add_edge(NodeIndex::new(from), NodeIndex::new(to), ());
        }
    }
    graph
}

/// Frees every resource's list of dependency ids: the edges hold them now, as
/// indexes ([`ResourceGraph::dependencies`]). At 4,096 nodes the lists were ~230,000
/// small allocations, ~6 MB of heap (heaptrack) kept for as long as the plan lives.
fn forget_dependency_ids(resources: &mut [Resource]) {
    for resource in resources {
        resource.depends_on = crate::resource::Dependencies::new();
    }
}

/// Kahn's algorithm taking the lowest input index among ready resources, so the
/// order is the render order wherever dependencies allow: plans read top-down the
/// way templates were written. `None` when there is a cycle.
///
/// Most dependencies are rendered before their dependents, so the lowest ready index
/// is mostly the next one in render order: a cursor walks the indexes, and only a
/// resource made ready after the cursor passed it waits in a heap (whose entries are
/// all below the cursor, so it goes first). A heap of every ready resource (a third
/// of 1.85 million at 32,768 nodes) cost a logarithm and cache misses per resource.
fn stable_order(dependencies: &Adjacency, dependents: &Adjacency) -> Option<Vec<u32>> {
    let count = dependencies.starts.len() - 1;
    let mut waiting: Vec<u32> = dependencies.starts.windows(2).map(|pair| pair[1] - pair[0]).collect();
    let mut passed: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    let mut cursor = 0;
    let mut order = Vec::with_capacity(count);
    loop {
        let index = if let Some(Reverse(index)) = passed.pop() {
            index
        } else {
            while cursor < count && waiting[cursor] != 0 {
                cursor += 1;
            }
            if cursor == count {
                break;
            }
            cursor += 1;
            cursor - 1
        };
        order.push(index as u32);
        for next in dependents.of(index) {
            // A duplicate edge counts twice in `waiting` and is visited twice here.
            waiting[next] -= 1;
            if waiting[next] == 0 && next < cursor {
                passed.push(Reverse(next));
            }
        }
    }
    (order.len() == count).then_some(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::{Desired, ResourceId, Target};

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
        let ids: Vec<&str> = graph.ordered().map(|i| graph.resources[i].id.as_str()).collect();
        assert_eq!(ids, ["head:package:munge", "head:package:slurmctld", "node01:package:slurmd"]);
    }

    #[test]
    fn names_each_id_rendered_twice_once_per_extra_copy() {
        let twice = || package("a", "x", &[]);
        let error = build(vec![twice(), package("a", "y", &[]), twice(), twice()]).expect_err("duplicates");
        let found: Vec<(&str, &str)> = error.0.iter().map(|d| (d.id, d.message.as_str())).collect();
        let message = "resource `a:package:x` is rendered twice";
        assert_eq!(found, [("duplicate-resource", message), ("duplicate-resource", message)]);
    }

    #[test]
    fn dependencies_are_edges_once_the_graph_is_built() {
        let graph = build(vec![package("head", "munge", &[]), package("node01", "slurmd", &["head:package:munge"])])
            .expect("acyclic");
        assert!(graph.resources.iter().all(|resource| resource.depends_on.is_empty()), "the ids are freed");
        assert_eq!(graph.dependencies(1).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn reversed_lists_are_those_of_the_reversed_edges() {
        // As `resolve` makes them: by dependent, each one's in declaration order.
        let edges = [(1, 0), (2, 0), (2, 1), (2, 0), (3, 2), (3, 0)];
        let swapped: Vec<(u32, u32)> = edges.iter().map(|&(from, to)| (to, from)).collect();
        let (reversed, expected) = (Adjacency::new(4, &edges).reversed(), Adjacency::new(4, &swapped));
        assert_eq!((&reversed.starts, &reversed.targets), (&expected.starts, &expected.targets));
        assert_eq!(reversed.of(0).collect::<Vec<_>>(), [3, 2, 2, 1], "dependents of 0, the last first");
    }

    #[test]
    fn lists_each_resource_s_dependencies_newest_first() {
        let graph = build(vec![
            package("a", "x", &[]),
            package("a", "y", &["a:package:x"]),
            package("a", "z", &["a:package:y", "a:package:x", "a:package:x"]),
        ])
        .expect("acyclic");
        let dependencies = |index| graph.dependencies(index).collect::<Vec<_>>();
        assert_eq!((dependencies(0), dependencies(1), dependencies(2)), (vec![], vec![0], vec![0, 0, 1]));
        assert_eq!(graph.order, [0, 1, 2]);
    }

    #[test]
    fn the_order_is_the_lowest_ready_index_first() {
        // Kahn's algorithm with every ready resource in one heap: the order's definition.
        fn lowest_ready_first(dependencies: &Adjacency, dependents: &Adjacency) -> Option<Vec<u32>> {
            let mut waiting: Vec<u32> = dependencies.starts.windows(2).map(|pair| pair[1] - pair[0]).collect();
            let mut ready: BinaryHeap<Reverse<usize>> =
                waiting.iter().enumerate().filter(|(_, count)| **count == 0).map(|(index, _)| Reverse(index)).collect();
            let mut order = Vec::new();
            while let Some(Reverse(index)) = ready.pop() {
                order.push(index as u32);
                for next in dependents.of(index) {
                    waiting[next] -= 1;
                    if waiting[next] == 0 {
                        ready.push(Reverse(next));
                    }
                }
            }
            (order.len() == waiting.len()).then_some(order)
        }
        // Random graphs: most edges to an earlier resource, some to a later one (a
        // resource made ready after the cursor passed it), some duplicated, and some
        // graphs with a cycle.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |bound: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize % bound
        };
        let mut cycles = 0;
        for round in 0..300 {
            let count = 2 + next(60);
            let mut edges = Vec::new();
            for from in 0..count {
                for _ in 0..next(4) {
                    let to = next(count);
                    // A later dependency only now and then, so that most graphs are acyclic.
                    if to < from || next(10) == 0 {
                        edges.push((from as u32, to as u32));
                    }
                }
            }
            let dependencies = Adjacency::new(count, &edges);
            let dependents = dependencies.reversed();
            let expected = lowest_ready_first(&dependencies, &dependents);
            cycles += usize::from(expected.is_none());
            assert_eq!(stable_order(&dependencies, &dependents), expected, "round {round}: {edges:?}");
        }
        assert!((10..290).contains(&cycles), "{cycles} of 300 graphs with a cycle");
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
    fn dependencies_found_in_runs_join_in_order() {
        // More resources than one run: each depends on the one a run before it, and
        // two name a resource that is not rendered, one in each of two runs.
        let count = RESOLVE_RUN * 2 + 5;
        let name = |i: usize| format!("p{i}");
        let resources: Vec<Resource> = (0..count)
            .map(|i| {
                let mut after = Vec::new();
                if i >= RESOLVE_RUN {
                    after.push(format!("a:package:{}", name(i - RESOLVE_RUN)));
                }
                if i == 7 || i == RESOLVE_RUN * 2 + 1 {
                    after.push(format!("b:package:missing{i}"));
                }
                package("a", &name(i), &after.iter().map(String::as_str).collect::<Vec<_>>())
            })
            .collect();
        let error = resolve(&resources).expect_err("two unknown");
        let unknown: Vec<&str> = error.0.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(unknown.len(), 2, "{unknown:?}");
        assert!(unknown[0].contains("missing7") && unknown[1].contains(&format!("missing{}", RESOLVE_RUN * 2 + 1)));
        let known: Vec<Resource> = resources
            .into_iter()
            .map(|mut r| {
                r.depends_on.retain(|id| !id.as_str().contains("missing"));
                r
            })
            .collect();
        let Edges(edges) = resolve(&known).expect("resolves");
        let expected: Vec<(u32, u32)> = (RESOLVE_RUN..count).map(|i| (i as u32, (i - RESOLVE_RUN) as u32)).collect();
        assert_eq!(edges, expected);
    }

    #[test]
    fn a_dependency_is_found_whether_it_shares_its_id_or_copies_it_near_or_far() {
        // Resource i depends on i-1 (near) and on 0 (far, past the pointer search),
        // naming each by a clone of its id (shared) for even i and a copy for odd i.
        let count = NEAR * 3;
        let mut resources: Vec<Resource> = (0..count).map(|i| package("a", &format!("p{i}"), &[])).collect();
        for i in 1..count {
            let named = [i - 1, 0].map(|at| {
                let id = &resources[at].id;
                if i % 2 == 0 { id.clone() } else { ResourceId(id.as_str().into()) }
            });
            resources[i].depends_on.extend(named);
        }
        let Edges(edges) = resolve(&resources).expect("resolves");
        let expected: Vec<(u32, u32)> = (1..count as u32).flat_map(|i| [(i, i - 1), (i, 0)]).collect();
        assert_eq!(edges, expected);
    }

    #[test]
    fn names_an_unknown_dependency() {
        let error = build(vec![package("a", "x", &["b:package:missing"])]).expect_err("unknown");
        assert_eq!(error.0[0].id, "unknown-dependency");
        assert!(error.0[0].message.contains("b:package:missing"));
    }
}
