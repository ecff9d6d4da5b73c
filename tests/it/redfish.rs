//! Integration tests: the Redfish client against sushy-tools' Redfish emulator
//! (OpenStack's `sushy-emulator`, fake driver), started per test on a free port.
//!
//! The emulator comes from `tests/support/requirements-http.txt`, installed into
//! `.toolkit/venv` (or the venv named by `TOOLKIT_HTTP_VENV`). It runs through
//! `tests/support/sushy_emulator.py`, which gives the fake driver a BIOS store; every
//! HTTP route and document is sushy's. Its power changes land 1–11 s after the
//! request, like a real BMC's, so the tests poll for them.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolkit::bmc::resources::observe_bmc;
use toolkit::bmc::{
    BmcConfig, BmcError, BootTarget, Credentials, PowerState, Redfish, ResetType, Sensitive, bios_diff, firmware_check,
};
use toolkit::plan::Action;
use toolkit::plan::api::diff;
use toolkit::resource::api::{ApiDesired, BootEnabled};

/// A server process the test started; killed when dropped, whatever the test did.
pub(crate) struct Server {
    child: Child,
    /// Its port on 127.0.0.1.
    pub(crate) port: u16,
    /// Scratch directory (config, logs, state), removed after the process.
    pub(crate) dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `program args` with its output in `<dir>/server.log` and waits until the
    /// port accepts connections.
    pub(crate) fn start(program: &Path, args: &[String], port: u16, dir: tempfile::TempDir) -> Self {
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
        let child = Command::new(program)
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start `{}`: {error}", program.display()));
        let mut server = Self { child, port, dir };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("`{}` exited with {status} before listening:\n{}", program.display(), server.log());
            }
            assert!(
                started.elapsed() < Duration::from_mins(1),
                "`{}` not listening on {port} after 60 s:\n{}",
                program.display(),
                server.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// What the server printed.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

/// A port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("binds").local_addr().expect("address").port()
}

/// The test venv's directory.
pub(crate) fn venv() -> PathBuf {
    std::env::var_os("TOOLKIT_HTTP_VENV")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".toolkit/venv"), PathBuf::from)
}

/// `program` from the test venv; when it is not installed, a failure naming it, or
/// `None` where the developer skips missing tools ([`crate::support::cannot_run`]).
pub(crate) fn venv_program(program: &str) -> Option<PathBuf> {
    let path = venv().join("bin").join(program);
    if path.is_file() {
        return Some(path);
    }
    let hint = format!(
        "`{}` is missing: python3 -m venv .toolkit/venv && .toolkit/venv/bin/pip install -r tests/support/requirements-http.txt",
        path.display()
    );
    crate::support::cannot_run(&hint);
    None
}

/// A program from PATH, with the same skip rule.
pub(crate) fn system_program(program: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        let hint = format!("`{program}` is not on PATH: apt-get install {package}");
        crate::support::cannot_run(&hint);
    }
    found
}

pub(crate) const USER: &str = "operator";
pub(crate) const PASSWORD: &str = "Pa55-Sushy-S3cret";
const SYSTEM_UUID: &str = "6c1e2a8e-0f7b-4b9e-9a57-3f1d2c4b5a60";
const MACS: [&str; 2] = ["52:54:00:aa:00:01", "52:54:00:aa:00:02"];

/// TLS files for the emulator, when a test wants HTTPS.
pub(crate) struct Tls {
    ca: PathBuf,
    certificate: PathBuf,
    key: PathBuf,
}

/// Starts the emulator with one system (`node01`, On, two NICs, a BIOS) behind basic
/// auth; `None` when the emulator is not installed.
pub(crate) fn emulator(tls: Option<&Tls>) -> Option<Server> {
    let python = venv_program("python")?;
    venv_program("sushy-emulator")?;
    let dir = tempfile::tempdir().expect("tempdir");
    let hash = Command::new(&python)
        .args([
            "-c",
            "import bcrypt,sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(rounds=4)).decode())",
        ])
        .arg(PASSWORD)
        .output()
        .expect("bcrypt runs");
    assert!(hash.status.success(), "{}", String::from_utf8_lossy(&hash.stderr));
    let htpasswd = dir.path().join("htpasswd");
    std::fs::write(&htpasswd, format!("{USER}:{}", String::from_utf8_lossy(&hash.stdout).trim())).expect("htpasswd");
    // State in the test's own directory: the fake driver persists systems by UUID.
    let config = format!(
        r"SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_AUTH_FILE = {htpasswd:?}
SUSHY_EMULATOR_STATE_DIR = {state:?}
SUSHY_EMULATOR_FAKE_SYSTEMS = [{{
    'uuid': '{SYSTEM_UUID}',
    'name': 'node01',
    'power_state': 'On',
    'nics': [{{'mac': '{mac0}', 'ip': '10.0.0.11'}}, {{'mac': '{mac1}', 'ip': '10.1.0.11'}}],
    'bios': {{'ProcTurboMode': 'Enabled', 'NumCores': 10, 'BootMode': 'Uefi', 'SriovGlobalEnable': 'Disabled'}},
    'versions': {{'BiosVersion': '2.3.1'}},
}}]
",
        htpasswd = htpasswd.display().to_string(),
        state = dir.path().join("state").display().to_string(),
        mac0 = MACS[0],
        mac1 = MACS[1],
    );
    std::fs::write(dir.path().join("emulator.conf.py"), config).expect("config");
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/sushy_emulator.py");
    let mut args = vec![
        script.display().to_string(),
        "--fake".to_owned(),
        "--config".to_owned(),
        dir.path().join("emulator.conf.py").display().to_string(),
        "-i".to_owned(),
        "127.0.0.1".to_owned(),
        "-p".to_owned(),
        port.to_string(),
    ];
    if let Some(tls) = tls {
        args.extend([
            "--ssl-certificate".to_owned(),
            tls.certificate.display().to_string(),
            "--ssl-key".to_owned(),
            tls.key.display().to_string(),
        ]);
    }
    Some(Server::start(&python, &args, port, dir))
}

pub(crate) fn config(server: &Server, password: &str) -> BmcConfig {
    let credentials = Credentials { username: USER.to_owned(), password: Sensitive::new(password) };
    let mut config =
        BmcConfig::new("node01", &format!("http://127.0.0.1:{}", server.port), credentials).expect("endpoint");
    config.poll_interval = Duration::from_millis(500);
    config
}

/// Every message in an error's source chain, and its Debug form.
fn all_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{error:?}");
    let mut source = Some(error);
    while let Some(current) = source {
        text.push('\n');
        text.push_str(&current.to_string());
        source = current.source();
    }
    text
}

#[tokio::test]
async fn discovers_the_system_nics_bios_version_and_firmware() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    assert!(!client.has_session(), "sushy has no session service: basic auth");
    let system = client.system().await.expect("one system");
    assert_eq!(system, format!("/redfish/v1/Systems/{SYSTEM_UUID}"));
    let info = client.discover(&system).await.expect("discovers");
    assert_eq!(info.id, SYSTEM_UUID);
    assert_eq!(info.manufacturer.as_deref(), Some("Sushy Emulator"));
    // The emulator's system document has no Model or SerialNumber: reported as absent.
    assert_eq!((info.model.as_deref(), info.serial_number.as_deref()), (None, None));
    assert_eq!(info.bios_version.as_deref(), Some("2.3.1"));
    assert_eq!(info.power_state, Some(PowerState::On));
    let macs: Vec<&str> = info.nics.iter().filter_map(|nic| nic.mac.as_deref()).collect();
    assert_eq!(macs, MACS);
    assert!(info.reset_types.iter().any(|reset| reset == "ForceOff"), "{:?}", info.reset_types);
    assert!(info.has_bios);
    // BIOS from the system, BMC from its manager; the advertised firmware inventory
    // answers 404 on this emulator and adds nothing.
    let firmware: Vec<(&str, &str)> = info.firmware.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(firmware, [("BIOS", "2.3.1"), ("BMC", "1.00")]);
    let expected: BTreeMap<String, String> =
        [("BIOS".to_owned(), "2.3.1".to_owned()), ("BMC".to_owned(), "2.00".to_owned())].into();
    let mismatches = firmware_check(&expected, &info.firmware);
    assert_eq!(mismatches.len(), 1);
    assert_eq!((mismatches[0].component.as_str(), mismatches[0].actual.as_deref()), ("BMC", Some("1.00")));
    client.close().await.expect("closes");
}

#[tokio::test]
async fn power_off_then_on_is_observed() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let system = client.system().await.expect("one system");
    let desired = [ApiDesired::Power { host: "node01".into(), state: PowerState::Off }];
    let before = diff(&desired, &observe_bmc(&client, &desired).await.expect("observes"));
    assert_eq!((before[0].action, before[0].before().map(toolkit::text::Text::as_str)), (Action::Update, Some("On")));

    client.reset(&system, ResetType::ForceOff).await.expect("powers off");
    client.wait_for_power(&system, PowerState::Off, Duration::from_secs(40)).await.expect("observed off");
    let after = diff(&desired, &observe_bmc(&client, &desired).await.expect("observes"));
    assert_eq!(after[0].action, Action::NoOp);

    client.reset(&system, ResetType::On).await.expect("powers on");
    client.wait_for_power(&system, PowerState::On, Duration::from_secs(40)).await.expect("observed on");
    assert_eq!(client.power_state(&system).await.expect("reads"), PowerState::On);
}

#[tokio::test]
async fn one_time_pxe_boot_is_observed() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let system = client.system().await.expect("one system");
    assert_eq!(client.boot_override(&system).await.expect("reads").target.as_deref(), Some("Hdd"));
    let boot = client.boot_once(&system, BootTarget::Pxe).await.expect("sets");
    assert_eq!(boot.target.as_deref(), Some("Pxe"));
    // sushy's fake driver keeps every override (it reports `Continuous` whatever was
    // asked), so the plan still shows the `Once` part as a change: observed, not assumed.
    assert_eq!(boot.enabled.as_deref(), Some("Continuous"));
    let desired =
        [ApiDesired::BootOverride { host: "node01".into(), target: BootTarget::Pxe, enabled: BootEnabled::Once }];
    let changes = diff(&desired, &observe_bmc(&client, &desired).await.expect("observes"));
    assert_eq!(changes[0].before().map(toolkit::text::Text::as_str), Some("Pxe/Continuous"));
    assert_eq!(changes[0].after.as_deref(), Some("Pxe/Once"));
}

#[tokio::test]
async fn bios_attributes_are_diffed_set_and_converge() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let system = client.system().await.expect("one system");
    let actual = client.bios(&system).await.expect("reads the BIOS");
    assert_eq!(actual.get("ProcTurboMode"), Some(&json!("Enabled")));
    let desired: BTreeMap<String, serde_json::Value> = [
        ("ProcTurboMode".to_owned(), json!("Disabled")),
        ("SriovGlobalEnable".to_owned(), json!("Enabled")),
        ("NumCores".to_owned(), json!("10")),
    ]
    .into();
    let changes = bios_diff(&desired, &actual);
    let names: Vec<&str> = changes.iter().map(|change| change.name.as_str()).collect();
    assert_eq!(names, ["ProcTurboMode", "SriovGlobalEnable"], "`10` and 10 are the same value");

    let resources: Vec<ApiDesired> = desired
        .iter()
        .map(|(name, value)| ApiDesired::BiosAttribute {
            host: "node01".into(),
            name: name.clone(),
            value: value.clone(),
        })
        .collect();
    let planned = diff(&resources, &observe_bmc(&client, &resources).await.expect("observes"));
    assert_eq!(planned.iter().filter(|change| change.action == Action::Update).count(), 2);

    let patch = changes.into_iter().map(|change| (change.name, change.desired)).collect();
    client.set_bios(&system, &patch).await.expect("writes BIOS settings");
    let now = client.bios(&system).await.expect("reads again");
    assert!(bios_diff(&desired, &now).is_empty(), "{now:?}");
    let replanned = diff(&resources, &observe_bmc(&client, &resources).await.expect("observes"));
    assert!(replanned.iter().all(|change| change.action == Action::NoOp), "{replanned:?}");
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_that_never_shows_the_password() {
    let Some(server) = emulator(None) else { return };
    let wrong = "Wr0ng-Pa55-Never-Shown";
    let settings = config(&server, wrong);
    assert!(!format!("{settings:?}").contains(wrong), "Debug of the config shows the password");
    let error = Redfish::connect(settings).await.expect_err("refused");
    assert!(matches!(error, BmcError::AuthenticationFailed { .. }), "{error:?}");
    assert_eq!(error.to_string(), "authentication failed for BMC node01 as operator");
    let text = all_text(&error);
    assert!(!text.contains(wrong) && !text.contains(PASSWORD), "{text}");
}

#[tokio::test]
async fn a_missing_resource_names_its_url_and_a_5xx_carries_the_bmc_message() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let base = format!("http://127.0.0.1:{}", server.port);
    let error = client.get("/redfish/v1/Systems/no-such-system").await.expect_err("404");
    assert_eq!(
        error.to_string(),
        format!("BMC `node01`: `{base}/redfish/v1/Systems/no-such-system` not found (HTTP 404)")
    );
    // The fake driver has no processor inventory: sushy answers 501 with a Redfish error.
    let error = client.get(&format!("/redfish/v1/Systems/{SYSTEM_UUID}/Processors")).await.expect_err("501");
    assert_eq!(
        error.to_string(),
        format!(
            "BMC `node01`: GET `{base}/redfish/v1/Systems/{SYSTEM_UUID}/Processors` failed with HTTP 501: Not implemented"
        )
    );
    assert!(!all_text(&error).contains(PASSWORD));
}

/// A CA and a certificate for 127.0.0.1 signed by it, made with openssl.
pub(crate) fn make_tls(dir: &Path) -> Option<Tls> {
    let ca = crate::pki::TestCa::new(dir, "/CN=toolkit test CA")?;
    ca.issue("bmc", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    Some(Tls { ca: dir.join("ca.pem"), certificate: dir.join("bmc.pem"), key: dir.join("bmc.key") })
}

#[tokio::test]
async fn tls_trusts_the_inventorys_ca_file_and_skips_checks_only_when_insecure() {
    let pki = tempfile::tempdir().expect("tempdir");
    let Some(tls) = make_tls(pki.path()) else { return };
    let Some(server) = emulator(Some(&tls)) else { return };
    // The BMC as an inventory names it: endpoint, credentials by reference, CA file.
    std::fs::write(pki.path().join("bmc-user"), format!("{USER}\n")).expect("user file");
    std::fs::write(pki.path().join("bmc-password"), format!("{PASSWORD}\n")).expect("password file");
    let inventory_text = format!(
        "version: 1\nbmcs:\n  node01:\n    endpoint: https://127.0.0.1:{}\n    username: {{file: bmc-user}}\n    password: {{file: bmc-password}}\n    ca_file: ca.pem\n",
        server.port
    );
    let inventory: toolkit::inventory::Inventory = serde_norway::from_str(&inventory_text).expect("inventory");
    let from_inventory = BmcConfig::from_inventory(&inventory, "node01", pki.path()).expect("resolves");
    assert_eq!(from_inventory.ca_file.as_deref(), Some(tls.ca.as_path()), "relative to the base directory");
    assert!(!format!("{from_inventory:?}").contains(PASSWORD));
    let client = Redfish::connect(from_inventory.clone()).await.expect("verified with the CA file");
    assert_eq!(client.systems().await.expect("systems").len(), 1);

    let mut untrusted = from_inventory.clone();
    untrusted.ca_file = None;
    let error = Redfish::connect(untrusted).await.expect_err("the system roots do not know this CA");
    let text = all_text(&error);
    assert!(matches!(error, BmcError::Transport { attempts: 1, .. }), "a TLS failure is not retried: {text}");
    assert!(text.to_lowercase().contains("certificate"), "{text}");

    let mut insecure = from_inventory;
    insecure.ca_file = None;
    insecure.insecure = true;
    Redfish::connect(insecure).await.expect("insecure: true skips verification");

    let missing = BmcConfig::from_inventory(&inventory, "node02", pki.path()).expect_err("no such BMC");
    assert_eq!(missing.to_string(), "no BMC for host `node02` in the inventory's `bmcs`");
}

/// One bare-metal node whose hardware profile differs from the emulator's system:
/// BIOS `ProcTurboMode` (Enabled there), power on with a one-time PXE boot, firmware.
pub(crate) const METAL_BLUEPRINT: &str = r#"version: 1
cluster:
  name: metal
node_groups:
  - name: node
    count: 1
    hostname: node01
    roles: [controller, database, login, compute]
    hardware_profile: gpu-node
hardware_profiles:
  gpu-node:
    power: on
    pxe_on_provision: true
    bios: { ProcTurboMode: Disabled, NumCores: 10 }
    firmware: { BIOS: "2.4.0" }
fabric:
  compute:
    kind: roce
    rails: 1
    link_speed_gbps: 100
    switch: { model: frr-container, radix: 32 }
    oversubscription: "1:1"
    roce: { mode: lossless, pfc_priority: 3, ecn: true }
    addressing:
      rail_pool: 10.200.0.0/16
      loopback_pool: 10.255.0.0/24
  management:
    inband: { subnet: 10.10.0.0/24 }
scheduler:
  kind: slurm
  slurm:
    partitions:
      - { name: all, groups: [node], default: true }
"#;

/// An inventory with node01's BMC at the emulator on `port`, credentials from the
/// environment [`toolkit_metal`] sets.
pub(crate) fn metal_inventory(port: u16) -> String {
    format!(
        "version: 1
hosts:
  node01: {{ address: 127.0.0.1 }}
bmcs:
  node01:
    endpoint: http://127.0.0.1:{port}
    username: {{ env: TOOLKIT_TEST_BMC_USER }}
    password: {{ env: TOOLKIT_TEST_BMC_PASSWORD }}
state_file: state.json
"
    )
}

/// A directory with `blueprint` as `bp.yaml` and `inv.yaml`: node `node01` whose BMC
/// is `server`, credentials from the environment [`toolkit_metal`] sets.
pub(crate) fn metal_dir(blueprint: &str, server: &Server) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bp.yaml"), blueprint).expect("blueprint");
    std::fs::write(dir.path().join("inv.yaml"), metal_inventory(server.port)).expect("inventory");
    dir
}

/// `toolkit` with the emulator's credentials in the environment the inventories name;
/// the password must never be printed.
pub(crate) fn toolkit_metal(dir: &Path, args: &[&str]) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(args)
        .current_dir(dir)
        .env("TOOLKIT_TEST_BMC_USER", USER)
        .env("TOOLKIT_TEST_BMC_PASSWORD", PASSWORD)
        .stdin(Stdio::null())
        .output()
        .expect("runs toolkit");
    let all = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!all.contains(PASSWORD), "the BMC password leaked: {all}");
    output
}

pub(crate) fn shown(output: &std::process::Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A client of the emulator and its system, powered off (and observed off).
pub(crate) async fn powered_off(server: &Server) -> (Redfish, String) {
    let client = Redfish::connect(config(server, PASSWORD)).await.expect("connects");
    let system = client.system().await.expect("one system");
    client.reset(&system, ResetType::ForceOff).await.expect("powers off");
    client.wait_for_power(&system, PowerState::Off, Duration::from_secs(40)).await.expect("observed off");
    (client, system)
}

#[tokio::test]
async fn hardware_profile_plans_applies_and_converges_through_the_emulator() {
    let Some(server) = emulator(None) else { return };
    // The node is off: it is to be provisioned (power on after a one-time PXE boot).
    let (client, system) = powered_off(&server).await;

    let dir = metal_dir(METAL_BLUEPRINT, &server);

    // The plan shows each difference with before and after, and the firmware mismatch.
    let output =
        toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--output", "json"]);
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("plan JSON");
    let changes: Vec<(String, String, Option<String>, Option<String>)> = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| {
            let text = |key: &str| change[key].as_str().map(str::to_owned);
            (text("id").expect("id"), text("action").expect("action"), text("before"), text("after"))
        })
        .collect();
    let some = |value: &str| Some(value.to_owned());
    assert_eq!(
        changes,
        [
            ("node01:bios:NumCores".into(), "no-op".into(), some("10"), some("10")),
            ("node01:bios:ProcTurboMode".into(), "update".into(), some("Enabled"), some("Disabled")),
            ("node01:boot:override".into(), "update".into(), some("Hdd/Continuous"), some("Pxe/Once")),
            ("node01:power:system".into(), "update".into(), some("Off"), some("On")),
        ]
    );
    let warnings = plan["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = warnings[0].as_str().expect("text");
    assert!(warning.contains("`BIOS` is `2.3.1`") && warning.contains("expects `2.4.0`"), "{warning}");

    // Text plans show the same, with before → after.
    let output = toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api"]);
    let text = shown(&output);
    assert!(text.contains("~ bios ProcTurboMode on node01") && text.contains("Enabled → Disabled"), "{text}");
    assert!(text.contains("~ power system on node01") && text.contains("Off → On"), "{text}");

    // deploy --stage api applies: BIOS, boot, then power on.
    let output = toolkit_metal(dir.path(), &["deploy", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));

    // Observed back through the API.
    assert_eq!(client.power_state(&system).await.expect("reads"), PowerState::On);
    assert_eq!(client.bios(&system).await.expect("reads")["ProcTurboMode"], json!("Disabled"));
    assert_eq!(client.boot_override(&system).await.expect("reads").target.as_deref(), Some("Pxe"));

    // Planned again: nothing to change (the node is on: no second PXE boot); the
    // firmware is still reported, never changed.
    let output = toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api"]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let text = shown(&output);
    assert!(text.contains("No changes."), "{text}");
    assert!(text.contains("warning: node01: firmware `BIOS` is `2.3.1`"), "{text}");
    // The state records the API objects, so an offline plan agrees.
    let output = toolkit_metal(dir.path(), &["plan", "bp.yaml", "-i", "inv.yaml", "--offline", "--output", "json"]);
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("plan JSON");
    for change in plan["changes"].as_array().expect("changes") {
        if ["bios", "boot", "power"].contains(&change["kind"].as_str().expect("kind")) {
            assert_eq!(change["action"], "no-op", "{change}");
        }
    }
}

/// The reboot fallback (`deploy::reboot::RedfishPowerCycle`) against the emulator: a
/// node found off is turned on; a node that is on gets the strongest reset sushy
/// allows (it lists no `PowerCycle`: `ForceRestart`); a host without a BMC is refused.
#[tokio::test]
async fn the_reboot_fallback_power_cycles_through_the_bmc() {
    use toolkit::deploy::reboot::{PowerCycle, RedfishPowerCycle};
    let Some(server) = emulator(None) else { return };
    let (client, system) = powered_off(&server).await;

    let fallback = RedfishPowerCycle::new([config(&server, PASSWORD)]);
    fallback.power_cycle("node01").await.expect("turns the node on");
    client.wait_for_power(&system, PowerState::On, Duration::from_secs(40)).await.expect("observed on");
    fallback.power_cycle("node01").await.expect("force-restarts the running node");
    // The fake driver goes off and on again, a few seconds apart.
    client.wait_for_power(&system, PowerState::On, Duration::from_secs(40)).await.expect("on again");

    let error = fallback.power_cycle("node02").await.expect_err("no BMC");
    assert_eq!(error.to_string(), "`node02` has no BMC in the inventory (`bmcs:`), so it cannot be power-cycled");
}

/// The BIOS write path on the emulator: `settle_bios` writes the wanted values that the
/// next reset would not bring and nothing else. sushy applies BIOS writes at once (its
/// `Bios/Settings` is the `Bios` store), so nothing is ever left queued there; queued
/// values are tested on recorded vendor services (`redfish_static.rs`).
#[tokio::test]
async fn settling_the_bios_writes_only_the_wanted_values_that_differ() {
    let Some(server) = emulator(None) else { return };
    let client = Redfish::connect(config(&server, PASSWORD)).await.expect("connects");
    let system = client.system().await.expect("one system");
    let before = client.bios_settings(&system).await.expect("reads the BIOS");
    assert!(before.pending.is_empty(), "{before:?}");
    assert!(before.apply_times.is_empty(), "sushy offers no apply times: none is sent");
    let wanted = [("ProcTurboMode".to_owned(), json!("Disabled")), ("BootMode".to_owned(), json!("Uefi"))].into();
    assert_eq!(before.write_for(&wanted), [("ProcTurboMode".to_owned(), json!("Disabled"))].into());
    let overwritten = client.settle_bios(&system, &wanted).await.expect("settles");
    assert!(overwritten.is_empty());
    let after = client.bios_settings(&system).await.expect("reads again");
    assert_eq!(after.current["ProcTurboMode"], json!("Disabled"));
    assert!(after.write_for(&wanted).is_empty(), "converged");
    client.refuse_unwanted_pending(&system, &wanted).await.expect("nothing queued: a reset may go ahead");
}
