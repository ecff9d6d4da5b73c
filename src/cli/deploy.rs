//! `toolkit deploy`: plan against the hosts, show it, ask, apply in graph order with
//! hosts in parallel, record the state, and end with every host's outcome.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tabled::settings::Style;
use tabled::{Table, Tabled};
use tokio_util::sync::CancellationToken;

use crate::apply::{self, ApplyOptions, ApplyReport, Outcome};
use crate::cli::live::{self, ApplyArgs};
use crate::cli::{OutputFormat, Status, emit, load_checked, print_diagnostics};
use crate::compile::compile;
use crate::deploy::{self, lock};
use crate::plan::state::State;
use crate::plan::{self, Action, Plan};
use crate::render::Renderer;
use crate::transport::Connector as _;

/// Arguments of `toolkit deploy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The blueprint, or a `plan.json` saved by `toolkit plan --out plan.json` (applied
    /// exactly, refused when the blueprint, inventory or hosts changed since).
    input: PathBuf,
    /// The inventory YAML file.
    #[arg(short, long)]
    inventory: Option<PathBuf>,
    /// Templates that override the built-in ones.
    #[arg(long)]
    templates: Option<PathBuf>,
    /// Which stage to run: `api` sets BMCs and cloud instances only (Terraform's
    /// `-target` for API objects), `ssh` configures the hosts only, `all` both, API first.
    #[arg(long, value_enum, default_value_t)]
    stage: Stage,
    #[command(flatten)]
    apply: ApplyArgs,
}

/// Stages of a deploy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    /// The API stage, then the SSH stage.
    #[default]
    All,
    /// BMCs (Redfish) and cloud instances (EC2) only.
    Api,
    /// Hosts over SSH only.
    Ssh,
}

/// What the API stage needs: the inventory (BMCs, cloud) and where it was read from.
pub(crate) struct ApiInputs<'a> {
    pub inventory: &'a crate::inventory::Inventory,
    pub firmware: &'a BTreeMap<String, BTreeMap<String, String>>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let saved = if args.input.extension().is_some_and(|e| e == "json") { Some(read_plan(&args.input)?) } else { None };
    let (blueprint, inventory) = match &saved {
        Some(plan) => (
            PathBuf::from(plan.blueprint_path.clone().context("the saved plan does not name its blueprint")?),
            plan.inventory_path.clone().map(PathBuf::from).or_else(|| args.inventory.clone()),
        ),
        None => (args.input.clone(), args.inventory.clone()),
    };
    let output = args.apply.output;
    // Generated secrets must exist before rendering, so the plan compares real content.
    if let Some(path) = &inventory
        && let Ok(loaded) = crate::inventory::load(path)
    {
        let generated = deploy::secrets::ensure(&loaded.inventory, Path::new("."))?;
        for reference in generated.0 {
            eprintln!("generated secret {reference}");
        }
    }
    if args.stage == Stage::Api && saved.is_some() {
        bail!("a saved plan applies the SSH stage only; run `toolkit deploy BLUEPRINT --stage api` for BMCs and cloud");
    }
    // The API stage runs when the inventory has anything behind an API.
    let has_api = inventory
        .as_ref()
        .and_then(|path| crate::inventory::load(path).ok())
        .is_some_and(|loaded| loaded.inventory.cloud.is_some() || !loaded.inventory.bmcs.is_empty());
    if args.stage != Stage::Ssh && saved.is_none() && (has_api || args.stage == Stage::Api) {
        let status = api_stage(args, &blueprint, inventory.as_deref())?;
        if args.stage == Stage::Api || status == Status::Error {
            return Ok(status);
        }
    }
    // Loaded (again) after the API stage: the inventory now includes the hosts of
    // the instances it ran.
    let Some(inputs) = load_checked(&blueprint, inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    let inventory = live::require_inventory(&inputs)?;
    let renderer = match &args.templates {
        Some(dir) => Renderer::with_overrides(dir)?,
        None => Renderer::embedded()?,
    };
    let compiled = match compile(&inputs.blueprint, Some(inventory), &renderer) {
        Ok(compiled) => compiled,
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, output);
            return Ok(Status::Error);
        }
    };
    let pool = live::pool(inventory, &args.apply.ssh)?;
    let state_path = live::state_path(args.apply.state.as_ref(), &inputs);
    let plan_inputs = live::plan_inputs(&inputs, &compiled);
    let controller = compiled
        .model
        .first_with(crate::blueprint::schema::Role::Controller)
        .map(|node| node.name.clone())
        .context("the blueprint has no controller to hold the cluster lock")?;
    let runtime = live::runtime()?;
    runtime.block_on(async {
        let locked = if args.apply.dry_run {
            None
        } else {
            let session = pool.connect(&controller).await.map_err(|error| anyhow::anyhow!("{error}"))?;
            lock::acquire(session.as_ref(), &lock::owner_description()).await?;
            Some(session)
        };
        let options = RunOptions::from(&args.apply);
        let api = ApiInputs { inventory: &inventory.inventory, firmware: &compiled.firmware };
        let result = plan_and_apply(
            &options,
            &compiled.graph,
            &compiled.model.name,
            &pool,
            plan_inputs,
            saved.as_ref(),
            state_path.as_deref(),
            Some(&api),
        )
        .await;
        if let Some(session) = locked
            && let Err(error) = lock::release(session.as_ref()).await
        {
            eprintln!("warning: {error}");
        }
        pool.close_all().await;
        result
    })
}

/// How a run behaves, from the command line of `deploy` or `push`.
pub(crate) struct RunOptions {
    pub yes: bool,
    pub dry_run: bool,
    pub output: OutputFormat,
    pub parallel: usize,
    pub max_fail_percent: Option<u8>,
    pub backup: bool,
    pub force: bool,
}

impl From<&ApplyArgs> for RunOptions {
    fn from(args: &ApplyArgs) -> Self {
        Self {
            yes: args.yes,
            dry_run: args.dry_run,
            output: args.output,
            parallel: args.ssh.parallel,
            max_fail_percent: args.max_fail_percent,
            backup: args.backup,
            force: args.force,
        }
    }
}

/// The API stage: observe BMCs and the cloud, plan their changes only, show, ask,
/// apply in graph order, record them in the state. `Status::Clean` when nothing
/// needed changing or everything applied.
fn api_stage(args: &Args, blueprint: &Path, inventory: Option<&Path>) -> anyhow::Result<Status> {
    let output = args.apply.output;
    let Some(inputs) = load_checked(blueprint, inventory, output) else {
        return Ok(Status::Error);
    };
    let loaded = live::require_inventory(&inputs)?;
    let renderer = match &args.templates {
        Some(dir) => Renderer::with_overrides(dir)?,
        None => Renderer::embedded()?,
    };
    let compiled = match compile(&inputs.blueprint, Some(loaded), &renderer) {
        Ok(compiled) => compiled,
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, output);
            return Ok(Status::Error);
        }
    };
    if deploy::api::items(&compiled.graph).is_empty() {
        return Ok(Status::Clean);
    }
    let plan_inputs = live::plan_inputs(&inputs, &compiled);
    let cluster = compiled.model.name.clone();
    let inventory_path = inventory.unwrap_or(Path::new("inventory.yaml"));
    let state_path = live::state_path(args.apply.state.as_ref(), &inputs);
    live::runtime()?.block_on(async {
        let (plan, unreachable) = live::api_plan(&compiled, loaded, plan_inputs).await;
        if output == OutputFormat::Text {
            eprintln!("API stage (BMCs and cloud):");
            emit(&plan::render::text(&plan));
        }
        for warning in &plan.warnings {
            eprintln!("warning: {warning}");
        }
        if !unreachable.is_empty() {
            for (target, reason) in &unreachable {
                eprintln!("error: cannot read `{target}` through its API: {reason}");
            }
            return Ok(Status::Error);
        }
        if args.apply.dry_run {
            if output == OutputFormat::Json {
                emit(&format!("{}\n", plan::render::json(&plan)?));
            }
            return Ok(if plan.summary.has_changes() { Status::Changes } else { Status::Clean });
        }
        let previous = match &state_path {
            Some(path) => State::load(path, &cluster)?,
            None => State::empty(&cluster),
        };
        let report = if plan.summary.has_changes() {
            if !args.apply.yes && !confirm()? {
                eprintln!("deploy cancelled; nothing was changed");
                return Ok(Status::Error);
            }
            deploy::api::apply(
                &compiled.graph,
                &plan,
                &loaded.inventory,
                inventory_path,
                Path::new("."),
                args.apply.ssh.parallel,
            )
            .await
        } else {
            // Nothing to change: still record where the instances are.
            deploy::api::apply(&compiled.graph, &plan, &loaded.inventory, inventory_path, Path::new("."), 1).await
        };
        save_state(state_path.as_deref(), deploy::api::record(previous, &compiled.graph, &plan, &report))?;
        if plan.summary.has_changes() {
            match output {
                OutputFormat::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&report)?)),
                OutputFormat::Text => emit(&outcome_table(&report)),
            }
        } else {
            eprintln!("API stage: nothing to do");
        }
        Ok(if report.is_success() { Status::Clean } else { Status::Error })
    })
}

/// Observes, plans, asks, applies and records: the part of a deploy after inputs
/// are compiled and the lock is held. `api` names the inventory whose BMCs and cloud
/// are observed for the plan (none for `push`); API changes are applied by the API
/// stage, not here.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn plan_and_apply(
    args: &RunOptions,
    graph: &crate::graph::ResourceGraph,
    cluster: &str,
    pool: &crate::transport::ssh::SshPool,
    plan_inputs: plan::diff::PlanInputs,
    saved: Option<&Plan>,
    state_path: Option<&Path>,
    api: Option<&ApiInputs<'_>>,
) -> anyhow::Result<Status> {
    let no_firmware = BTreeMap::new();
    let (observation, firmware) = match api {
        Some(api) => (deploy::api::observe(graph, api.inventory, cluster, Path::new(".")).await, api.firmware),
        None => (deploy::api::ApiObservation::default(), &no_firmware),
    };
    let previous = match state_path {
        Some(path) => State::load(path, cluster)?,
        None => State::empty(cluster),
    };
    let live = deploy::live_plan(graph, &previous, pool, plan_inputs, args.parallel, &observation, firmware).await;
    let plan = live.plan;
    let api_pending = plan
        .changes
        .iter()
        .filter(|change| change.action != Action::NoOp)
        .filter(|change| deploy::api::is_api_kind(&change.kind))
        .count();
    if api_pending > 0 {
        eprintln!(
            "warning: {api_pending} BMC or cloud change(s) pending: they are applied by `toolkit deploy --stage api`, not by the SSH stage"
        );
    }
    if let Some(saved) = saved {
        refuse_stale(saved, &plan)?;
    }
    if args.output == OutputFormat::Text {
        emit(&plan::render::text(&plan));
    }
    for (host, reason) in &live.unreachable {
        eprintln!("warning: cannot read `{host}`: {reason}");
    }
    if args.dry_run {
        if args.output == OutputFormat::Json {
            emit(&format!("{}\n", plan::render::json(&plan)?));
        }
        return Ok(if plan.summary.has_changes() { Status::Changes } else { Status::Clean });
    }
    if !plan.summary.has_changes() {
        save_state(state_path, deploy::record(previous, graph, &plan, &ApplyReport::default()))?;
        eprintln!("nothing to do");
        return Ok(Status::Clean);
    }
    if !args.yes && !confirm()? {
        eprintln!("deploy cancelled; nothing was changed");
        return Ok(Status::Error);
    }
    let cancel = CancellationToken::new();
    let _ctrl_c = apply::cancel_on_ctrl_c(cancel.clone());
    let (events, progress) = progress(deploy::changed_indexes(graph, &plan).len());
    let options = ApplyOptions {
        parallel: args.parallel,
        max_fail_percent: args.max_fail_percent,
        cancel,
        events: Some(events),
        backup: args.backup,
        force: args.force,
    };
    let report = deploy::apply(graph, &plan, &previous, pool, &options).await;
    drop(options);
    let _ = progress.await;
    save_state(state_path, deploy::record(previous, graph, &plan, &report))?;
    match args.output {
        OutputFormat::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&report)?)),
        OutputFormat::Text => emit(&outcome_table(&report)),
    }
    if report.cancelled {
        eprintln!("interrupted: the table shows what was done; rerun to converge");
    }
    let left = plan.changes.iter().filter(|change| plan::removal::leaves_in_place(change)).count();
    if left > 0 {
        eprintln!("{left} resource(s) no longer in the blueprint were left in place on the hosts, as the plan says");
    }
    Ok(if report.is_success() { Status::Clean } else { Status::Error })
}

fn read_plan(path: &Path) -> anyhow::Result<Plan> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading `{}`", path.display()))?;
    let plan: Plan =
        serde_json::from_str(&text).with_context(|| format!("`{}` is not a toolkit plan", path.display()))?;
    if plan.format_version != plan::PLAN_FORMAT_VERSION {
        bail!(
            "`{}` has plan format {}; this toolkit reads {}",
            path.display(),
            plan.format_version,
            plan::PLAN_FORMAT_VERSION
        );
    }
    Ok(plan)
}

/// A saved plan is applied only if planning again gives exactly the same changes
/// from the same inputs.
fn refuse_stale(saved: &Plan, now: &Plan) -> anyhow::Result<()> {
    if saved.blueprint_sha256 != now.blueprint_sha256 {
        bail!("the blueprint changed since this plan was made; run `toolkit plan` again");
    }
    if saved.inventory_sha256 != now.inventory_sha256 {
        bail!("the inventory changed since this plan was made; run `toolkit plan` again");
    }
    let pending = |plan: &Plan| -> BTreeMap<String, (Action, Option<String>)> {
        plan.changes
            .iter()
            .filter(|c| c.action != Action::NoOp)
            .map(|c| (c.id.clone(), (c.action, c.before.clone())))
            .collect()
    };
    let (then, current) = (pending(saved), pending(now));
    if then != current {
        let differing: Vec<&String> =
            then.keys().chain(current.keys()).filter(|id| then.get(*id) != current.get(*id)).take(5).collect();
        bail!(
            "the hosts changed since this plan was made (for example {}); run `toolkit plan` again",
            differing.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}

fn confirm() -> anyhow::Result<bool> {
    confirm_with("Apply these changes? Only `yes` is accepted: ")
}

/// Asks `question` on the terminal; only `yes` agrees. Off a terminal it is an error
/// that names `--yes`.
pub(crate) fn confirm_with(question: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!("not on a terminal: pass `--yes` to go ahead without asking");
    }
    eprint!("{question}");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

fn save_state(path: Option<&Path>, mut state: State) -> anyhow::Result<()> {
    if let Some(path) = path {
        state.save(path)?;
    }
    Ok(())
}

/// A progress bar on a terminal; otherwise a line per changed or failed resource.
fn progress(total: usize) -> (tokio::sync::mpsc::UnboundedSender<apply::ResourceOutcome>, tokio::task::JoinHandle<()>) {
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<apply::ResourceOutcome>();
    let interactive = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let bar = if interactive {
        let bar = indicatif::ProgressBar::new(total as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let handle = tokio::spawn(async move {
        while let Some(event) = receiver.recv().await {
            bar.inc(1);
            bar.set_message(event.target.clone());
            match &event.outcome {
                Outcome::Failed { error } => {
                    bar.suspend(|| eprintln!("failed: {} on {}: {error}", event.id, event.target));
                }
                // Without a terminal (CI, a log file) each change is a line, as Terraform
                // and Ansible print them: the log shows how far a deploy got.
                Outcome::Changed if !interactive => eprintln!("changed: {}", event.id),
                _ => {}
            }
        }
        bar.finish_and_clear();
    });
    (sender, handle)
}

#[derive(Tabled)]
struct HostRow {
    host: String,
    changed: usize,
    unchanged: usize,
    failed: usize,
    skipped: usize,
    #[tabled(rename = "first problem")]
    problem: String,
}

fn outcome_table(report: &ApplyReport) -> String {
    let mut rows: BTreeMap<&str, HostRow> = BTreeMap::new();
    for outcome in &report.outcomes {
        let row = rows.entry(&outcome.target).or_insert_with(|| HostRow {
            host: outcome.target.clone(),
            changed: 0,
            unchanged: 0,
            failed: 0,
            skipped: 0,
            problem: String::new(),
        });
        match &outcome.outcome {
            Outcome::Changed => row.changed += 1,
            Outcome::Unchanged => row.unchanged += 1,
            Outcome::Failed { error } => {
                row.failed += 1;
                if row.problem.is_empty() {
                    row.problem = format!("{}: {}", outcome.id, first_line(error));
                }
            }
            Outcome::Skipped { reason } => {
                row.skipped += 1;
                if row.problem.is_empty() {
                    row.problem = match reason {
                        apply::SkipReason::Upstream { id } => format!("skipped (upstream failed: {id})"),
                        apply::SkipReason::Cancelled => "skipped (interrupted)".to_owned(),
                        apply::SkipReason::Aborted => "skipped (--max-fail-percent reached)".to_owned(),
                    };
                }
            }
        }
    }
    let counts = report.counts();
    let mut table = Table::new(rows.into_values());
    table.with(Style::sharp());
    format!(
        "{table}\nApply: {} changed, {} unchanged, {} failed, {} skipped.\n",
        counts.changed, counts.unchanged, counts.failed, counts.skipped
    )
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 100 {
        format!("{}…", line.chars().take(100).collect::<String>())
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::refuse_stale;
    use crate::plan::{Action, Baseline, Change, PLAN_FORMAT_VERSION, Plan, Summary};

    fn plan(blueprint: &str, before: Option<&str>) -> Plan {
        Plan {
            format_version: PLAN_FORMAT_VERSION,
            toolkit_version: "0".into(),
            cluster: "lab".into(),
            blueprint_sha256: blueprint.into(),
            inventory_sha256: Some("inv".into()),
            blueprint_path: None,
            inventory_path: None,
            baseline: Baseline::Observed,
            summary: Summary { update: 1, ..Summary::default() },
            changes: vec![Change {
                id: "node01:file:/etc/hosts".into(),
                target: "node01".into(),
                kind: "file".into(),
                name: "/etc/hosts".into(),
                action: Action::Update,
                reason: "content changed".into(),
                before: before.map(Into::into),
                after: Some("sha256:new".into()),
                diff: None,
                secret: false,
            }],
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_saved_plan_applies_only_to_the_inputs_and_hosts_it_was_made_from() {
        let saved = plan("bp1", Some("sha256:old"));
        assert!(refuse_stale(&saved, &plan("bp1", Some("sha256:old"))).is_ok());
        let edited = refuse_stale(&saved, &plan("bp2", Some("sha256:old"))).expect_err("blueprint changed");
        assert!(edited.to_string().contains("blueprint changed"));
        let drifted = refuse_stale(&saved, &plan("bp1", Some("sha256:someone-else"))).expect_err("host changed");
        assert!(drifted.to_string().contains("`node01:file:/etc/hosts`"), "{drifted}");
    }
}
