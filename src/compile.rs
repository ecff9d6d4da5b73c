//! The offline pipeline in one call: expand → render → graph, from checked inputs.
//!
//! Stage: expand + render + graph. Input: a loaded, checked blueprint (and
//! inventory). Output: [`Compiled`] — the model and the resource DAG — or
//! diagnostics. `toolkit plan`, `deploy` and the benchmarks all start here.

use crate::blueprint::LoadedBlueprint;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::graph::{self, ResourceGraph};
use crate::inventory::LoadedInventory;
use crate::model::{self, Model};
use crate::plan::described::Described;
use crate::render::{self, Renderer};

/// The model and its resources, ready to plan.
#[derive(Debug)]
pub struct Compiled {
    /// The expanded cluster.
    pub model: Model,
    /// Every resource, as a DAG: API objects (BMC, cloud) first, each host's SSH
    /// resources depending on its API gate.
    pub graph: ResourceGraph,
    /// Every resource's fingerprint, name and kind, by graph index.
    pub described: Described,
    /// Firmware versions each node's hardware profile expects, by node.
    pub firmware: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
}

/// Expands, renders and builds the graph.
///
/// # Errors
/// Diagnostics for expansion or template failures, unknown dependencies and cycles.
pub fn compile(
    blueprint: &LoadedBlueprint,
    inventory: Option<&LoadedInventory>,
    renderer: &Renderer,
) -> Result<Compiled, Diagnostics> {
    compile_with(blueprint, inventory, renderer, &[], |_| Ok(()), |(), _| {})
}

/// [`compile`], with resources a later stage renders from the model (the node health
/// program, from the validators): `make` makes them beside the render, and `add`
/// adds them to the rendered resources before the graph is built. `rma` are the nodes
/// sent to RMA, in the order they went: spares take their places in the partitions.
///
/// # Errors
/// As [`compile`], and what `make` returns.
pub fn compile_with<T: Send>(
    blueprint: &LoadedBlueprint,
    inventory: Option<&LoadedInventory>,
    renderer: &Renderer,
    rma: &[model::spares::RmaRecord],
    make: impl FnOnce(&Model) -> Result<T, Diagnostics> + Send,
    add: impl FnOnce(T, &mut Vec<crate::resource::Resource>),
) -> Result<Compiled, Diagnostics> {
    let model = model::expand(&blueprint.blueprint).map(|model| model.with_rma(rma)).map_err(|error| {
        Diagnostics(vec![
            Diagnostic::error("expand-failed", error.to_string())
                .in_file(&blueprint.source.path)
                .help("`toolkit lint` locates the value that causes this"),
        ])
    })?;
    let inventory = inventory.map(|i| &i.inventory);
    // Relative secret paths in an inventory are relative to where toolkit runs.
    let secrets = render::slurm::Secrets::from_inventory(inventory, std::path::Path::new("."));
    // What `make` makes reads only the model: it runs beside the render stages (the
    // health program of 4,096 nodes is ~45% of such a plan's CPU time), not after them.
    let (hosts, later) = rayon::join(|| render::render(&model, inventory, &secrets, renderer), || make(&model));
    let mut resources = hosts.map_err(|error| {
        let message = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ");
        Diagnostics(vec![Diagnostic::error("render-failed", message).help(error.help())])
    })?;
    // Each stage frees much of what it made (rendered texts hashed, lookup tables)
    // on other threads than the next stage allocates on: handed back between them.
    crate::memory::release_freed();
    let later = later?;
    let health_start = resources.len();
    add(later, &mut resources);
    crate::resource::SharedDesired::default().share(&mut resources[health_start..]);
    let api = render::api::resources(&model, inventory);
    let mut all = api.resources;
    if all.is_empty() && api.gates.is_empty() {
        // No API objects (no inventory, or none with a BMC or cloud): the rendered
        // resources as they are, not copied into a second vector.
        all = resources;
    } else if api.gates.is_empty() {
        all.extend(resources);
    } else {
        all.extend(resources.into_iter().map(|mut resource| {
            if let Some(gate) = api.gates.get(resource.target()) {
                resource.depends_on.push(gate.clone());
            }
            resource
        }));
    }
    all.extend(render::kubernetes::resources(&model));
    // Describing the resources (formatting each distinct one's fingerprint) only reads
    // them, as finding their dependencies does: the two run side by side.
    let (edges, described) = rayon::join(|| graph::resolve(&all), || Described::of_resources(&all));
    crate::memory::release_freed();
    let graph = graph::assemble(all, edges?)?;
    crate::memory::release_freed();
    Ok(Compiled { model, graph, described, firmware: api.firmware })
}

/// Hex SHA-256 of a file's text (identity of inputs in plans).
#[must_use]
pub fn text_sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Hex SHA-256 over `fields`, each prefixed by its length: no two lists of fields
/// hash the same text (a recipe's cache key: the lab image, the OS image, the agent).
pub fn fields_sha256<T: AsRef<str>>(fields: impl IntoIterator<Item = T>) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for field in fields {
        let text = field.as_ref();
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptions_made_beside_the_graph_are_those_of_its_resources() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("blueprints/h200-roce-64.yaml");
        let blueprint = crate::blueprint::load::load(&path).expect("loads");
        let compiled = compile(&blueprint, None, &Renderer::embedded().expect("templates")).expect("compiles");
        let again = Described::of(&compiled.graph);
        for index in 0..compiled.graph.resources.len() {
            let (beside, after) = (compiled.described.get(index), again.get(index));
            assert_eq!(
                (&beside.fingerprint, &beside.name, &beside.kind),
                (&after.fingerprint, &after.name, &after.kind),
                "{}",
                compiled.graph.resources[index].id
            );
        }
    }
}
