//! One provisioning run: every bare-metal node with an `os` is inspected, the blank
//! ones are installed over the network, and all of them end reachable over SSH with
//! the host key toolkit generated — or stopped at a named step.
//!
//! Stage: inspect + provision (IO: Redfish, DHCP, HTTP, SSH). Input: the expanded
//! model, the inventory and the state file. Output: a [`Report`] with each node's
//! outcome; the state file records each node's step as it moves (a killed run
//! resumes from it). Order, per node: inspect (nothing is written to a node whose
//! hardware differs from the blueprint) → is it already ours? (SSH answers with the
//! pinned key: never reinstalled unless named) → network boot into the agent →
//! image written → power off → boot from disk → SSH.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;

use super::agent::{self, AgentFiles};
use super::dhcp::{DhcpConfig, DhcpEvent, DhcpHost, DhcpMode as DhcpServe};
use super::disk::DiskRule;
use super::error::now;
pub use super::error::{ProvisionError, RunLock};
use super::host_keys::{self, HostKey};
use super::image::{self, BuiltImage, ImageSpec};
use super::iso;
use super::overlay::NodeOverlay;
use super::progress::{Deadlines, Delivery, Progress, Seen};
use super::server::Files;
use super::server::{EventKind, NodeBoot, normalize_mac};
use super::service::{Observed, RemoteHost, Service, ServiceSpec};
use super::verify::{self, Expected};
use crate::blueprint::schema::{BootMode, Distribution, Os};
use crate::bmc::redfish::{BmcConfig, BootTarget, PowerState, Redfish, ResetType};
use crate::inventory::schema::{BootMedium, DhcpMode, Inventory, Provisioning};
use crate::model::Model;
use crate::plan::state::State;
use crate::plan::state::provisioning::{NodeProvisioning, ProvisionStep};
use crate::transport::session::SshSession;
use crate::transport::ssh::{SshOptions, SshTarget};
use crate::transport::{TransportError, known_hosts};

/// What the caller asks of the run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Nodes to install even though they answer as installed (`--reinstall`).
    pub reinstall: BTreeSet<String>,
    /// Nodes to go on with though their hardware differs from the blueprint.
    pub accept_hardware: BTreeSet<String>,
    /// Only these nodes (all when empty).
    pub only: BTreeSet<String>,
}

/// How one node ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Outcome {
    /// It answered SSH with its pinned key: nothing was written.
    AlreadyInstalled,
    /// Installed now; reachable over SSH.
    Installed {
        /// Power-on to SSH.
        seconds: u64,
        /// The disk written.
        disk: String,
    },
    /// Its hardware differs from the blueprint: nothing was written.
    HardwareMismatch {
        /// Each difference (`7 GPUs, blueprint 8`).
        mismatches: Vec<String>,
    },
    /// Something answers SSH on it with a key toolkit did not make: an OS toolkit
    /// did not install, left alone without `--reinstall`.
    ForeignOs {
        /// The key it presented.
        fingerprint: String,
    },
    /// It stopped at a step.
    Failed {
        /// The step.
        step: String,
        /// Why, with the last thing seen.
        error: String,
    },
}

impl Outcome {
    /// Whether deploy may configure the node.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::AlreadyInstalled | Self::Installed { .. })
    }
}

/// Every node's outcome, by name.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// Outcomes by node.
    pub nodes: BTreeMap<String, Outcome>,
}

impl Report {
    /// Nodes that are not ready for the SSH stage.
    pub fn not_ready(&self) -> impl Iterator<Item = (&str, &Outcome)> {
        self.nodes.iter().filter(|(_, outcome)| !outcome.is_ready()).map(|(name, outcome)| (name.as_str(), outcome))
    }
}

/// A bare-metal node with an OS to have.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Host name.
    pub node: String,
    /// Its OS (its group's own, else the blueprint's).
    pub os: Os,
    /// What its hardware must be.
    pub expected: Expected,
    /// Its BMC.
    pub bmc: BmcConfig,
    /// Its management address (the inventory's), given by DHCP and kept by the OS.
    pub address: Ipv4Addr,
    /// How deploy logs in to it.
    pub ssh: SshTarget,
}

/// The nodes that would be provisioned: every node with an `os` (its group's, else
/// the blueprint's), a BMC and an IPv4 address in the inventory.
///
/// # Errors
/// [`ProvisionError::Inventory`] for a BMC whose credentials do not resolve or a
/// node address that is not IPv4.
pub fn candidates(
    model: &Model,
    inventory: &Inventory,
    base: &Path,
    targets: &[SshTarget],
    options: &Options,
) -> Result<Vec<Candidate>, ProvisionError> {
    let mut out = Vec::new();
    if inventory.provisioning.is_none() {
        return Ok(out);
    }
    for node in &model.nodes {
        if !options.only.is_empty() && !options.only.contains(&node.name) {
            continue;
        }
        let declared = &model.blueprint.node_groups[node.group];
        let Some(os) = declared.os.as_ref().or(model.blueprint.os.as_ref()) else { continue };
        if !inventory.bmcs.contains_key(&node.name) {
            continue;
        }
        let bmc = BmcConfig::from_inventory(inventory, &node.name, base)
            .map_err(|error| ProvisionError::Inventory(error.to_string()))?;
        let host = inventory.hosts.get(&node.name).ok_or_else(|| {
            ProvisionError::Inventory(format!("`{}` has a BMC but no `hosts` entry with its address", node.name))
        })?;
        let address = host.address.parse().map_err(|_| {
            ProvisionError::Inventory(format!(
                "`{}`: address `{}` is not an IPv4 address, which a node toolkit installs needs",
                node.name, host.address
            ))
        })?;
        let ssh = targets
            .iter()
            .find(|target| target.host == node.name)
            .cloned()
            .ok_or_else(|| ProvisionError::Inventory(format!("`{}` has no SSH target", node.name)))?;
        out.push(Candidate {
            node: node.name.clone(),
            os: os.clone(),
            expected: Expected::from_group(declared),
            bmc,
            address,
            ssh,
        });
    }
    Ok(out)
}

/// The image recipe of an `os` section, with the SSH user baked in.
#[must_use]
pub fn image_spec(os: &Os, ssh_user: &str) -> ImageSpec {
    let (mirror, kernel) = match os.distribution {
        Distribution::Debian => ("http://deb.debian.org/debian", "linux-image-amd64"),
        Distribution::Ubuntu => ("http://archive.ubuntu.com/ubuntu", "linux-image-generic"),
    };
    ImageSpec {
        distribution: match os.distribution {
            Distribution::Debian => image::Distribution::Debian,
            Distribution::Ubuntu => image::Distribution::Ubuntu,
        },
        suite: os.suite.clone(),
        mirror: os.mirror.clone().unwrap_or_else(|| mirror.to_owned()),
        kernel_package: os.kernel.clone().unwrap_or_else(|| kernel.to_owned()),
        packages: os.packages.clone(),
        locale: os.locale.clone(),
        timezone: os.timezone.clone(),
        ssh_user: ssh_user.to_owned(),
    }
}

/// The disk rule of an `os` section.
#[must_use]
pub fn disk_rule(os: &Os) -> DiskRule {
    DiskRule {
        path: os.disk.path.clone(),
        serial: os.disk.serial.clone(),
        wwn: os.disk.wwn.clone(),
        model: os.disk.model.clone(),
        min_gib: os.disk.min_gib,
        max_gib: os.disk.max_gib,
    }
}

/// Whether a node already runs an OS, and whose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// SSH answered with the key toolkit generated for it.
    Ours,
    /// SSH answered with another key.
    Foreign(String),
    /// Nothing answered SSH.
    Nothing,
}

/// Asks the node's SSH server for its host key, checked against the pinned key
/// only (a known_hosts file of one line): whatever the user's known_hosts says,
/// only the key toolkit generated proves the OS is the one toolkit installed.
///
/// # Errors
/// [`ProvisionError::KnownHosts`] when the one-line file cannot be written.
pub async fn probe(
    candidate: &Candidate,
    key: &HostKey,
    keys_dir: &Path,
    timeout: Duration,
) -> Result<Presence, ProvisionError> {
    let pinned = keys_dir.join(format!("{}.known_hosts", candidate.node));
    let _ = std::fs::remove_file(&pinned);
    known_hosts::pin(&pinned, &candidate.ssh.known_host_names(), &key.public)?;
    let target = SshTarget { known_hosts: pinned, proxy_jump: None, ..candidate.ssh.clone() };
    let options = SshOptions { connect_timeout: timeout, accept_new_host_keys: false, ..SshOptions::default() };
    match SshSession::connect(&target, &options).await {
        // The key exchange (and so the host key check) comes before authentication.
        Ok(session) => {
            session.close().await;
            Ok(Presence::Ours)
        }
        Err(TransportError::AuthFailed { .. }) => Ok(Presence::Ours),
        Err(TransportError::ChangedHostKey { presented_fingerprint, .. }) => {
            Ok(Presence::Foreign(presented_fingerprint))
        }
        Err(_) => Ok(Presence::Nothing),
    }
}

/// The state file, updated node by node as each moves (atomically, under a lock:
/// nodes install in parallel and each step is saved as it happens).
#[derive(Clone)]
pub struct Book {
    inner: Arc<Mutex<(State, Option<PathBuf>)>>,
}

impl Book {
    /// The state at `path` (or an in-memory one without a path).
    ///
    /// # Errors
    /// The state file exists but cannot be read.
    pub fn open(path: Option<&Path>, cluster: &str) -> Result<Self, ProvisionError> {
        let state = match path {
            Some(path) => State::load(path, cluster)?,
            None => State::empty(cluster),
        };
        Ok(Self { inner: Arc::new(Mutex::new((state, path.map(Path::to_owned)))) })
    }

    /// The node's record, if any.
    #[must_use]
    pub fn get(&self, node: &str) -> Option<NodeProvisioning> {
        let guard = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.0.provisioning.get(node).cloned()
    }

    /// Changes the node's record and saves the state file.
    ///
    /// # Errors
    /// The state file cannot be written.
    pub fn update(&self, node: &str, change: impl FnOnce(&mut NodeProvisioning)) -> Result<(), ProvisionError> {
        let mut guard = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (state, path) = &mut *guard;
        let record = state
            .provisioning
            .entry(node.to_owned())
            .or_insert_with(|| NodeProvisioning::new(ProvisionStep::Enrolled, now()));
        let before = record.step;
        change(record);
        if record.step != before {
            record.since = now();
        }
        if record.step != ProvisionStep::Failed {
            record.error = None;
        }
        if let Some(path) = path {
            state.save(path)?;
        }
        Ok(())
    }
}

/// Everything one run needs besides the nodes.
pub struct Run<'a> {
    /// The inventory's provisioning network.
    pub network: &'a Provisioning,
    /// Where host keys live (private, 0600).
    pub keys_dir: PathBuf,
    /// Where images are built.
    pub cache: PathBuf,
    /// The public key installed for the SSH user.
    pub authorized_key: String,
    /// The state book.
    pub book: Book,
    /// Say what happens (one line per step per node).
    pub note: &'a (dyn Fn(&str, &str) + Sync),
    /// The host the provisioning service runs on, when not this machine.
    pub service_host: Option<RemoteHost>,
}

/// Inspects every candidate, probes SSH, and installs those that need it.
///
/// # Errors
/// [`ProvisionError`] when the run cannot proceed at all (image build, DHCP or HTTP
/// server start, state file); a node's own failure is its [`Outcome`].
pub async fn run(run: &Run<'_>, candidates: &[Candidate], options: &Options) -> Result<Report, ProvisionError> {
    let _lock = RunLock::take(&run.cache)?;
    let mut report = Report::default();
    let mut to_install = Vec::new();
    let inspected =
        futures::future::join_all(candidates.iter().map(|candidate| prepare(run, candidate, options))).await;
    for (candidate, prepared) in candidates.iter().zip(inspected) {
        match prepared? {
            Prepared::Done(outcome) => {
                report.nodes.insert(candidate.node.clone(), outcome);
            }
            Prepared::Install { macs, key } => to_install.push(Installing { candidate, macs, key }),
        }
    }
    if to_install.is_empty() {
        return Ok(report);
    }
    for (node, outcome) in install(run, &to_install).await? {
        report.nodes.insert(node, outcome);
    }
    Ok(report)
}

enum Prepared {
    Done(Outcome),
    Install { macs: Vec<String>, key: HostKey },
}

struct Installing<'a> {
    candidate: &'a Candidate,
    macs: Vec<String>,
    key: HostKey,
}

/// Inspection, verification and the SSH probe of one node.
async fn prepare(run: &Run<'_>, candidate: &Candidate, options: &Options) -> Result<Prepared, ProvisionError> {
    let node = &candidate.node;
    let failed = |step: &str, error: String| Prepared::Done(Outcome::Failed { step: step.to_owned(), error });
    let key = host_keys::ensure(&run.keys_dir, node)?;
    if let Some(record) = run.book.get(node)
        && record.step == ProvisionStep::Installing
    {
        // A run that was killed (or lost power) left it half way: the disk may be half
        // written, so it is installed anew unless SSH proves otherwise.
        let last = record.last_seen.as_deref().unwrap_or("nothing seen yet");
        (run.note)(node, &format!("an earlier run stopped while installing it (last seen: {last}); resuming"));
    }
    (run.note)(node, "inspecting through its BMC");
    let hardware = match inspect(&candidate.bmc).await {
        Ok(hardware) => hardware,
        Err(error) => {
            run.book.update(node, |record| {
                record.step = ProvisionStep::Failed;
                record.error = Some(format!("inspect: {error}"));
            })?;
            return Ok(failed("inspect", error));
        }
    };
    let verdict = verify::verify(&candidate.expected, &hardware);
    let macs: Vec<String> = crate::bmc::inspect::boot_macs(&hardware).iter().map(|mac| normalize_mac(mac)).collect();
    let mismatches: Vec<String> = verdict.mismatches.iter().map(|mismatch| mismatch.message.clone()).collect();
    let accepted = options.accept_hardware.contains(node);
    run.book.update(node, |record| {
        record.macs.clone_from(&macs);
        record.hardware = serde_json::to_value(&hardware).ok();
        record.host_key = Some(key.public_line.clone());
        if mismatches.is_empty() || accepted {
            if record.step < ProvisionStep::Inspected || record.step == ProvisionStep::Failed {
                record.step = ProvisionStep::Inspected;
            }
        } else {
            record.step = ProvisionStep::Failed;
            record.error = Some(format!("inspect: {}", mismatches.join("; ")));
        }
    })?;
    if !mismatches.is_empty() && !accepted {
        return Ok(Prepared::Done(Outcome::HardwareMismatch { mismatches }));
    }
    if macs.is_empty() {
        return Ok(failed("inspect", "its BMC reports no network interface with a MAC to boot from".to_owned()));
    }
    let presence = probe(candidate, &key, &run.keys_dir, Duration::from_secs(5)).await?;
    let reinstall = options.reinstall.contains(node);
    match presence {
        Presence::Ours if !reinstall => {
            known_hosts::pin(&candidate.ssh.known_hosts, &candidate.ssh.known_host_names(), &key.public)?;
            run.book.update(node, |record| record.step = ProvisionStep::Reachable)?;
            Ok(Prepared::Done(Outcome::AlreadyInstalled))
        }
        Presence::Foreign(fingerprint) if !reinstall => Ok(Prepared::Done(Outcome::ForeignOs { fingerprint })),
        _ => Ok(Prepared::Install { macs, key }),
    }
}

async fn inspect(config: &BmcConfig) -> Result<crate::bmc::inspect::Hardware, String> {
    let redfish = Redfish::connect(config.clone()).await.map_err(|error| error.to_string())?;
    let result = async {
        let system = redfish.system().await?;
        redfish.inspect(&system).await
    }
    .await
    .map_err(|error| error.to_string());
    let _ = redfish.close().await;
    result
}

/// Builds what the nodes boot, serves it, and drives each node through its BMC
/// until SSH answers or it stalls: one image at a time (nodes that share a recipe
/// install together; the usual cluster has one).
async fn install(run: &Run<'_>, nodes: &[Installing<'_>]) -> Result<Vec<(String, Outcome)>, ProvisionError> {
    let mut by_recipe: Vec<(ImageSpec, Vec<&Installing<'_>>)> = Vec::new();
    for installing in nodes {
        let spec = image_spec(&installing.candidate.os, &installing.candidate.ssh.user);
        match by_recipe.iter_mut().find(|(known, _)| *known == spec) {
            Some((_, members)) => members.push(installing),
            None => by_recipe.push((spec, vec![installing])),
        }
    }
    let mut out = Vec::new();
    for (spec, members) in by_recipe {
        out.extend(install_image(run, &spec, &members).await?);
    }
    Ok(out)
}

async fn install_image(
    run: &Run<'_>,
    spec: &ImageSpec,
    nodes: &[&Installing<'_>],
) -> Result<Vec<(String, Outcome)>, ProvisionError> {
    let network = run.network;
    let hash = spec.hash();
    (run.note)(
        "image",
        &format!("{} {} ({}), cache {}", "building or reusing", spec.suite, &hash[..12], run.cache.display()),
    );
    let cache = run.cache.clone();
    let recipe = spec.clone();
    let building = Instant::now();
    let (image, agent): (BuiltImage, AgentFiles) = tokio::task::spawn_blocking(move || -> Result<_, ProvisionError> {
        let image = image::build(&recipe, &cache)?;
        let agent = agent::build(&image, &cache)?;
        Ok((image, agent))
    })
    .await
    .map_err(|error| ProvisionError::Inventory(format!("image build stopped: {error}")))??;
    (run.note)(
        "image",
        &format!(
            "ready in {:.1} s ({} bytes, sha256:{})",
            building.elapsed().as_secs_f64(),
            image.size_bytes,
            &image.sha256[..12]
        ),
    );
    let base = format!("http://{}:{}", network.address, network.port);
    let via_cd = network.boot == BootMedium::VirtualMedia;
    let mut boots = Vec::new();
    for installing in nodes {
        let candidate = installing.candidate;
        let static_address = (network.dhcp == DhcpMode::Dhcp).then(|| {
            (Ipv4Net::new(candidate.address, network.subnet.prefix_len()).unwrap_or(network.subnet), network.gateway)
        });
        let iso = if via_cd {
            let line = agent::cmdline(&base, &installing.macs[0], static_address);
            let (files, cache) = (agent.clone(), run.cache.clone());
            let built = tokio::task::spawn_blocking(move || iso::build(&files, &line, &cache))
                .await
                .map_err(|error| ProvisionError::Inventory(format!("boot ISO build stopped: {error}")))??;
            Some(built)
        } else {
            None
        };
        let overlay = NodeOverlay {
            hostname: candidate.node.clone(),
            boot_macs: installing.macs.clone(),
            address: match network.dhcp {
                DhcpMode::Dhcp => {
                    Some(Ipv4Net::new(candidate.address, network.subnet.prefix_len()).unwrap_or(network.subnet))
                }
                DhcpMode::Proxy => None,
            },
            gateway: network.gateway,
            dns: network.dns.clone(),
            ssh_user: candidate.ssh.user.clone(),
            authorized_keys: vec![run.authorized_key.clone()],
            host_key: installing.key.clone(),
        };
        boots.push(NodeBoot {
            name: candidate.node.clone(),
            macs: installing.macs.clone(),
            disk: disk_rule(&candidate.os),
            overlay: overlay.tar(),
            expected: Some(candidate.expected.in_band()),
            address: (network.dhcp == DhcpMode::Dhcp).then_some(candidate.address),
            iso,
        });
        run.book.update(&candidate.node, |record| record.image = Some(image.sha256.clone()))?;
    }
    let dhcp = (!via_cd).then(|| DhcpConfig {
        interface: network.interface.clone(),
        server_address: network.address,
        mode: match network.dhcp {
            DhcpMode::Dhcp => DhcpServe::Dhcp { subnet: network.subnet },
            DhcpMode::Proxy => DhcpServe::Proxy { subnet: network.subnet },
        },
        hosts: nodes
            .iter()
            .map(|installing| DhcpHost {
                name: installing.candidate.node.clone(),
                macs: installing.macs.clone(),
                address: installing.candidate.address,
            })
            .collect(),
        gateway: network.gateway,
        // The service fills in its server's.
        boot_url: String::new(),
    });
    // Virtual media needs nothing on the nodes' network but the HTTP server.
    let spec = ServiceSpec {
        bind: SocketAddr::from((network.address, network.port)),
        advertise: format!("{}:{}", network.address, network.port),
        files: Files::of(&image, &agent),
        nodes: boots,
        dhcp,
        run_dir: run.cache.join("run"),
        lock_dir: None,
    };
    let mut service = match &run.service_host {
        Some(host) => {
            (run.note)("image", &format!("provisioning service on {} (over SSH)", host.target.host));
            Service::start_on(host, &spec, &|said| (run.note)("image", said)).await?
        }
        None => Service::start_here(&spec).await?,
    };
    let deadlines = Deadlines {
        dhcp: Duration::from_secs(network.dhcp_timeout),
        install: Duration::from_secs(network.install_timeout),
    };
    let by_mac: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .flat_map(|(index, installing)| installing.macs.iter().map(move |mac| (mac.clone(), index)))
        .collect();
    // Each node's driver runs on its own and is told what the network saw of it.
    let mut senders = Vec::new();
    let mut drivers = Vec::new();
    for installing in nodes {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        senders.push(sender);
        let delivery = if via_cd { Delivery::VirtualMedia } else { Delivery::Network };
        drivers.push(drive(run, installing, receiver, deadlines, delivery));
    }
    let events = &mut service.events;
    let forward = async {
        while let Some(observed) = events.recv().await {
            let mac = match &observed {
                Observed::Http(event) => normalize_mac(&event.mac),
                Observed::Dhcp(event) => normalize_mac(event.mac()),
            };
            if let Some(&index) = by_mac.get(&mac) {
                let _ = senders[index].send(observed);
            }
        }
    };
    let outcomes = tokio::select! {
        outcomes = futures::future::join_all(drivers) => outcomes,
        () = forward => Vec::new(),
    };
    for (node, bytes) in service.stop().await {
        (run.note)(&node, &format!("served {bytes} bytes"));
    }
    let mut out = Vec::new();
    for (installing, outcome) in nodes.iter().zip(outcomes) {
        out.push((installing.candidate.node.clone(), outcome?));
    }
    Ok(out)
}

/// One node from power-on to SSH.
async fn drive(
    run: &Run<'_>,
    installing: &Installing<'_>,
    mut observed: tokio::sync::mpsc::UnboundedReceiver<Observed>,
    deadlines: Deadlines,
    delivery: Delivery,
) -> Result<Outcome, ProvisionError> {
    let candidate = installing.candidate;
    let node = &candidate.node;
    let fail = |step: &str, error: String| -> Result<Outcome, ProvisionError> {
        run.book.update(node, |record| {
            record.step = ProvisionStep::Failed;
            record.error = Some(format!("{step}: {error}"));
        })?;
        (run.note)(node, &format!("failed at {step}: {error}"));
        Ok(Outcome::Failed { step: step.to_owned(), error })
    };
    let redfish = match Redfish::connect(candidate.bmc.clone()).await {
        Ok(redfish) => redfish,
        Err(error) => return fail("power on", error.to_string()),
    };
    let system = match redfish.system().await {
        Ok(system) => system,
        Err(error) => return fail("power on", error.to_string()),
    };
    run.book.update(node, |record| {
        record.step = ProvisionStep::Installing;
        record.last_seen = None;
    })?;
    let started = Instant::now();
    let mut progress = Progress::via(delivery);
    let cd = match delivery {
        Delivery::Network => None,
        Delivery::VirtualMedia => {
            let url = format!(
                "http://{}:{}/media/{}.iso",
                run.network.address,
                run.network.port,
                installing.macs[0].replace(':', "-")
            );
            // Off first: some BMCs refuse new media while the machine reads the old.
            if let Err(error) = power_off(&redfish, &system).await {
                return fail("power on", error);
            }
            let inserted = async {
                let drive = redfish.virtual_cd(&system).await?;
                redfish.insert_media(&drive, &url).await?;
                Ok::<_, crate::bmc::BmcError>(drive)
            }
            .await;
            match inserted {
                Ok(drive) => Some(drive),
                Err(error) => return fail("virtual media", error.to_string()),
            }
        }
    };
    let target = if cd.is_some() { BootTarget::Cd } else { BootTarget::Pxe };
    if let Err(error) = power_on_into(&redfish, &system, target, candidate.os.boot_mode).await {
        return fail("power on", error);
    }
    (run.note)(node, if cd.is_some() { "powered on from its virtual CD" } else { "powered on for network boot" });
    progress.observe(Seen::PoweredOn, Duration::ZERO);
    let mut disk = String::new();
    let tick = Duration::from_secs(1);
    loop {
        if let Some(error) = progress.overdue(started.elapsed(), deadlines, &installing.macs) {
            let _ = redfish.reset(&system, ResetType::ForceOff).await;
            let step = match delivery {
                Delivery::Network if progress.last().is_none_or(|seen| *seen < Seen::DhcpRequest) => "network boot",
                Delivery::VirtualMedia if progress.last().is_none_or(|seen| *seen < Seen::AgentUp) => "virtual media",
                _ => "install",
            };
            return fail(step, error);
        }
        let seen = match tokio::time::timeout(tick, observed.recv()).await {
            Ok(Some(Observed::Dhcp(event))) => match event {
                DhcpEvent::Discover { .. } | DhcpEvent::Request { .. } | DhcpEvent::Offer { .. } => {
                    Some(Seen::DhcpRequest)
                }
                DhcpEvent::Ack { address, .. } => Some(Seen::LeaseGiven(address.to_string())),
                DhcpEvent::TftpSent { .. } => Some(Seen::BootLoaderSent),
            },
            Ok(Some(Observed::Http(event))) => match event.kind {
                EventKind::MediaFetched => Some(Seen::MediaFetched),
                EventKind::BootScript => Some(Seen::ScriptFetched),
                EventKind::KernelFetched => Some(Seen::KernelFetched),
                EventKind::InitrdFetched => Some(Seen::AgentFetched),
                EventKind::Inventory { disk: chosen, .. } => {
                    disk = chosen.unwrap_or_default();
                    run.book.update(node, |record| record.boot_mac = Some(normalize_mac(&event.mac)))?;
                    Some(Seen::AgentUp)
                }
                EventKind::Refused(reason) => {
                    return fail("install", format!("the agent was told not to write: {reason}"));
                }
                EventKind::Progress { step, detail } => match step.as_str() {
                    "writing" => Some(Seen::Writing),
                    "written" => Some(Seen::Written),
                    "verified" => Some(Seen::Verified),
                    "overlay" => Some(Seen::Overlay),
                    "done" => Some(Seen::Done),
                    "failed" => return fail("install", format!("the agent failed: {}", detail.unwrap_or_default())),
                    _ => None,
                },
                EventKind::ImageServed { .. } => None,
            },
            Ok(None) => return fail("install", "the provisioning service stopped".to_owned()),
            Err(_) => None,
        };
        if let Some(seen) = seen {
            let done = seen == Seen::Done;
            let before = progress.last().cloned();
            progress.observe(seen, started.elapsed());
            if progress.last() != before.as_ref()
                && let Some(last) = progress.last_seen()
            {
                (run.note)(node, &last);
                run.book.update(node, |record| record.last_seen = Some(last))?;
            }
            if done {
                break;
            }
        }
    }
    run.book.update(node, |record| {
        record.step = ProvisionStep::Installed;
        record.disk = Some(disk.clone());
    })?;
    // The agent powers the node off itself; the BMC says when.
    if let Err(error) = redfish.wait_for_power(&system, PowerState::Off, Duration::from_mins(2)).await {
        let _ = error;
        if let Err(error) = redfish.reset(&system, ResetType::ForceOff).await {
            return fail("boot from disk", error.to_string());
        }
    }
    progress.observe(Seen::PoweredOff, started.elapsed());
    if let Some(drive) = &cd
        && let Err(error) = redfish.eject_media(drive).await
    {
        // The one-time boot from disk comes first anyway; an ISO left in is untidy, not wrong.
        (run.note)(node, &format!("could not eject the virtual CD: {error}"));
    }
    if let Err(error) = power_on_into(&redfish, &system, BootTarget::Hdd, candidate.os.boot_mode).await {
        return fail("boot from disk", error);
    }
    progress.observe(Seen::BootingFromDisk, started.elapsed());
    (run.note)(node, "booting from disk");
    let _ = redfish.close().await;
    loop {
        match probe(candidate, &installing.key, &run.keys_dir, Duration::from_secs(5)).await? {
            Presence::Ours => break,
            Presence::Foreign(fingerprint) => {
                return fail(
                    "boot from disk",
                    format!(
                        "SSH answered with {fingerprint}, not the key toolkit wrote: is another machine on its address?"
                    ),
                );
            }
            Presence::Nothing => {}
        }
        if let Some(error) = progress.overdue(started.elapsed(), deadlines, &installing.macs) {
            return fail("boot from disk", error);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    known_hosts::pin(&candidate.ssh.known_hosts, &candidate.ssh.known_host_names(), &installing.key.public)?;
    let seconds = started.elapsed().as_secs();
    run.book.update(node, |record| {
        record.step = ProvisionStep::Reachable;
        record.last_seen = Some(format!("SSH up at {seconds} s"));
    })?;
    (run.note)(node, &format!("installed, SSH up after {seconds} s"));
    Ok(Outcome::Installed { seconds, disk })
}

/// Off, if it is on.
async fn power_off(redfish: &Redfish, system: &str) -> Result<(), String> {
    let power = redfish.power_state(system).await.map_err(|error| error.to_string())?;
    if power != PowerState::Off {
        redfish.reset(system, ResetType::ForceOff).await.map_err(|error| error.to_string())?;
        redfish
            .wait_for_power(system, PowerState::Off, Duration::from_mins(1))
            .await
            .map_err(|error| error.to_string())?;
    }
    Ok(())
}

/// Off (if on), a one-time boot from `target`, on.
async fn power_on_into(
    redfish: &Redfish,
    system: &str,
    target: BootTarget,
    mode: Option<BootMode>,
) -> Result<(), String> {
    power_off(redfish, system).await?;
    let mode = mode.map(|mode| match mode {
        BootMode::Uefi => "UEFI",
        BootMode::Legacy => "Legacy",
    });
    redfish.boot_once_in(system, target, mode).await.map_err(|error| error.to_string())?;
    redfish.reset(system, ResetType::On).await.map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_at_a_time_and_a_finished_run_frees_the_lock() {
        let cache = tempfile::tempdir().expect("tempdir");
        let held = RunLock::take(cache.path()).expect("free");
        let Err(ProvisionError::Busy { holder, .. }) = RunLock::take(cache.path()) else {
            panic!("a second run is refused while the first holds the lock");
        };
        assert!(holder.starts_with(&format!("pid {} since ", std::process::id())), "{holder}");
        drop(held);
        RunLock::take(cache.path()).expect("free again once the first is gone");
    }
}
