//! What `plan` (live), `deploy` and `unlock` share: the SSH pool from the
//! inventory, the async runtime, and the live plan.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::cli::Inputs;
use crate::compile::{Compiled, text_sha256};
use crate::deploy::{self, LivePlan};
use crate::inventory::LoadedInventory;
use crate::plan::diff::PlanInputs;
use crate::resource::api::KUBERNETES_TARGET;
use crate::transport::mux;
use crate::transport::session::SshPool;
use crate::transport::ssh::SshOptions;
use crate::transport::targets::{self, LocalUser};

/// SSH settings from the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct SshArgs {
    /// Hosts contacted at once.
    #[arg(long, default_value_t = 64)]
    pub parallel: usize,
    /// Record unknown host keys instead of stopping (a changed key always stops).
    #[arg(long)]
    pub accept_new_host_keys: bool,
    /// Seconds to wait for a host's SSH connection.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// Seconds a background process keeps the SSH connections open after the run
    /// for the next one to reuse (0: close them when the run ends; 60 is Ansible's
    /// ControlPersist). Default: the inventory's `ssh.persist`, else 60.
    #[arg(long, env = "TOOLKIT_SSH_PERSIST", value_name = "SECONDS")]
    pub ssh_persist: Option<u64>,
}

/// How `deploy` and `push` apply: shared flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ApplyArgs {
    /// Apply without asking (required when not on a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Show the plan only.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop starting new hosts once more than this percentage of hosts failed.
    #[arg(long)]
    pub max_fail_percent: Option<u8>,
    /// State file (`deploy` defaults to the inventory's `state_file`).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Keep each replaced file beside it as `<path>.<UTC time>.toolkit-backup`.
    #[arg(long)]
    pub backup: bool,
    /// Remove what left the blueprint even where that loses work: a Slurm account,
    /// QOS or user with running or pending jobs has them cancelled (without it, the
    /// removal is refused and names the jobs).
    #[arg(long)]
    pub force: bool,
    /// Output format of the plan and the outcome.
    #[arg(long, value_enum, default_value_t)]
    pub output: crate::cli::OutputFormat,
    #[command(flatten)]
    pub ssh: SshArgs,
}

/// A multi-threaded runtime for the network stages.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

/// The inventory, required for anything that touches hosts.
pub(crate) fn require_inventory(inputs: &Inputs) -> anyhow::Result<&LoadedInventory> {
    match &inputs.inventory {
        Some(inventory) => Ok(inventory),
        None => bail!("this command reaches the hosts: give the inventory with `-i INVENTORY` (or use `--offline`)"),
    }
}

/// One pooled SSH connection per inventory host and switch.
pub(crate) fn pool(inventory: &LoadedInventory, args: &SshArgs) -> anyhow::Result<SshPool> {
    let targets = targets::from_inventory(&inventory.inventory, &LocalUser::from_env())?;
    let options = SshOptions {
        accept_new_host_keys: args.accept_new_host_keys,
        connect_timeout: std::time::Duration::from_secs(args.connect_timeout),
        persist: persist(inventory, args),
        ..SshOptions::default()
    };
    Ok(SshPool::new(targets, options))
}

/// Whether and how long connections outlive the run: `--ssh-persist`, else the
/// inventory's `ssh.persist`, else [`mux::DEFAULT_IDLE`]. Without a private socket
/// directory the run keeps nothing (and says why).
fn persist(inventory: &LoadedInventory, args: &SshArgs) -> Option<mux::Persist> {
    let seconds = args
        .ssh_persist
        .or(inventory.inventory.ssh.as_ref().and_then(|ssh| ssh.persist))
        .unwrap_or(mux::DEFAULT_IDLE.as_secs());
    if seconds == 0 {
        return None;
    }
    let located =
        std::env::current_exe().and_then(|program| mux::default_socket(&program).map(|socket| (socket, program)));
    match located {
        Ok((socket, program)) => Some(mux::Persist { socket, idle: std::time::Duration::from_secs(seconds), program }),
        Err(error) => {
            eprintln!("warning: SSH connections are not kept after this run: {error}");
            None
        }
    }
}

/// Identity of the inputs as recorded in plans.
pub(crate) fn plan_inputs(inputs: &Inputs, compiled: &Compiled) -> PlanInputs {
    PlanInputs {
        cluster: compiled.model.name.clone(),
        blueprint_sha256: text_sha256(&inputs.blueprint.source.text),
        inventory_sha256: inputs.inventory.as_ref().map(|i| text_sha256(&i.source.text)),
    }
}

/// Observes (BMCs and cloud through their APIs, hosts over SSH) and plans; every
/// SSH target must be in the inventory. `recorded` (the state file) gives the removals.
pub(crate) async fn live_plan(
    compiled: &Compiled,
    recorded: &crate::plan::state::State,
    inventory: &LoadedInventory,
    pool: &SshPool,
    inputs: PlanInputs,
    parallel: usize,
) -> LivePlan {
    let mut api = deploy::api::observe(&compiled.graph, &inventory.inventory, &inputs.cluster, Path::new(".")).await;
    api.schedulable = compiled.model.schedulable_nodes();
    deploy::live_plan(&compiled.graph, recorded, pool, inputs, parallel, &api, &compiled.firmware).await
}

/// The API stage's plan (BMCs and cloud only) and the API targets that could not be read.
pub(crate) async fn api_plan(
    compiled: &Compiled,
    inventory: &LoadedInventory,
    inputs: PlanInputs,
) -> (crate::plan::Plan, std::collections::BTreeMap<String, String>) {
    // A kubeadm cluster whose admin kubeconfig is not here yet (before the first
    // `kubeadm init`): its objects wait, and BMCs and clouds are still planned.
    let pending = kubeadm_pending(compiled, inventory);
    let without_kubernetes = pending.as_ref().and_then(|_| {
        let resources = compiled.graph.resources.iter().filter(|r| r.target() != KUBERNETES_TARGET).cloned();
        crate::graph::build(resources.collect()).ok()
    });
    let graph = without_kubernetes.as_ref().unwrap_or(&compiled.graph);
    let mut observation = deploy::api::observe(graph, &inventory.inventory, &inputs.cluster, Path::new(".")).await;
    observation.schedulable = compiled.model.schedulable_nodes();
    let mut plan = deploy::api::plan(graph, &observation, &compiled.firmware, inputs);
    plan.warnings.extend(pending);
    (plan, observation.unreachable)
}

/// Why the Kubernetes objects of a `kubeadm` blueprint wait: the inventory's
/// kubeconfig, the copy of the control plane's admin.conf, does not exist yet.
fn kubeadm_pending(compiled: &Compiled, inventory: &LoadedInventory) -> Option<String> {
    let kubeadm = crate::model::kubeadm::expand(&compiled.model)?;
    let kubeconfig = &inventory.inventory.kubernetes.as_ref()?.kubeconfig;
    if kubeconfig.exists() {
        return None;
    }
    Some(format!(
        "Kubernetes objects wait for the kubeadm cluster: `{}` does not exist yet; `toolkit deploy` runs \
         `kubeadm init` and then copies {}:{} there (mode 0600); `toolkit deploy --stage api` applies them after",
        kubeconfig.display(),
        kubeadm.control_plane.name,
        crate::model::kubeadm::ADMIN_CONF,
    ))
}

/// The state file: `--state`, else the inventory's `state_file`.
pub(crate) fn state_path(explicit: Option<&PathBuf>, inputs: &Inputs) -> Option<PathBuf> {
    explicit.cloned().or_else(|| inputs.inventory.as_ref().and_then(|i| i.inventory.state_file.clone()))
}
