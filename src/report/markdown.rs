//! Markdown report: for a pull request, a ticket or a chat message.
//!
//! Stage: report. Input: [`Results`]. Output: CommonMark/GFM text: identity,
//! the verdict, a summary table of validators (worst first), then every failure
//! and error with its numbers, fix and evidence, then warnings and skips. Values
//! are escaped so a node name cannot open a link, a table cell or raw HTML.

use std::fmt::Write as _;

use crate::report::{
    clean_text, counts_sentence, duration_text, findings, format_number, threshold_text, validators_by_severity,
    verdict_word,
};
use crate::results::{Results, SubjectResult, ValidatorResult, Verdict};

/// Renders the Markdown report.
#[must_use]
pub fn render(results: &Results) -> String {
    let run = &results.run;
    let mut out = String::new();
    let _ = writeln!(out, "# Acceptance report: {}\n", inline(&run.cluster));
    out.push_str("| | |\n|---|---|\n");
    let _ = writeln!(out, "| Cluster | {} |", inline(&run.cluster));
    let _ = writeln!(out, "| Blueprint | {} |", file(&run.blueprint.path, &run.blueprint.sha256));
    let inventory =
        run.inventory.as_ref().map_or_else(|| "none".to_owned(), |inventory| file(&inventory.path, &inventory.sha256));
    let _ = writeln!(out, "| Inventory | {inventory} |");
    let _ = writeln!(out, "| Toolkit | {} |", inline(&run.toolkit_version));
    let elapsed = run.finished.duration_since(run.started).as_secs_f64();
    let _ = writeln!(out, "| Run | {} → {} ({}) |", run.started, run.finished, duration_text(elapsed));
    let _ = writeln!(out, "\n**Verdict: {}** — {}\n", verdict_word(results), counts_sentence(results));

    heading(&mut out, "## Summary");
    out.push_str("| Verdict | Validator | Scope | Passed | Failed | Error | Warning | Skipped |\n");
    out.push_str("|---|---|---|--:|--:|--:|--:|--:|\n");
    for validator in validators_by_severity(results) {
        let counts = validator.counts();
        let _ = writeln!(
            out,
            "| {} | {} (`{}`) | {} | {} | {} | {} | {} | {} |",
            verdict_label(validator.verdict()),
            inline(&validator.title),
            code(&validator.id),
            validator.scope.as_str(),
            counts.passed,
            counts.failed,
            counts.error,
            counts.warning,
            counts.skipped,
        );
    }

    let failures = findings(results, &[Verdict::Error, Verdict::Failed]);
    heading(&mut out, &format!("## Failures ({})", failures.len()));
    if failures.is_empty() {
        out.push_str("No failures: every subject passed its thresholds or was skipped with a reason.\n");
    }
    for (validator, subject) in failures {
        finding(&mut out, validator, subject);
    }

    let warnings = findings(results, &[Verdict::Warning]);
    if !warnings.is_empty() {
        heading(&mut out, &format!("## Warnings ({})", warnings.len()));
        for (validator, subject) in warnings {
            finding(&mut out, validator, subject);
        }
    }

    history(&mut out, results);

    let skipped = findings(results, &[Verdict::Skipped]);
    if !skipped.is_empty() {
        heading(&mut out, &format!("## Skipped ({})", skipped.len()));
        for (validator, subject) in skipped {
            let _ = writeln!(
                out,
                "- `{}` {}: {}",
                code(&validator.id),
                inline(&subject.subject),
                inline(subject.reason.as_deref().unwrap_or_default())
            );
        }
    }
    out
}

/// The health history (timelines) as one line per node that failed or went silent:
/// which checks, in how many buckets, in how many it reported nothing, and the nodes
/// that never failed counted.
fn history(out: &mut String, results: &Results) {
    let timelines = results.validators.iter().flat_map(|validator| &validator.subjects).flat_map(|s| &s.timelines);
    for timeline in timelines {
        heading(out, &format!("## History: nodes failing {}", inline(&timeline.name)));
        for row in &timeline.rows {
            let failing: Vec<&Vec<String>> = row.failing.iter().filter(|checks| !checks.is_empty()).collect();
            let mut checks: Vec<&str> = failing.iter().flat_map(|checks| checks.iter().map(String::as_str)).collect();
            checks.sort_unstable();
            checks.dedup();
            let buckets = timeline.times.len();
            let mut parts = Vec::new();
            if !failing.is_empty() {
                parts.push(format!("{} in {} of {buckets} buckets", inline(&checks.join(", ")), failing.len()));
            }
            let silent = row.silent.iter().filter(|quiet| **quiet).count();
            if silent > 0 {
                parts.push(format!("no data in {silent} of {buckets} buckets"));
            }
            let _ = writeln!(out, "- {}: {}", inline(&row.name), parts.join("; "));
        }
        let _ = writeln!(out, "- {} nodes never failed\n", timeline.passing.len());
    }
}

fn finding(out: &mut String, validator: &ValidatorResult, subject: &SubjectResult) {
    heading(
        out,
        &format!(
            "### {} {} — {} (`{}`)",
            verdict_label(subject.verdict),
            inline(&subject.subject),
            inline(&validator.title),
            code(&validator.id),
        ),
    );
    if subject.verdict == Verdict::Error {
        out.push_str("Could not check: no verdict on the hardware.\n");
    } else {
        let _ = writeln!(out, "Fails as `{}`.", code(&validator.failure));
    }
    if let Some(reason) = &subject.reason {
        let _ = writeln!(out, "**{}**", inline(reason));
    }
    out.push('\n');
    if !subject.measurements.is_empty() {
        out.push_str("| Measurement | Value | Threshold | Source | Result |\n|---|--:|--:|---|---|\n");
        for measurement in &subject.measurements {
            let (threshold, source) = measurement.threshold.as_ref().map_or_else(
                || (String::new(), String::new()),
                |threshold| {
                    (
                        threshold_text(threshold.comparison, threshold.value, &measurement.unit),
                        threshold.source.to_string(),
                    )
                },
            );
            let result = match measurement.passes() {
                Some(true) => "pass",
                Some(false) => "**FAIL**",
                None => "",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {result} |",
                inline(&measurement.name),
                inline(format!("{} {}", format_number(measurement.value), measurement.unit).trim_end()),
                inline(&threshold),
                inline(&source),
            );
        }
        out.push('\n');
    }
    let _ = writeln!(out, "How to fix: {}\n", inline(&validator.docs.fix));
    if let Some(evidence) = &subject.evidence {
        let exit = evidence.exit_code.map(|code| format!(" (exit code {code})")).unwrap_or_default();
        let _ = writeln!(out, "Command{exit}:\n");
        fenced(out, &evidence.command);
        if !evidence.output_tail.is_empty() {
            let omitted = if evidence.omitted_lines > 0 {
                format!(" ({} earlier lines omitted)", evidence.omitted_lines)
            } else {
                String::new()
            };
            let _ = writeln!(out, "Last {} lines of output{omitted}:\n", evidence.output_tail.len());
            fenced(out, &evidence.output_tail.join("\n"));
        }
    }
}

/// A fenced code block whose fence is longer than any backtick run inside.
fn fenced(out: &mut String, body: &str) {
    let body = clean_text(body);
    let longest = body.split(|found| found != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(out, "{fence}text\n{body}\n{fence}\n");
}

fn verdict_label(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Passed => "passed",
        Verdict::Failed => "**FAILED**",
        Verdict::Warning => "warning",
        Verdict::Skipped => "skipped",
        Verdict::Error => "**ERROR**",
    }
}

fn file(path: &str, sha256: &str) -> String {
    format!("`{}` sha256 `{}`", code(path), code(sha256))
}

/// Text inside a code span: backticks and pipes would end it or the table cell.
fn code(value: &str) -> String {
    clean_text(value).replace('`', "'").replace('|', "\\|").replace('\n', " ")
}

/// Inline text: one line, with Markdown and HTML syntax characters escaped.
/// Balanced backtick code spans are kept (validator docs use them for commands);
/// their content renders literally, so only the table pipe needs care there.
fn inline(value: &str) -> String {
    let cleaned = clean_text(value).replace(['\n', '\t'], " ");
    let balanced = cleaned.matches('`').count().is_multiple_of(2);
    let mut out = String::with_capacity(cleaned.len());
    for (index, part) in cleaned.split('`').enumerate() {
        if index > 0 {
            out.push_str(if balanced { "`" } else { "\\`" });
        }
        if balanced && index % 2 == 1 {
            out.push_str(&part.replace('|', "\\|"));
            continue;
        }
        for found in part.chars() {
            if matches!(found, '\\' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '~' | '&' | '!') {
                out.push('\\');
            }
            out.push(found);
        }
    }
    out
}

/// Starts a section: a blank line before the heading, whatever came before.
fn heading(out: &mut String, text: &str) {
    while !out.ends_with("\n\n") {
        out.push('\n');
    }
    out.push_str(text);
    out.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_text_cannot_open_html_links_or_cells() {
        assert_eq!(inline("<script>alert(1)</script>"), "\\<script\\>alert(1)\\</script\\>");
        assert_eq!(inline("[x](http://e) | *b*\nnext"), "\\[x\\](http://e) \\| \\*b\\* next");
        assert_eq!(inline("run `a|b <c>` then <d>"), "run `a\\|b <c>` then \\<d\\>");
        assert_eq!(inline("odd ` tick <e>"), "odd \\` tick \\<e\\>");
    }

    #[test]
    fn fences_outgrow_backticks_inside() {
        let mut out = String::new();
        fenced(&mut out, "a ```` b");
        assert!(out.starts_with("`````text\n"), "{out}");
    }
}
