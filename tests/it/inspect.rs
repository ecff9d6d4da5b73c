//! Integration tests: `toolkit inspect` against sushy-tools' Redfish emulator (fake
//! driver, started per test as in `redfish.rs`): what it reports, what it does not
//! (its processor inventory answers 501), mismatches against the blueprint, and a BMC
//! that does not answer.

use crate::redfish::{METAL_BLUEPRINT, PASSWORD, config, emulator, free_port, metal_dir, shown, toolkit_metal};
use crate::redfish_static::mockup;
use toolkit::bmc::Redfish;

/// The metal blueprint with `line` added to its node group.
fn wanting(line: &str) -> String {
    METAL_BLUEPRINT
        .replace("    hardware_profile: gpu-node\n", &format!("    hardware_profile: gpu-node\n    {line}\n"))
}

#[tokio::test]
async fn a_matching_node_exits_0_and_shows_its_nics_and_what_was_not_reported() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let system = client.get(&client.system().await.expect("system")).await.expect("system document");
    let dir = metal_dir(METAL_BLUEPRINT, &server);
    let output = toolkit_metal(dir.path(), &["inspect", "bp.yaml", "-i", "inv.yaml", "--output", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(document["format_version"], 1);
    let node = &document["nodes"][0];
    assert_eq!(node["node"], "node01");
    let hardware = &node["hardware"];
    assert_eq!(hardware["serial"], system["SerialNumber"]);
    // Every MAC the emulator lists, read through its EthernetInterfaces links.
    let macs: Vec<_> =
        hardware["nics"]["reported"].as_array().expect("nics").iter().map(|n| n["mac"].clone()).collect();
    assert!(!macs.is_empty(), "{hardware}");
    // The fake driver's system links no `Processors`: not reported, with the reason.
    let reason = hardware["processors"]["not_reported"]["reason"].as_str().expect("not reported");
    assert!(reason.contains("Processors"), "{reason}");
    let text = toolkit_metal(dir.path(), &["inspect", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(text.status.code(), Some(0), "{}", shown(&text));
    let stdout = String::from_utf8_lossy(&text.stdout);
    let first_mac = macs[0].as_str().expect("mac");
    assert!(stdout.contains("node01 (group node)") && stdout.contains(first_mac), "{stdout}");
}

/// The DMTF rack server served by `sushy-static`: one present CPU of 8 cores / 16
/// threads, three 32 GiB DIMMs (its recording, tests/support/mockups/SOURCE.md).
#[tokio::test]
async fn more_memory_and_cpus_than_the_bmc_reports_exit_2_naming_the_node_and_both_values() {
    let Some(server) = mockup("dmtf-rackmount1") else { return };
    let blueprint = wanting("memory_gib: 192\n    cpu: { sockets: 2, cores_per_socket: 8, threads_per_core: 2 }");
    let dir = metal_dir(&blueprint, &server);
    let output = toolkit_metal(dir.path(), &["inspect", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("node01: 96 GiB memory, blueprint 192\n"), "{stdout}");
    assert!(stdout.contains("node01: 1 CPU sockets, blueprint 2\n"), "{stdout}");
    // What matches is not listed.
    assert!(!stdout.contains("cores per socket"), "{stdout}");

    let matching = wanting("memory_gib: 96\n    cpu: { sockets: 1, cores_per_socket: 8, threads_per_core: 2 }");
    std::fs::write(dir.path().join("bp.yaml"), matching).expect("blueprint");
    let output = toolkit_metal(dir.path(), &["inspect", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
}

#[tokio::test]
async fn a_bmc_that_does_not_answer_exits_1_naming_the_node() {
    let Some(server) = emulator(None) else { return };
    let dir = metal_dir(METAL_BLUEPRINT, &server);
    drop(server);
    let inventory = std::fs::read_to_string(dir.path().join("inv.yaml")).expect("inventory");
    let port = free_port();
    let inventory = moved_to(&inventory, port);
    std::fs::write(dir.path().join("inv.yaml"), inventory).expect("inventory");
    let output = toolkit_metal(dir.path(), &["inspect", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(output.status.code(), Some(1), "{}", shown(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("error: node01: BMC `node01`"), "{stderr}");
}

/// The inventory with its BMC endpoint moved to `port`, where nothing listens.
fn moved_to(inventory: &str, port: u16) -> String {
    inventory
        .lines()
        .map(|line| match line.find("endpoint: http://127.0.0.1:") {
            Some(at) => format!("{}endpoint: http://127.0.0.1:{port}", &line[..at]),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn write_inventory_records_the_macs_and_keeps_comments() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let nics = client.discover(&client.system().await.expect("system")).await.expect("discover").nics;
    let macs: Vec<String> = nics.iter().filter_map(|nic| nic.mac.clone()).map(|mac| mac.to_ascii_lowercase()).collect();
    assert!(!macs.is_empty());
    let dir = metal_dir(METAL_BLUEPRINT, &server);
    let path = dir.path().join("inv.yaml");
    let before = format!("# site inventory, kept by hand\n{}", std::fs::read_to_string(&path).expect("inventory"));
    std::fs::write(&path, &before).expect("inventory");
    let output = toolkit_metal(dir.path(), &["inspect", "bp.yaml", "-i", "inv.yaml", "--write-inventory"]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let after = std::fs::read_to_string(&path).expect("inventory");
    assert!(after.starts_with("# site inventory, kept by hand\n"), "{after}");
    assert!(after.contains(&format!("boot_macs: [{}]", macs.join(", "))), "{after}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("inventory: node01: boot_macs ["), "{}", shown(&output));
    // The file still loads, and a second run changes nothing.
    let again = toolkit_metal(dir.path(), &["inspect", "bp.yaml", "-i", "inv.yaml", "--write-inventory"]);
    assert_eq!(again.status.code(), Some(0), "{}", shown(&again));
    assert_eq!(std::fs::read_to_string(&path).expect("inventory"), after);
}
