//! `nvidia-smi nvlink -s [-i N]` output.
//!
//! Stage: parse (leaf). Input: per GPU a `GPU N: MODEL (UUID: …)` line followed by
//! `Link K: S GB/s` / `Link K: <inactive>` lines, or NVML's `Unable to retrieve NVLink
//! information as all links are inactive`. Output: [`NvlinkStatus`]: per GPU its links,
//! speeds, inactive links and links slower than their siblings (a degraded link).

use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, float, integer, quoted};

/// What `nvidia-smi nvlink -s` printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvlinkStatus {
    /// One entry per GPU.
    pub gpus: Vec<NvlinkGpu>,
}

/// The links of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvlinkGpu {
    /// 1-based line of the `GPU N:` header.
    pub line: usize,
    /// GPU index.
    pub index: u32,
    /// Model.
    pub name: String,
    /// UUID.
    pub uuid: Option<String>,
    /// NVML said every link is inactive.
    pub all_inactive: bool,
    /// Links in output order.
    pub links: Vec<NvlinkLink>,
    /// How many links are active.
    pub active_links: usize,
    /// Link numbers reported `<inactive>`.
    pub inactive_links: Vec<u32>,
    /// Link numbers slower than the fastest link of this GPU.
    pub degraded_links: Vec<u32>,
}

/// One link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvlinkLink {
    /// Link number.
    pub link: u32,
    /// Speed in GB/s; `None` when inactive.
    pub speed_gbps: Option<f64>,
}

/// Parses `nvidia-smi nvlink -s` output.
pub fn parse(text: &str) -> Result<NvlinkStatus, ParseError> {
    let mut gpus: Vec<NvlinkGpu> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() {
            continue;
        }
        if let Some(rest) = content.strip_prefix("GPU ") {
            gpus.push(gpu_header(rest, line, content)?);
        } else if content.contains("all links are inactive") {
            let gpu =
                gpus.last_mut().ok_or_else(|| ParseError::at(line, "a `GPU N: …` line first", quoted(content)))?;
            gpu.all_inactive = true;
        } else if let Some(rest) = content.strip_prefix("Link ") {
            let gpu =
                gpus.last_mut().ok_or_else(|| ParseError::at(line, "a `GPU N: …` line first", quoted(content)))?;
            gpu.links.push(link(rest, line, content)?);
        } else {
            return Err(ParseError::at(line, "`GPU N: …`, `Link N: S GB/s` or `Link N: <inactive>`", quoted(content)));
        }
    }
    if gpus.is_empty() {
        return Err(ParseError::end_of_input(text, "a `GPU N: MODEL (UUID: …)` line"));
    }
    for gpu in &mut gpus {
        let fastest = gpu.links.iter().filter_map(|link| link.speed_gbps).fold(0.0_f64, f64::max);
        gpu.active_links = gpu.links.iter().filter(|link| link.speed_gbps.is_some()).count();
        gpu.inactive_links = gpu.links.iter().filter(|link| link.speed_gbps.is_none()).map(|link| link.link).collect();
        gpu.degraded_links = gpu
            .links
            .iter()
            .filter(|link| link.speed_gbps.is_some_and(|speed| speed < fastest))
            .map(|link| link.link)
            .collect();
    }
    Ok(NvlinkStatus { gpus })
}

/// `7: NVIDIA A100-SXM4-80GB (UUID: GPU-…)`.
fn gpu_header(rest: &str, line: usize, content: &str) -> Result<NvlinkGpu, ParseError> {
    let (number, description) =
        rest.split_once(':').ok_or_else(|| ParseError::at(line, "`GPU N: MODEL (UUID: …)`", quoted(content)))?;
    let index = integer(number, line, "the GPU index")?;
    let description = description.trim();
    let (name, uuid) = match description.split_once("(UUID:") {
        Some((name, uuid)) => (name.trim().to_owned(), Some(uuid.trim().trim_end_matches(')').to_owned())),
        None => (description.to_owned(), None),
    };
    Ok(NvlinkGpu {
        line,
        index,
        name,
        uuid,
        all_inactive: false,
        links: Vec::new(),
        active_links: 0,
        inactive_links: Vec::new(),
        degraded_links: Vec::new(),
    })
}

/// `0: 25 GB/s` or `3: <inactive>`.
fn link(rest: &str, line: usize, content: &str) -> Result<NvlinkLink, ParseError> {
    let expected = "`Link N: S GB/s` or `Link N: <inactive>`";
    let (number, speed) = rest.split_once(':').ok_or_else(|| ParseError::at(line, expected, quoted(content)))?;
    let index = integer(number, line, "the link number")?;
    let speed = speed.trim();
    if speed.eq_ignore_ascii_case("<inactive>") {
        return Ok(NvlinkLink { link: index, speed_gbps: None });
    }
    let value = speed.strip_suffix("GB/s").ok_or_else(|| ParseError::at(line, expected, quoted(content)))?;
    Ok(NvlinkLink { link: index, speed_gbps: Some(float(value, line, "the link speed in GB/s")?) })
}

impl Summary for NvlinkStatus {
    fn summary(&self) -> String {
        let mut out = String::new();
        for gpu in &self.gpus {
            if gpu.all_inactive {
                let _ = writeln!(out, "GPU {} {}: all links inactive", gpu.index, gpu.name);
                continue;
            }
            let speeds: Vec<f64> = gpu.links.iter().filter_map(|link| link.speed_gbps).collect();
            let _ =
                write!(out, "GPU {} {}: {} of {} links active", gpu.index, gpu.name, gpu.active_links, gpu.links.len());
            if let Some(fastest) = speeds.iter().copied().reduce(f64::max) {
                let _ = write!(out, " at up to {fastest} GB/s");
            }
            if !gpu.degraded_links.is_empty() {
                let _ = write!(out, ", slower links {:?}", gpu.degraded_links);
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
    use super::super::fixtures::{read, replace_line};
    use super::*;

    #[test]
    fn a100_twelve_links_at_25() {
        let status = parse(&read("nvidia_smi_nvlink_status_a100_gpu_good.txt")).expect("parses");
        let gpu = &status.gpus[0];
        assert_eq!((gpu.index, gpu.name.as_str()), (7, "NVIDIA A100-SXM4-80GB"));
        assert_eq!(gpu.uuid.as_deref(), Some("GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8"));
        assert_eq!(gpu.links.len(), 12);
        assert_eq!(gpu.active_links, 12);
        assert!(gpu.links.iter().all(|link| link.speed_gbps == Some(25.0)));
        assert!(gpu.degraded_links.is_empty() && gpu.inactive_links.is_empty());
    }

    #[test]
    fn all_links_inactive() {
        let status = parse(&read("nvidia_smi_nvlink_status_a100_gpu_all_inactive.txt")).expect("parses");
        assert_eq!(status.gpus[0].index, 6);
        assert!(status.gpus[0].all_inactive);
        assert_eq!(status.gpus[0].active_links, 0);
    }

    #[test]
    fn inactive_and_slow_links_and_errors() {
        let text = read("nvidia_smi_nvlink_status_a100_gpu_good.txt");
        let edited = replace_line(&replace_line(&text, 4, "\t Link 2: <inactive>"), 6, "\t Link 4: 12.5 GB/s");
        let gpu = &parse(&edited).expect("parses").gpus[0];
        assert_eq!(gpu.inactive_links, [2]);
        assert_eq!(gpu.degraded_links, [4]);
        assert_eq!(gpu.active_links, 11);
        let garbled = replace_line(&text, 5, "\t Link 3: fast GB/s");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 5: expected a number for the link speed in GB/s, found `fast`"
        );
        let cut = replace_line(&text, 5, "\t Link 3: 2");
        assert_eq!(parse(&cut).expect_err("is refused").line(), Some(5));
        assert_eq!(parse("").expect_err("is refused").line(), Some(1));
    }
}
