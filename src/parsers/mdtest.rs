//! mdtest text output.
//!
//! Stage: parse (leaf). Input: mdtest's stdout (launch line, options, optional verbose
//! `V-1` lines, `SUMMARY rate:` and, in newer versions, `SUMMARY time:` tables).
//! Output: [`MdtestOutput`]: tasks, nodes, and per operation (`File creation`, `Tree
//! removal`…) the max, min, mean and standard deviation in ops/s.
//!
//! Old mdtest (1.9) ends operation names with `:`; newer ones do not, and add columns
//! (validators.md §5): the columns are read from the header, and a row must have as
//! many numbers as the header names.

use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, float, integer, quoted};

/// What one mdtest run printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MdtestOutput {
    /// `1.9.3` from `mdtest-1.9.3 was launched with …`.
    pub version: Option<String>,
    /// Total tasks.
    pub tasks: Option<u32>,
    /// Nodes.
    pub nodes: Option<u32>,
    /// `Command line used:`.
    pub command_line: Option<String>,
    /// Iterations summarised (`SUMMARY rate: (of 10 iterations)`).
    pub iterations: Option<u32>,
    /// Rows of `SUMMARY rate:` in ops/s.
    pub rates: Vec<MdtestRow>,
    /// Rows of `SUMMARY time:` in seconds (newer mdtest).
    pub times: Vec<MdtestRow>,
}

/// One operation of a summary table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MdtestRow {
    /// 1-based line.
    pub line: usize,
    /// `Directory creation`, `File stat`, …
    pub operation: String,
    /// Values by column name (`Max`, `Min`, `Mean`, `Std Dev`).
    pub values: Vec<(String, f64)>,
}

impl MdtestRow {
    /// The value of column `name`.
    #[must_use]
    pub fn value(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|(column, _)| column == name).map(|(_, value)| *value)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    None,
    Rate,
    Time,
}

/// Parses mdtest output.
pub fn parse(text: &str) -> Result<MdtestOutput, ParseError> {
    let mut output = MdtestOutput {
        version: None,
        tasks: None,
        nodes: None,
        command_line: None,
        iterations: None,
        rates: Vec::new(),
        times: Vec::new(),
    };
    let mut table = Table::None;
    let mut columns: Vec<String> = Vec::new();
    let mut finished = false;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        // A blank line or a verbose `V-N:` log line ends a table.
        if content.is_empty() || content.starts_with("V-") {
            table = Table::None;
            continue;
        }
        if content.starts_with("---") {
            continue;
        }
        if let Some(rest) = content.strip_prefix("mdtest-") {
            launch_line(rest, line, &mut output)?;
        } else if let Some(rest) = content.strip_prefix("Command line used:") {
            output.command_line = Some(rest.trim().to_owned());
        } else if content.starts_with("-- finished") {
            finished = true;
        } else if let Some(rest) = content.strip_prefix("SUMMARY") {
            table = if rest.trim_start().starts_with("time") { Table::Time } else { Table::Rate };
            columns.clear();
            if let Some(count) = rest.split("(of ").nth(1).and_then(|tail| tail.split_whitespace().next()) {
                output.iterations = Some(integer(count, line, "the iteration count")?);
            }
        } else if table != Table::None && content.starts_with("Operation") {
            columns = header(content);
        } else if table != Table::None && !columns.is_empty() {
            let row = row(content, line, &columns)?;
            match table {
                Table::Rate => output.rates.push(row),
                Table::Time => output.times.push(row),
                Table::None => {}
            }
        }
    }
    if output.rates.is_empty() && output.times.is_empty() {
        return Err(ParseError::end_of_input(text, "a `SUMMARY rate:` table"));
    }
    if !finished {
        return Err(ParseError::end_of_input(text, "the `-- finished at …` line (the output is truncated)"));
    }
    Ok(output)
}

/// `1.9.3 was launched with 16 total task(s) on 2 node(s)`.
fn launch_line(rest: &str, line: usize, output: &mut MdtestOutput) -> Result<(), ParseError> {
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    output.version = tokens.first().map(|version| (*version).to_owned());
    let before = |word: &str| tokens.iter().position(|token| *token == word).and_then(|at| at.checked_sub(1));
    if let Some(at) = before("total") {
        output.tasks = Some(integer(tokens[at], line, "the task count")?);
    }
    if let Some(at) = before("node(s)") {
        output.nodes = Some(integer(tokens[at], line, "the node count")?);
    }
    Ok(())
}

/// `Operation  Max  Min  Mean  Std Dev` → `[Max, Min, Mean, Std Dev]`.
fn header(content: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for word in content.split_whitespace().skip(1) {
        if word == "Dev" && names.last().is_some_and(|last| last == "Std") {
            if let Some(last) = names.last_mut() {
                last.push_str(" Dev");
            }
        } else {
            names.push(word.to_owned());
        }
    }
    names
}

/// `Directory creation:   670.590   670.565   670.582   0.007` (colon optional).
fn row(content: &str, line: usize, columns: &[String]) -> Result<MdtestRow, ParseError> {
    let tokens: Vec<&str> = content.split_whitespace().collect();
    if tokens.len() <= columns.len() {
        return Err(ParseError::at(
            line,
            format!("an operation name and {} values ({})", columns.len(), columns.join(", ")),
            quoted(content),
        ));
    }
    let split = tokens.len() - columns.len();
    let operation = tokens[..split].join(" ").trim_end_matches(':').trim().to_owned();
    let mut values = Vec::new();
    for (name, token) in columns.iter().zip(&tokens[split..]) {
        values.push((name.clone(), float(token, line, &format!("`{name}` of `{operation}`"))?));
    }
    Ok(MdtestRow { line, operation, values })
}

impl Summary for MdtestOutput {
    fn summary(&self) -> String {
        let mut out = format!(
            "mdtest {}: {} tasks on {} nodes\n",
            self.version.as_deref().unwrap_or("?"),
            self.tasks.map_or_else(|| "?".to_owned(), |tasks| tasks.to_string()),
            self.nodes.map_or_else(|| "?".to_owned(), |nodes| nodes.to_string())
        );
        for row in &self.rates {
            let _ = writeln!(out, "{}: mean {} ops/s", row.operation, row.value("Mean").unwrap_or(f64::NAN));
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

    const MDTEST: &str = "mdtest_1.9.3_2node_gpfs_ccr_verbose.txt";

    #[test]
    fn mdtest_1_9_3_summary_rates() {
        let output = parse(&read(MDTEST)).expect("parses");
        assert_eq!(output.version.as_deref(), Some("1.9.3"));
        assert_eq!((output.tasks, output.nodes, output.iterations), (Some(16), Some(2), Some(10)));
        assert_eq!(output.rates.len(), 9);
        let creation = &output.rates[0];
        assert_eq!(creation.operation, "Directory creation");
        assert_eq!(creation.value("Max"), Some(670.590));
        assert_eq!(creation.value("Std Dev"), Some(0.007));
        let stat = output.rates.iter().find(|row| row.operation == "File stat").expect("present");
        assert_eq!(stat.value("Mean"), Some(28997.226));
        assert_eq!(output.rates[8].operation, "Tree removal");
        assert_eq!(output.rates[8].line, 329);
        assert!(output.times.is_empty());
    }

    #[test]
    fn newer_layout_without_colons_and_with_a_time_table() {
        let text = read(MDTEST);
        let newer = replace_line(
            &text,
            321,
            "   Directory creation        670.590        670.565        670.582          0.007",
        );
        let output = parse(&newer).expect("parses");
        assert_eq!(output.rates[0].operation, "Directory creation");
        assert_eq!(output.rates[0].value("Mean"), Some(670.582));
    }

    #[test]
    fn truncated_and_garbled() {
        let text = read(MDTEST);
        let error = parse(&first_lines(&text, 325)).expect_err("is refused");
        assert_eq!(error.line(), Some(326), "{error}");
        assert_eq!(parse(&first_lines(&text, 200)).expect_err("is refused").line(), Some(201));
        let garbled =
            replace_line(&text, 325, "   File stat         :      29011.816      28946.119      many         25.224");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 325: expected a number for `Mean` of `File stat`, found `many`"
        );
        assert!(
            parse(&replace_line(&text, 325, "   File stat   :  29011.816"))
                .expect_err("is refused")
                .to_string()
                .starts_with("could not parse line 325: expected an operation name and 4 values")
        );
    }
}
