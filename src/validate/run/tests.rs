//! Unit tests of the runner over a scripted transport (the integration tests in
//! `tests/it/validate.rs` run the same code against real sshd hosts).

// Values are computed from small integers and compare exactly.
#![allow(clippy::float_cmp)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::*;
use crate::blueprint::schema::{AcceptanceMode, ValidatorRef};
use crate::model::Model;
use crate::results::{Measurement, SubjectResult};
use crate::source::SourceFile;
use crate::transport::{Connector, Executor, ExitStatus, Output, TransportError};
use crate::validate::catalog::Catalog;
use crate::validate::expr;
use crate::validate::spec::Requirement;
use crate::validate::subjects::Site;

type Respond = dyn Fn(&str, &str) -> (u32, String, String) + Send + Sync;

/// Answers every command from a closure of (host, script); logs what ran where.
struct Fake {
    respond: Arc<Respond>,
    log: Arc<Mutex<Vec<(String, String)>>>,
    unreachable: BTreeSet<String>,
}

struct FakeHost {
    name: String,
    respond: Arc<Respond>,
    log: Arc<Mutex<Vec<(String, String)>>>,
}

impl Executor for FakeHost {
    fn host(&self) -> &str {
        &self.name
    }

    async fn exec(&self, argv: &[String]) -> Result<Output, TransportError> {
        assert_eq!(&argv[..5], ["timeout", "--kill-after=5", argv[2].as_str(), "sh", "-c"], "wrapped in timeout");
        let script = argv[5].clone();
        self.log.lock().expect("log").push((self.name.clone(), script.clone()));
        let (code, stdout, stderr) = (self.respond)(&self.name, &script);
        Ok(Output { status: ExitStatus::Code(code), stdout: stdout.into_bytes(), stderr: stderr.into_bytes() })
    }

    async fn exec_with_input(&self, argv: &[String], _input: &[u8]) -> Result<Output, TransportError> {
        self.exec(argv).await
    }
}

impl Connector for Fake {
    type Executor = FakeHost;

    async fn connect(&self, host: &str) -> Result<Arc<FakeHost>, Arc<TransportError>> {
        if self.unreachable.contains(host) {
            return Err(Arc::new(TransportError::UnknownTarget { host: host.to_owned() }));
        }
        Ok(Arc::new(FakeHost { name: host.to_owned(), respond: Arc::clone(&self.respond), log: Arc::clone(&self.log) }))
    }
}

fn fake(respond: impl Fn(&str, &str) -> (u32, String, String) + Send + Sync + 'static) -> Fake {
    Fake { respond: Arc::new(respond), log: Arc::new(Mutex::new(Vec::new())), unreachable: BTreeSet::new() }
}

/// The lab blueprint without its own validator overrides (these tests bring their
/// own catalog, which lacks the validators the overrides name).
fn lab() -> Model {
    let mut blueprint = crate::blueprint::load(std::path::Path::new("blueprints/lab.yaml")).expect("loads").blueprint;
    blueprint.acceptance.validators.clear();
    crate::model::expand(&blueprint).expect("expands")
}

fn spec(text: &str) -> ValidatorSpec {
    ValidatorSpec::from_source(&SourceFile::new("t.yaml", text.to_owned()))
        .unwrap_or_else(|problems| panic!("{}", problems.render()))
}

fn catalog(specs: Vec<ValidatorSpec>) -> Catalog {
    let origins = specs.iter().map(|s| s.id.clone()).collect();
    Catalog { specs, origins }
}

fn options() -> RunOptions {
    RunOptions { parallel: 4, ..RunOptions::default() }
}

async fn run_all(catalog: &Catalog, model: &Model, site: &Site, connector: &Fake, options: &RunOptions) -> RunOutcome {
    let planned = plan(catalog, model, site, options).unwrap_or_else(|problems| panic!("{problems:?}"));
    execute(&planned, model, site, connector, options).await
}

const LINKS: &str = "id: links
title: Links
failure: link-down
docs: { what: a, why: b, fix: c }
scope: node
command: ip -j link show {{ node.rails[0].netdev }}
parser: json
measurements:
  - { name: up, label: rails up, items: output, where: 'item.operstate == \"UP\"', aggregate: count }
  - { name: mtu, label: MTU of the first rail, value: 'output[0].mtu' }
thresholds:
  - { measurement: up, comparison: '>=', value: 1, reference: the rail is up }
  - { measurement: mtu, comparison: '==', derived: host_mtu }
explain: 'saw {{ output | map(attribute=\"ifname\") | join(\",\") }}'
";

fn link(state: &str, mtu: u32) -> String {
    format!("[{{\"ifname\": \"rail0\", \"operstate\": \"{state}\", \"mtu\": {mtu}}}]")
}

#[tokio::test]
async fn node_subjects_pass_fail_error_and_skip() {
    let model = lab();
    let mut site = Site::everything(&model);
    site.hosts.remove("node04");
    let connector = fake(|host, script| {
        assert_eq!(script, "ip -j link show rail0");
        match host {
            "node01" => (0, link("UP", 9000), String::new()),
            "node02" => (0, link("DOWN", 1500), String::new()),
            _ => (0, "[{\"ifname\": \"rail0\",\n \"mtu\": }]".to_owned(), String::new()),
        }
    });
    let outcome = run_all(&catalog(vec![spec(LINKS)]), &model, &site, &connector, &options()).await;
    let result = &outcome.validators[0];
    let by_subject: BTreeMap<&str, &SubjectResult> = result.subjects.iter().map(|s| (s.subject.as_str(), s)).collect();
    assert_eq!(by_subject["node01"].verdict, Verdict::Passed);
    let node01 = by_subject["node01"];
    assert_eq!(
        node01.measurements[1].threshold.as_ref().map(|t| t.source.to_string()),
        Some("model: rail host MTU 9000".to_owned())
    );
    let failed = by_subject["node02"];
    assert_eq!(failed.verdict, Verdict::Failed);
    assert_eq!(
        failed.reason.as_deref(),
        Some("rails up is 0, required >= 1 (default: the rail is up): saw rail0"),
        "the first failing threshold, then the explanation"
    );
    let evidence = failed.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.command, "ip -j link show rail0");
    assert_eq!(evidence.exit_code, Some(0));
    let broken = by_subject["node03"];
    assert_eq!(broken.verdict, Verdict::Error);
    assert!(
        broken
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("json parser: could not parse line 2, column 9: expected value")),
        "{broken:?}"
    );
    assert_eq!(by_subject["node04"].verdict, Verdict::Skipped);
    assert_eq!(by_subject["node04"].reason.as_deref(), Some("`node04` is not in the inventory"));
    assert_eq!(outcome.node_verdicts["node01"]["links"], Verdict::Passed);
    assert_eq!(outcome.node_verdicts["node02"]["links"], Verdict::Failed);
    assert!(!outcome.node_verdicts.contains_key("node03"), "an error says nothing about the node");
    let results = crate::results::Results::new(
        crate::results::Run {
            cluster: "lab".to_owned(),
            blueprint: crate::results::InputFile { path: "b".to_owned(), sha256: "0".repeat(64) },
            inventory: None,
            toolkit_version: "0".to_owned(),
            started: jiff::Timestamp::UNIX_EPOCH,
            finished: jiff::Timestamp::UNIX_EPOCH,
        },
        outcome.validators.clone(),
    );
    assert!(results.problems().is_empty(), "a valid results document: {:?}", results.problems());
}

#[tokio::test]
async fn failed_commands_timeouts_and_unreachable_hosts_are_errors() {
    let model = lab();
    let site = Site::everything(&model);
    let mut connector = fake(|host, _| match host {
        "node01" => (127, String::new(), "sh: 1: ip: not found\n".to_owned()),
        "node02" => (124, String::new(), String::new()),
        _ => (0, link("UP", 9000), String::new()),
    });
    connector.unreachable.insert("node03".to_owned());
    let outcome = run_all(&catalog(vec![spec(LINKS)]), &model, &site, &connector, &options()).await;
    let reasons: Vec<(Verdict, String)> =
        outcome.validators[0].subjects.iter().map(|s| (s.verdict, s.reason.clone().unwrap_or_default())).collect();
    assert_eq!(
        reasons[0],
        (Verdict::Error, "`ip -j link show rail0` failed (exit status 127): sh: 1: ip: not found".to_owned())
    );
    assert_eq!(reasons[1], (Verdict::Error, "timed out after 300 s".to_owned()));
    assert!(reasons[2].1.starts_with("cannot reach `node03`: no SSH target named `node03`"), "{:?}", reasons[2]);
    assert_eq!(reasons[3].0, Verdict::Passed);
}

#[tokio::test]
async fn the_second_pass_names_the_bad_node() {
    let model = lab();
    let site = Site::everything(&model);
    let pairwise = spec(
        "id: pairs
title: Pairs
failure: slow
docs: { what: a, why: b, fix: c }
scope: node-pair
pairing: disjoint
runs_on: controller
second_pass: true
command: bench {{ node.name }} {{ peer.name }}
parser: json
measurements:
  - { name: busbw, label: bus bandwidth, unit: GB/s, value: output.busbw }
thresholds:
  - { measurement: busbw, comparison: '>=', derived: nccl_busbw_inter_node }
",
    );
    // node03 is bad: every pair with it is slow.
    let connector = fake(|host, script| {
        assert_eq!(host, "head", "pairs run from the controller");
        let busbw = if script.contains("node03") { 12.5 } else { 45.0 };
        (0, format!("{{\"busbw\": {busbw}}}"), String::new())
    });
    let outcome = run_all(&catalog(vec![pairwise]), &model, &site, &connector, &options()).await;
    let subjects: Vec<(&str, Verdict)> =
        outcome.validators[0].subjects.iter().map(|s| (s.subject.as_str(), s.verdict)).collect();
    assert_eq!(
        subjects,
        [
            ("node01+node02", Verdict::Passed),
            ("node03+node04", Verdict::Failed),
            ("node03+node01 (second pass)", Verdict::Failed),
            ("node04+node02 (second pass)", Verdict::Passed),
        ]
    );
    let reason = outcome.validators[0].subjects[1].reason.as_deref().unwrap_or_default();
    assert_eq!(
        reason,
        "bus bandwidth is 12.5 GB/s, required >= 40 GB/s (model: 2 rails x 200 Gb/s / 8 x 0.8 efficiency) — second pass: \
         node03 bad (node03 failed again with node01; node04 passed with node02)"
    );
    assert_eq!(outcome.node_verdicts["node03"]["pairs"], Verdict::Failed);
    for node in ["node01", "node02", "node04"] {
        assert_eq!(outcome.node_verdicts[node]["pairs"], Verdict::Passed, "{node}");
    }
}

#[tokio::test]
async fn a_pair_cleared_by_the_second_pass_is_a_warning() {
    let model = lab();
    let site = Site::everything(&model);
    let pairwise = spec(
        "id: pairs
title: Pairs
failure: slow
docs: { what: a, why: b, fix: c }
scope: node-pair
pairing: disjoint
second_pass: true
command: bench {{ peer.name }}
parser: json
measurements:
  - { name: busbw, label: bus bandwidth, unit: GB/s, value: output.busbw }
thresholds:
  - { measurement: busbw, comparison: '>=', value: 40, reference: r }
",
    );
    let calls = Arc::new(Mutex::new(0));
    let counter = Arc::clone(&calls);
    let connector = fake(move |host, _| {
        *counter.lock().expect("count") += 1;
        // node03+node04 is slow once (a flaky first run); everything else is fine.
        let busbw = if host == "node03" && *counter.lock().expect("count") <= 2 { 1.0 } else { 50.0 };
        (0, format!("{{\"busbw\": {busbw}}}"), String::new())
    });
    let outcome =
        run_all(&catalog(vec![pairwise]), &model, &site, &connector, &RunOptions { parallel: 1, ..options() }).await;
    let pair = &outcome.validators[0].subjects[1];
    assert_eq!(pair.verdict, Verdict::Warning);
    assert!(pair.reason.as_deref().is_some_and(|r| r.contains("second pass cleared both nodes")), "{pair:?}");
    assert!(outcome.node_verdicts.values().all(|by_id| by_id["pairs"] == Verdict::Passed));
}

#[tokio::test]
async fn steps_run_in_order_and_only_when_they_apply() {
    let model = lab();
    let site = Site::everything(&model);
    let stepped = spec(
        "id: stepped
title: Steps
failure: bad
docs: { what: a, why: b, fix: c }
scope: cluster
steps:
  - { name: first, command: echo one, parser: lines }
  - { name: ib, command: ibstat, parser: text, when: [infiniband] }
  - { name: second, command: 'echo {{ hostlist }}', parser: lines }
measurements:
  - { name: lines, label: lines, value: '(output.first | length) + (output.second | length)' }
  - { name: first_status, label: exit status of the first step, value: status.first }
thresholds:
  - { measurement: lines, comparison: '==', value: 2, reference: r }
",
    );
    // As a shell would: the quotes around the hostlist are not part of the word.
    let connector =
        fake(|_, script| (0, format!("{}\n", script.trim_start_matches("echo ").trim_matches('\'')), String::new()));
    let outcome = run_all(&catalog(vec![stepped]), &model, &site, &connector, &options()).await;
    let subject = &outcome.validators[0].subjects[0];
    assert_eq!(subject.subject, "lab");
    assert_eq!(subject.verdict, Verdict::Passed, "{subject:?}");
    let log = connector.log.lock().expect("log").clone();
    assert_eq!(log, [("head".to_owned(), "echo one".to_owned()), ("head".to_owned(), "echo 'node[01-04]'".to_owned())]);
    let evidence = subject.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.command, "echo one\necho 'node[01-04]'");
    assert_eq!(evidence.output_tail, ["$ echo one", "one", "$ echo 'node[01-04]'", "node[01-04]"]);
}

#[tokio::test]
async fn a_server_runs_on_the_peer_before_the_client() {
    let model = lab();
    let site = Site::everything(&model);
    let rails = spec(
        "id: bw
title: Bandwidth
failure: slow
docs: { what: a, why: b, fix: c }
scope: rail
server: { command: 'serve {{ rail.peer_netdev }}', ready: 0.05 }
command: 'connect {{ rail.peer_address }}'
parser: json
measurements:
  - { name: gbps, label: bandwidth, unit: Gb/s, value: output.gbps }
thresholds:
  - { measurement: gbps, comparison: '>=', derived: rdma_bandwidth_gbps }
",
    );
    let connector = fake(|_, script| {
        if script.starts_with("serve") {
            (0, "served\n".to_owned(), String::new())
        } else {
            (0, "{\"gbps\": 190}".to_owned(), String::new())
        }
    });
    let outcome = run_all(
        &catalog(vec![rails]),
        &model,
        &site,
        &connector,
        &RunOptions { nodes: Some(["node01".to_owned(), "node02".to_owned()].into()), ..options() },
    )
    .await;
    let subjects = &outcome.validators[0].subjects;
    assert_eq!(
        subjects.iter().map(|s| s.subject.as_str()).collect::<Vec<_>>(),
        ["node01+node02/rail0", "node01+node02/rail1"]
    );
    assert!(subjects.iter().all(|s| s.verdict == Verdict::Passed), "{subjects:?}");
    let log = connector.log.lock().expect("log").clone();
    assert!(log.contains(&("node02".to_owned(), "serve rail0".to_owned())), "{log:?}");
    assert!(log.contains(&("node01".to_owned(), "connect 10.200.0.3".to_owned())), "{log:?}");
    let tail = &subjects[0].evidence.as_ref().expect("evidence").output_tail;
    assert!(tail.iter().any(|line| line == "--- server on node02: serve rail0"), "{tail:?}");
    assert!(outcome.node_verdicts.is_empty() || outcome.node_verdicts.values().all(|v| v["bw"] == Verdict::Passed));
}

#[test]
fn plan_selects_validators_and_applies_blueprint_overrides() {
    let mut model = lab();
    let links = spec(LINKS);
    let other =
        spec(&LINKS.replace("id: links", "id: other").replace("measurements:", "params: { size: 4 }\nmeasurements:"));
    let catalog = catalog(vec![links, other]);
    let site = Site::everything(&model);
    let planned = plan(&catalog, &model, &site, &options()).expect("plans");
    assert_eq!(planned.len(), 2);
    model.blueprint.acceptance.validators = vec![
        ValidatorRef { id: "links".to_owned(), thresholds: [("up".to_owned(), 2.0)].into(), skip: false },
        ValidatorRef { id: "other".to_owned(), thresholds: [("size".to_owned(), 8.0)].into(), skip: true },
    ];
    let planned = plan(&catalog, &model, &site, &options()).expect("plans");
    let Disposition::Run { limits, .. } = &planned[0].disposition else { panic!("runs") };
    assert_eq!(
        limits[0].source,
        LimitSource::Blueprint { value: 2.0, key: "acceptance.validators[0].thresholds.up".to_owned() }
    );
    assert!(
        matches!(&planned[1].disposition, Disposition::Skip(reason) if reason.contains("acceptance.validators[1].skip"))
    );
    // --only runs what it names, even what the blueprint skips.
    let only = RunOptions { only: Some(["other".to_owned()].into()), ..options() };
    let planned = plan(&catalog, &model, &site, &only).expect("plans");
    assert_eq!(planned.len(), 1);
    let Disposition::Run { params, .. } = &planned[0].disposition else { panic!("runs") };
    assert_eq!(params["size"], 8.0);
    // explicit mode runs only listed validators.
    model.blueprint.acceptance.mode = AcceptanceMode::Explicit;
    model.blueprint.acceptance.validators.truncate(1);
    let planned = plan(&catalog, &model, &site, &options()).expect("plans");
    assert_eq!(planned.iter().map(|p| p.spec.id.as_str()).collect::<Vec<_>>(), ["links"]);
}

#[test]
fn plan_refuses_unknown_names_all_at_once() {
    let mut model = lab();
    model.blueprint.acceptance.validators = vec![
        ValidatorRef { id: "linkz".to_owned(), thresholds: BTreeMap::new(), skip: false },
        ValidatorRef { id: "links".to_owned(), thresholds: [("upp".to_owned(), 1.0)].into(), skip: false },
    ];
    let catalog = catalog(vec![spec(LINKS)]);
    let options =
        RunOptions { only: Some(["nope".to_owned()].into()), nodes: Some(["node1".to_owned()].into()), ..options() };
    let problems = plan(&catalog, &model, &Site::everything(&model), &options).expect_err("refused");
    assert_eq!(
        problems,
        [
            "--only: unknown validator `nope`; known: links",
            "--nodes: `node1` is not a node of `lab` (did you mean `node01`?)",
            "acceptance.validators[0].id: unknown validator `linkz` (did you mean `links`?)",
            "acceptance.validators[1].thresholds.upp: `links` has no threshold or parameter `upp`; it has: mtu, up",
        ]
    );
}

#[test]
fn requirements_the_cluster_does_not_meet_skip_the_validator() {
    let model = lab();
    assert_eq!(unmet(&model, &[Requirement::Roce, Requirement::Gpu, Requirement::Slurm]), None);
    assert_eq!(
        unmet(&model, &[Requirement::Infiniband]).as_deref(),
        Some("applies to InfiniBand fabrics; this one is RoCE")
    );
    let ib = spec(&LINKS.replace("scope: node", "scope: node\nrequires: [infiniband]"));
    let catalog = catalog(vec![ib]);
    let planned = plan(&catalog, &model, &Site::everything(&model), &options()).expect("plans");
    assert!(matches!(&planned[0].disposition, Disposition::Skip(reason) if reason.contains("InfiniBand")));
}

#[test]
fn aggregates() {
    let context = expr::to_value(&json!({ "output": [
        { "v": 3, "name": "a" }, { "v": null, "name": "b" }, { "v": 1, "name": "a" }, { "v": 8, "name": "c" }
    ]}));
    let measured = |aggregate: &str, filter: &str| {
        let text = format!(
            "id: t\ntitle: t\nfailure: t\ndocs: {{ what: a, why: b, fix: c }}\nscope: node\ncommand: x\nparser: json\n\
             measurements:\n  - {{ name: m, label: m, items: output, aggregate: {aggregate}, value: {}, where: '{filter}' }}\n",
            if aggregate == "distinct" { "item.name" } else { "item.v" }
        );
        measure(&spec(&text).measurements[0], &context)
    };
    assert_eq!(measured("count", "true"), Ok(4.0));
    assert_eq!(measured("count", "item.v is not none and item.v > 2"), Ok(2.0));
    assert_eq!(measured("sum", "true"), Ok(12.0));
    assert_eq!(measured("min", "true"), Ok(1.0));
    assert_eq!(measured("max", "true"), Ok(8.0));
    assert_eq!(measured("mean", "true"), Ok(4.0));
    assert_eq!(measured("distinct", "true"), Ok(3.0));
    assert_eq!(measured("sum", "false"), Ok(0.0));
    assert!(measured("max", "false").is_err_and(|e| e.starts_with("no values")));
}

fn recorded(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[tokio::test]
async fn builtin_explanations_name_what_is_wrong_in_recorded_failures() {
    let model = lab();
    let site = Site::everything(&model);
    let builtins = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    let chosen: Vec<ValidatorSpec> =
        ["gpu-inventory", "mtu"].iter().map(|id| builtins.get(id).expect("built-in").clone()).collect();
    // The lab's nodes have 4 GPUs; the recording is of an 8-GPU DGX. Its first rail
    // pair sees a 1400 MTU on the way, the second has no route.
    let connector = fake(|host, script| {
        let text = if script == "nvidia-smi" {
            recorded("nvidia_smi_8xh100_table.txt")
        } else if host == "node01" {
            recorded("ping_iputils_20221126_mtu1400_df_1472_fail.txt")
        } else {
            recorded("ping_iputils_20221126_network_unreachable.txt")
        };
        // ping exits 1 when packets were lost or could not be sent.
        let code = u32::from(script != "nvidia-smi");
        (code, text, String::new())
    });
    let three = ["node01", "node02", "node03"].iter().map(|name| (*name).to_owned()).collect();
    let only = RunOptions { nodes: Some(three), ..options() };
    let outcome = run_all(&catalog(chosen), &model, &site, &connector, &only).await;
    let inventory = &outcome.validators[0].subjects[0];
    assert_eq!(
        inventory.reason.as_deref(),
        Some(
            "GPUs seen by the driver is 8, required == 4 (model: node group `gpu`: 4 x h100 per node): expected 4 x \
             NVIDIA H100 80GB HBM3, seen 8: NVIDIA H100 80GB HBM3"
        )
    );
    let mtu = &outcome.validators[1].subjects;
    assert_eq!(mtu[0].subject, "node01+node02/rail0");
    assert_eq!(
        mtu[0].reason.as_deref(),
        Some(
            "packet loss at full MTU with DF set is 100 %, required <= 0 % (default: every full-size frame crosses the \
             rail unfragmented): ping: local error: message too long, mtu=1400"
        )
    );
    assert_eq!(mtu[1].subject, "node02+node03/rail0");
    assert_eq!(
        mtu[1].reason.as_deref(),
        Some(
            "ping could not send is 1, required <= 0 (default: the rail has an address and a route to the peer): ping: \
             connect: Network is unreachable"
        )
    );
}

/// The lab with 8 GPUs per node (as the recorded DGX) and `software` as given.
fn lab_with_software(software: &str) -> Model {
    let mut loaded = crate::blueprint::load(std::path::Path::new("blueprints/lab.yaml")).expect("loads");
    loaded.blueprint.node_groups[1].gpu.as_mut().expect("gpu").count = 8;
    loaded.blueprint.software = Some(serde_norway::from_str(software).expect("software parses"));
    // Only the validators under test are in the catalog.
    loaded.blueprint.acceptance.validators.clear();
    crate::model::expand(&loaded.blueprint).expect("expands")
}

/// Answers `nvidia-smi` with the recorded 8 x H100 table (driver 560.35.03) and
/// `dcgmi diag` with a recorded level-3 run, logging what ran.
fn recorded_gpu_node() -> Fake {
    fake(|_, script| {
        let text = if script == "nvidia-smi" {
            recorded("nvidia_smi_8xh100_table.txt")
        } else {
            recorded("dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt")
        };
        (0, text, String::new())
    })
}

fn builtin_catalog(ids: &[&str]) -> Catalog {
    let builtins = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    catalog(ids.iter().map(|id| builtins.get(id).expect("built-in").clone()).collect())
}

#[tokio::test]
async fn gpu_inventory_fails_a_driver_other_than_the_blueprints_naming_both() {
    let model = lab_with_software("os: debian12\ngpu_driver: { version: 550.127.05 }\n");
    let site = Site::everything(&model);
    let outcome = run_all(&builtin_catalog(&["gpu-inventory"]), &model, &site, &recorded_gpu_node(), &options()).await;
    let node = &outcome.validators[0].subjects[0];
    assert_eq!(node.verdict, Verdict::Failed, "{node:?}");
    assert_eq!(
        node.reason.as_deref(),
        Some(
            "driver is the blueprint's is 0, required == 1 (default: the blueprint's software.gpu_driver): driver \
             560.35.03 is running, the blueprint's software.gpu_driver is 550.127.05"
        )
    );

    // A branch accepts any release of it; the recorded 560.35.03 is of branch 560.
    let branch = lab_with_software("os: debian12\ngpu_driver: { branch: 560 }\n");
    let outcome = run_all(&builtin_catalog(&["gpu-inventory"]), &branch, &site, &recorded_gpu_node(), &options()).await;
    let node = &outcome.validators[0].subjects[0];
    assert_eq!(node.verdict, Verdict::Passed, "{node:?}");
    assert!(node.measurements.iter().any(|m| m.name == "driver is the blueprint's" && m.value == 1.0), "{node:?}");
}

#[tokio::test]
async fn gpu_inventory_without_a_declared_driver_only_records_it() {
    let model = lab_with_software("os: debian12\n");
    let site = Site::everything(&model);
    let outcome = run_all(&builtin_catalog(&["gpu-inventory"]), &model, &site, &recorded_gpu_node(), &options()).await;
    let node = &outcome.validators[0].subjects[0];
    assert_eq!(node.verdict, Verdict::Passed, "{node:?}");
    assert!(!node.measurements.iter().any(|m| m.name == "driver is the blueprint's"), "{node:?}");
}

#[tokio::test]
async fn dcgm_diag_runs_at_the_blueprints_level() {
    let model =
        lab_with_software("os: debian12\ngpu_driver: { version: 550.127.05 }\ndcgm: { major: 4, diag_level: 2 }\n");
    let site = Site::everything(&model);
    let connector = recorded_gpu_node();
    let outcome = run_all(&builtin_catalog(&["dcgm-diag"]), &model, &site, &connector, &options()).await;
    let ran: Vec<String> = connector.log.lock().expect("log").iter().map(|(_, script)| script.clone()).collect();
    assert!(!ran.is_empty() && ran.iter().all(|script| script == "dcgmi diag -r 2"), "{ran:?}");
    let node = &outcome.validators[0].subjects[0];
    assert!(node.measurements.iter().any(|m| m.name == "DCGM diagnostic level run" && m.value == 2.0), "{node:?}");

    // Without a DCGM level in the software section, the validator's default (3) runs.
    let lab = lab_with_software("os: debian12\n");
    let connector = recorded_gpu_node();
    run_all(&builtin_catalog(&["dcgm-diag"]), &lab, &Site::everything(&lab), &connector, &options()).await;
    let ran: Vec<String> = connector.log.lock().expect("log").iter().map(|(_, script)| script.clone()).collect();
    assert!(!ran.is_empty() && ran.iter().all(|script| script == "dcgmi diag -r 3"), "{ran:?}");
}

/// The lab with a Lustre filesystem mounted by its GPU nodes, `expected` as given.
fn lab_with_lustre(expected: Option<crate::blueprint::schema::FilesystemExpectation>) -> Model {
    let mut model = lab();
    let gpu = model.groups.iter().position(|group| group.name == "gpu").expect("gpu group");
    model.filesystems.push(crate::model::Filesystem {
        name: "lustre".to_owned(),
        kind: crate::blueprint::schema::FilesystemKind::Lustre,
        server: None,
        export: None,
        source: "10.30.0.10@o2ib:/lustre".to_owned(),
        mount: "/lustre".to_owned(),
        options: "flock,_netdev,nofail".to_owned(),
        client_groups: vec![gpu],
        tier: crate::blueprint::schema::Tier::Scratch,
        expected,
    });
    // The recordings are of 2-node runs, IOR with one task per node.
    model.blueprint.acceptance.validators.push(ValidatorRef {
        id: "storage-ior".to_owned(),
        thresholds: [("tasks_per_node".to_owned(), 1.0)].into(),
        skip: false,
    });
    model
}

fn storage_benchmarks() -> Catalog {
    let builtins = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    catalog(["storage-ior", "storage-mdtest"].iter().map(|id| builtins.get(id).expect("built-in").clone()).collect())
}

/// Two nodes, as in the recordings.
fn two_nodes() -> RunOptions {
    RunOptions { nodes: Some(["node01".to_owned(), "node02".to_owned()].into()), ..options() }
}

/// Answers the `command -v` lookup with `missing`, IOR and mdtest with `ior` and `mdtest`.
fn storage_host(missing: &'static str, ior: String, mdtest: String) -> Fake {
    fake(move |host, script| {
        assert_eq!(host, "head", "Slurm jobs start on the controller");
        if script.contains("for program in") {
            (0, missing.to_owned(), String::new())
        } else if script.contains(" ior -a POSIX ") {
            (0, ior.clone(), String::new())
        } else if script.contains(" mdtest -F ") {
            (0, mdtest.clone(), String::new())
        } else {
            panic!("unexpected script {script}")
        }
    })
}

#[tokio::test]
async fn storage_benchmarks_pass_recorded_outputs_above_the_floors() {
    let model = lab_with_lustre(None);
    let site = Site::everything(&model);
    let ior = recorded("ior_3.3.0_2node_lustre_stampede2_posix_ssf.txt");
    let mdtest = recorded("mdtest_1.9.3_2node_gpfs_ccr_verbose.txt");
    let connector = storage_host("", ior, mdtest);
    let outcome = run_all(&storage_benchmarks(), &model, &site, &connector, &two_nodes()).await;
    let ior = &outcome.validators[0].subjects[0];
    assert_eq!((ior.subject.as_str(), ior.verdict), ("lab", Verdict::Passed), "{ior:?}");
    let by_label: BTreeMap<&str, &Measurement> = ior.measurements.iter().map(|m| (m.name.as_str(), m)).collect();
    // 426.77 MiB/s = 447.50 MB/s as IOR itself prints; 332.55 MiB/s = 348.70 MB/s.
    let write = by_label["aggregate write, mean over repetitions"];
    assert!((write.value - 0.447_501).abs() < 1e-6, "{write:?}");
    assert!((by_label["aggregate read, mean over repetitions"].value - 0.348_704).abs() < 1e-6);
    assert_eq!(by_label["nodes in the IOR job (tasks / tasks per node)"].value, 2.0);
    let floor = write.threshold.as_ref().expect("a limit");
    assert_eq!(floor.value, 0.2);
    assert_eq!(
        floor.source.to_string(),
        "model: `lustre` declares no `expected.write_gb_per_s`: 0.2 GB/s write floor of any working shared filesystem"
    );
    let mdtest = &outcome.validators[1].subjects[0];
    assert_eq!(mdtest.verdict, Verdict::Passed, "{mdtest:?}");
    let values: Vec<(&str, f64)> = mdtest.measurements.iter().map(|m| (m.name.as_str(), m.value)).collect();
    assert_eq!(
        values,
        [
            ("file creations per second, mean over iterations", 632.114),
            ("file stats per second, mean over iterations", 28997.226),
            ("file removals per second, mean over iterations", 601.848),
            ("nodes in the mdtest job", 2.0),
        ]
    );
    let log = connector.log.lock().expect("log").clone();
    assert_eq!(log.len(), 4, "a lookup and a job per validator: {log:?}");
    assert_eq!(
        log[0].1,
        "srun --nodes=2 --nodelist='node[01-02]' --ntasks-per-node=1 --immediate=60 sh -c 'for program in ior; do \
         command -v \"$program\" >/dev/null 2>&1 || echo \"$(hostname -s) $program\"; done'",
        "looked up on the compute nodes, where the job runs"
    );
    let job = &log[1].1;
    assert!(job.starts_with("first=node01\ndir=/lustre/.toolkit-ior.$(date +%s).$$\n"), "{job}");
    assert!(
        job.contains(
            "srun --nodes=2 --nodelist='node[01-02]' --ntasks-per-node=1 --immediate=60 --mpi=pmix ior -a POSIX -F -C -e -w -r -i 1 -t 4m -b 1024m -o \"$dir/ior\""
        ),
        "{job}"
    );
    assert!(job.contains("trap 'srun --nodes=1 --ntasks=1 --nodelist=\"$first\" rm -rf \"$dir\"' EXIT"), "{job}");
    assert!(log[3].1.contains("--ntasks-per-node=4 --immediate=60 --mpi=pmix mdtest -F -u -n 1000 -i 3 -d \"$dir\""));
}

#[tokio::test]
async fn storage_benchmarks_fail_below_the_blueprints_expected_performance() {
    let expected = crate::blueprint::schema::FilesystemExpectation {
        write_gb_per_s: Some(10.0),
        read_gb_per_s: Some(0.3),
        stat_ops: Some(50_000.0),
        ..Default::default()
    };
    let mut model = lab_with_lustre(Some(expected));
    // The blueprint's override wins over `expected`.
    model.blueprint.acceptance.validators.push(ValidatorRef {
        id: "storage-mdtest".to_owned(),
        thresholds: [("create_ops".to_owned(), 1000.0)].into(),
        skip: false,
    });
    let site = Site::everything(&model);
    let ior = recorded("ior_3.3.0_2node_lustre_stampede2_posix_ssf.txt");
    let mdtest = recorded("mdtest_1.9.3_2node_gpfs_ccr_verbose.txt");
    let connector = storage_host("", ior, mdtest);
    let outcome = run_all(&storage_benchmarks(), &model, &site, &connector, &two_nodes()).await;
    let ior = &outcome.validators[0].subjects[0];
    assert_eq!(ior.verdict, Verdict::Failed);
    let lustre = model.filesystems.len() - 1;
    assert_eq!(
        ior.reason.as_deref(),
        Some(
            format!(
                "aggregate write, mean over repetitions is 0.45 GB/s, required >= 10 GB/s (model: \
                 `storage.filesystems[{lustre}].expected.write_gb_per_s` of `lustre`: 10 GB/s write): IOR 3.3.0+dev, 2 \
                 tasks, 400 MiB on /scratch/01482/xdtas/ior.9BzrhiNHI"
            )
            .as_str()
        )
    );
    // An IOR that prints no `Path` and no aggregate size: the explanation names the mount.
    let bare: String = recorded("ior_3.3.0_2node_lustre_stampede2_posix_ssf.txt")
        .lines()
        .filter(|line| !line.starts_with("Path ") && !line.starts_with("aggregate filesize"))
        .flat_map(|line| [line, "\n"])
        .collect();
    let plain = storage_host("", bare, recorded("mdtest_1.9.3_2node_gpfs_ccr_verbose.txt"));
    let again = run_all(&storage_benchmarks(), &model, &site, &plain, &two_nodes()).await;
    let reason = again.validators[0].subjects[0].reason.as_deref().unwrap_or_default();
    assert!(reason.ends_with("10 GB/s write): IOR 3.3.0+dev, 2 tasks on /lustre"), "{reason}");
    let read = ior.measurements.iter().find(|m| m.name.starts_with("aggregate read")).expect("read");
    assert!(read.threshold.as_ref().is_some_and(|t| t.admits(read.value)), "0.35 GB/s meets 0.3: {read:?}");
    let mdtest = &outcome.validators[1].subjects[0];
    assert_eq!(mdtest.verdict, Verdict::Failed);
    let reason = mdtest.reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with(
            "file creations per second, mean over iterations is 632.11 ops/s, required >= 1000 ops/s (blueprint: \
             acceptance.validators[1].thresholds.create_ops)"
        ),
        "{reason}"
    );
    assert!(reason.ends_with(": mdtest 1.9.3, 16 tasks on 2 nodes, 10 iterations"), "{reason}");
    let stat = mdtest.measurements.iter().find(|m| m.name.starts_with("file stats")).expect("stat");
    assert!(stat.threshold.as_ref().is_some_and(|t| !t.admits(stat.value) && t.value == 50_000.0), "{stat:?}");
}

#[tokio::test]
async fn storage_benchmarks_are_skipped_where_not_installed_or_without_a_shared_filesystem() {
    let model = lab_with_lustre(None);
    let site = Site::everything(&model);
    let connector = fake(|_, script| {
        assert!(script.contains("for program in ior;"), "nothing runs after a failed lookup: {script}");
        (0, "node02 ior\n".to_owned(), String::new())
    });
    // mdtest is found, and its job is not run by this connector: --only keeps storage-ior.
    let only = RunOptions { only: Some(["storage-ior".to_owned()].into()), ..two_nodes() };
    let outcome = run_all(&storage_benchmarks(), &model, &site, &connector, &only).await;
    assert_eq!(outcome.validators.len(), 1, "--only selects one");
    let ior = &outcome.validators[0];
    assert_eq!(ior.verdict(), Verdict::Skipped);
    assert_eq!(
        ior.subjects[0].reason.as_deref(),
        Some(
            "`ior` is not installed on `node02` (`command -v` finds no such program): install the ior package, or make it \
             visible to non-interactive shells (e.g. `module load ior` in /etc/profile.d), or skip the validator \
             (`acceptance.validators: [{ id: storage-ior, skip: true }]`)"
        )
    );
    assert!(ior.subjects[0].evidence.as_ref().is_some_and(|e| e.output_tail == ["node02 ior"]), "{ior:?}");
    assert!(outcome.node_verdicts.is_empty(), "a skip says nothing about the nodes");

    // The lookup itself failing is an error, not a skip.
    let broken = fake(|_, _| (2, String::new(), "sh: 1: command: not found\n".to_owned()));
    let outcome = run_all(&storage_benchmarks(), &model, &site, &broken, &only).await;
    let subject = &outcome.validators[0].subjects[0];
    assert_eq!(subject.verdict, Verdict::Error);
    assert_eq!(
        subject.reason.as_deref(),
        Some("looking up ior with `command -v` failed (exit status 2): sh: 1: command: not found")
    );

    // The lab declares no shared filesystem.
    let bare = lab();
    let idle = fake(|_, script| panic!("nothing runs: {script}"));
    let outcome = run_all(&storage_benchmarks(), &bare, &Site::everything(&bare), &idle, &options()).await;
    for result in &outcome.validators {
        assert_eq!(result.verdict(), Verdict::Skipped);
        assert_eq!(
            result.subjects[0].reason.as_deref(),
            Some("needs a shared filesystem mounted by the compute nodes: `storage.filesystems` declares none")
        );
    }
    assert!(idle.log.lock().expect("log").is_empty(), "nothing ran");
}

#[tokio::test]
async fn truncated_storage_outputs_cannot_be_parsed_and_name_the_line() {
    let model = lab_with_lustre(None);
    let site = Site::everything(&model);
    let cut = |text: String, lines: usize| text.lines().take(lines).flat_map(|line| [line, "\n"]).collect::<String>();
    let ior = cut(recorded("ior_3.3.0_2node_lustre_stampede2_posix_ssf.txt"), 40);
    let mdtest = cut(recorded("mdtest_1.9.3_2node_gpfs_ccr_verbose.txt"), 325);
    let connector = storage_host("", ior, mdtest);
    let outcome = run_all(&storage_benchmarks(), &model, &site, &connector, &two_nodes()).await;
    let reasons: Vec<(Verdict, &str)> = outcome
        .validators
        .iter()
        .map(|result| (result.subjects[0].verdict, result.subjects[0].reason.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(reasons[0].0, Verdict::Error);
    assert!(
        reasons[0]
            .1
            .starts_with("ior parser: could not parse line 41: expected the `Finished` line (the output is truncated)"),
        "{reasons:?}"
    );
    assert_eq!(reasons[1].0, Verdict::Error);
    assert!(
        reasons[1].1.starts_with("mdtest parser: could not parse line 326: expected the `-- finished at"),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn every_missing_program_is_named_with_its_hosts() {
    let model = lab();
    let site = Site::everything(&model);
    let text = LINKS.replace("scope: node\n", "scope: node\nprograms: [ior, mdtest, ip]\n");
    let connector = fake(|host, script| {
        if script.starts_with("for program in ior mdtest ip;") {
            let missing = if host == "node01" { "ior\nmdtest\n" } else { "" };
            (0, missing.to_owned(), String::new())
        } else {
            (0, link("UP", 9000), String::new())
        }
    });
    let outcome = run_all(&catalog(vec![spec(&text)]), &model, &site, &connector, &options()).await;
    let subjects = &outcome.validators[0].subjects;
    assert_eq!(subjects[0].verdict, Verdict::Skipped);
    assert_eq!(
        subjects[0].reason.as_deref(),
        Some(
            "`ior` is not installed on `node01`; `mdtest` is not installed on `node01` (`command -v` finds no such \
             program): install the ior and mdtest packages, or make it visible to non-interactive shells (e.g. \
             `module load ior` in /etc/profile.d), or skip the validator (`acceptance.validators: [{ id: links, skip: \
             true }]`)"
        )
    );
    assert!(subjects[1..].iter().all(|subject| subject.verdict == Verdict::Passed), "{subjects:?}");
}

/// The lab with DOCA-OFED on its GPU nodes, answering the `roce-qos` dump with the
/// recorded `mlnx_qos -i` output (PFC on priorities 0, 2, 6, 7) and `pfc` replacing
/// its PFC row, and sysfs values as toolkit-roce-qos.service sets them.
async fn roce_qos_run(pfc: &'static str) -> (SubjectResult, Vec<(String, String)>) {
    let model = lab_with_software("os: debian12\nnetwork: { stack: doca-ofed, version: 3.2.1 }\n");
    let site = Site::everything(&model);
    let mlnx_qos = recorded("mlnx_qos_i_eth2_dscp_trust_ofed42.txt").replace("enabled 1 0 1 0 0 0 1 1", pfc);
    let netdevs: Vec<String> = model
        .nodes
        .iter()
        .find(|node| !node.rails.is_empty())
        .expect("a rail node")
        .rails
        .iter()
        .map(|rail| rail.netdev.clone())
        .collect();
    let connector = fake(move |_, _| {
        let mut text = String::new();
        for netdev in &netdevs {
            let _ = write!(
                text,
                "### netdev {netdev}\n{mlnx_qos}### settings\nrdma_device mlx5_0\nroce_np.3 1\nroce_rp.3 1\n\
                 cnp_dscp 48\ntraffic_class Global tclass=106\ndefault_roce_tos 106\n"
            );
        }
        (0, text, String::new())
    });
    let outcome = run_all(&builtin_catalog(&["roce-qos"]), &model, &site, &connector, &options()).await;
    let log = connector.log.lock().expect("log").clone();
    (outcome.validators[0].subjects[0].clone(), log)
}

#[tokio::test]
async fn roce_qos_fails_the_recorded_host_naming_host_interface_and_mismatch() {
    let (node, log) = roce_qos_run("enabled 1 0 1 0 0 0 1 1").await;
    assert_eq!(node.verdict, Verdict::Failed, "{node:?}");
    let reason = node.reason.as_deref().expect("a reason");
    assert!(
        reason.contains(&format!("{}: rail0: PFC on priorities 0, 2, 6, 7, fabric: 3 only", node.subject)),
        "{reason}"
    );
    let (_, script) = &log[0];
    assert!(script.contains("mlnx_qos -i \"$1\"") && script.contains("dump rail0;"), "{script}");
    let (node, _) = roce_qos_run("enabled 0 0 0 1 0 0 0 0").await;
    assert_eq!(node.verdict, Verdict::Passed, "{node:?}");
}
