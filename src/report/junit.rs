//! JUnit XML for CI systems (GitLab, Jenkins, GitHub test reporters).
//!
//! Stage: report. Input: [`Results`]. Output: XML text. One `<testsuite>` per
//! validator, one `<testcase>` per subject: `failed` → `<failure>` typed with the
//! validator's failing condition, `error` → `<error type="could-not-check">` (could
//! not run or parse: not a hardware verdict), `skipped` → `<skipped>`,
//! `warning` passes with the warning in `<system-out>`. Measurements go to
//! `<system-out>` so a CI page shows the numbers. Validators keep run order
//! (CI tools sort on their own). Text is cleaned of control characters, which
//! XML 1.0 cannot carry even escaped, then escaped.

use std::fmt::Write as _;

use crate::report::{clean_text, format_number, threshold_text};
use crate::results::{Results, SubjectResult, ValidatorResult, Verdict};

/// Renders the JUnit XML document.
#[must_use]
pub fn render(results: &Results) -> String {
    let run = &results.run;
    let summary = Results::summarize(&results.validators);
    let subjects = summary.subjects;
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let elapsed = run.finished.duration_since(run.started).as_secs_f64();
    let _ = writeln!(
        out,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\" timestamp=\"{}\">",
        attribute(&format!("acceptance: {}", run.cluster)),
        subjects.total(),
        subjects.failed,
        subjects.error,
        subjects.skipped,
        seconds(elapsed),
        timestamp(results),
    );
    for validator in &results.validators {
        suite(&mut out, results, validator);
    }
    out.push_str("</testsuites>\n");
    out
}

fn suite(out: &mut String, results: &Results, validator: &ValidatorResult) {
    let counts = validator.counts();
    let known: Vec<f64> = validator.subjects.iter().filter_map(|subject| subject.duration_seconds).collect();
    // A validator's own wall time when measured; else the sum of its subjects'.
    let time = validator.duration_seconds.or_else(|| (!known.is_empty()).then(|| known.iter().sum()));
    let _ = write!(
        out,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\"",
        attribute(&validator.id),
        counts.total(),
        counts.failed,
        counts.error,
        counts.skipped,
    );
    if let Some(time) = time {
        let _ = write!(out, " time=\"{}\"", seconds(time));
    }
    let _ = writeln!(out, " timestamp=\"{}\">", timestamp(results));
    out.push_str("    <properties>\n");
    let run = &results.run;
    let mut properties = vec![
        ("title", validator.title.clone()),
        ("scope", validator.scope.as_str().to_owned()),
        ("failure", validator.failure.clone()),
        ("cluster", run.cluster.clone()),
        ("blueprint_sha256", run.blueprint.sha256.clone()),
    ];
    if let Some(inventory) = &run.inventory {
        properties.push(("inventory_sha256", inventory.sha256.clone()));
    }
    properties.push(("toolkit_version", run.toolkit_version.clone()));
    for (name, value) in properties {
        let _ = writeln!(out, "      <property name=\"{name}\" value=\"{}\"/>", attribute(&value));
    }
    out.push_str("    </properties>\n");
    for subject in &validator.subjects {
        case(out, validator, subject);
    }
    out.push_str("  </testsuite>\n");
}

fn case(out: &mut String, validator: &ValidatorResult, subject: &SubjectResult) {
    let mut body = String::new();
    let reason = subject.reason.clone().unwrap_or_default();
    match subject.verdict {
        Verdict::Failed | Verdict::Error => {
            // An error is not the validator's failing condition: the check could not
            // say either way (CHS's FAIL_PARSE_RESULT, AzNHC's NHCNA).
            let (element, kind) = if subject.verdict == Verdict::Failed {
                ("failure", validator.failure.as_str())
            } else {
                ("error", "could-not-check")
            };
            let _ = writeln!(
                body,
                "      <{element} message=\"{}\" type=\"{}\">{}</{element}>",
                attribute(&reason),
                attribute(kind),
                text(&failure_body(validator, subject)),
            );
        }
        Verdict::Skipped => {
            let _ = writeln!(body, "      <skipped message=\"{}\"/>", attribute(&reason));
        }
        Verdict::Passed | Verdict::Warning => {}
    }
    let mut system_out = measurement_lines(subject);
    if subject.verdict == Verdict::Warning {
        system_out.insert(0, format!("warning: {reason}"));
    }
    if !system_out.is_empty() {
        let _ = writeln!(body, "      <system-out>{}</system-out>", text(&system_out.join("\n")));
    }
    let _ = write!(
        out,
        "    <testcase name=\"{}\" classname=\"{}\"",
        attribute(&subject.subject),
        attribute(&validator.id)
    );
    if let Some(time) = subject.duration_seconds {
        let _ = write!(out, " time=\"{}\"", seconds(time));
    }
    if body.is_empty() {
        out.push_str("/>\n");
    } else {
        out.push_str(">\n");
        out.push_str(&body);
        out.push_str("    </testcase>\n");
    }
}

/// One line per measurement: `busbw at 16 GiB: 469.1 GB/s (≥ 320 GB/s, model: …) pass`.
fn measurement_lines(subject: &SubjectResult) -> Vec<String> {
    subject
        .measurements
        .iter()
        .map(|measurement| {
            let value = format!("{} {}", format_number(measurement.value), measurement.unit);
            match (&measurement.threshold, measurement.passes()) {
                (Some(threshold), Some(passes)) => format!(
                    "{}: {} ({}, {}) {}",
                    measurement.name,
                    value.trim_end(),
                    threshold_text(threshold.comparison, threshold.value, &measurement.unit),
                    threshold.source,
                    if passes { "pass" } else { "FAIL" }
                ),
                _ => format!("{}: {}", measurement.name, value.trim_end()),
            }
        })
        .collect()
}

/// The body of `<failure>`/`<error>`: reason, numbers, fix, command and output tail.
fn failure_body(validator: &ValidatorResult, subject: &SubjectResult) -> String {
    let mut body = Vec::new();
    if let Some(reason) = &subject.reason {
        body.push(reason.clone());
    }
    body.extend(measurement_lines(subject));
    body.push(format!("fix: {}", validator.docs.fix));
    if let Some(evidence) = &subject.evidence {
        match evidence.exit_code {
            Some(code) => body.push(format!("command (exit code {code}): {}", evidence.command)),
            None => body.push(format!("command: {}", evidence.command)),
        }
        if evidence.omitted_lines > 0 {
            body.push(format!("… {} earlier lines omitted", evidence.omitted_lines));
        }
        body.extend(evidence.output_tail.iter().cloned());
    }
    body.join("\n")
}

/// Seconds with millisecond precision, as JUnit readers expect.
fn seconds(value: f64) -> String {
    format!("{value:.3}")
}

/// `2026-11-20T10:00:00`: the JUnit schema's timestamp has no zone; it is UTC.
fn timestamp(results: &Results) -> String {
    results.run.started.strftime("%Y-%m-%dT%H:%M:%S").to_string()
}

/// Escapes element text.
fn text(value: &str) -> String {
    escape(value, false)
}

/// Escapes an attribute value; line breaks are kept as character references
/// (a raw newline would be read back as a space).
fn attribute(value: &str) -> String {
    escape(value, true)
}

fn escape(value: &str, in_attribute: bool) -> String {
    let cleaned = clean_text(value);
    let mut out = String::with_capacity(cleaned.len());
    for found in cleaned.chars() {
        match found {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if in_attribute => out.push_str("&quot;"),
            '\'' if in_attribute => out.push_str("&apos;"),
            '\n' if in_attribute => out.push_str("&#10;"),
            '\t' if in_attribute => out.push_str("&#9;"),
            // XML 1.0 excludes these two non-characters even as references.
            '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_quotes_and_control_characters() {
        assert_eq!(text("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
        assert_eq!(attribute("say \"hi\" 'there'\nnext"), "say &quot;hi&quot; &apos;there&apos;&#10;next");
        assert_eq!(text("bell\u{7} esc\u{1b}[1mbold"), "bell\u{fffd} escbold");
    }
}
