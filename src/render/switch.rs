//! Switches: FRR `frr.conf` (BGP unnumbered leaf/spine), NVUE startup YAML (Cumulus) with RoCE QoS; InfiniBand `opensm.conf` and `partitions.conf` on subnet-manager hosts.
//!
//! Stage: render. Input: the model. Output: resources appended to `out`.

use crate::inventory::Inventory;
use crate::model::Model;
use crate::render::{RenderError, Renderer};
use crate::resource::Resource;

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[];

/// Appends this module's resources.
///
/// # Errors
/// A template that fails to render.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let _ = (model, inventory, renderer, out);
    Ok(())
}
