//! `nvidia-smi -q [-d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,…]` output.
//!
//! Stage: parse (leaf). Input: the indented `Key : value` report. Output: [`NvidiaSmiQ`]:
//! driver and CUDA versions, and per GPU every field flattened to a `Section/Key` path
//! plus the sections acceptance tests read, typed: retired pages, remapped rows, ECC
//! error counters, active clock event (throttle) reasons and their counters, PCIe link
//! generation and width.
//!
//! The report is a tree by indentation; a key can have both a value and children
//! (`HW Slowdown : Not Active` over `HW Thermal Slowdown`). Section names changed across
//! drivers (`Clocks Throttle Reasons` → `Clocks Event Reasons` in 535; `Pending Page
//! Blacklist` → `Pending Page Retirement`), so both are read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, integer, quoted};

/// What `nvidia-smi -q` printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvidiaSmiQ {
    /// `Timestamp`.
    pub timestamp: Option<String>,
    /// `Driver Version`.
    pub driver_version: Option<String>,
    /// `CUDA Version` (`Not Found` on hosts without the CUDA driver library).
    pub cuda_version: Option<String>,
    /// `Attached GPUs`: GPUs on the host, which may exceed the blocks shown with `-i`.
    pub attached_gpus: Option<u32>,
    /// One entry per `GPU <bus id>` block.
    pub gpus: Vec<QGpu>,
}

/// One GPU block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QGpu {
    /// 1-based line of the `GPU …` header.
    pub line: usize,
    /// PCI bus id (`00000000:42:00.0`).
    pub bus_id: String,
    /// `Product Name`, when the report includes it.
    pub product_name: Option<String>,
    /// Every field as `Section/Sub/Key` → value.
    pub fields: BTreeMap<String, String>,
    /// `Retired Pages`.
    pub retired_pages: Option<RetiredPages>,
    /// `Remapped Rows`.
    pub remapped_rows: Option<RemappedRows>,
    /// `ECC Errors` counters as `Volatile/SRAM Uncorrectable` → count (`None` for `N/A`).
    pub ecc_errors: BTreeMap<String, Option<u64>>,
    /// Reasons reported `Active` under `Clocks Event Reasons` / `Clocks Throttle Reasons`.
    pub clock_event_reasons_active: Vec<String>,
    /// `Clocks Event Reasons Counters` in µs.
    pub clock_event_counters_us: BTreeMap<String, u64>,
    /// PCIe link from `PCI/GPU Link Info`.
    pub pcie: Option<PcieLink>,
}

/// `Retired Pages` (page retirement, pre-Ampere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetiredPages {
    /// Pages retired for single-bit errors; `None` for `N/A`.
    pub single_bit_ecc: Option<u64>,
    /// Pages retired for double-bit errors; `None` for `N/A`.
    pub double_bit_ecc: Option<u64>,
    /// A retirement waits for a reboot.
    pub pending: Option<bool>,
}

/// `Remapped Rows` (row remapping, Ampere and later).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemappedRows {
    /// Rows remapped for correctable errors.
    pub correctable: Option<u64>,
    /// Rows remapped for uncorrectable errors.
    pub uncorrectable: Option<u64>,
    /// A remap waits for a GPU reset.
    pub pending: Option<bool>,
    /// A remap failed: the GPU needs service.
    pub failure: Option<bool>,
}

/// PCIe link generation and width.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PcieLink {
    /// Current generation.
    pub generation_current: Option<u32>,
    /// Maximum generation of GPU and host.
    pub generation_max: Option<u32>,
    /// Current width (lanes).
    pub width_current: Option<u32>,
    /// Maximum width (lanes).
    pub width_max: Option<u32>,
}

/// A node of the indentation tree.
#[derive(Debug)]
struct Node {
    line: usize,
    indent: usize,
    key: String,
    value: Option<String>,
    children: Vec<Node>,
}

impl Node {
    fn child(&self, key: &str) -> Option<&Node> {
        self.children.iter().find(|child| child.key == key)
    }

    fn flatten(&self, prefix: &str, into: &mut BTreeMap<String, String>) {
        for child in &self.children {
            let path = if prefix.is_empty() { child.key.clone() } else { format!("{prefix}/{}", child.key) };
            if let Some(value) = &child.value {
                into.insert(path.clone(), value.clone());
            }
            child.flatten(&path, into);
        }
    }
}

/// Builds the tree: each line's parent is the nearest earlier line indented less.
fn tree(text: &str) -> Vec<Node> {
    let mut stack: Vec<Node> = Vec::new();
    let mut roots = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let content = raw.trim();
        if content.is_empty() || content.starts_with("====") {
            continue;
        }
        let indent = raw.len() - raw.trim_start().len();
        let (key, value) = match content.split_once(" : ") {
            Some((key, value)) => (key.trim().to_owned(), Some(value.trim().to_owned())),
            None => match content.strip_suffix(':') {
                Some(key) => (key.trim().to_owned(), Some(String::new())),
                None => (content.to_owned(), None),
            },
        };
        let node = Node { line: index + 1, indent, key, value, children: Vec::new() };
        while stack.last().is_some_and(|top| top.indent >= indent) {
            close(&mut stack, &mut roots);
        }
        stack.push(node);
    }
    while !stack.is_empty() {
        close(&mut stack, &mut roots);
    }
    roots
}

fn close(stack: &mut Vec<Node>, roots: &mut Vec<Node>) {
    if let Some(node) = stack.pop() {
        match stack.last_mut() {
            Some(parent) => parent.children.push(node),
            None => roots.push(node),
        }
    }
}

/// Parses `nvidia-smi -q` output.
pub fn parse(text: &str) -> Result<NvidiaSmiQ, ParseError> {
    if !text.lines().any(|line| line.trim() == "==============NVSMI LOG==============") {
        let first = text.lines().enumerate().find(|(_, line)| !line.trim().is_empty());
        return Err(match first {
            Some((index, line)) => {
                ParseError::at(index + 1, "the `==============NVSMI LOG==============` banner", quoted(line))
            }
            None => ParseError::end_of_input(text, "the `==============NVSMI LOG==============` banner"),
        });
    }
    let roots = tree(text);
    let top = |key: &str| roots.iter().find(|node| node.key == key).and_then(|node| node.value.clone());
    let attached_gpus = match roots.iter().find(|node| node.key == "Attached GPUs") {
        Some(node) => Some(integer(node.value.as_deref().unwrap_or_default(), node.line, "`Attached GPUs`")?),
        None => None,
    };
    let mut gpus = Vec::new();
    for node in roots.iter().filter(|node| node.key.starts_with("GPU ") && node.value.is_none()) {
        gpus.push(gpu(node)?);
    }
    if gpus.is_empty() {
        return Err(ParseError::end_of_input(text, "a `GPU <bus id>` block"));
    }
    Ok(NvidiaSmiQ {
        timestamp: top("Timestamp"),
        driver_version: top("Driver Version"),
        cuda_version: top("CUDA Version"),
        attached_gpus,
        gpus,
    })
}

fn gpu(node: &Node) -> Result<QGpu, ParseError> {
    let mut fields = BTreeMap::new();
    node.flatten("", &mut fields);
    let retired_pages = node.child("Retired Pages").map(retired_pages).transpose()?;
    let remapped_rows = node.child("Remapped Rows").map(remapped_rows).transpose()?;
    let mut ecc_errors = BTreeMap::new();
    if let Some(ecc) = node.child("ECC Errors") {
        let mut flat = BTreeMap::new();
        ecc.flatten("", &mut flat);
        for (path, value) in flat {
            let line = find_line(ecc, &path);
            ecc_errors.insert(path.clone(), count(&value, line, &format!("`ECC Errors/{path}`"))?);
        }
    }
    let reasons = node.child("Clocks Event Reasons").or_else(|| node.child("Clocks Throttle Reasons"));
    let mut clock_event_reasons_active = Vec::new();
    if let Some(reasons) = reasons {
        let mut flat = BTreeMap::new();
        reasons.flatten("", &mut flat);
        clock_event_reasons_active =
            flat.into_iter().filter(|(_, value)| value == "Active").map(|(path, _)| path).collect();
    }
    let mut clock_event_counters_us = BTreeMap::new();
    if let Some(counters) = node.child("Clocks Event Reasons Counters") {
        for child in &counters.children {
            let value = child.value.as_deref().unwrap_or_default();
            let number = value.strip_suffix(" us").unwrap_or(value);
            let what = format!("`{}` in µs", child.key);
            clock_event_counters_us.insert(child.key.clone(), integer(number, child.line, &what)?);
        }
    }
    let pcie = node.child("PCI").and_then(|pci| pci.child("GPU Link Info")).map(pcie).transpose()?;
    Ok(QGpu {
        line: node.line,
        bus_id: node.key.trim_start_matches("GPU ").trim().to_owned(),
        product_name: node.child("Product Name").and_then(|name| name.value.clone()),
        fields,
        retired_pages,
        remapped_rows,
        ecc_errors,
        clock_event_reasons_active,
        clock_event_counters_us,
        pcie,
    })
}

/// The line of the node at `path` below `node` (for error messages).
fn find_line(node: &Node, path: &str) -> usize {
    let mut current = node;
    for part in path.split('/') {
        match current.child(part) {
            Some(child) => current = child,
            None => break,
        }
    }
    current.line
}

/// A count, or `None` for `N/A`.
fn count(value: &str, line: usize, what: &str) -> Result<Option<u64>, ParseError> {
    if value == "N/A" || value.is_empty() {
        return Ok(None);
    }
    integer(value, line, what).map(Some)
}

/// `Yes`/`No`, or `None` for `N/A`.
fn yes_no(value: &str, line: usize, what: &str) -> Result<Option<bool>, ParseError> {
    match value {
        "Yes" => Ok(Some(true)),
        "No" => Ok(Some(false)),
        "N/A" | "" => Ok(None),
        other => Err(ParseError::at(line, format!("`Yes` or `No` for {what}"), quoted(other))),
    }
}

/// The value of the first present key of `keys` under `section`, or an error naming the
/// section's line: the report was cut inside the section.
fn required<'a>(section: &'a Node, keys: &[&str]) -> Result<(&'a str, usize), ParseError> {
    keys.iter()
        .find_map(|key| section.child(key))
        .map(|child| (child.value.as_deref().unwrap_or_default(), child.line))
        .ok_or_else(|| {
            ParseError::at(section.line, format!("`{}` in the `{}` section", keys[0], section.key), "no such line")
        })
}

fn retired_pages(section: &Node) -> Result<RetiredPages, ParseError> {
    let (single, single_line) = required(section, &["Single Bit ECC"])?;
    let (double, double_line) = required(section, &["Double Bit ECC"])?;
    let (pending, pending_line) = required(section, &["Pending Page Blacklist", "Pending Page Retirement"])?;
    Ok(RetiredPages {
        single_bit_ecc: count(single, single_line, "`Single Bit ECC`")?,
        double_bit_ecc: count(double, double_line, "`Double Bit ECC`")?,
        pending: yes_no(pending, pending_line, "a pending retirement")?,
    })
}

fn remapped_rows(section: &Node) -> Result<RemappedRows, ParseError> {
    let (correctable, correctable_line) = required(section, &["Correctable Error"])?;
    let (uncorrectable, uncorrectable_line) = required(section, &["Uncorrectable Error"])?;
    let (pending, pending_line) = required(section, &["Pending"])?;
    let (failure, failure_line) = required(section, &["Remapping Failure Occurred"])?;
    Ok(RemappedRows {
        correctable: count(correctable, correctable_line, "`Correctable Error`")?,
        uncorrectable: count(uncorrectable, uncorrectable_line, "`Uncorrectable Error`")?,
        pending: yes_no(pending, pending_line, "a pending remap")?,
        failure: yes_no(failure, failure_line, "a remapping failure")?,
    })
}

fn pcie(link: &Node) -> Result<PcieLink, ParseError> {
    let number = |section: &str, key: &str| -> Result<Option<u32>, ParseError> {
        let Some(node) = link.child(section).and_then(|section| section.child(key)) else { return Ok(None) };
        let value = node.value.as_deref().unwrap_or_default();
        if value == "N/A" || value == "Unknown" {
            return Ok(None);
        }
        integer(value.trim_end_matches('x'), node.line, &format!("`{section}/{key}`")).map(Some)
    };
    Ok(PcieLink {
        generation_current: number("PCIe Generation", "Current")?,
        generation_max: number("PCIe Generation", "Max")?,
        width_current: number("Link Width", "Current")?,
        width_max: number("Link Width", "Max")?,
    })
}

/// `N/A` for an absent value, else the value.
fn shown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "N/A".to_owned(), |value| value.to_string())
}

impl Summary for NvidiaSmiQ {
    fn summary(&self) -> String {
        let mut out = format!(
            "nvidia-smi -q: driver {}, {} GPU blocks (attached {})\n",
            self.driver_version.as_deref().unwrap_or("?"),
            self.gpus.len(),
            self.attached_gpus.map_or_else(|| "?".to_owned(), |count| count.to_string())
        );
        for gpu in &self.gpus {
            let _ = write!(out, "GPU {}", gpu.bus_id);
            if let Some(pages) = &gpu.retired_pages {
                let _ = write!(
                    out,
                    ": retired pages SBE {} DBE {} pending {}",
                    shown(pages.single_bit_ecc),
                    shown(pages.double_bit_ecc),
                    shown(pages.pending)
                );
            }
            if let Some(rows) = &gpu.remapped_rows {
                let _ = write!(out, ": remapped rows pending {} failure {}", shown(rows.pending), shown(rows.failure));
            }
            if !gpu.clock_event_reasons_active.is_empty() {
                let _ = write!(out, ": clock events active {}", gpu.clock_event_reasons_active.join(", "));
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::{first_lines, read, replace_line};
    use super::*;

    const PAGES: &str = "nvidia_smi_q_page_retirement_8gpu_azure.txt";
    const PERFORMANCE: &str = "nvidia_smi_q_excerpt_d_memory_performance_rtxpro6000_580.txt";

    #[test]
    fn page_retirement_of_eight_gpus() {
        let report = parse(&read(PAGES)).expect("parses");
        assert_eq!(report.driver_version.as_deref(), Some("535.86.10"));
        assert_eq!(report.cuda_version.as_deref(), Some("12.2"));
        assert_eq!(report.attached_gpus, Some(8));
        assert_eq!(report.timestamp.as_deref(), Some("Thu Mar 14 20:45:34 2024"));
        assert_eq!(report.gpus.len(), 8);
        assert_eq!(report.gpus[7].bus_id, "00000008:00:00.0");
        for gpu in &report.gpus {
            let pages = gpu.retired_pages.as_ref().expect("present");
            assert_eq!(*pages, RetiredPages { single_bit_ecc: Some(0), double_bit_ecc: Some(0), pending: Some(false) });
        }
        assert_eq!(report.gpus[0].fields["Retired Pages/Pending Page Blacklist"], "No");
    }

    #[test]
    fn clock_event_reasons_and_counters_with_nested_keys() {
        let report = parse(&read(PERFORMANCE)).expect("parses");
        assert_eq!(report.driver_version.as_deref(), Some("580.105.06"));
        assert_eq!(report.cuda_version.as_deref(), Some("Not Found"));
        assert_eq!(report.attached_gpus, Some(4));
        let gpu = &report.gpus[0];
        assert_eq!(gpu.bus_id, "00000000:42:00.0");
        assert_eq!(gpu.fields["Performance State"], "P8");
        assert!(gpu.clock_event_reasons_active.is_empty());
        assert_eq!(gpu.fields["Clocks Event Reasons/HW Slowdown/HW Thermal Slowdown"], "Not Active");
        assert_eq!(gpu.clock_event_counters_us["SW Power Capping"], 1_202_176);
        assert_eq!(gpu.clock_event_counters_us["HW Power Braking"], 0);
        // `vGPU Driver Capability` is a top-level section, not a GPU.
        assert_eq!(report.gpus.len(), 1);
    }

    #[test]
    fn active_reason_is_listed_by_path() {
        let text = read(PERFORMANCE);
        let active = replace_line(&text, 18, "            HW Thermal Slowdown           : Active");
        let report = parse(&active).expect("parses");
        assert_eq!(report.gpus[0].clock_event_reasons_active, ["HW Slowdown/HW Thermal Slowdown"]);
    }

    #[test]
    fn garbled_and_truncated_reports_name_lines() {
        let text = read(PAGES);
        let garbled = replace_line(&text, 11, "        Single Bit ECC                    : lots");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 11: expected an integer for `Single Bit ECC`, found `lots`"
        );
        // Cut inside GPU 3's `Retired Pages`: the section lacks its last keys.
        let cut = first_lines(&text, 23);
        let error = parse(&cut).expect_err("is refused");
        assert_eq!(
            error.to_string(),
            "could not parse line 22: expected `Double Bit ECC` in the `Retired Pages` section, found no such line"
        );
        assert_eq!(parse("garbage\n").expect_err("is refused").line(), Some(1));
        assert_eq!(parse("").expect_err("is refused").line(), Some(1));
    }
}
