//! Integration tests: the acceptance results examples and `toolkit report`.
//!
//! The examples in `tests/fixtures/results/` carry numbers from real tool
//! outputs kept beside them; the first tests re-read those outputs so an edited
//! number fails here. Then each format: Markdown and JUnit as snapshots (JUnit
//! also parsed as XML), HTML checked for escaping, charts, order and
//! self-containment, and rendered by headless Chromium when it is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolkit::report::{self, Format};
use toolkit::results::{
    AxisScale, Comparison, Docs, Evidence, InputFile, Measurement, Provenance, ProvenanceKind, Results, Run, Scope,
    Series, SubjectResult, Threshold, Timeline, TimelineRow, ValidatorResult, Verdict,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results").join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).expect("fixture")
}

fn example(name: &str) -> Results {
    Results::from_json(&read(name), name).unwrap_or_else(|error| panic!("{error}"))
}

fn validator<'a>(results: &'a Results, id: &str) -> &'a ValidatorResult {
    results.validators.iter().find(|validator| validator.id == id).expect("validator")
}

fn subject<'a>(validator: &'a ValidatorResult, name: &str) -> &'a SubjectResult {
    validator.subjects.iter().find(|subject| subject.subject == name).expect("subject")
}

fn measurement<'a>(subject: &'a SubjectResult, name: &str) -> &'a Measurement {
    subject.measurements.iter().find(|measurement| measurement.name == name).expect("measurement")
}

/// nccl-tests data rows: 13 tokens starting with the size (see validators.md §3).
fn nccl_rows(name: &str) -> Vec<Vec<String>> {
    read(name)
        .lines()
        .map(|line| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|tokens| tokens.len() == 13 && tokens[0].parse::<u64>().is_ok())
        .collect()
}

fn number(token: &str) -> f64 {
    token.parse().expect("number")
}

fn close(left: f64, right: f64) -> bool {
    (left - right).abs() <= 1e-9 * right.abs().max(1.0)
}

// --- the examples carry real numbers ------------------------------------------------

#[test]
fn nccl_example_numbers_are_the_real_outputs() {
    let results = example("spod1-failures.json");
    let cases = [
        ("nccl-pairwise", "dgx001+dgx002", "nccl_all_reduce_2node_h100_ib_ndr_xe9680.txt"),
        ("nccl-local", "dgx001", "nccl_all_reduce_1node_8xh100_dgx_nvlink.txt"),
    ];
    for (id, name, output) in cases {
        let rows = nccl_rows(output);
        assert_eq!(rows.len(), 32, "{output}");
        let subject = subject(validator(&results, id), name);
        for (series, column) in [("busbw, out-of-place", 7), ("busbw, in-place", 11)] {
            let series = subject.series.iter().find(|found| found.name == series).expect("series");
            assert_eq!(series.x_scale, AxisScale::Log2);
            let expected: Vec<(f64, f64)> = rows.iter().map(|row| (number(&row[0]), number(&row[column]))).collect();
            assert_eq!(series.points, expected, "{id} {name} {}", series.name);
        }
        let largest = subject.measurements[0].value;
        assert!(close(largest, number(&rows[31][11])), "{id}: {largest}");
        // The evidence is the output's real tail.
        let evidence = subject.evidence.as_ref().expect("evidence");
        let text = read(output);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(evidence.output_tail, lines[lines.len() - evidence.output_tail.len()..]);
        assert_eq!(evidence.omitted_lines + evidence.output_tail.len(), lines.len());
    }
    let failing = subject(validator(&results, "nccl-pairwise"), "dgx003+dgx004");
    let rows = nccl_rows("nccl_all_reduce_2node_h100_fail_busbw0_nonmpi_build.txt");
    let last = rows.last().expect("rows");
    assert!(close(measurement(failing, "in-place busbw at the largest size").value, number(&last[11])));
    assert!(read("nccl_all_reduce_2node_h100_fail_busbw0_nonmpi_build.txt").contains("nranks 1 "));
    assert!(close(measurement(failing, "ranks in the communicator").value, 1.0));
    let error = subject(validator(&results, "nccl-local"), "dgx005");
    assert_eq!(error.verdict, Verdict::Error);
    assert!(error.measurements.is_empty(), "an output that did not run has no number");
}

#[test]
fn fio_example_numbers_are_the_real_output() {
    let results = example("lab.json");
    let fio: serde_json::Value =
        serde_json::from_str(&read("fio_3.14_randread_4k_qd16_nj16_sata_ssd.json")).expect("fio json");
    let read_stats = &fio["jobs"][0]["read"];
    let bandwidth = read_stats["bw_bytes"].as_f64().expect("bw") / 1e6;
    let iops = read_stats["iops"].as_f64().expect("iops");
    let p99 = read_stats["clat_ns"]["percentile"]["99.000000"].as_f64().expect("p99") / 1e6;
    let storage = validator(&results, "storage-fio");
    assert_eq!(storage.subjects.len(), 4);
    for subject in &storage.subjects {
        assert!(close(measurement(subject, "random 4 KiB read bandwidth").value, bandwidth));
        assert!(close(measurement(subject, "random 4 KiB read IOPS").value, iops));
        assert!(close(measurement(subject, "read completion latency p99").value, p99));
        assert_eq!(subject.duration_seconds, Some(read_stats["runtime"].as_f64().expect("runtime") / 1000.0));
    }
}

#[test]
fn example_verdicts_and_exit_statuses() {
    let lab = example("lab.json");
    assert_eq!(lab.exit_status(), 0, "a skipped validator does not fail the run");
    assert_eq!(lab.summary.subjects.skipped, 1);
    let spod = example("spod1-failures.json");
    assert_eq!(spod.exit_status(), 2);
    assert_eq!((spod.summary.subjects.failed, spod.summary.subjects.error), (2, 1));
}

// --- Markdown and JUnit -------------------------------------------------------------

#[test]
fn markdown_of_the_examples() {
    insta::assert_snapshot!("lab_markdown", report::render(&example("lab.json"), Format::Markdown).expect("md"));
    insta::assert_snapshot!(
        "spod1_markdown",
        report::render(&example("spod1-failures.json"), Format::Markdown).expect("md")
    );
}

#[test]
fn junit_of_the_examples() {
    insta::assert_snapshot!("lab_junit", report::render(&example("lab.json"), Format::Junit).expect("junit"));
    insta::assert_snapshot!(
        "spod1_junit",
        report::render(&example("spod1-failures.json"), Format::Junit).expect("junit")
    );
}

#[test]
fn junit_is_well_formed_and_mirrors_the_results() {
    for name in ["lab.json", "spod1-failures.json"] {
        let results = example(name);
        let xml = report::render(&results, Format::Junit).expect("junit");
        let document = roxmltree::Document::parse(&xml).unwrap_or_else(|error| panic!("{name}: {error}"));
        let root = document.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        let subjects = results.summary.subjects;
        let attribute = |node: roxmltree::Node<'_, '_>, key: &str| node.attribute(key).map(str::to_owned);
        assert_eq!(attribute(root, "tests"), Some(subjects.total().to_string()));
        assert_eq!(attribute(root, "failures"), Some(subjects.failed.to_string()));
        assert_eq!(attribute(root, "errors"), Some(subjects.error.to_string()));
        assert_eq!(attribute(root, "skipped"), Some(subjects.skipped.to_string()));
        assert!(root.attribute("time").is_some_and(|time| time.parse::<f64>().is_ok()));
        let suites: Vec<_> = root.children().filter(|node| node.has_tag_name("testsuite")).collect();
        assert_eq!(suites.len(), results.validators.len());
        for (suite, validator) in suites.iter().zip(&results.validators) {
            assert_eq!(suite.attribute("name"), Some(validator.id.as_str()));
            let counts = validator.counts();
            assert_eq!(attribute(*suite, "tests"), Some(counts.total().to_string()));
            assert_eq!(attribute(*suite, "failures"), Some(counts.failed.to_string()));
            let cases: Vec<_> = suite.children().filter(|node| node.has_tag_name("testcase")).collect();
            assert_eq!(cases.len(), validator.subjects.len());
            for (case, subject) in cases.iter().zip(&validator.subjects) {
                assert_eq!(case.attribute("name"), Some(subject.subject.as_str()));
                assert_eq!(case.attribute("classname"), Some(validator.id.as_str()));
                assert_eq!(
                    case.attribute("time").map(|time| time.parse::<f64>().expect("time")),
                    subject.duration_seconds.map(|seconds| (seconds * 1000.0).round() / 1000.0)
                );
                let child = |tag: &str| case.children().find(|node| node.has_tag_name(tag));
                let expected = match subject.verdict {
                    Verdict::Failed => Some("failure"),
                    Verdict::Error => Some("error"),
                    Verdict::Skipped => Some("skipped"),
                    Verdict::Passed | Verdict::Warning => None,
                };
                for tag in ["failure", "error", "skipped"] {
                    assert_eq!(child(tag).is_some(), expected == Some(tag), "{name} {} {tag}", subject.subject);
                }
                if let Some(tag) = expected {
                    let element = child(tag).expect("element");
                    assert_eq!(element.attribute("message"), subject.reason.as_deref());
                    if let Some(evidence) = &subject.evidence {
                        let body = element.text().expect("body");
                        assert!(body.contains(&evidence.command), "{body}");
                        assert!(body.contains(evidence.output_tail.last().expect("tail")), "{body}");
                    }
                }
            }
        }
    }
}

// --- HTML ---------------------------------------------------------------------------

const HOSTILE: &str = "<script>alert(1)</script>";

/// Results with hostile text in every field a person or tool output controls.
fn hostile_results() -> Results {
    let source = Provenance { kind: ProvenanceKind::Blueprint, detail: format!("key {HOSTILE}") };
    let failing = SubjectResult {
        subject: HOSTILE.to_owned(),
        verdict: Verdict::Failed,
        reason: Some(format!("reason {HOSTILE} `{HOSTILE}`")),
        measurements: vec![Measurement {
            name: format!("bw {HOSTILE}"),
            value: 1.0,
            unit: "<b>GB/s</b>".to_owned(),
            threshold: Some(Threshold { comparison: Comparison::AtLeast, value: 2.0, source: source.clone() }),
        }],
        series: vec![Series {
            name: format!("series {HOSTILE}"),
            x_label: HOSTILE.to_owned(),
            x_unit: "B".to_owned(),
            x_scale: AxisScale::Log2,
            y_label: HOSTILE.to_owned(),
            y_unit: "<b>GB/s</b>".to_owned(),
            points: vec![(8.0, 1.0), (16.0, 2.0), (32.0, 3.0)],
        }],
        timelines: vec![Timeline {
            name: format!("checks {HOSTILE}"),
            times: vec![0.0, 3600.0],
            rows: vec![TimelineRow {
                name: HOSTILE.to_owned(),
                failing: vec![vec![HOSTILE.to_owned()], vec![]],
                silent: vec![false, true],
            }],
            passing: vec![HOSTILE.to_owned()],
        }],
        evidence: Some(Evidence::from_output(
            format!("echo '{HOSTILE}'"),
            Some(1),
            &format!("line\n{HOSTILE}\n\u{1b}[31m</pre><img src=x onerror=alert(2)>\u{1b}[0m\n"),
            10,
        )),
        duration_seconds: Some(1.0),
    };
    let mut second = failing.clone();
    second.subject = format!("{HOSTILE} 2");
    Results::new(
        Run {
            cluster: HOSTILE.to_owned(),
            blueprint: InputFile { path: format!("{HOSTILE}.yaml"), sha256: "0".repeat(64) },
            inventory: None,
            toolkit_version: HOSTILE.to_owned(),
            started: "2026-11-20T10:00:00Z".parse().expect("time"),
            finished: "2026-11-20T10:01:00Z".parse().expect("time"),
        },
        vec![ValidatorResult {
            id: HOSTILE.to_owned(),
            title: HOSTILE.to_owned(),
            failure: HOSTILE.to_owned(),
            docs: Docs { what: HOSTILE.to_owned(), why: HOSTILE.to_owned(), fix: format!("`{HOSTILE}`") },
            scope: Scope::Node,
            duration_seconds: None,
            subjects: vec![failing, second],
        }],
    )
}

#[test]
fn html_escapes_every_string() {
    let results = hostile_results();
    assert!(results.problems().is_empty(), "{:?}", results.problems());
    let html = report::render(&results, Format::Html).expect("html");
    assert!(!html.contains("<script"), "a raw script tag leaked");
    assert!(!html.contains("<img"), "a raw img tag leaked");
    assert!(!html.contains("<b>"), "a raw b tag leaked");
    assert!(!html.contains("</pre><"), "evidence closed its <pre>");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;"), "the node name is shown, escaped");
    assert!(html.contains("<svg"), "the chart is drawn for hostile labels too");
    assert!(html.contains("<figure class=\"strip-chart\">"), "the health history is drawn for hostile names too");
    // Markdown and JUnit escape as well.
    let markdown = report::render(&results, Format::Markdown).expect("md");
    let outside_code: String =
        markdown.split("```").step_by(2).flat_map(|part| part.split('`').step_by(2)).collect::<Vec<_>>().join("");
    // `\<` is an escaped, literal `<`.
    assert!(!outside_code.replace("\\<", "").contains("<script"), "{markdown}");
    let junit = report::render(&results, Format::Junit).expect("junit");
    let document = roxmltree::Document::parse(&junit).expect("well-formed despite markup and escape codes");
    let case = document.descendants().find(|node| node.has_tag_name("testcase")).expect("testcase");
    assert_eq!(case.attribute("name"), Some(HOSTILE));
}

#[test]
fn html_draws_the_nccl_curves_with_every_point() {
    let results = example("spod1-failures.json");
    let html = report::render(&results, Format::Html).expect("html");
    let figures: Vec<&str> = html
        .split("<figure class=\"line-chart\">")
        .skip(1)
        .map(|rest| rest.split("</figure>").next().unwrap_or(""))
        .collect();
    // nccl-local (dgx001) and nccl-pairwise (dgx001+dgx002), two series each.
    assert_eq!(figures.len(), 2);
    for figure in figures {
        assert!(figure.contains("<svg"));
        assert_eq!(figure.matches("<polyline").count(), 2);
        assert_eq!(figure.matches("<circle class=\"point\"").count(), 64);
        for polyline in figure.split("<polyline class=\"line\" points=\"").skip(1) {
            let points = polyline.split('"').next().unwrap_or("");
            assert_eq!(points.split(' ').count(), 32, "{points}");
        }
        // Labelled log2 axis and the threshold line.
        for label in ["16 B", "4 KiB", "1 MiB", "4 GiB", "message size (bytes)"] {
            assert!(figure.contains(&format!(">{label}</text>")), "{label}");
        }
        assert!(figure.contains("<line class=\"threshold\""));
    }
    // Bar charts: bandwidth and ranks per pair; the all-zero error count is not drawn.
    assert!(html.contains("in-place busbw at the largest size per node-pair"));
    assert!(html.contains("ranks in the communicator per node-pair"));
    assert!(!html.contains("out-of-bounds values per node-pair"));
    let lab = report::render(&example("lab.json"), Format::Html).expect("html");
    let (_, bars) = lab.split_once("random 4 KiB read bandwidth per node").expect("storage bar chart");
    let bars = bars.split("</figure>").next().unwrap_or("");
    assert_eq!(bars.matches("<rect class=\"bar pass\"").count(), 4);
    assert_eq!(bars.matches("<line class=\"threshold\"").count(), 1, "one shared threshold line");
}

#[test]
fn html_draws_the_health_history_one_row_per_failing_node() {
    let mut results = example("lab.json");
    let hour = |index: u32| 1_795_680_000.0 + f64::from(index) * 3600.0;
    let failing = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>();
    results.validators[0].subjects[0].timelines.push(Timeline {
        name: "toolkit health checks".to_owned(),
        times: (0..168).map(hour).collect(),
        rows: vec![
            TimelineRow {
                name: "node02".to_owned(),
                failing: (0..168)
                    .map(|at| if (100..110).contains(&at) { failing(&["rail-links"]) } else { vec![] })
                    .collect(),
                silent: vec![],
            },
            TimelineRow {
                name: "node07".to_owned(),
                failing: (0..168)
                    .map(|at| if at == 3 || at == 160 { failing(&["gpu", "xid"]) } else { vec![] })
                    .collect(),
                silent: vec![],
            },
            // Powered off for the last two days: no data, not passing.
            TimelineRow {
                name: "node09".to_owned(),
                failing: vec![vec![]; 168],
                silent: (0..168).map(|at| at >= 120).collect(),
            },
        ],
        passing: (0..4093).map(|index| format!("gpu{index:04}")).collect(),
    });
    assert!(results.problems().is_empty(), "{:?}", results.problems());
    let html = report::render(&results, Format::Html).expect("html");
    let (_, figure) = html.split_once("<figure class=\"strip-chart\">").expect("a strip chart");
    let figure = figure.split("</figure>").next().unwrap_or("");
    assert!(figure.contains("nodes failing toolkit health checks over time"));
    assert_eq!(figure.matches("<rect class=\"strip\"").count(), 3, "one row per failing or silent node, not 4,096");
    assert_eq!(figure.matches("<rect class=\"failing\"").count(), 3, "node02's ten hours are one stretch");
    assert!(figure.contains("<title>node02, 11-30 12:00 to 11-30 22:00 UTC: rail-links</title>"), "{figure}");
    assert!(figure.contains("<title>node07, 11-26 11:00 to 11-26 12:00 UTC: gpu, xid</title>"), "{figure}");
    assert_eq!(figure.matches("<rect class=\"silent\"").count(), 1, "node09's two days are one grey stretch");
    assert!(
        figure.contains(
            "<title>node09, 12-01 08:00 to 12-03 08:00 UTC: no data (no health check ran or was scraped)</title>"
        ),
        "{figure}"
    );
    assert!(figure.contains("4093 nodes never failed; grey: no data"), "{figure}");
    let markdown = report::render(&results, Format::Markdown).expect("md");
    assert!(markdown.contains("- node02: rail-links in 10 of 168 buckets\n"), "{markdown}");
    assert!(markdown.contains("- node09: no data in 48 of 168 buckets\n"), "{markdown}");
    assert!(markdown.contains("- 4093 nodes never failed\n"), "{markdown}");
}

#[test]
fn html_lists_failures_before_passes() {
    let results = example("spod1-failures.json");
    let html = report::render(&results, Format::Html).expect("html");
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("missing {needle}"));
    assert!(at("class=\"verdict failed\"") < at("id=\"failures\""));
    assert!(at("id=\"failures\"") < at("id=\"validators\""));
    let failures = &html[at("id=\"failures\"")..at("id=\"validators\"")];
    // Errors first, then failures; passing subjects are not in the failures section.
    let (error, failed) = (failures.find("dgx005").expect("error"), failures.find("dgx003+dgx004").expect("failed"));
    assert!(error < failed);
    assert!(!failures.contains("dgx001+dgx002"));
    // In the validator's table the failing pair comes first although it ran second.
    let pairwise = &html[at("id=\"validator-1\"")..];
    let table = &pairwise[pairwise.find("<table class=\"subjects\">").expect("table")..];
    assert!(table.find("dgx003+dgx004").expect("failed") < table.find("dgx001+dgx002").expect("passed"));

    // A passing validator that ran first is listed after a failing one.
    let mut reordered = results.clone();
    reordered.validators.rotate_left(3); // storage-ior (skipped) first
    let passing = ValidatorResult {
        id: "first-passing".into(),
        subjects: vec![SubjectResult::judged("dgx001", Vec::new())],
        ..results.validators[0].clone()
    };
    reordered.validators.insert(0, passing);
    let reordered = Results::new(reordered.run.clone(), reordered.validators);
    let html = report::render(&reordered, Format::Html).expect("html");
    let overview = &html[html.find("<table class=\"overview\">").expect("overview")..];
    let first_failed = overview.find(">nccl-pairwise<").expect("failed");
    assert!(first_failed < overview.find(">first-passing<").expect("passed"));
    assert!(overview.find(">first-passing<").expect("passed") < overview.find(">storage-ior<").expect("skipped"));
}

#[test]
fn html_is_self_contained() {
    for name in ["lab.json", "spod1-failures.json"] {
        let html = report::render(&example(name), Format::Html).expect("html");
        for forbidden in
            ["http://", "https://", "src=", "<link", "<script", "@import", "url(", "<img", "<iframe", "xlink:href"]
        {
            assert!(!html.contains(forbidden), "{name} contains `{forbidden}`");
        }
        for link in html.split("href=\"").skip(1) {
            assert!(link.starts_with('#'), "{name}: non-local link {}", &link[..link.len().min(40)]);
        }
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<style>") && html.contains("@media print"));
    }
}

// --- the command --------------------------------------------------------------------

fn toolkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolkit")).args(args).env("NO_COLOR", "1").output().expect("toolkit runs")
}

#[test]
fn report_command_writes_each_format_and_exits_zero_even_for_failed_results() {
    let dir = tempfile::tempdir().expect("temp dir");
    let results = fixture("spod1-failures.json");
    let results = results.to_str().expect("utf-8 path");
    for (format, marker) in [
        ("html", "<!DOCTYPE html>"),
        ("junit", "<testsuites"),
        ("json", "\"format_version\": 1"),
        ("md", "# Acceptance report: spod1"),
    ] {
        let out = dir.path().join(format!("report.{format}"));
        let run = toolkit(&["report", results, "--format", format, "--out", out.to_str().expect("path")]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(0), "{format}: {stderr}");
        assert!(run.stdout.is_empty(), "--out writes nothing to stdout");
        assert!(stderr.contains("spod1: FAILED"), "{stderr}");
        let written = std::fs::read_to_string(&out).expect("written");
        assert!(written.contains(marker), "{format}");
        // The report equals what stdout gets without --out.
        let stdout = toolkit(&["report", results, "--format", format]);
        assert_eq!(String::from_utf8_lossy(&stdout.stdout), written);
    }
    // No temp file is left beside the output.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    // The JSON format is the document itself: it reads back identical.
    let json = std::fs::read_to_string(dir.path().join("report.json")).expect("json");
    assert_eq!(Results::from_json(&json, "report.json").expect("parses"), example("spod1-failures.json"));
}

#[test]
fn report_command_locates_malformed_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("broken.json");
    let mut text = read("lab.json");
    let cut = text.find("\"toolkit_version\"").expect("field");
    text.insert_str(cut, "oops ");
    std::fs::write(&path, &text).expect("write");
    let line = text[..cut].matches('\n').count() + 1;
    let run = toolkit(&["report", path.to_str().expect("path"), "--format", "md"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("broken.json:{line}:")), "{stderr}");
    assert!(run.stdout.is_empty());

    // An inconsistent document is refused with every problem listed.
    let mut value: serde_json::Value = serde_json::from_str(&read("spod1-failures.json")).expect("json");
    value["summary"]["subjects"]["failed"] = 0.into();
    value["validators"][1]["subjects"][1]["reason"] = serde_json::Value::Null;
    std::fs::write(&path, serde_json::to_string(&value).expect("json")).expect("write");
    let run = toolkit(&["report", path.to_str().expect("path")]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("2 problem(s)"), "{stderr}");
    assert!(stderr.contains("validators[1].subjects[1].reason"), "{stderr}");
}

// --- headless Chromium --------------------------------------------------------------

/// The Chromium binary, or `None` (with a note) when absent and not required.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"].into_iter().find_map(|name| {
        std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(name)).find(|path| path.is_file())
    });
    if found.is_none() {
        crate::support::cannot_run("chromium is not installed: apt-get install chromium");
    }
    found
}

fn headless(browser: &Path, args: &[&str], page: &Path) -> std::process::Output {
    let url = format!("file://{}", page.display());
    Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs")
}

#[test]
fn chromium_renders_the_report() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("report.html");
    std::fs::write(&page, report::render(&example("spod1-failures.json"), Format::Html).expect("html")).expect("write");

    let dom = headless(&browser, &["--dump-dom"], &page);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("Acceptance report: spod1"), "{dom}");
    assert!(dom.contains("class=\"verdict failed\""));
    assert!(dom.contains(">FAILED<"));
    assert!(dom.contains("Failures (3)"));
    // The browser parsed the inline SVG into elements with every point.
    assert_eq!(dom.matches("<svg").count(), 4, "2 line charts, 2 bar charts");
    assert_eq!(dom.matches("<circle class=\"point\"").count(), 128);

    let screenshot = dir.path().join("report.png");
    let shot =
        headless(&browser, &["--window-size=1100,2000", &format!("--screenshot={}", screenshot.display())], &page);
    let png = std::fs::read(&screenshot)
        .unwrap_or_else(|error| panic!("no screenshot ({error}): {}", String::from_utf8_lossy(&shot.stderr)));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // IHDR: width and height as drawn.
    let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
    let height = u32::from_be_bytes([png[20], png[21], png[22], png[23]]);
    assert_eq!((width, height), (1100, 2000));
    // A blank page compresses to a few kilobytes; the report does not.
    assert!(png.len() > 50_000, "screenshot is {} bytes: blank?", png.len());
}
