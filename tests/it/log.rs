//! Integration tests: a library's warning (a BMC whose TLS certificate is not
//! verified) reaches stderr through the subscriber the binary installs, as
//! `warning: node01: …`; `-q` silences it, `-v` adds debug messages, `RUST_LOG`
//! decides instead of the flags; stdout carries the same data whatever the level.
//! The BMC is sushy-tools' emulator over HTTPS, started as in `redfish.rs`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::redfish::{METAL_BLUEPRINT, PASSWORD, USER, emulator, make_tls, metal_inventory, shown};

/// `toolkit args` in `dir` with the emulator's credentials, `RUST_LOG` as given (not
/// the developer's).
fn toolkit(dir: &Path, args: &[&str], rust_log: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolkit"));
    command
        .args(args)
        .current_dir(dir)
        .env("TOOLKIT_TEST_BMC_USER", USER)
        .env("TOOLKIT_TEST_BMC_PASSWORD", PASSWORD)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    if let Some(value) = rust_log {
        command.env("RUST_LOG", value);
    }
    command.output().expect("runs toolkit")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `inspect`'s JSON document: the same data at every level.
fn document(output: &Output) -> serde_json::Value {
    assert_eq!(output.status.code(), Some(0), "{}", shown(output));
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("stdout is JSON only ({error}): {}", shown(output)))
}

const NOT_VERIFIED: &str =
    "warning: node01: TLS certificate of the BMC is not verified (`insecure: true` in the inventory)\n";

#[test]
fn an_unverified_bmc_certificate_is_a_warning_on_stderr_that_q_silences_and_v_adds_debug_to() {
    let pki = tempfile::tempdir().expect("tempdir");
    let Some(tls) = make_tls(pki.path()) else { return };
    let Some(server) = emulator(Some(&tls)) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bp.yaml"), METAL_BLUEPRINT).expect("blueprint");
    let inventory = metal_inventory(server.port)
        .replace("endpoint: http://", "endpoint: https://")
        .replace("state_file:", "    insecure: true\nstate_file:");
    assert!(inventory.contains("https://") && inventory.contains("insecure: true"), "{inventory}");
    std::fs::write(dir.path().join("inv.yaml"), inventory).expect("inventory");
    let inspect = |flags: &[&str], rust_log: Option<&str>| {
        let mut args = vec!["inspect", "bp.yaml", "-i", "inv.yaml", "--output", "json"];
        args.extend_from_slice(flags);
        let output = toolkit(dir.path(), &args, rust_log);
        let all = shown(&output);
        assert!(!all.contains(PASSWORD), "the BMC password leaked: {all}");
        output
    };

    let default = inspect(&[], None);
    let data = document(&default);
    assert_eq!(data["nodes"][0]["node"], "node01", "the node was read over HTTPS: {data}");
    let text = stderr(&default);
    assert_eq!(text.matches(NOT_VERIFIED).count(), 1, "{text}");
    assert!(!text.contains("debug:"), "{text}");

    let quiet = inspect(&["-q"], None);
    assert_eq!(document(&quiet), data);
    assert!(!stderr(&quiet).contains("warning:"), "{}", stderr(&quiet));

    // Global flags: before the command too.
    let verbose = toolkit(dir.path(), &["-v", "inspect", "bp.yaml", "-i", "inv.yaml", "--output", "json"], None);
    assert_eq!(document(&verbose), data);
    let text = stderr(&verbose);
    assert!(text.contains(NOT_VERIFIED), "{text}");
    // sushy has no session service: the client says so at debug level.
    assert!(text.contains("debug: node01: no Redfish session service; using basic auth\n"), "{text}");

    // RUST_LOG decides instead of the flags, either way.
    let only_errors = inspect(&["-v"], Some("error"));
    assert_eq!(document(&only_errors), data);
    assert_eq!(stderr(&only_errors), "", "RUST_LOG=error beats -v");
    let debug = inspect(&["-q"], Some("toolkit=debug"));
    assert!(stderr(&debug).contains("debug: node01: no Redfish session service"), "{}", stderr(&debug));

    // Everything every crate logs: the password, in clear or as basic auth, in none of it.
    let everything = inspect(&["-vvv"], None);
    assert_eq!(document(&everything), data);
    let text = stderr(&everything);
    assert!(text.contains("trace: "), "{text}");
    let basic = data_encoding::BASE64.encode(format!("{USER}:{PASSWORD}").as_bytes());
    assert!(!text.contains(&basic), "the basic auth header leaked");
}

#[test]
fn a_rust_log_that_is_not_a_filter_is_named_and_the_flags_apply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = toolkit(dir.path(), &["schema", "inventory"], None);
    assert_eq!(plain.status.code(), Some(0), "{}", shown(&plain));
    assert_eq!(stderr(&plain), "");
    let broken = toolkit(dir.path(), &["schema", "inventory"], Some("toolkit=loud"));
    assert_eq!(broken.status.code(), Some(0), "{}", shown(&broken));
    assert_eq!(broken.stdout, plain.stdout, "stdout is data only");
    let text = stderr(&broken);
    assert!(text.starts_with("warning: `RUST_LOG=toolkit=loud` is not a filter ("), "{text}");
    assert!(text.ends_with("); using the flags\n"), "{text}");
    assert_eq!(
        stderr(&toolkit(dir.path(), &["-q", "schema", "inventory"], Some("toolkit=loud"))),
        "",
        "-q: errors only"
    );
}
