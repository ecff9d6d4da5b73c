//! Report: acceptance results rendered for the customer at handover and for CI.
//!
//! Stage: report. Input: [`Results`] (from `toolkit validate`, or a results JSON
//! file). Output: text in one [`Format`]: a self-contained HTML page with inline
//! SVG charts ([`html`]), JUnit XML ([`junit`]), the results JSON itself, or
//! Markdown ([`markdown`]). HTML and Markdown list failures first. No format
//! decides an exit code (that is [`Results::exit_status`]).

pub mod availability;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod rma;
pub mod strip;
pub mod svg;

use thiserror::Error;

use crate::results::{Comparison, Results, SubjectResult, ValidatorResult, Verdict};

pub use crate::results::format_number;

/// The report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One self-contained HTML file: summary, failures with evidence, charts.
    Html,
    /// JUnit XML for CI: a testsuite per validator, a testcase per subject.
    Junit,
    /// The results document, pretty-printed.
    Json,
    /// Markdown: identity, summary table, failures.
    Markdown,
}

/// A report that could not be produced.
#[derive(Debug, Error)]
pub enum ReportError {
    /// A report template failed (a toolkit bug, not bad input).
    #[error("report template `{template}`: {source}")]
    Template {
        /// The template.
        template: String,
        /// The minijinja error.
        #[source]
        source: minijinja::Error,
    },
    /// The results could not be written as JSON (a non-finite number).
    #[error("results as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Renders `results` as `format`.
///
/// # Errors
/// [`ReportError`]; with results that passed [`Results::problems`] only a toolkit bug.
pub fn render(results: &Results, format: Format) -> Result<String, ReportError> {
    render_with(results, None, format)
}

/// [`render`], with an availability section (HTML and Markdown; JUnit and the results
/// JSON have no place for it).
///
/// # Errors
/// As [`render`].
pub fn render_with(
    results: &Results,
    availability: Option<&crate::health::availability::Availability>,
    format: Format,
) -> Result<String, ReportError> {
    match format {
        Format::Html => html::render_with(results, availability.map(availability::view)),
        Format::Junit => Ok(junit::render(results)),
        Format::Json => Ok(results.to_json()?),
        Format::Markdown => {
            let mut text = markdown::render(results);
            if let Some(availability) = availability {
                text.push('\n');
                text.push_str(&availability::markdown(availability));
            }
            Ok(text)
        }
    }
}

/// Position in [`Verdict::BY_SEVERITY`]: sorting by it puts failures first.
fn severity_order(verdict: Verdict) -> usize {
    Verdict::BY_SEVERITY.iter().position(|candidate| *candidate == verdict).unwrap_or(usize::MAX)
}

/// Validators worst first (errors, failures, warnings, passes, skips), otherwise
/// in the order they ran.
pub(crate) fn validators_by_severity(results: &Results) -> Vec<&ValidatorResult> {
    let mut validators: Vec<&ValidatorResult> = results.validators.iter().collect();
    validators.sort_by_key(|validator| severity_order(validator.verdict()));
    validators
}

/// A validator's subjects worst first, otherwise in recorded order.
pub(crate) fn subjects_by_severity(validator: &ValidatorResult) -> Vec<&SubjectResult> {
    let mut subjects: Vec<&SubjectResult> = validator.subjects.iter().collect();
    subjects.sort_by_key(|subject| severity_order(subject.verdict));
    subjects
}

/// Every subject with one of `verdicts`, validators and subjects worst first.
pub(crate) fn findings<'a>(
    results: &'a Results,
    verdicts: &[Verdict],
) -> Vec<(&'a ValidatorResult, &'a SubjectResult)> {
    validators_by_severity(results)
        .into_iter()
        .flat_map(|validator| {
            subjects_by_severity(validator)
                .into_iter()
                .filter(|subject| verdicts.contains(&subject.verdict))
                .map(move |subject| (validator, subject))
        })
        .collect()
}

/// `16 GiB`, `4 KiB`, `8 B`: binary units for sizes that are powers of two.
#[must_use]
pub fn bytes_label(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{} {}", format_number(value), UNITS[unit])
}

/// `≥ 320 GB/s`: a threshold as people read it.
#[must_use]
pub fn threshold_text(comparison: Comparison, value: f64, unit: &str) -> String {
    let sign = match comparison {
        Comparison::AtLeast => "≥",
        Comparison::AtMost => "≤",
        Comparison::Equal => "=",
    };
    format!("{sign} {} {unit}", format_number(value)).trim_end().to_owned()
}

/// `1 h 02 min`, `4 min 05 s`, `60.01 s`.
#[must_use]
pub fn duration_text(seconds: f64) -> String {
    if seconds < 60.0 {
        return format!("{} s", format_number(seconds));
    }
    let whole = seconds.round() as u64;
    let (hours, minutes, rest) = (whole / 3600, whole % 3600 / 60, whole % 60);
    if hours > 0 { format!("{hours} h {minutes:02} min") } else { format!("{minutes} min {rest:02} s") }
}

/// Tool output made safe to show: terminal colour sequences removed, other
/// control characters (which XML cannot hold at all) shown as `�`.
#[must_use]
pub fn clean_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(found) = chars.next() {
        match found {
            '\u{1b}' => {
                // CSI sequences (`ESC [ … final byte`), as tools print for colours.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for next in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&next) {
                            break;
                        }
                    }
                }
            }
            '\t' | '\n' => out.push(found),
            '\r' => {}
            control if control.is_control() => out.push('\u{fffd}'),
            other => out.push(other),
        }
    }
    out
}

/// The overall verdict as a headline word: `PASSED` or `FAILED`.
#[must_use]
pub fn verdict_word(results: &Results) -> &'static str {
    match results.verdict() {
        crate::results::Overall::Passed => "PASSED",
        crate::results::Overall::Failed => "FAILED",
    }
}

/// One sentence of counts: `6 validators: 5 passed, 1 skipped; 18 subjects: …`.
#[must_use]
pub fn counts_sentence(results: &Results) -> String {
    let summary = Results::summarize(&results.validators);
    let part = |noun: &str, counts: crate::results::Counts| {
        let listed: Vec<String> = Verdict::BY_SEVERITY
            .iter()
            .filter(|verdict| counts.get(**verdict) > 0)
            .map(|verdict| format!("{} {}", counts.get(*verdict), verdict.as_str()))
            .collect();
        format!("{} {noun}: {}", counts.total(), if listed.is_empty() { "none".to_owned() } else { listed.join(", ") })
    };
    format!("{}; {}", part("validators", summary.validators), part("subjects", summary.subjects))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(bytes_label(8.0), "8 B");
        assert_eq!(bytes_label(1024.0), "1 KiB");
        assert_eq!(bytes_label(17_179_869_184.0), "16 GiB");
        assert_eq!(bytes_label(1536.0), "1.5 KiB");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_text(60.006), "1 min 00 s");
        assert_eq!(duration_text(59.5), "59.5 s");
        assert_eq!(duration_text(3725.0), "1 h 02 min");
    }

    #[test]
    fn control_characters_are_removed_or_marked() {
        assert_eq!(clean_text("\u{1b}[31mFAIL\u{1b}[0m ok\r\n"), "FAIL ok\n");
        assert_eq!(clean_text("a\u{0}b\u{7}c\td"), "a\u{fffd}b\u{fffd}c\td");
    }

    #[test]
    fn thresholds_read_with_signs() {
        assert_eq!(threshold_text(Comparison::AtLeast, 320.0, "GB/s"), "≥ 320 GB/s");
        assert_eq!(threshold_text(Comparison::Equal, 16.0, ""), "= 16");
    }
}
