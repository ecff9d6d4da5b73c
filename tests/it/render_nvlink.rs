//! Integration tests: render_nvlink — the GB200 NVL72 example (two racks, one NVLink
//! domain each) rendered as the files that carry its domains: Slurm's topology.conf
//! (one block per rack, `BlockSizes`) and slurm.conf (`topology/block`,
//! `switch/nvidia_imex`), and each tray's IMEX node list. Golden files: what a
//! reviewer reads; loading them in real slurmctld 24.11 waits for the lab's trixie
//! flavour.

use std::path::PathBuf;

use toolkit::inventory::Inventory;
use toolkit::model::{self, Model};
use toolkit::render::imex::NODES_CONFIG;
use toolkit::render::slurm::{SLURM_CONF, TOPOLOGY_CONF};
use toolkit::render::{self, Renderer};
use toolkit::resource::{Desired, Resource};

const NAME: &str = "gb200-nvl72";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn model() -> Model {
    let loaded = toolkit::blueprint::load::load(&root().join(format!("blueprints/{NAME}.yaml"))).expect("loads");
    model::expand(&loaded.blueprint).expect("expands")
}

fn inventory() -> Inventory {
    toolkit::inventory::load(&root().join(format!("inventories/{NAME}.yaml"))).expect("inventory loads").inventory
}

fn resources() -> Vec<Resource> {
    let renderer = Renderer::embedded().expect("templates parse");
    render::render(&model(), Some(&inventory()), &render::slurm::Secrets::default(), &renderer).expect("renders")
}

fn text<'a>(resources: &'a [Resource], target: &str, path: &str) -> &'a str {
    let id = format!("{target}:file:{path}");
    let resource = resources.iter().find(|r| r.id.as_str() == id).unwrap_or_else(|| panic!("no `{id}`"));
    match &*resource.desired {
        Desired::File { content, .. } => content.text(),
        other => panic!("`{id}` is not a file: {other:?}"),
    }
}

#[test]
fn nvl72_topology_slurm_and_imex_files() {
    let resources = resources();
    insta::assert_snapshot!("nvl72_topology_conf", text(&resources, "mgmt01", TOPOLOGY_CONF));
    insta::assert_snapshot!("nvl72_slurm_conf", text(&resources, "mgmt01", SLURM_CONF));
    insta::assert_snapshot!("nvl72_gb001_imex_nodes_config", text(&resources, "gb001", NODES_CONFIG));
    insta::assert_snapshot!("nvl72_gb036_imex_nodes_config", text(&resources, "gb036", NODES_CONFIG));
    // Every tray's file names exactly its rack's 18 trays; nothing else restarts IMEX.
    let imex = resources.iter().filter(|r| r.desired.kind() == "service" && r.id.as_str().ends_with(":nvidia-imex"));
    assert_eq!(imex.count(), 36);
}
