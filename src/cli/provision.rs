//! The provisioning stage of `toolkit deploy` (and its lines in `toolkit plan`):
//! bare-metal nodes with an `os` are inspected, installed when blank, and reachable
//! over SSH before the SSH stage configures them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use crate::cli::live;
use crate::cli::{OutputFormat, Status, emit};
use crate::deploy::provision::flow::{self, Book, Candidate, Options, Outcome, Run};
use crate::deploy::provision::image;
use crate::deploy::provision::service::{self, RemoteHost};
use crate::inventory::LoadedInventory;
use crate::model::Model;
use crate::transport::ssh::SshOptions;
use crate::transport::targets::{self, LocalUser};

/// Arguments of `toolkit provision-service` (started by toolkit itself over SSH).
#[derive(Debug, Clone, clap::Args)]
pub struct ServiceArgs {
    /// The service's specification (read, then removed: it holds host keys).
    pub spec: PathBuf,
}

/// Serves network boot on this host for a toolkit run elsewhere, until that run
/// says stop or its connection ends.
pub(crate) fn serve(args: &ServiceArgs) -> anyhow::Result<Status> {
    live::runtime()?
        .block_on(service::serve_stdio(&args.spec))
        .with_context(|| format!("provisioning service specification `{}`", args.spec.display()))?;
    Ok(Status::Clean)
}

/// Flags of `toolkit deploy` for bare metal.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProvisionArgs {
    /// Install these nodes again though they run the OS toolkit installed (comma
    /// separated): everything on their OS disk is lost.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    pub reinstall: Vec<String>,
    /// Go on with these nodes though their hardware differs from the blueprint
    /// (comma separated): the differences are still reported.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    pub accept_hardware: Vec<String>,
}

/// The nodes the provisioning stage looks at, with what it needs to run.
pub(crate) struct Prepared {
    pub candidates: Vec<Candidate>,
    pub keys_dir: PathBuf,
    pub cache: PathBuf,
    pub authorized_key: String,
    pub book: Book,
    pub service_host: Option<RemoteHost>,
}

/// Candidates and paths, or `None` when the inventory has no `provisioning` network
/// or no node has an `os` and a BMC.
pub(crate) fn prepare(
    model: &Model,
    loaded: &LoadedInventory,
    state_path: Option<&Path>,
    args: &ProvisionArgs,
) -> anyhow::Result<Option<Prepared>> {
    let inventory = &loaded.inventory;
    let Some(network) = &inventory.provisioning else { return Ok(None) };
    let base = loaded.source.path.parent().map_or_else(|| PathBuf::from("."), Path::to_owned);
    let targets = targets::from_inventory(inventory, &LocalUser::from_env())?;
    let candidates = flow::candidates(model, inventory, &base, &targets, &options(args))?;
    if candidates.is_empty() {
        return Ok(None);
    }
    let relative = |path: &Path| if path.is_absolute() { path.to_owned() } else { base.join(path) };
    let keys_dir = network.host_keys.as_deref().map_or_else(|| base.join(".toolkit/host-keys"), relative);
    let cache = network.cache.as_deref().map_or_else(image::default_cache, relative);
    let authorized = if let Some(path) = &network.authorized_key {
        relative(path)
    } else {
        let identity =
            inventory.defaults.identity_file.as_deref().context(
                "`provisioning` needs `authorized_key`, or `defaults.identity_file` whose .pub is installed",
            )?;
        PathBuf::from(format!("{}.pub", relative(identity).display()))
    };
    let authorized_key = std::fs::read_to_string(&authorized)
        .with_context(|| format!("the SSH public key for installed nodes, `{}`", authorized.display()))?
        .trim()
        .to_owned();
    let book = Book::open(state_path, &model.name)?;
    let service_host = targets::provisioning_target(inventory, &LocalUser::from_env())?.map(|target| RemoteHost {
        target,
        // Long enough to copy the image over a slow link; a dead one fails on keepalives.
        options: SshOptions { command_timeout: Duration::from_hours(2), ..SshOptions::default() },
        dir: network
            .host
            .as_ref()
            .and_then(|host| host.dir.clone())
            .unwrap_or_else(|| "/var/lib/toolkit/provision".to_owned()),
    });
    Ok(Some(Prepared { candidates, keys_dir, cache, authorized_key, book, service_host }))
}

fn options(args: &ProvisionArgs) -> Options {
    Options {
        reinstall: args.reinstall.iter().cloned().collect(),
        accept_hardware: args.accept_hardware.iter().cloned().collect::<BTreeSet<_>>(),
        only: BTreeSet::new(),
    }
}

/// Runs the stage; `Status::Clean` when every node is ready for the SSH stage.
pub(crate) fn stage(
    model: &Model,
    loaded: &LoadedInventory,
    state_path: Option<&Path>,
    args: &ProvisionArgs,
    output: OutputFormat,
) -> anyhow::Result<Status> {
    let Some(prepared) = prepare(model, loaded, state_path, args)? else { return Ok(Status::Clean) };
    let Some(network) = &loaded.inventory.provisioning else { return Ok(Status::Clean) };
    let bars = crate::cli::log::interactive()
        .then(|| NodeBars::new(prepared.candidates.iter().map(|candidate| candidate.node.as_str()), None));
    let note = |node: &str, what: &str| match &bars {
        Some(bars) => bars.note(node, what),
        None => eprintln!("{node}: {what}"),
    };
    let run = Run {
        network,
        keys_dir: prepared.keys_dir,
        cache: prepared.cache,
        authorized_key: prepared.authorized_key,
        book: prepared.book,
        note: &note,
        service_host: prepared.service_host,
    };
    let report = live::runtime()?.block_on(flow::run(&run, &prepared.candidates, &options(args)));
    if let Some(bars) = &bars {
        bars.finish();
    }
    let report = report?;
    if output == OutputFormat::Json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&report)?));
    }
    let mut ready = true;
    for (node, outcome) in &report.nodes {
        match outcome {
            Outcome::AlreadyInstalled => eprintln!("{node}: installed already (SSH answers with its pinned key)"),
            Outcome::Installed { seconds, disk } => eprintln!("{node}: installed on {disk} in {seconds} s"),
            Outcome::HardwareMismatch { mismatches } => {
                ready = false;
                for mismatch in mismatches {
                    eprintln!("error: {node}: {mismatch}");
                }
                eprintln!(
                    "error: {node}: hardware differs from the blueprint: nothing was written to it (`--accept-hardware {node}` goes on)"
                );
            }
            Outcome::ForeignOs { fingerprint } => {
                ready = false;
                eprintln!(
                    "error: {node}: an OS toolkit did not install answers SSH (host key {fingerprint}): left alone; `--reinstall {node}` erases its OS disk"
                );
            }
            Outcome::Failed { step, error } => {
                ready = false;
                eprintln!("error: {node}: {step}: {error}");
            }
        }
    }
    if !ready {
        eprintln!("error: the SSH stage does not run until every node above is ready");
    }
    Ok(if ready { Status::Clean } else { Status::Error })
}

/// On a terminal, a line per node (and one for the image) that shows its current step
/// and how long the node has been at it, with every step also printed above the
/// lines, as without a terminal.
struct NodeBars {
    multi: indicatif::MultiProgress,
    bars: std::collections::BTreeMap<String, indicatif::ProgressBar>,
}

impl NodeBars {
    /// `target`: where to draw (stderr when `None`).
    fn new<'a>(nodes: impl Iterator<Item = &'a str>, target: Option<indicatif::ProgressDrawTarget>) -> Self {
        let multi = target.map_or_else(indicatif::MultiProgress::new, indicatif::MultiProgress::with_draw_target);
        let style = indicatif::ProgressStyle::with_template("{spinner} {prefix:10} [{elapsed:>4}] {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
        let bars = std::iter::once("image")
            .chain(nodes)
            .map(|name| {
                let bar = multi.add(indicatif::ProgressBar::new_spinner().with_style(style.clone()));
                bar.set_prefix(name.to_owned());
                bar.set_message("waiting");
                bar.enable_steady_tick(std::time::Duration::from_millis(250));
                (name.to_owned(), bar)
            })
            .collect();
        Self { multi, bars }
    }

    fn note(&self, node: &str, what: &str) {
        if let Some(bar) = self.bars.get(node) {
            bar.set_message(what.to_owned());
        }
        let _ = self.multi.println(format!("{node}: {what}"));
    }

    fn finish(&self) {
        for bar in self.bars.values() {
            bar.finish_and_clear();
        }
    }
}

/// The bare-metal lines of `toolkit plan`, and whether any node would be installed:
/// offline from the state file's records, live from an SSH probe with each node's
/// pinned key. `None` when nothing is provisioned.
pub(crate) fn plan_lines(
    model: &Model,
    loaded: &LoadedInventory,
    state: Option<&crate::plan::state::State>,
    state_path: Option<&Path>,
    reinstall: &[String],
) -> anyhow::Result<Option<(Vec<String>, bool)>> {
    let named = |node: &str| reinstall.iter().any(|name| name == node);
    let Some(prepared) = prepare(model, loaded, state_path, &ProvisionArgs::default())? else { return Ok(None) };
    let mut pending = std::collections::BTreeMap::new();
    if let Some(state) = state {
        for candidate in &prepared.candidates {
            let record = state.provisioning.get(&candidate.node);
            pending.insert(
                candidate.node.clone(),
                crate::deploy::provision::plan::from_record(record, named(&candidate.node)),
            );
        }
    } else {
        let probes = live::runtime()?.block_on(async {
            let probes = prepared.candidates.iter().map(|candidate| async {
                let key = crate::deploy::provision::host_keys::ensure(&prepared.keys_dir, &candidate.node)?;
                let presence =
                    flow::probe(candidate, &key, &prepared.keys_dir, std::time::Duration::from_secs(5)).await?;
                Ok::<_, anyhow::Error>((candidate.node.clone(), presence))
            });
            futures::future::join_all(probes).await
        });
        for probe in probes {
            let (node, presence) = probe?;
            let reinstall = named(&node);
            pending.insert(node, crate::deploy::provision::plan::from_presence(&presence, reinstall));
        }
    }
    let medium = loaded.inventory.provisioning.as_ref().map(|network| network.boot).unwrap_or_default();
    let lines = crate::deploy::provision::plan::lines(&prepared.candidates, &pending, medium);
    Ok(Some((lines, crate::deploy::provision::plan::has_changes(&pending))))
}

#[cfg(test)]
mod tests {
    use super::NodeBars;

    #[test]
    fn each_node_line_shows_its_latest_step() {
        let bars = NodeBars::new(["vm01", "vm02"].into_iter(), Some(indicatif::ProgressDrawTarget::hidden()));
        bars.note("vm01", "powered on for network boot");
        bars.note("vm02", "inspecting through its BMC");
        bars.note("vm01", "writing the image at 31 s");
        bars.note("image", "ready in 0.0 s");
        bars.note("elsewhere", "a name without a line is only printed");
        let shown: Vec<(String, String)> = bars.bars.iter().map(|(name, bar)| (name.clone(), bar.message())).collect();
        assert_eq!(
            shown,
            [
                ("image", "ready in 0.0 s"),
                ("vm01", "writing the image at 31 s"),
                ("vm02", "inspecting through its BMC")
            ]
            .map(|(name, message)| (name.to_owned(), message.to_owned()))
        );
        bars.finish();
        assert!(bars.bars.values().all(indicatif::ProgressBar::is_finished));
    }
}
