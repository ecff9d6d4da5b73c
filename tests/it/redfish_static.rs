//! Integration tests: the Redfish client against recorded vendor services served
//! read-only by `sushy-static` (part of sushy-tools): the DMTF public rack server
//! (`437XR1138R2`) and a Dell PowerEdge R650 (`System.Embedded.1`), see
//! `tests/support/mockups/SOURCE.md`.
//!
//! What they show that sushy's dynamic emulator cannot: ids other than `1` or a UUID,
//! links to follow, vendor version strings, BIOS values queued in a settings object
//! (the emulator applies BIOS writes at once). `sushy-static` answers every PATCH and
//! POST with 204 and changes nothing, so these tests check reads, discovery, pending
//! detection, the plan, and that toolkit refuses to reset a node whose unwanted queued
//! values did not go away. Writes are tested against the emulator (`redfish.rs`).

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toolkit::bmc::{BmcConfig, BmcError, Credentials, PowerState, Redfish, ResetType, Sensitive, power_cycle_type};

use super::redfish::{METAL_BLUEPRINT, Server, free_port, metal_dir, shown, toolkit_metal, venv_program};

/// Serves `tests/support/mockups/<name>`; `None` when sushy-tools is not installed.
pub(crate) fn mockup(name: &str) -> Option<Server> {
    let program = venv_program("sushy-static")?;
    let files = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mockups").join(name);
    let port = free_port();
    let args = ["-m".to_owned(), files.display().to_string(), "-i".to_owned(), "127.0.0.1".to_owned()];
    let args = [args.as_slice(), &["-p".to_owned(), port.to_string()]].concat();
    Some(Server::start(&program, &args, port, tempfile::tempdir().expect("tempdir")))
}

async fn connect(server: &Server) -> Redfish {
    let credentials = Credentials { username: "root".to_owned(), password: Sensitive::new("calvin") };
    let mut config =
        BmcConfig::new("node01", &format!("http://127.0.0.1:{}", server.port), credentials).expect("endpoint");
    config.poll_interval = Duration::from_millis(200);
    Redfish::connect(config).await.expect("connects")
}

#[tokio::test]
async fn the_dmtf_rack_server_is_discovered_through_its_links() {
    let Some(server) = mockup("dmtf-rackmount1") else { return };
    let client = connect(&server).await;
    // The session service answers without a token (a static server): basic auth.
    assert!(!client.has_session());
    let system = client.system().await.expect("one system");
    assert_eq!(system, "/redfish/v1/Systems/437XR1138R2");
    let info = client.discover(&system).await.expect("discovers");
    assert_eq!(info.id, "437XR1138R2");
    assert_eq!(info.bios_version.as_deref(), Some("P79 v1.45 (12/06/2017)"));
    assert_eq!(info.power_state, Some(PowerState::On));
    let nics: Vec<&str> = info.nics.iter().map(|nic| nic.id.as_str()).collect();
    assert_eq!(nics, ["12446A3B0411", "12446A3B8890", "VLAN1", "ToManager"], "members in the order listed");
    // The inventory's own `BIOS` item (`P79 v1.45`) is read after the system's `BiosVersion`.
    assert_eq!(info.firmware["BIOS"], "P79 v1.45");
    assert_eq!(info.firmware["BMC"], "1.45.455b66-rev4", "the manager's, then the inventory's `BMC` item");
    // It allows no `PowerCycle`: a hung node gets the strongest reset it lists.
    assert_eq!(power_cycle_type(&info.reset_types, info.power_state), Some(ResetType::ForceRestart));

    let bios = client.bios_settings(&system).await.expect("reads the BIOS");
    assert_eq!(bios.settings_uri, "/redfish/v1/Systems/437XR1138R2/Bios/Settings");
    let pending: Vec<&str> = bios.pending.keys().map(String::as_str).collect();
    assert_eq!(pending, ["AdminPhone", "EmbeddedSata", "NicBoot2", "ProcTurboMode"]);
}

#[tokio::test]
async fn the_dell_server_shows_its_ids_versions_and_queued_bios_values() {
    let Some(server) = mockup("dell-r650") else { return };
    let client = connect(&server).await;
    let system = client.system().await.expect("one system");
    assert_eq!(system, "/redfish/v1/Systems/System.Embedded.1");
    let info = client.discover(&system).await.expect("discovers");
    let nics: Vec<&str> = info.nics.iter().map(|nic| nic.id.as_str()).collect();
    assert_eq!(nics, ["NIC.Embedded.2-1-1", "NIC.Embedded.1-1-1", "NIC.Integrated.1-2-1", "NIC.Integrated.1-1-1"]);
    assert_eq!(power_cycle_type(&info.reset_types, info.power_state), Some(ResetType::PowerCycle));
    // The firmware inventory is advertised but absent: the system's and manager's versions.
    assert_eq!(
        info.firmware,
        [("BIOS".to_owned(), "1.2.4".to_owned()), ("BMC".to_owned(), "5.10.00.00".to_owned())].into()
    );

    let bios = client.bios_settings(&system).await.expect("reads the BIOS");
    assert_eq!(
        bios.pending,
        [("LogicalProc".to_owned(), json!("Disabled")), ("SriovGlobalEnable".to_owned(), json!("Enabled"))].into()
    );
    assert!(bios.apply_times.iter().any(|time| time == "OnReset"));

    // The static server acknowledges the write and changes nothing: the unwanted value
    // is still queued, and toolkit says so instead of going on to a reset.
    let wanted = [("SriovGlobalEnable".to_owned(), json!("Enabled"))].into();
    let error = client.settle_bios(&system, &wanted).await.expect_err("still queued");
    assert!(matches!(error, BmcError::UnwantedPending { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("`LogicalProc` = `Disabled` (in effect: `Enabled`)"), "{text}");
    assert!(!text.contains("SriovGlobalEnable"), "a wanted queued value is not refused: {text}");
    assert!(text.contains("does not reset the host"), "{text}");
}

/// `toolkit plan` and `deploy --stage api` against the Dell server with a profile that
/// wants `SriovGlobalEnable` (queued) and `ProcTurboMode` (in effect).
#[tokio::test]
async fn the_plan_shows_pending_values_and_deploy_refuses_to_reset_over_unwanted_ones() {
    let Some(server) = mockup("dell-r650") else { return };
    let blueprint = METAL_BLUEPRINT
        .replace("    pxe_on_provision: true\n", "")
        .replace(
            "bios: { ProcTurboMode: Disabled, NumCores: 10 }",
            "bios: { ProcTurboMode: Enabled, SriovGlobalEnable: Enabled }",
        )
        .replace(r#"firmware: { BIOS: "2.4.0" }"#, r#"firmware: { BIOS: "1.2.4", BMC: "5.10.00.00" }"#);
    let dir = metal_dir(&blueprint, &server);

    let output =
        toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--output", "json"]);
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("plan JSON");
    let changes: Vec<[&str; 4]> = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| {
            let text = |key: &str| change[key].as_str().unwrap_or("-");
            [text("id"), text("action"), text("reason"), text("disruption")]
        })
        .collect();
    assert_eq!(
        changes,
        [
            ["node01:bios:ProcTurboMode", "no-op", "as desired", "-"],
            // node01 runs jobs and is on: the reset that applies the queued value is
            // its rollout wave's (drained first), not the API stage's.
            [
                "node01:bios:SriovGlobalEnable",
                "no-op",
                "Disabled → Enabled: pending on BMC, applies at the next reset; in the node's rollout wave: drain, change, reset, check, resume",
                "-"
            ],
            ["node01:power:system", "no-op", "as desired", "-"],
            [
                "node01:bios:LogicalProc",
                "update",
                "pending on BMC: LogicalProc = Disabled (unwanted), set back to Enabled before any reset",
                "-"
            ],
        ],
        "{plan:#}"
    );
    assert!(plan.get("warnings").is_none(), "vendor versions match as written: {plan:#}");

    let output = toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api"]);
    let text = shown(&output);
    assert!(
        text.contains("~ bios LogicalProc on node01  (pending on BMC: LogicalProc = Disabled (unwanted)"),
        "{text}"
    );
    assert!(text.contains("Enabled (pending: Disabled) → Enabled"), "{text}");

    // The static server keeps the unwanted value queued whatever is written: the
    // API stage stops before the restart, naming it.
    let output = toolkit_metal(dir.path(), &["deploy", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--yes"]);
    let text = shown(&output);
    assert_ne!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("`LogicalProc` = `Disabled` (in effect: `Enabled`)"), "{text}");
    assert!(text.contains("toolkit does not reset the host while they are queued"), "{text}");
    let log = server.log();
    assert!(!log.contains("ComputerSystem.Reset"), "no reset was sent:\n{log}");
    assert!(log.contains("PATCH"), "the settings were written:\n{log}");
}

#[tokio::test]
async fn the_dmtf_servers_virtual_cd_is_found_through_the_system_and_takes_an_iso() {
    let Some(server) = mockup("dmtf-rackmount1") else { return };
    let client = connect(&server).await;
    let system = client.system().await.expect("one system");
    let drive = client.virtual_cd(&system).await.expect("a virtual CD");
    // The collection lists the floppy first: the CD is chosen by its media types.
    assert_eq!(drive.path, "/redfish/v1/Systems/437XR1138R2/VirtualMedia/CD1");
    assert!(drive.inserted);
    // Media in it: ejected, then the ISO inserted (sushy-static accepts both actions).
    client.insert_media(&drive, "http://10.0.0.1:8069/media/52-54-00-77-00-11.iso").await.expect("inserts");
}

/// The faulty-host report's BMC part against the DMTF server: identity and firmware
/// through the inspection, and both event logs (the system's SEL, the BMC's own) reached
/// by their links, filtered to the window; the SEL's `$skiptoken` page, which the static
/// server does not have, named as unread. No password reaches the files.
#[tokio::test]
async fn the_rma_report_of_the_dmtf_server_holds_its_identity_firmware_and_event_log() {
    use toolkit::report::rma::{Bundle, Evidence};
    let Some(server) = mockup("dmtf-rackmount1") else { return };
    let password = "calvin-secret-7";
    let credentials = Credentials { username: "root".to_owned(), password: Sensitive::new(password) };
    let config = BmcConfig::new("node03", &format!("http://127.0.0.1:{}", server.port), credentials).expect("endpoint");
    let at = |text: &str| text.parse::<jiff::Timestamp>().expect("time");
    // The SEL has entries at 14:44 and 14:45, the BMC's log one at 14:44: a window that
    // ends before 14:45 keeps two.
    let (from, to) = (at("2012-03-07T14:00:00Z"), at("2012-03-07T14:44:30Z"));
    let (hardware, firmware, events) = toolkit::deploy::rma::from_bmc(Some(config), from, to).await;
    let Evidence::Read(hardware) = hardware else { panic!("hardware: {hardware:?}") };
    assert_eq!((hardware.serial.as_deref(), hardware.model.as_deref()), (Some("437XR1138R2"), Some("3500")));
    let Evidence::Read(firmware) = firmware else { panic!("firmware: {firmware:?}") };
    assert_eq!(firmware["BMC"], "1.45.455b66-rev4");
    let Evidence::Read(events) = events else { panic!("events: {events:?}") };
    assert_eq!(
        events.log.services,
        ["/redfish/v1/Systems/437XR1138R2/LogServices/Log1", "/redfish/v1/Managers/BMC/LogServices/Log"]
    );
    let messages: Vec<(&str, &str)> =
        events.log.entries.iter().map(|entry| (entry.created.as_str(), entry.message.as_str())).collect();
    assert_eq!(
        messages,
        [("2012-03-07T14:44:00Z", "System May be Melting"), ("2012-03-07T14:44:00Z", "Temperature threshold exceeded")]
    );
    assert_eq!(events.log.left_out, 1, "the SEL's 14:45 entry");
    // The second page, which sushy-static does not have, is named; the first page's
    // entries are kept.
    let unread: Vec<&str> = events.log.unread.iter().map(|(service, _)| service.as_str()).collect();
    assert_eq!(unread, ["/redfish/v1/Systems/437XR1138R2/LogServices/Log1"]);
    assert!(events.log.unread[0].1.contains("$skiptoken=2` not found (HTTP 404)"), "{:?}", events.log.unread);

    let bundle = Bundle {
        cluster: "lab".to_owned(),
        node: "node03".to_owned(),
        generated: "2026-12-05T22:30:00Z".to_owned(),
        reason: Evidence::Read("toolkit:rma gpu-health: GPU 2 fell off the bus".to_owned()),
        hardware: Evidence::Read(hardware),
        firmware: Evidence::Read(firmware),
        checks: Evidence::Missing("not read in this test".to_owned()),
        events: Evidence::Read(events),
        history: Evidence::Missing("not read in this test".to_owned()),
        ladder: Evidence::Missing("not read in this test".to_owned()),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let [json, markdown] = toolkit::deploy::rma::write(&bundle, dir.path()).expect("writes");
    let markdown = std::fs::read_to_string(markdown).expect("markdown");
    assert!(markdown.contains("| Serial number | 437XR1138R2 |"), "{markdown}");
    assert!(markdown.contains("| Failing check | gpu-health |"), "{markdown}");
    assert!(
        markdown.contains("- `/redfish/v1/Systems/437XR1138R2/LogServices/Log1` could not be read: "),
        "{markdown}"
    );
    assert!(markdown.contains("(HTTP 404)\n\n## Health history"), "the list ends before the next section: {markdown}");
    assert!(markdown.contains("| 2012-03-07T14:44:00Z | Critical | SEL | Temperature | Upper Critical - going high | Temperature threshold exceeded | 0x592A28 |"), "{markdown}");
    let json = std::fs::read_to_string(json).expect("json");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(parsed["hardware"]["read"]["serial"], "437XR1138R2");
    for text in [&json, &markdown] {
        assert!(!text.contains(password), "the BMC password reached the report");
    }
}
