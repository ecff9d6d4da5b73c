//! `toolkit validate BLUEPRINT -i INVENTORY`: run the acceptance tests, print a
//! summary, write the results JSON, and optionally drain failing nodes in Slurm.
//!
//! Exit codes: 0 every validator passed (warnings and skips allowed), 2 a subject
//! failed or could not be checked, 1 toolkit itself could not run (bad inputs, no
//! results written). Progress goes to stderr; the summary table (or, with
//! `--output json`, the results document) to stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use tabled::settings::Style;
use tabled::{Table, Tabled};
use tokio_util::sync::CancellationToken;

use crate::blueprint::schema::{Role, SchedulerKind};
use crate::cli::live::{self, SshArgs};
use crate::cli::{OutputFormat, Status, emit, load_checked};
use crate::compile::text_sha256;
use crate::inventory::LoadedInventory;
use crate::plan::state::write_atomic;
use crate::results::{InputFile, Results, Run, ValidatorResult, Verdict};
use crate::transport::Connector as _;
use crate::transport::Executor as _;
use crate::transport::session::SshPool;
use crate::validate::catalog::Catalog;
use crate::validate::kube::{JobHosts, JobSettings};
use crate::validate::run::{self, Disposition, Planned, Progress, RunOptions};
use crate::validate::subjects::{Site, expand_hostlist};
use crate::validate::{drain, expr};

/// Arguments of `toolkit validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The blueprint YAML file.
    blueprint: PathBuf,
    /// The inventory YAML file (not needed with `--dry-run`).
    #[arg(short, long)]
    inventory: Option<PathBuf>,
    /// Run only these validators (comma-separated ids), even ones the blueprint skips.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Test only these nodes: names or Slurm hostlists, comma-separated (`node[01-04],gpu07`).
    #[arg(long)]
    nodes: Option<String>,
    /// Where to write the results JSON (default `results/<cluster>-<UTC time>.json`).
    #[arg(long)]
    results: Option<PathBuf>,
    /// A directory of more validators (`*.yaml`); one with a built-in's id replaces it.
    #[arg(long)]
    validators: Option<PathBuf>,
    /// Drain failing nodes in Slurm (reason `toolkit:<validator ids>`) and resume nodes
    /// toolkit drained once they pass again; nodes drained by people are left alone.
    #[arg(long)]
    drain_failed: bool,
    /// Show the validators, subjects and commands that would run; run nothing.
    #[arg(long)]
    dry_run: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    output: OutputFormat,
    /// Kubernetes: the image a validator's Jobs run (`ID=REF`, repeatable), instead of
    /// its `kubernetes.image`.
    #[arg(long = "image", value_name = "ID=REF")]
    images: Vec<String>,
    /// Kubernetes: the namespace of the validator Jobs (created if missing).
    #[arg(long, default_value = crate::validate::kube::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Kubernetes: seconds a Job may take to be scheduled and pull its image, on top
    /// of the validator's timeout.
    #[arg(long, default_value_t = 300)]
    kube_start_timeout: u64,
    #[command(flatten)]
    ssh: SshArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let Some(inputs) = load_checked(&args.blueprint, args.inventory.as_deref(), args.output) else {
        return Ok(Status::Error);
    };
    let model = crate::model::expand(&inputs.blueprint.blueprint)
        .with_context(|| format!("expanding `{}` (`toolkit lint` locates the cause)", args.blueprint.display()))?;
    let mut catalog = match Catalog::load(args.validators.as_deref()) {
        Ok(catalog) => catalog,
        Err(problems) => {
            crate::cli::print_diagnostics(&problems, args.output);
            return Ok(Status::Error);
        }
    };
    let on_kubernetes = model.blueprint.scheduler.kind == SchedulerKind::Kubernetes;
    if on_kubernetes {
        crate::validate::kube::adapt(&mut catalog);
    }
    let site =
        inputs.inventory.as_ref().map_or_else(|| Site::everything(&model), |i| Site::from_inventory(&i.inventory));
    let nodes = match &args.nodes {
        Some(text) => {
            Some(expand_hostlist(text).map_err(|problem| anyhow::anyhow!("--nodes: {problem}"))?.into_iter().collect())
        }
        None => None,
    };
    let only: Option<BTreeSet<String>> =
        (!args.only.is_empty()).then(|| args.only.iter().map(|id| id.trim().to_owned()).collect());
    let mut options = RunOptions { only, nodes, parallel: args.ssh.parallel.max(1), ..RunOptions::default() };
    let planned = match run::plan(&catalog, &model, &site, &options) {
        Ok(planned) => planned,
        Err(problems) => {
            for problem in problems {
                eprintln!("error: {problem}");
            }
            return Ok(Status::Error);
        }
    };
    let images = parse_images(&args.images)?;
    let mut planned = planned;
    if on_kubernetes {
        crate::validate::kube::restrict(&mut planned, &images);
    }
    if args.dry_run {
        print_preview(&planned, &model, &site, args.output)?;
        return Ok(Status::Clean);
    }
    let inventory = live::require_inventory(&inputs)?;
    let runtime = live::runtime()?;
    let started = jiff::Timestamp::now();
    let cancel = CancellationToken::new();
    options.cancel = Some(cancel.clone());
    options.progress = Some(progress_printer());
    let (outcome, drained) = if on_kubernetes {
        if args.drain_failed {
            bail!(
                "--drain-failed drains nodes in Slurm; this blueprint's scheduler is Kubernetes (cordon them with `kubectl cordon`)"
            );
        }
        let hosts = kube_hosts(args, inventory, &model, options.nodes.as_ref(), images)?;
        let outcome = runtime.block_on(async {
            let _ctrl_c = crate::apply::cancel_on_ctrl_c(cancel);
            hosts.prepare().await.map_err(|error| anyhow::anyhow!("validator Jobs' namespace: {error}"))?;
            let outcome = run::execute(&planned, &model, &site, &hosts, &options).await;
            for problem in hosts.delete_leftovers().await {
                eprintln!("warning: not deleted: {problem}");
            }
            anyhow::Ok(outcome)
        })?;
        (outcome, None)
    } else {
        let pool = live::pool(inventory, &args.ssh)?;
        runtime.block_on(run_over_ssh(args, &planned, &model, &site, &pool, &options, cancel))
    };
    let finished = jiff::Timestamp::now().max(started);
    let results = Results::new(
        Run {
            cluster: model.name.clone(),
            blueprint: InputFile {
                path: args.blueprint.display().to_string(),
                sha256: text_sha256(&inputs.blueprint.source.text),
            },
            inventory: inputs.inventory.as_ref().map(|loaded| InputFile {
                path: loaded.source.path.display().to_string(),
                sha256: text_sha256(&loaded.source.text),
            }),
            toolkit_version: env!("CARGO_PKG_VERSION").to_owned(),
            started,
            finished,
        },
        outcome.validators,
    );
    let problems = results.problems();
    if !problems.is_empty() {
        let listed: Vec<String> = problems.iter().map(|p| format!("  {}: {}", p.at, p.message)).collect();
        bail!("the run produced an inconsistent results document (a toolkit bug):\n{}", listed.join("\n"));
    }
    let path = args.results.clone().unwrap_or_else(|| default_results_path(&model.name, started));
    let json = results.to_json()?;
    write_atomic(&path, json.as_bytes()).with_context(|| format!("writing the results to `{}`", path.display()))?;
    match args.output {
        OutputFormat::Json => emit(&json),
        OutputFormat::Text => emit(&summary_table(&results.validators)),
    }
    if let Some(drained) = drained {
        match drained {
            Ok(lines) => lines.iter().for_each(|line| eprintln!("slurm: {line}")),
            Err(error) => eprintln!("error: --drain-failed: {error:#}"),
        }
    }
    eprintln!(
        "{}: {} — {}; results in {}",
        results.run.cluster,
        crate::report::verdict_word(&results),
        crate::report::counts_sentence(&results),
        path.display()
    );
    Ok(if results.exit_status() == 0 { Status::Clean } else { Status::Changes })
}

/// The validators over SSH, then `--drain-failed`.
async fn run_over_ssh(
    args: &Args,
    planned: &[Planned<'_>],
    model: &crate::model::Model,
    site: &Site,
    pool: &SshPool,
    options: &RunOptions,
    cancel: CancellationToken,
) -> (run::RunOutcome, Option<anyhow::Result<Vec<String>>>) {
    let _ctrl_c = crate::apply::cancel_on_ctrl_c(cancel);
    let outcome = run::execute(planned, model, site, pool, options).await;
    let drained = if args.drain_failed {
        let controller = model.first_with(Role::Controller).map(|node| node.name.clone());
        Some(drain_and_resume(pool, controller.as_deref(), &outcome.node_verdicts).await)
    } else {
        None
    };
    pool.close_all().await;
    (outcome, drained)
}

/// The validator Jobs' client and settings, from the inventory's kubeconfig and the flags.
fn kube_hosts(
    args: &Args,
    inventory: &LoadedInventory,
    model: &crate::model::Model,
    nodes: Option<&BTreeSet<String>>,
    images: BTreeMap<String, String>,
) -> anyhow::Result<JobHosts> {
    let client = crate::deploy::kube::client(&inventory.inventory, Path::new("."))?.with_context(|| {
        format!(
            "`{}` names no kubeconfig, and this blueprint's validators run as Kubernetes Jobs: add \
             `kubernetes: {{kubeconfig: PATH}}` to it",
            inventory.source.path.display()
        )
    })?;
    if let Some(problem) = crate::resource::kube::dns1123_label_error(&args.namespace) {
        bail!("--namespace `{}`: {problem}", args.namespace);
    }
    let settings = JobSettings {
        namespace: args.namespace.clone(),
        run_id: crate::transport::random_suffix().chars().take(8).collect(),
        images,
        start_seconds: args.kube_start_timeout,
        poll: std::time::Duration::from_secs(2),
        nodes: nodes.cloned(),
    };
    Ok(JobHosts::new(client, model, settings))
}

/// `--image ID=REF` flags by validator id.
fn parse_images(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut images = BTreeMap::new();
    for pair in pairs {
        let Some((id, image)) = pair.split_once('=').filter(|(id, image)| !id.is_empty() && !image.is_empty()) else {
            bail!("--image `{pair}`: expected ID=REF (`--image nccl-single-node=ghcr.io/example/nccl-tests:2.26`)");
        };
        images.insert(id.trim().to_owned(), image.trim().to_owned());
    }
    Ok(images)
}

/// `results/<cluster>-20261121T093000Z.json`.
fn default_results_path(cluster: &str, started: jiff::Timestamp) -> PathBuf {
    Path::new("results").join(format!("{cluster}-{}.json", started.strftime("%Y%m%dT%H%M%SZ")))
}

/// Progress on stderr: a bar per validator on a terminal, one line per finished
/// validator otherwise.
fn progress_printer() -> Arc<dyn Fn(&Progress) + Send + Sync> {
    let interactive = super::log::interactive();
    let bar = if interactive {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {msg} {bar:30} {pos}/{len}") {
            bar.set_style(style);
        }
        super::log::above(&bar);
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    Arc::new(move |event: &Progress| match event {
        Progress::Started { id, subjects } => {
            bar.set_length(*subjects as u64);
            bar.set_position(0);
            bar.set_message(id.clone());
        }
        Progress::Ran { .. } => bar.inc(1),
        Progress::Finished { id, verdict, seconds } => {
            let line = format!("validate: {id} {verdict} ({seconds:.1} s)");
            if bar.is_hidden() {
                if !super::log::quiet() {
                    eprintln!("{line}");
                }
            } else {
                bar.println(line);
            }
        }
    })
}

#[derive(Tabled)]
struct Row {
    validator: String,
    scope: &'static str,
    verdict: String,
    passed: usize,
    failed: usize,
    warning: usize,
    skipped: usize,
    error: usize,
    #[tabled(rename = "first problem")]
    problem: String,
}

fn summary_table(validators: &[ValidatorResult]) -> String {
    let rows = validators.iter().map(|validator| {
        let counts = validator.counts();
        let worst = validator.verdict();
        let problem = validator
            .subjects
            .iter()
            .find(|subject| subject.verdict == worst && worst != Verdict::Passed)
            .map(|subject| {
                shorten(&format!("{}: {}", subject.subject, subject.reason.as_deref().unwrap_or_default()), 100)
            })
            .unwrap_or_default();
        Row {
            validator: validator.id.clone(),
            scope: validator.scope.as_str(),
            verdict: worst.to_string(),
            passed: counts.passed,
            failed: counts.failed,
            warning: counts.warning,
            skipped: counts.skipped,
            error: counts.error,
            problem,
        }
    });
    let mut table = Table::new(rows);
    table.with(Style::sharp());
    format!("{table}\n")
}

fn shorten(text: &str, limit: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > limit {
        format!("{}…", line.chars().take(limit).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// What `--dry-run` prints for one validator.
#[derive(serde::Serialize)]
struct PreviewValidator {
    id: String,
    disposition: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    subjects: Vec<PreviewSubject>,
}

#[derive(serde::Serialize)]
struct PreviewSubject {
    subject: String,
    host: String,
    commands: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    /// Why it will be skipped (its host is not in the inventory).
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
}

fn print_preview(
    planned: &[Planned<'_>],
    model: &crate::model::Model,
    site: &Site,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let previews: Vec<PreviewValidator> = planned
        .iter()
        .map(|item| {
            let (disposition, reason, subjects) = match &item.disposition {
                Disposition::Skip(reason) => ("skip", Some(reason.clone()), Vec::new()),
                Disposition::Fail(reason) => ("error", Some(reason.clone()), Vec::new()),
                Disposition::Run { expansion, .. } => {
                    // Each command compiled once for all the subjects (thousands of nodes).
                    let steps: Vec<_> = item
                        .spec
                        .steps()
                        .iter()
                        .filter(|step| run::unmet(model, &step.when).is_none())
                        .map(|step| expr::Command::compile(&step.command))
                        .collect();
                    let server = item.spec.server.as_ref().map(|server| expr::Command::compile(&server.command));
                    let subjects = expansion
                        .subjects(model)
                        .iter()
                        .map(|subject| {
                            let render = |command: &Result<expr::Command, String>| {
                                command
                                    .as_ref()
                                    .map_err(Clone::clone)
                                    .and_then(|command| command.render(&subject.context))
                                    .unwrap_or_else(|error| format!("<does not render: {error}>"))
                            };
                            PreviewSubject {
                                subject: subject.name.clone(),
                                host: subject.host.clone(),
                                commands: steps.iter().map(render).collect(),
                                server: server
                                    .as_ref()
                                    .zip(subject.server_host.as_ref())
                                    .map(|(server, host)| format!("on {host}: {}", render(server))),
                                skipped: std::iter::once(&subject.host)
                                    .chain(subject.server_host.as_ref().filter(|_| item.spec.server.is_some()))
                                    .find(|host| !site.hosts.contains(*host))
                                    .map(|host| format!("`{host}` is not in the inventory")),
                            }
                        })
                        .collect();
                    ("run", None, subjects)
                }
            };
            PreviewValidator { id: item.spec.id.clone(), disposition, reason, subjects }
        })
        .collect();
    match output {
        OutputFormat::Json => {
            let document = serde_json::json!({ "format_version": 1, "validators": previews });
            emit(&format!("{}\n", serde_json::to_string_pretty(&document)?));
        }
        OutputFormat::Text => {
            let mut text = String::new();
            for preview in &previews {
                match &preview.reason {
                    Some(reason) => writeln!(text, "{} — {}: {reason}", preview.id, preview.disposition)?,
                    None => writeln!(text, "{} — {} subject(s)", preview.id, preview.subjects.len())?,
                }
                for subject in &preview.subjects {
                    if let Some(reason) = &subject.skipped {
                        writeln!(text, "  {} skipped: {reason}", subject.subject)?;
                        continue;
                    }
                    for command in &subject.commands {
                        writeln!(
                            text,
                            "  {} on {}: {}",
                            subject.subject,
                            subject.host,
                            command.replace('\n', "\n      ")
                        )?;
                    }
                    if let Some(server) = &subject.server {
                        writeln!(text, "    server {server}")?;
                    }
                }
            }
            emit(&text);
        }
    }
    Ok(())
}

/// Reads Slurm's node states on the controller, then drains and resumes.
async fn drain_and_resume(
    pool: &SshPool,
    controller: Option<&str>,
    verdicts: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, Verdict>>,
) -> anyhow::Result<Vec<String>> {
    let controller = controller.context("the blueprint has no controller to run scontrol on")?;
    let session = pool.connect(controller).await.map_err(|error| anyhow::anyhow!("{error}"))?;
    let argv: Vec<String> = ["scontrol", "show", "node"].iter().map(|word| (*word).to_owned()).collect();
    let output = session.exec(&argv).await?.into_success(controller, &argv)?;
    let parsed = expr::parse("scontrol-node", &output.stdout_text())
        .map_err(|error| anyhow::anyhow!("`scontrol show node`: {error}"))?;
    let states = drain::node_states(&parsed).map_err(|error| anyhow::anyhow!(error))?;
    let mut lines = Vec::new();
    for action in drain::plan(&states, verdicts) {
        match action.argv() {
            None => lines.push(action.to_string()),
            Some(argv) => match session.exec(&argv).await.and_then(|output| output.into_success(controller, &argv)) {
                Ok(_) => lines.push(action.to_string()),
                Err(error) => lines.push(format!("could not {action}: {error}")),
            },
        }
    }
    if lines.is_empty() {
        lines.push("no node to drain or resume".to_owned());
    }
    Ok(lines)
}
