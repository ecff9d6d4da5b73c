//! Parsers of acceptance-tool outputs: nccl-tests, DCGM, nvidia-smi, kernel XIDs,
//! InfiniBand tools, storage benchmarks, FRR, LLDP, ping and Slurm.
//!
//! Stage: parse, a leaf beside `facts` that `validate`, `deploy` and `cli` use (it
//! imports only `diagnostic`). Input: the text one tool printed (captured stdout or a log file).
//! Output: a typed, serialisable value per tool (numbers, states, messages) and no
//! verdict: thresholds are applied by the validators that name a parser. A malformed
//! or truncated output is a [`ParseError`] that names the 1-based line and what was
//! expected there; no parser panics on any input.
//!
//! Validators name parsers by the keys of [`PARSERS`]; [`parse_by_name`] dispatches.
//! Real sample outputs for every parser live in `tests/fixtures/parsers/` with their
//! provenance in `SOURCE.md`.

pub mod dcgmi;
pub mod fio;
pub mod frr;
pub mod ib_link_flaps;
pub mod ib_write_bw;
pub mod ibstat;
pub mod ibv_devinfo;
pub mod ior;
pub mod lldpctl;
pub mod mdtest;
pub mod mlnx_qos;
pub mod nccl_tests;
pub mod nvidia_smi;
pub mod nvidia_smi_q;
pub mod nvlink;
pub mod ping;
pub mod prometheus;
pub mod slurm;
pub mod slurm_events;
pub mod xid;

use std::fmt::Write as _;
use std::str::FromStr;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a tool output could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A line does not have the expected shape, or the output ends early.
    #[error("could not parse line {line}: expected {expected}, found {found}")]
    Line {
        /// 1-based line number; one past the last line when the output ends early.
        line: usize,
        /// What the parser needed there.
        expected: String,
        /// What it saw (quoted text, a column count, or `end of input`).
        found: String,
    },
    /// A JSON document is malformed or has a value of the wrong type.
    #[error("could not parse line {line}, column {column}: {message}")]
    Json {
        /// 1-based line number in the whole output (preamble lines included).
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde_json reported.
        message: String,
    },
    /// No parser has this name.
    #[error("unknown parser `{name}`{hint}; known parsers: {known}")]
    UnknownParser {
        /// The name asked for.
        name: String,
        /// ` (did you mean `x`?)` or empty.
        hint: String,
        /// Every known name, comma-separated.
        known: String,
    },
    /// The parsed value could not be turned into JSON (not expected to happen).
    #[error("could not represent the parsed output as JSON: {0}")]
    Output(String),
}

impl ParseError {
    /// An error at `line`: expected `expected`, found `found`.
    pub(crate) fn at(line: usize, expected: impl Into<String>, found: impl Into<String>) -> Self {
        Self::Line { line, expected: expected.into(), found: found.into() }
    }

    /// The output ended (after `last_line` lines) before `expected` was seen.
    pub(crate) fn end_of_input(text: &str, expected: impl Into<String>) -> Self {
        Self::at(text.lines().count() + 1, expected, "end of input")
    }

    /// The 1-based line the error is on, if it concerns a line.
    #[must_use]
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Line { line, .. } | Self::Json { line, .. } => Some(*line),
            Self::UnknownParser { .. } | Self::Output(_) => None,
        }
    }
}

/// A one-paragraph, human-readable account of a parsed output (`toolkit parse --output text`).
pub trait Summary {
    /// A few lines, each ending in a newline.
    fn summary(&self) -> String;
}

/// A parsed output as JSON plus its text summary: what `parse_named` returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The typed output serialised to JSON.
    pub value: serde_json::Value,
    /// The text summary.
    pub summary: String,
}

/// A parser entry point behind a name.
pub type ParserFn = fn(&str) -> Result<Parsed, ParseError>;

/// Every parser name a validator may use, with what it reads.
pub const PARSERS: &[(&str, &str)] = &[
    ("nccl-tests", "nccl-tests *_perf text output: per-size rows, avg and peak busbw, #wrong, failures"),
    ("dcgmi-diag", "`dcgmi diag -r N` text table (DCGM 3.x/4.x): per-test Pass/Fail/Warn/Skip and messages"),
    ("dcgmi-diag-json", "`dcgmi diag -r N -j` JSON (DCGM 3.x `DCGM GPU Diagnostic`, 4.x `DCGM Diagnostic`)"),
    ("nvidia-smi", "default `nvidia-smi` table: driver, CUDA, GPU count, models, bus ids, ECC"),
    ("nvidia-smi-query", "`nvidia-smi --query-*=… --format=csv[,noheader][,nounits]` rows"),
    ("nvidia-smi-q", "`nvidia-smi -q [-d …]`: ECC, retired pages, remapped rows, clock events, PCIe link"),
    ("nvidia-smi-nvlink", "`nvidia-smi nvlink -s`: per-GPU link speeds and inactive links"),
    ("xid", "kernel log lines `NVRM: Xid (PCI:…): N, …` (dmesg, journal, NHC logs)"),
    ("ibstat", "`ibstat`: per-CA firmware and per-port state, physical state, rate, link layer"),
    ("ibv-devinfo", "`ibv_devinfo [-v]`: per-HCA firmware, part id and per-port state, MTU, link layer"),
    ("ib-write-bw", "perftest `ib_write_bw` (and other *_bw) client output: per-size peak/average bandwidth"),
    ("ib-link-flaps", "syslog lines `ibN: lost carrier` / `Gained carrier`: flaps per device"),
    ("fio-json", "`fio --output-format=json` (fio 2.x and 3.x): bandwidth, IOPS, latency percentiles"),
    ("ior", "IOR text output: Results table, Max Write/Read, Summary of all tests"),
    ("mdtest", "mdtest text output: SUMMARY rate table (ops/s per operation)"),
    ("frr-bgp-summary", "FRR `show bgp summary json`: peers per address family, state, prefixes"),
    ("lldpctl-json", "`lldpctl -f json`: neighbours per local interface (system name, port, mgmt IP)"),
    ("mlnx-qos", "`mlnx_qos -i <netdev>` (MLNX_OFED/DOCA-OFED): trust, DSCP map, PFC per priority, ETS classes"),
    ("roce-qos", "the `roce-qos` validator's dump: per rail NIC `mlnx_qos -i` plus ECN, CNP DSCP and ToS sysfs values"),
    ("ping", "iputils `ping`: packets sent/received, loss, errors, rtt min/avg/max/mdev"),
    ("sinfo", "`sinfo --json` or `sinfo -N -h -o '%N %T %G'`: node states, flags, reasons, GRES"),
    ("scontrol-node", "`scontrol [-d] show node`: per-node key=value fields, state flags, reason, GRES"),
    ("prometheus-targets", "Prometheus `/api/v1/targets`: job, instance, health and last error of each active target"),
    ("prometheus-rules", "Prometheus `/api/v1/rules`: every rule with its group, type, health and alert state"),
    ("prometheus-alerts", "Prometheus `/api/v1/alerts`: pending and firing alerts with labels and summary"),
    ("prometheus-vector", "Prometheus `/api/v1/query`: an instant vector, labels and value of each sample"),
    ("prometheus-range", "Prometheus `/api/v1/query_range`: a matrix of series, `[time, value]` points"),
];

/// The entry point of the parser called `name`, or an error listing the known names.
pub fn lookup(name: &str) -> Result<ParserFn, ParseError> {
    let parser: ParserFn = match name {
        "nccl-tests" => |text| finish(nccl_tests::parse(text)),
        "dcgmi-diag" => |text| finish(dcgmi::parse_text(text)),
        "dcgmi-diag-json" => |text| finish(dcgmi::parse_json(text)),
        "nvidia-smi" => |text| finish(nvidia_smi::parse_table(text)),
        "nvidia-smi-query" => |text| finish(nvidia_smi::parse_query(text)),
        "nvidia-smi-q" => |text| finish(nvidia_smi_q::parse(text)),
        "nvidia-smi-nvlink" => |text| finish(nvlink::parse(text)),
        "xid" => |text| finish(xid::parse(text)),
        "ibstat" => |text| finish(ibstat::parse(text)),
        "ibv-devinfo" => |text| finish(ibv_devinfo::parse(text)),
        "ib-write-bw" => |text| finish(ib_write_bw::parse(text)),
        "ib-link-flaps" => |text| finish(ib_link_flaps::parse(text)),
        "fio-json" => |text| finish(fio::parse(text)),
        "ior" => |text| finish(ior::parse(text)),
        "mdtest" => |text| finish(mdtest::parse(text)),
        "frr-bgp-summary" => |text| finish(frr::parse(text)),
        "lldpctl-json" => |text| finish(lldpctl::parse(text)),
        "mlnx-qos" => |text| finish(mlnx_qos::parse(text)),
        "roce-qos" => |text| finish(mlnx_qos::parse_dump(text)),
        "ping" => |text| finish(ping::parse(text)),
        "sinfo" => |text| finish(slurm::parse_sinfo(text)),
        "scontrol-node" => |text| finish(slurm::parse_scontrol_nodes(text)),
        "prometheus-targets" => |text| finish(prometheus::parse_targets(text)),
        "prometheus-rules" => |text| finish(prometheus::parse_rules(text)),
        "prometheus-alerts" => |text| finish(prometheus::parse_alerts(text)),
        "prometheus-vector" => |text| finish(prometheus::parse_vector(text)),
        "prometheus-range" => |text| finish(prometheus::parse_range(text)),
        _ => return Err(unknown_parser(name)),
    };
    Ok(parser)
}

/// Parses `text` with the parser called `name`: the JSON value and a text summary.
pub fn parse_named(name: &str, text: &str) -> Result<Parsed, ParseError> {
    lookup(name)?(text)
}

/// Parses `text` with the parser called `name` into JSON (what validators read).
pub fn parse_by_name(name: &str, text: &str) -> Result<serde_json::Value, ParseError> {
    parse_named(name, text).map(|parsed| parsed.value)
}

fn unknown_parser(name: &str) -> ParseError {
    let names = PARSERS.iter().map(|(known, _)| *known);
    let hint = crate::diagnostic::did_you_mean(name, names.clone())
        .map(|suggestion| format!(" (did you mean `{suggestion}`?)"))
        .unwrap_or_default();
    ParseError::UnknownParser { name: name.to_owned(), hint, known: names.collect::<Vec<_>>().join(", ") }
}

fn finish<T: Serialize + Summary>(result: Result<T, ParseError>) -> Result<Parsed, ParseError> {
    let output = result?;
    let value = serde_json::to_value(&output).map_err(|error| ParseError::Output(error.to_string()))?;
    Ok(Parsed { value, summary: output.summary() })
}

/// `text` in backticks, cut to a readable length, for the `found` part of an error.
pub(crate) fn quoted(text: &str) -> String {
    const LIMIT: usize = 60;
    let text = text.trim();
    if text.is_empty() {
        return "an empty line".to_owned();
    }
    let mut shown: String = text.chars().take(LIMIT).collect();
    if text.chars().count() > LIMIT {
        shown.push('…');
    }
    format!("`{shown}`")
}

/// Parses an integer token, or says which field on which line was not one.
pub(crate) fn integer<T: FromStr>(token: &str, line: usize, what: &str) -> Result<T, ParseError> {
    token.trim().parse().map_err(|_| ParseError::at(line, format!("an integer for {what}"), quoted(token)))
}

/// Parses a finite decimal token (`1.5`, `6.71089e+07`), or says what was wrong.
/// `NaN` and `inf` are refused: no tool prints them for a measured value.
pub(crate) fn float(token: &str, line: usize, what: &str) -> Result<f64, ParseError> {
    match token.trim().parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        _ => Err(ParseError::at(line, format!("a number for {what}"), quoted(token))),
    }
}

/// Parses the JSON document in `text` into `T`. Lines before the first line starting
/// with `{` or `[` are skipped (fio and dcgmi print log lines before the document), and
/// error positions count them, so the line number is the line in the whole output.
pub(crate) fn json_document<T: DeserializeOwned>(text: &str, what: &str) -> Result<T, ParseError> {
    let mut offset = 0;
    let mut start = None;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            start = Some(index);
            break;
        }
        offset += line.len();
    }
    let Some(skipped) = start else {
        let first = text.lines().enumerate().find(|(_, line)| !line.trim().is_empty());
        return Err(match first {
            Some((index, line)) => ParseError::at(index + 1, format!("{what} (a JSON document)"), quoted(line)),
            None => ParseError::end_of_input(text, format!("{what} (a JSON document)")),
        });
    };
    serde_json::from_str(&text[offset..]).map_err(|error| {
        let position = format!(" at line {} column {}", error.line(), error.column());
        let message = error.to_string();
        let message = message.strip_suffix(&position).unwrap_or(&message).to_owned();
        ParseError::Json { line: skipped + error.line().max(1), column: error.column(), message }
    })
}

/// Counts of something per label, rendered as `label N, label N`.
pub(crate) fn join_counts(counts: &[(&str, usize)]) -> String {
    let mut out = String::new();
    for (label, count) in counts.iter().filter(|(_, count)| *count > 0) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        let _ = write!(out, "{count} {label}");
    }
    if out.is_empty() { "none".to_owned() } else { out }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! The real recorded outputs under `tests/fixtures/parsers/`, for unit tests.

    use std::path::PathBuf;

    /// The text of fixture `name`; panics (in tests only) when it is missing.
    pub fn read(name: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers").join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("fixture {}: {error}", path.display()))
    }

    /// The first `lines` lines of `text`, each with its newline.
    pub fn first_lines(text: &str, lines: usize) -> String {
        text.split_inclusive('\n').take(lines).collect()
    }

    /// `text` with line `line` (1-based) replaced by `replacement`.
    pub fn replace_line(text: &str, line: usize, replacement: &str) -> String {
        text.split_inclusive('\n')
            .enumerate()
            .map(|(index, original)| {
                if index + 1 == line {
                    let newline = if original.ends_with('\n') { "\n" } else { "" };
                    format!("{replacement}{newline}")
                } else {
                    original.to_owned()
                }
            })
            .collect()
    }

    /// Line `line` (1-based) of `text`.
    pub fn line(text: &str, line: usize) -> &str {
        text.lines().nth(line - 1).unwrap_or_else(|| panic!("no line {line}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_parser_dispatches_and_names_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for (name, description) in PARSERS {
            assert!(seen.insert(*name), "duplicate parser name {name}");
            assert!(!description.is_empty());
            assert!(lookup(name).is_ok(), "{name} is listed but not dispatched");
        }
    }

    #[test]
    fn unknown_parser_suggests_the_closest_name_and_lists_all() {
        let error = parse_by_name("nccl-test", "").expect_err("is refused");
        let message = error.to_string();
        assert!(message.starts_with("unknown parser `nccl-test` (did you mean `nccl-tests`?)"), "{message}");
        assert!(message.contains("scontrol-node"), "{message}");
        let error = parse_by_name("zzzzzzzz", "").expect_err("is refused").to_string();
        assert!(!error.contains("did you mean"), "{error}");
    }

    #[test]
    fn every_parser_refuses_empty_input_with_a_line_number() {
        for (name, _) in PARSERS {
            match parse_by_name(name, "") {
                // An empty kernel log or syslog has no events, which is a valid answer.
                Ok(_) => assert!(["xid", "ib-link-flaps"].contains(name), "{name} accepted empty input"),
                Err(error) => assert_eq!(error.line(), Some(1), "{name}: {error}"),
            }
        }
    }

    #[test]
    fn every_parser_survives_hostile_input_without_panicking() {
        let inputs = [
            "\u{0}\u{1}\u{2}",
            "{",
            "[[[[",
            "| | |\n|||\n",
            "#\n#\n#",
            "GPU 0: \n\tLink x: y\n",
            "CA 'x'\n\tPort 1:\n",
            "   8   2  float  sum\n",
            "\"\"\"",
            "-1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1",
        ];
        for (name, _) in PARSERS {
            for input in inputs {
                let _ = parse_by_name(name, input);
            }
        }
    }

    /// Every fixture with the parsers that read it.
    const FIXTURES: &[(&str, &str)] = &[
        ("nccl-tests", "nccl_all_reduce_1node_8xh100_dgx_nvlink.txt"),
        ("nccl-tests", "nccl_all_reduce_2node_h100_ib_ndr_xe9680.txt"),
        ("nccl-tests", "nccl_all_reduce_2node_h100_fail_busbw0_nonmpi_build.txt"),
        ("dcgmi-diag", "dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt"),
        ("nvidia-smi", "nvidia_smi_8xh100_table.txt"),
        ("nvidia-smi-q", "nvidia_smi_q_page_retirement_8gpu_azure.txt"),
        ("nvidia-smi-q", "nvidia_smi_q_excerpt_d_memory_performance_rtxpro6000_580.txt"),
        ("nvidia-smi-nvlink", "nvidia_smi_nvlink_status_a100_gpu_good.txt"),
        ("xid", "xid_dmesg_T_535_akash_support_244.txt"),
        ("ibstat", "ibstat_excerpt_cx7_ndr_ib_h20_node.txt"),
        ("ibv-devinfo", "ibv_devinfo_excerpt_cx7_port_down.txt"),
        ("ib-write-bw", "ib_write_bw_client_gb10_cx7_roce_200g_4qp.txt"),
        ("ib-link-flaps", "syslog_ib_link_flap_6events.txt"),
        ("fio-json", "fio_3.14_randread_4k_qd16_nj16_sata_ssd.json"),
        ("fio-json", "fio_2.1.4_pkb_seq_and_rand_jobs.json"),
        ("ior", "ior_3.3.0_2node_lustre_stampede2_posix_ssf.txt"),
        ("mdtest", "mdtest_1.9.3_2node_gpfs_ccr_verbose.txt"),
        ("frr-bgp-summary", "frr_8.4.4_show_bgp_summary_json_leaf_2up_1idle.json"),
        ("lldpctl-json", "lldpctl_1.0.16_json_2_neighbors.json"),
        ("lldpctl-json", "lldpctl_1.0.16_json0_2_neighbors.json"),
        ("ping", "ping_iputils_20221126_loopback_1472_df_ok.txt"),
        ("sinfo", "sinfo_22.05.8_json_4nodes.json"),
        ("sinfo", "sinfo_22.05.8_N_h_o_NTG_4nodes.txt"),
        ("scontrol-node", "scontrol_22.05.8_show_node_4nodes.txt"),
    ];

    #[test]
    fn every_fixture_parses_and_every_cut_of_it_is_an_answer_or_a_located_error() {
        for (name, file) in FIXTURES {
            let text = fixtures::read(file);
            assert!(parse_by_name(name, &text).is_ok(), "{name} on {file}");
            // Cuts at every line end, 9 characters before every line end, and at every
            // 53rd character: never a panic, and an error always names a line
            // inside the input or the one after it.
            let mut cuts: Vec<usize> =
                text.match_indices('\n').flat_map(|(at, _)| [at + 1, at.saturating_sub(9)]).collect();
            cuts.extend(text.char_indices().map(|(at, _)| at).step_by(53));
            let lines = text.lines().count() + 1;
            for cut in cuts.into_iter().filter(|cut| text.is_char_boundary(*cut)) {
                if let Err(error) = parse_by_name(name, &text[..cut]) {
                    let line = error.line().unwrap_or_else(|| panic!("{name} on {file} cut at {cut}: {error}"));
                    assert!((1..=lines).contains(&line), "{name} on {file} cut at {cut}: {error}");
                }
            }
        }
    }

    #[test]
    fn json_errors_count_preamble_lines() {
        let error = json_document::<serde_json::Value>("log line\nanother\n{\n  \"a\": ,\n}\n", "a test document")
            .expect_err("is refused");
        assert_eq!(error.line(), Some(4), "{error}");
        let error = json_document::<serde_json::Value>("no json here\n", "a test document").expect_err("is refused");
        assert_eq!(
            error.to_string(),
            "could not parse line 1: expected a test document (a JSON document), found `no json here`"
        );
    }
}
