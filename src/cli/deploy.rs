//! `toolkit deploy`: plan against the hosts, show it, ask, apply in graph order with
//! hosts in parallel, record the state, and end with every host's outcome.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tabled::settings::Style;
use tabled::{Table, Tabled};
use tokio_util::sync::CancellationToken;

use crate::apply::{self, ApplyOptions, ApplyReport, Outcome};
use crate::cli::live::{self, ApplyArgs};
use crate::cli::{OutputFormat, Status, emit, load_checked, print_diagnostics};
use crate::deploy;
use crate::deploy::health::compile;
use crate::plan::state::State;
use crate::plan::{self, Action, Plan};
use crate::render::Renderer;

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
    /// Which stage to run: `api` sets BMCs, cloud instances and Kubernetes objects only
    /// (Terraform's `-target` for API objects), `ssh` configures the hosts only, `all`
    /// both, API first.
    #[arg(long, value_enum, default_value_t)]
    stage: Stage,
    /// Flash firmware: every hardware profile's components that name an `image` (as
    /// `firmware_updates: true` does per profile). A schedulable node is flashed in its
    /// rollout wave, drained; a downgrade is refused unless the profile allows it.
    #[arg(long)]
    firmware: bool,
    /// Kubernetes: take over the fields of toolkit's objects that another field
    /// manager (Helm, `kubectl edit`) owns with other values; without it such an
    /// apply is refused and names the fields and their managers.
    #[arg(long)]
    force_conflicts: bool,
    #[command(flatten)]
    apply: ApplyArgs,
    #[command(flatten)]
    rollout: RolloutArgs,
    #[command(flatten)]
    provision: crate::cli::provision::ProvisionArgs,
}

/// Stages of a deploy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    /// The API stage, then the SSH stage.
    #[default]
    All,
    /// BMCs (Redfish), cloud instances (EC2) and Kubernetes objects only.
    Api,
    /// Hosts over SSH only.
    Ssh,
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
    // Bare metal first: nodes with an `os` and a BMC are inspected and, when blank,
    // installed; nothing else runs until every one of them answers SSH.
    if args.stage != Stage::Ssh && saved.is_none() && !args.apply.dry_run {
        let status = provision_stage(args, &blueprint, inventory.as_deref())?;
        if status != Status::Clean {
            return Ok(status);
        }
    }
    if args.stage == Stage::Api && saved.is_some() {
        bail!("a saved plan applies the SSH stage only; run `toolkit deploy BLUEPRINT --stage api` for BMCs and cloud");
    }
    // The API stage runs when the inventory has anything behind an API.
    let has_api = inventory.as_ref().and_then(|path| crate::inventory::load(path).ok()).is_some_and(|loaded| {
        let inventory = &loaded.inventory;
        inventory.cloud.is_some() || !inventory.bmcs.is_empty() || inventory.kubernetes.is_some()
    });
    if args.stage != Stage::Ssh && saved.is_none() && (has_api || args.stage == Stage::Api) {
        let status = api_stage(args, &blueprint, inventory.as_deref())?;
        if args.stage == Stage::Api || status == Status::Error {
            return Ok(status);
        }
    }
    // Loaded (again) after the API stage: the inventory now includes the hosts of
    // the instances it ran.
    let Some(mut inputs) = load_checked(&blueprint, inventory.as_deref(), output) else {
        return Ok(Status::Error);
    };
    if args.firmware {
        inputs.blueprint.blueprint.enable_firmware_updates();
    }
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
    // Kubernetes objects are applied by the API stage, through the inventory's kubeconfig.
    let kubernetes_objects =
        crate::deploy::api::items(&compiled.graph).iter().filter(|(_, item)| item.kubernetes().is_some()).count();
    if kubernetes_objects > 0 && inventory.inventory.kubernetes.is_none() {
        eprintln!(
            "warning: {kubernetes_objects} Kubernetes objects are not applied: the inventory names no kubeconfig (`kubernetes: {{kubeconfig: PATH}}`)"
        );
    }
    let pool = live::pool(inventory, &args.apply.ssh)?;
    let state_path = live::state_path(args.apply.state.as_ref(), &inputs);
    let plan_inputs = live::plan_inputs(&inputs, &compiled);
    let controller = compiled
        .model
        .first_with(crate::blueprint::schema::Role::Controller)
        .map(|node| node.name.clone())
        .context("the blueprint has no controller to hold the cluster lock")?;
    let catalog = match crate::validate::catalog::Catalog::load(None) {
        Ok(catalog) => catalog,
        Err(problems) => {
            print_diagnostics(&problems, output);
            return Ok(Status::Error);
        }
    };
    let site = crate::validate::subjects::Site::from_inventory(&inventory.inventory);
    // A host that does not come back from a reboot is power-cycled through its BMC.
    let bmcs: Vec<_> = inventory
        .inventory
        .bmcs
        .keys()
        .filter_map(|host| {
            crate::bmc::redfish::BmcConfig::from_inventory(&inventory.inventory, host, Path::new(".")).ok()
        })
        .collect();
    // Before either, BIOS values queued on its BMC that the blueprint does not want are overwritten.
    let power_cycle =
        deploy::reboot::RedfishPowerCycle::new(bmcs.clone()).with_bios(deploy::api::wanted_bios(&compiled.graph));
    let bmc_changes = deploy::firmware::BmcChanges::new(bmcs);
    let runtime = live::runtime()?;
    runtime.block_on(async {
        let options = RunOptions::from(&args.apply);
        let hooks = deploy::checks::ClusterHooks {
            model: &compiled.model,
            catalog: &catalog,
            site: &site,
            connector: &pool,
            parallel: args.apply.ssh.parallel,
            fake_gpus: inventory
                .inventory
                .hosts
                .iter()
                .filter(|(_, host)| host.fake_gpu_devices)
                .map(|(name, _)| name.clone())
                .collect(),
            reboot: deploy::reboot::RebootOptions::default(),
            power_cycle: Some(&power_cycle),
            bmc: Some(&bmc_changes),
        };
        let rollout = deploy::ops::Rollout {
            controller: &controller,
            schedulable: compiled.model.schedulable_nodes(),
            max_unavailable: args.rollout.max_unavailable,
            options: args.rollout.options(),
            hooks: &hooks,
        };
        let api = deploy::ops::ApiInputs { inventory: &inventory.inventory, firmware: &compiled.firmware };
        let result = plan_and_apply(
            &options,
            &compiled.graph,
            &compiled.model.name,
            &pool,
            plan_inputs,
            saved.as_ref(),
            state_path.as_deref(),
            Some(api),
            Some(rollout),
        )
        .await;
        if result.is_ok() && !args.apply.dry_run {
            fetch_kubeconfig(&compiled.model, inventory, &pool).await;
        }
        pool.close_all().await;
        result
    })
}

/// A kubeadm cluster: the control plane's admin.conf copied to the inventory's
/// `kubernetes.kubeconfig` once `kubeadm init` has made it, for the API stage.
async fn fetch_kubeconfig(
    model: &crate::model::Model,
    inventory: &crate::inventory::LoadedInventory,
    pool: &crate::transport::session::SshPool,
) {
    let Some(kubeadm) = crate::model::kubeadm::expand(model) else { return };
    let Some(local) = inventory.inventory.kubernetes.as_ref().map(|kubernetes| &kubernetes.kubeconfig) else { return };
    if local.exists() {
        return;
    }
    let host = &kubeadm.control_plane.name;
    let remote = crate::model::kubeadm::ADMIN_CONF;
    let fetched = match pool.session(host).await {
        Ok(session) => {
            deploy::kubeadm::fetch_admin_kubeconfig(&*session, remote, local).await.map_err(|e| e.to_string())
        }
        Err(error) => Err(error.to_string()),
    };
    match fetched {
        Ok(true) => eprintln!(
            "kubeadm: copied {host}:{remote} to `{}` (mode 0600); `toolkit deploy --stage api` applies the Kubernetes objects",
            local.display()
        ),
        Ok(false) => {}
        Err(error) => eprintln!("warning: the Kubernetes objects wait for the cluster's kubeconfig: {error}"),
    }
}

/// How a rolling change is paced: `deploy` only.
#[derive(Debug, Clone, clap::Args)]
pub struct RolloutArgs {
    /// Nodes out of service at once while changes that need them empty roll out:
    /// a count (`2`) or a percentage of the scheduler's nodes (`10%`); nodes already
    /// drained or down count against it.
    #[arg(long, default_value_t)]
    max_unavailable: plan::MaxUnavailable,
    /// Seconds a drained node may take to empty before the rollout stops and names the
    /// jobs that hold it.
    #[arg(long, default_value_t = 3600)]
    drain_timeout: u64,
    /// Requeue the jobs still holding a node once `--drain-timeout` passed, instead of
    /// stopping.
    #[arg(long)]
    requeue: bool,
    /// Nodes that may fail their change or check before no new wave starts.
    #[arg(long, default_value_t = 0)]
    max_failures: usize,
    /// Seconds a changed node may take to pass its checks (tried again every 5 s)
    /// before it counts as failed.
    #[arg(long, default_value_t = 120)]
    check_timeout: u64,
}

impl RolloutArgs {
    fn options(&self) -> deploy::rollout::RolloutOptions {
        deploy::rollout::RolloutOptions {
            drain_timeout: std::time::Duration::from_secs(self.drain_timeout),
            requeue: self.requeue,
            max_failures: self.max_failures,
            check_timeout: std::time::Duration::from_secs(self.check_timeout),
            ..deploy::rollout::RolloutOptions::default()
        }
    }
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
fn provision_stage(args: &Args, blueprint: &Path, inventory: Option<&Path>) -> anyhow::Result<Status> {
    let Some(path) = inventory else { return Ok(Status::Clean) };
    let Ok(loaded) = crate::inventory::load(path) else { return Ok(Status::Clean) };
    if loaded.inventory.provisioning.is_none() {
        return Ok(Status::Clean);
    }
    let Some(inputs) = load_checked(blueprint, Some(path), args.apply.output) else {
        return Ok(Status::Error);
    };
    let inventory = live::require_inventory(&inputs)?;
    let model = crate::model::expand(&inputs.blueprint.blueprint)?;
    let state_path = live::state_path(args.apply.state.as_ref(), &inputs);
    crate::cli::provision::stage(&model, inventory, state_path.as_deref(), &args.provision, args.apply.output)
}

fn api_stage(args: &Args, blueprint: &Path, inventory: Option<&Path>) -> anyhow::Result<Status> {
    let output = args.apply.output;
    let Some(mut inputs) = load_checked(blueprint, inventory, output) else {
        return Ok(Status::Error);
    };
    if args.firmware {
        inputs.blueprint.blueprint.enable_firmware_updates();
    }
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
            eprintln!("API stage (BMCs, cloud, Kubernetes):");
            emit(&plan::render::text(&plan));
        }
        for warning in &plan.warnings {
            eprintln!("warning: {warning}");
        }
        let refused = deploy::firmware::refused(&plan.changes);
        if !refused.is_empty() && !args.apply.dry_run {
            for line in &refused {
                eprintln!("error: {line}");
            }
            eprintln!("error: nothing was changed: a refused firmware change stops the deploy");
            return Ok(Status::Error);
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
        let applied = if plan.summary.has_changes() {
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
                args.force_conflicts,
            )
            .await
        } else {
            // Nothing to change: still record where the instances are.
            let graph = &compiled.graph;
            deploy::api::apply(graph, &plan, &loaded.inventory, inventory_path, Path::new("."), 1, false).await
        };
        for note in &applied.notes {
            eprintln!("{note}");
        }
        let report = applied.report;
        save_state(state_path.as_deref(), deploy::api::record(previous, &compiled.graph, &plan, &report))?;
        // The table shows each host's first problem on one line; the BMC's whole
        // message (its `@Message.ExtendedInfo`, what is queued) goes here.
        for outcome in &report.outcomes {
            if let apply::Outcome::Failed { error } = &outcome.outcome {
                eprintln!("failed: {} on {}: {error}", outcome.id, outcome.target);
            }
        }
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

/// Prints the plan and asks, as a deploy's [`Review`](deploy::ops::Review).
struct Prompt<'a> {
    args: &'a RunOptions,
    progress: indicatif::ProgressBar,
}

impl deploy::ops::Review for Prompt<'_> {
    fn review(&self, plan: &Plan, unreachable: &BTreeMap<String, String>) -> Result<bool, String> {
        let api_pending = plan
            .changes
            .iter()
            .filter(|change| change.action != Action::NoOp)
            .filter(|change| {
                deploy::api::is_api_kind(change.kind())
                    && change.kind() != crate::resource::api::KUBERNETES_KIND
                    && !deploy::firmware::in_rollout_wave(change)
            })
            .count();
        if api_pending > 0 {
            eprintln!(
                "warning: {api_pending} BMC or cloud change(s) pending: they are applied by `toolkit deploy --stage api`, not by the SSH stage"
            );
        }
        if self.args.output == OutputFormat::Text {
            emit(&plan::render::text(plan));
        }
        for (host, reason) in unreachable {
            eprintln!("warning: cannot read `{host}`: {reason}");
        }
        if self.args.dry_run {
            if self.args.output == OutputFormat::Json {
                emit(&format!("{}\n", plan::render::json(plan).map_err(|error| error.to_string())?));
            }
            return Ok(false);
        }
        if !plan.summary.has_changes() {
            return Ok(true);
        }
        if !self.args.yes && !confirm().map_err(|error| error.to_string())? {
            eprintln!("deploy cancelled; nothing was changed");
            return Ok(false);
        }
        self.progress.set_length(deploy::changed_indexes_count(plan) as u64);
        Ok(true)
    }
}

/// Observes, plans, asks, rolls out and records through [`deploy::ops::deploy`], then
/// prints the outcome. `rollout` is the scheduler side (none for `push`); `api` names
/// the inventory whose BMCs and cloud are observed for the plan; API changes are
/// applied by the API stage, not here.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn plan_and_apply<H: deploy::rollout::NodeHooks>(
    args: &RunOptions,
    graph: &crate::graph::ResourceGraph,
    cluster: &str,
    pool: &crate::transport::session::SshPool,
    plan_inputs: plan::diff::PlanInputs,
    saved: Option<&Plan>,
    state_path: Option<&Path>,
    api: Option<deploy::ops::ApiInputs<'_>>,
    rollout: Option<deploy::ops::Rollout<'_, H>>,
) -> anyhow::Result<Status> {
    let cancel = CancellationToken::new();
    let _ctrl_c = apply::cancel_on_ctrl_c(cancel.clone());
    let (events, progress, bar) = progress();
    let request = deploy::ops::Request {
        graph,
        cluster,
        connector: pool,
        inputs: plan_inputs,
        saved,
        state_path,
        api,
        rollout,
        apply: ApplyOptions {
            parallel: args.parallel,
            max_fail_percent: args.max_fail_percent,
            cancel,
            events: Some(events),
            backup: args.backup,
            force: args.force,
        },
        dry_run: args.dry_run,
    };
    let prompt = Prompt { args, progress: bar };
    let outcome = deploy::ops::deploy(request, &prompt).await;
    let _ = progress.await;
    match outcome? {
        deploy::ops::Outcome::Planned(plan) => {
            Ok(if plan.summary.has_changes() { Status::Changes } else { Status::Clean })
        }
        deploy::ops::Outcome::NothingToDo(_) => {
            eprintln!("nothing to do");
            Ok(Status::Clean)
        }
        deploy::ops::Outcome::Declined(_) => Ok(Status::Error),
        deploy::ops::Outcome::Applied { plan, report } => {
            match args.output {
                OutputFormat::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&report.apply)?)),
                OutputFormat::Text => {
                    emit(&outcome_table(&report.apply));
                    emit(&rollout_text(&report));
                }
            }
            for note in &report.notes {
                eprintln!("note: {note}");
            }
            if report.apply.cancelled {
                eprintln!("interrupted: the table shows what was done; rerun to converge");
            }
            if let Some(stopped) = &report.stopped {
                eprintln!("rollout stopped: {stopped}");
            }
            let left = plan.changes.iter().filter(|change| plan::removal::leaves_in_place(change)).count();
            if left > 0 {
                eprintln!(
                    "{left} resource(s) no longer in the blueprint were left in place on the hosts, as the plan says"
                );
            }
            Ok(if report.is_success() { Status::Clean } else { Status::Error })
        }
    }
}

/// Nodes the rollout drained, wave by wave, and where each ended.
fn rollout_text(report: &deploy::rollout::RolloutReport) -> String {
    let Some(id) = &report.id else { return String::new() };
    let mut out = format!("Rollout {id}: {} wave(s)\n", report.waves.len());
    for (index, wave) in report.waves.iter().enumerate() {
        let _ = writeln!(
            out,
            "  wave {}: {}",
            index + 1,
            crate::model::hostlist::compress(wave.iter().map(String::as_str))
        );
    }
    for (node, state) in &report.nodes {
        let error = state.error.as_deref().map(|error| format!(" ({error})")).unwrap_or_default();
        let held = if state.held_by_other { " [drained by someone else: left drained]" } else { "" };
        let _ = writeln!(out, "  {node}: {:?}{error}{held}", state.step);
    }
    out
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

/// A progress bar on a terminal (its length set once the plan is known); otherwise a
/// line per changed or failed resource.
fn progress()
-> (tokio::sync::mpsc::UnboundedSender<apply::ResourceOutcome>, tokio::task::JoinHandle<()>, indicatif::ProgressBar) {
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<apply::ResourceOutcome>();
    let interactive = super::log::interactive();
    let lines = !interactive && !super::log::quiet();
    let bar = if interactive {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        super::log::above(&bar);
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let shown = bar.clone();
    let handle = tokio::spawn(async move {
        let bar = shown;
        while let Some(event) = receiver.recv().await {
            bar.inc(1);
            bar.set_message(event.target.clone());
            match &event.outcome {
                Outcome::Failed { error } => {
                    bar.suspend(|| eprintln!("failed: {} on {}: {error}", event.id, event.target));
                }
                // Without a terminal (CI, a log file) each change is a line, as Terraform
                // and Ansible print them: the log shows how far a deploy got.
                Outcome::Changed if lines => eprintln!("changed: {}", event.id),
                _ => {}
            }
        }
        bar.finish_and_clear();
    });
    (sender, handle, bar)
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
                        apply::SkipReason::NotReached => "skipped (its rollout wave did not run)".to_owned(),
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
