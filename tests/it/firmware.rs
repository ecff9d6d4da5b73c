//! Integration tests: firmware updates through sushy-tools' `UpdateService`.
//!
//! sushy-tools implements `UpdateService.SimpleUpdate` for BIOS targets only: it
//! answers `204` with the `Location` of a task that is always `Completed`, and
//! "flashes" by adding one to the second number of the system's `BiosVersion`
//! (`2.3.1` → `2.4.1`); it never fetches the image, refuses `Manager` targets, and
//! advertises a `FirmwareInventory` it does not serve. So the whole path runs for
//! real here — image served on loopback and checked, `SimpleUpdate`, task followed,
//! version read back, plan and deploy with upgrade and refused downgrade — for the
//! BIOS; the multipart push, task failures and the other components are unit tests
//! (`bmc::redfish::update`), and the rollout's drain → flash → reset → check order is
//! tested with scripted hooks (`deploy::rollout`).

use std::path::Path;

use toolkit::bmc::Redfish;
use toolkit::bmc::redfish::update::{FirmwareImage, Method, UpdateError, sha256_hex};

use crate::redfish::{
    METAL_BLUEPRINT, PASSWORD, Server, config, emulator, free_port, metal_inventory, powered_off, shown, toolkit_metal,
    venv_program,
};

const IMAGE: &[u8] = b"toolkit test BIOS image 2.4.1\n";

/// A static HTTP server on loopback (Python's `http.server`) serving `image` as `/bios.bin`.
pub(crate) fn image_server(image: &[u8]) -> Option<Server> {
    let python = venv_program("python")?;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bios.bin"), image).expect("image");
    let port = free_port();
    let args =
        ["-m".to_owned(), "http.server".to_owned(), port.to_string(), "--bind".to_owned(), "127.0.0.1".to_owned()];
    Some(Server::start(&python, &args, port, dir))
}

async fn bios_version(client: &Redfish, system: &str) -> String {
    client.firmware(system).await.expect("reads firmware")["BIOS"].clone()
}

#[tokio::test]
async fn simple_update_flashes_the_bios_only_after_the_image_checks_out() {
    let Some(server) = emulator(None) else { return };
    let Some(images) = image_server(IMAGE) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let system = client.system().await.expect("one system");
    let uri = format!("http://127.0.0.1:{}/bios.bin", images.port);

    // A checksum that does not match: refused before anything reaches the BMC.
    let wrong = "0".repeat(64);
    let error = client
        .update_firmware(&system, "BIOS", &FirmwareImage { uri: &uri, sha256: &wrong })
        .await
        .expect_err("checksum mismatch");
    assert!(matches!(error, UpdateError::Checksum { .. }), "{error}");
    assert!(error.to_string().contains("nothing was sent to the BMC"), "{error}");
    assert_eq!(bios_version(&client, &system).await, "2.3.1");

    // The right one: SimpleUpdate, the task followed to `Completed`, the new version read back.
    let sha256 = sha256_hex(IMAGE);
    let update =
        client.update_firmware(&system, "BIOS", &FirmwareImage { uri: &uri, sha256: &sha256 }).await.expect("updates");
    assert_eq!(update.method, Method::SimpleUpdate);
    assert!(
        update.task.as_deref().is_some_and(|task| task.ends_with("/redfish/v1/TaskService/Tasks/42")),
        "{update:?}"
    );
    assert_eq!(bios_version(&client, &system).await, "2.4.1");

    // sushy refuses BMC (Manager) targets: the BMC's own message comes through.
    let error = client
        .update_firmware(&system, "BMC", &FirmwareImage { uri: &uri, sha256: &sha256 })
        .await
        .expect_err("manager target refused");
    assert!(error.to_string().contains("HTTP 400"), "{error}");
    // A component it does not report is named, with what it does report.
    let error = client
        .update_firmware(&system, "NIC.Slot.1-1", &FirmwareImage { uri: &uri, sha256: &sha256 })
        .await
        .expect_err("unknown component");
    assert!(matches!(error, UpdateError::UnknownComponent { .. }), "{error}");
    client.close().await.expect("closes");
}

fn write_inputs(dir: &Path, port: u16, bios: &str) {
    let blueprint = METAL_BLUEPRINT.replace(r#"    firmware: { BIOS: "2.4.0" }"#, bios);
    std::fs::write(dir.join("bp.yaml"), blueprint).expect("blueprint");
    std::fs::write(dir.join("inv.yaml"), metal_inventory(port)).expect("inventory");
}

fn firmware_change(plan: &serde_json::Value) -> Option<&serde_json::Value> {
    plan["changes"].as_array().expect("changes").iter().find(|change| change["kind"] == "firmware")
}

#[tokio::test]
async fn plan_and_deploy_flash_an_upgrade_and_refuse_a_downgrade() {
    let Some(server) = emulator(None) else { return };
    let Some(images) = image_server(IMAGE) else { return };
    // Off: the node is being provisioned, so the API stage flashes it (no jobs to drain).
    let (client, system) = powered_off(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let image = format!("http://127.0.0.1:{}/bios.bin", images.port);
    let wanted = |version: &str| {
        format!(
            "    firmware:\n      BIOS: {{ version: \"{version}\", image: \"{image}\", sha256: {} }}",
            sha256_hex(IMAGE)
        )
    };
    write_inputs(dir.path(), server.port, &wanted("2.4.1"));

    // Without --firmware: reported, not planned.
    let output =
        toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--output", "json"]);
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("plan JSON");
    assert!(firmware_change(&plan).is_none(), "{plan}");
    assert!(plan["warnings"][0].as_str().is_some_and(|w| w.contains("expects `2.4.1` (not flashed")), "{plan}");

    // With it: current → wanted, an upgrade.
    let args = ["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--firmware", "--output", "json"];
    let output = toolkit_metal(dir.path(), &args);
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("plan JSON");
    let change = firmware_change(&plan).expect("a firmware change");
    assert_eq!(
        (&change["id"], &change["action"], &change["before"], &change["after"], &change["reason"]),
        (
            &serde_json::json!("node01:firmware:BIOS"),
            &serde_json::json!("update"),
            &serde_json::json!("2.3.1"),
            &serde_json::json!("2.4.1"),
            &serde_json::json!("upgrade 2.3.1 → 2.4.1")
        )
    );

    let output =
        toolkit_metal(dir.path(), &["deploy", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--firmware", "--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    assert_eq!(bios_version(&client, &system).await, "2.4.1");
    let output = toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--firmware"]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));

    // The node is on now, and runs jobs (compute): a newer version waits for its
    // rollout wave instead of being flashed by the API stage.
    write_inputs(dir.path(), server.port, &wanted("2.5.1"));
    let output = toolkit_metal(dir.path(), &args);
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("plan JSON");
    let change = firmware_change(&plan).expect("a firmware change");
    assert_eq!(change["action"], "no-op", "{change}");
    assert!(
        change["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("in the node's rollout wave: drain, change, reset, check, resume")),
        "{change}"
    );

    // An older version: refused, with how to allow it; deploy changes nothing.
    write_inputs(dir.path(), server.port, &wanted("2.0.0"));
    let output = toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--firmware"]);
    let text = shown(&output);
    assert!(text.contains("refused: downgrade 2.4.1 → 2.0.0 of `BIOS`; set `allow_downgrade: true`"), "{text}");
    let output =
        toolkit_metal(dir.path(), &["deploy", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--firmware", "--yes"]);
    assert_eq!(output.status.code(), Some(1), "{}", shown(&output));
    assert!(shown(&output).contains("error: node01: firmware `BIOS`: refused: downgrade"), "{}", shown(&output));
    assert_eq!(bios_version(&client, &system).await, "2.4.1");
}
