//! Unit tests of the client's protocol handling against a scripted HTTP server: a
//! session service (which the emulator the integration tests use does not have),
//! retries, task monitors and error bodies. What a real Redfish service does with
//! the requests is tested in `tests/it/redfish.rs`. `serve` and `config` also serve
//! the firmware update tests (`update`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;

use super::*;

/// A request the scripted server received.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) method: String,
    pub(super) path: String,
    headers: Vec<(String, String)>,
    pub(super) body: String,
}

impl Seen {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

/// A scripted answer: status, extra headers, body.
pub(super) type Answer = (u16, Vec<(&'static str, String)>, String);

/// Serves `answers` in order, one per connection (`Connection: close`), records requests.
pub(super) fn serve(answers: Vec<Answer>) -> (String, Arc<Mutex<Vec<Seen>>>, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let handle = thread::spawn(move || {
        for (status, headers, body) in answers {
            let Ok((stream, _)) = listener.accept() else { return };
            let mut reader = BufReader::new(stream.try_clone().expect("clones"));
            let mut line = String::new();
            reader.read_line(&mut line).expect("request line");
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_owned();
            let path = parts.next().unwrap_or_default().to_owned();
            let mut request_headers = Vec::new();
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).expect("header");
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':') {
                    request_headers.push((name.trim().to_owned(), value.trim().to_owned()));
                }
            }
            let length = request_headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.parse::<usize>().ok())
                .unwrap_or(0);
            let mut request_body = vec![0; length];
            reader.read_exact(&mut request_body).expect("body");
            record.lock().expect("lock").push(Seen {
                method,
                path,
                headers: request_headers,
                body: String::from_utf8_lossy(&request_body).into_owned(),
            });
            let mut response = format!(
                "HTTP/1.1 {status} X\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            );
            for (name, value) in headers {
                response.push_str(name);
                response.push_str(": ");
                response.push_str(&value);
                response.push_str("\r\n");
            }
            response.push_str("\r\n");
            response.push_str(&body);
            let mut stream = stream;
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (base, seen, handle)
}

pub(super) fn config(base: &str) -> BmcConfig {
    let credentials = Credentials { username: "admin".into(), password: Sensitive::new("pa55-w0rd-secret") };
    let mut config = BmcConfig::new("node01", base, credentials).expect("valid endpoint");
    config.retry =
        RetryPolicy { attempts: 3, initial_backoff: Duration::from_millis(10), max_backoff: Duration::from_millis(20) };
    config.poll_interval = Duration::from_millis(10);
    config.task_timeout = Duration::from_secs(5);
    config
}

const ROOT_WITH_SESSIONS: &str = r#"{"Systems":{"@odata.id":"/redfish/v1/Systems"},
  "SessionService":{"@odata.id":"/redfish/v1/SessionService"},
  "Links":{"Sessions":{"@odata.id":"/redfish/v1/SessionService/Sessions"}}}"#;

#[tokio::test]
async fn opens_uses_and_deletes_a_session() {
    let (base, seen, server) = serve(vec![
        (200, vec![], ROOT_WITH_SESSIONS.into()),
        (
            201,
            vec![("X-Auth-Token", "tok-123".into()), ("Location", "/redfish/v1/SessionService/Sessions/7".into())],
            "{}".into(),
        ),
        (200, vec![], r#"{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}]}"#.into()),
        (204, vec![], String::new()),
    ]);
    let client = Redfish::connect(config(&base)).await.expect("connects");
    assert!(client.has_session());
    assert_eq!(client.systems().await.expect("systems"), ["/redfish/v1/Systems/1"]);
    client.close().await.expect("closes");
    server.join().expect("server");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen[1].method, "POST");
    assert_eq!(seen[1].path, "/redfish/v1/SessionService/Sessions");
    let login: Value = serde_json::from_str(&seen[1].body).expect("json body");
    assert_eq!(login, json!({"UserName": "admin", "Password": "pa55-w0rd-secret"}));
    assert_eq!(seen[2].header("X-Auth-Token"), Some("tok-123"));
    assert_eq!(seen[2].header("Authorization"), None, "a session replaces basic auth");
    assert_eq!((seen[3].method.as_str(), seen[3].path.as_str()), ("DELETE", "/redfish/v1/SessionService/Sessions/7"));
    assert_eq!(seen[3].header("X-Auth-Token"), Some("tok-123"));
}

#[tokio::test]
async fn dropping_a_client_ends_its_session() {
    let (base, seen, server) = serve(vec![
        (200, vec![], ROOT_WITH_SESSIONS.into()),
        (
            201,
            vec![("X-Auth-Token", "tok-456".into()), ("Location", "/redfish/v1/SessionService/Sessions/8".into())],
            "{}".into(),
        ),
        (204, vec![], String::new()),
    ]);
    let client = Redfish::connect(config(&base)).await.expect("connects");
    drop(client);
    // Joining off the runtime's thread lets the spawned DELETE run meanwhile.
    tokio::task::spawn_blocking(move || server.join().expect("server")).await.expect("joins");
    let seen = seen.lock().expect("lock");
    assert_eq!((seen[2].method.as_str(), seen[2].path.as_str()), ("DELETE", "/redfish/v1/SessionService/Sessions/8"));
    assert_eq!(seen[2].header("X-Auth-Token"), Some("tok-456"));
}

#[tokio::test]
async fn a_refused_session_is_an_authentication_error_without_the_password() {
    let (base, _seen, server) = serve(vec![
        (200, vec![], ROOT_WITH_SESSIONS.into()),
        (401, vec![], r#"{"error":{"message":"bad credentials"}}"#.into()),
    ]);
    let error = Redfish::connect(config(&base)).await.expect_err("refused");
    server.join().expect("server");
    assert_eq!(error.to_string(), "authentication failed for BMC node01 as admin");
    assert!(!format!("{error:?}").contains("pa55-w0rd-secret"));
}

#[tokio::test]
async fn retries_503_then_reports_500_with_the_extended_message() {
    let root = r#"{"Systems":{"@odata.id":"/redfish/v1/Systems"}}"#;
    let failure = r#"{"error":{"code":"Base.1.0.GeneralError","message":"A general error has occurred.",
      "@Message.ExtendedInfo":[{"MessageId":"Base.1.0.InternalError","Message":"The BMC is updating its firmware."}]}}"#;
    let (base, seen, server) = serve(vec![
        (200, vec![], root.into()),
        (503, vec![("Retry-After", "0".into())], String::new()),
        (200, vec![], r#"{"Members":[]}"#.into()),
        (500, vec![], failure.into()),
        (500, vec![], failure.into()),
        (500, vec![], failure.into()),
    ]);
    let client = Redfish::connect(config(&base)).await.expect("connects after a retry");
    assert!(!client.has_session());
    let error = client.get("/redfish/v1/Systems/1").await.expect_err("fails");
    server.join().expect("server");
    assert_eq!(
        error.to_string(),
        format!(
            "BMC `node01`: GET `{base}/redfish/v1/Systems/1` failed with HTTP 500: The BMC is updating its firmware."
        )
    );
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 6, "three attempts of the failing GET");
    assert!(seen[2].header("Authorization").is_some_and(|value| value.starts_with("Basic ")));
}

#[tokio::test]
async fn follows_a_task_monitor_to_its_end() {
    let root = r#"{"Systems":{"@odata.id":"/redfish/v1/Systems"}}"#;
    let (base, seen, server) = serve(vec![
        (200, vec![], root.into()),
        (200, vec![], r#"{"Members":[]}"#.into()),
        (202, vec![("Location", "/taskmon/9".into())], String::new()),
        (202, vec![("Retry-After", "0".into())], String::new()),
        (200, vec![], r#"{"TaskState":"Running"}"#.into()),
        (200, vec![], r#"{"TaskState":"Exception","Messages":[{"Message":"Image is corrupt."}]}"#.into()),
    ]);
    let client = Redfish::connect(config(&base)).await.expect("connects");
    let error = client
        .post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", &json!({"ImageURI": "x"}))
        .await
        .expect_err("task fails");
    server.join().expect("server");
    assert_eq!(
        error.to_string(),
        format!("BMC `node01`: task `{base}/taskmon/9` ended `Exception`: Image is corrupt.")
    );
    assert_eq!(seen.lock().expect("lock").iter().filter(|request| request.path == "/taskmon/9").count(), 3);
}

#[tokio::test]
async fn refuses_a_reset_type_the_bmc_does_not_allow() {
    let root = r#"{"Systems":{"@odata.id":"/redfish/v1/Systems"}}"#;
    let system = r##"{"Id":"1","Actions":{"#ComputerSystem.Reset":{"target":"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
      "ResetType@Redfish.AllowableValues":["On","ForceOff"]}}}"##;
    let (base, seen, server) = serve(vec![
        (200, vec![], root.into()),
        (200, vec![], r#"{"Members":[]}"#.into()),
        (200, vec![], system.into()),
    ]);
    let client = Redfish::connect(config(&base)).await.expect("connects");
    let error = client.reset("/redfish/v1/Systems/1", ResetType::PowerCycle).await.expect_err("refused");
    server.join().expect("server");
    assert_eq!(error.to_string(), "BMC `node01`: reset type `PowerCycle` not allowed (allowed: On, ForceOff)");
    assert!(seen.lock().expect("lock").iter().all(|request| request.method != "POST"));
}

#[test]
fn bios_and_firmware_comparisons() {
    let desired: BTreeMap<String, Value> =
        [("A".into(), json!("Enabled")), ("B".into(), json!("10")), ("C".into(), json!(true))].into();
    let actual: BTreeMap<String, Value> = [("A".into(), json!("Disabled")), ("B".into(), json!(10))].into();
    let changes = bios_diff(&desired, &actual);
    assert_eq!(
        changes,
        vec![
            BiosChange { name: "A".into(), desired: json!("Enabled"), actual: Some(json!("Disabled")) },
            BiosChange { name: "C".into(), desired: json!(true), actual: None },
        ]
    );
    let expected: BTreeMap<String, String> = [("BIOS".into(), "2.1".into()), ("BMC".into(), "5.0".into())].into();
    let actual: BTreeMap<String, String> = [("BIOS".into(), "2.1".into()), ("BMC".into(), "4.9".into())].into();
    assert_eq!(
        firmware_check(&expected, &actual),
        vec![FirmwareMismatch { component: "BMC".into(), expected: "5.0".into(), actual: Some("4.9".into()) }]
    );
}

#[test]
fn endpoints_must_be_http_urls() {
    let credentials = Credentials { username: "u".into(), password: Sensitive::new("p") };
    let error = BmcConfig::new("node01", "10.0.0.1", credentials).expect_err("no scheme");
    assert_eq!(error.to_string(), "BMC `node01`: endpoint `10.0.0.1` is not an http(s) URL");
}

#[test]
fn a_hung_system_is_power_cycled_with_the_strongest_reset_its_bmc_allows() {
    let allowed = |types: &[&str]| types.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let on = Some(PowerState::On);
    assert_eq!(power_cycle_type(&allowed(&[]), on), Some(ResetType::PowerCycle), "unlisted: the standard one");
    assert_eq!(
        power_cycle_type(&allowed(&["On", "ForceOff", "ForceRestart", "PowerCycle"]), on),
        Some(ResetType::PowerCycle)
    );
    // sushy-emulator's list: no PowerCycle.
    let sushy = allowed(&["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"]);
    assert_eq!(power_cycle_type(&sushy, on), Some(ResetType::ForceRestart));
    assert_eq!(power_cycle_type(&sushy, Some(PowerState::Off)), Some(ResetType::On), "off: turned on");
    assert_eq!(power_cycle_type(&allowed(&["GracefulRestart", "Nmi"]), None), None);
}

#[tokio::test]
async fn power_cycle_sends_force_restart_where_power_cycle_is_not_allowed() {
    let root = r#"{"Systems":{"@odata.id":"/redfish/v1/Systems"}}"#;
    let system = r##"{"Id":"1","PowerState":"On","Actions":{"#ComputerSystem.Reset":{
      "target":"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
      "ResetType@Redfish.AllowableValues":["On","ForceOff","ForceRestart"]}}}"##;
    let (base, seen, server) = serve(vec![
        (200, vec![], root.into()),
        (200, vec![], r#"{"Members":[]}"#.into()),
        (200, vec![], system.into()),
        (200, vec![], system.into()),
        (204, vec![], String::new()),
    ]);
    let client = Redfish::connect(config(&base)).await.expect("connects");
    let sent = client.power_cycle("/redfish/v1/Systems/1").await.expect("resets");
    server.join().expect("server");
    assert_eq!(sent, ResetType::ForceRestart);
    let seen = seen.lock().expect("lock");
    let post = seen.iter().find(|request| request.method == "POST").expect("a POST");
    assert_eq!(post.path, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset");
    assert_eq!(serde_json::from_str::<Value>(&post.body).expect("JSON"), json!({"ResetType": "ForceRestart"}));
}

fn mockup_text(path: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/support/mockups/{path}", env!("CARGO_MANIFEST_DIR"))).expect("mockup")
}

/// A BIOS write to Dell's settings object: `If-Match` with the ETag of the resource,
/// `OnReset` as the apply time, and the BMC's `@Message.ExtendedInfo` in the error.
#[tokio::test]
async fn a_bios_write_sends_if_match_and_the_apply_time_and_shows_the_bmcs_messages() {
    let root = r#"{"Systems":{"@odata.id":"/redfish/v1/Systems"}}"#;
    let system = r#"{"Id":"System.Embedded.1","Bios":{"@odata.id":"/redfish/v1/Systems/System.Embedded.1/Bios"}}"#;
    let settings = mockup_text("dell-r650/Systems/System.Embedded.1/Bios/Settings/index.json");
    let (base, seen, server) = serve(vec![
        (200, vec![], root.into()),
        (200, vec![], r#"{"Members":[]}"#.into()),
        (200, vec![], system.into()),
        (200, vec![], mockup_text("dell-r650/Systems/System.Embedded.1/Bios/index.json")),
        (200, vec![], settings.clone()),
        (200, vec![("ETag", "W/\"gen-7\"".into())], settings),
        (400, vec![], mockup_text("errors/extended-info.json")),
    ]);
    let client = Redfish::connect(config(&base)).await.expect("connects");
    let wanted = BTreeMap::from([("SriovGlobalEnable".to_owned(), json!("Enabled"))]);
    let error = client.settle_bios("/redfish/v1/Systems/System.Embedded.1", &wanted).await.expect_err("rejected");
    server.join().expect("server");
    let text = error.to_string();
    assert!(text.starts_with("BMC `node01`: PATCH `"), "{text}");
    assert!(text.contains("rejected with HTTP 400: The value Red for the property IndicatorLED"), "{text}");
    assert!(text.contains("; The property SKU is a read only property"), "every message: {text}");
    let seen = seen.lock().expect("lock");
    let patch = seen.iter().find(|request| request.method == "PATCH").expect("a PATCH");
    assert_eq!(patch.path, "/redfish/v1/Systems/System.Embedded.1/Bios/Settings");
    assert_eq!(patch.header("If-Match"), Some("W/\"gen-7\""));
    let body: Value = serde_json::from_str(&patch.body).expect("JSON body");
    assert_eq!(
        body,
        json!({ "Attributes": { "LogicalProc": "Enabled" }, "@Redfish.SettingsApplyTime": { "ApplyTime": "OnReset" } })
    );
}
