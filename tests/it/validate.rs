//! `toolkit validate` against real sshd hosts: the built-in validators judging real
//! recorded tool outputs (`cat` of `tests/fixtures/parsers/`, provenance in its
//! `SOURCE.md`) through the same runner, real programs where they exist here (`fio`,
//! `ping`, `ip`), the second pass of the pairwise test, and the binary's exit codes
//! and results file.
//!
//! Without `fio` the storage test fails saying so (CI installs the Debian package
//! `fio`; see [`crate::support::cannot_run`]).

// Measured values are parsed from the same decimal text the expected ones are written
// in, so they compare exactly.
#![allow(clippy::float_cmp)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use toolkit::model::Model;
use toolkit::results::{Results, SubjectResult, ValidatorResult, Verdict};
use toolkit::transport::session::SshPool;
use toolkit::transport::ssh::{SshOptions, SshTarget};
use toolkit::validate::catalog::Catalog;
use toolkit::validate::run::{self, RunOptions, RunOutcome};
use toolkit::validate::spec::{ProgramsOn, ValidatorSpec};
use toolkit::validate::subjects::Site;
use toolkit::validate::{drain, expr};

use crate::support::Hosts;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers").join(name);
    assert!(path.is_file(), "missing fixture {}", path.display());
    path.display().to_string()
}

fn model(text: &str) -> Model {
    let loaded = toolkit::blueprint::load::load_text(Path::new("test.yaml"), text.to_owned())
        .unwrap_or_else(|problems| panic!("{}", problems.render()));
    toolkit::model::expand(&loaded.blueprint).expect("expands")
}

/// An InfiniBand cluster of 8-GPU H100 nodes `host2`…`host5` with the controller `host1`.
const IB: &str = r#"version: 1
cluster: { name: vt }
node_groups:
  - { name: ctl, count: 1, hostname: host1, roles: [controller, database, login] }
  - name: gpu
    count: 4
    hostname: "host{index}"
    start_index: 2
    roles: [compute]
    gpu: { model: h100, count: 8 }
    rail_nics: { count: 8, speed_gbps: 400, link_layer: infiniband, netdev: "ibp{rail}" }
fabric:
  compute:
    kind: infiniband
    rails: 8
    link_speed_gbps: 400
    switch: { model: qm9700, radix: 64 }
    infiniband: { subnet_manager: { kind: opensm, groups: [ctl] } }
    addressing: { rail_pool: 10.200.0.0/16, loopback_pool: 10.255.0.0/24 }
  management:
    inband: { subnet: 10.10.0.0/24 }
scheduler:
  kind: slurm
  slurm: { partitions: [{ name: gpu, groups: [gpu], default: true }] }
"#;

/// A RoCE cluster whose one rail NIC is the loopback interface, so `ip` and `ping`
/// have something real to look at; scratch in `SCRATCH`.
const ROCE: &str = r#"version: 1
cluster: { name: vr }
node_groups:
  - { name: ctl, count: 1, hostname: host1, roles: [controller, database, login] }
  - name: gpu
    count: 2
    hostname: "host{index}"
    start_index: 2
    roles: [compute]
    gpu: { model: h100, count: 4 }
    rail_nics: { count: 1, speed_gbps: 200, link_layer: ethernet, netdev: lo }
fabric:
  compute:
    kind: roce
    rails: 1
    link_speed_gbps: 200
    switch: { model: frr-container, radix: 32 }
    oversubscription: "4:1"
    uplinks_per_leaf: 1
    roce: { mode: lossless, pfc_priority: 3, ecn: true }
    addressing: { rail_pool: 10.200.0.0/16, loopback_pool: 10.255.0.0/24 }
  management:
    inband: { subnet: 10.10.0.0/24 }
storage:
  scratch: { mount: SCRATCH }
scheduler:
  kind: slurm
  slurm: { partitions: [{ name: gpu, groups: [gpu], default: true }] }
acceptance:
  validators:
    # Floors of 1 MB/s: these tests check that fio runs, reports and is judged, not
    # how fast a disk shared with other builds is (it measured 37-84 MB/s under load).
    - { id: storage-throughput, thresholds: { size_mib: 4, direct: 0, read_mbps: 1, write_mbps: 1 } }
"#;

/// A pool over sshd hosts, host `k` also reachable under the names in `aliases[k]`.
fn pool(hosts: &Hosts, count: usize, aliases: &[(&str, usize)]) -> (SshPool, Site) {
    let mut targets: Vec<SshTarget> = (1..=count).map(|k| hosts.target(k)).collect();
    for (name, k) in aliases {
        let mut target = hosts.target(*k);
        (*name).clone_into(&mut target.host);
        targets.push(target);
    }
    let site = Site { hosts: targets.iter().map(|t| t.host.clone()).collect(), ..Site::default() };
    (SshPool::new(targets, SshOptions { agent_socket: None, ..SshOptions::default() }), site)
}

/// Built-in validator `id` with its command (or the step called `step`) replaced.
fn builtin(id: &str, replace: &[(&str, String)]) -> ValidatorSpec {
    let catalog = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
    let mut spec = catalog.get(id).unwrap_or_else(|| panic!("no built-in {id}")).clone();
    for (step, command) in replace {
        if *step == "command" {
            spec.command = Some(command.clone());
        } else if *step == "server" {
            spec.server.as_mut().expect("a server").command.clone_from(command);
        } else {
            spec.steps
                .iter_mut()
                .find(|s| s.name == *step)
                .unwrap_or_else(|| panic!("no step {step}"))
                .command
                .clone_from(command);
        }
    }
    spec
}

fn catalog(specs: Vec<ValidatorSpec>) -> Catalog {
    Catalog { origins: specs.iter().map(|spec| spec.id.clone()).collect(), specs }
}

async fn validate(catalog: &Catalog, model: &Model, pool: &SshPool, site: &Site, options: RunOptions) -> RunOutcome {
    let options = RunOptions { parallel: 8, ..options };
    let planned = run::plan(catalog, model, site, &options).unwrap_or_else(|problems| panic!("{problems:?}"));
    let outcome = run::execute(&planned, model, site, pool, &options).await;
    pool.close_all().await;
    outcome
}

fn validator<'a>(outcome: &'a RunOutcome, id: &str) -> &'a ValidatorResult {
    outcome.validators.iter().find(|v| v.id == id).unwrap_or_else(|| panic!("no result for {id}"))
}

fn subject<'a>(result: &'a ValidatorResult, name: &str) -> &'a SubjectResult {
    result.subjects.iter().find(|s| s.subject == name).unwrap_or_else(|| panic!("no subject {name}: {result:?}"))
}

fn value(subject: &SubjectResult, label: &str) -> f64 {
    subject.measurements.iter().find(|m| m.name == label).unwrap_or_else(|| panic!("no {label}: {subject:?}")).value
}

fn reason(subject: &SubjectResult) -> &str {
    subject.reason.as_deref().unwrap_or_default()
}

/// `cat` of fixture `a` on `host`, of fixture `b` elsewhere.
fn cat_on(host: &str, a: &str, b: &str) -> String {
    format!("cat {{% if node.name == '{host}' %}}{}{{% else %}}{}{{% endif %}}", fixture(a), fixture(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_validators_judge_recorded_outputs() {
    let Some(hosts) = Hosts::up(120, 5) else { return };
    let model = model(IB);
    let (pool, site) = pool(&hosts, 5, &[]);
    let specs = vec![
        builtin("gpu-inventory", &[("command", format!("cat {}", fixture("nvidia_smi_8xh100_table.txt")))]),
        builtin(
            "gpu-health",
            &[
                ("smi", format!("cat {}", fixture("nvidia_smi_q_page_retirement_8gpu_azure.txt"))),
                ("xid", format!("cat {}", fixture("xid_dmesg_T_535_akash_support_244.txt"))),
            ],
        ),
        builtin(
            "nvlink",
            &[(
                "command",
                cat_on(
                    "host3",
                    "nvidia_smi_nvlink_status_a100_gpu_all_inactive.txt",
                    "nvidia_smi_nvlink_status_a100_gpu_good.txt",
                ),
            )],
        ),
        builtin(
            "dcgm-diag",
            &[("command", format!("cat {}", fixture("dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt")))],
        ),
        builtin(
            "nccl-single-node",
            &[(
                "command",
                cat_on(
                    "host4",
                    "nccl_all_reduce_1node_h100_fail_cuda_init.txt",
                    "nccl_all_reduce_1node_8xh100_dgx_nvlink.txt",
                ),
            )],
        ),
        builtin("rail-links", &[("ibstat", format!("cat {}", fixture("ibstat_excerpt_cx7_ndr_ib_h20_node.txt")))]),
    ];
    let outcome = validate(&catalog(specs), &model, &pool, &site, RunOptions::default()).await;

    let inventory = validator(&outcome, "gpu-inventory");
    assert_eq!(inventory.subjects.len(), 4, "the four GPU nodes");
    let second = subject(inventory, "host2");
    assert_eq!(second.verdict, Verdict::Passed, "{second:?}");
    assert_eq!(value(second, "GPUs seen by the driver"), 8.0);
    assert_eq!(value(second, "GPUs of the blueprint's model"), 8.0);
    assert_eq!(value(second, "driver major version"), 560.0);
    let evidence = second.evidence.as_ref().expect("evidence");
    assert!(evidence.command.starts_with("cat ") && evidence.output_tail.len() == 20, "{evidence:?}");

    let health = subject(validator(&outcome, "gpu-health"), "host5");
    assert_eq!(health.verdict, Verdict::Passed, "Xid 31/43/94 are not fatal in AzNHC's list: {health:?}");
    assert_eq!(value(health, "fatal Xid events in the kernel log"), 0.0);

    let nvlink = validator(&outcome, "nvlink");
    let down = subject(nvlink, "host3");
    assert_eq!(down.verdict, Verdict::Failed);
    assert_eq!(
        reason(down),
        "GPUs with every link inactive is 1, required <= 0 (default: nvidia-smi nvlink -s: no GPU reports all links \
         inactive): GPU 6: all links inactive"
    );
    // An A100 with 12 links, judged against the H100's 18.
    let short = subject(nvlink, "host2");
    assert_eq!(short.verdict, Verdict::Failed);
    assert!(
        reason(short).starts_with("active links of the GPU with the fewest is 12, required >= 18 (model: h100: 18"),
        "{short:?}"
    );

    let dcgm = subject(validator(&outcome, "dcgm-diag"), "host2");
    assert_eq!(dcgm.verdict, Verdict::Failed);
    assert!(
        reason(dcgm).starts_with("DCGM tests failed is 1, required <= 0")
            && reason(dcgm).contains("GPU Memory fail (GPU 0 Error using CUDA API cuInit"),
        "{dcgm:?}"
    );
    assert_eq!(value(dcgm, "DCGM tests skipped"), 3.0);

    let nccl = validator(&outcome, "nccl-single-node");
    let fast = subject(nccl, "host2");
    assert_eq!(fast.verdict, Verdict::Passed, "{fast:?}");
    assert_eq!(value(fast, "bus bandwidth, peak over message sizes"), 480.16);
    let busbw = fast.measurements.iter().find(|m| m.unit == "GB/s").and_then(|m| m.threshold.as_ref()).expect("limit");
    assert_eq!(busbw.value, 460.0);
    assert_eq!(
        busbw.source.to_string(),
        "model: AzNHC ND96isr H100 v5 (8x H100 SXM): check_nccl_allreduce 460 GB/s at 16 GiB"
    );
    assert_eq!(fast.series[0].points.len(), 32);
    assert_eq!(fast.series[0].points[31], (17_179_869_184.0, 479.9));
    let broken = subject(nccl, "host4");
    assert_eq!(broken.verdict, Verdict::Failed);
    assert!(
        reason(broken).starts_with("nccl-tests reported a failure is 1, required <= 0")
            && reason(broken).ends_with("test failed: Test CUDA failure common.cu:941 'system not yet initialized'"),
        "{broken:?}"
    );

    let links = subject(validator(&outcome, "rail-links"), "host2");
    assert_eq!(links.verdict, Verdict::Failed);
    assert!(
        reason(links).starts_with("InfiniBand ports Active and LinkUp at the link speed is 2, required >= 8"),
        "{links:?}"
    );
    assert!(reason(links).contains("mlx5_1 port 1 Active/LinkUp 400.0 Gb/s InfiniBand"), "{links:?}");

    // Only node validators attribute failures to nodes (for --drain-failed).
    assert_eq!(outcome.node_verdicts["host3"]["nvlink"], Verdict::Failed);
    assert_eq!(outcome.node_verdicts["host2"]["gpu-inventory"], Verdict::Passed);
}

/// The IB cluster with the blueprint's software stack: driver 550.127.05, DCGM level 2.
fn ib_with_software() -> Model {
    model(&format!(
        "{IB}software:\n  os: ubuntu2204\n  gpu_driver: {{ version: 550.127.05 }}\n  dcgm: {{ major: 4, diag_level: 2 }}\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blueprints_driver_and_dcgm_level_judge_recorded_outputs() {
    let Some(hosts) = Hosts::up(126, 5) else { return };
    let model = ib_with_software();
    let (pool, site) = pool(&hosts, 5, &[]);
    // The recorded DGX runs driver 560.35.03; the blueprint pins 550.127.05. dcgm-diag
    // keeps its real command, `dcgmi diag -r <level>`, behind a stand-in `dcgmi` that
    // prints the recorded run and fails on any other level.
    let bin = hosts.root(1).join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let dcgmi = bin.join("dcgmi");
    std::fs::write(
        &dcgmi,
        format!(
            "#!/bin/sh\n[ \"$*\" = \"diag -r 2\" ] || {{ echo \"dcgmi: called with $*\" >&2; exit 3; }}\ncat {}\n",
            fixture("dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt")
        ),
    )
    .expect("writes dcgmi");
    std::process::Command::new("chmod").arg("+x").arg(&dcgmi).status().expect("chmod");
    let dcgm = builtin("dcgm-diag", &[]);
    let command = format!("PATH={}:$PATH {}", bin.display(), dcgm.command.clone().expect("a command"));
    let specs = vec![
        builtin("gpu-inventory", &[("command", format!("cat {}", fixture("nvidia_smi_8xh100_table.txt")))]),
        builtin("dcgm-diag", &[("command", command)]),
    ];
    let outcome = validate(&catalog(specs), &model, &pool, &site, RunOptions::default()).await;

    let inventory = validator(&outcome, "gpu-inventory");
    assert_eq!(inventory.subjects.len(), 4, "the four GPU nodes");
    for node in &inventory.subjects {
        assert_eq!(node.verdict, Verdict::Failed, "{node:?}");
        assert!(
            reason(node).ends_with("driver 560.35.03 is running, the blueprint's software.gpu_driver is 550.127.05"),
            "{node:?}"
        );
        assert_eq!(value(node, "driver is the blueprint's"), 0.0);
    }
    assert_eq!(outcome.node_verdicts["host2"]["gpu-inventory"], Verdict::Failed);

    let dcgm = subject(validator(&outcome, "dcgm-diag"), "host3");
    assert_eq!(value(dcgm, "DCGM diagnostic level run"), 2.0);
    let evidence = dcgm.evidence.as_ref().expect("evidence");
    assert!(evidence.command.ends_with("dcgmi diag -r 2"), "{evidence:?}");
    // The stand-in ran (a wrong level exits 3 and leaves no tests to count).
    assert_eq!(value(dcgm, "DCGM tests skipped"), 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairwise_second_pass_names_the_bad_node_from_recorded_outputs() {
    // Pairs run through srun on the controller, so only host1 needs to answer.
    let Some(hosts) = Hosts::up(121, 1) else { return };
    let model = model(IB);
    let (pool, site) = pool(&hosts, 1, &[]);
    let bad = fixture("nccl_all_reduce_2node_h100_fail_busbw0_nonmpi_build.txt");
    let good = fixture("nccl_all_reduce_2node_h100_ib_ndr_xe9680.txt");
    let pairwise = builtin(
        "nccl-pairwise",
        &[("command", format!("cat {{% if 'host3' in [node.name, peer.name] %}}{bad}{{% else %}}{good}{{% endif %}}"))],
    );
    let multi = builtin("nccl-multi-node", &[("command", format!("cat {good}"))]);
    let outcome = validate(&catalog(vec![pairwise]), &model, &pool, &site, RunOptions::default()).await;
    let result = validator(&outcome, "nccl-pairwise");
    let verdicts: Vec<(&str, Verdict)> = result.subjects.iter().map(|s| (s.subject.as_str(), s.verdict)).collect();
    assert_eq!(
        verdicts,
        [
            ("host2+host3", Verdict::Failed),
            ("host4+host5", Verdict::Passed),
            ("host2+host4 (second pass)", Verdict::Passed),
            ("host3+host5 (second pass)", Verdict::Failed),
        ]
    );
    let first = subject(result, "host2+host3");
    assert!(
        reason(first).starts_with("bus bandwidth, peak over message sizes is 0 GB/s, required >= 320 GB/s (model: 8 rails x 400 Gb/s / 8 x 0.8 efficiency)")
            && reason(first).contains("second pass: host3 bad (host2 passed with host4; host3 failed again with host5)"),
        "{first:?}"
    );
    assert_eq!(outcome.node_verdicts["host3"]["nccl-pairwise"], Verdict::Failed);
    for node in ["host2", "host4", "host5"] {
        assert_eq!(outcome.node_verdicts[node]["nccl-pairwise"], Verdict::Passed, "{node}");
    }
    // One all_reduce over the two nodes the recording has (16 ranks).
    let (pool, site) = self::pool(&hosts, 1, &[]);
    let two = RunOptions { nodes: Some(["host2".to_owned(), "host3".to_owned()].into()), ..RunOptions::default() };
    let outcome = validate(&catalog(vec![multi]), &model, &pool, &site, two).await;
    let cluster = subject(validator(&outcome, "nccl-multi-node"), "vt");
    assert_eq!(cluster.verdict, Verdict::Passed, "{cluster:?}");
    assert_eq!(value(cluster, "ranks in the test"), 16.0);
    assert!(cluster.evidence.as_ref().is_some_and(|e| e.command == format!("cat {good}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_and_rdma_validators_judge_recorded_outputs() {
    let Some(hosts) = Hosts::up(122, 3) else { return };
    // The recorded `scontrol show node` names gpu01…gpu04.
    let model = model(&IB.replace("hostname: \"host{index}\"\n    start_index: 2", "hostname: \"gpu{index:02}\""));
    let (pool, site) = pool(&hosts, 1, &[("gpu01", 2), ("gpu02", 3)]);
    let scheduler = builtin(
        "scheduler",
        &[
            ("nodes", format!("cat {}", fixture("scontrol_22.05.8_show_node_4nodes.txt"))),
            ("srun", "true".to_owned()),
            ("partitions", "echo gpu".to_owned()),
            ("qos", "true".to_owned()),
        ],
    );
    let rdma = builtin(
        "rdma-bandwidth",
        &[
            ("server", "echo server ready on {{ rail.peer_netdev }}".to_owned()),
            ("command", format!("cat {}", fixture("ib_write_bw_client_gb10_cx7_roce_200g_4qp.txt"))),
        ],
    );
    let two = RunOptions { nodes: Some(["gpu01".to_owned(), "gpu02".to_owned()].into()), ..RunOptions::default() };
    let outcome = validate(&catalog(vec![scheduler, rdma]), &model, &pool, &site, two).await;
    let slurm = subject(validator(&outcome, "scheduler"), "vt");
    assert_eq!(slurm.verdict, Verdict::Failed);
    assert_eq!(value(slurm, "compute nodes not idle"), 2.0);
    assert_eq!(value(slurm, "partitions of the blueprint missing"), 0.0);
    assert_eq!(value(slurm, "nodes that ran the srun job"), 0.0);
    assert!(
        reason(slurm).ends_with(
            "gpu01 MIXED; gpu02 IDLE+DRAIN (NHC: check_gpu_xid: GPU Xid errors detected); srun ran on 0 of 2 nodes"
        ),
        "{slurm:?}"
    );
    let rail = validator(&outcome, "rdma-bandwidth");
    assert_eq!(rail.subjects.len(), 8, "8 rails, one pair");
    let rail0 = subject(rail, "gpu01+gpu02/rail0");
    assert_eq!(rail0.verdict, Verdict::Failed);
    assert!(
        reason(rail0).starts_with(
            "RDMA write bandwidth, average is 111.61 Gb/s, required >= 360 Gb/s (model: 400 Gb/s link x 0.9"
        ),
        "{rail0:?}"
    );
    let tail = &rail0.evidence.as_ref().expect("evidence").output_tail;
    assert!(tail.iter().any(|line| line == "server ready on ibp0"), "the server ran on the peer: {tail:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabric_validators_judge_recorded_switch_outputs() {
    let Some(hosts) = Hosts::up(123, 2) else { return };
    let model = model(ROCE.replace("SCRATCH", "/var/tmp").split("acceptance:").next().unwrap_or_default());
    // The switches are sshd hosts too; the recordings stand in for their FRR and lldpd.
    let (pool, site) = pool(&hosts, 0, &[("leaf0", 1), ("spine0", 2)]);
    let bgp = builtin(
        "fabric-bgp",
        &[("command", format!("cat {}", fixture("frr_8.4.4_show_bgp_summary_json_leaf_2up_1idle.json")))],
    );
    let cabling =
        builtin("cabling", &[("command", format!("cat {}", fixture("lldpctl_1.0.16_json_no_neighbors.json")))]);
    let outcome = validate(&catalog(vec![cabling, bgp]), &model, &pool, &site, RunOptions::default()).await;
    let leaf = subject(validator(&outcome, "fabric-bgp"), "leaf0");
    assert_eq!(leaf.verdict, Verdict::Failed);
    assert_eq!(value(leaf, "BGP sessions configured"), 3.0);
    assert_eq!(value(leaf, "BGP sessions not Established"), 1.0);
    assert_eq!(
        reason(leaf),
        "BGP sessions configured is 3, required == 1 (model: `leaf0` has 1 fabric port(s) in the cabling plan): swp53 Idle, \
         0 prefixes received"
    );
    let wires = validator(&outcome, "cabling");
    let leaf = subject(wires, "leaf0");
    assert_eq!(leaf.verdict, Verdict::Failed);
    assert_eq!(value(leaf, "planned cables on this switch"), 3.0, "two nodes and one uplink");
    assert!(
        reason(leaf).contains("missing: leaf0 swp1 <-> host2 lo (no LLDP neighbour on leaf0 swp1)")
            && reason(leaf).contains("missing: leaf0 swp26 <-> spine0 swp1"),
        "{leaf:?}"
    );
    let spine = subject(wires, "spine0");
    assert_eq!(spine.verdict, Verdict::Failed, "the uplink is spine0's too: {spine:?}");
    assert!(
        reason(spine).ends_with("missing: leaf0 swp26 <-> spine0 swp1 (no LLDP neighbour on leaf0 swp26)"),
        "{spine:?}"
    );
    assert!(!reason(spine).contains("spine0 swp1 <-> leaf0 swp26"), "one line per cable, not per end: {spine:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ip_ping_and_fio_through_the_runner() {
    let fio = Path::new("/usr/bin/fio").exists();
    if !fio {
        crate::support::cannot_run(
            "fio is not installed (apt-get install fio): the storage part of this test needs it",
        );
    }
    let Some(hosts) = Hosts::up(124, 3) else { return };
    let scratch = tempfile::tempdir().expect("tempdir");
    let model = model(&ROCE.replace("SCRATCH", &scratch.path().display().to_string()));
    let (pool, site) = pool(&hosts, 3, &[]);
    let ping = |id: &str, payload: u32| {
        let text = format!(
            "id: {id}\ntitle: Loopback at full size\nfailure: mtu-low\ndocs: {{ what: a, why: b, fix: c }}\nscope: node\n\
             params: {{ payload: {payload} }}\ncommand: ping -M do -s {{{{ params.payload | int }}}} -c 2 -i 0.2 -W 1 -I lo 127.0.0.1 2>&1\n\
             parser: ping\n"
        );
        let builtin_mtu = builtin("mtu", &[]);
        let mut spec = ValidatorSpec::from_source(&toolkit::source::SourceFile::new("t.yaml", text)).expect("spec");
        spec.measurements = builtin_mtu.measurements;
        spec.thresholds = builtin_mtu.thresholds;
        spec.explain = builtin_mtu.explain;
        spec
    };
    let mut slow = ping("slow", 65000);
    slow.command = Some("sleep 30".to_owned());
    slow.timeout = 1;
    let mut specs = vec![ping("ping-fits", 65000), ping("ping-too-big", 65509), builtin("rail-links", &[]), slow];
    if fio {
        specs.push(builtin("storage-throughput", &[]));
    }
    let outcome = validate(&catalog(specs), &model, &pool, &site, RunOptions::default()).await;
    let fits = subject(validator(&outcome, "ping-fits"), "host2");
    assert_eq!(fits.verdict, Verdict::Passed, "{fits:?}");
    assert_eq!(value(fits, "packet loss at full MTU with DF set"), 0.0);
    let too_big = subject(validator(&outcome, "ping-too-big"), "host3");
    assert_eq!(too_big.verdict, Verdict::Failed);
    assert!(
        reason(too_big).starts_with("packet loss at full MTU with DF set is 100 %, required <= 0 %"),
        "{too_big:?}"
    );
    assert!(reason(too_big).contains("message too long, mtu=65535"), "{too_big:?}");

    // The remote `timeout` ends a hung command on the host, not only the wait here.
    let slow = subject(validator(&outcome, "slow"), "host2");
    assert_eq!((slow.verdict, reason(slow)), (Verdict::Error, "timed out after 1 s"));
    assert!(slow.duration_seconds.is_some_and(|seconds| seconds < 10.0), "{slow:?}");

    let links = subject(validator(&outcome, "rail-links"), "host2");
    assert_eq!(links.verdict, Verdict::Failed, "lo is UNKNOWN, not UP: {links:?}");
    assert!(reason(links).ends_with("lo UNKNOWN, MTU 65536 (planned up, MTU 9000)"), "{links:?}");

    if fio {
        let storage = validator(&outcome, "storage-throughput");
        for node in ["host2", "host3"] {
            let result = subject(storage, node);
            assert_eq!(result.verdict, Verdict::Passed, "{result:?}");
            assert!(value(result, "sequential read") > 1.0 && value(result, "sequential write") > 1.0);
            assert_eq!(value(result, "fio jobs reported"), 2.0);
        }
        let left: Vec<_> = std::fs::read_dir(scratch.path()).expect("scratch").collect();
        assert!(left.is_empty(), "the fio directory is removed: {left:?}");
    }
}

/// Whether `program` is on this machine's PATH (the sshd hosts run here).
fn installed(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|out| out.status.success())
}

/// `ROCE` (without its `acceptance`) with a shared NFS filesystem the GPU nodes mount,
/// `expected` as given.
fn roce_with_shared(expected: &str) -> String {
    let without_acceptance = ROCE.split("acceptance:").next().unwrap_or_default();
    without_acceptance.replace("SCRATCH", "/var/tmp").replace(
        "storage:\n",
        &format!(
            "storage:\n  filesystems:\n    - {{ name: data, kind: nfs, endpoint: \"nas:/export/data\", mount: /data, tier: shared{expected} }}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_benchmarks_judge_recorded_ior_and_mdtest_outputs_over_ssh() {
    let Some(hosts) = Hosts::up(126, 1) else { return };
    let model = model(&roce_with_shared(", expected: { write_gb_per_s: 2, stat_ops: 20000 }"));
    let (pool, site) = pool(&hosts, 1, &[]);
    // The recordings stand in for the jobs; `sh` is looked up for real instead of the
    // tools, on the host over SSH (the sshd hosts run no Slurm to look through).
    let mut ior = builtin(
        "storage-ior",
        &[("command", format!("cat {}", fixture("ior_3.3.0_2node_lustre_stampede2_posix_ssf.txt")))],
    );
    ior.programs = vec!["sh".to_owned()];
    ior.programs_on = ProgramsOn::Host;
    ior.params.insert("tasks_per_node".to_owned(), 1.0);
    let mut mdtest = builtin(
        "storage-mdtest",
        &[("command", format!("cat {}", fixture("mdtest_1.9.3_2node_gpfs_ccr_verbose.txt")))],
    );
    mdtest.programs = vec!["sh".to_owned()];
    mdtest.programs_on = ProgramsOn::Host;
    let outcome = validate(&catalog(vec![ior, mdtest]), &model, &pool, &site, RunOptions::default()).await;
    let ior = subject(validator(&outcome, "storage-ior"), "vr");
    assert_eq!(ior.verdict, Verdict::Failed, "{ior:?}");
    assert_eq!(
        reason(ior),
        "aggregate write, mean over repetitions is 0.45 GB/s, required >= 2 GB/s (model: \
         `storage.filesystems[0].expected.write_gb_per_s` of `data`: 2 GB/s write): IOR 3.3.0+dev, 2 tasks, 400 MiB on \
         /scratch/01482/xdtas/ior.9BzrhiNHI"
    );
    assert!((value(ior, "aggregate read, mean over repetitions") - 0.348_704).abs() < 1e-6);
    assert_eq!(value(ior, "nodes in the IOR job (tasks / tasks per node)"), 2.0, "host2 and host3");
    // 28,997 stats/s meet the declared 20,000; creations and removals meet the floors.
    let mdtest = subject(validator(&outcome, "storage-mdtest"), "vr");
    assert_eq!(mdtest.verdict, Verdict::Passed, "{mdtest:?}");
    let stat = mdtest.measurements.iter().find(|m| m.name.starts_with("file stats")).expect("stat");
    assert_eq!(stat.value, 28997.226);
    assert_eq!(
        stat.threshold.as_ref().map(|t| (t.value, t.source.to_string())),
        Some((
            20000.0,
            "model: `storage.filesystems[0].expected.stat_ops` of `data`: 20000 ops/s file stat".to_owned()
        ))
    );
    assert_eq!(value(mdtest, "nodes in the mdtest job"), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_benchmarks_are_skipped_where_ior_and_mdtest_are_not_installed() {
    if installed("ior") || installed("mdtest") {
        eprintln!("skipped: ior or mdtest is installed here, so the sshd hosts have it");
        return;
    }
    let Some(hosts) = Hosts::up(127, 1) else { return };
    let model = model(&roce_with_shared(""));
    let (pool, site) = pool(&hosts, 1, &[]);
    // The sshd hosts run no Slurm: look the programs up on the host over SSH instead of
    // through srun on the nodes.
    let mut specs = vec![builtin("storage-ior", &[]), builtin("storage-mdtest", &[])];
    for spec in &mut specs {
        spec.programs_on = ProgramsOn::Host;
    }
    let outcome = validate(&catalog(specs), &model, &pool, &site, RunOptions::default()).await;
    for (id, program) in [("storage-ior", "ior"), ("storage-mdtest", "mdtest")] {
        let result = validator(&outcome, id);
        assert_eq!(result.verdict(), Verdict::Skipped, "{result:?}");
        assert!(
            reason(subject(result, "vr")).starts_with(&format!(
                "`{program}` is not installed on `host1` (`command -v` finds no such program): install the {program} package"
            )),
            "{result:?}"
        );
    }
}

#[test]
fn drain_plan_from_a_recorded_scontrol_output() {
    let text = std::fs::read_to_string(fixture("scontrol_22.05.8_show_node_4nodes.txt")).expect("fixture");
    let states = drain::node_states(&expr::parse("scontrol-node", &text).expect("parses")).expect("states");
    let mut verdicts: BTreeMap<String, BTreeMap<String, Verdict>> = BTreeMap::new();
    for (node, verdict) in [("gpu01", Verdict::Failed), ("gpu02", Verdict::Failed), ("gpu03", Verdict::Passed)] {
        verdicts.entry(node.to_owned()).or_default().insert("gpu-health".to_owned(), verdict);
    }
    let actions: Vec<String> = drain::plan(&states, &verdicts).iter().map(ToString::to_string).collect();
    assert_eq!(
        actions,
        [
            "drain gpu01 (reason toolkit:gpu-health)",
            "leave gpu02 as it is: drained by someone else (`NHC: check_gpu_xid: GPU Xid errors detected`); it failed gpu-health",
        ]
    );
}

/// A blueprint and an inventory over sshd hosts, for the binary.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new(hosts: &Hosts, count: usize) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let scratch = dir.path().join("scratch");
        std::fs::create_dir(&scratch).expect("scratch");
        std::fs::write(dir.path().join("blueprint.yaml"), ROCE.replace("SCRATCH", &scratch.display().to_string()))
            .expect("blueprint");
        let mut inventory = format!(
            "version: 1\ndefaults: {{ user: root, identity_file: {}, known_hosts: {} }}\nhosts:\n",
            hosts.client_key().display(),
            hosts.known_hosts().display()
        );
        for k in 1..=count {
            let _ = writeln!(inventory, "  host{k}: {{ address: {} }}", hosts.address(k));
        }
        std::fs::write(dir.path().join("inventory.yaml"), inventory).expect("inventory");
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn validate(&self, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_toolkit"))
            .current_dir(self.dir.path())
            .arg("validate")
            .arg(self.path("blueprint.yaml"))
            .arg("-i")
            .arg(self.path("inventory.yaml"))
            .args(extra)
            .output()
            .expect("runs toolkit validate")
    }
}

#[test]
fn the_binary_selects_storage_ior_and_the_report_shows_its_docs() {
    if installed("ior") {
        eprintln!("skipped: ior is installed here");
        return;
    }
    let Some(hosts) = Hosts::up(128, 3) else { return };
    let workspace = Workspace::new(&hosts, 3);
    std::fs::write(workspace.path("blueprint.yaml"), roce_with_shared("")).expect("blueprint");
    // The sshd hosts run no Slurm: a site copy of the built-in looks `ior` up on the
    // controller over SSH instead of through srun (same id: it replaces the built-in).
    let site = workspace.path("site-validators");
    std::fs::create_dir(&site).expect("validators directory");
    let builtin = include_str!("../../validators/storage-ior.yaml");
    assert!(builtin.contains("programs_on: nodes\n"));
    std::fs::write(site.join("storage-ior.yaml"), builtin.replace("programs_on: nodes\n", "programs_on: host\n"))
        .expect("site validator");
    let site = site.display().to_string();
    let run = workspace.validate(&["--only", "storage-ior", "--validators", &site, "--results", "ior.json"]);
    assert_eq!(run.status.code(), Some(0), "a skip is not a failure: {}", text(&run));
    let document = std::fs::read_to_string(workspace.path("ior.json")).expect("results written");
    let results = Results::from_json(&document, "ior.json").expect("a valid results document");
    let ids: Vec<&str> = results.validators.iter().map(|v| v.id.as_str()).collect();
    assert_eq!(ids, ["storage-ior"], "--only selects it alone");
    let result = &results.validators[0];
    assert_eq!(result.verdict(), Verdict::Skipped);
    assert!(reason(&result.subjects[0]).starts_with("`ior` is not installed on `host1`"), "{result:?}");
    let report = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["report", "--format", "md"])
        .arg(workspace.path("ior.json"))
        .output()
        .expect("runs toolkit report");
    assert_eq!(report.status.code(), Some(0), "{}", text(&report));
    let shown = String::from_utf8_lossy(&report.stdout);
    assert!(shown.contains("storage-ior"), "{shown}");
    assert!(shown.contains("`ior` is not installed on `host1`"), "{shown}");
    let html = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["report", "--format", "html"])
        .arg(workspace.path("ior.json"))
        .output()
        .expect("runs toolkit report");
    assert_eq!(html.status.code(), Some(0), "{}", text(&html));
    let shown = String::from_utf8_lossy(&html.stdout);
    assert!(shown.contains("Shared filesystem bandwidth (IOR)"), "the title");
    assert!(shown.contains("POSIX file-per-process"), "the docs' what");
    assert!(shown.contains("shared-storage-bandwidth-low"), "the failure name");
    let dry = workspace.validate(&["--dry-run", "--only", "storage-mdtest"]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    let shown = String::from_utf8_lossy(&dry.stdout);
    assert!(
        shown
            .contains("--nodelist='host[2-3]' --ntasks-per-node=4 --immediate=60 --mpi=pmix mdtest -F -u -n 1000 -i 3"),
        "{shown}"
    );
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[test]
fn the_binary_exits_by_verdict_and_writes_the_results() {
    if !Path::new("/usr/bin/fio").exists() {
        crate::support::cannot_run("fio is not installed: apt-get install fio");
        return;
    }
    let Some(hosts) = Hosts::up(125, 3) else { return };
    let workspace = Workspace::new(&hosts, 3);
    let passed = workspace.validate(&["--only", "storage-throughput", "--results", "passed.json"]);
    assert_eq!(passed.status.code(), Some(0), "{}", text(&passed));
    let shown = text(&passed);
    assert!(shown.contains("storage-throughput") && shown.contains("│ passed"), "summary table: {shown}");
    let document = std::fs::read_to_string(workspace.path("passed.json")).expect("results written");
    let results = Results::from_json(&document, "passed.json").expect("a valid results document");
    assert_eq!(results.run.cluster, "vr");
    assert_eq!(results.validators.len(), 1);
    assert_eq!(results.validators[0].subjects.len(), 2);
    assert!(results.run.inventory.is_some());

    // rail-links fails on the loopback "rail": exit 2, and the results say why.
    let failed = workspace.validate(&["--only", "storage-throughput,rail-links", "--output", "json"]);
    assert_eq!(failed.status.code(), Some(2), "{}", text(&failed));
    let results = Results::from_json(&String::from_utf8_lossy(&failed.stdout), "stdout").expect("JSON on stdout");
    assert_eq!(results.exit_status(), 2);
    let written: Vec<_> = std::fs::read_dir(workspace.path("results")).expect("default results directory").collect();
    assert_eq!(written.len(), 1, "results/<cluster>-<time>.json by default");
    let report = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["report", "--format", "md"])
        .arg(written[0].as_ref().expect("entry").path())
        .output()
        .expect("runs toolkit report");
    assert_eq!(report.status.code(), Some(0), "{}", text(&report));
    assert!(String::from_utf8_lossy(&report.stdout).contains("rail-links"));

    let unknown = workspace.validate(&["--only", "rail-link"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    assert!(
        text(&unknown).contains("--only: unknown validator `rail-link` (did you mean `rail-links`?)"),
        "{}",
        text(&unknown)
    );
    let dry = workspace.validate(&["--dry-run", "--only", "mtu,cabling"]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    let shown = String::from_utf8_lossy(&dry.stdout);
    assert!(
        shown.contains("host2+host3/rail0 on host2: ping -M do -s 8972 -c 3 -W 2 -I lo 10.200.0.3 2>&1"),
        "{shown}"
    );
    assert!(shown.contains("leaf0 skipped: `leaf0` is not in the inventory"), "{shown}");
}
