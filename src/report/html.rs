//! The HTML handover report: one self-contained file (inline CSS and SVG, no
//! script, no external reference) that reads on screen and on paper.
//!
//! Stage: report. Input: [`Results`]. Output: HTML text. This module prepares a
//! view (numbers formatted, failures first, chart geometry from [`svg`]); the
//! templates under `templates/report/` lay it out. minijinja escapes every
//! value for HTML (auto-escape on, undefined is an error), so a node named
//! `<script>` prints as text: escaping is the default, not a call to remember.

use std::collections::HashSet;

use indexmap::IndexMap;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use crate::report::strip::{self, StripChart};
use crate::report::svg::{self, BarChart, LineChart};
use crate::report::{
    ReportError, clean_text, counts_sentence, duration_text, findings, format_number, subjects_by_severity,
    threshold_text, validators_by_severity, verdict_word,
};
use crate::results::{
    AxisScale, Evidence, Measurement, ProvenanceKind, Results, Series, SubjectResult, ValidatorResult, Verdict,
};

/// The report templates, embedded: `(name, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("report/report.html.j2", include_str!("../../templates/report/report.html.j2")),
    ("report/charts.html.j2", include_str!("../../templates/report/charts.html.j2")),
    ("report/style.css", include_str!("../../templates/report/style.css")),
];

const PAGE: &str = "report/report.html.j2";

/// A run of text, `code` when it was a backtick span in the source text.
#[derive(Serialize)]
struct Segment {
    text: String,
    code: bool,
}

/// Text with its balanced backtick spans as code (validator docs and reasons
/// name commands that way); unbalanced backticks stay literal.
fn rich(text: &str) -> Vec<Segment> {
    let text = clean_text(text);
    if !text.matches('`').count().is_multiple_of(2) {
        return vec![Segment { text, code: false }];
    }
    text.split('`')
        .enumerate()
        .filter(|(_, part)| !part.is_empty())
        .map(|(index, part)| Segment { text: part.to_owned(), code: index % 2 == 1 })
        .collect()
}

#[derive(Serialize)]
struct Page {
    cluster: String,
    started: String,
    identity: Vec<(&'static str, String)>,
    verdict: &'static str,
    verdict_word: &'static str,
    headline: String,
    tiles: Vec<Tile>,
    overview: Vec<OverviewRow>,
    failures: Vec<Finding>,
    warnings: Vec<Finding>,
    validators: Vec<ValidatorView>,
    availability: Option<crate::report::availability::View>,
    generated_by: String,
}

#[derive(Serialize)]
struct Tile {
    verdict: &'static str,
    validators: usize,
    subjects: usize,
}

#[derive(Serialize)]
struct OverviewRow {
    anchor: String,
    id: String,
    title: String,
    scope: &'static str,
    verdict: &'static str,
    counts: String,
}

#[derive(Serialize)]
struct Finding {
    anchor: String,
    validator: String,
    title: String,
    failure: String,
    subject: String,
    verdict: &'static str,
    reason: Vec<Segment>,
    measurements: Vec<MeasurementRow>,
    fix: Vec<Segment>,
    evidence: Option<EvidenceView>,
}

#[derive(Serialize)]
struct MeasurementRow {
    name: String,
    value: String,
    threshold: String,
    source: Vec<Segment>,
    result: &'static str,
}

#[derive(Serialize)]
struct EvidenceView {
    command: String,
    exit_code: Option<i32>,
    omitted: usize,
    lines: usize,
    text: String,
}

#[derive(Serialize)]
struct ValidatorView {
    anchor: String,
    id: String,
    title: String,
    failure: String,
    scope: &'static str,
    verdict: &'static str,
    counts: String,
    duration: Option<String>,
    what: Vec<Segment>,
    why: Vec<Segment>,
    fix: Vec<Segment>,
    line_charts: Vec<LineChart>,
    bar_charts: Vec<BarChart>,
    strip_charts: Vec<StripChart>,
    subjects: Vec<SubjectRow>,
}

#[derive(Serialize)]
struct SubjectRow {
    subject: String,
    verdict: &'static str,
    reason: Vec<Segment>,
    duration: Option<String>,
    measurements: Vec<MeasurementRow>,
}

/// Renders the page.
///
/// # Errors
/// [`ReportError::Template`]: a template bug.
pub fn render(results: &Results) -> Result<String, ReportError> {
    render_with(results, None)
}

/// [`render`], with the availability section when given.
///
/// # Errors
/// As [`render`].
pub fn render_with(
    results: &Results,
    availability: Option<crate::report::availability::View>,
) -> Result<String, ReportError> {
    let env = environment()?;
    let template =
        env.get_template(PAGE).map_err(|source| ReportError::Template { template: PAGE.to_owned(), source })?;
    let mut page = page(results);
    page.availability = availability;
    template
        .render(minijinja::value::Serde(page))
        .map_err(|source| ReportError::Template { template: PAGE.to_owned(), source })
}

fn environment() -> Result<Environment<'static>, ReportError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Every template is HTML, whatever its name ends with (`.j2`, `.css`).
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    for (name, text) in TEMPLATES {
        env.add_template(name, text)
            .map_err(|source| ReportError::Template { template: (*name).to_owned(), source })?;
    }
    Ok(env)
}

fn page(results: &Results) -> Page {
    let run = &results.run;
    let mut identity = vec![
        ("Cluster", run.cluster.clone()),
        ("Blueprint", format!("{}  sha256:{}", run.blueprint.path, run.blueprint.sha256)),
    ];
    identity.push((
        "Inventory",
        run.inventory
            .as_ref()
            .map_or_else(|| "none".to_owned(), |inventory| format!("{}  sha256:{}", inventory.path, inventory.sha256)),
    ));
    identity.push(("Toolkit", run.toolkit_version.clone()));
    identity.push(("Started", run.started.to_string()));
    identity.push(("Finished", run.finished.to_string()));
    let elapsed = run.finished.duration_since(run.started).as_secs_f64();
    identity.push(("Duration", duration_text(elapsed)));

    let summary = Results::summarize(&results.validators);
    let tiles = Verdict::BY_SEVERITY
        .iter()
        .map(|verdict| Tile {
            verdict: verdict.as_str(),
            validators: summary.validators.get(*verdict),
            subjects: summary.subjects.get(*verdict),
        })
        .collect();
    let anchors: IndexMap<&str, String> = results
        .validators
        .iter()
        .enumerate()
        .map(|(index, validator)| (validator.id.as_str(), format!("validator-{index}")))
        .collect();
    let anchor = |validator: &ValidatorResult| anchors.get(validator.id.as_str()).cloned().unwrap_or_default();
    let ordered = validators_by_severity(results);
    let overview = ordered
        .iter()
        .map(|validator| OverviewRow {
            anchor: anchor(validator),
            id: validator.id.clone(),
            title: validator.title.clone(),
            scope: validator.scope.as_str(),
            verdict: validator.verdict().as_str(),
            counts: validator_counts(validator),
        })
        .collect();
    let finding = |(validator, subject): (&ValidatorResult, &SubjectResult)| Finding {
        anchor: anchor(validator),
        validator: validator.id.clone(),
        title: validator.title.clone(),
        // An error is no verdict on the hardware, so it is not filed under the failing condition.
        failure: if subject.verdict == Verdict::Error {
            "could not check".to_owned()
        } else {
            validator.failure.clone()
        },
        subject: subject.subject.clone(),
        verdict: subject.verdict.as_str(),
        reason: rich(subject.reason.as_deref().unwrap_or_default()),
        measurements: subject.measurements.iter().map(measurement_row).collect(),
        fix: rich(&validator.docs.fix),
        evidence: subject.evidence.as_ref().map(evidence_view),
    };
    let failures = findings(results, &[Verdict::Error, Verdict::Failed]).into_iter().map(finding).collect();
    let warnings = findings(results, &[Verdict::Warning]).into_iter().map(finding).collect();
    let validators = ordered.iter().map(|validator| validator_view(validator, anchor(validator))).collect();
    Page {
        cluster: run.cluster.clone(),
        started: run.started.to_string(),
        identity,
        verdict: summary.verdict.as_str(),
        verdict_word: verdict_word(results),
        headline: counts_sentence(results),
        tiles,
        overview,
        failures,
        warnings,
        validators,
        availability: None,
        generated_by: format!("toolkit {}", env!("CARGO_PKG_VERSION")),
    }
}

/// `3 passed · 1 failed`, worst first.
fn validator_counts(validator: &ValidatorResult) -> String {
    let counts = validator.counts();
    Verdict::BY_SEVERITY
        .iter()
        .filter(|verdict| counts.get(**verdict) > 0)
        .map(|verdict| format!("{} {}", counts.get(*verdict), verdict.as_str()))
        .collect::<Vec<_>>()
        .join(" · ")
}

fn measurement_row(measurement: &Measurement) -> MeasurementRow {
    let (threshold, source) = measurement.threshold.as_ref().map_or_else(
        || (String::new(), String::new()),
        |threshold| {
            (threshold_text(threshold.comparison, threshold.value, &measurement.unit), threshold.source.to_string())
        },
    );
    MeasurementRow {
        name: measurement.name.clone(),
        value: format!("{} {}", format_number(measurement.value), measurement.unit).trim_end().to_owned(),
        threshold,
        source: rich(&source),
        result: match measurement.passes() {
            Some(true) => "pass",
            Some(false) => "fail",
            None => "info",
        },
    }
}

fn evidence_view(evidence: &Evidence) -> EvidenceView {
    EvidenceView {
        command: clean_text(&evidence.command),
        exit_code: evidence.exit_code,
        omitted: evidence.omitted_lines,
        lines: evidence.output_tail.len(),
        text: clean_text(&evidence.output_tail.join("\n")),
    }
}

fn validator_view(validator: &ValidatorResult, anchor: String) -> ValidatorView {
    ValidatorView {
        anchor,
        id: validator.id.clone(),
        title: validator.title.clone(),
        failure: validator.failure.clone(),
        scope: validator.scope.as_str(),
        verdict: validator.verdict().as_str(),
        counts: validator_counts(validator),
        duration: validator.duration_seconds.map(duration_text),
        what: rich(&validator.docs.what),
        why: rich(&validator.docs.why),
        fix: rich(&validator.docs.fix),
        line_charts: line_charts(validator),
        bar_charts: bar_charts(validator),
        strip_charts: validator
            .subjects
            .iter()
            .flat_map(|subject| &subject.timelines)
            .filter_map(strip::strip_chart)
            .collect(),
        subjects: subjects_by_severity(validator)
            .into_iter()
            .map(|subject| SubjectRow {
                subject: subject.subject.clone(),
                verdict: subject.verdict.as_str(),
                reason: rich(subject.reason.as_deref().unwrap_or_default()),
                duration: subject.duration_seconds.map(duration_text),
                measurements: subject.measurements.iter().map(measurement_row).collect(),
            })
            .collect(),
    }
}

/// Series that share axes are drawn together, one line per subject and series;
/// thresholds in the y unit of those subjects become rules.
fn line_charts(validator: &ValidatorResult) -> Vec<LineChart> {
    type Axes<'a> = (&'a str, &'a str, AxisScale, &'a str, &'a str);
    type Group<'a> = (Vec<(String, &'a Series)>, Vec<(svg::Threshold, f64)>);
    let mut groups: IndexMap<Axes<'_>, Group<'_>> = IndexMap::new();
    for subject in &validator.subjects {
        for series in &subject.series {
            let key = (
                series.x_label.as_str(),
                series.x_unit.as_str(),
                series.x_scale,
                series.y_label.as_str(),
                series.y_unit.as_str(),
            );
            let (curves, rules) = groups.entry(key).or_default();
            curves.push((format!("{} — {}", subject.subject, series.name), series));
            for measurement in subject.measurements.iter().filter(|measurement| measurement.unit == series.y_unit) {
                if let Some(threshold) = &measurement.threshold {
                    let entry = svg::Threshold {
                        label: threshold_text(threshold.comparison, threshold.value, &measurement.unit),
                        caption: format!("{}; {}", measurement.name, threshold.source),
                    };
                    if !rules.iter().any(|(existing, _)| *existing == entry) {
                        rules.push((entry, threshold.value));
                    }
                }
            }
        }
    }
    groups
        .into_iter()
        .filter_map(|((x_label, _, _, y_label, _), (curves, rules))| {
            svg::line_chart(&format!("{y_label} by {x_label}"), &curves, &rules)
        })
        .collect()
}

/// A bar chart for every measurement that two or more subjects share (same
/// name and unit): per-node bandwidth with its threshold, and so on. A measurement
/// that is another's limit (`of:`, cables planned for cables verified) is drawn in
/// that one's chart, as its threshold marks, not as a chart of its own.
fn bar_charts(validator: &ValidatorResult) -> Vec<BarChart> {
    let limits: HashSet<&str> = validator
        .subjects
        .iter()
        .flat_map(|subject| &subject.measurements)
        .filter_map(|measurement| measurement.threshold.as_ref())
        .filter(|threshold| threshold.source.kind == ProvenanceKind::Measurement)
        .map(|threshold| threshold.source.detail.as_str())
        .collect();
    let mut by_name: IndexMap<(&str, &str), Vec<(&str, &Measurement)>> = IndexMap::new();
    for subject in &validator.subjects {
        for measurement in subject.measurements.iter().filter(|m| !limits.contains(m.name.as_str())) {
            by_name
                .entry((measurement.name.as_str(), measurement.unit.as_str()))
                .or_default()
                .push((subject.subject.as_str(), measurement));
        }
    }
    by_name
        .into_iter()
        .filter(|(_, bars)| bars.len() >= 2)
        .filter_map(|((name, _), bars)| svg::bar_chart(&format!("{name} per {}", validator.scope.as_str()), &bars))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the cabling validator records per switch: miswired 0, planned, and
    /// verified with planned as its limit.
    fn cabling(switches: &[(&str, f64, f64)]) -> ValidatorResult {
        let subjects: Vec<serde_json::Value> = switches
            .iter()
            .map(|(name, planned, verified)| {
                serde_json::json!({
                    "subject": name, "verdict": "passed",
                    "measurements": [
                        { "name": "cables differing from the plan", "value": 0.0, "unit": "",
                          "threshold": { "comparison": "<=", "value": 0.0,
                                         "source": { "kind": "default", "detail": "every cable where the plan puts it" } } },
                        { "name": "planned cables on this switch", "value": planned, "unit": "" },
                        { "name": "planned cables seen where they belong", "value": verified, "unit": "",
                          "threshold": { "comparison": ">=", "value": planned,
                                         "source": { "kind": "measurement", "detail": "planned cables on this switch" } } },
                    ],
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "id": "cabling", "title": "Cables", "failure": "cable-miswired",
            "docs": { "what": "a", "why": "b", "fix": "c" }, "scope": "switch", "subjects": subjects,
        }))
        .expect("a validator result")
    }

    #[test]
    fn planned_and_verified_cables_are_one_chart() {
        let charts = bar_charts(&cabling(&[("leaf0", 5.0, 5.0), ("leaf1", 5.0, 4.0), ("spine0", 4.0, 4.0)]));
        let titles: Vec<&str> = charts.iter().map(|chart| chart.title.as_str()).collect();
        assert_eq!(titles, ["planned cables seen where they belong per switch"]);
    }
}
