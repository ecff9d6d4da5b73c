//! Each field checked alone, and what is not reported is said, not passed.

use super::*;
use crate::bmc::inspect::{Drive, Part, Processor};

fn cpu(id: &str, cores: u32, threads: u32) -> Processor {
    Processor {
        id: id.into(),
        kind: Some("CPU".into()),
        model: None,
        socket: None,
        cores: Some(cores),
        threads: Some(threads),
    }
}

fn gpu_function(device: &str) -> PcieFunction {
    PcieFunction {
        uri: format!("/f/{device}"),
        vendor_id: Some("0x10DE".into()),
        device_id: Some(device.into()),
        class_code: Some("0x030200".into()),
        function_type: Some("Physical".into()),
    }
}

/// A node with 2 × 32-core SMT CPUs, 2048 GiB, 8 H100 SXM, 4 NVMe.
fn node() -> Hardware {
    Hardware {
        system: "/redfish/v1/Systems/1".into(),
        manufacturer: None,
        model: None,
        serial: None,
        processor_summary: None,
        memory_gib: Some(2048.0),
        processors: Part::Reported(vec![cpu("CPU1", 32, 64), cpu("CPU2", 32, 64)]),
        memory_modules_mib: Part::Reported(2048 * 1024),
        drives: Part::Reported(
            (0..4)
                .map(|i| Drive {
                    id: format!("nvme{i}"),
                    capacity_bytes: Some(3_840_000_000_000),
                    model: None,
                    serial: None,
                    media: Some("SSD".into()),
                    protocol: Some("NVMe".into()),
                })
                .collect(),
        ),
        nics: Part::Reported(Vec::new()),
        pcie: Part::Reported((0..8).map(|_| gpu_function("0x2330")).collect()),
    }
}

fn expected() -> Expected {
    Expected {
        group: "gpu".into(),
        sockets: Some(2),
        cores_per_socket: Some(32),
        threads_per_core: Some(2),
        memory_gib: Some(2048),
        gpu: Some(("h100".into(), 8)),
        rail_nics: None,
        local_nvme: Some(4),
        os_disk: None,
    }
}

fn messages(verdict: &Verdict) -> Vec<&str> {
    verdict.mismatches.iter().map(|m| m.message.as_str()).collect()
}

#[test]
fn the_blueprint_node_matches() {
    let verdict = verify(&expected(), &node());
    assert!(verdict.matches(), "{verdict:?}");
    assert!(verdict.unchecked.is_empty());
}

#[test]
fn a_missing_gpu_is_named_with_both_counts() {
    let mut hw = node();
    hw.pcie = Part::Reported((0..7).map(|_| gpu_function("0x2330")).collect());
    assert_eq!(messages(&verify(&expected(), &hw)), ["7 GPUs, blueprint 8"]);
}

#[test]
fn gpus_of_another_model_or_virtual_functions_do_not_count() {
    let mut hw = node();
    let mut functions: Vec<_> = (0..8).map(|_| gpu_function("0x20b2")).collect(); // A100
    functions.push(PcieFunction { function_type: Some("Virtual".into()), ..gpu_function("0x2330") });
    hw.pcie = Part::Reported(functions);
    assert_eq!(messages(&verify(&expected(), &hw)), ["0 GPUs, blueprint 8"]);
}

#[test]
fn gpus_listed_as_processors_count_when_pcie_is_not_reported() {
    let mut hw = node();
    hw.pcie = Part::NotReported { reason: "no PCIeDevices".into() };
    let mut processors = vec![cpu("CPU1", 32, 64), cpu("CPU2", 32, 64)];
    processors.extend((0..8).map(|i| Processor { kind: Some("GPU".into()), ..cpu(&format!("GPU{i}"), 0, 0) }));
    hw.processors = Part::Reported(processors);
    assert!(verify(&expected(), &hw).matches());
}

#[test]
fn memory_short_by_a_dimm_group_is_a_mismatch_and_firmware_reserve_is_not() {
    let mut hw = node();
    hw.memory_modules_mib = Part::Reported(1536 * 1024);
    assert_eq!(messages(&verify(&expected(), &hw)), ["1536 GiB memory, blueprint 2048"]);
    // 2 GiB reserved by firmware out of 2 TiB.
    hw.memory_modules_mib = Part::NotReported { reason: "404".into() };
    hw.memory_gib = Some(2046.0);
    assert!(verify(&expected(), &hw).matches());
}

#[test]
fn cpu_sockets_cores_and_threads_each_checked() {
    let mut hw = node();
    hw.processors = Part::Reported(vec![cpu("CPU1", 24, 24)]);
    assert_eq!(
        messages(&verify(&expected(), &hw)),
        ["1 CPU sockets, blueprint 2", "24 cores per socket, blueprint 32", "1 threads per core, blueprint 2"]
    );
}

#[test]
fn nvme_count_is_checked_against_nvme_drives_only() {
    let mut hw = node();
    if let Part::Reported(drives) = &mut hw.drives {
        drives[0].protocol = Some("SATA".into());
    }
    assert_eq!(messages(&verify(&expected(), &hw)), ["3 NVMe drives, blueprint 4"]);
}

#[test]
fn what_the_bmc_does_not_report_is_unchecked_with_its_reason_not_a_match_of_zero() {
    let mut hw = node();
    let reason = "`/redfish/v1/Systems/1/Memory` answered HTTP 404";
    hw.memory_modules_mib = Part::NotReported { reason: reason.into() };
    hw.memory_gib = None;
    hw.pcie = Part::NotReported { reason: "neither the system nor its chassis has `PCIeDevices`".into() };
    hw.processors = Part::NotReported { reason: "x".into() };
    hw.drives = Part::NotReported { reason: "`Storage` answered HTTP 500".into() };
    let verdict = verify(&expected(), &hw);
    assert!(verdict.matches());
    let fields: Vec<_> = verdict.unchecked.iter().map(|u| u.field.as_str()).collect();
    assert_eq!(fields, ["cpu_sockets", "cores_per_socket", "memory_gib", "gpus", "nvme"]);
    assert_eq!(verdict.unchecked[2].reason, reason);
}

#[test]
fn every_catalog_gpu_with_ids_is_a_catalog_model() {
    for (name, _) in GPU_DEVICE_IDS {
        assert!(crate::model::gpu::find(name).is_some(), "{name} not in the GPU catalog");
    }
}
