//! The cluster's configuration with its node health program: what `plan` and
//! `deploy` compile.
//!
//! Stage: ops. Input: a checked blueprint, inventory and templates. Output:
//! [`Compiled`], whose graph holds, besides the rendered resources, every compute
//! node's health program and units — rendered from the validators, which the render
//! stage cannot see, so they are added here.

use crate::blueprint::LoadedBlueprint;
use crate::compile::{Compiled, compile_with};
use crate::diagnostic::Diagnostics;
use crate::inventory::LoadedInventory;
use crate::render::Renderer;

/// Expands, renders (with the node health program) and builds the graph.
///
/// # Errors
/// As [`crate::compile::compile`], and health checks that cannot be planned.
pub fn compile(
    blueprint: &LoadedBlueprint,
    inventory: Option<&LoadedInventory>,
    renderer: &Renderer,
) -> Result<Compiled, Diagnostics> {
    compile_with_rma(blueprint, inventory, renderer, &[])
}

/// [`compile`] with spares serving in place of the nodes in RMA (`rma`, in the order
/// they went).
///
/// # Errors
/// As [`compile`].
pub fn compile_with_rma(
    blueprint: &LoadedBlueprint,
    inventory: Option<&LoadedInventory>,
    renderer: &Renderer,
    rma: &[crate::model::spares::RmaRecord],
) -> Result<Compiled, Diagnostics> {
    compile_with(
        blueprint,
        inventory,
        renderer,
        rma,
        |model| crate::health::programs(model, inventory.map(|loaded| &loaded.inventory), renderer),
        crate::health::Programs::attach,
    )
}
