//! Each desired resource's fingerprint, shown name and kind, made once per deploy
//! and shared by observe, diff and the state recorder.
//!
//! Stage: plan. Input: a [`ResourceGraph`]. Output: [`Described`], by graph index.
//! The nodes of a group share one [`Desired`] (`SharedDesired`): each distinct one is
//! formatted once, and every resource holds the position of its description, so the
//! three stages index a vector instead of each keeping a map by address and
//! formatting again.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use crate::graph::ResourceGraph;
use crate::resource::{Desired, Resource};
use crate::text::{Interner, Text};

/// What a diff shows and compares of one resource.
#[derive(Debug, Clone)]
pub struct Description {
    /// [`Desired::fingerprint`].
    pub fingerprint: Text,
    /// The name a plan shows: a path, a package or service, a command's description.
    pub name: Text,
    /// [`Desired::kind`].
    pub kind: Text,
}

/// The [`Description`] of every resource of a graph, by graph index: each distinct
/// one once, and per resource the position of its own (4 bytes, not 24: at 4,096
/// nodes ~230,000 resources share ~10,000 descriptions).
#[derive(Debug, Clone, Default)]
pub struct Described {
    distinct: Vec<Description>,
    by_index: Vec<u32>,
}

impl Described {
    /// Describes every resource of `graph`, each distinct [`Desired`] once.
    #[must_use]
    pub fn of(graph: &ResourceGraph) -> Self {
        Self::of_resources(&graph.resources)
    }

    /// Describes `resources` (a graph's, before it is built: a graph keeps the order
    /// of its resources, so the indexes are the graph's).
    #[must_use]
    pub fn of_resources(resources: &[Resource]) -> Self {
        let mut texts = Interner::default();
        let mut distinct = Vec::new();
        // By the address of the shared Desired: stable while the resources are borrowed.
        let mut by_desired: HashMap<usize, u32, RandomState> = HashMap::default();
        let by_index = resources
            .iter()
            .map(|resource| {
                *by_desired.entry(Arc::as_ptr(&resource.desired) as usize).or_insert_with(|| {
                    distinct.push(Description {
                        fingerprint: texts.take(resource.desired.fingerprint()),
                        name: shown_name(&resource.desired, &mut texts),
                        kind: texts.get(resource.desired.kind()),
                    });
                    (distinct.len() - 1) as u32
                })
            })
            .collect();
        Self { distinct, by_index }
    }

    /// The description of the resource at graph index `index`.
    ///
    /// # Panics
    /// When `index` is not an index of the graph this was made of.
    #[must_use]
    pub fn get(&self, index: usize) -> &Description {
        &self.distinct[self.by_index[index] as usize]
    }
}

/// The name a plan shows for `desired`.
fn shown_name(desired: &Desired, texts: &mut Interner) -> Text {
    match desired {
        Desired::File { path, .. } | Desired::Directory { path, .. } => texts.get(path),
        Desired::Package { name } | Desired::Service { name, .. } => texts.get(name),
        Desired::Command { description, .. } => texts.get(description),
        Desired::Api(item) => texts.take(item.name()),
    }
}
