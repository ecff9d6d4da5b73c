//! Firmware and BIOS of nodes that run jobs, on a running lab: node01 and node02 get
//! a BMC each (sushy-tools' Redfish emulator), and `deploy --firmware` flashes their
//! BIOS (`SimpleUpdate`, image served on loopback) and sets a BIOS attribute inside
//! each node's rollout wave — drained through Slurm, changed, rebooted (the lab
//! restarts the container), read back, checked, resumed — while a job runs on node01
//! and completes. The API stage leaves them alone.
//!
//! Runs under its own cluster name and subnets (`lab-fw`, 10.165.0.0/24, rail pool
//! 10.166.0.0/16). `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use toolkit::bmc::Redfish;
use toolkit::bmc::redfish::update::sha256_hex;

use super::firmware::image_server;
use super::lab::{lab_or_skip, text};
use super::lab_e2e::{Teardown, assert_success, edited, exec_ok_in, fresh_lab, make_tenant_users, start_job};
use super::redfish::{PASSWORD, config, emulator, toolkit_metal};

const CLUSTER: &str = "lab-fw";
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-fw\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.165.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.166.0.0/16"),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.166 = `0a:a6`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.165.0."), (":0a:c8:", ":0a:a6:")];
const IMAGE: &[u8] = b"lab BIOS image 2.4.1\n";

fn deploy(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes", "--drain-timeout", "180"];
    args.extend_from_slice(extra);
    let started = Instant::now();
    let output = toolkit_metal(dir, &args);
    eprintln!("deploy {extra:?} took {:.0?} (exit {:?})", started.elapsed(), output.status.code());
    output
}

#[test]
fn firmware_and_bios_of_a_busy_node_change_inside_its_drained_wave() {
    let Some(_one_lab) = lab_or_skip("lab firmware test") else { return };
    let (Some(bmc1), Some(bmc2), Some(images)) = (emulator(None), emulator(None), image_server(IMAGE)) else {
        crate::support::cannot_run("the Redfish emulator (.toolkit/venv) is missing");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let _teardown = Teardown(dir.path(), CLUSTER);
    let model = fresh_lab(dir.path(), CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    make_tenant_users(dir.path(), CLUSTER, &model);
    let first = deploy(dir.path(), &[]);
    assert_success(&first, "the first deploy");
    let exec = |host: &str, command: &[&str]| exec_ok_in(dir.path(), CLUSTER, host, command);

    // node01 and node02 get a BMC and a profile: BIOS 2.3.1 → 2.4.1, turbo off.
    let path = dir.path().join("lab.yaml");
    let mut blueprint = edited(
        &std::fs::read_to_string(&path).expect("blueprint"),
        &[("    roles: [compute]\n", "    roles: [compute]\n    hardware_profile: fw\n")],
        "the lab blueprint",
    );
    let _ = write!(
        blueprint,
        "\nhardware_profiles:\n  fw:\n    bios: {{ ProcTurboMode: Disabled }}\n    firmware:\n      BIOS: {{ version: \"2.4.1\", image: \"http://127.0.0.1:{}/bios.bin\", sha256: {} }}\n",
        images.port,
        sha256_hex(IMAGE)
    );
    std::fs::write(&path, blueprint).expect("write blueprint");
    let inventory = dir.path().join("inventory.yaml");
    let mut listed = std::fs::read_to_string(&inventory).expect("inventory");
    listed.push_str("bmcs:\n");
    for (node, bmc) in [("node01", &bmc1), ("node02", &bmc2)] {
        let _ = write!(
            listed,
            "  {node}:\n    endpoint: http://127.0.0.1:{}\n    username: {{ env: TOOLKIT_TEST_BMC_USER }}\n    \
             password: {{ env: TOOLKIT_TEST_BMC_PASSWORD }}\n",
            bmc.port
        );
    }
    std::fs::write(&inventory, listed).expect("write inventory");

    // A job on node01 while the change rolls out.
    let job = start_job(dir.path(), CLUSTER, "node01", 20);

    let plan = toolkit_metal(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml", "--firmware"]);
    let shown = text(&plan.stdout);
    assert_eq!(plan.status.code(), Some(2), "{shown}{}", text(&plan.stderr));
    assert!(
        shown.contains("~ firmware BIOS on node[01-02]  (upgrade 2.3.1 → 2.4.1; in the node's rollout wave"),
        "{shown}"
    );
    assert!(shown.contains("2 nodes need drain and reboot: 2 waves of 1 (max-unavailable 1)"), "{shown}");

    let run = deploy(dir.path(), &["--firmware", "--max-unavailable", "1", "--check-timeout", "60"]);
    assert_success(&run, "the firmware rollout");
    let log = text(&run.stderr);
    assert!(log.contains("API stage: nothing to do"), "the API stage leaves busy nodes to their wave:\n{log}");
    let state = exec("head", &["sacct", "-n", "-X", "-P", "-j", &job, "-o", "State"]);
    assert_eq!(state.trim(), "COMPLETED", "the job running during the rollout completes");

    // Read back through each BMC: flashed and set.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    for bmc in [&bmc1, &bmc2] {
        runtime.block_on(async {
            let client = Redfish::connect(config(bmc, PASSWORD)).await.expect("connects");
            let system = client.system().await.expect("system");
            assert_eq!(client.firmware(&system).await.expect("firmware")["BIOS"], "2.4.1");
            assert_eq!(client.bios(&system).await.expect("bios")["ProcTurboMode"], "Disabled");
        });
    }
    // Drained by toolkit for the reboot class, one at a time, and all back in service.
    let events =
        exec("head", &["sacctmgr", "-nP", "show", "event", "Nodes=node[01-04]", "format=NodeName,Start,End,Reason"]);
    let ours: Vec<&str> = events.lines().filter(|line| line.contains("toolkit:rollout")).collect();
    assert!(ours.iter().any(|line| line.starts_with("node01|") && line.contains("reboot: BIOS")), "{events}");
    assert!(ours.iter().all(|line| line.starts_with("node01|") || line.starts_with("node02|")), "{events}");
    let sinfo = exec("head", &["sinfo", "--noheader", "--Node", "--format=%N %T"]);
    assert!(!sinfo.contains("drain"), "{sinfo}");

    let again = toolkit_metal(dir.path(), &["plan", "lab.yaml", "-i", "inventory.yaml", "--firmware"]);
    assert_success(&again, "the plan after the firmware rollout");
}
