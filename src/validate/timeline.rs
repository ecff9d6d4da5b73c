//! Builds a [`Timeline`] (rows failing over time, the report's strip chart) from a
//! validator's parsed output as its [`TimelineSpec`] describes it: typically a
//! Prometheus range query of `toolkit_healthcheck_ok` per node and check.

use std::collections::{BTreeMap, BTreeSet};

use minijinja::value::Value;

use super::expr;
use super::spec::TimelineSpec;
use crate::results::{Timeline, TimelineRow};

/// The timeline, or `None` when there are no buckets (nothing recorded yet) or an
/// expression fails to evaluate (the output lacked the step; the validator's own
/// verdict says so).
#[must_use]
pub fn build(spec: &TimelineSpec, context: &Value) -> Option<Timeline> {
    let times: Vec<f64> = numbers(&expr::evaluate(&spec.times, context).ok()?);
    if times.is_empty() || !times.windows(2).all(|pair| pair[0] < pair[1]) {
        return None;
    }
    let all_rows: BTreeSet<String> = strings(&expr::evaluate(&spec.rows, context).ok()?);
    let mut failing: BTreeMap<String, Vec<BTreeSet<String>>> = BTreeMap::new();
    for (row, label, points) in items(spec, &spec.items, context)? {
        for time in points.into_iter().filter_map(|(time, value)| (value == 0.0).then_some(time)) {
            let cells = failing.entry(row.clone()).or_insert_with(|| vec![BTreeSet::new(); times.len()]);
            cells[bucket(&times, time)].insert(label.clone());
        }
    }
    // Rows that reported nothing in a bucket: only those the spec's rows name (hosts
    // that never run the checks are not rows), and only where nothing failed (a
    // failure is a report).
    let mut silent: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    if let Some(expression) = &spec.silent {
        for (row, _, points) in items(spec, expression, context).unwrap_or_default() {
            if !all_rows.contains(&row) {
                continue;
            }
            let cells = silent.entry(row).or_insert_with(|| vec![false; times.len()]);
            for (time, _) in points {
                cells[bucket(&times, time)] = true;
            }
        }
    }
    let passing = all_rows.into_iter().filter(|row| !failing.contains_key(row) && !silent.contains_key(row)).collect();
    let names: BTreeSet<String> = failing.keys().chain(silent.keys()).cloned().collect();
    let rows = names
        .into_iter()
        .map(|name| {
            let failing: Vec<Vec<String>> = failing.remove(&name).map_or_else(
                || vec![Vec::new(); times.len()],
                |cells| cells.into_iter().map(|set| set.into_iter().collect()).collect(),
            );
            let silent = silent
                .remove(&name)
                .map(|cells| cells.iter().zip(&failing).map(|(quiet, checks)| *quiet && checks.is_empty()).collect())
                .unwrap_or_default();
            TimelineRow { name, failing, silent }
        })
        .collect();
    Some(Timeline { name: spec.name.clone(), times, rows, passing })
}

/// One series of a timeline: its row, its label and its `(time, value)` points.
type Item = (String, String, Vec<(f64, f64)>);

/// The items `expression` gives; `None` when it does not evaluate to a list.
fn items(spec: &TimelineSpec, expression: &str, context: &Value) -> Option<Vec<Item>> {
    let mut found = Vec::new();
    for item in expr::evaluate(expression, context).ok()?.try_iter().ok()? {
        let scoped = expr::with_item(context, item);
        let Some(row) = text(&spec.row, &scoped) else { continue };
        let label = text(&spec.label, &scoped).unwrap_or_default();
        let Ok(points) = expr::evaluate(&spec.points, &scoped) else { continue };
        let pairs = points
            .try_iter()
            .into_iter()
            .flatten()
            .filter_map(|point| match numbers(&point)[..] {
                [time, value] => Some((time, value)),
                _ => None,
            })
            .collect();
        found.push((row, label, pairs));
    }
    Some(found)
}

/// The bucket a time falls in: the last that starts at or before it (two queries a
/// moment apart give times a little off each other's), the first for an earlier one.
fn bucket(times: &[f64], time: f64) -> usize {
    times.partition_point(|start| *start <= time).saturating_sub(1)
}

fn text(expression: &str, context: &Value) -> Option<String> {
    let value = expr::evaluate(expression, context).ok()?;
    (!value.is_undefined() && !value.is_none()).then(|| value.to_string()).filter(|text| !text.is_empty())
}

fn numbers(value: &Value) -> Vec<f64> {
    value.try_iter().into_iter().flatten().filter_map(|value| expr::as_number(&value)).collect()
}

fn strings(value: &Value) -> BTreeSet<String> {
    value.try_iter().into_iter().flatten().map(|value| value.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::catalog::Catalog;
    use super::*;
    use crate::parsers::fixtures::read;

    /// The monitoring validator's own timeline over the lab's recorded answers.
    fn lab_timeline(nodes: &[&str]) -> Timeline {
        let catalog = Catalog::builtin().expect("built-in validators load");
        let spec = &catalog.get("monitoring").expect("monitoring validator").timelines[0];
        let output = json!({
            "health": expr::parse("prometheus-range", &read("prometheus_2.42_api_range_healthcheck_failing_count.json")).expect("parses"),
            "history": expr::parse("prometheus-range", &read("prometheus_2.42_api_range_healthcheck_history.json")).expect("parses"),
        });
        let context = expr::to_value(&json!({ "output": output, "nodes": nodes }));
        build(spec, &context).expect("a timeline")
    }

    /// node03's node exporter stopped for 110 s (recorded in a lab, 30 s buckets).
    fn silent_timeline(nodes: &[&str]) -> Timeline {
        let catalog = Catalog::builtin().expect("built-in validators load");
        let spec = &catalog.get("monitoring").expect("monitoring validator").timelines[0];
        let range = |name: &str| expr::parse("prometheus-range", &read(name)).expect("parses");
        let output = json!({
            "health": range("prometheus_2.42_api_range_healthcheck_failing_count_node03_silent.json"),
            "history": range("prometheus_2.42_api_range_healthcheck_history_node03_silent.json"),
            "reporting": range("prometheus_2.42_api_range_healthcheck_not_reporting.json"),
        });
        let context = expr::to_value(&json!({ "output": output, "nodes": nodes }));
        build(spec, &context).expect("a timeline")
    }

    #[test]
    fn a_node_that_stopped_reporting_is_no_data_not_passing() {
        let timeline = silent_timeline(&["node01", "node02", "node03", "node04"]);
        assert_eq!(timeline.times.len(), 12);
        assert_eq!(timeline.passing, ["node01", "node02", "node04"]);
        let [node03] = &timeline.rows[..] else { panic!("{:?}", timeline.rows) };
        assert_eq!(node03.name, "node03");
        let silent: Vec<usize> = (0..12).filter(|index| node03.is_silent(*index)).collect();
        assert_eq!(silent, [6, 7, 8], "{node03:?}");
        // Back, its first run failed `services` (node exporter still starting): a
        // failing bucket, not a silent one.
        let failing: Vec<usize> = (0..12).filter(|index| !node03.failing[*index].is_empty()).collect();
        assert_eq!(failing, [9]);
        assert_eq!(node03.failing[9], ["services"]);
        // A host the spec's rows do not name (it runs no health checks) is never a row.
        let timeline = silent_timeline(&["node01", "node02", "node04"]);
        assert!(timeline.rows.iter().all(|row| row.silent.is_empty()), "{:?}", timeline.rows);
        // Results without the step (recorded before it existed) still give a timeline.
        let catalog = Catalog::builtin().expect("built-in validators load");
        let spec = &catalog.get("monitoring").expect("monitoring validator").timelines[0];
        let output = json!({
            "health": expr::parse("prometheus-range", &read("prometheus_2.42_api_range_healthcheck_failing_count_node03_silent.json")).expect("parses"),
            "history": expr::parse("prometheus-range", &read("prometheus_2.42_api_range_healthcheck_history_node03_silent.json")).expect("parses"),
        });
        let context = expr::to_value(&json!({ "output": output, "nodes": ["node03"] }));
        let without = build(spec, &context).expect("a timeline");
        assert!(without.rows[0].silent.is_empty());
    }

    #[test]
    fn the_lab_rail_down_is_a_run_of_failing_buckets_on_its_node() {
        let timeline = lab_timeline(&["node01", "node02", "node03", "node04"]);
        assert_eq!(timeline.times.len(), 21, "{:?}", timeline.times);
        let names: Vec<&str> = timeline.rows.iter().map(|row| row.name.as_str()).collect();
        assert_eq!(names, ["node01", "node02", "node03"]);
        assert_eq!(timeline.passing, ["node04"]);
        // A node outside `nodes` that failed is still a row; one that never failed is not.
        assert!(lab_timeline(&["node04", "node05"]).passing == ["node04", "node05"]);
        // rail1 down on node02 for 150 s: rail-links and mtu fail in the same buckets
        // (its peers' mtu across rail1 too), contiguous at the end of the window.
        let node02: Vec<(usize, &Vec<String>)> =
            timeline.rows[1].failing.iter().enumerate().filter(|(_, checks)| !checks.is_empty()).collect();
        assert_eq!(node02.len(), 9, "{node02:?}");
        assert!(node02.iter().all(|(_, checks)| *checks == &["mtu", "rail-links"]), "{node02:?}");
        assert!(node02[2..].windows(2).all(|pair| pair[1].0 == pair[0].0 + 1), "{node02:?}");
        // The stopped daemon on node03: `services`, two buckets.
        let services = timeline.rows[2].failing.iter().filter(|checks| checks.iter().any(|c| c == "services")).count();
        assert_eq!(services, 2);
        // Every bucket in which the count query saw a node failing is a failing bucket
        // here (not the converse: `min_over_time` also catches what failed between two
        // evaluations).
        let count = expr::parse("prometheus-range", &read("prometheus_2.42_api_range_healthcheck_failing_count.json"))
            .expect("parses");
        let counted = count["series"][0]["points"].as_array().expect("points");
        assert_eq!(counted.len(), timeline.times.len());
        for (index, point) in counted.iter().enumerate() {
            if point[1].as_f64() > Some(0.0) {
                assert!(timeline.rows.iter().any(|row| !row.failing[index].is_empty()), "bucket {index}");
            }
        }
    }
}
