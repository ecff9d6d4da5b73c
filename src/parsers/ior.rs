//! IOR text output.
//!
//! Stage: parse (leaf). Input: IOR's stdout: header (`IOR-3.3.0: MPI Coordinated Test of
//! Parallel I/O`, `Key : value` lines), `Options:` block, `Results:` table, `Max
//! Write/Read` lines, `Summary of all tests:` table, `Finished`. Output: [`IorOutput`].
//!
//! Column sets differ between IOR versions (3.2 has no IOPS/Latency columns; the
//! summary gained Stonewall columns), so both tables are read by header names
//! (validators.md §9 trap 9), and a row must have as many values as its header.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, float, quoted};

/// What one IOR run printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IorOutput {
    /// `3.3.0+dev` from the banner.
    pub version: Option<String>,
    /// Header `Key : value` lines (`Command line`, `Machine`, `Path`, `FS`…).
    pub header: BTreeMap<String, String>,
    /// `Participating tasks`.
    pub tasks: Option<u32>,
    /// The `Options:` block (`api`, `access`, `xfersize`, `blocksize`…).
    pub options: BTreeMap<String, String>,
    /// Rows of the `Results:` table.
    pub results: Vec<IorResult>,
    /// `Max Write:` in MiB/s.
    pub max_write_mib_s: Option<f64>,
    /// `Max Read:` in MiB/s.
    pub max_read_mib_s: Option<f64>,
    /// Rows of `Summary of all tests:`.
    pub summary: Vec<IorSummaryRow>,
}

/// One row of the `Results:` table (one access of one iteration).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IorResult {
    /// 1-based line.
    pub line: usize,
    /// `write`, `read`, `remove`.
    pub access: String,
    /// `bw(MiB/s)`; `None` for `-`.
    pub bw_mib_s: Option<f64>,
    /// `total(s)`.
    pub total_s: Option<f64>,
    /// Every column by header name; `None` for `-`.
    pub values: BTreeMap<String, Option<f64>>,
}

/// One row of `Summary of all tests:`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IorSummaryRow {
    /// 1-based line.
    pub line: usize,
    /// `write` or `read`.
    pub operation: String,
    /// `Max(MiB)` (MiB/s).
    pub max_mib_s: f64,
    /// `Min(MiB)`.
    pub min_mib_s: f64,
    /// `Mean(MiB)`.
    pub mean_mib_s: f64,
    /// `#Tasks`.
    pub tasks: Option<u32>,
    /// Every column by header name, as printed.
    pub values: BTreeMap<String, String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Header,
    Options,
    Results,
    Summary,
}

/// Parses IOR output.
pub fn parse(text: &str) -> Result<IorOutput, ParseError> {
    let mut output = IorOutput {
        version: None,
        header: BTreeMap::new(),
        tasks: None,
        options: BTreeMap::new(),
        results: Vec::new(),
        max_write_mib_s: None,
        max_read_mib_s: None,
        summary: Vec::new(),
    };
    let mut section = Section::Header;
    let mut columns: Vec<String> = Vec::new();
    let mut finished = false;
    let mut seen_banner = false;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() || content.starts_with("---") || content.starts_with("Commencing") {
            continue;
        }
        if let Some(rest) = content.strip_prefix("IOR-") {
            output.version = rest.split(':').next().map(str::to_owned);
            seen_banner = true;
        } else if content.starts_with("Options:") {
            section = Section::Options;
        } else if content.starts_with("Results:") {
            section = Section::Results;
            columns.clear();
        } else if content.starts_with("Summary of all tests:") {
            section = Section::Summary;
            columns.clear();
        } else if let Some(rest) = content.strip_prefix("Max Write:") {
            output.max_write_mib_s = Some(mib_per_second(rest, line)?);
        } else if let Some(rest) = content.strip_prefix("Max Read:") {
            output.max_read_mib_s = Some(mib_per_second(rest, line)?);
        } else if content.starts_with("Finished") {
            finished = true;
        } else if (section == Section::Results && content.starts_with("access"))
            || (section == Section::Summary && content.starts_with("Operation"))
        {
            columns = content.split_whitespace().map(str::to_owned).collect();
        } else if section == Section::Results && !columns.is_empty() {
            output.results.push(result_row(content, line, &columns)?);
        } else if section == Section::Summary && !columns.is_empty() {
            output.summary.push(summary_row(content, line, &columns)?);
        } else if let Some((key, value)) = content.split_once(':') {
            let (key, value) = (key.trim().to_owned(), value.trim().to_owned());
            if key == "Participating tasks" {
                output.tasks = Some(super::integer(&value, line, "`Participating tasks`")?);
            }
            match section {
                Section::Options => output.options.insert(key, value),
                _ => output.header.insert(key, value),
            };
        }
    }
    if !seen_banner {
        return Err(ParseError::end_of_input(text, "the `IOR-x.y.z: MPI Coordinated Test of Parallel I/O` banner"));
    }
    if !finished {
        return Err(ParseError::end_of_input(text, "the `Finished` line (the output is truncated)"));
    }
    if output.results.is_empty() && output.summary.is_empty() {
        return Err(ParseError::end_of_input(text, "a `Results:` or `Summary of all tests:` table"));
    }
    Ok(output)
}

/// ` 426.77 MiB/sec (447.50 MB/sec)` → 426.77.
fn mib_per_second(rest: &str, line: usize) -> Result<f64, ParseError> {
    let mut tokens = rest.split_whitespace();
    let value = tokens.next().unwrap_or_default();
    match tokens.next() {
        Some("MiB/sec") => float(value, line, "the MiB/sec value"),
        other => Err(ParseError::at(line, "`X MiB/sec`", quoted(&format!("{value} {}", other.unwrap_or(""))))),
    }
}

fn check_width(tokens: &[&str], columns: &[String], line: usize, content: &str) -> Result<(), ParseError> {
    if tokens.len() == columns.len() {
        return Ok(());
    }
    Err(ParseError::at(
        line,
        format!("{} columns ({})", columns.len(), columns.join(" ")),
        format!("{} columns in {}", tokens.len(), quoted(content)),
    ))
}

fn result_row(content: &str, line: usize, columns: &[String]) -> Result<IorResult, ParseError> {
    let tokens: Vec<&str> = content.split_whitespace().collect();
    check_width(&tokens, columns, line, content)?;
    let mut values = BTreeMap::new();
    for (name, token) in columns.iter().zip(&tokens).skip(1) {
        let value = if *token == "-" { None } else { Some(float(token, line, &format!("`{name}`"))?) };
        values.insert(name.clone(), value);
    }
    Ok(IorResult {
        line,
        access: tokens[0].to_owned(),
        bw_mib_s: values.get("bw(MiB/s)").copied().flatten(),
        total_s: values.get("total(s)").copied().flatten(),
        values,
    })
}

fn summary_row(content: &str, line: usize, columns: &[String]) -> Result<IorSummaryRow, ParseError> {
    let tokens: Vec<&str> = content.split_whitespace().collect();
    check_width(&tokens, columns, line, content)?;
    let values: BTreeMap<String, String> =
        columns.iter().zip(&tokens).map(|(name, token)| (name.clone(), (*token).to_owned())).collect();
    let number = |name: &str| -> Result<f64, ParseError> {
        let token = values.get(name).ok_or_else(|| ParseError::at(line, format!("a `{name}` column"), "none"))?;
        float(token, line, &format!("`{name}`"))
    };
    Ok(IorSummaryRow {
        line,
        operation: tokens[0].to_owned(),
        max_mib_s: number("Max(MiB)")?,
        min_mib_s: number("Min(MiB)")?,
        mean_mib_s: number("Mean(MiB)")?,
        tasks: values.get("#Tasks").map(|tasks| super::integer(tasks, line, "`#Tasks`")).transpose()?,
        values,
    })
}

impl Summary for IorOutput {
    fn summary(&self) -> String {
        let mut out = format!(
            "IOR {}: {} tasks, api {}, {}\n",
            self.version.as_deref().unwrap_or("?"),
            self.tasks.map_or_else(|| "?".to_owned(), |tasks| tasks.to_string()),
            self.options.get("api").map_or("?", String::as_str),
            self.options.get("access").map_or("?", String::as_str)
        );
        if let Some(write) = self.max_write_mib_s {
            let _ = writeln!(out, "max write {write} MiB/s");
        }
        if let Some(read) = self.max_read_mib_s {
            let _ = writeln!(out, "max read {read} MiB/s");
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

    const IOR: &str = "ior_3.3.0_2node_lustre_stampede2_posix_ssf.txt";

    #[test]
    fn ior_3_3_lustre_single_shared_file() {
        let output = parse(&read(IOR)).expect("parses");
        assert_eq!(output.version.as_deref(), Some("3.3.0+dev"));
        assert_eq!(output.tasks, Some(2));
        assert_eq!(output.options["api"], "POSIX");
        assert_eq!(output.options["access"], "single-shared-file");
        assert_eq!(output.options["aggregate filesize"], "400 MiB");
        assert_eq!(output.header["Machine"], "Linux c457-011.stampede2.tacc.utexas.edu");
        assert_eq!(output.max_write_mib_s, Some(426.77));
        assert_eq!(output.max_read_mib_s, Some(332.55));
        assert_eq!(output.results.len(), 3);
        let write = &output.results[0];
        assert_eq!((write.access.as_str(), write.bw_mib_s), ("write", Some(426.77)));
        assert_eq!(write.values["IOPS"], Some(21.38));
        assert_eq!(write.values["Latency(s)"], Some(0.093_502));
        let remove = &output.results[2];
        assert_eq!((remove.bw_mib_s, remove.total_s), (None, Some(0.156_993)));
        assert_eq!(output.summary.len(), 2);
        let read_summary = &output.summary[1];
        assert_eq!(read_summary.operation, "read");
        assert_eq!((read_summary.max_mib_s, read_summary.mean_mib_s), (332.55, 332.55));
        assert_eq!(read_summary.tasks, Some(2));
        assert_eq!(read_summary.values["API"], "POSIX");
        assert_eq!(read_summary.values["Stonewall(s)"], "NA");
    }

    #[test]
    fn results_are_read_by_column_name_when_columns_differ() {
        // IOR 3.2 prints no IOPS and Latency columns: drop them from the header and rows.
        let text = read(IOR);
        let drop = |line: &str| -> String {
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let kept: Vec<&str> =
                tokens.iter().enumerate().filter(|(i, _)| *i != 2 && *i != 3).map(|(_, t)| *t).collect();
            kept.join("   ")
        };
        let mut older = text.clone();
        for number in [33, 36, 39, 40] {
            older = replace_line(&older, number, &drop(line(&text, number)));
        }
        let output = parse(&older).expect("parses");
        assert_eq!(output.results[0].bw_mib_s, Some(426.77));
        assert_eq!(output.results[0].values["block(KiB)"], Some(204_800.0));
        assert!(!output.results[0].values.contains_key("IOPS"));
        assert_eq!(output.results[1].total_s, Some(1.20));
    }

    #[test]
    fn truncated_and_garbled() {
        let text = read(IOR);
        let error = parse(&first_lines(&text, 40)).expect_err("is refused");
        assert_eq!(error.line(), Some(41), "{error}");
        assert!(error.to_string().contains("`Finished`"), "{error}");
        let garbled = replace_line(
            &text,
            36,
            "write     fast       21.38      0.093502    204800     20480      0.001392   0.935444   0.037859   0.937271   0   ",
        );
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 36: expected a number for `bw(MiB/s)`, found `fast`"
        );
        let cut = replace_line(&text, 46, "write         426.77     426.77");
        assert!(
            parse(&cut)
                .expect_err("is refused")
                .to_string()
                .starts_with("could not parse line 46: expected 27 columns")
        );
        assert_eq!(parse("").expect_err("is refused").line(), Some(1));
    }
}
