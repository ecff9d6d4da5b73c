//! Integration tests: `toolkit lint` on malformed and hostile input, run as the real
//! binary on files in a temporary directory. Each must end with exit code 1 and a
//! located diagnostic, quickly, never with a hang, a crash or a leaked secret.

use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Longest any lint may take; hostile inputs must fail fast, not time out.
const TIME_LIMIT: Duration = Duration::from_secs(30);

/// A valid blueprint (the lab), the base of the edited inputs.
const LAB: &str = include_str!("../../blueprints/lab.yaml");
const LAB_INVENTORY: &str = include_str!("../../inventories/lab.yaml");

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `toolkit` in `dir` with `args`, killing it past [`TIME_LIMIT`].
fn toolkit(dir: &Path, args: &[&str]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolkit starts");
    // Pipes are drained on threads so a chatty child cannot block on a full pipe.
    let mut stdout_pipe = child.stdout.take().expect("stdout");
    let mut stderr_pipe = child.stderr.take().expect("stderr");
    let stdout = thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stdout_pipe.read_to_end(&mut text);
        text
    });
    let stderr = thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr_pipe.read_to_end(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`toolkit {}` ran longer than {TIME_LIMIT:?}", args.join(" "));
        }
        thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout.join().expect("stdout thread")).into_owned(),
        stderr: String::from_utf8_lossy(&stderr.join().expect("stderr thread")).into_owned(),
    }
}

/// Writes `files` into a fresh temporary directory.
fn workspace(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).expect("write input");
    }
    dir
}

/// Lints `bp.yaml` holding `bytes`; the run must fail with exit code 1.
fn lint_fails(bytes: &[u8]) -> Run {
    let dir = workspace(&[("bp.yaml", bytes)]);
    let run = toolkit(dir.path(), &["lint", "bp.yaml"]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

/// `text` with `from` (which must occur) replaced by `to`.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "`{from}` is not in the text");
    text.replacen(from, to, 1)
}

#[test]
fn a_valid_blueprint_and_inventory_exit_0() {
    let dir = workspace(&[("bp.yaml", LAB.as_bytes()), ("inv.yaml", LAB_INVENTORY.as_bytes())]);
    let run = toolkit(dir.path(), &["lint", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    assert!(run.stderr.contains("0 error(s)"), "{}", run.stderr);
}

#[test]
fn malformed_yaml_names_file_line_and_column() {
    let run = lint_fails(b"version: 1\ncluster:\n  name: [lab\nnode_groups: []\n");
    assert!(run.stderr.contains("error[yaml-syntax]"), "{}", run.stderr);
    assert!(run.stderr.contains("--> bp.yaml:4:"), "{}", run.stderr);
}

#[test]
fn a_tab_in_indentation_is_a_located_syntax_error() {
    let run = lint_fails(b"version: 1\ncluster:\n\tname: lab\n");
    assert!(run.stderr.contains("error[yaml-syntax]"), "{}", run.stderr);
    assert!(run.stderr.contains("--> bp.yaml:3:"), "{}", run.stderr);
}

#[test]
fn a_wrong_type_is_located_at_its_key() {
    let text = edit(LAB, "    count: 4\n", "    count: many\n");
    let run = lint_fails(text.as_bytes());
    assert!(run.stderr.contains("error[wrong-type]"), "{}", run.stderr);
    assert!(run.stderr.contains("node_groups[1].count"), "{}", run.stderr);
    let line = text.lines().position(|l| l.contains("count: many")).map(|i| i + 1).expect("line");
    assert!(run.stderr.contains(&format!("--> bp.yaml:{line}:12")), "{}", run.stderr);
}

#[test]
fn an_unknown_key_suggests_the_right_one() {
    let text = edit(LAB, "    hostname: head\n", "    hostnme: head\n");
    let run = lint_fails(text.as_bytes());
    assert!(run.stderr.contains("error[unknown-key]: unknown key `hostnme`"), "{}", run.stderr);
    let line = text.lines().position(|l| l.contains("hostnme")).map(|i| i + 1).expect("line");
    assert!(run.stderr.contains(&format!("--> bp.yaml:{line}:5")), "{}", run.stderr);
    assert!(run.stderr.contains("did you mean `hostname`?"), "{}", run.stderr);
}

#[test]
fn an_unknown_value_suggests_the_right_one() {
    let text = edit(LAB, "kind: roce", "kind: roc");
    let run = lint_fails(text.as_bytes());
    assert!(run.stderr.contains("error[unknown-value]"), "{}", run.stderr);
    assert!(run.stderr.contains("did you mean `roce`? one of: infiniband, roce"), "{}", run.stderr);
}

#[test]
fn an_empty_file_is_an_error() {
    let run = lint_fails(b"");
    assert!(run.stderr.contains("error[empty-file]"), "{}", run.stderr);
    assert!(run.stderr.contains("--> bp.yaml"), "{}", run.stderr);
}

#[test]
fn a_whitespace_only_file_is_an_error() {
    let run = lint_fails(b"  \n\t\n   \n");
    assert!(run.stderr.contains("error[empty-file]"), "{}", run.stderr);
}

#[test]
fn non_utf8_bytes_are_located() {
    let run = lint_fails(b"version: 1\ncluster:\n  name: \"\xff\xfe\"\n");
    assert!(run.stderr.contains("error[not-utf8]"), "{}", run.stderr);
    assert!(run.stderr.contains("bp.yaml:3:10"), "{}", run.stderr);
}

#[test]
fn an_alias_bomb_fails_fast() {
    // "Billion laughs": 9 levels of 9 aliases would expand to 9^9 strings.
    let mut text = String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let references = vec![format!("*{}", pair[0]); 9].join(",");
        let _ = writeln!(text, "{}: &{} [{references}]", pair[1], pair[1]);
    }
    let started = Instant::now();
    let run = lint_fails(text.as_bytes());
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(run.stderr.contains("error[yaml-syntax]"), "{}", run.stderr);
    assert!(run.stderr.contains("aliases expand to too many nodes"), "{}", run.stderr);
}

#[test]
fn a_variable_bomb_fails_fast() {
    // One large variable referenced many times would otherwise multiply into gigabytes.
    let big = "x".repeat(1_000_000);
    let references = vec!["\"${big}\""; 5000].join(",");
    let text = format!("version: 1\nvars:\n  big: \"{big}\"\ncluster:\n  name: a\n  description: [{references}]\n");
    let run = lint_fails(text.as_bytes());
    assert!(run.stderr.contains("error[vars-too-large]"), "{}", run.stderr);
}

#[test]
fn deeply_nested_flow_input_is_refused() {
    let text = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let run = lint_fails(text.as_bytes());
    assert!(run.stderr.contains("error[yaml-syntax]"), "{}", run.stderr);
    assert!(run.stderr.contains("nests too deeply"), "{}", run.stderr);
    assert!(run.stderr.contains("bp.yaml:1:129"), "{}", run.stderr);
    // The snippet of a 20,000-character line is left out.
    assert!(run.stderr.len() < 2_000, "{} bytes of stderr", run.stderr.len());
}

#[test]
fn deeply_nested_block_input_is_refused() {
    // `- - - …` nests block sequences; a recursive indexer would overflow the stack.
    let text = format!("{}x\n", "- ".repeat(100_000));
    let run = lint_fails(text.as_bytes());
    assert!(run.stderr.contains("error[yaml-syntax]"), "{}", run.stderr);
    assert!(run.stderr.contains("nests too deeply"), "{}", run.stderr);
}

#[test]
fn a_list_is_not_a_blueprint() {
    let run = lint_fails(b"- version: 1\n- cluster: {}\n");
    assert!(run.stderr.contains("error[not-a-mapping]"), "{}", run.stderr);
    assert!(run.stderr.contains("--> bp.yaml:1:1"), "{}", run.stderr);
}

#[test]
fn an_inline_secret_is_refused_without_being_printed() {
    let inventory = format!(
        "{LAB_INVENTORY}bmcs:\n  node01:\n    endpoint: https://10.11.0.11\n    username: {{ env: BMC_USER }}\n    password: hunter2\n"
    );
    let dir = workspace(&[("bp.yaml", LAB.as_bytes()), ("inv.yaml", inventory.as_bytes())]);
    for output in ["text", "json"] {
        let run = toolkit(dir.path(), &["lint", "bp.yaml", "-i", "inv.yaml", "--output", output]);
        assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(all.contains("inline-secret"), "{all}");
        assert!(all.contains("secrets are never written inline"), "{all}");
        assert!(all.contains("inv.yaml"), "{all}");
        assert!(!all.contains("hunter2"), "the secret leaked:\n{all}");
    }
}

#[test]
fn a_numeric_inline_secret_is_not_printed_either() {
    let inventory = format!(
        "{LAB_INVENTORY}bmcs:\n  node01:\n    endpoint: https://10.11.0.11\n    username: {{ env: BMC_USER }}\n    password: 31415.9265\n"
    );
    let dir = workspace(&[("bp.yaml", LAB.as_bytes()), ("inv.yaml", inventory.as_bytes())]);
    let run = toolkit(dir.path(), &["lint", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    assert!(run.stderr.contains("inline-secret"), "{}", run.stderr);
    assert!(!run.stderr.contains("31415"), "the secret leaked:\n{}", run.stderr);
}

/// The lab with six semantic errors across the blueprint's parts.
fn broken_lab() -> String {
    // The lab has no shared filesystem (containers cannot serve NFS); this one has one,
    // with a relative mount point.
    let mut text = edit(
        &edit(LAB, "roles: [controller, database, login]", "roles: [controller, database, login, storage]"),
        "\nscheduler:\n",
        "\nstorage:\n  filesystems:\n    - { name: home, kind: nfs, server_group: head, export: /export/home, mount: /home, tier: home }\n\nscheduler:\n",
    );
    for (from, to) in [
        ("name: lab\n", "name: Lab_Cluster\n"),
        ("model: h100", "model: h10"),
        ("ecn: true", "ecn: false"),
        ("mount: /home", "mount: home"),
        ("groups: [gpu]", "groups: [gpus]"),
        (
            "guaranteed_gpus: 8, borrow: true, fairshare: 50 }\n  - { name: team-b",
            "guaranteed_gpus: 12, borrow: true, fairshare: 50 }\n  - { name: team-b",
        ),
    ] {
        text = edit(&text, from, to);
    }
    text
}

#[test]
fn diagnostics_of_a_broken_blueprint() {
    let dir = workspace(&[("bp.yaml", broken_lab().as_bytes())]);
    let run = toolkit(dir.path(), &["lint", "bp.yaml"]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    assert!(run.stdout.is_empty(), "text diagnostics go to stderr: {}", run.stdout);
    let stderr = run.stderr.replace(&dir.path().display().to_string(), "[TMP]");
    insta::assert_snapshot!("broken_lab", stderr);
}

#[test]
fn diagnostics_of_an_inconsistent_inventory() {
    let inventory = edit(
        &edit(
            &edit(
                LAB_INVENTORY,
                "  node04:\n    address: 10.10.0.14\n    rail_macs: { 0: \"02:42:0a:c8:00:05\", 1: \"02:42:0a:c8:00:25\" }\n    fake_gpu_devices: true\n",
                "",
            ),
            "leaf1:",
            "leaf9:",
        ),
        "10.10.0.13",
        "10.10.0.12",
    );
    let dir = workspace(&[("bp.yaml", LAB.as_bytes()), ("inv.yaml", inventory.as_bytes())]);
    let run = toolkit(dir.path(), &["lint", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let stderr = run.stderr.replace(&dir.path().display().to_string(), "[TMP]");
    insta::assert_snapshot!("inconsistent_inventory", stderr);
}

#[test]
fn json_output_lists_the_diagnostics() {
    let dir = workspace(&[("bp.yaml", broken_lab().as_bytes())]);
    let run = toolkit(dir.path(), &["lint", "bp.yaml", "--output", "json"]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("stdout is JSON");
    assert_eq!(json["format_version"], 1);
    let diagnostics = json["diagnostics"].as_array().expect("a diagnostics array");
    let ids: Vec<&str> = diagnostics.iter().filter_map(|d| d["id"].as_str()).collect();
    for id in
        ["invalid-cluster-name", "unknown-gpu-model", "roce-lossless-incomplete", "invalid-mount", "unknown-group"]
    {
        assert!(ids.contains(&id), "`{id}` missing from {ids:?}");
    }
    let gpu = diagnostics.iter().find(|d| d["id"] == "unknown-gpu-model").expect("unknown-gpu-model");
    assert_eq!(gpu["severity"], "error");
    assert_eq!(gpu["file"], "bp.yaml");
    assert_eq!(gpu["key_path"], "node_groups[1].gpu.model");
    assert_eq!(gpu["position"]["line"], 29);
    assert!(gpu["help"].as_str().is_some_and(|h| h.contains("did you mean `h100`?")), "{gpu}");
}

#[test]
fn json_output_of_a_clean_blueprint_has_its_warnings() {
    let dir = workspace(&[("bp.yaml", LAB.as_bytes())]);
    let run = toolkit(dir.path(), &["lint", "bp.yaml", "--output", "json"]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("stdout is JSON");
    let diagnostics = json["diagnostics"].as_array().expect("a diagnostics array");
    assert!(diagnostics.iter().all(|d| d["severity"] == "warning"), "{json}");
}
