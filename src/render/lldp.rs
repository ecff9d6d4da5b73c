//! LLDP on an Ethernet fabric: lldpd on every node with rails and on every switch
//! toolkit configures as plain Linux with FRR, so the cabling validator can read
//! each switch's neighbours and compare them with the cabling plan.
//!
//! Stage: render. Input: the model and, when given, the inventory (each switch's OS).
//! Output: per target a package, `/etc/lldpd.d/toolkit.conf` and the lldpd service
//! restarted when that file changes.
//!
//! Not rendered: on InfiniBand (no LLDP; the subnet manager's `ibnetdiscover` is the
//! cabling source) and on Cumulus Linux, whose switches run lldpd from the start.

use crate::blueprint::schema::FabricKind;
use crate::inventory::Inventory;
use crate::inventory::schema::SwitchOs;
use crate::model::Model;
use crate::render::common::{file, package, service};
use crate::render::switch;
use crate::render::{RenderError, Renderer};
use crate::resource::{OnChange, Resource, Target};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] =
    &[("lldp/toolkit.conf.j2", include_str!("../../templates/lldp/toolkit.conf.j2"))];

/// lldpd reads every `*.conf` here at start.
pub const CONF: &str = "/etc/lldpd.d/toolkit.conf";

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
    if model.fabric.kind != FabricKind::Roce {
        return Ok(());
    }
    let nodes = model.nodes.iter().filter(|node| !node.rails.is_empty()).map(|node| Target::node(&node.name));
    let switches = model
        .fabric
        .switches
        .iter()
        .filter(|sw| switch::platform(model, inventory, &sw.name).is_none_or(|platform| platform.os == SwitchOs::Frr))
        .map(|sw| Target::switch(&sw.name));
    for target in nodes.chain(switches) {
        let text = renderer
            .render_content("lldp/toolkit.conf.j2", minijinja::context! { hostname => target.name.as_str() })?;
        let lldpd = package(&target, "lldpd");
        let conf = file(&target, CONF, text, 0o644).after([lldpd.id.clone()]);
        let service = service(&target, "lldpd", vec![conf.id.clone()], OnChange::Restart);
        out.extend([lldpd, conf, service]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Desired;
    use std::path::Path;

    fn resources(blueprint: &str) -> Vec<Resource> {
        let loaded = crate::blueprint::load::load_text(Path::new("lab.yaml"), blueprint.to_owned()).expect("loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        let mut out = Vec::new();
        render(&model, None, &Renderer::embedded().expect("templates"), &mut out).expect("renders");
        out
    }

    #[test]
    fn every_railed_node_and_frr_switch_runs_lldpd_with_named_ports() {
        let blueprint = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/blueprints/lab.yaml"))
            .expect("lab blueprint");
        let out = resources(&blueprint);
        let services: Vec<&str> = out.iter().filter(|r| r.desired.kind() == "service").map(Resource::target).collect();
        // node01–04 have rails, head does not; leaf0, leaf1, spine0.
        assert_eq!(services, ["node01", "node02", "node03", "node04", "leaf0", "leaf1", "spine0"]);
        let conf = out.iter().find(|r| r.id.as_str() == format!("leaf0:file:{CONF}")).expect("leaf0 conf");
        let Desired::File { content, .. } = &*conf.desired else { panic!("a file") };
        assert!(content.text().contains("configure lldp portidsubtype ifname"), "{}", content.text());
        let service = out.iter().find(|r| r.id.as_str() == "leaf0:service:lldpd").expect("leaf0 lldpd");
        assert!(service.depends_on.contains(&conf.id), "lldpd restarts after its file");
    }
}
