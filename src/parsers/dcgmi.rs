//! `dcgmi diag` output: the 80-column text table and the `-j` JSON of DCGM 3.x and 4.x.
//!
//! Stage: parse (leaf). Input: the stdout of `dcgmi diag -r N [-j]`. Output:
//! [`DcgmDiagOutput`]: versions, and per test its category, results (Pass, Fail, Warn,
//! Skip, Not Run per GPU or for all) with their info and warning messages.
//!
//! Traps (validators.md §4, §9 trap 5): the header `Successfully ran diagnostic for
//! group.` is printed on failures too, so it is ignored; text messages are wrapped at a
//! fixed width in the middle of words, so continuation cells are joined exactly, not
//! with spaces; DCGM 4.x renamed the JSON root (`DCGM Diagnostic`), moved versions to
//! `metadata` and results to `entity_group`/`entity_id`; status case differs across
//! versions (`Pass`, `PASS`), so it is compared case-insensitively.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Deserializer, Serialize};

use super::{ParseError, Summary, json_document, quoted};

/// The outcome of one test on one GPU (or on all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagStatus {
    /// Passed.
    Pass,
    /// Skipped: not verified, not a pass.
    Skip,
    /// Not run (DCGM 4.x).
    NotRun,
    /// Passed with a warning.
    Warn,
    /// Failed.
    Fail,
}

impl DiagStatus {
    fn from_word(word: &str) -> Option<Self> {
        match word.trim().to_lowercase().replace(['_', ' '], "").as_str() {
            "pass" => Some(Self::Pass),
            "skip" => Some(Self::Skip),
            "notrun" => Some(Self::NotRun),
            "warn" | "warning" => Some(Self::Warn),
            "fail" => Some(Self::Fail),
            _ => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Skip => "skip",
            Self::NotRun => "not run",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

impl<'de> Deserialize<'de> for DiagStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        Self::from_word(&word).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown status `{word}`, expected Pass, Fail, Warn, Skip or Not Run"))
        })
    }
}

/// Which output form was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DcgmFormat {
    /// The text table.
    Text,
    /// JSON with the DCGM ≤ 3.x root `DCGM GPU Diagnostic`.
    Json3,
    /// JSON with the DCGM 4.x root `DCGM Diagnostic`.
    Json4,
}

/// What one `dcgmi diag` run reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DcgmDiagOutput {
    /// Text table or JSON (and which JSON schema).
    pub format: DcgmFormat,
    /// `DCGM Version` / `metadata.version`.
    pub dcgm_version: Option<String>,
    /// `Driver Version Detected`.
    pub driver_version: Option<String>,
    /// PCI device ids of the GPUs (`2330` = H100 SXM), one per GPU.
    pub gpu_device_ids: Vec<String>,
    /// Every other metadata row of the text table.
    pub metadata: BTreeMap<String, String>,
    /// A run-level error (`runtime_error`, or an `Error:` line instead of a table).
    pub runtime_error: Option<String>,
    /// Tests in output order.
    pub tests: Vec<DcgmTest>,
}

/// One diagnostic test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DcgmTest {
    /// `Deployment`, `Integration`, `Hardware`, `Stress`, …
    pub category: Option<String>,
    /// Test name as printed (`GPU Memory`, `memory`).
    pub name: String,
    /// The worst result, or the 4.x `test_summary` status.
    pub status: DiagStatus,
    /// Results per GPU or for all GPUs.
    pub results: Vec<DcgmResult>,
    /// 1-based line of the test in a text table.
    pub line: Option<usize>,
}

/// One result of a test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DcgmResult {
    /// The outcome.
    pub status: DiagStatus,
    /// What it covers as printed: `All`, `GPU 2`, `gpu 0`, `0,1,2,3`.
    pub scope: Option<String>,
    /// The GPU, when the result is for exactly one.
    pub gpu: Option<u32>,
    /// Informational messages.
    pub info: Vec<String>,
    /// Warnings and errors.
    pub warnings: Vec<DcgmMessage>,
}

/// A warning or error message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DcgmMessage {
    /// The GPU it names (`GPU 3 …`), when it names one.
    pub gpu: Option<u32>,
    /// The message, unwrapped.
    pub message: String,
    /// DCGM error id (`DCGM_FR_*` number), JSON only.
    pub error_id: Option<i64>,
    /// Error category, JSON only.
    pub error_category: Option<i64>,
    /// Error severity, JSON only: 2 = ISOLATE, 3 = RESET (CHS).
    pub error_severity: Option<i64>,
}

impl DcgmDiagOutput {
    /// How many tests ended with `status`.
    #[must_use]
    pub fn count(&self, status: DiagStatus) -> usize {
        self.tests.iter().filter(|test| test.status == status).count()
    }
}

// --- text ---------------------------------------------------------------------------

/// What the previous table row added, so a continuation row knows what it continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Nothing,
    Metadata,
    Result,
    Info,
    Warning,
}

/// Parses the text table of `dcgmi diag`.
pub fn parse_text(text: &str) -> Result<DcgmDiagOutput, ParseError> {
    let mut output = DcgmDiagOutput {
        format: DcgmFormat::Text,
        dcgm_version: None,
        driver_version: None,
        gpu_device_ids: Vec::new(),
        metadata: BTreeMap::new(),
        runtime_error: None,
        tests: Vec::new(),
    };
    let mut started = false;
    let mut closed = false;
    let mut category: Option<String> = None;
    let mut last = Last::Nothing;
    let mut metadata_key = String::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim_end();
        if !started {
            if trimmed.starts_with('+') && is_border(trimmed) {
                started = true;
            } else if let Some(message) = trimmed.trim().strip_prefix("Error:") {
                output.runtime_error.get_or_insert_with(|| message.trim().to_owned());
            }
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        if !trimmed.starts_with('|') && !trimmed.starts_with('+') {
            if closed {
                continue;
            }
            return Err(ParseError::at(line, "a table row `| test | result |`", quoted(trimmed)));
        }
        if is_border(trimmed) {
            // `+====+` only closes the header; a `+----+` may close the table.
            closed = trimmed.starts_with('+') && !trimmed.contains('=');
            continue;
        }
        closed = false;
        if let Some(name) = category_name(trimmed) {
            category = Some(name);
            last = Last::Nothing;
            continue;
        }
        let (name, cell) = row_cells(trimmed, line)?;
        let value = cell.trim();
        let in_metadata = category.as_deref().is_none_or(|name| name == "Metadata");
        if name.is_empty() {
            continuation(&mut output, last, &metadata_key, cell, value, line)?;
            continue;
        }
        if name == "Diagnostic" && value == "Result" {
            continue;
        }
        if in_metadata {
            name.clone_into(&mut metadata_key);
            output.metadata.insert(name.to_owned(), unwrapped(cell));
            last = Last::Metadata;
        } else if name == "Info" || name == "Warning" || name == "Error" {
            let result = output
                .tests
                .last_mut()
                .and_then(|test| test.results.last_mut())
                .ok_or_else(|| ParseError::at(line, "a test row before its message", quoted(trimmed)))?;
            let message = unwrapped(cell);
            if name == "Info" {
                result.info.push(message);
                last = Last::Info;
            } else {
                let gpu = gpu_named(&message);
                result.warnings.push(DcgmMessage {
                    gpu,
                    message,
                    error_id: None,
                    error_category: None,
                    error_severity: None,
                });
                last = Last::Warning;
            }
        } else {
            let result = status_cell(value, name, line)?;
            output.tests.push(DcgmTest {
                category: category.clone(),
                name: name.to_owned(),
                status: result.status,
                results: vec![result],
                line: Some(line),
            });
            last = Last::Result;
        }
    }
    if !started {
        if output.runtime_error.is_some() {
            return Ok(output);
        }
        return Err(ParseError::end_of_input(text, "the `dcgmi diag` result table (`+----…+`)"));
    }
    if !closed {
        return Err(ParseError::end_of_input(
            text,
            "the closing border `+----…+` of the table (the output is truncated)",
        ));
    }
    read_metadata(&mut output);
    for test in &mut output.tests {
        for result in &mut test.results {
            result.info.iter_mut().for_each(|info| *info = info.trim_end().to_owned());
            result.warnings.iter_mut().for_each(|warning| warning.message = warning.message.trim_end().to_owned());
        }
    }
    Ok(output)
}

/// A continuation row (empty name column): more of the previous message, or another
/// result of the same test.
fn continuation(
    output: &mut DcgmDiagOutput,
    last: Last,
    metadata_key: &str,
    cell: &str,
    value: &str,
    line: usize,
) -> Result<(), ParseError> {
    let chunk = unwrapped(cell);
    let test = output.tests.last_mut();
    match (last, test) {
        (Last::Info, Some(test)) => {
            if let Some(info) = test.results.last_mut().and_then(|result| result.info.last_mut()) {
                info.push_str(&chunk);
            }
        }
        (Last::Warning, Some(test)) => {
            if let Some(warning) = test.results.last_mut().and_then(|result| result.warnings.last_mut()) {
                warning.message.push_str(&chunk);
            }
        }
        (Last::Result, Some(test)) => {
            let name = test.name.clone();
            let result = status_cell(value, &name, line)?;
            test.status = test.status.max(result.status);
            test.results.push(result);
        }
        (Last::Metadata, _) => {
            if let Some(existing) = output.metadata.get_mut(metadata_key) {
                existing.push_str(&chunk);
            }
        }
        _ => return Err(ParseError::at(line, "a test row before a continuation row", quoted(value))),
    }
    Ok(())
}

/// Moves the well-known metadata rows (joined across wrapped lines) to typed fields.
fn read_metadata(output: &mut DcgmDiagOutput) {
    for value in output.metadata.values_mut() {
        *value = value.trim().to_owned();
    }
    output.dcgm_version = output.metadata.remove("DCGM Version");
    output.driver_version = output.metadata.remove("Driver Version Detected");
    let ids_key = output.metadata.keys().find(|key| key.contains("Device IDs")).cloned();
    if let Some(ids) = ids_key.and_then(|key| output.metadata.remove(&key)) {
        output.gpu_device_ids = ids.split(',').map(str::trim).filter(|id| !id.is_empty()).map(str::to_owned).collect();
    }
}

/// `Pass`, `Fail - All`, `Skip - GPU 2`, `Warn - GPUs: 0, 1`.
fn status_cell(value: &str, test: &str, line: usize) -> Result<DcgmResult, ParseError> {
    let (word, scope) = match value.split_once(" - ") {
        Some((word, scope)) => (word, Some(scope.trim().to_owned())),
        None => (value, None),
    };
    let status = DiagStatus::from_word(word).ok_or_else(|| {
        ParseError::at(line, format!("a result (Pass, Fail, Warn or Skip) for test `{test}`"), quoted(value))
    })?;
    let gpu = scope.as_deref().and_then(gpu_named);
    Ok(DcgmResult { status, scope, gpu, info: Vec::new(), warnings: Vec::new() })
}

/// The GPU a message or scope starts with: `GPU 3 …`, `GPU: 3`.
fn gpu_named(text: &str) -> Option<u32> {
    let rest = text.trim_start().strip_prefix("GPU")?;
    let digits: String = rest.trim_start_matches([':', ' ']).chars().take_while(char::is_ascii_digit).collect();
    let after = rest.trim_start_matches([':', ' ']).get(digits.len()..).unwrap_or_default();
    if after.starts_with(',') || after.starts_with('-') {
        return None;
    }
    digits.parse().ok()
}

/// A border line: only `+ - = |` characters.
fn is_border(line: &str) -> bool {
    line.chars().all(|c| matches!(c, '+' | '-' | '=' | '|' | ' ')) && (line.contains("--") || line.contains("=="))
}

/// `|-----  Deployment  ----+----|` or `+-----  Hardware  ---+---+` → the category name.
fn category_name(line: &str) -> Option<String> {
    let body = line.get(1..)?;
    if !body.starts_with("-----") {
        return None;
    }
    let first = body.split(['+', '|']).next()?;
    let name = first.trim_matches(|c: char| c == '-' || c.is_whitespace());
    (!name.is_empty()).then(|| name.to_owned())
}

/// `| name | value |` → (trimmed name, raw value cell between the bars).
fn row_cells(line: &str, number: usize) -> Result<(&str, &str), ParseError> {
    let expected = "a table row `| test | result |`";
    if !line.ends_with('|') {
        return Err(ParseError::at(number, expected, quoted(line)));
    }
    let mut parts = line.split('|');
    let (Some(""), Some(name), Some(value)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(ParseError::at(number, expected, quoted(line)));
    };
    Ok((name.trim(), value))
}

/// The text of a value cell as DCGM wrote it: after the one-space margin, the cell
/// holds a fixed-width chunk of the message followed by two spaces of padding. Chunks
/// split words (`Enabl` / `e persistence`), so they are concatenated as they are.
fn unwrapped(cell: &str) -> String {
    let width = cell.chars().count();
    if width < 3 {
        return cell.trim().to_owned();
    }
    cell.chars().skip(1).take(width - 3).collect()
}

// --- JSON ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct RawRoot {
    #[serde(rename = "DCGM GPU Diagnostic")]
    version3: Option<RawDiagnostic>,
    #[serde(rename = "DCGM Diagnostic")]
    version4: Option<RawDiagnostic>,
    metadata: Option<RawMetadata>,
    #[serde(default)]
    entity_groups: Vec<RawEntityGroup>,
}

#[derive(Deserialize)]
struct RawDiagnostic {
    #[serde(default)]
    test_categories: Vec<RawCategory>,
    runtime_error: Option<String>,
    version: Option<String>,
    #[serde(rename = "Driver Version Detected")]
    driver_version: Option<String>,
    #[serde(rename = "GPU Device IDs")]
    device_ids: Option<Vec<Id>>,
}

#[derive(Deserialize)]
struct RawMetadata {
    version: Option<String>,
    #[serde(rename = "Driver Version Detected")]
    driver_version: Option<String>,
}

#[derive(Deserialize)]
struct RawEntityGroup {
    entity_group: Option<String>,
    #[serde(default)]
    entities: Vec<RawEntity>,
}

#[derive(Deserialize)]
struct RawEntity {
    device_id: Option<String>,
}

#[derive(Deserialize)]
struct RawCategory {
    category: Option<String>,
    #[serde(default)]
    tests: Vec<RawTest>,
}

#[derive(Deserialize)]
struct RawTest {
    name: String,
    #[serde(default)]
    results: Vec<RawResult>,
    test_summary: Option<RawSummary>,
}

#[derive(Deserialize)]
struct RawSummary {
    status: DiagStatus,
}

#[derive(Deserialize)]
struct RawResult {
    gpu_id: Option<Id>,
    gpu_ids: Option<Id>,
    entity_group: Option<String>,
    entity_id: Option<Id>,
    status: DiagStatus,
    info: Option<OneOrMany>,
    warnings: Option<Vec<RawWarning>>,
}

/// DCGM prints ids as strings in 3.x (`"0"`, `"0,1,2,3"`) and numbers in 4.x.
#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Number(u32),
    Text(String),
}

impl Id {
    fn text(&self) -> String {
        match self {
            Self::Number(number) => number.to_string(),
            Self::Text(text) => text.clone(),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// Early NVVS printed warnings as strings, later ones as objects with error ids.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawWarning {
    Text(String),
    Detailed { warning: String, error_id: Option<i64>, error_category: Option<i64>, error_severity: Option<i64> },
}

/// Parses `dcgmi diag -j` JSON of DCGM 3.x or 4.x.
pub fn parse_json(text: &str) -> Result<DcgmDiagOutput, ParseError> {
    let root: RawRoot = json_document(text, "`dcgmi diag -j` output")?;
    let (format, diagnostic) = match (root.version4, root.version3) {
        (Some(diagnostic), _) => (DcgmFormat::Json4, diagnostic),
        (None, Some(diagnostic)) => (DcgmFormat::Json3, diagnostic),
        (None, None) => {
            let line = text.lines().position(|line| line.trim_start().starts_with('{')).map_or(1, |at| at + 1);
            return Err(ParseError::at(
                line,
                "a `DCGM Diagnostic` (DCGM 4.x) or `DCGM GPU Diagnostic` (3.x) object",
                "neither key",
            ));
        }
    };
    let metadata = root.metadata;
    let mut gpu_device_ids: Vec<String> = diagnostic.device_ids.iter().flatten().map(Id::text).collect();
    for group in root.entity_groups.iter().filter(|group| group.entity_group.as_deref() == Some("GPU")) {
        gpu_device_ids.extend(group.entities.iter().filter_map(|entity| entity.device_id.clone()));
    }
    let mut tests = Vec::new();
    for category in diagnostic.test_categories {
        for test in category.tests {
            let results: Vec<DcgmResult> = test.results.into_iter().map(result).collect();
            let worst = results.iter().map(|result| result.status).max();
            let status = test.test_summary.map(|summary| summary.status).or(worst).unwrap_or(DiagStatus::NotRun);
            tests.push(DcgmTest { category: category.category.clone(), name: test.name, status, results, line: None });
        }
    }
    Ok(DcgmDiagOutput {
        format,
        dcgm_version: diagnostic.version.or_else(|| metadata.as_ref().and_then(|m| m.version.clone())),
        driver_version: diagnostic.driver_version.or_else(|| metadata.and_then(|m| m.driver_version)),
        gpu_device_ids,
        metadata: BTreeMap::new(),
        runtime_error: diagnostic.runtime_error,
        tests,
    })
}

fn result(raw: RawResult) -> DcgmResult {
    let scope = match (&raw.entity_group, &raw.entity_id, &raw.gpu_id, &raw.gpu_ids) {
        (Some(group), Some(id), _, _) => Some(format!("{} {}", group.to_lowercase(), id.text())),
        (_, _, Some(id), _) | (_, _, None, Some(id)) => Some(id.text()),
        _ => None,
    };
    let is_gpu = raw.entity_group.as_deref().is_none_or(|group| group.eq_ignore_ascii_case("gpu"));
    let gpu = [&raw.entity_id, &raw.gpu_id, &raw.gpu_ids]
        .into_iter()
        .flatten()
        .next()
        .filter(|_| is_gpu)
        .and_then(|id| id.text().parse().ok());
    let info = match raw.info {
        Some(OneOrMany::One(one)) => vec![one],
        Some(OneOrMany::Many(many)) => many,
        None => Vec::new(),
    };
    let warnings = raw
        .warnings
        .unwrap_or_default()
        .into_iter()
        .map(|warning| match warning {
            RawWarning::Text(message) => DcgmMessage {
                gpu: gpu_named(&message),
                message,
                error_id: None,
                error_category: None,
                error_severity: None,
            },
            RawWarning::Detailed { warning, error_id, error_category, error_severity } => {
                DcgmMessage { gpu: gpu_named(&warning), message: warning, error_id, error_category, error_severity }
            }
        })
        .collect();
    DcgmResult { status: raw.status, scope, gpu, info, warnings }
}

impl Summary for DcgmDiagOutput {
    fn summary(&self) -> String {
        let mut out = String::new();
        let format = match self.format {
            DcgmFormat::Text => "text",
            DcgmFormat::Json3 => "JSON, DCGM 3.x",
            DcgmFormat::Json4 => "JSON, DCGM 4.x",
        };
        let _ = write!(out, "dcgmi diag ({format})");
        if let Some(version) = &self.dcgm_version {
            let _ = write!(out, ", DCGM {version}");
        }
        if let Some(driver) = &self.driver_version {
            let _ = write!(out, ", driver {driver}");
        }
        if !self.gpu_device_ids.is_empty() {
            let _ = write!(out, ", {} GPUs", self.gpu_device_ids.len());
        }
        let counts = [
            ("pass", self.count(DiagStatus::Pass)),
            ("fail", self.count(DiagStatus::Fail)),
            ("warn", self.count(DiagStatus::Warn)),
            ("skip", self.count(DiagStatus::Skip)),
            ("not run", self.count(DiagStatus::NotRun)),
        ];
        let _ = writeln!(out, ": {} tests: {}", self.tests.len(), super::join_counts(&counts));
        if let Some(error) = &self.runtime_error {
            let _ = writeln!(out, "runtime error: {error}");
        }
        for test in self.tests.iter().filter(|test| matches!(test.status, DiagStatus::Fail | DiagStatus::Warn)) {
            let first = test.results.iter().flat_map(|result| &result.warnings).next();
            let message = first.map(|warning| format!(": {}", warning.message)).unwrap_or_default();
            let _ = writeln!(out, "{} {}{message}", test.status.label(), test.name);
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

    const FAIL: &str = "dcgmi_diag_r3_8xh100_fail_no_fabricmanager.txt";

    #[test]
    fn dcgm_3_3_8_text_fail_without_fabric_manager() {
        let output = parse_text(&read(FAIL)).expect("parses");
        assert_eq!(output.dcgm_version.as_deref(), Some("3.3.8"));
        assert_eq!(output.driver_version.as_deref(), Some("560.35.03"));
        assert_eq!(output.gpu_device_ids, vec!["2330"; 8]);
        let names: Vec<&str> = output.tests.iter().map(|test| test.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Denylist",
                "NVML Library",
                "CUDA Main Library",
                "Permissions and OS Blocks",
                "Persistence Mode",
                "Environment Variables",
                "Page Retirement/Row Remap",
                "Graphics Processes",
                "Inforom",
                "PCIe",
                "GPU Memory",
                "Memory Bandwidth",
                "EUD Test"
            ]
        );
        assert_eq!(output.count(DiagStatus::Pass), 9);
        assert_eq!(output.count(DiagStatus::Fail), 1);
        assert_eq!(output.count(DiagStatus::Skip), 3);
        let memory = &output.tests[10];
        assert_eq!(memory.category.as_deref(), Some("Hardware"));
        assert_eq!(memory.status, DiagStatus::Fail);
        assert_eq!(memory.results[0].scope.as_deref(), Some("All"));
        assert_eq!(memory.line, Some(34));
        let warnings = &memory.results[0].warnings;
        assert_eq!(warnings.len(), 8);
        assert_eq!(warnings[3].gpu, Some(3));
        // Wrapped mid-word at 45 columns; joined exactly, no spaces inserted or lost.
        assert_eq!(
            warnings[0].message,
            "GPU 0 Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. Restart \
             DCGM. Rerun diagnostics. Unable to initialize CUDA library: 'system not yet initialized'. . \
             Please check if a CUDA sample program can be run successfully on this host. Refer to \
             https://github.com/nvidia/cuda-samples"
        );
        let persistence = &output.tests[4];
        assert_eq!(persistence.status, DiagStatus::Pass);
        assert!(persistence.results[0].info[0].starts_with(
            "Persistence mode for GPU 0 is disabled. Enable persistence mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as root.,Persistence mode for GPU 1"
        ));
        assert!(persistence.results[0].info[0].ends_with("GPU 4 is disabled. Enable pers"));
        assert_eq!(output.tests[9].category.as_deref(), Some("Integration"));
        assert_eq!(output.tests[12].category.as_deref(), Some("Stress"));
        assert!(output.summary().contains("fail GPU Memory: GPU 0 Error using CUDA API"), "{}", output.summary());
    }

    #[test]
    fn success_banner_is_not_a_verdict() {
        // Trap: `Successfully ran diagnostic for group.` heads this failing run.
        let text = read(FAIL);
        assert!(text.starts_with("Successfully ran diagnostic for group."));
        assert_eq!(parse_text(&text).expect("parses").count(DiagStatus::Fail), 1);
    }

    #[test]
    fn truncated_table_is_an_error_after_the_last_line() {
        let text = read(FAIL);
        let half = first_lines(&text, 50);
        let error = parse_text(&half).expect_err("is refused");
        assert_eq!(error.line(), Some(51), "{error}");
        assert!(error.to_string().contains("closing border"), "{error}");
    }

    #[test]
    fn row_cut_mid_line_and_unknown_status_name_their_lines() {
        let text = read(FAIL);
        let error =
            parse_text(&replace_line(&text, 34, "| GPU Memory                | Fail - Al")).expect_err("is refused");
        assert_eq!(
            error.to_string(),
            "could not parse line 34: expected a table row `| test | result |`, found `| GPU Memory                | Fail - Al`"
        );
        let garbled =
            replace_line(&text, 32, "| PCIe                      | Sikp - All                                     |");
        assert_eq!(
            parse_text(&garbled).expect_err("is refused").to_string(),
            "could not parse line 32: expected a result (Pass, Fail, Warn or Skip) for test `PCIe`, found `Sikp - All`"
        );
    }

    #[test]
    fn error_instead_of_table_is_a_runtime_error() {
        let output =
            parse_text("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
                .expect("parses");
        assert!(output.runtime_error.expect("present").starts_with("Unable to connect"));
        assert!(output.tests.is_empty());
        assert_eq!(parse_text("garbage\n").expect_err("is refused").line(), Some(2));
    }

    #[test]
    fn dcgm_3_json_variants_of_statuses_ids_and_warnings() {
        // Shape per DCGM's NVVS JsonOutput (3.x): upper-case statuses, gpu_ids strings,
        // warnings as strings, objects or null. Not a capture: no real `-j` output with
        // provenance exists yet (fixtures/SOURCE.md "Not found").
        let document = r#"Successfully ran diagnostic for group.
{
  "DCGM GPU Diagnostic": {
    "test_categories": [
      {"category": "Deployment", "tests": [
        {"name": "Denylist", "results": [{"gpu_ids": "0,1,2,3", "status": "PASS"}]}]},
      {"category": "Hardware", "tests": [
        {"name": "memory", "results": [
          {"gpu_ids": "0", "status": "SKIP", "warnings": ["ECC memory on this card is not currently active."]},
          {"gpu_ids": "1", "status": "Pass", "info": ["Allocated 16583361795 bytes (97.2%)"]},
          {"gpu_id": "2", "status": "Fail",
           "warnings": [{"warning": "GPU 2 has uncorrectable memory errors", "error_id": 55, "error_severity": 2}]}]},
        {"name": "targeted_stress", "results": [{"gpu_ids": "0,1,2,3", "status": "Skip", "warnings": null}]}]}
    ],
    "version": "3.3.1",
    "Driver Version Detected": "545.23.08",
    "GPU Device IDs": ["2330", "2330", "2330", "2330"]
  }
}
"#;
        let output = parse_json(document).expect("parses");
        assert_eq!(output.format, DcgmFormat::Json3);
        assert_eq!(output.dcgm_version.as_deref(), Some("3.3.1"));
        assert_eq!(output.gpu_device_ids.len(), 4);
        assert_eq!(output.tests.len(), 3);
        let memory = &output.tests[1];
        assert_eq!(memory.status, DiagStatus::Fail);
        assert_eq!(memory.results[0].status, DiagStatus::Skip);
        assert_eq!(memory.results[0].gpu, Some(0));
        assert_eq!(memory.results[2].warnings[0].error_severity, Some(2));
        assert_eq!(memory.results[2].warnings[0].gpu, Some(2));
        assert_eq!(output.tests[2].results[0].gpu, None);
        assert_eq!(output.tests[0].results[0].scope.as_deref(), Some("0,1,2,3"));
    }

    #[test]
    fn dcgm_4_json_per_schema_entities_summary_and_metadata() {
        // Shape per DCGM 4.x's published schema (fixtures/reference/dcgm_diag_json_schema_4x.json).
        let document = r#"{
  "DCGM Diagnostic": {
    "test_categories": [
      {"category": "Deployment", "tests": [
        {"name": "software", "results": [
          {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"}],
         "test_summary": {"status": "Pass"}}]},
      {"category": "Hardware", "tests": [
        {"name": "memory", "results": [
          {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
          {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
           "warnings": [{"error_category": 4, "error_id": 95, "error_severity": 3,
                         "warning": "GPU 1 had uncontained memory errors"}]}],
         "test_summary": {"status": "Fail"}},
        {"name": "pcie", "results": [], "test_summary": {"status": "Not Run"}}]}
    ]
  },
  "entity_groups": [
    {"entity_group": "GPU", "entity_group_id": 1,
     "entities": [{"entity_id": 0, "device_id": "2330", "serial_num": "1650"}, {"entity_id": 1, "device_id": "2330"}]}
  ],
  "metadata": {"version": "4.2.3", "Driver Version Detected": "570.133.20"}
}"#;
        let output = parse_json(document).expect("parses");
        assert_eq!(output.format, DcgmFormat::Json4);
        assert_eq!(output.dcgm_version.as_deref(), Some("4.2.3"));
        assert_eq!(output.driver_version.as_deref(), Some("570.133.20"));
        assert_eq!(output.gpu_device_ids, ["2330", "2330"]);
        let memory = &output.tests[1];
        assert_eq!((memory.status, memory.results[1].gpu), (DiagStatus::Fail, Some(1)));
        assert_eq!(memory.results[1].scope.as_deref(), Some("gpu 1"));
        assert_eq!(memory.results[1].warnings[0].error_severity, Some(3));
        assert_eq!(output.tests[2].status, DiagStatus::NotRun);
    }

    #[test]
    fn json_errors_have_lines() {
        let error = parse_json("{\n \"DCGM Diagnostic\": {\"test_categories\": [\n {\"category\": \"X\", \"tests\": [{\"name\": \"a\", \"results\": [{\"status\": \"Maybe\"}]}]}]}}").expect_err("is refused");
        assert_eq!(error.line(), Some(3), "{error}");
        assert!(error.to_string().contains("unknown status `Maybe`"), "{error}");
        let error = parse_json("{\"something\": 1}").expect_err("is refused");
        assert!(error.to_string().contains("`DCGM Diagnostic`"), "{error}");
        let error = parse_json("{\n \"DCGM Diagnostic\": {\"test_categories\": [\n").expect_err("is refused");
        assert_eq!(error.line(), Some(3), "{error}");
    }
}
