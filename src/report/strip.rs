//! Strip-chart geometry for the HTML report: one row per node that failed a check in
//! the window, time left to right, failing buckets coloured with the checks in their
//! tooltip. Nodes that never failed are one line under the chart, not rows, so a
//! 4,096-node cluster with three bad nodes draws three rows.
//!
//! Stage: report. Input: a [`Timeline`] from the results. Output: [`StripChart`],
//! plain data in pixel coordinates that `templates/report/charts.html.j2` lays out.

use serde::Serialize;

use crate::report::svg::{CHAR_WIDTH, px};
use crate::results::{Timeline, TimelineRow};

const WIDTH: f64 = 720.0;
const ROW_HEIGHT: f64 = 16.0;
const TOP: f64 = 8.0;
/// Room under the rows for the time ticks and the axis title.
const BOTTOM: f64 = 40.0;
const RIGHT: f64 = 16.0;
/// Most rows drawn; past it the rows failing least are counted under the chart.
const MAX_ROWS: usize = 64;
/// Most time labels on the axis.
const MAX_TICKS: usize = 6;

/// A strip chart of rows failing over time.
#[derive(Debug, Clone, Serialize)]
pub struct StripChart {
    /// Caption.
    pub title: String,
    /// SVG width.
    pub width: f64,
    /// SVG height.
    pub height: f64,
    /// Left edge of the strips (row names are right-aligned before it).
    pub left: f64,
    /// Right edge of the strips.
    pub right: f64,
    /// Bottom edge of the last row.
    pub bottom: f64,
    /// The rows drawn, most failing first.
    pub rows: Vec<StripRow>,
    /// Time labels under the rows.
    pub ticks: Vec<StripTick>,
    /// What the axis shows (`UTC, 30 s buckets`).
    pub axis: String,
    /// The line under the chart: rows not drawn and rows that never failed.
    pub note: String,
}

/// One row: a node and its failing stretches.
#[derive(Debug, Clone, Serialize)]
pub struct StripRow {
    /// The node.
    pub name: String,
    /// Top edge.
    pub y: f64,
    /// Consecutive buckets failing the same checks, one rectangle each.
    pub cells: Vec<StripCell>,
}

/// A failing or silent stretch of one row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StripCell {
    /// Left edge.
    pub x: f64,
    /// Width.
    pub width: f64,
    /// `failing` (red) or `silent` (grey: no data, the node reported nothing).
    pub state: &'static str,
    /// Tooltip: when and which checks, or that there is no data.
    pub title: String,
}

/// A time label.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StripTick {
    /// Pixel x.
    pub at: f64,
    /// `11-26 08:00`.
    pub label: String,
}

/// `11-26 08:15` in UTC.
fn clock(seconds: f64) -> String {
    #[allow(clippy::cast_possible_truncation, reason = "unix seconds fit an i64")]
    jiff::Timestamp::from_second(seconds.floor() as i64)
        .map_or_else(|_| format!("{seconds}"), |time| time.strftime("%m-%d %H:%M").to_string())
}

/// The chart, or `None` when the timeline has no buckets.
#[must_use]
pub fn strip_chart(timeline: &Timeline) -> Option<StripChart> {
    let buckets = timeline.times.len();
    if buckets == 0 {
        return None;
    }
    // A bucket lasts as long as the spacing of the times (the query's step).
    let step = if buckets > 1 { (timeline.times[buckets - 1] - timeline.times[0]) / (buckets - 1) as f64 } else { 0.0 };
    let mut ranked: Vec<_> = timeline.rows.iter().collect();
    ranked
        .sort_by_key(|row| std::cmp::Reverse((0..buckets).filter(|index| bucket_state(row, *index).is_some()).count()));
    let drawn = &ranked[..ranked.len().min(MAX_ROWS)];
    let longest = drawn.iter().map(|row| row.name.chars().count()).max().unwrap_or(0);
    let left = px((longest as f64).mul_add(CHAR_WIDTH, 12.0).clamp(48.0, 200.0));
    let right = WIDTH - RIGHT;
    let cell_width = (right - left) / buckets as f64;
    let rows = drawn
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let mut cells: Vec<StripCell> = Vec::new();
            let mut start = 0;
            while start < buckets {
                let Some(state) = bucket_state(row, start) else {
                    start += 1;
                    continue;
                };
                let end = (start..buckets).find(|at| bucket_state(row, *at) != Some(state)).unwrap_or(buckets);
                let until = timeline.times.get(end).copied().unwrap_or(timeline.times[buckets - 1] + step);
                let what = match state {
                    Bucket::Failing(checks) => checks.join(", "),
                    Bucket::Silent => "no data (no health check ran or was scraped)".to_owned(),
                };
                cells.push(StripCell {
                    x: px((start as f64).mul_add(cell_width, left)),
                    width: px((end - start) as f64 * cell_width),
                    state: if matches!(state, Bucket::Silent) { "silent" } else { "failing" },
                    title: format!("{}, {} to {} UTC: {what}", row.name, clock(timeline.times[start]), clock(until)),
                });
                start = end;
            }
            StripRow { name: row.name.clone(), y: px((index as f64).mul_add(ROW_HEIGHT, TOP)), cells }
        })
        .collect::<Vec<_>>();
    let bottom = px((rows.len() as f64).mul_add(ROW_HEIGHT, TOP));
    let every = buckets.div_ceil(MAX_TICKS).max(1);
    let ticks = (0..buckets)
        .step_by(every)
        .map(|at| StripTick { at: px((at as f64).mul_add(cell_width, left)), label: clock(timeline.times[at]) })
        .collect();
    Some(StripChart {
        title: format!("nodes failing {} over time", timeline.name),
        width: WIDTH,
        height: bottom + BOTTOM,
        left,
        right,
        bottom,
        rows,
        ticks,
        axis: format!("UTC, buckets of {}", duration(step)),
        note: note(timeline, ranked.len() - drawn.len()),
    })
}

/// What one bucket of a row shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket<'a> {
    /// These checks failed.
    Failing(&'a [String]),
    /// The node reported nothing.
    Silent,
}

/// A bucket's state; `None` when the node reported and passed.
fn bucket_state(row: &TimelineRow, index: usize) -> Option<Bucket<'_>> {
    match row.failing.get(index) {
        Some(checks) if !checks.is_empty() => Some(Bucket::Failing(checks)),
        _ if row.is_silent(index) => Some(Bucket::Silent),
        _ => None,
    }
}

fn duration(seconds: f64) -> String {
    if seconds >= 3600.0 && seconds % 3600.0 == 0.0 {
        format!("{} h", seconds / 3600.0)
    } else if seconds >= 60.0 && seconds % 60.0 == 0.0 {
        format!("{} min", seconds / 60.0)
    } else {
        format!("{} s", seconds.round())
    }
}

fn note(timeline: &Timeline, hidden: usize) -> String {
    let mut parts = Vec::new();
    if hidden > 0 {
        parts.push(format!("{hidden} more nodes failed or went silent less often (in the results JSON)"));
    }
    let passing = timeline.passing.len();
    if timeline.rows.is_empty() {
        parts.push(format!("no node failed {} in the window ({passing} nodes)", timeline.name));
    } else if passing > 0 {
        let names = if passing <= 8 { format!(": {}", timeline.passing.join(", ")) } else { String::new() };
        parts.push(format!("{passing} nodes never failed{names}"));
    }
    if timeline.rows.iter().any(|row| row.silent.contains(&true)) {
        parts.push("grey: no data (the node reported no health check run)".to_owned());
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn timeline(rows: Vec<TimelineRow>, passing: usize) -> Timeline {
        Timeline {
            name: "toolkit health checks".to_owned(),
            times: (0..4).map(|hour| 1_795_680_000.0 + f64::from(hour) * 3600.0).collect(),
            rows,
            passing: (0..passing).map(|index| format!("node{index:04}")).collect(),
        }
    }

    #[test]
    fn adjacent_buckets_failing_the_same_checks_are_one_stretch() {
        let row = TimelineRow {
            name: "node02".to_owned(),
            failing: vec![checks(&["rail-links"]), checks(&["rail-links"]), vec![], checks(&["mtu", "rail-links"])],
            silent: vec![],
        };
        let chart = strip_chart(&timeline(vec![row], 4093)).expect("chart");
        let cells = &chart.rows[0].cells;
        assert_eq!(cells.len(), 2, "{cells:?}");
        assert!((cells[0].width - 2.0 * cells[1].width).abs() < 0.2, "{cells:?}");
        assert!((cells[1].x + cells[1].width - chart.right).abs() < 0.2, "{cells:?}");
        assert_eq!(cells[0].title, "node02, 11-26 08:00 to 11-26 10:00 UTC: rail-links");
        assert_eq!(cells[1].title, "node02, 11-26 11:00 to 11-26 12:00 UTC: mtu, rail-links");
        assert_eq!(chart.axis, "UTC, buckets of 1 h");
        assert_eq!(chart.note, "4093 nodes never failed");
    }

    #[test]
    fn the_nodes_failing_most_are_drawn_the_rest_counted() {
        let rows = (0..100)
            .map(|index| TimelineRow {
                name: format!("node{index:03}"),
                failing: (0..4).map(|bucket| if bucket < index % 4 + 1 { checks(&["gpu"]) } else { vec![] }).collect(),
                silent: vec![],
            })
            .collect();
        let chart = strip_chart(&timeline(rows, 3)).expect("chart");
        assert_eq!(chart.rows.len(), MAX_ROWS);
        assert!((chart.rows[0].cells[0].width - (chart.right - chart.left)).abs() < 0.2);
        assert!(chart.note.starts_with("36 more nodes failed or went silent less often"), "{}", chart.note);
        assert!(chart.note.ends_with("3 nodes never failed: node0000, node0001, node0002"), "{}", chart.note);
        assert!((chart.height - (chart.bottom + BOTTOM)).abs() < 0.1);
    }

    #[test]
    fn a_node_without_data_is_grey_not_passing() {
        let row = TimelineRow {
            name: "node03".to_owned(),
            failing: vec![vec![], vec![], vec![], checks(&["services"])],
            silent: vec![false, true, true, false],
        };
        let chart = strip_chart(&timeline(vec![row], 3)).expect("chart");
        let cells = &chart.rows[0].cells;
        let states: Vec<&str> = cells.iter().map(|cell| cell.state).collect();
        assert_eq!(states, ["silent", "failing"], "{cells:?}");
        assert_eq!(
            cells[0].title,
            "node03, 11-26 09:00 to 11-26 11:00 UTC: no data (no health check ran or was scraped)"
        );
        assert!((cells[0].width - 2.0 * cells[1].width).abs() < 0.2, "{cells:?}");
        assert!(chart.note.ends_with("grey: no data (the node reported no health check run)"), "{}", chart.note);
    }
}
