//! Integration tests: render_network — switch (FRR, NVUE, OpenSM) and host network
//! configuration rendered from the example blueprints, checked by the real tools
//! (`vtysh --dryrun`, `netplan generate`) where they are installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use toolkit::inventory::Inventory;
use toolkit::model::{self, Model};
use toolkit::render::{self, RenderError, Renderer};
use toolkit::resource::{Desired, OnChange, Resource, ResourceId};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn model(blueprint: &str) -> Model {
    let path = root().join("blueprints").join(format!("{blueprint}.yaml"));
    let loaded = toolkit::blueprint::load::load(&path).expect("blueprint loads");
    model::expand(&loaded.blueprint).expect("blueprint expands")
}

fn inventory(name: &str) -> Inventory {
    let path = root().join("inventories").join(format!("{name}.yaml"));
    toolkit::inventory::load(&path).expect("inventory loads").inventory
}

fn inventory_from(text: &str) -> Inventory {
    serde_norway::from_str(text).expect("inventory parses")
}

fn render_all(model: &Model, inventory: Option<&Inventory>) -> Vec<Resource> {
    let renderer = Renderer::embedded().expect("templates parse");
    render::render(model, inventory, &toolkit::render::slurm::Secrets::default(), &renderer).expect("renders")
}

fn find<'a>(resources: &'a [Resource], id: &str) -> &'a Resource {
    resources.iter().find(|r| r.id.as_str() == id).unwrap_or_else(|| panic!("no resource `{id}`"))
}

fn text<'a>(resources: &'a [Resource], target: &str, path: &str) -> &'a str {
    match &*find(resources, &format!("{target}:file:{path}")).desired {
        Desired::File { content, .. } => content.text(),
        other => panic!("`{target}:{path}` is not a file: {other:?}"),
    }
}

/// Every file at `path`, as (target, text).
fn files<'a>(resources: &'a [Resource], path: &str) -> Vec<(&'a str, &'a str)> {
    resources
        .iter()
        .filter_map(|r| match &*r.desired {
            Desired::File { path: p, content, .. } if p == path => Some((r.target(), content.text())),
            _ => None,
        })
        .collect()
}

/// Whether `program` can be run; without it the test fails naming it, or is skipped
/// where the developer asks ([`crate::support::cannot_run`]).
pub(crate) fn tool(program: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()));
    if !found {
        crate::support::cannot_run(&format!("`{program}` is not on PATH: apt-get install {package}"));
    }
    found
}

/// `vtysh --dryrun -f` on `text`: exit code and output.
fn vtysh_dryrun(dir: &Path, name: &str, text: &str) -> (i32, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    let output = Command::new("vtysh").arg("--dryrun").arg("-f").arg(&path).output().expect("vtysh runs");
    let mut message = String::from_utf8_lossy(&output.stdout).into_owned();
    message.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), message)
}

/// `netplan generate --root-dir` on `text` placed as the rails file: exit code and output.
fn netplan_generate(text: &str) -> (i32, String, tempfile::TempDir) {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("etc/netplan");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("60-toolkit-rails.yaml");
    std::fs::write(&file, text).expect("write");
    set_mode_0600(&file);
    let output =
        Command::new("netplan").arg("generate").arg("--root-dir").arg(root.path()).output().expect("netplan runs");
    let mut message = String::from_utf8_lossy(&output.stdout).into_owned();
    message.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), message, root)
}

fn set_mode_0600(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

// ---------------------------------------------------------------- FRR

#[test]
fn lab_frr_configs_match_snapshots() {
    let resources = render_all(&model("lab"), Some(&inventory("lab")));
    insta::assert_snapshot!("lab_leaf0_frr_conf", text(&resources, "leaf0", "/etc/frr/frr.conf"));
    insta::assert_snapshot!("lab_spine0_frr_conf", text(&resources, "spine0", "/etc/frr/frr.conf"));
}

#[test]
fn h200_leaf0_frr_config_matches_snapshot() {
    let resources = render_all(&model("h200-roce-64"), None);
    let conf = text(&resources, "leaf0", "/etc/frr/frr.conf");
    assert!(conf.lines().count() < 600, "leaf0 frr.conf has {} lines", conf.lines().count());
    insta::assert_snapshot!("h200_leaf0_frr_conf", conf);
}

#[test]
fn without_inventory_roce_switches_run_frr_with_every_fabric_port_a_bgp_neighbor() {
    let model = model("h200-roce-64");
    let resources = render_all(&model, None);
    let confs = files(&resources, "/etc/frr/frr.conf");
    assert_eq!(confs.len(), model.fabric.switches.len(), "one frr.conf per switch");
    for (index, switch) in model.fabric.switches.iter().enumerate() {
        let conf = text(&resources, &switch.name, "/etc/frr/frr.conf");
        let cables = model.fabric.links.iter().filter(|l| l.lower == index || l.upper == index).count();
        let neighbors = conf.lines().filter(|l| l.contains(" interface peer-group FABRIC")).count();
        assert_eq!(neighbors, cables, "{}: one unnumbered neighbor per cable", switch.name);
        assert!(conf.contains(&format!("router bgp {}\n", switch.asn)), "{}", switch.name);
        assert!(conf.contains(&format!(" bgp router-id {}\n", switch.loopback)), "{}", switch.name);
        assert_eq!(conf.contains("match interface hosts"), switch.host_subnet.is_some(), "{}", switch.name);
    }
    let daemons = text(&resources, "leaf0", "/etc/frr/daemons");
    assert!(daemons.contains("\nbgpd=yes\n") && !daemons.contains("bgpd=no"));
}

#[test]
fn frr_files_services_and_checks_are_declared() {
    let resources = render_all(&model("lab"), Some(&inventory("lab")));
    match &*find(&resources, "leaf0:file:/etc/frr/frr.conf").desired {
        Desired::File { mode, owner, group, check, .. } => {
            assert_eq!((*mode, owner.as_str(), group.as_str()), (0o640, "frr", "frr"));
            assert_eq!(check.as_deref(), Some(&["vtysh", "--dryrun", "-f", "{}"].map(String::from)[..]));
        }
        other => panic!("{other:?}"),
    }
    let frr = find(&resources, "leaf0:service:frr");
    match &*frr.desired {
        Desired::Service { on_change, .. } => {
            let watches: Vec<ResourceId> = frr.watches().collect();
            assert_eq!(*on_change, OnChange::Reload);
            assert!(watches.contains(&ResourceId::new("leaf0", "file", "/etc/frr/frr.conf")));
            assert!(watches.contains(&ResourceId::new("leaf0", "file", "/etc/frr/daemons")));
        }
        other => panic!("{other:?}"),
    }
    assert!(text(&resources, "spine0", "/etc/sysctl.d/90-toolkit-frr.conf").contains("net.ipv4.ip_forward = 1"));
    find(&resources, "leaf0:package:frr");
    find(&resources, "leaf0:package:frr-pythontools");
}

#[test]
fn every_rendered_frr_conf_passes_vtysh_dryrun() {
    if !tool("vtysh", "frr") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut checked = 0;
    for blueprint in ["lab", "h200-roce-64"] {
        let resources = render_all(&model(blueprint), None);
        for (switch, conf) in files(&resources, "/etc/frr/frr.conf") {
            let (code, output) = vtysh_dryrun(dir.path(), &format!("{blueprint}-{switch}.conf"), conf);
            assert_eq!(code, 0, "{blueprint} {switch}: vtysh --dryrun rejected frr.conf:\n{output}");
            checked += 1;
        }
    }
    assert_eq!(checked, 3 + 12, "lab: 2 leaves + 1 spine; h200-roce-64: 8 leaves + 4 spines");
}

#[test]
fn vtysh_dryrun_rejects_a_broken_frr_conf() {
    if !tool("vtysh", "frr") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let resources = render_all(&model("lab"), None);
    let conf = text(&resources, "leaf0", "/etc/frr/frr.conf");
    let broken = conf.replace(" neighbor FABRIC remote-as external", " neighbor FABRIC remote-az external");
    assert_ne!(broken, conf, "the line to break is in the config");
    let (code, output) = vtysh_dryrun(dir.path(), "broken.conf", &broken);
    assert_ne!(code, 0, "vtysh accepted a broken line:\n{output}");
    assert!(output.contains("Unknown command"), "{output}");
}

// ---------------------------------------------------------------- NVUE and SONiC

const NVUE_LAB_INVENTORY: &str = "
version: 1
switches:
  leaf0: { address: 10.10.0.200, os: cumulus-nvue }
  leaf1: { address: 10.10.0.201, os: cumulus-nvue }
  spine0: { address: 10.10.0.210, os: cumulus-nvue }
";

#[test]
fn nvue_leaf_config_matches_snapshot_and_has_nvue_structure() {
    let model = model("lab");
    let resources = render_all(&model, Some(&inventory_from(NVUE_LAB_INVENTORY)));
    assert!(files(&resources, "/etc/frr/frr.conf").is_empty(), "NVUE switches get no frr.conf");
    let yaml = text(&resources, "leaf0", "/etc/toolkit/nvue.yaml");
    insta::assert_snapshot!("lab_leaf0_nvue_yaml", yaml);

    let document: serde_norway::Value = serde_norway::from_str(yaml).expect("NVUE YAML parses");
    let set = &document[0]["set"];
    assert_eq!(set["system"]["hostname"].as_str(), Some("leaf0"));
    let interfaces = set["interface"].as_mapping().expect("interfaces");
    assert!(set["interface"]["lo"]["ip"]["address"]["10.255.0.1/32"].is_mapping());
    assert_eq!(set["interface"]["swp26"]["type"].as_str(), Some("swp"));
    assert_eq!(set["interface"]["swp26"]["link"]["mtu"].as_u64(), Some(9216));
    assert_eq!(set["interface"]["swp1"]["bridge"]["domain"]["br_default"]["access"].as_u64(), Some(100));
    assert_eq!(set["interface"]["vlan100"]["type"].as_str(), Some("svi"));
    assert!(set["interface"]["vlan100"]["ip"]["address"]["10.200.0.1/27"].is_mapping());
    // 25 node ports, the SVI, one uplink and lo.
    assert_eq!(interfaces.len(), 25 + 3);
    assert_eq!(set["router"]["bgp"]["autonomous-system"].as_u64(), Some(4_200_000_100));
    assert_eq!(set["router"]["bgp"]["router-id"].as_str(), Some("10.255.0.1"));
    let bgp = &set["vrf"]["default"]["router"]["bgp"];
    assert_eq!(bgp["neighbor"]["swp26"]["remote-as"].as_str(), Some("external"));
    assert_eq!(bgp["neighbor"]["swp26"]["type"].as_str(), Some("unnumbered"));
    assert_eq!(bgp["neighbor"].as_mapping().map(serde_norway::Mapping::len), Some(1));
    assert_eq!(bgp["address-family"]["ipv4-unicast"]["redistribute"]["connected"]["enable"].as_str(), Some("on"));
    assert_eq!(bgp["address-family"]["ipv4-unicast"]["multipaths"]["ebgp"].as_u64(), Some(64));
    assert_eq!(set["qos"]["roce"]["enable"].as_str(), Some("on"));
    assert_eq!(set["qos"]["roce"]["mode"].as_str(), Some("lossless"));
    assert!(set["qos"]["pfc"].is_null(), "NVIDIA defaults need no remapping");

    let spine: serde_norway::Value =
        serde_norway::from_str(text(&resources, "spine0", "/etc/toolkit/nvue.yaml")).expect("spine YAML parses");
    let spine_bgp = &spine[0]["set"]["vrf"]["default"]["router"]["bgp"]["neighbor"];
    assert_eq!(spine_bgp.as_mapping().map(serde_norway::Mapping::len), Some(2), "one neighbor per leaf");
    assert!(spine[0]["set"]["bridge"].is_null(), "spines bridge nothing");
    find(&resources, "leaf0:command:nvue-apply");
}

#[test]
fn nvue_remaps_roce_off_the_default_priority() {
    let path = root().join("blueprints/lab.yaml");
    let source = std::fs::read_to_string(&path).expect("read").replace(
        "roce: { mode: lossless, pfc_priority: 3, ecn: true, dscp: 26, cnp_dscp: 48 }",
        "roce: { mode: lossless, pfc_priority: 2, ecn: true, dscp: 26, cnp_dscp: 48 }",
    );
    let loaded = toolkit::blueprint::load::load_text(&path, source).expect("loads");
    let model = model::expand(&loaded.blueprint).expect("expands");
    let resources = render_all(&model, Some(&inventory_from(NVUE_LAB_INVENTORY)));
    let yaml: serde_norway::Value =
        serde_norway::from_str(text(&resources, "leaf0", "/etc/toolkit/nvue.yaml")).expect("parses");
    let qos = &yaml[0]["set"]["qos"];
    assert!(qos["pfc"]["default-global"]["switch-priority"]["2"].is_mapping());
    let queues = &qos["egress-queue-mapping"]["default-global"]["switch-priority"];
    assert_eq!(queues["2"]["traffic-class"].as_u64(), Some(3));
    assert_eq!(queues["3"]["traffic-class"].as_u64(), Some(0));
    assert_eq!(qos["mapping"]["default-global"]["trust"].as_str(), Some("both"));
    assert_eq!(qos["mapping"]["default-global"]["dscp"]["26"]["switch-priority"].as_u64(), Some(2));
}

#[test]
fn sonic_switches_are_refused_not_skipped() {
    let inventory = inventory_from(
        "
version: 1
switches:
  leaf1: { address: 10.10.0.201, os: sonic, port_prefix: Ethernet }
",
    );
    let renderer = Renderer::embedded().expect("templates parse");
    let error = render::render(&model("lab"), Some(&inventory), &toolkit::render::slurm::Secrets::default(), &renderer)
        .expect_err("sonic is not rendered");
    assert!(matches!(&error, RenderError::UnsupportedSwitchOs { switch, .. } if switch == "leaf1"), "{error:?}");
    assert!(error.to_string().contains("`leaf1` runs `sonic`"), "{error}");
}

// ---------------------------------------------------------------- InfiniBand

#[test]
fn superpod_subnet_managers_get_opensm_files_and_switches_nothing() {
    let model = model("h100-superpod-1su");
    let resources = render_all(&model, Some(&inventory("h100-superpod-1su")));
    assert!(resources.iter().all(|r| r.target_kind != toolkit::resource::TargetKind::Switch));
    insta::assert_snapshot!("superpod_mgmt01_opensm_conf", text(&resources, "mgmt01", "/etc/opensm/opensm.conf"));
    insta::assert_snapshot!("superpod_partitions_conf", text(&resources, "mgmt01", "/etc/opensm/partitions.conf"));
    assert!(text(&resources, "mgmt02", "/etc/opensm/opensm.conf").contains("\nsm_priority 14\n"));
    assert!(resources.iter().all(|r| r.id.as_str() != "dgx001:file:/etc/opensm/opensm.conf"));
    match &*find(&resources, "mgmt02:service:opensm").desired {
        Desired::Service { watches, on_change, .. } => {
            assert_eq!(*on_change, OnChange::Restart);
            assert_eq!(watches.len(), 2);
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- hosts

#[test]
fn lab_host_files_match_snapshots() {
    let resources = render_all(&model("lab"), Some(&inventory("lab")));
    insta::assert_snapshot!("lab_node01_netplan", text(&resources, "node01", "/etc/netplan/60-toolkit-rails.yaml"));
    insta::assert_snapshot!("lab_etc_hosts", text(&resources, "node01", "/etc/hosts"));
    insta::assert_snapshot!(
        "lab_node01_rail_sysctl",
        text(&resources, "node01", "/etc/sysctl.d/90-toolkit-rails.conf")
    );
    insta::assert_snapshot!("lab_node01_link_names", text(&resources, "node01", "/usr/local/sbin/toolkit-link-names"));
    insta::assert_snapshot!(
        "link_names_unit",
        text(&resources, "leaf0", "/etc/systemd/system/toolkit-link-names.service")
    );
    // The lab cannot serve NFS (see lab/README.md): no exports, no mounts.
    assert!(files(&resources, "/etc/exports").is_empty());
    assert!(resources.iter().all(|r| !r.id.as_str().contains(":service:home.mount")));
}

#[test]
fn nfs_files_match_snapshots() {
    let resources = render_all(&model("h200-roce-64"), None);
    insta::assert_snapshot!("h200_home_mount", text(&resources, "gpu001", "/etc/systemd/system/home.mount"));
    insta::assert_snapshot!("h200_nfs01_exports", text(&resources, "nfs01", "/etc/exports"));
}

#[test]
fn etc_hosts_is_one_content_shared_by_every_node() {
    let model = model("h200-roce-64");
    let resources = render_all(&model, None);
    let hosts: Vec<_> = resources
        .iter()
        .filter_map(|r| match &*r.desired {
            Desired::File { path, content, .. } if path == "/etc/hosts" => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(hosts.len(), model.nodes.len());
    assert!(hosts.iter().all(|content| content == &hosts[0]));
    let text = hosts[0].text();
    assert!(text.contains("10.10.0.12\tgpu001.ai.example.com gpu001\n"), "{}", &text[..400]);
    assert!(text.contains("\tgpu064-rail7.ai.example.com gpu064-rail7\n"));
    assert_eq!(text.lines().filter(|l| !l.starts_with('#') && l.contains("-rail")).count(), 64 * 8);
}

#[test]
fn rail_macs_from_the_inventory_name_interfaces_and_netplan_matches_names() {
    let inventory = inventory_from(
        "
version: 1
hosts:
  node02: { address: 10.10.0.12, rail_macs: { 0: \"b8:3f:d2:00:00:10\", 1: \"b8:3f:d2:00:00:11\" } }
",
    );
    let resources = render_all(&model("lab"), Some(&inventory));
    let script = text(&resources, "node02", "/usr/local/sbin/toolkit-link-names");
    assert!(script.contains("current=$(find_link 'b8:3f:d2:00:00:11' 'rail1')\n"), "{script}");
    let netplan = text(&resources, "node02", "/etc/netplan/60-toolkit-rails.yaml");
    let yaml: serde_norway::Value = serde_norway::from_str(netplan).expect("parses");
    let rail1 = &yaml["network"]["ethernets"]["rail1"];
    // Matched by name: netplan's MAC match wants a permanent MAC (veths have none),
    // and the script already gave the NIC its name.
    assert!(rail1["match"].is_null() && rail1["set-name"].is_null(), "{rail1:?}");
    assert_eq!(rail1["mtu"].as_u64(), Some(9000));
    assert!(resources.iter().all(|r| r.id.as_str() != "node01:command:link-names"), "node01 has no MACs here");
}

#[test]
fn rails_come_after_their_leaves_and_their_names() {
    let resources = render_all(&model("lab"), Some(&inventory("lab")));
    let netplan = find(&resources, "node03:file:/etc/netplan/60-toolkit-rails.yaml");
    for id in ["leaf0:file:/etc/frr/frr.conf", "leaf1:file:/etc/frr/frr.conf", "leaf0:service:frr"] {
        assert!(netplan.depends_on.iter().any(|d| d.as_str() == id), "netplan of node03 not after {id}");
    }
    match &*netplan.desired {
        Desired::File { mode, .. } => assert_eq!(*mode, 0o600),
        other => panic!("{other:?}"),
    }
    // netplan generate (after the interfaces have their names), networkd, reload.
    let generate = find(&resources, "node03:command:netplan-generate");
    for id in ["node03:command:link-names", "node03:file:/etc/netplan/60-toolkit-rails.yaml"] {
        assert!(generate.depends_on.iter().any(|d| d.as_str() == id), "netplan-generate of node03 not after {id}");
    }
    let networkd = find(&resources, "node03:service:systemd-networkd");
    assert!(networkd.depends_on.iter().any(|d| d.as_str() == "node03:command:netplan-generate"));
    let apply = find(&resources, "node03:command:netplan-apply");
    assert!(apply.depends_on.iter().any(|d| d.as_str() == "node03:service:systemd-networkd"));
    for (resource, command) in [(generate, "netplan generate && "), (apply, "networkctl reload && ")] {
        match &*resource.desired {
            Desired::Command { argv, .. } => assert!(argv[2].starts_with(command), "{argv:?}"),
            other => panic!("{other:?}"),
        }
    }
    match &*networkd.desired {
        Desired::Service { enabled, running, on_change, .. } => {
            assert!(*enabled && *running);
            assert_eq!(*on_change, OnChange::Reload);
        }
        other => panic!("{other:?}"),
    }
    // FRR reads its interfaces by name: the switch's ports are named first.
    let frr = find(&resources, "leaf0:file:/etc/frr/frr.conf");
    assert!(frr.depends_on.iter().any(|d| d.as_str() == "leaf0:command:link-names"));
    toolkit::graph::build(resources).unwrap_or_else(|d| panic!("graph: {}", d.render()));
}

#[test]
fn mounts_come_after_the_nfs_server() {
    let resources = render_all(&model("h200-roce-64"), None);
    let mount = find(&resources, "gpu001:file:/etc/systemd/system/home.mount");
    assert!(mount.depends_on.iter().any(|d| d.as_str() == "nfs01:service:nfs-server"));
    assert!(
        resources.iter().all(|r| r.id.as_str() != "nfs01:file:/etc/systemd/system/home.mount"),
        "server mounts nothing"
    );
    find(&resources, "gpu001:service:home.mount");
    find(&resources, "nfs01:package:nfs-kernel-server");
    find(&resources, "nfs01:dir:/export/home");
}

#[test]
fn inventory_macs_name_interfaces_on_nodes_and_switches() {
    let resources = render_all(&model("lab"), Some(&inventory("lab")));
    let script = text(&resources, "spine0", "/usr/local/sbin/toolkit-link-names");
    assert!(script.contains("current=$(find_link '02:42:0a:c8:ff:f3' 'swp1')\n"), "{script}");
    assert!(script.contains("current=$(find_link '02:42:0a:c8:ff:fb' 'swp2')\n"), "{script}");
    let leaf = text(&resources, "leaf1", "/usr/local/sbin/toolkit-link-names");
    assert!(leaf.contains("'02:42:0a:c8:00:21' 'hosts'"), "{leaf}");
    // The head has no rails and no MACs: nothing to name.
    assert!(resources.iter().all(|r| r.id.as_str() != "head:command:link-names"));
    // Without MACs in the inventory, names are the OS's business.
    let bare = render_all(&model("lab"), Some(&inventory_from(NVUE_LAB_INVENTORY)));
    assert!(bare.iter().all(|r| !r.id.as_str().ends_with(":command:link-names")));

    let hostile = inventory_from(
        "version: 1\nswitches:\n  leaf0: { address: 10.10.0.200, os: frr, port_macs: { \"swp1;reboot\": \"02:42:0a:c8:00:01\" } }\n",
    );
    let renderer = Renderer::embedded().expect("templates parse");
    let error = render::render(&model("lab"), Some(&hostile), &toolkit::render::slurm::Secrets::default(), &renderer)
        .expect_err("not an interface name");
    assert!(error.to_string().contains("`swp1;reboot` is not an interface name"), "{error}");
    let nvue = inventory_from(
        "version: 1\nswitches:\n  leaf0: { address: 10.10.0.200, os: cumulus-nvue, port_macs: { swp1: \"02:42:0a:c8:00:01\" } }\n",
    );
    let error = render::render(&model("lab"), Some(&nvue), &toolkit::render::slurm::Secrets::default(), &renderer)
        .expect_err("Cumulus names its ports");
    assert!(error.to_string().contains("Cumulus Linux names itself"), "{error}");
}

#[test]
fn every_blueprint_renders_into_an_acyclic_graph_with_known_dependencies() {
    let cases = [
        ("lab", Some(inventory("lab"))),
        ("lab", Some(inventory_from(NVUE_LAB_INVENTORY))),
        ("h200-roce-64", None),
        ("h100-superpod-1su", Some(inventory("h100-superpod-1su"))),
    ];
    for (blueprint, inventory) in cases {
        let resources = render_all(&model(blueprint), inventory.as_ref());
        toolkit::graph::build(resources).unwrap_or_else(|d| panic!("{blueprint}: {}", d.render()));
    }
    let resources = render_all(&model("lab"), Some(&inventory_from(NVUE_LAB_INVENTORY)));
    let netplan = find(&resources, "node01:file:/etc/netplan/60-toolkit-rails.yaml");
    assert!(netplan.depends_on.iter().any(|d| d.as_str() == "leaf1:command:nvue-apply"));
}

#[test]
fn every_rendered_netplan_passes_netplan_generate() {
    if !tool("netplan", "netplan.io") {
        return;
    }
    let mut checked = 0;
    for blueprint in ["lab", "h200-roce-64", "h100-superpod-1su"] {
        let resources = render_all(&model(blueprint), None);
        for (node, netplan) in files(&resources, "/etc/netplan/60-toolkit-rails.yaml") {
            let (code, output, root) = netplan_generate(netplan);
            assert_eq!(code, 0, "{blueprint} {node}: netplan generate rejected:\n{output}\n{netplan}");
            assert!(
                root.path().join("run/systemd/network/10-netplan-rail0.network").is_file()
                    || root.path().join("run/systemd/network/10-netplan-ibp0.network").is_file(),
                "{blueprint} {node}: netplan generated nothing under the root dir"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4 + 64 + 31);
}

#[test]
fn netplan_generate_rejects_a_broken_rail_file() {
    if !tool("netplan", "netplan.io") {
        return;
    }
    let resources = render_all(&model("lab"), None);
    let netplan = text(&resources, "node01", "/etc/netplan/60-toolkit-rails.yaml");
    let broken = netplan.replacen("      mtu: 9000", "      mtux: 9000", 1);
    assert_ne!(broken, netplan);
    let (code, output, _root) = netplan_generate(&broken);
    assert_ne!(code, 0, "netplan accepted an unknown key:\n{output}");
    assert!(output.contains("unknown key 'mtux'"), "{output}");
}

fn scaled_h200(nodes: u32) -> Model {
    let path = root().join("blueprints/h200-roce-64.yaml");
    let source = std::fs::read_to_string(&path)
        .expect("read")
        .replace("    count: 64\n", &format!("    count: {nodes}\n"))
        .replace("inband: { subnet: 10.10.0.0/22 }", "inband: { subnet: 10.8.0.0/14 }")
        .replace("rail_pool: 10.200.0.0/16", "rail_pool: 10.64.0.0/10")
        .replace("loopback_pool: 10.255.0.0/24", "loopback_pool: 10.255.0.0/16");
    let loaded = toolkit::blueprint::load::load_text(&path, source).expect("loads");
    model::expand(&loaded.blueprint).expect("expands")
}

fn render_scaled(nodes: u32) {
    let model = scaled_h200(nodes);
    assert_eq!(model.nodes.len(), nodes as usize + 2);
    let start = Instant::now();
    let resources = render_all(&model, None);
    eprintln!("rendered {} resources for {} nodes in {:?}", resources.len(), model.nodes.len(), start.elapsed());
    assert_eq!(files(&resources, "/etc/netplan/60-toolkit-rails.yaml").len(), nodes as usize);
    assert_eq!(files(&resources, "/etc/frr/frr.conf").len(), model.fabric.switches.len());
}

#[test]
fn renders_a_4096_node_cluster() {
    render_scaled(4096);
}

#[test]
fn infiniband_rails_are_on_link_and_leave_the_mtu_to_ipoib() {
    let resources = render_all(&model("h100-superpod-1su"), None);
    let netplan = text(&resources, "dgx001", "/etc/netplan/60-toolkit-rails.yaml");
    let yaml: serde_norway::Value = serde_norway::from_str(netplan).expect("parses");
    let ibp3 = &yaml["network"]["ethernets"]["ibp3"];
    assert!(ibp3["mtu"].is_null(), "IPoIB datagram mode refuses 4096: {netplan}");
    let routes = ibp3["routes"].as_sequence().expect("routes");
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0]["to"].as_str(), Some("10.200.0.0/16"));
    assert_eq!(routes[0]["scope"].as_str(), Some("link"));
    assert!(routes[0]["via"].is_null(), "InfiniBand switches route no IP");
    assert_eq!(ibp3["routing-policy"][0]["table"].as_u64(), Some(103));
}
