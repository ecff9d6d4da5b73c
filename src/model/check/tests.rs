//! Tests of the semantic checks: a valid blueprint, one edit, and the diagnostic's
//! id, severity and line.

use std::path::Path;

use super::check;
use crate::blueprint::load::load_text;
use crate::diagnostic::{Diagnostic, Diagnostics, Severity};
use crate::inventory::LoadedInventory;
use crate::source::SourceFile;

/// A small RoCE cluster that passes every check without a warning.
const ROCE: &str = r#"version: 1
cluster:
  name: test
node_groups:
  - name: head
    count: 1
    hostname: head
    roles: [controller, database, login, storage]
  - name: gpu
    count: 4
    hostname: "node{index:02}"
    roles: [compute]
    gpu: { model: h100, count: 2 }
    rail_nics: { count: 2, speed_gbps: 200, link_layer: ethernet }
    local_nvme: { count: 2, size_gb: 1000 }
fabric:
  compute:
    kind: roce
    rails: 2
    link_speed_gbps: 200
    switch: { model: frr-container, radix: 32 }
    oversubscription: "4:1"
    uplinks_per_leaf: 1
    mtu: 9216
    host_mtu: 9000
    roce: { mode: lossless, pfc_priority: 3, ecn: true }
    addressing:
      rail_pool: 10.200.0.0/16
      loopback_pool: 10.255.0.0/24
  storage: { subnet: 10.30.0.0/16 }
  management:
    inband: { subnet: 10.10.0.0/24 }
    oob: { subnet: 10.11.0.0/24 }
storage:
  filesystems:
    - { name: home, kind: nfs, server_group: head, export: /export/home, mount: /home }
  scratch: { mount: /scratch }
scheduler:
  kind: slurm
  slurm:
    min_version: "22.05"
    partitions:
      - { name: gpu, groups: [gpu], default: true, max_time: INFINITE }
tenants:
  - { name: team-a, users: [alice], guaranteed_gpus: 4 }
  - { name: team-b, users: [bob], guaranteed_gpus: 4 }
acceptance:
  mode: auto
  nccl_efficiency: 0.8
"#;

/// A small InfiniBand cluster that passes every check without a warning.
const INFINIBAND: &str = r#"version: 1
cluster:
  name: ib
node_groups:
  - name: mgmt
    count: 1
    hostname: mgmt01
    roles: [controller, database, login]
  - name: dgx
    count: 4
    hostname: "dgx{index:03}"
    roles: [compute]
    gpu: { model: h100, count: 8 }
    rail_nics: { count: 8, speed_gbps: 400, link_layer: infiniband }
fabric:
  compute:
    kind: infiniband
    rails: 8
    link_speed_gbps: 400
    switch: { model: qm9700, radix: 64 }
    mtu: 4096
    host_mtu: 4096
    infiniband:
      subnet_manager: { kind: opensm, groups: [mgmt] }
      pkeys:
        - { name: research, pkey: "0x0a01", tenants: [research] }
        - { name: product, pkey: "0x0a02", tenants: [product] }
    addressing:
      rail_pool: 10.200.0.0/16
      loopback_pool: 10.255.0.0/24
  management:
    inband: { subnet: 10.10.0.0/24 }
storage:
  filesystems:
    - { name: lustre, kind: lustre, endpoint: "10.30.0.10@o2ib:/lustre", mount: /lustre }
scheduler:
  kind: slurm
  slurm:
    partitions:
      - { name: batch, groups: [dgx], default: true }
tenants:
  - { name: research, users: [alice], guaranteed_gpus: 16 }
  - { name: product, users: [bob], guaranteed_gpus: 16 }
"#;

/// The inventory of [`ROCE`], complete and consistent.
const INVENTORY: &str = r#"version: 1
bastions:
  gateway: { address: bastion.example.com }
hosts:
  head: { address: 10.10.0.10 }
  node01: { address: 10.10.0.11, rail_macs: { 0: "b8:3f:d2:00:00:10" } }
  node02: { address: 10.10.0.12 }
  node03: { address: 10.10.0.13 }
  node04: { address: 10.10.0.14, proxy_jump: gateway }
switches:
  leaf0: { address: 10.10.0.200, os: frr, port_macs: { hosts: "02:42:0a:c8:00:01", swp26: "02:42:0a:c8:ff:f2" } }
  leaf1: { address: 10.10.0.201, os: frr }
  spine0: { address: 10.10.0.210, os: frr }
"#;

const BLUEPRINT_FILE: &str = "bp.yaml";
const INVENTORY_FILE: &str = "inv.yaml";

/// `base` with each `(from, to)` replaced; each `from` must occur exactly once.
fn edit(base: &str, edits: &[(&str, &str)]) -> String {
    let mut text = base.to_owned();
    for (from, to) in edits {
        assert_eq!(text.matches(from).count(), 1, "`{from}` must occur once in the text being edited");
        text = text.replacen(from, to, 1);
    }
    text
}

fn load_inventory(text: &str) -> LoadedInventory {
    let source = SourceFile::new(INVENTORY_FILE, text.to_owned());
    let value = crate::yaml::parse_value(&source).expect("inventory YAML parses");
    let inventory = crate::yaml::deserialize(&source, value).expect("inventory matches the schema");
    LoadedInventory { inventory, source }
}

fn lint_pair(blueprint: &str, inventory: Option<&str>) -> Diagnostics {
    let loaded = load_text(Path::new(BLUEPRINT_FILE), blueprint.to_owned())
        .unwrap_or_else(|d| panic!("blueprint loads:\n{}", d.render()));
    let inventory = inventory.map(load_inventory);
    check(&loaded, inventory.as_ref())
}

fn lint(blueprint: &str) -> Diagnostics {
    lint_pair(blueprint, None)
}

/// Every diagnostic of `blueprint` as (id, line).
fn ids_and_lines(blueprint: &str) -> Vec<(&'static str, usize)> {
    lint(blueprint).0.iter().map(|d| (d.id, d.position.map_or(0, |p| p.line))).collect()
}

/// The 1-based line whose trimmed text is `needle`, or else the only line containing it.
fn line_of(text: &str, needle: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let exact: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].trim() == needle.trim()).collect();
    let candidates =
        if exact.is_empty() { (0..lines.len()).filter(|&i| lines[i].contains(needle)).collect() } else { exact };
    assert_eq!(candidates.len(), 1, "`{needle}` must identify one line, found {candidates:?}");
    candidates[0] + 1
}

/// The diagnostic `id` in `file` on the line of `needle`, or a panic listing all found.
fn find<'a>(diagnostics: &'a Diagnostics, file: &str, text: &str, id: &str, needle: &str) -> &'a Diagnostic {
    let line = line_of(text, needle);
    diagnostics
        .0
        .iter()
        .find(|d| d.id == id && d.position.map(|p| p.line) == Some(line) && d.file.as_deref() == Some(Path::new(file)))
        .unwrap_or_else(|| panic!("expected `{id}` at {file}:{line}, found:\n{}", diagnostics.render()))
}

fn finds(text: &str, id: &str, needle: &str, severity: Severity) -> Diagnostic {
    let diagnostics = lint(text);
    let found = find(&diagnostics, BLUEPRINT_FILE, text, id, needle).clone();
    assert_eq!(found.severity, severity, "{}", found.render());
    assert!(found.help.is_some(), "every diagnostic has a fix hint: {}", found.render());
    found
}

fn finds_in_inventory(inventory: &str, id: &str, needle: &str, severity: Severity) -> Diagnostic {
    let diagnostics = lint_pair(ROCE, Some(inventory));
    let found = find(&diagnostics, INVENTORY_FILE, inventory, id, needle).clone();
    assert_eq!(found.severity, severity, "{}", found.render());
    found
}

/// One test: edit a base text, expect one diagnostic id with a severity on a line.
macro_rules! finds {
    ($name:ident, $base:expr, [$(($from:expr, $to:expr)),* $(,)?], $id:literal, $needle:expr, $severity:ident) => {
        #[test]
        fn $name() {
            let text = edit($base, &[$(($from, $to)),*]);
            finds(&text, $id, $needle, Severity::$severity);
        }
    };
}

macro_rules! finds_in_inventory {
    ($name:ident, [$(($from:expr, $to:expr)),* $(,)?], $id:literal, $needle:expr, $severity:ident) => {
        #[test]
        fn $name() {
            let text = edit(INVENTORY, &[$(($from, $to)),*]);
            finds_in_inventory(&text, $id, $needle, Severity::$severity);
        }
    };
}

#[test]
fn the_base_blueprints_are_clean() {
    for base in [ROCE, INFINIBAND] {
        let diagnostics = lint(base);
        assert!(diagnostics.is_empty(), "{}", diagnostics.render());
    }
    let diagnostics = lint_pair(ROCE, Some(INVENTORY));
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

#[test]
fn the_example_blueprints_and_inventories_have_no_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in ["lab", "h100-superpod-1su", "h200-roce-64", "gb200-nvl72"] {
        let blueprint = std::fs::read_to_string(root.join(format!("blueprints/{name}.yaml"))).expect("example");
        let inventory = std::fs::read_to_string(root.join(format!("inventories/{name}.yaml"))).expect("example");
        let alone = lint(&blueprint);
        assert!(!alone.has_errors(), "{name}:\n{}", alone.render());
        let paired = lint_pair(&blueprint, Some(&inventory));
        assert!(!paired.has_errors(), "{name} with its inventory:\n{}", paired.render());
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = edit(
        ROCE,
        &[
            ("version: 1", "version: 3"),
            ("name: test", "name: Test"),
            ("model: h100", "model: h10"),
            ("radix: 32", "radix: 0"),
            ("mount: /home", "mount: home"),
            ("guaranteed_gpus: 4 }\n  - { name: team-b", "guaranteed_gpus: 40 }\n  - { name: team-b"),
        ],
    );
    let found = ids_and_lines(&text);
    for (id, needle) in [
        ("unsupported-version", "version: 3"),
        ("invalid-cluster-name", "name: Test"),
        ("unknown-gpu-model", "model: h10"),
        ("invalid-radix", "radix: 0"),
        ("invalid-mount", "mount: home"),
        ("guarantees-exceed-gpus", "guaranteed_gpus: 40"),
    ] {
        let expected = (id, line_of(&text, needle));
        assert!(found.contains(&expected), "{expected:?} missing from {found:?}");
    }
}

#[test]
fn hostile_numbers_give_diagnostics_not_panics() {
    let text = edit(
        ROCE,
        &[
            ("    count: 4", "    count: 4294967295\n    start_index: 4294967295"),
            ("rails: 2", "rails: 4294967295"),
            ("radix: 32", "radix: 4294967295"),
            ("\"4:1\"", "\"4294967295:4294967295\""),
            ("uplinks_per_leaf: 1", "uplinks_per_leaf: 4294967295"),
            ("mtu: 9216", "mtu: 4294967295"),
            ("guaranteed_gpus: 4 }\n  - { name: team-b", "guaranteed_gpus: 4294967295 }\n  - { name: team-b"),
            ("loopback_pool: 10.255.0.0/24", "loopback_pool: 10.255.0.0/24\n      leaf_asn_base: 4294967295"),
        ],
    );
    let diagnostics = lint(&text);
    assert!(diagnostics.has_errors());
    let ids: Vec<&str> = diagnostics.0.iter().map(|d| d.id).collect();
    for id in ["too-many-nodes", "hostname-index-overflow", "invalid-rail-count", "invalid-radix"] {
        assert!(ids.contains(&id), "`{id}` missing from {ids:?}");
    }
    // Planning a fabric that big would have to build every switch name; it is skipped.
    let inventory = lint_pair(&text, Some(INVENTORY));
    assert!(inventory.has_errors());
}

// --- cluster and node groups ---------------------------------------------------

finds!(version_must_be_1, ROCE, [("version: 1", "version: 2")], "unsupported-version", "version: 2", Error);

#[test]
fn cluster_name_must_be_simple() {
    let text = edit(ROCE, &[("name: test", "name: Test_Cluster")]);
    let found = finds(&text, "invalid-cluster-name", "name: Test_Cluster", Severity::Error);
    assert!(found.help.as_deref().is_some_and(|h| h.contains("`test-cluster`")), "{}", found.render());
    let long = edit(ROCE, &[("name: test", &format!("name: {}", "a".repeat(41)))]);
    finds(&long, "invalid-cluster-name", &"a".repeat(41), Severity::Error);
}

#[test]
fn group_names_are_unique() {
    let text = edit(ROCE, &[("- name: gpu", "- name: head")]);
    let diagnostics = lint(&text);
    let second = text.lines().enumerate().filter(|(_, l)| l.contains("- name: head")).nth(1).map(|(i, _)| i + 1);
    assert!(
        diagnostics.0.iter().any(|d| d.id == "duplicate-group-name" && d.position.map(|p| p.line) == second),
        "{}",
        diagnostics.render()
    );
}

finds!(group_count_is_not_zero, ROCE, [("    count: 4", "    count: 0")], "empty-group", "count: 0", Error);
finds!(
    node_total_is_bounded,
    ROCE,
    [("    count: 4", "    count: 2000000")],
    "too-many-nodes",
    "count: 2000000",
    Error
);
finds!(
    host_numbers_fit_u32,
    ROCE,
    [("    hostname: \"node{index:02}\"", "    hostname: \"node{index:02}\"\n    start_index: 4294967295")],
    "hostname-index-overflow",
    "start_index: 4294967295",
    Error
);
finds!(
    hostname_placeholder_is_index,
    ROCE,
    [("\"node{index:02}\"", "\"node{idx}\"")],
    "invalid-hostname",
    "hostname: \"node{idx}\"",
    Error
);
finds!(
    hostname_padding_is_bounded,
    ROCE,
    [("\"node{index:02}\"", "\"node{index:099999999999}\"")],
    "invalid-hostname",
    "hostname: \"node{index:099999999999}\"",
    Error
);
finds!(
    hostnames_are_dns_labels,
    ROCE,
    [("\"node{index:02}\"", "\"node_{index:02}\"")],
    "invalid-hostname",
    "hostname: \"node_{index:02}\"",
    Error
);
finds!(
    many_nodes_need_an_index,
    ROCE,
    [("\"node{index:02}\"", "node")],
    "hostname-without-index",
    "hostname: node",
    Error
);
finds!(
    hostnames_are_unique_across_groups,
    ROCE,
    [("hostname: head", "hostname: node03")],
    "duplicate-hostname",
    "hostname: \"node{index:02}\"",
    Error
);

#[test]
fn unknown_gpu_model_suggests_the_closest() {
    let text = edit(ROCE, &[("model: h100", "model: h10")]);
    let found = finds(&text, "unknown-gpu-model", "gpu: { model: h10, count: 2 }", Severity::Error);
    assert!(found.help.as_deref().is_some_and(|h| h.starts_with("did you mean `h100`?")), "{}", found.render());
}

finds!(
    module_names_are_module_names,
    ROCE,
    [("model: h100, count: 2 }", "model: h100, count: 2 }\n    module_options: { \"nvidia;x\": \"a=1\" }")],
    "invalid-module-name",
    "module_options",
    Error
);
finds!(
    module_options_are_key_value_words,
    ROCE,
    [("model: h100, count: 2 }", "model: h100, count: 2 }\n    module_options: { nvidia: \"a=1 oops\" }")],
    "invalid-module-options",
    "nvidia: \"a=1 oops\"",
    Error
);
finds!(gpu_count_is_not_zero, ROCE, [("count: 2 }", "count: 0 }")], "invalid-gpu-count", "model: h100", Error);
finds!(gpu_count_is_at_most_16, ROCE, [("count: 2 }", "count: 17 }")], "invalid-gpu-count", "model: h100", Error);
finds!(
    a_controller_is_required,
    ROCE,
    [("[controller, database, login, storage]", "[database, login, storage]")],
    "no-controller",
    "node_groups:",
    Error
);
finds!(
    one_controller_group,
    ROCE,
    [("roles: [compute]", "roles: [compute, controller]")],
    "multiple-controller-groups",
    "roles: [compute, controller]",
    Error
);
finds!(
    controller_ha_is_not_rendered,
    ROCE,
    [("    count: 1\n    hostname: head", "    count: 2\n    hostname: \"head{index}\"")],
    "controller-not-ha",
    "count: 2",
    Warning
);
finds!(slurm_needs_compute, ROCE, [("roles: [compute]", "roles: [login]")], "no-compute-group", "node_groups:", Error);
finds!(
    accounting_needs_a_database,
    ROCE,
    [("[controller, database, login, storage]", "[controller, login, storage]")],
    "no-database-group",
    "slurm:",
    Error
);

// --- compute fabric --------------------------------------------------------------

finds!(rails_are_in_range, ROCE, [("rails: 2", "rails: 0")], "invalid-rail-count", "rails: 0", Error);
finds!(radix_is_in_range, ROCE, [("radix: 32", "radix: 0")], "invalid-radix", "radix: 0", Error);
finds!(
    one_nic_per_rail,
    ROCE,
    [("{ count: 2, speed_gbps", "{ count: 4, speed_gbps")],
    "rail-nic-count-mismatch",
    "rail_nics:",
    Error
);
finds!(
    nic_link_layer_matches_fabric,
    ROCE,
    [("link_layer: ethernet", "link_layer: infiniband")],
    "link-layer-mismatch",
    "rail_nics:",
    Error
);
finds!(
    slow_nics_are_an_error,
    ROCE,
    [("speed_gbps: 200, link", "speed_gbps: 100, link")],
    "nic-speed-mismatch",
    "rail_nics:",
    Error
);
finds!(
    fast_nics_are_a_warning,
    ROCE,
    [("speed_gbps: 200, link", "speed_gbps: 400, link")],
    "nic-speed-mismatch",
    "rail_nics:",
    Warning
);
finds!(gpus_sharing_nics_warn, ROCE, [("count: 2 }", "count: 4 }")], "gpus-share-nics", "rail_nics:", Warning);
finds!(more_rails_than_gpus_warn, ROCE, [("count: 2 }", "count: 1 }")], "more-rails-than-gpus", "rail_nics:", Warning);
finds!(
    gpu_groups_belong_on_the_fabric,
    ROCE,
    [("    rail_nics: { count: 2, speed_gbps: 200, link_layer: ethernet }\n", "")],
    "gpu-group-off-fabric",
    "- name: gpu",
    Warning
);
finds!(
    oversubscription_is_a_ratio,
    ROCE,
    [("\"4:1\"", "\"4-1\"")],
    "invalid-oversubscription",
    "oversubscription: \"4-1\"",
    Error
);
finds!(
    oversubscription_terms_are_bounded,
    ROCE,
    [("\"4:1\"", "\"100:1\"")],
    "invalid-oversubscription",
    "oversubscription: \"100:1\"",
    Error
);

#[test]
fn a_fabric_too_large_for_the_radix_is_an_error_with_numbers() {
    let text = edit(ROCE, &[("radix: 32", "radix: 2")]);
    let found = finds(&text, "fabric-sizing", "switch: { model: frr-container, radix: 2 }", Severity::Error);
    assert!(found.message.contains("8 leaves exceed"), "{}", found.render());
}

finds!(
    uplinks_fit_the_radix,
    ROCE,
    [("uplinks_per_leaf: 1", "uplinks_per_leaf: 40")],
    "fabric-sizing",
    "switch: { model: frr-container, radix: 32 }",
    Error
);
finds!(
    host_mtu_fits_switch_mtu,
    ROCE,
    [("host_mtu: 9000", "host_mtu: 9300")],
    "host-mtu-above-switch-mtu",
    "host_mtu: 9300",
    Error
);
finds!(
    group_mtu_fits_switch_mtu,
    ROCE,
    [("link_layer: ethernet }", "link_layer: ethernet, mtu: 9500 }")],
    "host-mtu-above-switch-mtu",
    "rail_nics:",
    Error
);
finds!(
    roce_host_mtu_above_9000_warns,
    ROCE,
    [("host_mtu: 9000", "host_mtu: 9100")],
    "host-mtu-above-9000",
    "host_mtu: 9100",
    Warning
);
finds!(
    infiniband_mtu_is_an_ibta_size,
    INFINIBAND,
    [("    mtu: 4096", "    mtu: 4000")],
    "invalid-ib-mtu",
    "mtu: 4000",
    Error
);
finds!(
    infiniband_section_does_not_apply_to_roce,
    ROCE,
    [("    addressing:\n", "    infiniband: { subnet_manager: { kind: opensm, groups: [head] } }\n    addressing:\n")],
    "section-does-not-apply",
    "infiniband: { subnet_manager: { kind: opensm, groups: [head] } }",
    Error
);
finds!(
    roce_section_does_not_apply_to_infiniband,
    INFINIBAND,
    [("    infiniband:\n", "    roce: { mode: lossless, pfc_priority: 3, ecn: true }\n    infiniband:\n")],
    "section-does-not-apply",
    "roce: { mode: lossless, pfc_priority: 3, ecn: true }",
    Error
);
finds!(
    roce_needs_qos,
    ROCE,
    [("    roce: { mode: lossless, pfc_priority: 3, ecn: true }\n", "")],
    "roce-qos-missing",
    "kind: roce",
    Error
);
finds!(
    lossless_needs_pfc,
    ROCE,
    [("pfc_priority: 3, ecn: true", "ecn: true")],
    "roce-lossless-incomplete",
    "roce: { mode: lossless, ecn: true }",
    Error
);
finds!(
    lossless_needs_ecn,
    ROCE,
    [("ecn: true", "ecn: false")],
    "roce-lossless-incomplete",
    "roce: { mode: lossless, pfc_priority: 3, ecn: false }",
    Error
);
finds!(
    lossy_without_ecn_warns,
    ROCE,
    [("mode: lossless, pfc_priority: 3, ecn: true", "mode: lossy")],
    "roce-without-ecn",
    "roce: { mode: lossy }",
    Warning
);
finds!(
    pfc_priority_is_3_bits,
    ROCE,
    [("pfc_priority: 3", "pfc_priority: 9")],
    "invalid-pfc-priority",
    "pfc_priority: 9",
    Error
);
finds!(dscp_is_6_bits, ROCE, [("ecn: true }", "ecn: true, dscp: 64 }")], "invalid-dscp", "dscp: 64", Error);
finds!(data_and_cnp_dscp_differ, ROCE, [("ecn: true }", "ecn: true, dscp: 48 }")], "dscp-collision", "dscp: 48", Error);
finds!(
    infiniband_needs_a_subnet_manager,
    INFINIBAND,
    [(
        "    infiniband:\n      subnet_manager: { kind: opensm, groups: [mgmt] }\n      pkeys:\n        - { name: research, pkey: \"0x0a01\", tenants: [research] }\n        - { name: product, pkey: \"0x0a02\", tenants: [product] }\n",
        ""
    )],
    "missing-subnet-manager",
    "kind: infiniband",
    Error
);
finds!(
    opensm_needs_hosts,
    INFINIBAND,
    [("groups: [mgmt]", "groups: []")],
    "missing-subnet-manager",
    "subnet_manager: { kind: opensm, groups: [] }",
    Error
);

#[test]
fn subnet_manager_groups_exist() {
    let text = edit(INFINIBAND, &[("groups: [mgmt]", "groups: [mgnt]")]);
    let found = finds(&text, "unknown-group", "subnet_manager:", Severity::Error);
    assert!(found.help.as_deref().is_some_and(|h| h.starts_with("did you mean `mgmt`?")), "{}", found.render());
}

finds!(pkey_is_hex, INFINIBAND, [("\"0x0a01\"", "\"0xzz\"")], "invalid-pkey", "pkey: \"0xzz\"", Error);
finds!(pkey_is_not_the_default, INFINIBAND, [("\"0x0a01\"", "\"0x7fff\"")], "invalid-pkey", "pkey: \"0x7fff\"", Error);
finds!(pkey_has_four_digits, INFINIBAND, [("\"0x0a01\"", "\"0x10a01\"")], "invalid-pkey", "pkey: \"0x10a01\"", Error);
finds!(
    pkeys_collide_without_the_membership_bit,
    INFINIBAND,
    [("\"0x0a02\"", "\"0x8a01\"")],
    "duplicate-pkey",
    "pkey: \"0x8a01\"",
    Error
);
finds!(
    partition_names_are_unique,
    INFINIBAND,
    [("name: product, pkey", "name: research, pkey")],
    "duplicate-pkey-name",
    "pkey: \"0x0a02\"",
    Error
);
finds!(
    pkey_tenants_are_declared,
    INFINIBAND,
    [("tenants: [product]", "tenants: [prodcut]")],
    "unknown-tenant",
    "tenants: [prodcut]",
    Error
);

// --- addresses and ASNs ------------------------------------------------------------

finds!(pools_are_cidr, ROCE, [("10.200.0.0/16", "10.200.0.0/33")], "invalid-cidr", "rail_pool: 10.200.0.0/33", Error);
finds!(
    cidr_host_bits_warn,
    ROCE,
    [("10.10.0.0/24", "10.10.0.1/24")],
    "cidr-host-bits-set",
    "inband: { subnet: 10.10.0.1/24 }",
    Warning
);
finds!(
    rail_pool_holds_every_leaf_subnet,
    ROCE,
    [("10.200.0.0/16", "10.200.0.0/28")],
    "pool-too-small",
    "rail_pool: 10.200.0.0/28",
    Error
);
finds!(
    loopback_pool_holds_every_switch,
    ROCE,
    [("10.255.0.0/24", "10.255.0.0/31")],
    "pool-too-small",
    "loopback_pool: 10.255.0.0/31",
    Error
);
finds!(
    management_subnet_holds_every_node,
    ROCE,
    [("10.10.0.0/24", "10.10.0.0/29")],
    "management-subnet-too-small",
    "inband: { subnet: 10.10.0.0/29 }",
    Error
);
finds!(
    networks_do_not_overlap,
    ROCE,
    [("10.11.0.0/24", "10.10.0.0/16")],
    "overlapping-networks",
    "oob: { subnet: 10.10.0.0/16 }",
    Error
);
finds!(
    leaf_asns_fit_u32,
    ROCE,
    [("loopback_pool: 10.255.0.0/24", "loopback_pool: 10.255.0.0/24\n      leaf_asn_base: 4294967295")],
    "asn-overflow",
    "leaf_asn_base: 4294967295",
    Error
);
finds!(
    spine_asn_is_not_a_leaf_asn,
    ROCE,
    [("loopback_pool: 10.255.0.0/24", "loopback_pool: 10.255.0.0/24\n      spine_asn: 4200000101")],
    "asn-collision",
    "spine_asn: 4200000101",
    Error
);
finds!(
    public_asns_warn,
    ROCE,
    [("loopback_pool: 10.255.0.0/24", "loopback_pool: 10.255.0.0/24\n      spine_asn: 3000")],
    "asn-not-private",
    "spine_asn: 3000",
    Warning
);

// --- storage -------------------------------------------------------------------------

finds!(
    filesystem_names_are_unique,
    ROCE,
    [("  scratch:", "    - { name: home, kind: nfs, server_group: head, mount: /data }\n  scratch:")],
    "duplicate-filesystem",
    "mount: /data",
    Error
);
finds!(mounts_are_absolute, ROCE, [("mount: /home", "mount: home")], "invalid-mount", "mount: home", Error);
finds!(
    mounts_do_not_nest,
    ROCE,
    [("{ mount: /scratch }", "{ mount: /home/scratch }")],
    "mount-collision",
    "scratch: { mount: /home/scratch }",
    Error
);
finds!(
    mounts_are_distinct,
    ROCE,
    [("  scratch:", "    - { name: data, kind: nfs, server_group: head, mount: /home/ }\n  scratch:")],
    "mount-collision",
    "mount: /home/ }",
    Error
);
finds!(
    nfs_needs_a_server,
    ROCE,
    [("server_group: head, export: /export/home, ", "")],
    "nfs-without-server",
    "{ name: home, kind: nfs, mount: /home }",
    Error
);
finds!(
    nfs_server_or_endpoint,
    ROCE,
    [("export: /export/home,", "export: /export/home, endpoint: \"nas:/home\",")],
    "nfs-server-and-endpoint",
    "endpoint: \"nas:/home\"",
    Warning
);
finds!(
    nfs_endpoint_is_server_and_path,
    ROCE,
    [("server_group: head, export: /export/home,", "endpoint: nas/home,")],
    "invalid-endpoint",
    "endpoint: nas/home",
    Error
);
finds!(
    lustre_needs_an_endpoint,
    INFINIBAND,
    [("endpoint: \"10.30.0.10@o2ib:/lustre\", ", "")],
    "lustre-without-endpoint",
    "{ name: lustre, kind: lustre, mount: /lustre }",
    Error
);
finds!(
    lustre_endpoint_names_the_mgs,
    INFINIBAND,
    [("10.30.0.10@o2ib:/lustre", "10.30.0.10:/lustre")],
    "invalid-endpoint",
    "endpoint: \"10.30.0.10:/lustre\"",
    Error
);

finds!(
    expected_performance_is_positive,
    ROCE,
    [("mount: /home }", "mount: /home, expected: { read_gb_per_s: 20, write_gb_per_s: -1 } }")],
    "invalid-expected-performance",
    "write_gb_per_s: -1",
    Error
);
finds!(
    expected_metadata_rate_is_a_number,
    ROCE,
    [("mount: /home }", "mount: /home, expected: { create_ops: .nan } }")],
    "invalid-expected-performance",
    "create_ops: .nan",
    Error
);
finds!(
    expected_bandwidth_in_megabytes_is_implausible,
    ROCE,
    [("mount: /home }", "mount: /home, expected: { read_gb_per_s: 250000 } }")],
    "implausible-expected-performance",
    "read_gb_per_s: 250000",
    Warning
);

#[test]
fn storage_groups_exist() {
    let text = edit(ROCE, &[("server_group: head", "server_group: heads")]);
    let found = finds(&text, "unknown-group", "server_group: heads", Severity::Error);
    assert!(found.help.as_deref().is_some_and(|h| h.starts_with("did you mean `head`?")), "{}", found.render());
}

finds!(
    nfs_server_has_storage_role,
    ROCE,
    [("[controller, database, login, storage]", "[controller, database, login]")],
    "server-group-without-storage-role",
    "server_group: head",
    Warning
);
finds!(
    scratch_needs_nvme,
    ROCE,
    [("    local_nvme: { count: 2, size_gb: 1000 }\n", "")],
    "scratch-without-nvme",
    "scratch: { mount: /scratch }",
    Warning
);

// --- scheduler -----------------------------------------------------------------------

#[test]
fn scheduler_kind_matches_its_section() {
    let text = edit(ROCE, &[("kind: slurm", "kind: kubernetes")]);
    finds(&text, "scheduler-section-mismatch", "kind: kubernetes", Severity::Error);
    finds(&text, "scheduler-section-mismatch", "slurm:", Severity::Error);
    let both = edit(ROCE, &[("  slurm:\n", "  kubernetes: {}\n  slurm:\n")]);
    finds(&both, "scheduler-section-mismatch", "kubernetes: {}", Severity::Error);
}

finds!(
    slurm_version_is_a_release,
    ROCE,
    [("\"22.05\"", "\"22.5\"")],
    "invalid-slurm-version",
    "min_version: \"22.5\"",
    Error
);
finds!(
    slurm_version_is_supported,
    ROCE,
    [("\"22.05\"", "\"21.08\"")],
    "invalid-slurm-version",
    "min_version: \"21.08\"",
    Error
);
finds!(
    block_topology_needs_23_11,
    ROCE,
    [("    partitions:\n", "    topology: block\n    partitions:\n")],
    "slurm-feature-too-new",
    "topology: block",
    Error
);

#[test]
fn block_topology_is_fine_on_23_11() {
    let text =
        edit(ROCE, &[("\"22.05\"", "\"23.11\""), ("    partitions:\n", "    topology: block\n    partitions:\n")]);
    assert!(lint(&text).is_empty(), "{}", lint(&text).render());
}

finds!(
    extra_keys_newer_than_22_05,
    ROCE,
    [("    partitions:\n", "    extra: { PreemptParameters: reclaim_licenses }\n    partitions:\n")],
    "slurm-extra-too-new",
    "extra: { PreemptParameters: reclaim_licenses }",
    Error
);
finds!(
    extra_keys_removed_from_slurm,
    ROCE,
    [("    partitions:\n", "    extra: { accountingstorageloc: /var/log/acct }\n    partitions:\n")],
    "slurm-extra-removed",
    "extra: { accountingstorageloc: /var/log/acct }",
    Error
);
finds!(
    extra_keys_defunct_in_slurm,
    ROCE,
    [("    partitions:\n", "    extra: { GetEnvTimeout: \"2\" }\n    partitions:\n")],
    "slurm-extra-defunct",
    "extra: { GetEnvTimeout: \"2\" }",
    Warning
);
finds!(
    extra_keys_are_words,
    ROCE,
    [("    partitions:\n", "    extra: { \"Bad Key\": x }\n    partitions:\n")],
    "invalid-slurm-extra",
    "extra: { \"Bad Key\": x }",
    Error
);
finds!(
    extra_values_are_one_line,
    ROCE,
    [("    partitions:\n", "    extra: { SchedulerParameters: \"a\\nNodeName=evil\" }\n    partitions:\n")],
    "invalid-slurm-extra",
    "SchedulerParameters",
    Error
);
finds!(
    suspend_keeps_gpus,
    ROCE,
    [("    partitions:\n", "    preempt_mode: suspend\n    partitions:\n")],
    "preempt-suspend",
    "preempt_mode: suspend",
    Error
);
finds!(
    shard_needs_a_count,
    ROCE,
    [("    partitions:\n", "    gpu_sharing: { mode: shard }\n    partitions:\n")],
    "gpu-sharing-incomplete",
    "gpu_sharing: { mode: shard }",
    Error
);
finds!(
    mig_needs_profiles,
    ROCE,
    [("    partitions:\n", "    gpu_sharing: { mode: mig }\n    partitions:\n")],
    "gpu-sharing-incomplete",
    "gpu_sharing: { mode: mig }",
    Error
);
finds!(
    mig_profiles_have_a_shape,
    ROCE,
    [("    partitions:\n", "    gpu_sharing: { mode: mig, mig_profiles: [1g.10gb, 1x.10gb] }\n    partitions:\n")],
    "invalid-mig-profile",
    "mig_profiles: [1g.10gb, 1x.10gb]",
    Error
);
finds!(
    mig_profiles_fit_one_gpu,
    ROCE,
    [("    partitions:\n", "    gpu_sharing: { mode: mig, mig_profiles: [4g.40gb, 4g.40gb] }\n    partitions:\n")],
    "mig-profiles-exceed-gpu",
    "mig_profiles: [4g.40gb, 4g.40gb]",
    Error
);
finds!(
    mig_needs_a_mig_gpu,
    ROCE,
    [
        ("model: h100", "model: l40s"),
        ("    partitions:\n", "    gpu_sharing: { mode: mig, mig_profiles: [1g.10gb] }\n    partitions:\n")
    ],
    "mig-unsupported-gpu",
    "gpu: { model: l40s, count: 2 }",
    Error
);

#[test]
fn mig_on_a_mig_gpu_is_clean() {
    let text = edit(
        ROCE,
        &[(
            "    partitions:\n",
            "    gpu_sharing: { mode: mig, mig_profiles: [3g.40gb, 2g.20gb, 1g.10gb+me] }\n    partitions:\n",
        )],
    );
    assert!(lint(&text).is_empty(), "{}", lint(&text).render());
}

finds!(
    slurm_needs_a_partition,
    ROCE,
    [("partitions:\n      - { name: gpu, groups: [gpu], default: true, max_time: INFINITE }", "partitions: []")],
    "no-partitions",
    "partitions: []",
    Error
);
finds!(
    partition_names_are_unique_in_slurm,
    ROCE,
    [("max_time: INFINITE }", "max_time: INFINITE }\n      - { name: gpu, groups: [gpu] }")],
    "duplicate-partition",
    "- { name: gpu, groups: [gpu] }",
    Error
);
finds!(
    one_default_partition,
    ROCE,
    [("max_time: INFINITE }", "max_time: INFINITE }\n      - { name: debug, groups: [gpu], default: true }")],
    "multiple-default-partitions",
    "name: debug",
    Error
);
finds!(
    a_default_partition_is_expected,
    ROCE,
    [("default: true, ", "")],
    "no-default-partition",
    "partitions:",
    Warning
);
finds!(
    partitions_have_groups,
    ROCE,
    [("groups: [gpu], default", "groups: [], default")],
    "empty-partition",
    "groups: [], default",
    Error
);

#[test]
fn partition_groups_exist() {
    let text = edit(ROCE, &[("groups: [gpu], default", "groups: [gpus], default")]);
    let found = finds(&text, "unknown-group", "groups: [gpus]", Severity::Error);
    assert!(found.help.as_deref().is_some_and(|h| h.starts_with("did you mean `gpu`?")), "{}", found.render());
}

finds!(
    partition_groups_compute,
    ROCE,
    [("groups: [gpu], default", "groups: [gpu, head], default")],
    "partition-group-not-compute",
    "groups: [gpu, head]",
    Warning
);
finds!(max_time_is_a_slurm_time, ROCE, [("INFINITE", "2 days")], "invalid-time", "max_time: 2 days", Error);
finds!(
    half_life_is_a_slurm_time,
    ROCE,
    [("    partitions:\n", "    fairshare_half_life: 7days\n    partitions:\n")],
    "invalid-time",
    "fairshare_half_life: 7days",
    Error
);

#[test]
fn slurm_times_parse() {
    for good in ["INFINITE", "unlimited", "90", "90:30", "12:00:00", "7-0", "7-12:30", "2-00:00:00"] {
        assert!(super::scheduler::is_slurm_time(good), "{good}");
    }
    for bad in ["", "2 days", "1:2:3:4", "-5", "7-", "x-1", "1-2:3:4:5"] {
        assert!(!super::scheduler::is_slurm_time(bad), "{bad}");
    }
}

// --- tenants -------------------------------------------------------------------------

finds!(
    tenant_names_are_unique,
    ROCE,
    [("name: team-b", "name: team-a, users: [carol], guaranteed_gpus: 0 }\n  - { name: team-c")],
    "duplicate-tenant",
    "users: [carol]",
    Error
);
finds!(
    users_belong_to_one_tenant,
    ROCE,
    [("users: [bob]", "users: [bob, alice]")],
    "user-in-multiple-tenants",
    "users: [bob, alice]",
    Error
);

#[test]
fn guarantees_fit_the_cluster() {
    let text = edit(ROCE, &[("users: [bob], guaranteed_gpus: 4", "users: [bob], guaranteed_gpus: 12")]);
    let found = finds(&text, "guarantees-exceed-gpus", "users: [bob]", Severity::Error);
    assert!(found.message.contains("`16` GPUs") && found.message.contains("`8`"), "{}", found.render());
}

finds!(
    guarantees_are_whole_nodes,
    ROCE,
    [("users: [alice], guaranteed_gpus: 4", "users: [alice], guaranteed_gpus: 3")],
    "guarantee-not-node-multiple",
    "users: [alice]",
    Warning
);
finds!(
    tenants_need_accounting,
    ROCE,
    [("    partitions:\n", "    accounting: false\n    partitions:\n")],
    "tenants-need-accounting",
    "accounting: false",
    Error
);

// --- acceptance ----------------------------------------------------------------------

finds!(efficiency_is_a_fraction, ROCE, [("0.8", "1.5")], "invalid-nccl-efficiency", "nccl_efficiency: 1.5", Error);
finds!(
    validators_are_listed_once,
    ROCE,
    [(
        "  mode: auto\n",
        "  mode: auto\n  validators:\n    - { id: nccl-multi-node }\n    - { id: nccl-multi-node, skip: true }\n"
    )],
    "duplicate-validator",
    "skip: true",
    Error
);
finds!(
    explicit_mode_lists_validators,
    ROCE,
    [("mode: auto", "mode: explicit")],
    "no-validators",
    "mode: explicit",
    Error
);
finds!(
    thresholds_are_finite,
    ROCE,
    [("  mode: auto\n", "  mode: auto\n  validators:\n    - { id: nccl, thresholds: { busbw: .nan } }\n")],
    "invalid-threshold",
    "thresholds: { busbw: .nan }",
    Error
);

// --- inventory -----------------------------------------------------------------------

finds_in_inventory!(inventory_version_is_1, [("version: 1", "version: 7")], "unsupported-version", "version: 7", Error);

#[test]
fn every_node_is_in_the_inventory() {
    let inventory = edit(INVENTORY, &[("  node02: { address: 10.10.0.12 }\n  node03: { address: 10.10.0.13 }\n", "")]);
    let found = finds_in_inventory(&inventory, "inventory-missing-hosts", "hosts:", Severity::Error);
    assert!(found.message.contains("`node[02-03]`"), "{}", found.render());
}

#[test]
fn unknown_inventory_hosts_warn_with_a_suggestion() {
    let inventory = edit(INVENTORY, &[("  node03:", "  node3: { address: 10.10.0.33 }\n  node03:")]);
    let found = finds_in_inventory(&inventory, "inventory-unknown-host", "node3:", Severity::Warning);
    assert!(found.help.as_deref().is_some_and(|h| h.starts_with("did you mean `node03`?")), "{}", found.render());
}

#[test]
fn inventory_switches_are_planned_switches() {
    let inventory = edit(INVENTORY, &[("leaf1:", "leaf9:")]);
    let found = finds_in_inventory(&inventory, "inventory-unknown-switch", "leaf9:", Severity::Error);
    assert!(found.help.as_deref().is_some_and(|h| h.contains("`leaf[0-1],spine0`")), "{}", found.render());
    let diagnostics = lint_pair(ROCE, Some(&inventory));
    find(&diagnostics, INVENTORY_FILE, &inventory, "inventory-missing-switches", "switches:");
}

finds_in_inventory!(
    roce_switches_are_in_the_inventory,
    [("  spine0: { address: 10.10.0.210, os: frr }\n", "")],
    "inventory-missing-switches",
    "switches:",
    Warning
);
finds_in_inventory!(
    proxy_jump_names_a_bastion,
    [("proxy_jump: gateway", "proxy_jump: gatway")],
    "unknown-bastion",
    "node04:",
    Error
);
finds_in_inventory!(addresses_are_unique, [("10.10.0.12", "10.10.0.11")], "duplicate-address", "node02:", Error);
finds_in_inventory!(rail_macs_name_a_rail, [("{ 0: \"b8", "{ 5: \"b8")], "invalid-rail-mac", "node01:", Error);
finds_in_inventory!(
    port_macs_are_macs,
    [("swp26: \"02:42:0a:c8:ff:f2\"", "swp26: \"02:42:0a:c8:ff\"")],
    "invalid-port-mac",
    "leaf0:",
    Error
);
finds_in_inventory!(
    port_macs_name_interfaces,
    [("swp26: \"02", "\"swp 26\": \"02")],
    "invalid-port-mac",
    "leaf0:",
    Error
);
finds_in_inventory!(
    port_macs_are_not_rail_macs,
    [("swp26: \"02:42:0a:c8:ff:f2\"", "swp26: \"B8:3F:D2:00:00:10\"")],
    "invalid-port-mac",
    "leaf0:",
    Error
);
finds_in_inventory!(
    port_macs_only_on_frr_switches,
    [("leaf0: { address: 10.10.0.200, os: frr,", "leaf0: { address: 10.10.0.200, os: cumulus-nvue,")],
    "invalid-port-mac",
    "leaf0:",
    Error
);
finds_in_inventory!(
    rail_macs_are_macs,
    [("b8:3f:d2:00:00:10", "b8:3f:d2:00:10")],
    "invalid-rail-mac",
    "node01:",
    Error
);

// --- hardware profiles and cloud ------------------------------------------------------

/// [`ROCE`] with a hardware profile on the gpu group.
fn with_profile(profile: &str) -> String {
    let text = edit(
        ROCE,
        &[(
            "    local_nvme: { count: 2, size_gb: 1000 }\n",
            "    local_nvme: { count: 2, size_gb: 1000 }\n    hardware_profile: gpu-bios\n",
        )],
    );
    format!("{text}hardware_profiles:\n  gpu-bios:\n{profile}")
}

#[test]
fn a_valid_hardware_profile_is_clean() {
    let text = with_profile(&format!(
        "    power: on\n    pxe_on_provision: true\n    bios: {{ ProcTurboMode: Disabled, NumCores: 10 }}\n    firmware_updates: true\n    firmware:\n      BIOS: \"P79 v1.45 (12/06/2017)\"\n      BMC: {{ version: 1.45.455b66-rev4, image: https://10.0.0.2/fw/bmc.bin, sha256: {} }}\n",
        "ab".repeat(32)
    ));
    let diagnostics = lint(&text);
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

#[test]
fn an_unknown_hardware_profile_is_an_error_with_a_suggestion() {
    let text = edit(&with_profile("    power: on\n"), &[("hardware_profile: gpu-bios", "hardware_profile: gpu-bio")]);
    let found = finds(&text, "unknown-hardware-profile", "hardware_profile: gpu-bio", Severity::Error);
    assert!(found.help.as_deref().is_some_and(|help| help.contains("did you mean `gpu-bios`")), "{}", found.render());
}

finds!(
    firmware_versions_are_versions,
    &with_profile("    firmware: { BIOS: \" \" }\n"),
    [],
    "invalid-firmware-version",
    "firmware: { BIOS:",
    Error
);
finds!(
    firmware_images_need_a_sha256,
    &with_profile("    firmware:\n      BIOS: { version: U46 v2.70 (01/11/2023), image: http://10.0.0.2/u46.bin }\n"),
    [],
    "firmware-image-without-sha256",
    "image: http://10.0.0.2/u46.bin",
    Error
);
finds!(
    firmware_images_are_urls,
    &with_profile(&format!(
        "    firmware:\n      BMC: {{ version: \"7.10\", image: /srv/bmc.bin, sha256: {} }}\n",
        "a".repeat(64)
    )),
    [],
    "invalid-firmware-image",
    "image: /srv/bmc.bin",
    Error
);
finds!(
    bios_values_are_scalars,
    &with_profile("    bios: { ProcTurboMode: [a, b] }\n"),
    [],
    "invalid-bios-value",
    "bios: { ProcTurboMode",
    Error
);
finds!(
    unused_hardware_profiles_warn,
    &with_profile("    power: on\n"),
    [("    hardware_profile: gpu-bios\n", "")],
    "unused-hardware-profile",
    "gpu-bios:",
    Warning
);

#[test]
fn firmware_version_format() {
    // As BMCs report them (DMTF, HPE, Dell, Supermicro, Lenovo mockups: tests/support/mockups/SOURCE.md).
    for good in [
        "2.3.1",
        "U50_1.60",
        "P79 v1.45 (12/06/2017)",
        "1.45.455b66-rev4",
        "2.75.75.75",
        "U46 v2.70 (01/11/2023)",
        "latest",
    ] {
        assert!(super::hardware::is_firmware_version(good), "{good}");
    }
    for bad in ["", "  ", "1.0\nrm -rf", "2.3.1\t"] {
        assert!(!super::hardware::is_firmware_version(bad), "{bad}");
    }
}

/// [`INVENTORY`] with the gpu group in the cloud (its hosts removed).
fn cloud_inventory(cloud: &str) -> String {
    let hosts = "  node01: { address: 10.10.0.11, rail_macs: { 0: \"b8:3f:d2:00:00:10\" } }\n  node02: { address: 10.10.0.12 }\n  node03: { address: 10.10.0.13 }\n  node04: { address: 10.10.0.14, proxy_jump: gateway }\n";
    format!("{}{cloud}", edit(INVENTORY, &[(hosts, "")]))
}

const CLOUD: &str = "cloud:
  provider: aws
  region: us-east-1
  access_key_id: { env: AWS_ACCESS_KEY_ID }
  secret_access_key: { env: AWS_SECRET_ACCESS_KEY }
  image_id: ami-12345678
  management_subnet: subnet-mgmt
  rail_subnets: [subnet-r0, subnet-r1]
  node_groups:
    gpu: { instance_type: p5.48xlarge }
";

#[test]
fn cloud_groups_need_no_hosts_entries() {
    let diagnostics = lint_pair(ROCE, Some(&cloud_inventory(CLOUD)));
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

fn finds_in_cloud(edits: &[(&str, &str)], id: &str, needle: &str, severity: Severity) -> Diagnostic {
    let inventory = cloud_inventory(&edit(CLOUD, edits));
    finds_in_inventory(&inventory, id, needle, severity)
}

#[test]
fn a_cloud_section_needs_a_region() {
    let found = finds_in_cloud(&[("  region: us-east-1\n", "")], "cloud-missing-region", "cloud:", Severity::Error);
    assert!(found.help.is_some());
    finds_in_cloud(&[("us-east-1", "US East")], "cloud-invalid-region", "region: US East", Severity::Error);
}

#[test]
fn one_subnet_per_rail() {
    let found = finds_in_cloud(
        &[("[subnet-r0, subnet-r1]", "[subnet-r0]")],
        "cloud-rail-subnets",
        "rail_subnets:",
        Severity::Error,
    );
    assert!(found.message.contains("2 rail(s)") && found.message.contains("1 subnet(s)"), "{}", found.message);
}

#[test]
fn cloud_groups_exist_have_an_image_and_an_instance_type() {
    finds_in_cloud(&[("    gpu: {", "    gpus: {")], "cloud-unknown-node-group", "gpus:", Severity::Error);
    finds_in_cloud(&[("  image_id: ami-12345678\n", "")], "cloud-missing-image", "gpu: {", Severity::Error);
    finds_in_cloud(&[("p5.48xlarge", "p5")], "cloud-invalid-instance-type", "gpu: {", Severity::Error);
}

#[test]
fn profiled_nodes_without_a_bmc_warn() {
    let diagnostics = lint_pair(&with_profile("    power: on\n"), Some(INVENTORY));
    let found = find(&diagnostics, INVENTORY_FILE, INVENTORY, "hardware-profile-without-bmc", "version: 1");
    assert_eq!(found.severity, Severity::Warning);
    assert!(found.message.contains("node[01-04]"), "{}", found.message);
}

/// The RoCE base with a software stack that passes every check.
fn with_software() -> String {
    format!(
        "{ROCE}software:\n  os: debian12\n  gpu_driver: {{ version: 550.127.05 }}\n  fabric_manager: auto\n  \
         network: {{ stack: doca-ofed, version: 2.9.1 }}\n  peermem: true\n  dcgm: {{ major: 4, diag_level: 3 }}\n  \
         containers: {{ enroot: 3.5.0, pyxis: 0.20.0 }}\n"
    )
}

#[test]
fn a_declared_software_stack_is_clean() {
    let diagnostics = lint(&with_software());
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

#[test]
fn a_driver_branch_too_old_for_the_gpu_model_is_an_error() {
    let text = edit(&with_software(), &[("version: 550.127.05", "version: 515.105.01")]);
    let found = finds(&text, "driver-too-old", "gpu_driver: { version: 515.105.01 }", Severity::Error);
    assert!(found.message.contains("needs R525"), "{}", found.render());
    let branch = edit(&with_software(), &[("{ version: 550.127.05 }", "{ branch: 470 }")]);
    finds(&branch, "driver-too-old", "gpu_driver: { branch: 470 }", Severity::Error);
}

finds!(
    driver_version_must_be_numeric,
    &with_software(),
    [("version: 550.127.05", "version: latest")],
    "invalid-driver-version",
    "gpu_driver: { version: latest }",
    Error
);
finds!(
    driver_needs_exactly_one_of_version_and_branch,
    &with_software(),
    [("{ version: 550.127.05 }", "{ version: 550.127.05, branch: 550 }")],
    "driver-version-and-branch",
    "gpu_driver: {",
    Error
);
finds!(
    fabric_manager_disabled_on_nvswitch_is_an_error,
    &with_software(),
    [("fabric_manager: auto", "fabric_manager: disabled")],
    "fabric-manager-disabled",
    "fabric_manager: disabled",
    Error
);
finds!(
    fabric_manager_without_nvswitch_warns,
    &with_software(),
    [("fabric_manager: auto", "fabric_manager: enabled"), ("model: h100", "model: l40s")],
    "fabric-manager-without-nvswitch",
    "fabric_manager: enabled",
    Warning
);
finds!(
    fabric_manager_needs_a_driver,
    &with_software(),
    [("  gpu_driver: { version: 550.127.05 }\n", "")],
    "fabric-manager-without-driver",
    "software:",
    Error
);
finds!(
    dcgm_level_is_one_to_four,
    &with_software(),
    [("diag_level: 3", "diag_level: 5")],
    "invalid-dcgm-level",
    "dcgm: { major: 4, diag_level: 5 }",
    Error
);
finds!(
    dcgm_major_is_three_or_four,
    &with_software(),
    [("major: 4", "major: 2")],
    "invalid-dcgm-major",
    "dcgm: { major: 2, diag_level: 3 }",
    Error
);
finds!(
    monitoring_with_dcgm_3_scrapes_no_gpu_metrics,
    &(with_software() + "monitoring: {}\n"),
    [("major: 4", "major: 3")],
    "dcgm-exporter-needs-dcgm-4",
    "dcgm: { major: 3, diag_level: 3 }",
    Warning
);
finds!(
    peermem_needs_an_ofed_stack,
    &with_software(),
    [("{ stack: doca-ofed, version: 2.9.1 }", "{ stack: inbox }")],
    "peermem-without-rdma-stack",
    "peermem: true",
    Error
);
finds!(
    an_ofed_stack_is_pinned,
    &with_software(),
    [("{ stack: doca-ofed, version: 2.9.1 }", "{ stack: doca-ofed }")],
    "missing-network-version",
    "network: { stack: doca-ofed }",
    Error
);
finds!(
    container_releases_are_release_numbers,
    &with_software(),
    [("enroot: 3.5.0", "enroot: \"3.5; rm -rf /\"")],
    "invalid-software-version",
    "containers:",
    Error
);
finds!(
    a_group_software_section_replaces_the_top_level_one,
    ROCE,
    [(
        "    local_nvme: { count: 2, size_gb: 1000 }\n",
        "    local_nvme: { count: 2, size_gb: 1000 }\n    software:\n      os: debian12\n      gpu_driver: { branch: 470 }\n"
    )],
    "driver-too-old",
    "gpu_driver: { branch: 470 }",
    Error
);
finds!(
    software_on_a_group_without_gpus_warns,
    ROCE,
    [(
        "roles: [controller, database, login, storage]",
        "roles: [controller, database, login, storage]\n    software: { os: debian12 }"
    )],
    "software-without-gpus",
    "software: { os: debian12 }",
    Warning
);
finds!(
    a_dcgm_level_in_software_and_acceptance_warns,
    &with_software(),
    [("  mode: auto\n", "  mode: auto\n  validators:\n    - { id: dcgm-diag, thresholds: { level: 4 } }\n")],
    "dcgm-level-twice",
    "- { id: dcgm-diag, thresholds: { level: 4 } }",
    Warning
);
finds!(
    the_inbox_stack_takes_no_version,
    &with_software(),
    [("{ stack: doca-ofed, version: 2.9.1 }", "{ stack: inbox, version: 5.0.0 }"), ("peermem: true", "peermem: false")],
    "inbox-network-version",
    "network: { stack: inbox, version: 5.0.0 }",
    Warning
);

finds!(
    package_cache_host_must_be_a_node,
    ROCE,
    [("acceptance:\n", "package_cache:\n  host: nfs01\nacceptance:\n")],
    "unknown-package-cache-host",
    "host: nfs01",
    Error
);
finds!(
    package_cache_proxy_carries_no_password,
    ROCE,
    [("acceptance:\n", "package_cache:\n  upstream_proxy: \"http://me:secret@proxy:3128\"\nacceptance:\n")],
    "invalid-proxy-url",
    "upstream_proxy:",
    Error
);
finds!(
    package_cache_site_proxy_is_plain_http,
    ROCE,
    [("acceptance:\n", "package_cache:\n  site_proxy: \"https://apt.example.org\"\nacceptance:\n")],
    "invalid-proxy-url",
    "site_proxy:",
    Error
);
finds!(
    package_cache_settings_ignored_beside_a_site_proxy,
    ROCE,
    [("acceptance:\n", "package_cache:\n  site_proxy: \"http://apt:3142\"\n  port: 3150\nacceptance:\n")],
    "package-cache-ignored",
    "port: 3150",
    Warning
);

#[test]
fn an_unquoted_decimal_firmware_version_is_refused_where_it_is_written() {
    // YAML reads `2.40` as 2.4: the version the vendor wrote would be lost.
    let text = with_profile("    firmware: { BIOS: 2.40 }\n");
    let diagnostics = load_text(Path::new(BLUEPRINT_FILE), text.clone()).expect_err("refused at load");
    let rendered = diagnostics.render();
    assert!(rendered.contains("quote it"), "{rendered}");
    assert!(
        diagnostics.0.iter().any(|d| d.position.map(|p| p.line) == Some(line_of(&text, "firmware: { BIOS: 2.40 }"))),
        "{rendered}"
    );
    // A whole number and the long form load.
    let text = with_profile("    firmware: { BMC: 7, BIOS: { version: \"2.40\" } }\n");
    assert!(lint(&text).is_empty(), "{}", lint(&text).render());
}

/// Hostile names, each where it flows into a native format: the check id and the line.
#[test]
fn names_the_tools_would_reject_are_errors_on_their_line() {
    let partition = "      - { name: gpu, groups: [gpu], default: true, max_time: INFINITE }";
    let tenant = "  - { name: team-a, users: [alice], guaranteed_gpus: 4 }";
    let cases: &[(&str, &str, &str, &str)] = &[
        // (from, to, id, line needle)
        (
            partition,
            r#"      - { name: "gpu x;y", groups: [gpu], default: true, max_time: INFINITE }"#,
            "invalid-slurm-name",
            "gpu x;y",
        ),
        (
            partition,
            r#"      - { name: "gpu=1", groups: [gpu], default: true, max_time: INFINITE }"#,
            "invalid-slurm-name",
            "gpu=1",
        ),
        (
            partition,
            r#"      - { name: "gpu#1", groups: [gpu], default: true, max_time: INFINITE }"#,
            "invalid-slurm-name",
            "gpu#1",
        ),
        (
            partition,
            r#"      - { name: "$(reboot)", groups: [gpu], default: true, max_time: INFINITE }"#,
            "invalid-slurm-name",
            "reboot",
        ),
        (
            partition,
            "      - { name: GPU, groups: [gpu], default: true, max_time: INFINITE }",
            "invalid-slurm-name",
            "name: GPU",
        ),
        (
            partition,
            "      - { name: 1gpu, groups: [gpu], default: true, max_time: INFINITE }",
            "invalid-slurm-name",
            "name: 1gpu",
        ),
        (
            partition,
            "      - { name: \"-gpu\", groups: [gpu], default: true, max_time: INFINITE }",
            "invalid-slurm-name",
            "-gpu",
        ),
        (
            partition,
            "      - { name: gpu\u{430}, groups: [gpu], default: true, max_time: INFINITE }",
            "invalid-slurm-name",
            "gpu\u{430}",
        ),
        (tenant, r#"  - { name: "team a", users: [alice], guaranteed_gpus: 4 }"#, "invalid-slurm-name", "team a"),
        (tenant, "  - { name: Team-A, users: [alice], guaranteed_gpus: 4 }", "invalid-slurm-name", "Team-A"),
        (tenant, r#"  - { name: team-a, users: ["alice;id"], guaranteed_gpus: 4 }"#, "invalid-user-name", "alice;id"),
        (tenant, r#"  - { name: team-a, users: ["al'ice"], guaranteed_gpus: 4 }"#, "invalid-user-name", "al'ice"),
        (tenant, "  - { name: team-a, users: [Alice], guaranteed_gpus: 4 }", "invalid-user-name", "[Alice]"),
        (tenant, "  - { name: team-a, users: [9lives], guaranteed_gpus: 4 }", "invalid-user-name", "9lives"),
        (tenant, "  - { name: team-a, users: [\"-rf\"], guaranteed_gpus: 4 }", "invalid-user-name", "-rf"),
        (tenant, "  - { name: team-a, users: [\u{430}lice], guaranteed_gpus: 4 }", "invalid-user-name", "\u{430}lice"),
        (
            tenant,
            "  - { name: team-a, users: [abcdefghijklmnopqrstuvwxyz0123456], guaranteed_gpus: 4 }",
            "invalid-user-name",
            "abcdefghijklmnopqrstuvwxyz0123456",
        ),
    ];
    for (from, to, id, needle) in cases {
        let text = edit(ROCE, &[(from, to)]);
        let found = finds(&text, id, needle, Severity::Error);
        assert!(
            found.message.contains("Slurm") || found.message.contains("useradd"),
            "the tool is named: {}",
            found.render()
        );
    }
    // Where Kubernetes schedules, tenants become namespaces: DNS-1123 labels.
    let text = edit(
        ROCE,
        &[("kind: slurm", "kind: kubernetes"), (tenant, "  - { name: team_a, users: [alice], guaranteed_gpus: 4 }")],
    );
    let found = finds(&text, "invalid-kubernetes-name", "team_a", Severity::Error);
    assert!(
        found.message.contains("Kubernetes") && found.help.as_deref().is_some_and(|h| h.contains("`team-a`")),
        "{}",
        found.render()
    );
}

/// Mount points reach systemd unit names, fstab and exports: hostile ones are refused on their line.
#[test]
fn hostile_mount_points_are_errors_on_their_line() {
    for mount in ["\"/home;rm\"", "\"/home$(id)\"", "\"/ho#me\"", "\"/home'x\"", "/h\u{43e}me", "\"/a=b\""] {
        let text = edit(ROCE, &[("mount: /home", &format!("mount: {mount}"))]);
        let found = finds(&text, "invalid-mount", &format!("mount: {mount}"), Severity::Error);
        assert!(found.message.contains("systemd"), "{}", found.render());
    }
    let long = format!("/{}", "a".repeat(250));
    let text = edit(ROCE, &[("mount: /home", &format!("mount: {long}"))]);
    finds(&text, "invalid-mount", &long, Severity::Error);
}

// --- spares ---------------------------------------------------------------------------

finds!(
    spares_keep_a_node_in_service,
    ROCE,
    [("    hostname: \"node{index:02}\"\n", "    hostname: \"node{index:02}\"\n    spares: 4\n")],
    "spares-exceed-count",
    "spares: 4",
    Error
);
finds!(
    spares_are_compute_nodes,
    ROCE,
    [("    hostname: head\n", "    hostname: head\n    spares: 1\n")],
    "spares-not-compute",
    "spares: 1",
    Error
);
finds!(
    spares_back_no_guarantee,
    ROCE,
    [("    hostname: \"node{index:02}\"\n", "    hostname: \"node{index:02}\"\n    spares: 1\n")],
    "guarantees-exceed-gpus",
    "name: team-b, users: [bob], guaranteed_gpus: 4",
    Error
);
finds!(
    the_spare_partition_name_is_toolkits,
    ROCE,
    [
        ("    hostname: \"node{index:02}\"\n", "    hostname: \"node{index:02}\"\n    spares: 1\n"),
        (
            "guaranteed_gpus: 4 }\n  - { name: team-b, users: [bob], guaranteed_gpus: 4 }",
            "guaranteed_gpus: 2 }\n  - { name: team-b, users: [bob], guaranteed_gpus: 4 }"
        ),
        (
            "      - { name: gpu, groups: [gpu], default: true, max_time: INFINITE }\n",
            "      - { name: gpu, groups: [gpu], default: true, max_time: INFINITE }\n      - { name: spare, groups: [gpu] }\n"
        ),
    ],
    "spare-partition-taken",
    "name: spare, groups",
    Error
);

#[test]
fn spares_within_the_guarantees_lint_clean() {
    let text = edit(
        ROCE,
        &[
            ("    hostname: \"node{index:02}\"\n", "    hostname: \"node{index:02}\"\n    spares: 1\n"),
            (
                "  - { name: team-b, users: [bob], guaranteed_gpus: 4 }",
                "  - { name: team-b, users: [bob], guaranteed_gpus: 2 }",
            ),
        ],
    );
    let diagnostics = lint(&text);
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

// --- monitoring ----------------------------------------------------------------------

/// The RoCE base with a monitoring section that passes every check.
fn with_monitoring() -> String {
    format!(
        "{ROCE}monitoring:\n  host: head\n  retention: 15d\n  scrape_interval: 15s\n  receivers:\n    \
         - name: ops\n      webhook: {{ url_secret: alert_webhook_url }}\n    \
         - name: mail\n      email: {{ to: ops@example.org, smarthost: mail.example.org:587, password_secret: smtp_password }}\n  \
         health:\n    fast_interval: 5m\n    slow_interval: 1h\n    cluster_interval: 10m\n    on_failure: drain\n    \
         checks: {{ rail-links: drain, gpu-health: drain, mtu: alert }}\n"
    )
}

/// [`with_monitoring`] with the repair service on.
fn with_repair() -> String {
    format!(
        "{}  repair:\n    max_in_repair: 2\n    max_repairs_per_day: 3\n    interval: 30s\n    settle: 15m\n    \
         checks: {{ rail-links: [reboot, diagnose, rma] }}\n",
        with_monitoring()
    )
}

#[test]
fn a_declared_repair_section_is_clean() {
    let diagnostics = lint_pair(&with_repair(), Some(&inventory_with_named_secrets()));
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

finds!(
    a_repair_ladder_ends_with_rma,
    &with_repair(),
    [("rail-links: [reboot, diagnose, rma]", "rail-links: [reboot, diagnose]")],
    "invalid-repair-ladder",
    "rail-links: [reboot, diagnose]",
    Error
);
finds!(
    a_repair_budget_is_positive,
    &with_repair(),
    [("max_in_repair: 2", "max_in_repair: 0")],
    "invalid-repair-budget",
    "max_in_repair: 0",
    Error
);
finds!(
    a_repair_settle_time_is_a_duration,
    &with_repair(),
    [("settle: 15m", "settle: soon")],
    "invalid-duration",
    "settle: soon",
    Error
);

/// [`INVENTORY`] declaring the receivers' secrets.
fn inventory_with_named_secrets() -> String {
    format!(
        "{INVENTORY}secrets:\n  named:\n    alert_webhook_url: {{ env: ALERT_URL }}\n    smtp_password: {{ file: smtp.pw }}\n"
    )
}

#[test]
fn a_declared_monitoring_section_is_clean() {
    let diagnostics = lint_pair(&with_monitoring(), Some(&inventory_with_named_secrets()));
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

finds!(
    a_scrape_interval_is_a_prometheus_duration,
    &with_monitoring(),
    [("scrape_interval: 15s", "scrape_interval: 15 seconds")],
    "invalid-duration",
    "scrape_interval: 15 seconds",
    Error
);
finds!(
    a_health_interval_is_positive,
    &with_monitoring(),
    [("fast_interval: 5m", "fast_interval: 0s")],
    "invalid-duration",
    "fast_interval: 0s",
    Error
);
finds!(
    the_monitoring_host_is_a_node,
    &with_monitoring(),
    [("host: head", "host: haed")],
    "unknown-monitoring-host",
    "host: haed",
    Error
);
finds!(
    receiver_names_are_unique,
    &with_monitoring(),
    [("- name: mail", "- name:   ops")],
    "duplicate-receiver",
    "- name:   ops",
    Error
);
finds!(
    a_receiver_has_one_kind,
    &with_monitoring(),
    [(
        "webhook: { url_secret: alert_webhook_url }",
        "email: { to: a@b.org, smarthost: m.b.org:25 }\n      webhook: { url_secret: alert_webhook_url }"
    )],
    "receiver-kind",
    "email: { to: a@b.org, smarthost: m.b.org:25 }",
    Error
);
finds!(
    a_smarthost_has_a_port,
    &with_monitoring(),
    [("smarthost: mail.example.org:587", "smarthost: mail.example.org")],
    "invalid-smarthost",
    "smarthost: mail.example.org,",
    Error
);
finds!(
    health_check_names_are_simple,
    &with_monitoring(),
    [("mtu: alert", "MTU check: alert")],
    "invalid-health-check-name",
    "checks: {",
    Error
);

#[test]
fn receiver_secrets_are_declared_in_the_inventory() {
    let text = with_monitoring();
    let diagnostics = lint_pair(&text, Some(INVENTORY));
    let found =
        find(&diagnostics, BLUEPRINT_FILE, &text, "unknown-secret", "webhook: { url_secret: alert_webhook_url }");
    assert!(found.help.as_deref().is_some_and(|help| help.contains("alert_webhook_url")), "{}", found.render());
    find(&diagnostics, BLUEPRINT_FILE, &text, "unknown-secret", "password_secret: smtp_password");
}

#[test]
fn a_bmc_read_over_ipmi_needs_an_address() {
    let bmcs = "bmcs:\n  node01:\n    endpoint: https://10.10.1.11\n    username: { env: U }\n    password: { env: P }\n    \
                ipmi: {}\n  node02:\n    endpoint: bmc02\n    username: { env: U }\n    password: { env: P }\n    \
                ipmi: { driver: LAN }\n";
    let inventory = format!("{}{bmcs}", inventory_with_named_secrets());
    let diagnostics = lint_pair(&with_monitoring(), Some(&inventory));
    let found = find(&diagnostics, INVENTORY_FILE, &inventory, "bmc-ipmi-address", "ipmi: { driver: LAN }");
    assert!(found.message.contains("`bmc02`"), "{}", found.render());
    assert_eq!(diagnostics.0.len(), 1, "node01's endpoint has a host: {}", diagnostics.render());
}

/// The RoCE base with an `os` section that passes every check.
fn with_os() -> String {
    format!(
        "{ROCE}os:\n  distribution: debian\n  suite: bookworm\n  packages: [slurmd, munge]\n  \
         disk: {{ path: /dev/disk/by-path/pci-0000:00:04.0, min_gib: 4 }}\n"
    )
}

#[test]
fn a_declared_os_is_clean() {
    let diagnostics = lint(&with_os());
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

finds!(
    os_suite_must_be_known_with_a_suggestion,
    &with_os(),
    [("suite: bookworm", "suite: bookwork")],
    "unknown-os-suite",
    "suite: bookwork",
    Error
);
finds!(
    os_suite_must_belong_to_the_distribution,
    &with_os(),
    [("suite: bookworm", "suite: noble")],
    "unknown-os-suite",
    "suite: noble",
    Error
);
finds!(
    os_disk_needs_a_hint,
    &with_os(),
    [("disk: { path: /dev/disk/by-path/pci-0000:00:04.0, min_gib: 4 }", "disk: {}")],
    "os-disk-without-hint",
    "disk: {}",
    Error
);
finds!(
    os_disk_path_must_be_stable,
    &with_os(),
    [("/dev/disk/by-path/pci-0000:00:04.0", "/dev/sda")],
    "os-disk-unstable-path",
    "disk: { path: /dev/sda, min_gib: 4 }",
    Error
);
finds!(
    os_disk_size_range_must_be_ordered,
    &with_os(),
    [("min_gib: 4 }", "min_gib: 40, max_gib: 20 }")],
    "os-disk-size-range",
    "disk: {",
    Error
);
finds!(
    os_packages_must_be_package_names,
    &with_os(),
    [("[slurmd, munge]", "[slurmd, \"munge; rm -rf /\"]")],
    "invalid-package-name",
    "packages: [slurmd",
    Error
);
finds!(
    os_timezone_must_be_a_zone_name,
    &with_os(),
    [("  packages:", "  timezone: ../../etc/shadow\n  packages:")],
    "invalid-timezone",
    "timezone: ../../etc/shadow",
    Error
);

#[test]
fn provisioning_addresses_must_be_on_its_subnet() {
    let inventory = format!(
        "{INVENTORY}bmcs:\n  node01: {{ endpoint: \"https://10.11.0.11\", username: {{env: U}}, password: {{env: P}} }}\n  \
         node02: {{ endpoint: \"https://10.11.0.12\", username: {{env: U}}, password: {{env: P}} }}\n\
         provisioning:\n  interface: br0\n  address: 10.20.0.1\n  subnet: 10.10.0.0/24\n"
    );
    finds_in_inventory(&inventory, "provisioning-address-outside-subnet", "address: 10.20.0.1", Severity::Error);
    let moved = edit(&inventory, &[("node02: { address: 10.10.0.12 }", "node02: { address: 10.99.0.12 }")]);
    finds_in_inventory(&moved, "host-outside-provisioning-subnet", "node02: { address: 10.99.0.12 }", Severity::Error);
}

/// Two GB200 NVL72 racks, Slurm 24.11 with block topology: clean.
const NVL72: &str = include_str!("../../../blueprints/gb200-nvl72.yaml");

#[test]
fn the_nvl72_example_is_clean() {
    let diagnostics = lint(NVL72);
    assert!(diagnostics.is_empty(), "{}", diagnostics.render());
}

finds!(
    nvlink_domain_holds_one_rack,
    NVL72,
    [("\"gb[019-036]\"", "\"gb[019-036],mgmt01\""), ("\"gb[001-018]\"", "\"gb[001-019]\"")],
    "nvlink-domain-too-large",
    "- { name: rack1, nodes: \"gb[001-019]\", switch_trays: 9 }",
    Error
);
finds!(
    nvlink_domain_is_one_gpu_model,
    NVL72,
    [("\"gb[019-036]\"", "\"gb[020-036],mgmt01\""), ("\"gb[001-018]\"", "\"gb[001-017]\"")],
    "nvlink-domain-mixed-gpus",
    "- { name: rack2, nodes: \"gb[020-036],mgmt01\", switch_trays: 9 }",
    Error
);
finds!(
    a_node_sits_in_one_nvlink_domain,
    NVL72,
    [("\"gb[019-036]\"", "\"gb[018-035]\"")],
    "nvlink-domain-overlap",
    "- { name: rack2, nodes: \"gb[018-035]\", switch_trays: 9 }",
    Error
);
finds!(
    nvlink_domains_name_real_nodes,
    NVL72,
    [("\"gb[019-036]\"", "\"gb[019-035],gb37\"")],
    "nvlink-domain-unknown-node",
    "- { name: rack2, nodes: \"gb[019-035],gb37\", switch_trays: 9 }",
    Error
);
finds!(
    nvlink_domain_nodes_are_a_hostlist,
    NVL72,
    [("\"gb[019-036]\"", "\"gb[019-036\"")],
    "invalid-nvlink-domain-nodes",
    "- { name: rack2, nodes: \"gb[019-036\", switch_trays: 9 }",
    Error
);
finds!(
    nvlink_domains_need_block_topology_not_slurm_22_05,
    NVL72,
    [("min_version: \"24.11\"", "min_version: \"22.05\"")],
    "nvlink-domains-need-block-topology",
    "min_version: \"22.05\"",
    Error
);
finds!(
    nvlink_domains_without_block_topology_are_not_scheduled,
    NVL72,
    [
        ("topology: block", "topology: tree"),
        (
            "          - { nodes: 36, segment: 18 }  # both racks, each half inside one rack\n          - { nodes: 8, segment: 4 }\n",
            ""
        )
    ],
    "nvlink-domains-not-scheduled",
    "topology: tree",
    Warning
);
finds!(
    slurm_23_11_wants_equal_blocks,
    NVL72,
    [("min_version: \"24.11\"", "min_version: \"23.11\""), ("\"gb[019-036]\"", "\"gb[019-034]\"")],
    "nvlink-domains-unequal",
    "- { name: rack2, nodes: \"gb[019-034]\", switch_trays: 9 }",
    Error
);
finds!(
    a_segment_fits_one_nvlink_domain,
    NVL72,
    [("{ nodes: 36, segment: 18 }", "{ nodes: 36, segment: 36 }")],
    "job-shape-exceeds-nvlink-domain",
    "- { nodes: 36, segment: 36 }  # both racks, each half inside one rack",
    Error
);
finds!(
    a_segment_fits_the_smallest_nvlink_domain,
    NVL72,
    [("\"gb[019-036]\"", "\"gb[019-034]\"")],
    "job-shape-exceeds-nvlink-domain",
    "- { nodes: 36, segment: 18 }  # both racks, each half inside one rack",
    Error
);
finds!(
    a_segment_divides_the_job,
    NVL72,
    [("{ nodes: 8, segment: 4 }", "{ nodes: 8, segment: 3 }")],
    "invalid-job-shape",
    "- { nodes: 8, segment: 3 }",
    Error
);
finds!(
    a_job_shape_fits_its_partition,
    NVL72,
    [("{ nodes: 8, segment: 4 }", "{ nodes: 40, segment: 4 }")],
    "job-shape-exceeds-partition",
    "- { nodes: 40, segment: 4 }",
    Error
);
finds!(
    segments_need_slurm_24_05,
    NVL72,
    [("min_version: \"24.11\"", "min_version: \"23.11\"")],
    "slurm-feature-too-new",
    "- { nodes: 8, segment: 4 }",
    Error
);
finds!(
    an_nvlink_domain_has_switch_trays,
    NVL72,
    [("\"gb[019-036]\", switch_trays: 9", "\"gb[019-036]\", switch_trays: 0")],
    "nvlink-domain-no-switch-trays",
    "- { name: rack2, nodes: \"gb[019-036]\", switch_trays: 0 }",
    Error
);

finds!(
    an_availability_target_is_a_fraction,
    &with_monitoring(),
    [("  retention: 15d\n", "  retention: 15d\n  availability_target: 99.5\n")],
    "invalid-availability-target",
    "availability_target: 99.5",
    Error
);
