use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::apply::fake::{Call, FakeConnector, Script};
use crate::transport::{ExitStatus, Output};

/// Short limits: every wait in these tests ends in well under a second.
fn quick() -> RebootOptions {
    RebootOptions {
        return_timeout: Duration::from_millis(300),
        settle_timeout: Duration::from_millis(200),
        poll_interval: Duration::from_millis(10),
        attempt_timeout: Duration::from_millis(100),
    }
}

fn output(code: u32, stdout: &str) -> Output {
    Output { status: ExitStatus::Code(code), stdout: stdout.as_bytes().to_vec(), stderr: Vec::new() }
}

/// `cat boot_id /proc/1/stat` of boot number `boot`: a container restart keeps the
/// kernel's boot id and starts init again later.
fn identity_text(boot: u32) -> String {
    let zeros = " 0".repeat(18);
    format!("6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b\n1 (sys temd) S{zeros} {} 0 0\n", 1000 + boot)
}

/// How the fake host behaves after `systemctl reboot`.
#[derive(Clone, Copy)]
struct Behaviour {
    /// Away this long, then back in a new boot; `None`: never back.
    away: Option<Duration>,
    /// Whether the reboot makes a new boot at all (a host that ignores it: `false`).
    reboots: bool,
    /// `is-system-running` says `starting` this many times before `running`.
    starting: u32,
}

struct Host {
    connector: Arc<FakeConnector>,
    boot: Arc<AtomicU32>,
}

fn host(behaviour: Behaviour) -> Host {
    let boot = Arc::new(AtomicU32::new(0));
    let down: Arc<Mutex<HashSet<String>>> = Arc::default();
    let asked = Arc::new(AtomicU32::new(0));
    let (boot_seen, down_seen) = (Arc::clone(&boot), Arc::clone(&down));
    let script = Script::new(move |host, argv| match argv.first().map(String::as_str) {
        Some("cat") => output(0, &identity_text(boot_seen.load(Ordering::SeqCst))),
        Some("systemd-run") => {
            if behaviour.reboots {
                boot_seen.fetch_add(1, Ordering::SeqCst);
                down_seen.lock().expect("down").insert(host.to_owned());
                if let Some(away) = behaviour.away {
                    let (down, host) = (Arc::clone(&down_seen), host.to_owned());
                    tokio::spawn(async move {
                        tokio::time::sleep(away).await;
                        down.lock().expect("down").remove(&host);
                    });
                }
            }
            output(0, "Running timer as unit: run-r1.timer\n")
        }
        Some("systemctl") if asked.fetch_add(1, Ordering::SeqCst) < behaviour.starting => output(1, "starting\n"),
        Some("systemctl") => output(0, "running\n"),
        _ => output(127, ""),
    });
    let mut connector = FakeConnector::new(script);
    connector.down = down;
    Host { connector: Arc::new(connector), boot }
}

fn commands(connector: &FakeConnector) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for call in connector.script.calls() {
        if let Call::Exec { argv, .. } = call {
            let word = argv.first().cloned().unwrap_or_default();
            if seen.last() != Some(&word) {
                seen.push(word);
            }
        }
    }
    seen
}

#[tokio::test]
async fn a_reboot_waits_for_a_new_boot_then_for_systemd() {
    let fake = host(Behaviour { away: Some(Duration::from_millis(60)), reboots: true, starting: 2 });
    let report = reboot(fake.connector.as_ref(), "node01", &quick()).await.expect("rebooted");
    assert_eq!(report.host, "node01");
    assert_eq!(report.before.boot_id, report.after.boot_id, "a container keeps the kernel's boot id");
    assert_eq!((report.before.init_started, report.after.init_started), (1000, 1001));
    assert_eq!(report.system_state, "running");
    assert!(!report.power_cycled);
    assert!(report.attempts >= 2, "it was away at first: {}", report.attempts);
    assert!(report.returned_after >= Duration::from_millis(60) && report.settled_after >= report.returned_after);
    assert_eq!(commands(&fake.connector), ["cat", "systemd-run", "cat", "systemctl"]);
    let reboot_command = fake.connector.script.calls().into_iter().find_map(|call| match call {
        Call::Exec { argv, .. } if argv[0] == "systemd-run" => Some(argv),
        _ => None,
    });
    assert_eq!(
        reboot_command.expect("reboot command").join(" "),
        "systemd-run --on-active=1 --timer-property=AccuracySec=100ms --description=toolkit: reboot systemctl reboot"
    );
    let forgotten = fake.connector.forgotten.lock().expect("forgotten").clone();
    assert_eq!(forgotten.len() as u32, report.attempts, "every attempt dials a new connection");
    assert_eq!(fake.boot.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_host_that_never_comes_back_is_named_with_the_wait() {
    let fake = host(Behaviour { away: None, reboots: true, starting: 0 });
    let error = reboot(fake.connector.as_ref(), "node02", &quick()).await.expect_err("never back");
    let message = error.to_string();
    assert!(matches!(error, RebootError::DidNotReturn { .. }), "{error:?}");
    assert!(message.starts_with("`node02` did not come back within 0 s of the reboot command"), "{message}");
    assert!(message.contains("last: cannot connect to `node02`"), "{message}");
}

#[tokio::test]
async fn a_host_that_ignores_the_reboot_is_not_taken_for_rebooted() {
    let fake = host(Behaviour { away: None, reboots: false, starting: 0 });
    let error = reboot(fake.connector.as_ref(), "node03", &quick()).await.expect_err("same boot");
    assert!(error.to_string().contains("last: SSH answered from the old boot"), "{error}");
}

#[tokio::test]
async fn a_host_that_does_not_finish_booting_times_out_with_its_state() {
    let fake = host(Behaviour { away: Some(Duration::from_millis(20)), reboots: true, starting: u32::MAX });
    let error = reboot(fake.connector.as_ref(), "node04", &quick()).await.expect_err("never settles");
    assert_eq!(
        error.to_string(),
        "`node04` is back but did not finish booting within 0 s: `systemctl is-system-running` says `starting`"
    );
}

#[tokio::test]
async fn a_failing_reboot_command_reboots_nothing() {
    let script = Script::new(|_, argv: &[String]| match argv[0].as_str() {
        "cat" => output(0, &identity_text(0)),
        _ => Output { status: ExitStatus::Code(1), stdout: Vec::new(), stderr: b"Failed to connect to bus".to_vec() },
    });
    let connector = FakeConnector::new(script);
    let error = reboot(&connector, "node01", &quick()).await.expect_err("refused");
    assert!(matches!(error, RebootError::Command { .. }), "{error:?}");
    let source = std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default();
    assert!(source.contains("Failed to connect to bus"), "{source}");
    assert!(connector.forgotten.lock().expect("forgotten").is_empty());
}

/// Brings the host back, as a BMC power cycle would.
struct Bmc {
    down: Arc<Mutex<HashSet<String>>>,
    boot: Arc<AtomicU32>,
    cycled: Mutex<Vec<String>>,
}

impl PowerCycle for Bmc {
    async fn power_cycle(&self, host: &str) -> Result<(), PowerCycleError> {
        self.cycled.lock().expect("cycled").push(host.to_owned());
        self.boot.fetch_add(1, Ordering::SeqCst);
        self.down.lock().expect("down").remove(host);
        Ok(())
    }
}

#[tokio::test]
async fn a_host_that_hangs_is_power_cycled_once_by_the_fallback() {
    let fake = host(Behaviour { away: None, reboots: true, starting: 0 });
    let bmc = Bmc { down: Arc::clone(&fake.connector.down), boot: Arc::clone(&fake.boot), cycled: Mutex::default() };
    let report =
        reboot_with_fallback(fake.connector.as_ref(), "node01", &quick(), Some(&bmc)).await.expect("power-cycled");
    assert!(report.power_cycled);
    assert_eq!(report.after.init_started, 1002);
    assert_eq!(*bmc.cycled.lock().expect("cycled"), ["node01"]);
}

#[tokio::test]
async fn a_host_that_stays_dead_after_the_power_cycle_says_so() {
    let fake = host(Behaviour { away: None, reboots: true, starting: 0 });
    let bmc = Bmc { down: Arc::default(), boot: Arc::default(), cycled: Mutex::default() };
    let error = reboot_with_fallback(fake.connector.as_ref(), "node01", &quick(), Some(&bmc)).await.expect_err("dead");
    assert!(error.to_string().contains("did not come back within 0 s of a BMC power cycle"), "{error}");
}

#[test]
fn boot_identity_reads_field_22_after_the_command_name() {
    let identity = BootIdentity::parse(&identity_text(7)).expect("parses");
    assert_eq!(identity.init_started, 1007);
    assert_eq!(identity.boot_id, "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b");
    assert_eq!(identity.to_string(), "boot 6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b init@1007");
    // Recorded on a lab node (Debian 12, systemd 252 as PID 1 in a container).
    let real = "1c6cd679-9da3-44fa-95f6-a8dd8afc1b39\n1 (systemd) S 0 1 1 0 -1 4194560 3385 13346 125 141 5 8 29 9 \
                20 0 1 0 78006 20189184 2696 18446744073709551615 94041929355264 94041929392365 140734547252224 0 0 \
                0 671173123 4096 1260 1 0 0 17 1 0 0 0 0 0 94041929416848 94041929420816 94042086785024 \
                140734547259252 140734547259263 140734547259263 140734547259373 0\n";
    assert_eq!(BootIdentity::parse(real).expect("parses").init_started, 78006);
    assert!(BootIdentity::parse("not-a-boot-id\n").expect_err("bad").contains("is not a boot id"));
    let short = "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b\n1 (init) S 0\n";
    assert!(BootIdentity::parse(short).expect_err("short").contains("has no start time"));
}

#[tokio::test]
async fn the_redfish_fallback_needs_a_bmc_for_the_host() {
    let fake = host(Behaviour { away: None, reboots: true, starting: 0 });
    let bmcs = RedfishPowerCycle::new([]);
    let error =
        reboot_with_fallback(fake.connector.as_ref(), "node01", &quick(), Some(&bmcs)).await.expect_err("no BMC");
    assert!(matches!(error, RebootError::PowerCycle { .. }), "{error:?}");
    let source = std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default();
    assert_eq!(source, "`node01` has no BMC in the inventory (`bmcs:`), so it cannot be power-cycled");
}

/// A BMC with BIOS values queued that it cannot overwrite.
struct StuckQueue;

impl PowerCycle for StuckQueue {
    async fn power_cycle(&self, _host: &str) -> Result<(), PowerCycleError> {
        Err("not expected".into())
    }

    async fn before_reboot(&self, _host: &str) -> Result<(), PowerCycleError> {
        Err("`LogicalProc` = `Disabled` (in effect: `Enabled`)".into())
    }
}

#[tokio::test]
async fn a_host_with_unwanted_bios_values_queued_is_not_rebooted() {
    let fake = host(Behaviour { away: None, reboots: true, starting: 0 });
    let error = reboot_with_fallback(fake.connector.as_ref(), "node01", &quick(), Some(&StuckQueue))
        .await
        .expect_err("refused");
    assert!(matches!(error, RebootError::QueuedSettings { .. }), "{error:?}");
    assert!(error.to_string().contains("was not rebooted"), "{error}");
    assert!(!commands(&fake.connector).contains(&"systemd-run".to_owned()), "no reboot command was sent");
}
