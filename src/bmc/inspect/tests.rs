//! Inspection read from recorded vendor payloads (tests/support/mockups/SOURCE.md):
//! the reader serves `<mockup>/<path>/index.json` and answers 404 for anything else,
//! as `sushy-static` does for those trees.

use super::*;

struct Mockup(&'static str);

impl Reader for Mockup {
    async fn read(&self, path: &str) -> Result<Value, BmcError> {
        let rel = path.trim_start_matches("/redfish/v1").trim_matches('/');
        let file = format!("{}/tests/support/mockups/{}/{rel}/index.json", env!("CARGO_MANIFEST_DIR"), self.0);
        match std::fs::read_to_string(&file) {
            Ok(body) => Ok(serde_json::from_str(&body).expect("mockup JSON")),
            Err(_) => Err(BmcError::NotFound { host: "node01".into(), url: path.to_owned() }),
        }
    }
}

async fn dmtf() -> Hardware {
    inspect_with(&Mockup("dmtf-rackmount1"), "/redfish/v1/Systems/437XR1138R2").await.expect("inspect")
}

#[tokio::test]
async fn the_dmtf_system_reports_identity_and_summaries() {
    let hw = dmtf().await;
    assert_eq!(hw.manufacturer.as_deref(), Some("Contoso"));
    assert_eq!(hw.model.as_deref(), Some("3500"));
    assert_eq!(hw.serial.as_deref(), Some("437XR1138R2"));
    assert_eq!(hw.memory_gib, Some(96.0));
    let summary = hw.processor_summary.expect("summary");
    assert_eq!((summary.count, summary.cores, summary.threads), (Some(2), Some(8), Some(16)));
}

#[tokio::test]
async fn absent_sockets_and_dimms_are_left_out_and_an_fpga_keeps_its_type() {
    let hw = dmtf().await;
    let processors = hw.processors.reported().expect("processors");
    let kinds: Vec<_> = processors.iter().map(|p| (p.id.as_str(), p.kind.as_deref())).collect();
    // CPU2 is `Absent` in the recording.
    assert_eq!(kinds, [("CPU1", Some("CPU")), ("FPGA1", Some("FPGA"))]);
    assert_eq!((processors[0].cores, processors[0].threads), (Some(8), Some(16)));
    assert_eq!(processors[0].socket.as_deref(), Some("CPU 1"));
    // DIMM1-3 of 32 GiB; DIMM4 is `Absent`.
    assert_eq!(hw.memory_modules_mib, Part::Reported(3 * 32768));
}

#[tokio::test]
async fn without_storage_the_simple_storage_devices_are_the_drives() {
    let hw = dmtf().await;
    let drives = hw.drives.reported().expect("drives");
    let sizes: Vec<_> = drives.iter().map(|d| (d.id.as_str(), d.capacity_bytes)).collect();
    assert_eq!(sizes, [("SATA Bay 1", Some(8_000_000_000_000)), ("SATA Bay 2", Some(4_000_000_000_000))]);
    assert_eq!(drives[0].model.as_deref(), Some("3000GT8"));
}

#[tokio::test]
async fn nics_carry_their_macs_and_link_state() {
    let hw = dmtf().await;
    let nics = hw.nics.reported().expect("nics");
    let first = nics.iter().find(|n| n.id == "12446A3B0411").expect("nic");
    assert_eq!(first.mac.as_deref(), Some("12:44:6A:3B:04:11"));
    assert_eq!(nics.len(), 4);
}

#[tokio::test]
async fn a_chassis_the_bmc_does_not_serve_leaves_pcie_not_reported_with_the_url() {
    let hw = dmtf().await;
    // The system links chassis `1U`, not kept in the mockup: a 404 as on a BMC without it.
    let reason = hw.pcie.reason().expect("not reported");
    assert!(reason.contains("/redfish/v1/Chassis/1U") && reason.contains("404"), "{reason}");
}

#[tokio::test]
async fn the_dell_recording_without_processors_or_storage_says_why_for_each() {
    let hw = inspect_with(&Mockup("dell-r650"), "/redfish/v1/Systems/System.Embedded.1").await.expect("inspect");
    assert_eq!(hw.model.as_deref(), Some("PowerEdge R650"));
    assert!(hw.processors.reason().expect("not kept").contains("404"));
    let drives = hw.drives.reason().expect("not kept");
    assert!(drives.contains("Storage") && drives.contains("SimpleStorage"), "{drives}");
    assert_eq!(hw.nics.reported().map(Vec::len), Some(4));
}

#[test]
fn a_transport_failure_is_not_a_missing_part() {
    let outcome: Result<Result<u32, String>, BmcError> =
        Err(BmcError::Unsupported { host: "node01".into(), what: "x".into() });
    assert!(part(outcome).is_err());
    let missing: Result<Result<u32, String>, BmcError> = Ok(Err("no link".into()));
    assert_eq!(part(missing).expect("part"), Part::NotReported { reason: "no link".into() });
}

fn edited(text: &str, host: &str) -> Result<Option<String>, InventoryEditError> {
    let source = crate::source::SourceFile::new("inv.yaml", text.to_owned());
    record_boot_macs(&source, host, &["52:54:00:aa:00:01".to_owned(), "52:54:00:aa:00:02".to_owned()])
}

#[test]
fn macs_go_into_a_block_host_and_comments_stay() {
    let text = "version: 1\nhosts:\n  # the first node\n  node01:\n    address: 10.0.0.1 # mgmt\n  node02:\n    address: 10.0.0.2\n";
    let out = edited(text, "node01").expect("edit").expect("changed");
    assert_eq!(
        out,
        "version: 1\nhosts:\n  # the first node\n  node01:\n    boot_macs: [52:54:00:aa:00:01, 52:54:00:aa:00:02]\n    address: 10.0.0.1 # mgmt\n  node02:\n    address: 10.0.0.2\n"
    );
    let parsed: crate::inventory::schema::Host = serde_norway::from_value(
        serde_norway::from_str::<serde_norway::Value>(&out).expect("yaml")["hosts"]["node01"].clone(),
    )
    .expect("host");
    assert_eq!(parsed.boot_macs.len(), 2);
    // A second run changes nothing.
    assert_eq!(edited(&out, "node01").expect("edit"), None);
}

#[test]
fn macs_go_into_a_flow_host_and_replace_an_old_list() {
    let text = "hosts:\n  node01: { address: 127.0.0.1 } # lab\n";
    let out = edited(text, "node01").expect("edit").expect("changed");
    assert_eq!(
        out,
        "hosts:\n  node01: { address: 127.0.0.1, boot_macs: [52:54:00:aa:00:01, 52:54:00:aa:00:02] } # lab\n"
    );
    let old = "hosts:\n  node01:\n    boot_macs: [52:54:00:aa:00:09] # old\n";
    let out = edited(old, "node01").expect("edit").expect("changed");
    assert_eq!(out, "hosts:\n  node01:\n    boot_macs: [52:54:00:aa:00:01, 52:54:00:aa:00:02] # old\n");
    assert!(matches!(edited(text, "node09"), Err(InventoryEditError::NoHost { .. })));
}

#[tokio::test]
async fn boot_macs_are_lower_case_and_unique() {
    let hw = dmtf().await;
    let macs = boot_macs(&hw);
    assert!(macs.contains(&"12:44:6a:3b:04:11".to_owned()), "{macs:?}");
    assert!(macs.iter().all(|mac| *mac == mac.to_ascii_lowercase()));
    let mut unique = macs.clone();
    unique.dedup();
    assert_eq!(unique.len(), macs.len());
}
