//! Judging one subject: its parsed output measured with the validator's expressions,
//! each measurement compared with its limits (fixed, from the blueprint or derived
//! from the model), and a verdict with the sentences that explain it.
//!
//! Stage: validate (pure). Input: one subject and the record `execute` made of its
//! commands. Output: a [`SubjectResult`].

use std::collections::{BTreeMap, BTreeSet};

use minijinja::value::Value;
use serde_json::json;

use super::execute::{Problem, Record, ValidatorRun};
use super::{Limit, LimitSource, unmet};
use crate::results::{
    AxisScale, Measurement, Provenance, ProvenanceKind, Series, SubjectResult, Threshold, Verdict, format_number,
};
use crate::transport::Connector;
use crate::validate::derived::{self, DeriveInput};
use crate::validate::expr;
use crate::validate::spec::{Aggregate, MeasurementSpec, SeriesScale, Severity};
use crate::validate::subjects::Subject;
use crate::validate::timeline;

impl<C: Connector> ValidatorRun<'_, C> {
    /// Measures, compares and decides one subject.
    pub(super) fn judge(&self, subject: &Subject, record: &Record) -> SubjectResult {
        let mut result = match &record.problem {
            Some(Problem::Skipped(reason)) => SubjectResult::skipped(&subject.name, reason.clone()),
            Some(Problem::Error(reason)) => SubjectResult::error(&subject.name, reason.clone()),
            None => self.measure(subject, record),
        };
        result.evidence.clone_from(&record.evidence);
        if record.seconds > 0.0 {
            result.duration_seconds = Some(record.seconds);
        }
        result
    }

    fn measure(&self, subject: &Subject, record: &Record) -> SubjectResult {
        let context = minijinja::value::merge_maps([
            expr::to_value(&json!({ "output": record.output, "status": record.status })),
            subject.context.clone(),
        ]);
        let nodes: Vec<&crate::model::Node> = subject.nodes.iter().map(|&index| &self.model.nodes[index]).collect();
        let derive_input =
            DeriveInput { model: self.model, nodes: &nodes, switch: subject.switch, selected: self.selected };
        let mut measurements = Vec::new();
        let mut values: BTreeMap<String, f64> = BTreeMap::new();
        let mut missing = Vec::new();
        let mut unlimited = Vec::new();
        let mut failing: Vec<(Severity, String)> = Vec::new();
        for spec in self.spec.measurements.iter().filter(|m| unmet(self.model, &m.when).is_none()) {
            let limits: Vec<&Limit> = self.limits.iter().filter(|limit| limit.measurement == spec.name).collect();
            let value = match measure(spec, &context) {
                Ok(value) => value,
                Err(problem) => {
                    if !limits.is_empty() {
                        missing.push(format!("{}: {problem}", spec.label));
                    }
                    continue;
                }
            };
            values.insert(spec.name.clone(), value);
            if limits.is_empty() {
                measurements.push(Measurement {
                    name: spec.label.clone(),
                    value,
                    unit: spec.unit.clone(),
                    threshold: None,
                });
                continue;
            }
            for limit in limits {
                let resolved = match &limit.source {
                    LimitSource::Measurement { name, label } => values
                        .get(name)
                        .map(|value| Threshold {
                            comparison: limit.comparison,
                            value: *value,
                            source: Provenance { kind: ProvenanceKind::Measurement, detail: label.clone() },
                        })
                        .ok_or_else(|| format!("`{label}` was not measured")),
                    _ => resolve(limit, &derive_input),
                };
                let threshold = match resolved {
                    Ok(threshold) => Some(threshold),
                    Err(why) => {
                        unlimited.push(format!("no limit for {}: {why}", spec.label));
                        None
                    }
                };
                if let Some(threshold) = &threshold
                    && !threshold.admits(value)
                {
                    failing.push((limit.severity, sentence(&spec.label, value, &spec.unit, threshold)));
                }
                measurements.push(Measurement { name: spec.label.clone(), value, unit: spec.unit.clone(), threshold });
            }
        }
        let first_of = |severity: Severity| failing.iter().find(|(s, _)| *s == severity).map(|(_, text)| text.clone());
        let (verdict, reason) = if let Some(reason) = first_of(Severity::Failure) {
            (Verdict::Failed, Some(reason))
        } else if !missing.is_empty() {
            (Verdict::Error, Some(format!("could not measure {}", missing.join("; "))))
        } else if let Some(reason) = first_of(Severity::Warning) {
            (Verdict::Warning, Some(reason))
        } else if !unlimited.is_empty() {
            (Verdict::Warning, Some(unlimited.join("; ")))
        } else {
            (Verdict::Passed, None)
        };
        let reason = match (reason, &self.spec.explain) {
            (Some(reason), Some(template)) if verdict != Verdict::Error => {
                let explain_context =
                    minijinja::value::merge_maps([expr::to_value(&json!({ "measured": values })), context.clone()]);
                match expr::render_text(template, &explain_context) {
                    Ok(text) if text.is_empty() => Some(reason),
                    Ok(text) => Some(format!("{reason}: {text}")),
                    Err(error) => Some(format!("{reason} (the explanation did not render: {error})")),
                }
            }
            (reason, _) => reason,
        };
        SubjectResult {
            subject: subject.name.clone(),
            verdict,
            reason,
            measurements,
            series: self.series(&context),
            timelines: self.spec.timelines.iter().filter_map(|spec| timeline::build(spec, &context)).collect(),
            evidence: None,
            duration_seconds: None,
        }
    }

    fn series(&self, context: &Value) -> Vec<Series> {
        self.spec
            .series
            .iter()
            .filter_map(|spec| {
                let items = expr::evaluate(&spec.items, context).ok()?;
                let log2 = spec.x_scale == SeriesScale::Log2;
                let points: Vec<(f64, f64)> = items
                    .try_iter()
                    .ok()?
                    .filter_map(|item| {
                        let scoped = expr::with_item(context, item);
                        let x = expr::as_number(&expr::evaluate(&spec.x, &scoped).ok()?)?;
                        let y = expr::as_number(&expr::evaluate(&spec.y, &scoped).ok()?)?;
                        (!log2 || x > 0.0).then_some((x, y))
                    })
                    .collect();
                (!points.is_empty()).then(|| Series {
                    name: spec.name.clone(),
                    x_label: spec.x_label.clone(),
                    x_unit: spec.x_unit.clone(),
                    x_scale: if log2 { AxisScale::Log2 } else { AxisScale::Linear },
                    y_label: spec.y_label.clone(),
                    y_unit: spec.y_unit.clone(),
                    points,
                })
            })
            .collect()
    }
}

/// A threshold's limit for one subject.
fn resolve(limit: &Limit, input: &DeriveInput<'_>) -> Result<Threshold, String> {
    let (value, source) = match &limit.source {
        LimitSource::Fixed { value, reference } => {
            (*value, Provenance { kind: ProvenanceKind::Default, detail: reference.clone() })
        }
        LimitSource::Blueprint { value, key } => {
            (*value, Provenance { kind: ProvenanceKind::Blueprint, detail: key.clone() })
        }
        LimitSource::Derived(name) => {
            let derived = derived::derive(name, input)?;
            (derived.value, Provenance { kind: ProvenanceKind::Model, detail: derived.detail })
        }
        LimitSource::Measurement { label, .. } => return Err(format!("`{label}` is resolved per subject")),
    };
    Ok(Threshold { comparison: limit.comparison, value, source })
}

/// `busbw is 12.5 GB/s, required >= 320 GB/s (model: 8 rails x …)`.
fn sentence(label: &str, value: f64, unit: &str, threshold: &Threshold) -> String {
    let with_unit = |number: f64| format!("{} {unit}", format_number(number)).trim_end().to_owned();
    format!(
        "{label} is {}, required {} {} ({})",
        with_unit(value),
        threshold.comparison,
        with_unit(threshold.value),
        threshold.source
    )
}

/// One measurement's number.
pub(super) fn measure(spec: &MeasurementSpec, context: &Value) -> Result<f64, String> {
    let Some(items) = &spec.items else {
        let expression = spec.value.as_deref().unwrap_or_default();
        let value = expr::evaluate(expression, context)?;
        return expr::as_number(&value).ok_or_else(|| format!("`{expression}` is {}, not a number", describe(&value)));
    };
    let list = expr::evaluate(items, context)?;
    let iterator = list.try_iter().map_err(|_| format!("`{items}` is {}, not a list", describe(&list)))?;
    let mut kept = Vec::new();
    for item in iterator {
        let scoped = expr::with_item(context, item);
        let keep = match &spec.filter {
            Some(filter) => expr::evaluate(filter, &scoped)?.is_true(),
            None => true,
        };
        if keep {
            kept.push(scoped);
        }
    }
    let aggregate = spec.aggregate.unwrap_or(Aggregate::Count);
    if aggregate == Aggregate::Count {
        return Ok(kept.len() as f64);
    }
    let expression = spec.value.as_deref().unwrap_or_default();
    let values: Vec<Value> = kept.iter().map(|scoped| expr::evaluate(expression, scoped)).collect::<Result<_, _>>()?;
    if aggregate == Aggregate::Distinct {
        let distinct: BTreeSet<String> = values.iter().filter(|v| !v.is_none()).map(ToString::to_string).collect();
        return Ok(distinct.len() as f64);
    }
    let numbers: Vec<f64> = values.iter().filter_map(expr::as_number).collect();
    match aggregate {
        Aggregate::Sum => Ok(numbers.iter().sum()),
        _ if numbers.is_empty() => Err(format!("no values: `{items}` has no item with a number for `{expression}`")),
        Aggregate::Min => Ok(numbers.iter().copied().fold(f64::INFINITY, f64::min)),
        Aggregate::Max => Ok(numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        _ => Ok(numbers.iter().sum::<f64>() / numbers.len() as f64),
    }
}

fn describe(value: &Value) -> String {
    if value.is_none() {
        "none".to_owned()
    } else if value.is_undefined() {
        "undefined".to_owned()
    } else {
        let text = value.to_string();
        let short: String = text.chars().take(40).collect();
        if text.chars().count() > 40 { format!("`{short}…`") } else { format!("`{short}`") }
    }
}
