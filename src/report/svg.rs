//! Chart geometry for the HTML report: line charts of series (bus bandwidth by
//! message size) and bar charts of one measurement across subjects, with
//! thresholds drawn as lines.
//!
//! Stage: report. Input: series and measurements from the results. Output:
//! [`LineChart`] and [`BarChart`], plain data in pixel coordinates that
//! `templates/report/charts.html.j2` lays out as inline SVG. All arithmetic is
//! here; the template only places elements, and minijinja escapes every label.

use serde::Serialize;

use crate::report::{bytes_label, format_number, threshold_text};
use crate::results::{AxisScale, Measurement, Series};

/// Palette classes for lines, cycled (`series-0` … `series-7` in the CSS).
const PALETTE: usize = 8;
/// Most ticks on an axis; more would overlap at the chart's width.
const MAX_TICKS: usize = 8;
/// Width of one character of an 11 px label, roughly, for laying out labels.
pub(crate) const CHAR_WIDTH: f64 = 6.5;
/// Room right of the plot for threshold labels.
const RIGHT_MARGIN: f64 = 96.0;
/// Widest bar: two bars should not look like walls.
const MAX_BAR_WIDTH: f64 = 56.0;
/// Past this many bars, labels are left to the tooltips.
const LABELLED_BARS: usize = 64;

/// The drawing area inside the axes, in pixels from the SVG's top left.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Area {
    /// Left edge.
    pub left: f64,
    /// Top edge.
    pub top: f64,
    /// Right edge.
    pub right: f64,
    /// Bottom edge (the x axis).
    pub bottom: f64,
}

impl Area {
    fn width(&self) -> f64 {
        self.right - self.left
    }

    fn height(&self) -> f64 {
        self.bottom - self.top
    }
}

/// A tick mark with its label, at a pixel position along its axis.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Tick {
    /// Pixel position (x for the x axis, y for the y axis).
    pub at: f64,
    /// Label.
    pub label: String,
}

/// A horizontal threshold line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rule {
    /// Start x.
    pub x1: f64,
    /// End x.
    pub x2: f64,
    /// Height.
    pub y: f64,
    /// Short label right of the plot (`≥ 320 GB/s`); empty for per-bar marks
    /// (their bar's tooltip says it).
    pub label: String,
}

/// A threshold as the legend under a chart describes it, with its source.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Threshold {
    /// Short form, as on the chart.
    pub label: String,
    /// What it applies to and where it came from.
    pub caption: String,
}

/// A point of a line, with its tooltip.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Marker {
    /// x in pixels.
    pub x: f64,
    /// y in pixels.
    pub y: f64,
    /// Tooltip: the point's values with units.
    pub title: String,
}

/// One curve of a line chart.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    /// CSS class giving its colour.
    pub class: String,
    /// Legend text (`dgx001+dgx002 — busbw, in-place`).
    pub label: String,
    /// SVG `points` attribute: `x,y x,y …`.
    pub points: String,
    /// One marker per data point.
    pub markers: Vec<Marker>,
}

/// A line chart of one or more series that share their axes.
#[derive(Debug, Clone, Serialize)]
pub struct LineChart {
    /// Caption.
    pub title: String,
    /// SVG width.
    pub width: f64,
    /// SVG height.
    pub height: f64,
    /// The plotting area.
    pub area: Area,
    /// x axis title with unit.
    pub x_title: String,
    /// y axis title with unit.
    pub y_title: String,
    /// x ticks.
    pub x_ticks: Vec<Tick>,
    /// y ticks.
    pub y_ticks: Vec<Tick>,
    /// The curves.
    pub lines: Vec<Line>,
    /// Threshold lines.
    pub rules: Vec<Rule>,
    /// The thresholds, for the legend.
    pub thresholds: Vec<Threshold>,
}

/// One bar.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub width: f64,
    /// Height.
    pub height: f64,
    /// `pass`, `fail` or `info` (no threshold).
    pub class: &'static str,
    /// Subject name under the bar.
    pub label: String,
    /// Centre of the bar, where its labels hang.
    pub center: f64,
    /// The value, printed on top when there is room.
    pub value: String,
    /// Tooltip.
    pub title: String,
}

/// A bar chart of one measurement across subjects.
#[derive(Debug, Clone, Serialize)]
pub struct BarChart {
    /// Caption.
    pub title: String,
    /// SVG width.
    pub width: f64,
    /// SVG height.
    pub height: f64,
    /// The plotting area.
    pub area: Area,
    /// y axis title: the unit.
    pub y_title: String,
    /// y ticks.
    pub y_ticks: Vec<Tick>,
    /// The bars, in subject order.
    pub bars: Vec<Bar>,
    /// Threshold lines: one across when all bars share it, else one per bar.
    pub rules: Vec<Rule>,
    /// The thresholds, for the legend.
    pub thresholds: Vec<Threshold>,
    /// `upright`, `slanted` or `hidden` subject labels.
    pub labels: &'static str,
    /// Whether values are printed on the bars.
    pub show_values: bool,
}

/// Pixels, rounded to a tenth: sharp enough, and keeps the HTML small.
pub(crate) fn px(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// A linear axis from `low` to `high` with "nice" ticks (1, 2, 2.5, 5 × 10ⁿ).
struct Linear {
    low: f64,
    high: f64,
    step: f64,
}

impl Linear {
    fn nice(low: f64, high: f64) -> Self {
        let (low, high) = if high - low > f64::EPSILON { (low, high) } else { (low, low + 1.0) };
        let raw = (high - low) / (MAX_TICKS as f64 - 2.0);
        let magnitude = 10_f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|factor| factor * magnitude)
            .find(|step| *step >= raw)
            .unwrap_or(10.0 * magnitude);
        Self { low: (low / step).floor() * step, high: (high / step).ceil() * step, step }
    }

    /// Fraction of the way from low to high.
    fn fraction(&self, value: f64) -> f64 {
        (value - self.low) / (self.high - self.low)
    }

    fn ticks(&self) -> impl Iterator<Item = f64> + '_ {
        let count = ((self.high - self.low) / self.step).round() as usize;
        (0..=count).map(move |index| self.low + self.step * index as f64)
    }
}

fn y_ticks(axis: &Linear, area: Area) -> Vec<Tick> {
    axis.ticks()
        .map(|value| Tick { at: px(area.bottom - axis.fraction(value) * area.height()), label: format_number(value) })
        .collect()
}

fn axis_title(label: &str, unit: &str) -> String {
    if unit.is_empty() { label.to_owned() } else { format!("{label} ({unit})") }
}

fn value_text(value: f64, unit: &str) -> String {
    if unit == "B" { bytes_label(value) } else { format!("{} {unit}", format_number(value)) }
}

/// A line chart of `curves` (label, series), which must share axes (the caller
/// groups them), with a rule per `(threshold, value)`. `None` without points.
#[must_use]
pub fn line_chart(title: &str, curves: &[(String, &Series)], thresholds: &[(Threshold, f64)]) -> Option<LineChart> {
    let first = curves.first()?.1;
    let points = || curves.iter().flat_map(|(_, series)| series.points.iter());
    points().next()?;
    let (width, height) = (720.0, 320.0);
    let area = Area { left: 64.0, top: 16.0, right: width - RIGHT_MARGIN, bottom: height - 52.0 };
    let log = first.x_scale == AxisScale::Log2;
    let to_axis = |x: f64| if log { x.log2() } else { x };
    let (mut x_low, mut x_high) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut y_low, mut y_high) = (0.0_f64, f64::NEG_INFINITY);
    for (x, y) in points() {
        x_low = x_low.min(to_axis(*x));
        x_high = x_high.max(to_axis(*x));
        y_low = y_low.min(*y);
        y_high = y_high.max(*y);
    }
    for (_, value) in thresholds {
        y_low = y_low.min(*value);
        y_high = y_high.max(*value);
    }
    if x_high - x_low <= f64::EPSILON {
        x_low -= 1.0;
        x_high += 1.0;
    }
    let y_axis = Linear::nice(y_low, y_high);
    let x_of = |x: f64| px(area.left + (to_axis(x) - x_low) / (x_high - x_low) * area.width());
    let y_of = |y: f64| px(area.bottom - y_axis.fraction(y) * area.height());

    let x_ticks = if log {
        log2_ticks(x_low, x_high)
            .map(|power| {
                let x = power.exp2();
                Tick { at: x_of(x), label: value_text(x, &first.x_unit) }
            })
            .collect()
    } else {
        let axis = Linear::nice(x_low, x_high);
        axis.ticks()
            .filter(|x| (x_low..=x_high).contains(x))
            .map(|x| Tick { at: x_of(x), label: value_text(x, &first.x_unit) })
            .collect()
    };
    let lines = curves
        .iter()
        .enumerate()
        .map(|(index, (label, series))| {
            let markers: Vec<Marker> = series
                .points
                .iter()
                .map(|(x, y)| Marker {
                    x: x_of(*x),
                    y: y_of(*y),
                    title: format!("{label}: {} → {}", value_text(*x, &series.x_unit), value_text(*y, &series.y_unit)),
                })
                .collect();
            let points =
                markers.iter().map(|marker| format!("{},{}", marker.x, marker.y)).collect::<Vec<_>>().join(" ");
            Line { class: format!("series-{}", index % PALETTE), label: label.clone(), points, markers }
        })
        .collect();
    let rules = thresholds
        .iter()
        .map(|(threshold, value)| Rule {
            x1: area.left,
            x2: area.right,
            y: y_of(*value),
            label: threshold.label.clone(),
        })
        .collect();
    Some(LineChart {
        title: title.to_owned(),
        width,
        height,
        area,
        x_title: axis_title(&first.x_label, if first.x_unit == "B" { "bytes" } else { &first.x_unit }),
        y_title: axis_title(&first.y_label, &first.y_unit),
        x_ticks,
        y_ticks: y_ticks(&y_axis, area),
        lines,
        rules,
        thresholds: thresholds.iter().map(|(threshold, _)| threshold.clone()).collect(),
    })
}

/// Whole powers of two in `[low, high]`, every n-th so that at most
/// [`MAX_TICKS`] remain, aligned to multiples of n (so 2¹⁰, 2²⁰, 2³⁰ read as
/// KiB, MiB, GiB when n divides 10).
fn log2_ticks(low: f64, high: f64) -> impl Iterator<Item = f64> {
    let first = low.ceil() as i64;
    let last = high.floor() as i64;
    let count = (last - first + 1).max(1) as usize;
    let every = [1_usize, 2, 4, 5, 8, 10, 16, 20]
        .into_iter()
        .find(|every| count.div_ceil(*every) <= MAX_TICKS)
        .unwrap_or(count / MAX_TICKS + 1);
    let every = i64::try_from(every).unwrap_or(i64::MAX);
    (first..=last).filter(move |power| power.rem_euclid(every) == 0).map(|power| power as f64)
}

/// A bar chart of one measurement across `(subject, measurement)` pairs.
/// `None` for no bars, or when every value is zero (an error count that stayed
/// 0 everywhere): there is nothing to compare, the table says it.
#[must_use]
pub fn bar_chart(title: &str, bars: &[(&str, &Measurement)]) -> Option<BarChart> {
    let unit = &bars.first()?.1.unit;
    if bars.iter().all(|(_, measurement)| measurement.value.abs() < f64::MIN_POSITIVE) {
        return None;
    }
    let count = bars.len();
    let width =
        (64.0 + RIGHT_MARGIN + count as f64 * if count > LABELLED_BARS { 8.0 } else { 44.0 }).clamp(400.0, 960.0);
    let slot = (width - 64.0 - RIGHT_MARGIN) / count as f64;
    let longest = bars.iter().map(|(subject, _)| subject.chars().count()).max().unwrap_or(0) as f64;
    let labels = if count > LABELLED_BARS {
        "hidden"
    } else if slot >= longest * CHAR_WIDTH + 8.0 {
        "upright"
    } else {
        "slanted"
    };
    // Slanted labels hang below the axis by their length times sin(50°).
    let bottom_margin = match labels {
        "upright" => 40.0,
        "slanted" => (longest * CHAR_WIDTH * 0.77 + 24.0).clamp(40.0, 160.0),
        _ => 16.0,
    };
    let widest_value = bars.iter().map(|(_, m)| format_number(m.value).len()).max().unwrap_or(0) as f64;
    let show_values = count <= LABELLED_BARS && slot >= widest_value * CHAR_WIDTH + 4.0;
    let height = px(240.0 + bottom_margin);
    let area = Area { left: 64.0, top: 20.0, right: width - RIGHT_MARGIN, bottom: height - bottom_margin };
    let thresholds = || bars.iter().filter_map(|(_, measurement)| measurement.threshold.as_ref());
    let high = bars.iter().map(|(_, m)| m.value).chain(thresholds().map(|t| t.value)).fold(0.0_f64, f64::max);
    let low = bars.iter().map(|(_, m)| m.value).chain(thresholds().map(|t| t.value)).fold(0.0_f64, f64::min);
    let axis = Linear::nice(low, high);
    let y_of = |y: f64| px(area.bottom - axis.fraction(y) * area.height());
    let bar_width = px((slot * 0.7).clamp(1.0, MAX_BAR_WIDTH));
    let zero = y_of(0.0);

    let mut rules = Vec::new();
    let mut legend: Vec<Threshold> = Vec::new();
    for (_, measurement) in bars {
        if let Some(threshold) = &measurement.threshold {
            let entry = Threshold {
                label: threshold_text(threshold.comparison, threshold.value, unit),
                caption: threshold.source.to_string(),
            };
            if !legend.contains(&entry) {
                legend.push(entry);
            }
        }
    }
    let first_threshold = bars[0].1.threshold.as_ref();
    let shared = bars.iter().all(|(_, measurement)| {
        measurement.threshold.as_ref().map(|t| (t.comparison, t.value))
            == first_threshold.map(|t| (t.comparison, t.value))
    });
    if shared && let Some(threshold) = first_threshold {
        rules.push(Rule {
            x1: area.left,
            x2: area.right,
            y: y_of(threshold.value),
            label: threshold_text(threshold.comparison, threshold.value, unit),
        });
    }
    let bars = bars
        .iter()
        .enumerate()
        .map(|(index, (subject, measurement))| {
            let left = area.left + slot * index as f64 + (slot - bar_width) / 2.0;
            let top = y_of(measurement.value.max(0.0));
            let bottom = y_of(measurement.value.min(0.0));
            if !shared && let Some(threshold) = &measurement.threshold {
                rules.push(Rule {
                    x1: px(left - 2.0),
                    x2: px(left + bar_width + 2.0),
                    y: y_of(threshold.value),
                    label: String::new(),
                });
            }
            let class = match measurement.passes() {
                Some(true) => "pass",
                Some(false) => "fail",
                None => "info",
            };
            let value = value_text(measurement.value, unit);
            let title = match &measurement.threshold {
                Some(threshold) => format!(
                    "{subject}: {value} (threshold {})",
                    threshold_text(threshold.comparison, threshold.value, unit)
                ),
                None => format!("{subject}: {value}"),
            };
            Bar {
                x: px(left),
                y: top.min(zero),
                width: bar_width,
                height: px((bottom - top).abs().max(0.5)),
                class,
                label: (*subject).to_owned(),
                center: px(left + bar_width / 2.0),
                value: format_number(measurement.value),
                title,
            }
        })
        .collect();
    Some(BarChart {
        title: title.to_owned(),
        width: px(width),
        height,
        area,
        y_title: unit.clone(),
        y_ticks: y_ticks(&axis, area),
        bars,
        rules,
        thresholds: legend,
        labels,
        show_values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Comparison, Provenance, ProvenanceKind, Threshold};

    fn series(points: Vec<(f64, f64)>) -> Series {
        Series {
            name: "busbw".into(),
            x_label: "message size".into(),
            x_unit: "B".into(),
            x_scale: AxisScale::Log2,
            y_label: "bus bandwidth".into(),
            y_unit: "GB/s".into(),
            points,
        }
    }

    fn measured(value: f64, limit: Option<f64>) -> Measurement {
        Measurement {
            name: "read".into(),
            value,
            unit: "MB/s".into(),
            threshold: limit.map(|value| Threshold {
                comparison: Comparison::AtLeast,
                value,
                source: Provenance { kind: ProvenanceKind::Default, detail: "d".into() },
            }),
        }
    }

    #[test]
    fn nice_axes_cover_the_data_with_round_steps() {
        let axis = Linear::nice(0.0, 469.21);
        assert!((axis.step - 100.0).abs() < 1e-9, "{}", axis.step);
        assert!((axis.high - 500.0).abs() < 1e-9);
        assert_eq!(axis.ticks().count(), 6);
        let flat = Linear::nice(0.0, 0.0);
        assert!(flat.high > flat.low);
    }

    #[test]
    fn log2_axis_of_8_bytes_to_16_gib_has_aligned_byte_labels() {
        let data = series((3..=34).map(|power| (f64::from(power).exp2(), f64::from(power))).collect());
        let chart = line_chart("t", &[("a".into(), &data)], &[]).expect("chart");
        let labels: Vec<&str> = chart.x_ticks.iter().map(|tick| tick.label.as_str()).collect();
        assert_eq!(labels, ["16 B", "256 B", "4 KiB", "64 KiB", "1 MiB", "16 MiB", "256 MiB", "4 GiB"]);
        assert_eq!(chart.lines[0].markers.len(), 32);
        assert_eq!(chart.lines[0].points.split(' ').count(), 32);
        // Leftmost point on the left edge, rightmost on the right edge, increasing.
        let xs: Vec<f64> = chart.lines[0].markers.iter().map(|marker| marker.x).collect();
        assert!((xs[0] - chart.area.left).abs() < 0.1 && (xs[31] - chart.area.right).abs() < 0.1);
        assert!(xs.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn thresholds_extend_the_y_axis_and_are_drawn() {
        let data = series(vec![(8.0, 0.0), (16.0, 0.0)]);
        let threshold = super::Threshold { label: "≥ 320 GB/s".into(), caption: "model".into() };
        let chart = line_chart("t", &[("a".into(), &data)], &[(threshold, 320.0)]).expect("chart");
        assert_eq!(chart.rules.len(), 1);
        assert!(chart.rules[0].y > chart.area.top - 0.1 && chart.rules[0].y < chart.area.bottom);
        assert!(chart.y_ticks.last().is_some_and(|tick| tick.label.parse::<f64>().is_ok_and(|top| top >= 320.0)));
    }

    #[test]
    fn bars_are_coloured_by_their_threshold_and_share_one_rule() {
        let (good, bad) = (measured(216.35, Some(100.0)), measured(50.0, Some(100.0)));
        let chart = bar_chart("t", &[("node01", &good), ("node02", &bad)]).expect("chart");
        let classes: Vec<&str> = chart.bars.iter().map(|bar| bar.class).collect();
        assert_eq!(classes, ["pass", "fail"]);
        assert_eq!(chart.rules.len(), 1);
        assert!(chart.bars[0].height > chart.bars[1].height);
        // Bars stand on the zero line.
        let base = chart.bars[0].y + chart.bars[0].height;
        assert!((base - (chart.bars[1].y + chart.bars[1].height)).abs() < 0.2);
        assert_eq!(chart.labels, "upright");
    }

    #[test]
    fn differing_thresholds_get_a_mark_per_bar() {
        let (one, two, none) = (measured(1.0, Some(2.0)), measured(3.0, Some(1.0)), measured(2.0, None));
        let chart = bar_chart("t", &[("a", &one), ("b", &two), ("c", &none)]).expect("chart");
        assert_eq!(chart.rules.len(), 2);
        assert_eq!(chart.bars.iter().map(|bar| bar.class).collect::<Vec<_>>(), ["fail", "pass", "info"]);
    }

    #[test]
    fn all_zero_bars_are_not_drawn() {
        let zero = measured(0.0, Some(0.0));
        assert!(bar_chart("t", &[("a", &zero), ("b", &zero)]).is_none());
        assert!(bar_chart("t", &[]).is_none());
    }

    #[test]
    fn many_bars_slant_then_hide_labels() {
        let value = measured(1.0, None);
        let names: Vec<String> = (0..100).map(|index| format!("node{index:03}")).collect();
        let bars: Vec<(&str, &Measurement)> = names.iter().map(|name| (name.as_str(), &value)).collect();
        assert_eq!(bar_chart("t", &bars[..20]).expect("chart").labels, "slanted");
        let chart = bar_chart("t", &bars).expect("chart");
        assert_eq!(chart.labels, "hidden");
        assert!(chart.width <= 960.0);
        assert!(chart.bars.iter().all(|bar| bar.width >= 1.0));
    }
}
