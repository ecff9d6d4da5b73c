//! Integration tests: `toolkit parse PARSER FILE` run as the real binary on recorded
//! tool outputs (tests/fixtures/parsers, provenance in SOURCE.md) and on garbage.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers").join(name)
}

fn toolkit(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolkit starts");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.unwrap_or_default().as_bytes()).expect("write stdin");
    drop(input);
    child.wait_with_output().expect("toolkit ends")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn nccl_tests_json_carries_the_dgx_h100_numbers() {
    let path = fixture("nccl_all_reduce_1node_8xh100_dgx_nvlink.txt");
    let output = toolkit(&["parse", "nccl-tests", path.to_str().expect("utf-8 path"), "--output", "json"], None);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", text(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(json["format_version"], 1);
    assert_eq!(json["parser"], "nccl-tests");
    let result = &json["result"];
    assert_eq!(result["avg_busbw_gbps"], 159.151);
    assert_eq!(result["peak"]["busbw_gbps"], 480.16);
    assert_eq!(result["peak"]["size_bytes"], 8_589_934_592_u64);
    assert_eq!(result["rows"].as_array().map(Vec::len), Some(32));
    assert_eq!(result["ranks"].as_array().map(Vec::len), Some(8));
}

#[test]
fn text_summaries_of_a_failing_dcgm_run_and_a_slurm_node_list() {
    let path = fixture("dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt");
    let output = toolkit(&["parse", "dcgmi-diag", path.to_str().expect("utf-8 path")], None);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("DCGM 3.3.8, driver 560.35.03, 8 GPUs: 13 tests: 9 pass, 1 fail, 3 skip"), "{stdout}");
    assert!(stdout.contains("fail GPU Memory: GPU 0 Error using CUDA API cuInit"), "{stdout}");

    let path = fixture("sinfo_22.05.8_json_4nodes.json");
    let output = toolkit(&["parse", "sinfo", path.to_str().expect("utf-8 path")], None);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", text(&output.stderr));
    assert!(stdout.contains("DOWN+NOT_RESPONDING: gpu03,gpu04"), "{stdout}");
    assert!(stdout.contains("gpu02: NHC: check_gpu_xid"), "{stdout}");
}

#[test]
fn garbage_exits_1_naming_the_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.txt");
    std::fs::write(&garbage, "this is not\nnccl-tests output\n").expect("write");
    let output = toolkit(&["parse", "nccl-tests", garbage.to_str().expect("utf-8 path")], None);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!("error: {}: could not parse line 3: expected a result row", garbage.display())),
        "{stderr}"
    );

    // A recorded output cut in the middle of a row.
    let original = std::fs::read_to_string(fixture("nccl_all_reduce_2node_h100_ib_ndr_xe9680.txt")).expect("fixture");
    let cut = &original[..original.find("  1073741824").expect("a 1 GiB row") + 40];
    let truncated = dir.path().join("truncated.txt");
    std::fs::write(&truncated, cut).expect("write");
    let output = toolkit(&["parse", "nccl-tests", truncated.to_str().expect("utf-8 path"), "--output", "json"], None);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    let line = cut.lines().count();
    assert!(stderr.contains(&format!("truncated.txt: could not parse line {line}: expected 13 columns")), "{stderr}");
}

#[test]
fn stdin_unknown_parser_and_list() {
    let ping = std::fs::read_to_string(fixture("ping_iputils_20221126_mtu1400_df_1472_fail.txt")).expect("fixture");
    let output = toolkit(&["parse", "ping", "-", "--output", "json"], Some(&ping));
    assert_eq!(output.status.code(), Some(0), "stderr: {}", text(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["result"]["statistics"]["errors"], 3);
    assert_eq!(json["result"]["statistics"]["loss_percent"], 100.0);

    let output = toolkit(&["parse", "ibstats", "x.txt"], None);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("unknown parser `ibstats` (did you mean `ibstat`?)"),
        "{}",
        text(&output.stderr)
    );

    let output = toolkit(&["parse", "list"], None);
    assert_eq!(output.status.code(), Some(0));
    let stdout = text(&output.stdout);
    for name in
        ["nccl-tests", "dcgmi-diag-json", "nvidia-smi-q", "xid", "ib-link-flaps", "frr-bgp-summary", "scontrol-node"]
    {
        assert!(stdout.contains(name), "{name} missing from:\n{stdout}");
    }

    let output = toolkit(&["parse", "ior", "/nonexistent/ior.txt"], None);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("/nonexistent/ior.txt"));
}
