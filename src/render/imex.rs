//! IMEX: the NVIDIA IMEX daemon of every compute tray in an NVLink domain learns the
//! domain's other trays from `nodes_config.cfg`, one address a line (IMEX guide,
//! "Deployment Models": NVLink domain wide). The daemon reads it only at start, so a
//! change restarts `nvidia-imex`.
//!
//! Stage: render. Input: the model's NVLink domains (and the inventory, to leave the
//! lab's fake GPU nodes alone). Output: per tray, the file and the service restarted
//! when it changes. The service comes with NVIDIA's IMEX package, which toolkit does
//! not install.

use crate::inventory::Inventory;
use crate::model::Model;
use crate::render::common::{file, service};
use crate::render::gpu_stack::is_fake;
use crate::render::{RenderError, Renderer};
use crate::resource::{OnChange, Resource, Target};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] =
    &[("imex/nodes_config.cfg.j2", include_str!("../../templates/imex/nodes_config.cfg.j2"))];

/// `IMEX_NODE_CONFIG_FILE`'s default (IMEX guide, "IMEX Service Config Options").
pub const NODES_CONFIG: &str = "/etc/nvidia-imex/nodes_config.cfg";

/// The IMEX daemon's systemd unit.
pub const SERVICE: &str = "nvidia-imex";

/// Appends this module's resources.
///
/// # Errors
/// The template fails to render.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    for domain in &model.nvlink_domains {
        let addresses: Vec<String> =
            domain.nodes.iter().map(|&index| model.nodes[index].mgmt_address.to_string()).collect();
        // Every tray of a domain gets the same text: rendered once, shared.
        let text = renderer.render_content(
            "imex/nodes_config.cfg.j2",
            minijinja::context! { cluster_name => &model.name, domain => &domain.name, addresses => &addresses },
        )?;
        for &index in &domain.nodes {
            let name = &model.nodes[index].name;
            if is_fake(inventory, name) {
                continue;
            }
            let target = Target::node(name);
            let conf = file(&target, NODES_CONFIG, text.clone(), 0o644);
            let daemon = service(&target, SERVICE, vec![conf.id.clone()], OnChange::Restart);
            out.extend([conf, daemon]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Desired;

    #[test]
    fn every_tray_lists_its_own_domain() {
        let loaded = crate::blueprint::load(std::path::Path::new("blueprints/gb200-nvl72.yaml")).expect("loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        let mut out = Vec::new();
        render(&model, None, &Renderer::embedded().expect("templates"), &mut out).expect("renders");
        assert_eq!(out.len(), 2 * 36, "a file and a service per tray");
        let text = |target: &str| {
            let id = format!("{target}:file:{NODES_CONFIG}");
            let resource = out.iter().find(|r| r.id.as_str() == id).expect("file");
            let Desired::File { content, .. } = &*resource.desired else { panic!("a file") };
            content.text().to_owned()
        };
        let rack1 = text("gb001");
        assert_eq!(rack1.lines().filter(|line| !line.starts_with('#')).count(), 18, "{rack1}");
        assert_eq!(rack1, text("gb018"));
        assert_ne!(rack1, text("gb019"));
        let restart = out.iter().find(|r| r.id.as_str() == "gb019:service:nvidia-imex").expect("service");
        assert!(restart.depends_on.iter().any(|id| id.as_str() == format!("gb019:file:{NODES_CONFIG}")));
    }
}
