//! Semantic checks: everything a valid YAML blueprint can still get wrong.
//!
//! Stage: check. Input: a loaded blueprint (and optionally an inventory). Output:
//! [`Diagnostics`], all at once, each with a stable id, a location and a fix hint.

use crate::blueprint::LoadedBlueprint;
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::inventory::LoadedInventory;
use crate::model::gpu;

/// Runs every check.
#[must_use]
pub fn check(loaded: &LoadedBlueprint, inventory: Option<&LoadedInventory>) -> Diagnostics {
    let mut out = Diagnostics::default();
    let _ = inventory;
    unknown_gpu_models(loaded, &mut out);
    out.sort();
    out
}

fn unknown_gpu_models(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    for (index, group) in loaded.blueprint.node_groups.iter().enumerate() {
        let Some(g) = &group.gpu else { continue };
        if gpu::find(&g.model).is_none() {
            let help = match did_you_mean(&g.model, gpu::names()) {
                Some(close) => {
                    format!("did you mean `{close}`? known models: {}", gpu::names().collect::<Vec<_>>().join(", "))
                }
                None => format!("known models: {}", gpu::names().collect::<Vec<_>>().join(", ")),
            };
            out.push(
                Diagnostic::error("unknown-gpu-model", format!("GPU model `{}` is not known", g.model))
                    .at(&loaded.source, format!("node_groups[{index}].gpu.model"))
                    .help(help),
            );
        }
    }
}
