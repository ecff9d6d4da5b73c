//! NVIDIA's DCGM exporter on GPU nodes: the package (pinned to DCGM's major), toolkit's
//! own counters file and a unit that reads the node's DCGM host engine.
//!
//! Stage: render. Input: [`DcgmExporter`] per GPU node. Output: resources appended to
//! `out`. Rendered only here: nothing in the lab has a GPU, so the exporter cannot start;
//! what is tested is the text, and that every DCGM metric the alert rules use is in
//! the counters file (`rules_use_only_exported_counters`).
//!
//! Why toolkit's own counters file: the exporter's `default-counters.csv` leaves the
//! ECC, retired-page, NVLink-error and XID-count rows commented out, which are the
//! counters that say a GPU must leave service.

use std::fmt::Write as _;

use crate::model::monitoring::{DCGM_EXPORTER_PORT, DcgmExporter};
use crate::render::common::{file, package, service};
use crate::resource::{Content, OnChange, Resource, ResourceId, Target};

/// toolkit's counters file, read by the exporter's `--collectors`.
pub const COUNTERS_PATH: &str = "/etc/dcgm-exporter/toolkit-counters.csv";
/// The unit, in `/etc` so it replaces the package's (which reads the default counters).
pub const UNIT_PATH: &str = "/etc/systemd/system/nvidia-dcgm-exporter.service";
/// apt preferences holding the exporter at DCGM's major.
pub const PIN_PATH: &str = "/etc/apt/preferences.d/dcgm-exporter.pref";
/// The unit's name (NVIDIA's package ships it under this name).
const SERVICE: &str = "nvidia-dcgm-exporter";
/// The node's DCGM host engine (`nvidia-dcgm`, started by the GPU stack) listens here;
/// the exporter reads it rather than starting a second, embedded one.
const HOST_ENGINE: &str = "localhost:5555";
/// `DCGM_EXP_XID_ERRORS_COUNT` counts XIDs inside this window (the exporter's default).
const XID_WINDOW_MS: u32 = 300_000;

/// One row of the counters file: DCGM field (the metric's name), Prometheus type, help.
pub struct Counter {
    /// DCGM field or exporter metric name.
    pub field: &'static str,
    /// `gauge`, `counter` or `label`.
    pub kind: &'static str,
    /// Help text (no commas: the file has exactly two per row).
    pub help: &'static str,
}

const fn counter(field: &'static str, kind: &'static str, help: &'static str) -> Counter {
    Counter { field, kind, help }
}

/// What the exporter exports, by purpose: the health counters the rules and operators
/// need first, then the usual load and temperature gauges.
pub const COUNTERS: &[Counter] = &[
    // XIDs: the last code, and a count per code over the window (what the rules use).
    counter("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error"),
    counter("DCGM_EXP_XID_ERRORS_COUNT", "gauge", "XID errors per code in the last window"),
    // ECC: volatile since the driver loaded, aggregate over the GPU's life.
    counter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors"),
    counter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors"),
    counter("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Single-bit aggregate ECC errors"),
    counter("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Double-bit aggregate ECC errors"),
    // Page retirement (before Ampere) and row remapping (Ampere and later).
    counter("DCGM_FI_DEV_RETIRED_SBE", "counter", "Pages retired for single-bit errors"),
    counter("DCGM_FI_DEV_RETIRED_DBE", "counter", "Pages retired for double-bit errors"),
    counter("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Pages pending retirement"),
    counter("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors"),
    counter("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors"),
    counter("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    // NVLink and PCIe link errors.
    counter("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "NVLink flow-control CRC errors"),
    counter("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "NVLink data CRC errors"),
    counter("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "NVLink retries"),
    counter("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "NVLink recovery errors"),
    counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe retries"),
    // Throttling.
    counter("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling for power (us)"),
    counter("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling for temperature (us)"),
    // Temperature, power, load, memory.
    counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C)"),
    counter("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (C)"),
    counter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W)"),
    counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock (MHz)"),
    counter("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (%)"),
    counter("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (MiB)"),
    counter("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (MiB)"),
    // The driver version, as a label on every series.
    counter("DCGM_FI_DRIVER_VERSION", "label", "Driver version"),
];

/// The counters file: the exporter's CSV format, `field, type, help`, `#` comments.
#[must_use]
pub fn counters_csv() -> String {
    let mut text = String::from(
        "# Rendered by toolkit: the DCGM fields the exporter exports (DCGM field, Prometheus type, help).\n\
         # Unlike the exporter's default-counters.csv it includes ECC, retired pages, row remapping,\n\
         # NVLink errors and XID counts, which the alert rules read.\n",
    );
    for row in COUNTERS {
        let _ = writeln!(text, "{}, {}, {}", row.field, row.kind, row.help);
    }
    text
}

/// The unit: NVIDIA's, but with toolkit's counters and the node's host engine.
fn unit() -> String {
    format!(
        "# Rendered by toolkit: NVIDIA's DCGM exporter with toolkit's counters, reading the node's\n\
         # DCGM host engine (nvidia-dcgm) instead of starting an embedded one.\n\
         [Unit]\nDescription=NVIDIA DCGM exporter (toolkit's counters)\nWants=nvidia-dcgm.service\n\
         After=nvidia-dcgm.service\n\n[Service]\nExecStart=/usr/bin/dcgm-exporter --collectors {COUNTERS_PATH} \
         --address :{DCGM_EXPORTER_PORT} --remote-hostengine-info {HOST_ENGINE} --xid-count-window-size {XID_WINDOW_MS}\n\
         Restart=on-failure\nRestartSec=10\n\n[Install]\nWantedBy=multi-user.target\n"
    )
}

/// The exporter's resources on one GPU node.
pub fn render(exporter: &DcgmExporter, out: &mut Vec<Resource>) {
    let target = Target::node(&exporter.node);
    let pin = format!(
        "# The DCGM exporter follows DCGM's major version (managed by toolkit).\nPackage: {}\nPin: version {}\nPin-Priority: 1001\n",
        exporter.package, exporter.pin
    );
    let pin = file(&target, PIN_PATH, Content::new(pin), 0o644);
    let dcgm = ResourceId::new(&target.name, "package", &exporter.dcgm_package);
    let installed = package(&target, exporter.package).after([pin.id.clone(), dcgm]);
    let counters = file(&target, COUNTERS_PATH, Content::new(counters_csv()), 0o644).after([installed.id.clone()]);
    let unit = file(&target, UNIT_PATH, Content::new(unit()), 0o644).after([installed.id.clone()]);
    let watched = vec![counters.id.clone(), unit.id.clone()];
    let running = service(&target, SERVICE, watched, OnChange::Restart).after([ResourceId::new(
        &target.name,
        "service",
        "nvidia-dcgm",
    )]);
    out.extend([pin, installed, counters, unit, running]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_exactly_two_commas() {
        for line in counters_csv().lines().filter(|line| !line.starts_with('#')) {
            assert_eq!(line.matches(',').count(), 2, "{line}");
        }
    }

    #[test]
    fn the_health_counters_the_default_file_omits_are_exported() {
        let csv = counters_csv();
        for field in [
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_EXP_XID_ERRORS_COUNT",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_RETIRED_DBE",
            "DCGM_FI_DEV_RETIRED_PENDING",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        ] {
            assert!(csv.lines().any(|line| line.starts_with(&format!("{field}, "))), "{field} is missing:\n{csv}");
        }
    }
}
