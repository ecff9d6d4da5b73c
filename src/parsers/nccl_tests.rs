//! nccl-tests (`all_reduce_perf`, `all_gather_perf`, `alltoall_perf`, …) text output.
//!
//! Stage: parse (leaf). Input: the stdout of one nccl-tests run, possibly interleaved with
//! MPI warnings and `NCCL INFO` lines. Output: [`NcclTestsOutput`]: settings, ranks,
//! one row per message size (out-of-place and in-place time, algbw, busbw, `#wrong`),
//! the footer (out-of-bounds count, `# Avg bus bandwidth`), the peak busbw, and a
//! typed failure when the test died (`Test CUDA failure …`).
//!
//! Rows are found by shape, not position (validators.md §9 trap 1): a data row is a
//! line whose type and redop columns hold a known data type and reduction, so log lines
//! between rows are skipped while a truncated or garbled row is an error. Columns are
//! mapped by the header names when a header is present (old builds have no `root` and
//! an `error` column; forks add columns), else by the current 13-column layout.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, float, integer, quoted};

/// Data types nccl-tests prints in the `type` column (current and older names).
const DATA_TYPES: &[&str] = &[
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2",
    "char", "int", "uint",
];

/// Reductions nccl-tests prints in the `redop` column; `none` for data-movement collectives.
const REDUCTIONS: &[&str] = &["sum", "prod", "max", "min", "avg", "mulsum", "none"];

/// What one nccl-tests run printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclTestsOutput {
    /// `all_reduce_perf` etc., from `# Collective test starting:` (recent versions only).
    pub collective: Option<String>,
    /// From `# nccl-tests version X …` (recent versions only).
    pub nccl_tests_version: Option<String>,
    /// From a `NCCL version 2.26.2+cuda12.8` line, when NCCL printed one.
    pub nccl_version: Option<String>,
    /// The `# nThread 1 nGpus 1 minBytes …` line as key → value (`warmup iters` → `5`).
    pub settings: BTreeMap<String, String>,
    /// Whether data validation ran (`validation: 1`); off (`-c 0`) means `#wrong` is `N/A`.
    pub validation: Option<bool>,
    /// One entry per `#  Rank N …` line.
    pub ranks: Vec<NcclRank>,
    /// One entry per message size, in output order.
    pub rows: Vec<NcclRow>,
    /// `# Out of bounds values : N OK|FAILED`.
    pub out_of_bounds: Option<OutOfBounds>,
    /// `# Avg bus bandwidth : X` in GB/s: the mean over every row and both placements,
    /// so it depends on the size sweep (validators.md §3).
    pub avg_busbw_gbps: Option<f64>,
    /// `OK`/`FAILED` after the average when `NCCL_TESTS_MIN_BW` was set.
    pub avg_busbw_gate_ok: Option<bool>,
    /// Mean of every busbw value in the rows, to cross-check the footer.
    pub avg_busbw_computed_gbps: Option<f64>,
    /// The highest busbw of any row and placement.
    pub peak: Option<NcclPeak>,
    /// Sum of every numeric `#wrong` value: non-zero means corrupted data.
    pub wrong_total: f64,
    /// The smallest `nranks N` in `NCCL INFO comm …` lines: 1 means every process ran
    /// alone (nccl-tests built without MPI but launched by mpirun).
    pub communicator_ranks: Option<u32>,
    /// `test failed: <message>` when the run died (`Test CUDA failure …`).
    pub failure: Option<String>,
    /// Things a reader must know that are not errors in the text (all busbw 0, …).
    pub warnings: Vec<String>,
}

/// One `#  Rank  0 Group  0 Pid 1234 on host device  0 [0000:19:00] NVIDIA H100 80GB HBM3` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclRank {
    /// Rank number.
    pub rank: u32,
    /// Group (absent in old builds).
    pub group: Option<u32>,
    /// Process id.
    pub pid: u64,
    /// Host name.
    pub host: String,
    /// CUDA device index on the host.
    pub device: u32,
    /// PCI bus id as printed (`0000:19:00`).
    pub bus_id: Option<String>,
    /// GPU model (`NVIDIA H100 80GB HBM3`).
    pub model: Option<String>,
}

/// One data row: a message size measured out-of-place and in-place.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclRow {
    /// 1-based line in the output.
    pub line: usize,
    /// Message size in bytes (for all_gather/reduce_scatter: the whole buffer).
    pub size_bytes: u64,
    /// Element count.
    pub count: u64,
    /// Data type (`float`).
    pub data_type: String,
    /// Reduction (`sum`, `none`).
    pub redop: String,
    /// Root rank (`-1` when none; absent in old builds).
    pub root: Option<i64>,
    /// The out-of-place measurement.
    pub out_of_place: NcclMeasurement,
    /// The in-place measurement; `None` when the collective has none (`N/A` columns).
    pub in_place: Option<NcclMeasurement>,
}

/// Time and bandwidths of one placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclMeasurement {
    /// Time per iteration in µs.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s (10^9 B/s).
    pub algbw_gbps: f64,
    /// Bus bandwidth, GB/s: algbw × the collective's factor.
    pub busbw_gbps: f64,
    /// Wrong elements; `None` when validation was off (`N/A`).
    pub wrong: Option<f64>,
}

/// The out-of-bounds footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutOfBounds {
    /// How many values were out of bounds.
    pub count: u64,
    /// `OK` (true) or `FAILED` (false).
    pub ok: bool,
}

/// Where the highest bus bandwidth was measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclPeak {
    /// Message size in bytes.
    pub size_bytes: u64,
    /// Bus bandwidth, GB/s.
    pub busbw_gbps: f64,
    /// `out-of-place` or `in-place`.
    pub placement: &'static str,
}

/// Column positions of one placement.
#[derive(Debug, Clone, Copy)]
struct Group {
    time: usize,
    algbw: usize,
    busbw: usize,
    wrong: Option<usize>,
}

/// Column positions of a data row.
#[derive(Debug, Clone)]
struct Layout {
    names: Vec<String>,
    size: usize,
    count: usize,
    data_type: usize,
    redop: usize,
    root: Option<usize>,
    out_of_place: Group,
    in_place: Option<Group>,
}

impl Layout {
    fn current() -> Self {
        let names = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"];
        let mut all: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        all.extend(names[5..].iter().map(|name| (*name).to_owned()));
        Self {
            names: all,
            size: 0,
            count: 1,
            data_type: 2,
            redop: 3,
            root: Some(4),
            out_of_place: Group { time: 5, algbw: 6, busbw: 7, wrong: Some(8) },
            in_place: Some(Group { time: 9, algbw: 10, busbw: 11, wrong: Some(12) }),
        }
    }

    /// Builds the layout from the `size count type redop root time …` header tokens.
    fn from_header(tokens: &[&str], line: usize) -> Result<Self, ParseError> {
        let names: Vec<String> = tokens.iter().map(|token| token.to_lowercase()).collect();
        let find = |name: &str| names.iter().position(|candidate| candidate == name);
        let all = |name: &str| -> Vec<usize> {
            names.iter().enumerate().filter(|(_, candidate)| *candidate == name).map(|(index, _)| index).collect()
        };
        let expected = "a column header `size count type redop [root] time algbw busbw #wrong …`";
        let missing = || ParseError::at(line, expected, quoted(&tokens.join(" ")));
        let times = all("time");
        let algbws = all("algbw");
        let busbws = all("busbw");
        let wrongs: Vec<usize> = names
            .iter()
            .enumerate()
            .filter(|(_, name)| *name == "#wrong" || *name == "error")
            .map(|(i, _)| i)
            .collect();
        let group = |index: usize| -> Option<Group> {
            Some(Group {
                time: *times.get(index)?,
                algbw: *algbws.get(index)?,
                busbw: *busbws.get(index)?,
                wrong: wrongs.get(index).copied(),
            })
        };
        Ok(Self {
            size: find("size").ok_or_else(missing)?,
            count: find("count").ok_or_else(missing)?,
            data_type: find("type").ok_or_else(missing)?,
            redop: find("redop").ok_or_else(missing)?,
            root: find("root"),
            out_of_place: group(0).ok_or_else(missing)?,
            in_place: group(1),
            names,
        })
    }

    fn width(&self) -> usize {
        self.names.len()
    }

    /// Whether `tokens` look like a data row: its type and redop columns say so, or it
    /// starts with two integers (size and count) as no log line does, which catches rows
    /// cut before their type column.
    fn is_row(&self, tokens: &[&str]) -> bool {
        let at = |index: usize| tokens.get(index).copied().unwrap_or_default();
        let is_integer = |token: &str| !token.is_empty() && token.chars().all(|c| c.is_ascii_digit());
        (DATA_TYPES.contains(&at(self.data_type)) && REDUCTIONS.contains(&at(self.redop)))
            || (is_integer(at(self.size)) && is_integer(at(self.count)))
    }

    fn row(&self, tokens: &[&str], line: usize) -> Result<NcclRow, ParseError> {
        if tokens.len() != self.width() {
            return Err(ParseError::at(
                line,
                format!("{} columns ({})", self.width(), self.names.join(" ")),
                format!("{} columns in {}", tokens.len(), quoted(&tokens.join(" "))),
            ));
        }
        let measurement = |group: Group| -> Result<NcclMeasurement, ParseError> {
            let wrong = match group.wrong.map(|index| tokens[index]) {
                None | Some("N/A") => None,
                Some(token) => Some(float(token, line, "`#wrong`")?),
            };
            Ok(NcclMeasurement {
                time_us: float(tokens[group.time], line, "`time`")?,
                algbw_gbps: float(tokens[group.algbw], line, "`algbw`")?,
                busbw_gbps: float(tokens[group.busbw], line, "`busbw`")?,
                wrong,
            })
        };
        let in_place = match self.in_place {
            Some(group) if tokens[group.time] != "N/A" => Some(measurement(group)?),
            _ => None,
        };
        Ok(NcclRow {
            line,
            size_bytes: integer(tokens[self.size], line, "`size`")?,
            count: integer(tokens[self.count], line, "`count`")?,
            data_type: tokens[self.data_type].to_owned(),
            redop: tokens[self.redop].to_owned(),
            root: self.root.map(|index| integer(tokens[index], line, "`root`")).transpose()?,
            out_of_place: measurement(self.out_of_place)?,
            in_place,
        })
    }
}

/// Parses one nccl-tests output.
pub fn parse(text: &str) -> Result<NcclTestsOutput, ParseError> {
    let mut output = NcclTestsOutput {
        collective: None,
        nccl_tests_version: None,
        nccl_version: None,
        settings: BTreeMap::new(),
        validation: None,
        ranks: Vec::new(),
        rows: Vec::new(),
        out_of_bounds: None,
        avg_busbw_gbps: None,
        avg_busbw_gate_ok: None,
        avg_busbw_computed_gbps: None,
        peak: None,
        wrong_total: 0.0,
        communicator_ranks: None,
        failure: None,
        warnings: Vec::new(),
    };
    let mut layout = Layout::current();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        // Markdown pastes and some launchers drop the leading `#`: read both forms.
        let content = raw.trim().strip_prefix('#').unwrap_or(raw.trim()).trim();
        let tokens: Vec<&str> = content.split_whitespace().collect();
        let Some(first) = tokens.first() else { continue };
        if let Some(rest) = content.strip_prefix("nccl-tests version") {
            output.nccl_tests_version = rest.split_whitespace().next().map(str::to_owned);
        } else if let Some(name) = content.strip_prefix("Collective test starting:") {
            output.collective = Some(name.trim().to_owned());
        } else if content.starts_with("Collective test concluded:") || content == "Using devices" {
            // Markers with nothing to read; matched so they are not mistaken for rows.
        } else if *first == "nThread" {
            read_settings(&tokens, &mut output);
        } else if *first == "Rank" {
            output.ranks.push(rank(&tokens, line)?);
        } else if *first == "size" && tokens.contains(&"busbw") {
            layout = Layout::from_header(&tokens, line)?;
        } else if let Some(value) = content.strip_prefix("Out of bounds values") {
            output.out_of_bounds = Some(out_of_bounds(value, line)?);
        } else if let Some(value) = content.strip_prefix("Avg bus bandwidth") {
            let value = value.trim_start().trim_start_matches(':').trim();
            let mut parts = value.split_whitespace();
            let number = parts.next().unwrap_or_default();
            output.avg_busbw_gbps = Some(float(number, line, "the average bus bandwidth")?);
            output.avg_busbw_gate_ok = parts.next().map(|gate| gate == "OK");
        } else if let Some(version) = content.strip_prefix("NCCL version ") {
            output.nccl_version = version.split_whitespace().next().map(str::to_owned);
        } else if content.contains("Test CUDA failure")
            || content.contains("Test NCCL failure")
            || content.contains("Test failure")
        {
            // The first failure names the cause; later ones are the same failure unwinding.
            if output.failure.is_none() {
                let message = content.strip_prefix("test:").unwrap_or(content).trim();
                output.failure = Some(format!("test failed: {message}"));
            }
        } else if content.contains("NCCL INFO") && tokens.contains(&"nranks") {
            let ranks = tokens.iter().position(|token| *token == "nranks").and_then(|at| tokens.get(at + 1));
            if let Some(Ok(ranks)) = ranks.map(|token| token.parse::<u32>()) {
                output.communicator_ranks = Some(output.communicator_ranks.map_or(ranks, |seen| seen.min(ranks)));
            }
        } else if !raw.trim_start().starts_with('#') && layout.is_row(&tokens) {
            output.rows.push(layout.row(&tokens, line)?);
        }
    }
    if output.failure.is_some() {
        finish(&mut output);
        return Ok(output);
    }
    if output.rows.is_empty() {
        return Err(ParseError::end_of_input(
            text,
            format!("a result row ({} columns: {})", layout.width(), layout.names.join(" ")),
        ));
    }
    if output.avg_busbw_gbps.is_none() {
        return Err(ParseError::end_of_input(text, "the `# Avg bus bandwidth` footer (the output is truncated)"));
    }
    finish(&mut output);
    Ok(output)
}

/// Computes peak, average and totals, and the warnings a reader needs.
fn finish(output: &mut NcclTestsOutput) {
    let mut busbw = Vec::new();
    for row in &output.rows {
        let placements = [Some(("out-of-place", &row.out_of_place)), row.in_place.as_ref().map(|m| ("in-place", m))];
        for (placement, measurement) in placements.into_iter().flatten() {
            busbw.push(measurement.busbw_gbps);
            output.wrong_total += measurement.wrong.unwrap_or(0.0);
            if output.peak.as_ref().is_none_or(|peak| measurement.busbw_gbps > peak.busbw_gbps) {
                output.peak =
                    Some(NcclPeak { size_bytes: row.size_bytes, busbw_gbps: measurement.busbw_gbps, placement });
            }
        }
    }
    if !busbw.is_empty() {
        output.avg_busbw_computed_gbps = Some(busbw.iter().sum::<f64>() / busbw.len() as f64);
    }
    output.validation = output.settings.get("validation").map(|value| value != "0");
    if !busbw.is_empty() && busbw.iter().all(|value| *value == 0.0) {
        output.warnings.push(
            "every busbw value is 0: the ranks never communicated (e.g. nccl-tests built without MPI=1 \
             but launched with mpirun)"
                .to_owned(),
        );
    }
    if output.communicator_ranks == Some(1) {
        output.warnings.push("NCCL reports `nranks 1`: each process ran as its own 1-rank communicator".to_owned());
    }
    if output.rows.windows(2).any(|pair| pair[1].size_bytes <= pair[0].size_bytes) {
        output
            .warnings
            .push("message sizes repeat or go backwards: several independent processes wrote to one output".to_owned());
    }
    let unvalidated = output.rows.iter().any(|row| row.out_of_place.wrong.is_none());
    if output.validation == Some(false) || (unvalidated && !output.rows.is_empty()) {
        output.warnings.push("data validation was off (`-c 0`): `#wrong` was not checked".to_owned());
    }
}

/// Reads `nThread 1 nGpus 1 minBytes 8 … step: 2(factor) warmup iters: 5 …`.
/// A key is the words before a value; `key:` always takes the next token, a bare key
/// takes the next token when it starts with a digit.
fn read_settings(tokens: &[&str], output: &mut NcclTestsOutput) {
    let mut key: Vec<&str> = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        let token = tokens[index].trim_matches(|c| c == '[' || c == ']');
        let next = tokens.get(index + 1).map(|next| next.trim_matches(|c| c == '[' || c == ']'));
        let starts_with_digit = |text: &str| text.starts_with(|c: char| c.is_ascii_digit() || c == '-');
        if let (Some(stripped), Some(value)) = (token.strip_suffix(':'), next) {
            key.push(stripped);
            output.settings.insert(key.join(" "), value.to_owned());
            key.clear();
            index += 2;
        } else if let Some(value) = next.filter(|value| starts_with_digit(value) && !starts_with_digit(token)) {
            key.push(token);
            output.settings.insert(key.join(" "), value.to_owned());
            key.clear();
            index += 2;
        } else {
            key.push(token);
            index += 1;
        }
    }
}

/// Reads `Rank  0 Group  0 Pid 1234 on host device  0 [0000:19:00] NVIDIA H100 80GB HBM3`.
fn rank(tokens: &[&str], line: usize) -> Result<NcclRank, ParseError> {
    let shape = || {
        ParseError::at(
            line,
            "`Rank N [Group N] Pid N on HOST device N [BUS] MODEL`",
            quoted(&format!("# {}", tokens.join(" "))),
        )
    };
    let mut at = 1;
    let rank = integer(tokens.get(at).ok_or_else(shape)?, line, "the rank")?;
    at += 1;
    let mut group = None;
    if tokens.get(at) == Some(&"Group") {
        group = Some(integer(tokens.get(at + 1).ok_or_else(shape)?, line, "the group")?);
        at += 2;
    }
    if tokens.get(at) != Some(&"Pid") || tokens.get(at + 2) != Some(&"on") || tokens.get(at + 4) != Some(&"device") {
        return Err(shape());
    }
    let pid = integer(tokens.get(at + 1).ok_or_else(shape)?, line, "the pid")?;
    let host = (*tokens.get(at + 3).ok_or_else(shape)?).to_owned();
    let device = integer(tokens.get(at + 5).ok_or_else(shape)?, line, "the device")?;
    let rest = &tokens[(at + 6).min(tokens.len())..];
    let (bus_id, model) = match rest.split_first() {
        Some((bus, model)) if bus.starts_with('[') => {
            (Some(bus.trim_matches(|c| c == '[' || c == ']').to_owned()), Some(model.join(" ")))
        }
        Some(_) => (None, Some(rest.join(" "))),
        None => (None, None),
    };
    Ok(NcclRank { rank, group, pid, host, device, bus_id, model: model.filter(|model| !model.is_empty()) })
}

/// Reads `: 0 OK` / `: 3 FAILED` after `Out of bounds values`.
fn out_of_bounds(value: &str, line: usize) -> Result<OutOfBounds, ParseError> {
    let value = value.trim_start().trim_start_matches(':').trim();
    let mut parts = value.split_whitespace();
    let count = integer(parts.next().unwrap_or_default(), line, "the out-of-bounds count")?;
    match parts.next() {
        Some("OK") => Ok(OutOfBounds { count, ok: true }),
        Some("FAILED") => Ok(OutOfBounds { count, ok: false }),
        other => {
            Err(ParseError::at(line, "`OK` or `FAILED` after the out-of-bounds count", quoted(other.unwrap_or(""))))
        }
    }
}

impl Summary for NcclTestsOutput {
    fn summary(&self) -> String {
        let mut out = String::new();
        let name = self.collective.as_deref().unwrap_or("nccl-tests");
        if let Some(failure) = &self.failure {
            let _ = writeln!(out, "{name}: {failure}");
        }
        if !self.rows.is_empty() {
            let _ = write!(out, "{name}: {} ranks, {} sizes", self.ranks.len(), self.rows.len());
            if let Some(peak) = &self.peak {
                let _ =
                    write!(out, ", peak busbw {} GB/s at {} B ({})", peak.busbw_gbps, peak.size_bytes, peak.placement);
            }
            if let Some(avg) = self.avg_busbw_gbps {
                let _ = write!(out, ", avg busbw {avg} GB/s");
            }
            if let Some(bounds) = &self.out_of_bounds {
                let _ = write!(out, ", out of bounds {} {}", bounds.count, if bounds.ok { "OK" } else { "FAILED" });
            }
            out.push('\n');
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::{first_lines, line, read, replace_line};
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 0.005
    }

    #[test]
    fn dgx_h100_all_reduce_nvidia_fork_header() {
        let output = parse(&read("nccl_all_reduce_1node_8xh100_dgx_nvlink.txt")).expect("parses");
        assert_eq!(output.rows.len(), 32);
        assert_eq!(output.ranks.len(), 8);
        assert_eq!(output.ranks[0].host, "pool0-01806");
        assert_eq!(output.ranks[7].bus_id.as_deref(), Some("0000:e4:00"));
        assert_eq!(output.ranks[0].model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(output.avg_busbw_gbps, Some(159.151));
        let peak = output.peak.as_ref().expect("present");
        assert_eq!((peak.size_bytes, peak.busbw_gbps, peak.placement), (8_589_934_592, 480.16, "out-of-place"));
        let row = &output.rows[30];
        assert_eq!(row.size_bytes, 8_589_934_592);
        assert_eq!(row.in_place.as_ref().expect("present").busbw_gbps, 479.84);
        assert_eq!(row.out_of_place.time_us, 31307.0);
        assert_eq!(row.root, Some(-1));
        // The NVIDIA fork's extra fields land in the settings.
        assert_eq!(output.settings["direction"], "H2D");
        assert_eq!(output.settings["warmup iters"], "5");
        assert_eq!(output.settings["maxBytes"], "17179869184");
        assert_eq!(output.validation, Some(true));
        assert_eq!(output.out_of_bounds, Some(OutOfBounds { count: 0, ok: true }));
        assert!(
            close(output.avg_busbw_computed_gbps.expect("present"), 159.151),
            "{:?}",
            output.avg_busbw_computed_gbps
        );
        assert_eq!(output.wrong_total, 0.0);
        assert!(output.warnings.is_empty(), "{:?}", output.warnings);
        assert_eq!(output.collective, None);
    }

    #[test]
    fn two_node_h100_with_interleaved_mpi_warnings_and_nccl_version() {
        let output = parse(&read("nccl_all_reduce_2node_h100_ib_ndr_xe9680.txt")).expect("parses");
        assert_eq!(output.ranks.len(), 16);
        assert_eq!(output.ranks[15].host, "bm-h100-02");
        assert_eq!(output.nccl_version.as_deref(), Some("2.26.2+cuda12.8"));
        assert_eq!(output.rows.len(), 32);
        assert_eq!(output.avg_busbw_gbps, Some(139.56));
        let peak = output.peak.expect("present");
        assert_eq!((peak.size_bytes, peak.busbw_gbps), (17_179_869_184, 469.21));
        assert!(output.warnings.is_empty(), "{:?}", output.warnings);
    }

    #[test]
    fn new_style_header_single_size() {
        let output = parse(&read("nccl_all_reduce_1node_8xa100_oci_10g.txt")).expect("parses");
        assert_eq!(output.collective.as_deref(), Some("all_reduce_perf"));
        assert_eq!(output.rows.len(), 1);
        assert_eq!(output.rows[0].out_of_place.busbw_gbps, 232.20);
        assert_eq!(output.avg_busbw_gbps, Some(232.167));
        assert_eq!(output.settings["step"], "1048576(bytes)");

        let output = parse(&read("nccl_all_reduce_2node_a100_roce_oci_10g.txt")).expect("parses");
        assert_eq!(output.ranks.len(), 16);
        assert_eq!(output.rows[0].out_of_place.busbw_gbps, 191.76);
        assert_eq!(output.avg_busbw_gbps, Some(191.752));
    }

    #[test]
    fn all_gather_newest_header_with_version_and_redop_none() {
        let output = parse(&read("nccl_all_gather_2node_gb10_roce_200g.txt")).expect("parses");
        assert_eq!(output.nccl_tests_version.as_deref(), Some("2.18.5"));
        assert_eq!(output.collective.as_deref(), Some("all_gather_perf"));
        assert_eq!(output.settings["unalign"], "0");
        assert_eq!(output.rows[0].redop, "none");
        assert_eq!(output.rows[0].in_place.as_ref().expect("present").busbw_gbps, 22.98);
        assert_eq!(output.peak.expect("present").busbw_gbps, 22.98);
        assert_eq!(output.avg_busbw_gbps, Some(22.9611));
    }

    #[test]
    fn cuda_init_failure_is_a_typed_test_failure() {
        let output = parse(&read("nccl_all_reduce_1node_h100_fail_cuda_init.txt")).expect("parses");
        assert_eq!(
            output.failure.as_deref(),
            Some("test failed: Test CUDA failure common.cu:941 'system not yet initialized'")
        );
        assert!(output.rows.is_empty());
        assert!(output.summary().contains("test failed"));
    }

    #[test]
    fn non_mpi_build_parses_but_flags_zero_busbw_and_one_rank() {
        let output = parse(&read("nccl_all_reduce_2node_h100_fail_busbw0_nonmpi_build.txt")).expect("parses");
        assert_eq!(output.rows.len(), 24);
        assert_eq!(output.avg_busbw_gbps, Some(0.0));
        assert_eq!(output.out_of_bounds, Some(OutOfBounds { count: 0, ok: true }));
        assert_eq!(output.communicator_ranks, Some(1));
        assert!(output.ranks.is_empty());
        // The in-place algbw is wider than its column; whitespace splitting keeps it.
        assert_eq!(output.rows[0].in_place.as_ref().expect("present").algbw_gbps, 263_017.30);
        assert_eq!(output.peak.as_ref().expect("present").busbw_gbps, 0.0);
        let warnings = output.warnings.join("\n");
        assert!(warnings.contains("every busbw value is 0"), "{warnings}");
        assert!(warnings.contains("nranks 1"), "{warnings}");
        assert!(warnings.contains("repeat or go backwards"), "{warnings}");
    }

    #[test]
    fn truncated_output_names_the_line_after_the_end() {
        let text = read("nccl_all_reduce_1node_8xh100_dgx_nvlink.txt");
        let half = first_lines(&text, 30);
        let error = parse(&half).expect_err("is refused");
        assert_eq!(error.line(), Some(31), "{error}");
        assert!(error.to_string().contains("`# Avg bus bandwidth` footer"), "{error}");
    }

    #[test]
    fn a_row_cut_mid_line_names_its_line_and_the_column_count() {
        let text = read("nccl_all_reduce_1node_8xh100_dgx_nvlink.txt");
        let cut: String = line(&text, 20).chars().take(70).collect();
        let error = parse(&replace_line(&text, 20, &cut)).expect_err("is refused");
        assert_eq!(error.line(), Some(20));
        assert!(error.to_string().starts_with("could not parse line 20: expected 13 columns"), "{error}");
        let found = format!("found {} columns", cut.split_whitespace().count());
        assert!(error.to_string().contains(&found), "{error}");
    }

    #[test]
    fn a_number_replaced_by_text_names_the_line_and_column() {
        let text = read("nccl_all_reduce_1node_8xh100_dgx_nvlink.txt");
        let garbled = line(&text, 46).replace("480.16", "fast!!");
        let error = parse(&replace_line(&text, 46, &garbled)).expect_err("is refused");
        assert_eq!(error.to_string(), "could not parse line 46: expected a number for `busbw`, found `fast!!`");
        let garbled = replace_line(&text, 49, "# Avg bus bandwidth    : n/a");
        assert_eq!(parse(&garbled).expect_err("is refused").line(), Some(49));
    }

    #[test]
    fn markdown_paste_without_hashes_still_parses() {
        let text = read("nccl_all_gather_2node_gb10_roce_200g.txt");
        let stripped: String = text.lines().flat_map(|line| [line.strip_prefix('#').unwrap_or(line), "\n"]).collect();
        let output = parse(&stripped).expect("parses");
        assert_eq!(output.rows.len(), 1);
        assert_eq!(output.avg_busbw_gbps, Some(22.9611));
        assert_eq!(output.ranks.len(), 2);
    }

    #[test]
    fn wrong_as_exponent_or_na_and_out_of_bounds_failed() {
        // Trap 2: `#wrong` is `%6g` (exponent for big counts) or `N/A` with `-c 0`,
        // and `Out of bounds … FAILED` must surface even with good bandwidth.
        let text = read("nccl_all_gather_2node_gb10_roce_200g.txt");
        let row = line(&text, 12);
        let exponent = row.replacen("     0   373792", "6.71089e+07   373792", 1);
        let failed = replace_line(&replace_line(&text, 12, &exponent), 13, "# Out of bounds values : 3 FAILED");
        let output = parse(&failed).expect("parses");
        assert_eq!(output.rows[0].out_of_place.wrong, Some(6.71089e7));
        assert_eq!(output.wrong_total, 6.71089e7);
        assert_eq!(output.out_of_bounds, Some(OutOfBounds { count: 3, ok: false }));

        let no_check: String = row.rsplit_once(' ').map(|(head, _)| format!("{head} N/A")).expect("present");
        let no_check = no_check.replacen("     0   373792", "   N/A   373792", 1);
        let output = parse(&replace_line(&text, 12, &no_check)).expect("parses");
        assert_eq!(output.rows[0].out_of_place.wrong, None);
        assert!(output.warnings.iter().any(|warning| warning.contains("-c 0")));
    }

    #[test]
    fn in_place_na_columns_mean_no_in_place_measurement() {
        let text = read("nccl_all_gather_2node_gb10_roce_200g.txt");
        let row = line(&text, 12);
        let head: Vec<&str> = row.split_whitespace().take(9).collect();
        let na_row = format!(" {}  N/A  N/A  N/A  N/A", head.join("  "));
        let output = parse(&replace_line(&text, 12, &na_row)).expect("parses");
        assert_eq!(output.rows[0].in_place, None);
        assert_eq!(output.peak.expect("present").placement, "out-of-place");
    }

    #[test]
    fn old_header_without_root_and_with_error_column() {
        // nccl-tests before root/redop columns were split (nccl-tests#176): 12 columns.
        let text = read("nccl_all_gather_2node_gb10_roce_200g.txt");
        let header = "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error";
        let row = " 17179869184    2147483648     float    none   374425   45.88   22.94  1e-06   373792   45.96   22.98  1e-06";
        let old = replace_line(&replace_line(&text, 10, header), 12, row);
        let output = parse(&old).expect("parses");
        assert_eq!(output.rows[0].root, None);
        assert_eq!(output.rows[0].out_of_place.wrong, Some(1e-6));
        assert_eq!(output.rows[0].in_place.as_ref().expect("present").busbw_gbps, 22.98);
    }

    #[test]
    fn garbage_and_empty_are_errors_on_the_line_after_the_end() {
        let error = parse("hello\nworld\n").expect_err("is refused");
        assert_eq!(error.line(), Some(3));
        assert!(error.to_string().contains("a result row (13 columns"), "{error}");
        assert_eq!(parse("").expect_err("is refused").line(), Some(1));
    }

    #[test]
    fn malformed_rank_line_is_an_error() {
        let text = read("nccl_all_gather_2node_gb10_roce_200g.txt");
        let error =
            parse(&replace_line(&text, 6, "#  Rank  x Group  0 Pid  37755 on host device 0")).expect_err("is refused");
        assert_eq!(error.to_string(), "could not parse line 6: expected an integer for the rank, found `x`");
    }
}
