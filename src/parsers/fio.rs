//! `fio --output-format=json` output, fio 2.x and 3.x.
//!
//! Stage: parse (leaf). Input: fio's JSON report, possibly after log lines (`fio-3.42 …
//! Starting 1 process`). Output: [`FioOutput`]: per job and direction the bytes moved,
//! bandwidth in B/s, IOPS, runtime and completion latency in µs with percentiles, and
//! totals per direction over all jobs (or hosts, for `--client` runs).
//!
//! Version traps (validators.md §5, §9 trap 8): fio ≥ 3 prints `bw_bytes` (B/s),
//! `io_kbytes` and latencies in ns (`clat_ns`); fio 2.x prints only `bw` (KiB/s),
//! `io_bytes` in KiB and latencies in µs (`clat`). fio 3.1 repeats `"0.00"` percentile
//! keys; they are unused slots and dropped. Client/server runs report `client_stats`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{ParseError, Summary, json_document};

/// What one fio run reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FioOutput {
    /// `fio version` (`fio-3.14-6-g97134`).
    pub version: Option<String>,
    /// Jobs (or group-reporting groups, or per-host client stats).
    pub jobs: Vec<FioJob>,
    /// Sums over all jobs, per direction that moved data.
    pub totals: BTreeMap<String, FioTotals>,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FioJob {
    /// `jobname`.
    pub name: String,
    /// `hostname` of a client/server run.
    pub hostname: Option<String>,
    /// `error` (0 = none).
    pub error: i64,
    /// `job options` as strings.
    pub options: BTreeMap<String, String>,
    /// Directions that moved data: `read`, `write`, `trim`.
    pub directions: BTreeMap<String, FioDirection>,
}

/// One direction of one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FioDirection {
    /// Bytes moved.
    pub io_bytes: u64,
    /// Bandwidth in B/s.
    pub bw_bytes_per_s: f64,
    /// I/O operations per second.
    pub iops: f64,
    /// Runtime in ms.
    pub runtime_ms: u64,
    /// Completion latency in µs.
    pub clat_us: Option<FioLatency>,
    /// Total latency (submission + completion) in µs.
    pub lat_us: Option<FioLatency>,
}

/// Latency statistics in µs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FioLatency {
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Percentiles by percent (`99`, `99.9`) → µs.
    pub percentiles: BTreeMap<String, f64>,
}

/// Sums over jobs for one direction.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FioTotals {
    /// Jobs that moved data in this direction.
    pub jobs: usize,
    /// Bytes moved.
    pub io_bytes: u64,
    /// Bandwidth in B/s.
    pub bw_bytes_per_s: f64,
    /// I/O operations per second.
    pub iops: f64,
    /// The highest 99th-percentile completion latency of any job, in µs.
    pub worst_clat_p99_us: Option<f64>,
}

#[derive(Deserialize)]
struct RawFio {
    #[serde(rename = "fio version")]
    version: Option<String>,
    jobs: Option<Vec<RawJob>>,
    client_stats: Option<Vec<RawJob>>,
}

#[derive(Deserialize)]
struct RawJob {
    jobname: String,
    hostname: Option<String>,
    #[serde(default)]
    error: i64,
    #[serde(rename = "job options", default)]
    options: BTreeMap<String, serde_json::Value>,
    read: Option<RawDirection>,
    write: Option<RawDirection>,
    trim: Option<RawDirection>,
}

#[derive(Deserialize)]
struct RawDirection {
    io_bytes: Option<u64>,
    io_kbytes: Option<u64>,
    bw_bytes: Option<f64>,
    bw: Option<f64>,
    #[serde(default)]
    iops: f64,
    #[serde(default)]
    runtime: u64,
    clat_ns: Option<RawLatency>,
    clat: Option<RawLatency>,
    lat_ns: Option<RawLatency>,
    lat: Option<RawLatency>,
}

#[derive(Deserialize)]
struct RawLatency {
    min: f64,
    max: f64,
    mean: f64,
    stddev: f64,
    #[serde(default)]
    percentile: BTreeMap<String, f64>,
}

impl RawLatency {
    fn scaled(self, divisor: f64) -> FioLatency {
        let percentiles = self
            .percentile
            .into_iter()
            .filter_map(|(key, value)| {
                let percent = key.parse::<f64>().ok().filter(|percent| *percent > 0.0)?;
                Some((format!("{percent}"), value / divisor))
            })
            .collect();
        FioLatency {
            min: self.min / divisor,
            max: self.max / divisor,
            mean: self.mean / divisor,
            stddev: self.stddev / divisor,
            percentiles,
        }
    }
}

/// Parses fio's JSON output.
pub fn parse(text: &str) -> Result<FioOutput, ParseError> {
    let raw: RawFio = json_document(text, "fio JSON output (`--output-format=json`)")?;
    let jobs = match (raw.jobs, raw.client_stats) {
        (Some(jobs), _) | (None, Some(jobs)) if !jobs.is_empty() => jobs,
        _ => {
            let line = text.lines().position(|line| line.trim_start().starts_with('{')).map_or(1, |at| at + 1);
            return Err(ParseError::at(line, "a non-empty `jobs` (or `client_stats`) array", "none"));
        }
    };
    let mut output = FioOutput { version: raw.version, jobs: Vec::new(), totals: BTreeMap::new() };
    for job in jobs {
        let mut directions = BTreeMap::new();
        for (name, direction) in [("read", job.read), ("write", job.write), ("trim", job.trim)] {
            if let Some(direction) = direction.map(direction_of).filter(|d| d.io_bytes > 0 || d.iops > 0.0) {
                let totals: &mut FioTotals = output.totals.entry(name.to_owned()).or_default();
                totals.jobs += 1;
                totals.io_bytes = totals.io_bytes.saturating_add(direction.io_bytes);
                totals.bw_bytes_per_s += direction.bw_bytes_per_s;
                totals.iops += direction.iops;
                if let Some(p99) = direction.clat_us.as_ref().and_then(|clat| clat.percentiles.get("99")) {
                    totals.worst_clat_p99_us = Some(totals.worst_clat_p99_us.map_or(*p99, |worst| worst.max(*p99)));
                }
                directions.insert(name.to_owned(), direction);
            }
        }
        let options = job
            .options
            .into_iter()
            .map(|(key, value)| (key, value.as_str().map_or_else(|| value.to_string(), str::to_owned)))
            .collect();
        output.jobs.push(FioJob { name: job.jobname, hostname: job.hostname, error: job.error, options, directions });
    }
    Ok(output)
}

fn direction_of(raw: RawDirection) -> FioDirection {
    // fio ≥ 3 has `bw_bytes`/`io_kbytes`; without them `bw` is KiB/s and `io_bytes` is KiB.
    let modern = raw.bw_bytes.is_some() || raw.io_kbytes.is_some();
    let io_bytes = match (raw.io_bytes, raw.io_kbytes, modern) {
        (Some(bytes), _, true) => bytes,
        (_, Some(kibibytes), _) | (Some(kibibytes), None, false) => kibibytes.saturating_mul(1024),
        (None, None, _) => 0,
    };
    let bw_bytes_per_s = raw.bw_bytes.unwrap_or_else(|| raw.bw.unwrap_or(0.0) * 1024.0);
    let clat_us = match (raw.clat_ns, raw.clat) {
        (Some(ns), _) => Some(ns.scaled(1000.0)),
        (None, Some(us)) => Some(us.scaled(1.0)),
        (None, None) => None,
    };
    let lat_us = match (raw.lat_ns, raw.lat) {
        (Some(ns), _) => Some(ns.scaled(1000.0)),
        (None, Some(us)) => Some(us.scaled(1.0)),
        (None, None) => None,
    };
    FioDirection { io_bytes, bw_bytes_per_s, iops: raw.iops, runtime_ms: raw.runtime, clat_us, lat_us }
}

impl Summary for FioOutput {
    fn summary(&self) -> String {
        let mut out = format!("{}: {} jobs\n", self.version.as_deref().unwrap_or("fio"), self.jobs.len());
        for (direction, totals) in &self.totals {
            let _ = write!(
                out,
                "{direction}: {:.1} MB/s, {:.0} IOPS over {} jobs",
                totals.bw_bytes_per_s / 1e6,
                totals.iops,
                totals.jobs
            );
            if let Some(p99) = totals.worst_clat_p99_us {
                let _ = write!(out, ", worst clat p99 {p99} µs");
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

    const FIO3: &str = "fio_3.14_randread_4k_qd16_nj16_sata_ssd.json";
    const FIO2: &str = "fio_2.1.4_pkb_seq_and_rand_jobs.json";

    #[test]
    fn fio_3_14_bw_bytes_and_clat_ns() {
        let output = parse(&read(FIO3)).expect("parses");
        assert_eq!(output.version.as_deref(), Some("fio-3.14-6-g97134"));
        assert_eq!(output.jobs.len(), 1);
        let job = &output.jobs[0];
        assert_eq!(job.name, "random-read");
        assert_eq!(job.options["numjobs"], "16");
        assert_eq!(job.directions.keys().collect::<Vec<_>>(), ["read"]);
        let read = &job.directions["read"];
        assert_eq!(read.bw_bytes_per_s, 216_352_363.0);
        assert_eq!(read.iops, 52_820.401_293);
        assert_eq!(read.io_bytes, 12_982_439_936);
        assert_eq!(read.runtime_ms, 60006);
        let clat = read.clat_us.as_ref().expect("present");
        assert_eq!(clat.percentiles["99"], 10289.152);
        assert_eq!(clat.percentiles["99.99"], 21626.88);
        assert_eq!(clat.min, 95.756);
        assert_eq!(output.totals["read"].worst_clat_p99_us, Some(10289.152));
    }

    #[test]
    fn fio_2_1_4_kib_units_usec_latency_and_duplicate_keys() {
        let output = parse(&read(FIO2)).expect("parses");
        assert_eq!(output.jobs.len(), 5);
        let write = &output.jobs[0].directions["write"];
        assert_eq!(output.jobs[0].name, "sequential_write");
        assert_eq!(write.bw_bytes_per_s, 68118.0 * 1024.0);
        assert_eq!(write.io_bytes, 361_984 * 1024);
        assert_eq!(write.iops, 133.0);
        let clat = write.clat_us.as_ref().expect("present");
        assert_eq!(clat.mean, 477_734.84);
        assert_eq!(clat.percentiles["99"], 823_296.0);
        assert!(!clat.percentiles.contains_key("0"), "the duplicate \"0.00\" slots are dropped");
        assert_eq!(output.jobs[1].directions["read"].bw_bytes_per_s, 129_836.0 * 1024.0);
        let reads = &output.totals["read"];
        assert_eq!(reads.jobs, 3);
        assert_eq!(reads.iops, 253.0 + 317.0 + 323.0);
        assert_eq!(output.totals["write"].jobs, 2);
    }

    #[test]
    fn log_lines_before_the_document_are_skipped() {
        let text = format!("fio-3.14\nStarting 16 processes\n{}", read(FIO3));
        assert_eq!(parse(&text).expect("parses").jobs.len(), 1);
    }

    #[test]
    fn truncated_and_garbled_json_name_lines() {
        let text = read(FIO3);
        let error = parse(&first_lines(&text, 100)).expect_err("is refused");
        assert_eq!(error.line(), Some(101), "{error}");
        let garbled = replace_line(&text, 35, "        \"iops\" : lots,");
        let error = parse(&garbled).expect_err("is refused");
        assert_eq!(error.line(), Some(35), "{error}");
        let wrong_type = replace_line(&text, 35, "        \"iops\" : \"lots\",");
        let error = parse(&wrong_type).expect_err("is refused");
        assert_eq!(error.line(), Some(35), "{error}");
        assert!(error.to_string().contains("invalid type: string \"lots\""), "{error}");
        assert_eq!(parse("{\"jobs\": []}").expect_err("is refused").line(), Some(1));
    }
}
