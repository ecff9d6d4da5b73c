//! BIOS settings read from recorded vendor payloads (tests/support/mockups/SOURCE.md).

use serde_json::json;

use super::*;

fn mockup(path: &str) -> Value {
    let file = format!("{}/tests/support/mockups/{path}/index.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&file).expect("mockup file")).expect("mockup JSON")
}

/// The BIOS of `system` in `mockup`, with its settings object.
fn read(mockup_name: &str, system: &str) -> BiosSettings {
    let base = format!("{mockup_name}/Systems/{system}/Bios");
    let uri = format!("/redfish/v1/Systems/{system}/Bios");
    BiosSettings::read(&uri, &mockup(&base), Some(&mockup(&format!("{base}/Settings"))))
}

fn dmtf() -> BiosSettings {
    read("dmtf-rackmount1", "437XR1138R2")
}

fn dell() -> BiosSettings {
    read("dell-r650", "System.Embedded.1")
}

fn wanted(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
    pairs.iter().map(|(name, value)| ((*name).to_owned(), value.clone())).collect()
}

#[test]
fn the_dmtf_mockup_lists_every_attribute_and_only_the_differing_ones_are_pending() {
    let settings = dmtf();
    assert_eq!(settings.settings_uri, "/redfish/v1/Systems/437XR1138R2/Bios/Settings");
    assert_eq!(
        settings.pending,
        wanted(&[
            ("AdminPhone", json!("(404) 555-1212")),
            ("EmbeddedSata", json!("Ahci")),
            ("NicBoot2", json!("NetworkBoot")),
            ("ProcTurboMode", json!("Disabled")),
        ])
    );
    assert!(settings.apply_times.is_empty(), "the mockup offers no apply times");
}

#[test]
fn the_dell_settings_object_lists_only_queued_attributes() {
    let settings = dell();
    assert_eq!(settings.settings_uri, "/redfish/v1/Systems/System.Embedded.1/Bios/Settings");
    assert_eq!(settings.current.len(), 344);
    assert_eq!(
        settings.pending,
        wanted(&[("LogicalProc", json!("Disabled")), ("SriovGlobalEnable", json!("Enabled"))])
    );
    assert_eq!(settings.apply_times, ["OnReset", "AtMaintenanceWindowStart", "InMaintenanceWindowOnReset"]);
}

#[test]
fn a_queued_value_the_blueprint_wants_is_kept_and_the_others_are_set_back() {
    let settings = dell();
    let blueprint = wanted(&[("SriovGlobalEnable", json!("Enabled")), ("ProcTurboMode", json!("Enabled"))]);
    let unwanted = settings.unwanted(&blueprint);
    assert_eq!(
        unwanted,
        [PendingSetting {
            name: "LogicalProc".into(),
            pending: json!("Disabled"),
            current: Some(json!("Enabled")),
            wanted: None,
        }]
    );
    assert_eq!(unwanted[0].to_string(), "`LogicalProc` = `Disabled` (in effect: `Enabled`)");
    // SriovGlobalEnable is already queued and ProcTurboMode already in effect: only
    // the unwanted value is written, back to the value in effect.
    assert_eq!(settings.write_for(&blueprint), wanted(&[("LogicalProc", json!("Enabled"))]));
}

#[test]
fn a_queued_value_other_than_the_wanted_one_is_overwritten_with_the_wanted_one() {
    let settings = dmtf();
    let blueprint = wanted(&[("ProcTurboMode", json!("Enabled")), ("EmbeddedSata", json!("Ahci"))]);
    let unwanted: Vec<String> = settings.unwanted(&blueprint).into_iter().map(|setting| setting.name).collect();
    assert_eq!(unwanted, ["AdminPhone", "NicBoot2", "ProcTurboMode"]);
    assert_eq!(
        settings.write_for(&blueprint),
        wanted(&[("AdminPhone", json!("")), ("NicBoot2", json!("Disabled")), ("ProcTurboMode", json!("Enabled")),])
    );
}

#[test]
fn nothing_queued_and_nothing_to_change_writes_nothing() {
    let bios = mockup("dell-r650/Systems/System.Embedded.1/Bios");
    let settings = BiosSettings::read("/redfish/v1/Systems/System.Embedded.1/Bios", &bios, None);
    assert!(settings.pending.is_empty());
    let blueprint = wanted(&[("LogicalProc", json!("Enabled")), ("ProcCStates", json!("Disabled"))]);
    assert_eq!(settings.current.get("ProcCStates"), Some(&json!("Disabled")));
    assert!(settings.write_for(&blueprint).is_empty());
}

#[test]
fn writes_ask_for_on_reset_only_where_the_bmc_offers_it() {
    let attributes = wanted(&[("LogicalProc", json!("Enabled"))]);
    assert_eq!(
        settings_body(&attributes, &dell().apply_times),
        json!({ "Attributes": { "LogicalProc": "Enabled" }, "@Redfish.SettingsApplyTime": { "ApplyTime": "OnReset" } })
    );
    assert_eq!(settings_body(&attributes, &dmtf().apply_times), json!({ "Attributes": { "LogicalProc": "Enabled" } }));
}

#[test]
fn a_bios_without_a_settings_object_is_written_in_place() {
    let bios = json!({ "Attributes": { "ProcTurboMode": "Enabled" } });
    let settings = BiosSettings::read("/redfish/v1/Systems/1/Bios", &bios, None);
    assert_eq!(settings.settings_uri, "/redfish/v1/Systems/1/Bios");
}
