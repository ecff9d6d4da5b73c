//! Slurm: slurm.conf, gres.conf, topology.conf, cgroup.conf, slurmdbd.conf, munge, daemons, and the sacctmgr commands for tenants.
//!
//! Stage: render. Input: the model. Output: resources appended to `out`.

use crate::model::Model;
use crate::render::{RenderError, Renderer};
use crate::resource::Resource;

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[];

/// Appends this module's resources.
///
/// # Errors
/// A template that fails to render.
pub fn render(model: &Model, renderer: &Renderer, out: &mut Vec<Resource>) -> Result<(), RenderError> {
    let _ = (model, renderer, out);
    Ok(())
}
