//! `nvidia-smi` default table and `nvidia-smi --query-*=… --format=csv` output.
//!
//! Stage: parse (leaf). Input: the stdout of `nvidia-smi` or of a CSV query. Output:
//! [`NvidiaSmiTable`] (driver and CUDA versions, one entry per GPU with model, bus id,
//! ECC, temperature, power, memory) or [`NvidiaSmiQuery`] (one map per CSV row).
//!
//! CSV values come in three spellings that mean "no value" (`[N/A]`, `N/A`,
//! `[Not Supported]`…) and, without `nounits`, with a unit (`81559 MiB`, `70.21 W`):
//! values become numbers when they are numbers, with the unit kept per column. The
//! header line is optional (`noheader`): it is recognised by its field names.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Serialize, Serializer};

use super::{ParseError, Summary, float, integer, quoted};

/// What `nvidia-smi` (no arguments) printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvidiaSmiTable {
    /// `NVIDIA-SMI 560.35.03`.
    pub smi_version: Option<String>,
    /// `Driver Version: 560.35.03`.
    pub driver_version: Option<String>,
    /// `CUDA Version: 12.6`.
    pub cuda_version: Option<String>,
    /// One entry per GPU, in index order as printed.
    pub gpus: Vec<TableGpu>,
    /// `NVIDIA-SMI has failed …` / `No devices were found` instead of a table.
    pub failure: Option<String>,
}

/// One GPU block of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableGpu {
    /// 1-based line of the block's first row.
    pub line: usize,
    /// GPU index.
    pub index: u32,
    /// Model, possibly shortened by nvidia-smi (`NVIDIA A100 80G...`).
    pub name: String,
    /// Persistence mode `On`/`Off`.
    pub persistence_mode: String,
    /// PCI bus id (`00000000:19:00.0`).
    pub bus_id: String,
    /// Volatile uncorrected ECC errors; `None` when `N/A` or not a count.
    pub volatile_uncorrected_ecc: Option<u64>,
    /// Temperature in °C.
    pub temperature_c: Option<u32>,
    /// Performance state (`P0`).
    pub performance_state: String,
    /// Power draw and cap in W.
    pub power_draw_w: Option<f64>,
    /// Power cap in W.
    pub power_cap_w: Option<f64>,
    /// Memory used in MiB.
    pub memory_used_mib: Option<u64>,
    /// Memory total in MiB.
    pub memory_total_mib: Option<u64>,
    /// GPU utilisation in %.
    pub utilization_percent: Option<u32>,
    /// Compute mode (`Default`).
    pub compute_mode: String,
}

impl NvidiaSmiTable {
    /// Distinct GPU models, in order of first appearance.
    #[must_use]
    pub fn models(&self) -> Vec<&str> {
        let mut models: Vec<&str> = Vec::new();
        for gpu in &self.gpus {
            if !models.contains(&gpu.name.as_str()) {
                models.push(&gpu.name);
            }
        }
        models
    }
}

/// Parses the default `nvidia-smi` table.
pub fn parse_table(text: &str) -> Result<NvidiaSmiTable, ParseError> {
    let mut table =
        NvidiaSmiTable { smi_version: None, driver_version: None, cuda_version: None, gpus: Vec::new(), failure: None };
    let lines: Vec<&str> = text.lines().collect();
    let mut in_gpus = false;
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index].trim();
        let number = index + 1;
        index += 1;
        if line.starts_with("NVIDIA-SMI has failed") || line.starts_with("No devices were found") {
            table.failure.get_or_insert_with(|| line.to_owned());
        } else if line.contains("NVIDIA-SMI ") && line.contains("Driver Version:") {
            table.smi_version = value_after(line, "NVIDIA-SMI");
            table.driver_version = value_after(line, "Driver Version:");
            table.cuda_version = value_after(line, "CUDA Version:");
        } else if line.starts_with("|==") && table.driver_version.is_some() && table.gpus.is_empty() && !in_gpus {
            in_gpus = true;
        } else if line.contains("Processes:") {
            in_gpus = false;
        } else if in_gpus && line.starts_with('|') {
            let cells = cells(line);
            let is_gpu_row = cells.len() == 3
                && cells[0].split_whitespace().next().is_some_and(|first| first.parse::<u32>().is_ok());
            if is_gpu_row {
                let second = lines.get(index).map(|second| second.trim()).unwrap_or_default();
                table.gpus.push(gpu_block(&cells, second, number)?);
                index += 1;
            }
        }
    }
    if table.failure.is_some() {
        return Ok(table);
    }
    if table.driver_version.is_none() {
        return Err(ParseError::end_of_input(text, "the `NVIDIA-SMI … Driver Version: …` header"));
    }
    if table.gpus.is_empty() {
        return Err(ParseError::end_of_input(text, "a GPU row `|   0  NAME  Off |   BUS-ID Off | ECC |`"));
    }
    Ok(table)
}

/// The word after `label` in the header line.
fn value_after(line: &str, label: &str) -> Option<String> {
    let (_, rest) = line.split_once(label)?;
    rest.split_whitespace().next().filter(|value| *value != "|").map(str::to_owned)
}

/// `| a | b | c |` → `[a, b, c]`, trimmed.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// The first two rows of a GPU block.
fn gpu_block(first: &[&str], second: &str, line: usize) -> Result<TableGpu, ParseError> {
    let expected_second = "the GPU's second row `| FAN TEMP PERF PWR / CAP | USED / TOTAL | UTIL COMPUTE |`";
    let name_tokens: Vec<&str> = first[0].split_whitespace().collect();
    let (Some(index), Some(persistence)) = (name_tokens.first(), name_tokens.last()) else {
        return Err(ParseError::at(line, "`GPU NAME PERSISTENCE`", quoted(first[0])));
    };
    let index = integer(index, line, "the GPU index")?;
    let name = name_tokens.get(1..name_tokens.len().saturating_sub(1)).unwrap_or_default().join(" ");
    let bus_id = first[1].split_whitespace().next().unwrap_or_default().to_owned();
    let volatile_uncorrected_ecc = first[2].parse().ok();
    let second_cells = cells(second);
    if second_cells.len() != 3 || !second.ends_with('|') {
        return Err(ParseError::at(line + 1, expected_second, quoted(second)));
    }
    let stats: Vec<&str> = second_cells[0].split_whitespace().collect();
    let temperature_c = stats
        .get(1)
        .and_then(|temp| temp.strip_suffix('C'))
        .map(|temp| integer(temp, line + 1, "the temperature"))
        .transpose()?;
    let performance_state = stats.get(2).copied().unwrap_or_default().to_owned();
    let watts = |token: Option<&&str>| -> Result<Option<f64>, ParseError> {
        match token.and_then(|token| token.strip_suffix('W')) {
            Some(value) => float(value, line + 1, "the power in W").map(Some),
            None => Ok(None),
        }
    };
    let slash = stats.iter().position(|token| *token == "/");
    let power_draw_w = watts(slash.and_then(|at| at.checked_sub(1)).and_then(|at| stats.get(at)))?;
    let power_cap_w = watts(slash.and_then(|at| stats.get(at + 1)))?;
    let memory: Vec<&str> = second_cells[1].split('/').map(str::trim).collect();
    let mib = |token: Option<&&str>| -> Result<Option<u64>, ParseError> {
        match token.and_then(|token| token.strip_suffix("MiB")) {
            Some(value) => integer(value, line + 1, "the memory in MiB").map(Some),
            None => Ok(None),
        }
    };
    let memory_used_mib = mib(memory.first())?;
    let memory_total_mib = mib(memory.get(1))?;
    let utilization: Vec<&str> = second_cells[2].split_whitespace().collect();
    let utilization_percent = utilization
        .first()
        .and_then(|value| value.strip_suffix('%'))
        .map(|value| integer(value, line + 1, "the utilisation in %"))
        .transpose()?;
    Ok(TableGpu {
        line,
        index,
        name,
        persistence_mode: (*persistence).to_owned(),
        bus_id,
        volatile_uncorrected_ecc,
        temperature_c,
        performance_state,
        power_draw_w,
        power_cap_w,
        memory_used_mib,
        memory_total_mib,
        utilization_percent,
        compute_mode: utilization.get(1).copied().unwrap_or_default().to_owned(),
    })
}

impl Summary for NvidiaSmiTable {
    fn summary(&self) -> String {
        if let Some(failure) = &self.failure {
            return format!("nvidia-smi failed: {failure}\n");
        }
        format!(
            "nvidia-smi {}: driver {}, CUDA {}, {} GPUs: {}\n",
            self.smi_version.as_deref().unwrap_or("?"),
            self.driver_version.as_deref().unwrap_or("?"),
            self.cuda_version.as_deref().unwrap_or("?"),
            self.gpus.len(),
            self.models().join(", ")
        )
    }
}

// --- CSV query ----------------------------------------------------------------------

/// One CSV value.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryValue {
    /// A number (units stripped; see the column's unit).
    Number(f64),
    /// Anything else (`Enabled`, `NVIDIA H100 80GB HBM3`, `0x0000000000000001`).
    Text(String),
    /// `[N/A]`, `N/A`, `[Not Supported]`, …: serialised as `null`.
    Missing(String),
}

impl Serialize for QueryValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Number(number) => serializer.serialize_f64(*number),
            Self::Text(text) => serializer.serialize_str(text),
            Self::Missing(_) => serializer.serialize_none(),
        }
    }
}

/// A CSV column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueryColumn {
    /// Field name from the header (`memory.total`), or `field1`… without a header.
    pub name: String,
    /// Unit from the header (`MiB` in `memory.total [MiB]`) or from the values.
    pub unit: Option<String>,
}

/// One CSV row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryRow {
    /// 1-based line.
    pub line: usize,
    /// Values by column name.
    pub values: BTreeMap<String, QueryValue>,
}

/// What a `--format=csv` query printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvidiaSmiQuery {
    /// Whether a header line was present.
    pub header: bool,
    /// The columns, in order.
    pub columns: Vec<QueryColumn>,
    /// One row per GPU (or per remapped-rows/process entry).
    pub rows: Vec<QueryRow>,
}

/// Spellings nvidia-smi uses for "no value".
const MISSING: &[&str] =
    &["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]", "[GPU is lost]", "[Unknown]"];

/// Whether `field` looks like a query field name (`ecc.errors.corrected.volatile.total`,
/// `memory.total [MiB]`), which values never do: values are numbers, capitalised words,
/// `0x…` masks or bracketed notes.
fn is_field_name(field: &str) -> bool {
    let name = field.split(" [").next().unwrap_or(field);
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_')
}

/// Parses `nvidia-smi --query-…=… --format=csv[,noheader][,nounits]` output.
pub fn parse_query(text: &str) -> Result<NvidiaSmiQuery, ParseError> {
    let mut query = NvidiaSmiQuery { header: false, columns: Vec::new(), rows: Vec::new() };
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = raw.split(',').map(str::trim).collect();
        if query.columns.is_empty() {
            if fields.iter().all(|field| is_field_name(field)) {
                query.header = true;
                query.columns = fields.iter().map(|field| header_column(field)).collect();
                continue;
            }
            query.columns =
                (1..=fields.len()).map(|number| QueryColumn { name: format!("field{number}"), unit: None }).collect();
        }
        if fields.len() != query.columns.len() {
            return Err(ParseError::at(
                line,
                format!("{} comma-separated values", query.columns.len()),
                format!("{} in {}", fields.len(), quoted(raw)),
            ));
        }
        let mut values = BTreeMap::new();
        for (column, field) in query.columns.iter_mut().zip(&fields) {
            let (value, unit) = query_value(field);
            if column.unit.is_none() {
                column.unit = unit;
            }
            values.insert(column.name.clone(), value);
        }
        query.rows.push(QueryRow { line, values });
    }
    if query.rows.is_empty() {
        let what = if query.header { "a value row after the header" } else { "a CSV header or value row" };
        return Err(ParseError::end_of_input(text, what));
    }
    Ok(query)
}

fn header_column(field: &str) -> QueryColumn {
    match field.split_once(" [") {
        Some((name, unit)) => QueryColumn { name: name.to_owned(), unit: Some(unit.trim_end_matches(']').to_owned()) },
        None => QueryColumn { name: field.to_owned(), unit: None },
    }
}

/// A value and the unit it carried (`81559 MiB` → 81559, `MiB`).
fn query_value(field: &str) -> (QueryValue, Option<String>) {
    if MISSING.contains(&field) {
        return (QueryValue::Missing(field.to_owned()), None);
    }
    if let Ok(number) = field.parse::<f64>()
        && number.is_finite()
    {
        return (QueryValue::Number(number), None);
    }
    if let Some((number, unit)) = field.split_once(' ')
        && let Ok(number) = number.parse::<f64>()
        && number.is_finite()
        && !unit.contains(' ')
    {
        return (QueryValue::Number(number), Some(unit.to_owned()));
    }
    (QueryValue::Text(field.to_owned()), None)
}

impl Summary for NvidiaSmiQuery {
    fn summary(&self) -> String {
        let mut out = String::new();
        let names: Vec<&str> = self.columns.iter().map(|column| column.name.as_str()).collect();
        let _ = writeln!(out, "nvidia-smi query: {} rows of {}", self.rows.len(), names.join(", "));
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::{first_lines, read, replace_line};
    use super::*;

    const TABLE: &str = "nvidia_smi_8xh100_table.txt";

    #[test]
    fn table_of_eight_h100() {
        let table = parse_table(&read(TABLE)).expect("parses");
        assert_eq!(table.smi_version.as_deref(), Some("560.35.03"));
        assert_eq!(table.driver_version.as_deref(), Some("560.35.03"));
        assert_eq!(table.cuda_version.as_deref(), Some("12.6"));
        assert_eq!(table.gpus.len(), 8);
        assert_eq!(table.models(), ["NVIDIA H100 80GB HBM3"]);
        let gpu = &table.gpus[7];
        assert_eq!(gpu.index, 7);
        assert_eq!(gpu.bus_id, "00000000:DB:00.0");
        assert_eq!(gpu.persistence_mode, "Off");
        assert_eq!(gpu.volatile_uncorrected_ecc, Some(0));
        assert_eq!(gpu.temperature_c, Some(32));
        assert_eq!(gpu.power_draw_w, Some(71.0));
        assert_eq!(gpu.power_cap_w, Some(700.0));
        assert_eq!((gpu.memory_used_mib, gpu.memory_total_mib), (Some(1), Some(81559)));
        assert_eq!(gpu.utilization_percent, Some(0));
        assert_eq!(gpu.compute_mode, "Default");
        assert_eq!(gpu.line, 37);
    }

    #[test]
    fn table_errors_name_lines() {
        let text = read(TABLE);
        let garbled = replace_line(
            &text,
            10,
            "| N/A   38C    P0            7OW /  700W |       1MiB /  81559MiB |      0%      Default |",
        );
        assert_eq!(
            parse_table(&garbled).expect_err("is refused").to_string(),
            "could not parse line 10: expected a number for the power in W, found `7O`"
        );
        let cut = replace_line(&text, 10, "| N/A   38C    P0             70W /  700W |       1MiB /  8155");
        assert_eq!(parse_table(&cut).expect_err("is refused").line(), Some(10));
        let error = parse_table(&first_lines(&text, 8)).expect_err("is refused");
        assert_eq!(error.line(), Some(9), "{error}");
        assert_eq!(parse_table("").expect_err("is refused").line(), Some(1));
    }

    #[test]
    fn driver_failure_is_typed() {
        let table = parse_table(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n",
        )
        .expect("parses");
        assert!(table.failure.expect("present").starts_with("NVIDIA-SMI has failed"));
    }

    // No real `--query-gpu … --format=csv` capture with provenance exists yet
    // (fixtures/SOURCE.md "Not found"); these check the documented CSV forms.
    #[test]
    fn query_with_header_units_and_missing_values() {
        let text = "index, name, memory.total [MiB], ecc.errors.uncorrected.volatile.total, clocks_event_reasons.active\n\
                    0, NVIDIA H100 80GB HBM3, 81559 MiB, 0, 0x0000000000000001\n\
                    1, NVIDIA H100 80GB HBM3, 81559 MiB, [N/A], 0x0000000000000004\n";
        let query = parse_query(text).expect("parses");
        assert!(query.header);
        assert_eq!(query.columns[2], QueryColumn { name: "memory.total".into(), unit: Some("MiB".into()) });
        assert_eq!(query.rows.len(), 2);
        assert_eq!(query.rows[0].values["memory.total"], QueryValue::Number(81559.0));
        assert_eq!(query.rows[1].values["ecc.errors.uncorrected.volatile.total"], QueryValue::Missing("[N/A]".into()));
        assert_eq!(query.rows[1].values["clocks_event_reasons.active"], QueryValue::Text("0x0000000000000004".into()));
        let json = serde_json::to_value(&query).expect("parses");
        assert!(json["rows"][1]["values"]["ecc.errors.uncorrected.volatile.total"].is_null());
    }

    #[test]
    fn query_noheader_nounits_and_errors() {
        let query = parse_query("0\n0\n0\n0\n0\n0\n0\n0\n").expect("parses");
        assert!(!query.header);
        assert_eq!(query.rows.len(), 8);
        assert_eq!(query.rows[7].values["field1"], QueryValue::Number(0.0));
        let error = parse_query("index, pci.bus_id\n0, 00000000:19:00.0\n1\n").expect_err("is refused");
        assert_eq!(error.to_string(), "could not parse line 3: expected 2 comma-separated values, found 1 in `1`");
        let error = parse_query("index, name\n").expect_err("is refused");
        assert_eq!(error.line(), Some(2));
    }
}
