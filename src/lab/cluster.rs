//! `lab up`, `down`, `status` and `exec`: the lab's life cycle over the [`Docker`] CLI.
//!
//! Stage: IO. Input: a [`Layout`] (or just the cluster name). Output: containers and
//! networks labelled `toolkit.lab=<cluster>`, the SSH key and known_hosts, and reports.
//!
//! `up` is idempotent: what exists with the lab's label is kept (a running container is
//! not touched: deploy may have configured it), a stopped container is started, the
//! rest is created. On every container it starts, `up` removes the IPv4 addresses
//! Docker put on rail and cable interfaces: those belong to deploy, and a rail that
//! worked before deploy configured it would prove nothing.
//!
//! Reboots. A `systemctl reboot` inside a container ends its systemd (PID 1) with
//! SIGHUP, exit status 129: the kernel's answer to `reboot(2)` in a PID namespace.
//! Containers are created with `--restart=on-failure`, so Docker starts them again,
//! with the same addresses and interface order. What `up` does after a start is done
//! again at every boot by `toolkit-lab-boot.service` inside the container (see
//! [`boot_installer`]), which also makes `systemctl poweroff` end the container with
//! status 0, so a powered-off node stays off as on hardware. `docker stop`, `docker
//! kill` and `lab down` are untouched: Docker never restarts a container stopped by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use serde::Serialize;

use super::docker::{ContainerInfo, NetworkInfo};
use super::layout::{Container, LABEL, Layout, NetworkKind};
use super::{Docker, LabError, image, keys};
use crate::inventory::Inventory;

/// How long a started container may take until sshd answers.
const READY_TIMEOUT: Duration = Duration::from_mins(3);

/// inotify instances one lab container's processes hold (systemd, journald, logind,
/// dbus…): 7, measured on pristine and deployed nodes and switches alike.
const INOTIFY_PER_CONTAINER: u64 = 7;

/// inotify instances root's processes outside the lab may hold (the host's systemd,
/// dockerd…): a margin. With the default 128, 17 containers start and the 21st did not.
const INOTIFY_HOST: u64 = 8;

/// Where the kernel keeps the per-user limit of inotify instances.
const INOTIFY_LIMIT: &str = "/proc/sys/fs/inotify/max_user_instances";

/// Where the lab's SSH files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// Private key; the public key is next to it with `.pub`.
    pub identity: PathBuf,
    /// known_hosts with every container's host key.
    pub known_hosts: PathBuf,
}

impl Paths {
    /// The inventory's `defaults.identity_file` and `defaults.known_hosts`, else
    /// `.toolkit/lab/id_ed25519` and `.toolkit/lab/known_hosts`.
    #[must_use]
    pub fn from_inventory(inventory: Option<&Inventory>) -> Self {
        let defaults = inventory.map(|i| &i.defaults);
        Self {
            identity: defaults
                .and_then(|d| d.identity_file.clone())
                .unwrap_or_else(|| PathBuf::from(".toolkit/lab/id_ed25519")),
            known_hosts: defaults
                .and_then(|d| d.known_hosts.clone())
                .unwrap_or_else(|| PathBuf::from(".toolkit/lab/known_hosts")),
        }
    }
}

/// What `up` did to one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Created and started.
    Created,
    /// Existed stopped; started.
    Started,
    /// Was running; left alone.
    Kept,
}

impl fmt::Display for Outcome {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Created => "created",
            Self::Started => "started",
            Self::Kept => "kept (running)",
        })
    }
}

/// What `up` did.
#[derive(Debug, Clone, Serialize)]
pub struct UpReport {
    /// The image containers are created from.
    pub image: String,
    /// Each container and what happened to it.
    pub containers: Vec<(String, Outcome)>,
    /// Networks created (the others existed).
    pub networks_created: Vec<String>,
}

/// Brings the lab of `layout` up: image, key, networks, containers, known_hosts.
///
/// # Errors
/// Docker unreachable, a name or subnet taken by something not of this lab, a failed
/// image build, or a container whose sshd does not answer in time.
pub fn up(docker: &Docker, layout: &Layout, paths: &Paths, progress: &dyn Fn(&str)) -> Result<UpReport, LabError> {
    docker.ping()?;
    let recipe = image::Recipe::standard();
    let image = image::ensure(docker, &recipe, progress)?;
    let public_key = keys::ensure_key(&paths.identity, &format!("toolkit-lab-{}", layout.cluster))?;
    let cgroup = docker.cgroup_version()?;
    check_inotify(docker, layout)?;
    let networks_created = ensure_networks(docker, layout, progress)?;
    forward_lldp(docker, layout, progress)?;
    let prepared = Prepared { image, cgroup, public_key };

    let mut outcomes = Vec::with_capacity(layout.containers.len());
    for (order, container) in layout.containers.iter().enumerate() {
        let outcome = match docker.container(&container.name)? {
            None => {
                let created = create(docker, layout, container, order, &prepared, progress);
                if created.is_err() {
                    // Half a container (missing networks or key) would be "kept" by the next
                    // `up`; without it, the next `up` simply creates it again.
                    let _ = docker.output(&["container", "rm", "--force", &container.name]);
                }
                created?;
                Outcome::Created
            }
            Some(info) => {
                check_ours(&info, &layout.cluster)?;
                check_networks(&info, layout, container)?;
                if info.config.image != prepared.image {
                    progress(&format!(
                        "note: {} runs {}, the current recipe is {}: `toolkit lab down` and `up` to rebuild it",
                        container.host, info.config.image, prepared.image
                    ));
                }
                if info.state.running {
                    // Containers made before labs could reboot get the restart policy and
                    // the boot unit; the unit's installer also unmounts Docker's /etc/hosts
                    // (back after a `docker restart` outside toolkit). Nothing else is touched.
                    ensure_restart_policy(docker, &info)?;
                    prepare_boot(docker, layout, container, &info)?;
                    Outcome::Kept
                } else {
                    ensure_restart_policy(docker, &info)?;
                    docker.output(&["start", &container.name])?;
                    after_start(docker, layout, container, progress)?;
                    Outcome::Started
                }
            }
        };
        progress(&format!("lab: {} {outcome}", container.host));
        outcomes.push((container.host.clone(), outcome));
    }

    progress("lab: waiting for sshd in every container");
    let mut entries = Vec::with_capacity(layout.containers.len());
    let deadline = Instant::now() + READY_TIMEOUT;
    for container in &layout.containers {
        let key = wait_for_host_key(docker, container, deadline)?;
        wait_for_port(container.management, deadline, &container.host)?;
        entries.push((container.management, key));
    }
    keys::write_file(&paths.known_hosts, &keys::known_hosts(&entries), 0o644)?;
    progress(&format!(
        "lab: {} containers ready; ssh -i {} -o UserKnownHostsFile={} root@{}",
        entries.len(),
        paths.identity.display(),
        paths.known_hosts.display(),
        layout.containers.first().map_or(Ipv4Addr::UNSPECIFIED, |c| c.management)
    ));
    Ok(UpReport { image: prepared.image, containers: outcomes, networks_created })
}

/// Every container runs as root of the host, so all their systemd, journald and
/// dbus processes share root's inotify instances; past the limit (128 by default) a
/// new container's systemd exits at boot (status 255) and `docker exec` into it
/// fails. Refuse before, saying how to raise the limit. Only when the daemon is this
/// machine's can its limit be read here; otherwise nothing is checked.
fn check_inotify(docker: &Docker, layout: &Layout) -> Result<(), LabError> {
    let Some(limit) = std::fs::read_to_string(INOTIFY_LIMIT).ok().and_then(|text| text.trim().parse::<u64>().ok())
    else {
        return Ok(());
    };
    let running = docker.output(&["ps", "--format", "{{.Names}}", "--filter", &format!("label={LABEL}")])?;
    let running: BTreeSet<&str> = running.lines().map(str::trim).filter(|name| !name.is_empty()).collect();
    let to_start = layout.containers.iter().filter(|c| !running.contains(c.name.as_str())).count();
    match inotify_shortfall(limit, running.len(), to_start) {
        Some(message) => Err(LabError::Conflict(message)),
        None => Ok(()),
    }
}

/// Why `to_start` more containers next to `running` lab containers would exceed
/// `limit` inotify instances, if they would.
#[must_use]
pub fn inotify_shortfall(limit: u64, running: usize, to_start: usize) -> Option<String> {
    if to_start == 0 {
        return None;
    }
    let containers = u64::try_from(running + to_start).unwrap_or(u64::MAX);
    let needed = containers.saturating_mul(INOTIFY_PER_CONTAINER).saturating_add(INOTIFY_HOST);
    (needed > limit).then(|| {
        let suggested = needed.saturating_mul(2).next_power_of_two().max(1024);
        format!(
            "{containers} lab containers ({running} running, {to_start} to start) need about {needed} inotify \
             instances, and this machine allows {limit} per user (systemd in a container that gets none exits \
             at boot): raise it with `sudo sysctl -w fs.inotify.max_user_instances={suggested}`, or \
             `toolkit lab down` another lab"
        )
    })
}

/// What every container creation needs, made once per `up`.
struct Prepared {
    image: String,
    cgroup: String,
    public_key: String,
}

/// Creates, connects, keys and starts one container.
fn create(
    docker: &Docker,
    layout: &Layout,
    container: &Container,
    order: usize,
    prepared: &Prepared,
    progress: &dyn Fn(&str),
) -> Result<(), LabError> {
    let Prepared { image, cgroup, public_key } = prepared;
    docker.output(&create_args(layout, container, order, image, cgroup))?;
    // Every network is connected before the first start, so the first start already
    // names interfaces in the order every later start will (see the layout's module doc).
    for attachment in container.attachments.iter().filter(|a| layout.networks[a.network].is_fabric()) {
        let network = &layout.networks[attachment.network];
        let address = attachment.address.to_string();
        docker.output(&["network", "connect", "--ip", &address, &network.name, &container.name])?;
    }
    copy_authorized_key(docker, &container.name, public_key)?;
    docker.output(&["start", &container.name])?;
    after_start(docker, layout, container, progress)
}

/// A kept container must be on exactly the networks the layout plans.
fn check_networks(info: &ContainerInfo, layout: &Layout, container: &Container) -> Result<(), LabError> {
    let planned: BTreeSet<&str> =
        container.attachments.iter().map(|a| layout.networks[a.network].name.as_str()).collect();
    let actual: BTreeSet<&str> = info.network_settings.networks.keys().map(String::as_str).collect();
    if planned == actual {
        return Ok(());
    }
    let list = |set: &BTreeSet<&str>| set.iter().copied().collect::<Vec<_>>().join(", ");
    Err(LabError::Conflict(format!(
        "container `{}` is on networks {}, the blueprint now plans {}: `toolkit lab down` first",
        container.name,
        list(&actual),
        list(&planned)
    )))
}

/// Creates the networks that do not exist; returns the names of those it created.
fn ensure_networks(docker: &Docker, layout: &Layout, progress: &dyn Fn(&str)) -> Result<Vec<String>, LabError> {
    let existing = docker.networks()?;
    let by_name: BTreeMap<&str, &super::docker::NetworkInfo> = existing.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut used: Vec<(String, Ipv4Net)> =
        existing.iter().flat_map(|n| n.subnets().into_iter().map(|s| (n.name.clone(), s))).collect();
    let mut created = Vec::new();
    for network in &layout.networks {
        if let Some(found) = by_name.get(network.name.as_str()) {
            if found.label(LABEL) != Some(layout.cluster.as_str()) {
                return Err(LabError::Conflict(format!(
                    "Docker network `{}` exists but is not this lab's (label {LABEL}={}): remove or rename it",
                    network.name, layout.cluster
                )));
            }
            match found.subnets().first() {
                Some(actual) if *actual != network.subnet => {
                    return Err(LabError::Conflict(format!(
                        "network `{}` has subnet {actual}, the blueprint now plans {}: `toolkit lab down` first",
                        network.name, network.subnet
                    )));
                }
                Some(_) => {}
                None => return Err(LabError::Conflict(format!("network `{}` has no IPv4 subnet", network.name))),
            }
            continue;
        }
        let subnet = network.subnet;
        if let Some((owner, theirs)) = used.iter().find(|(_, s)| s.contains(&subnet) || subnet.contains(s)) {
            return Err(LabError::Conflict(format!(
                "network `{}` needs {subnet}, which Docker network `{owner}` ({theirs}) overlaps: \
                 `toolkit lab down` another lab, or change the blueprint's subnets",
                network.name
            )));
        }
        let gateway = network.gateway;
        let kind = match network.kind {
            NetworkKind::Management => "management",
            NetworkKind::Rail { .. } => "rail",
            NetworkKind::Link { .. } => "link",
        };
        let mut args = vec![
            "network".to_owned(),
            "create".to_owned(),
            "--driver=bridge".to_owned(),
            format!("--subnet={subnet}"),
            format!("--gateway={gateway}"),
            format!("--label={LABEL}={}", layout.cluster),
            format!("--label={LABEL}.network={kind}"),
            format!("--opt=com.docker.network.driver.mtu={}", network.mtu),
        ];
        if network.internal {
            args.push("--internal".to_owned());
        }
        if network.is_fabric() {
            // Fabric bridges are cables, not a way out: no NAT, and no address for the
            // host on them (the host is not a member of the fabric). They cannot be
            // `--internal`: Docker then drops bridged packets whose addresses are not in
            // the network's subnet, which is every routed packet of the fabric.
            args.push("--opt=com.docker.network.bridge.enable_ip_masquerade=false".to_owned());
            args.push("--opt=com.docker.network.bridge.inhibit_ipv4=true".to_owned());
        }
        args.push(network.name.clone());
        docker.output(&args)?;
        progress(&format!("lab: network {} ({subnet}) created", network.name));
        used.push((network.name.clone(), subnet));
        created.push(network.name.clone());
    }
    Ok(created)
}

/// IEEE 802.1AB: LLDP frames go to 01:80:c2:00:00:0e, a group address bridges must
/// not forward; a real cable has no bridge in it. Bit 14 of a Linux bridge's
/// `group_fwd_mask` lets that one group address through, so the fabric networks act
/// as cables for lldpd and the cabling validator. Needs root on the Docker host:
/// without it the lab still works, but switches see no LLDP neighbours.
fn forward_lldp(docker: &Docker, layout: &Layout, progress: &dyn Fn(&str)) -> Result<(), LabError> {
    let networks = docker.networks()?;
    for network in layout.networks.iter().filter(|network| network.is_fabric()) {
        let Some(bridge) = networks.iter().find(|n| n.name == network.name).and_then(NetworkInfo::bridge) else {
            continue;
        };
        let mask = Path::new("/sys/class/net").join(&bridge).join("bridge/group_fwd_mask");
        let current = std::fs::read_to_string(&mask).ok().and_then(|text| parse_mask(&text));
        let Some(current) = current else {
            progress(&format!(
                "warning: bridge {bridge} of {} is not on this machine: LLDP will not cross it (cabling checks see no neighbours)",
                network.name
            ));
            continue;
        };
        if current & LLDP_FWD_BIT != 0 {
            continue;
        }
        if let Err(error) = std::fs::write(&mask, (current | LLDP_FWD_BIT).to_string()) {
            progress(&format!(
                "warning: cannot let LLDP cross bridge {bridge} of {} ({error}): run `echo {} | sudo tee {}`",
                network.name,
                current | LLDP_FWD_BIT,
                mask.display()
            ));
        }
    }
    Ok(())
}

/// The bit of 01:80:c2:00:00:0e (LLDP) in a bridge's `group_fwd_mask`.
const LLDP_FWD_BIT: u16 = 1 << 0x0e;

/// `group_fwd_mask` as sysfs shows it (`0x0` or decimal, depending on the kernel).
fn parse_mask(text: &str) -> Option<u16> {
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u16::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// `docker create` arguments for a container, attached to management only (the
/// fabric networks are connected before the first start; see the layout's module doc).
#[must_use]
pub fn create_args(
    layout: &Layout,
    container: &Container,
    order: usize,
    image: &str,
    cgroup_version: &str,
) -> Vec<String> {
    let management = container.attachments.iter().find(|a| !layout.networks[a.network].is_fabric());
    let mut args: Vec<String> = vec![
        "create".into(),
        format!("--name={}", container.name),
        format!("--hostname={}", container.host),
        format!("--label={LABEL}={}", layout.cluster),
        format!("--label={LABEL}.host={}", container.host),
        format!("--label={LABEL}.role={}", container.role),
        format!("--label={LABEL}.order={order:04}"),
        // systemd is PID 1: it needs /run and /run/lock as tmpfs, the container
        // marker, and the signal that makes it shut down cleanly on `docker stop`.
        "--tmpfs=/run".into(),
        "--tmpfs=/run/lock".into(),
        "--env=container=docker".into(),
        "--stop-signal=SIGRTMIN+3".into(),
        // `systemctl reboot` ends systemd with status 129 (SIGHUP): Docker starts the
        // container again, as a machine boots again. Containers stopped or killed by
        // hand are never restarted, and poweroff exits 0 (see `boot_installer`).
        format!("--restart={RESTART_POLICY}"),
        // A fresh Linux box: IPv6 on (BGP unnumbered runs on link-local addresses),
        // forwarding off until deploy turns a switch into a router.
        "--sysctl=net.ipv6.conf.all.disable_ipv6=0".into(),
        "--sysctl=net.ipv6.conf.default.disable_ipv6=0".into(),
        "--sysctl=net.ipv4.ip_forward=0".into(),
    ];
    if cgroup_version.trim() == "1" {
        // `--privileged` asks for every capability, and fails where the engine itself
        // lacks one (here: CAP_SYS_RESOURCE, "unable to apply caps"); the same set
        // minus that one, without seccomp/AppArmor confinement and with /proc/sys
        // writable, runs systemd and FRR.
        args.extend(
            [
                "--cap-add=ALL",
                "--cap-drop=SYS_RESOURCE",
                "--security-opt=seccomp=unconfined",
                "--security-opt=apparmor=unconfined",
                "--security-opt=systempaths=unconfined",
                "--cgroupns=host",
                "--volume=/sys/fs/cgroup:/sys/fs/cgroup:ro",
            ]
            .map(String::from),
        );
    } else {
        // cgroup v2: systemd wants its own writable cgroup tree.
        args.extend(["--privileged", "--cgroupns=private"].map(String::from));
    }
    if let Some(management) = management {
        let network = &layout.networks[management.network];
        args.push(format!("--network={}", network.name));
        args.push(format!("--ip={}", management.address));
    }
    args.push(image.to_owned());
    args.push("/sbin/init".to_owned());
    args
}

/// Puts `/root/.ssh/authorized_keys` (the lab's public key) into a created container.
fn copy_authorized_key(docker: &Docker, container: &str, public_key: &str) -> Result<(), LabError> {
    let archive = authorized_keys_tar(&format!("{public_key}\n"));
    let mut command = docker.command(&["cp", "-", &format!("{container}:/root")]);
    command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    command.stderr(std::process::Stdio::piped());
    let mut child = command.spawn().map_err(|source| LabError::Docker(docker.spawn_error(source)))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(&archive).map_err(|source| LabError::Docker(docker.spawn_error(source)))?;
    }
    let output = child.wait_with_output().map_err(|source| LabError::Docker(docker.spawn_error(source)))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LabError::Docker(super::DockerError::Failed {
            command: format!("cp - {container}:/root"),
            message: super::docker::last_words(&output),
        }))
    }
}

/// A tar archive of `.ssh/` (0700) and `.ssh/authorized_keys` (0600), owned by root.
#[must_use]
pub fn authorized_keys_tar(text: &str) -> Vec<u8> {
    let mut archive = Vec::with_capacity(4 * 512);
    archive.extend(tar_header(".ssh/", 0o700, 0, b'5'));
    archive.extend(tar_header(".ssh/authorized_keys", 0o600, text.len(), b'0'));
    archive.extend(text.as_bytes());
    archive.resize(archive.len().div_ceil(512) * 512, 0);
    archive.resize(archive.len() + 1024, 0);
    archive
}

/// One ustar header block.
fn tar_header(name: &str, mode: u32, size: usize, kind: u8) -> [u8; 512] {
    let mut header = [0_u8; 512];
    let mut put = |offset: usize, bytes: &[u8]| header[offset..offset + bytes.len()].copy_from_slice(bytes);
    put(0, name.as_bytes());
    put(100, format!("{mode:07o}\0").as_bytes());
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{size:011o}\0").as_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    put(136, format!("{now:011o}\0").as_bytes());
    put(148, b"        ");
    put(156, &[kind]);
    put(257, b"ustar\0");
    put(263, b"00");
    put(265, b"root");
    put(297, b"root");
    let checksum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    header[148..156].copy_from_slice(format!("{checksum:06o}\0 ").as_bytes());
    header
}

/// Interfaces inside a running container: name by MAC address, from `ip -o link`.
fn interfaces_by_mac(docker: &Docker, container: &str) -> Result<BTreeMap<String, String>, LabError> {
    let text = docker.exec(container, &["ip", "-o", "link", "show"], None)?;
    Ok(parse_ip_link(&text))
}

/// Parses `ip -o link show`: MAC → interface name (without `@ifN`).
#[must_use]
pub fn parse_ip_link(text: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(name) = fields.nth(1) else { continue };
        let name = name.trim_end_matches(':').split('@').next().unwrap_or_default();
        let mut rest = line.split_whitespace().skip_while(|f| *f != "link/ether");
        if let (Some(_), Some(mac)) = (rest.next(), rest.next()) {
            found.insert(mac.to_ascii_lowercase(), name.to_owned());
        }
    }
    found
}

/// Parses `ip -o -4 address show`: interface → its IPv4 addresses with prefix.
#[must_use]
pub fn parse_ip_address(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let (Some(name), Some(position)) = (fields.get(1), fields.iter().position(|f| *f == "inet"))
            && let Some(address) = fields.get(position + 1)
        {
            found.entry((*name).to_owned()).or_default().push((*address).to_owned());
        }
    }
    found
}

/// The restart policy every lab container has: see the module doc.
const RESTART_POLICY: &str = "on-failure";

/// Where the boot script goes inside a container.
const BOOT_SCRIPT: &str = "/usr/local/sbin/toolkit-lab-boot";

/// Makes a container just started look like a freshly installed machine: no
/// addresses on its rail and cable interfaces, and a plain `/etc/hosts` file; and
/// installs the unit that does the same at its every later boot.
fn after_start(
    docker: &Docker,
    layout: &Layout,
    container: &Container,
    progress: &dyn Fn(&str),
) -> Result<(), LabError> {
    let Some(info) = docker.container(&container.name)? else {
        return Err(LabError::Conflict(format!("container `{}` vanished while starting", container.name)));
    };
    strip_fabric_addresses(docker, layout, container, &info, progress)?;
    prepare_boot(docker, layout, container, &info)
}

/// Sets the lab's restart policy on a container created before it had one.
fn ensure_restart_policy(docker: &Docker, info: &ContainerInfo) -> Result<(), LabError> {
    if info.host_config.restart_policy.name != RESTART_POLICY {
        docker.output(&["update", &format!("--restart={RESTART_POLICY}"), info.short_name()])?;
    }
    Ok(())
}

/// Installs (when changed) the boot unit of [`boot_installer`] in a running
/// container, and unmounts Docker's `/etc/hosts` now.
fn prepare_boot(docker: &Docker, layout: &Layout, container: &Container, info: &ContainerInfo) -> Result<(), LabError> {
    let fabric_macs: Vec<String> = container
        .attachments
        .iter()
        .filter(|attachment| layout.networks[attachment.network].is_fabric())
        .filter_map(|attachment| info.network_settings.networks.get(&layout.networks[attachment.network].name))
        .map(|endpoint| endpoint.mac_address.to_ascii_lowercase())
        .filter(|mac| !mac.is_empty())
        .collect();
    let installer = boot_installer(container, &fabric_macs);
    docker.exec(&container.name, &["sh", "-s"], Some(&installer))?;
    Ok(())
}

/// A shell script, run inside a container on its standard input, that installs what
/// a container needs to boot again like a machine, and then fixes `/etc/hosts` now:
///
/// - `toolkit-lab-boot` and its unit (before networkd and deploy's interface naming),
///   run at every boot. Docker redoes two things at every start that a machine does
///   not: it bind-mounts its own `/etc/hosts`, which deploy cannot replace (deploy
///   writes by rename: "Device or resource busy"), so the mount goes and the file
///   under it stays (a Debian installer's, or deploy's); and it puts IPv4 addresses
///   on rail and cable interfaces, which belong to deploy, so they go (found by MAC:
///   deploy renames the interfaces).
/// - a drop-in that makes `systemctl poweroff` end the container with status 0, which
///   the restart policy leaves stopped (the kernel would end it with SIGINT, 130).
///
/// Files are replaced only when their content changed, and systemd reloaded only then,
/// so a second `up` costs one `docker exec`. Every value in it comes from the layout
/// (host names, addresses, MACs), inside quoted here-documents.
#[must_use]
pub fn boot_installer(container: &Container, fabric_macs: &[String]) -> String {
    let hosts = format!(
        "127.0.0.1\tlocalhost\n{}\t{}\n\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n",
        container.management, container.host
    );
    let macs = fabric_macs.join(" ");
    let script = format!(
        r#"#!/bin/sh
# Written by `toolkit lab up`: what it does after starting a container, done again at
# every boot (a `systemctl reboot` restarts the container). See lab/README.md.
# The installer and this script (run by systemd at the container's start) may both
# find the mount and race to remove it: losing that race is fine, a mount left is not.
if mountpoint -q /etc/hosts; then umount /etc/hosts || ! mountpoint -q /etc/hosts; fi
if ! test -s /etc/hosts; then cat /etc/toolkit-lab/hosts > /etc/hosts; fi
fabric_macs="{macs}"
for dev in /sys/class/net/*; do
    mac=$(cat "$dev/address" 2>/dev/null) || continue
    case " $fabric_macs " in
        *" $mac "*) ip -4 address flush dev "${{dev##*/}}" ;;
    esac
done
"#
    );
    let unit = format!(
        "[Unit]\n\
         Description=toolkit lab: undo what Docker does at every container start\n\
         DefaultDependencies=no\n\
         Before=sysinit.target network-pre.target systemd-networkd.service toolkit-link-names.service\n\
         Wants=network-pre.target\n\n\
         [Service]\n\
         Type=oneshot\n\
         RemainAfterExit=yes\n\
         ExecStart={BOOT_SCRIPT}\n\n\
         [Install]\n\
         WantedBy=sysinit.target\n"
    );
    let poweroff = "[Unit]\nSuccessAction=exit-force\nSuccessActionExitStatus=0\n";
    let mut installer = String::from(
        "set -e\n\
         changed=\n\
         put() {\n    \
             tmp=\"$1.toolkit-new\"\n    \
             cat > \"$tmp\"\n    \
             chmod \"$2\" \"$tmp\"\n    \
             if cmp -s \"$tmp\" \"$1\"; then rm -f \"$tmp\"; else mv \"$tmp\" \"$1\"; changed=1; fi\n\
         }\n\
         mkdir -p /etc/toolkit-lab /usr/local/sbin /etc/systemd/system/systemd-poweroff.service.d\n",
    );
    for (path, mode, content) in [
        ("/etc/toolkit-lab/hosts", "0644", hosts.as_str()),
        (BOOT_SCRIPT, "0755", script.as_str()),
        ("/etc/systemd/system/toolkit-lab-boot.service", "0644", unit.as_str()),
        ("/etc/systemd/system/systemd-poweroff.service.d/toolkit-lab.conf", "0644", poweroff),
    ] {
        let _ = write!(installer, "put {path} {mode} <<'TOOLKIT_LAB_EOF'\n{content}TOOLKIT_LAB_EOF\n");
    }
    // `systemctl enable` is this link; made by hand, it needs no running systemd. Right
    // after `docker start`, systemd may not listen yet ("Failed to connect to bus"):
    // the reload waits for its socket.
    installer.push_str(
        "mkdir -p /etc/systemd/system/sysinit.target.wants\n\
         ln -sf ../toolkit-lab-boot.service /etc/systemd/system/sysinit.target.wants/toolkit-lab-boot.service\n\
         if [ -n \"$changed\" ]; then\n    \
             tries=0\n    \
             while ! [ -S /run/systemd/private ] && [ \"$tries\" -lt 100 ]; do sleep 0.1; tries=$((tries + 1)); done\n    \
             systemctl daemon-reload < /dev/null\n\
         fi\n\
         if mountpoint -q /etc/hosts; then umount /etc/hosts || ! mountpoint -q /etc/hosts; fi\n\
         if ! test -s /etc/hosts; then cat /etc/toolkit-lab/hosts > /etc/hosts; fi\n",
    );
    installer
}

/// Removes Docker's IPv4 addresses from the rail and cable interfaces of a container
/// just started, and checks that Docker named the interfaces as the layout says.
fn strip_fabric_addresses(
    docker: &Docker,
    layout: &Layout,
    container: &Container,
    info: &ContainerInfo,
    progress: &dyn Fn(&str),
) -> Result<(), LabError> {
    let by_mac = interfaces_by_mac(docker, &container.name)?;
    let mut batch = String::new();
    for attachment in &container.attachments {
        let network = &layout.networks[attachment.network];
        let Some(endpoint) = info.network_settings.networks.get(&network.name) else { continue };
        let Some(actual) = by_mac.get(&endpoint.mac_address.to_ascii_lowercase()) else { continue };
        if *actual != attachment.interface {
            progress(&format!(
                "warning: {} has {} on {}, the layout expected {}; deploy must match interfaces by MAC",
                container.host, actual, network.name, attachment.interface
            ));
        }
        if network.is_fabric() {
            let _ = writeln!(batch, "address flush dev {actual}");
        }
    }
    if !batch.is_empty() {
        docker.exec(&container.name, &["ip", "-4", "-batch", "-"], Some(&batch))?;
    }
    Ok(())
}

fn wait_for_host_key(docker: &Docker, container: &Container, deadline: Instant) -> Result<String, LabError> {
    loop {
        let output = docker.exec_raw(&container.name, &["cat", "/etc/ssh/ssh_host_ed25519_key.pub"], None)?;
        if output.status.success()
            && let Some(key) = keys::key_material(&String::from_utf8_lossy(&output.stdout))
        {
            return Ok(key);
        }
        if Instant::now() > deadline {
            return Err(LabError::Timeout(format!(
                "{} made no SSH host key in {}s: see `toolkit lab exec {} -- systemctl status ssh`",
                container.host,
                READY_TIMEOUT.as_secs(),
                container.host
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn wait_for_port(address: Ipv4Addr, deadline: Instant, host: &str) -> Result<(), LabError> {
    let socket = SocketAddr::from((address, 22));
    loop {
        if ssh_answers(&socket) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LabError::Timeout(format!(
                "sshd of {host} does not answer on {socket} from this machine: is the management \
                 network's bridge reachable (Docker in a VM is not)?"
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// True when an SSH server greets on `socket`. The probe greets back before closing, so
/// sshd logs a plain disconnect rather than a failed key exchange.
fn ssh_answers(socket: &SocketAddr) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = TcpStream::connect_timeout(socket, Duration::from_secs(2)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut greeting = [0_u8; 4];
    let answered = stream.read_exact(&mut greeting).is_ok() && &greeting == b"SSH-";
    let _ = stream.write_all(b"SSH-2.0-toolkit-lab-probe\r\n");
    answered
}

fn check_ours(info: &ContainerInfo, cluster: &str) -> Result<(), LabError> {
    if info.label(LABEL) == Some(cluster) {
        Ok(())
    } else {
        Err(LabError::Conflict(format!(
            "container `{}` exists but is not this lab's (label {LABEL}={cluster}): remove or rename it",
            info.short_name()
        )))
    }
}

/// What `down` removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DownReport {
    /// Containers removed.
    pub containers: Vec<String>,
    /// Networks removed.
    pub networks: Vec<String>,
}

/// Removes every container and network labelled `toolkit.lab=<cluster>`, and nothing else.
///
/// # Errors
/// Docker errors.
pub fn down(docker: &Docker, cluster: &str) -> Result<DownReport, LabError> {
    docker.ping()?;
    let containers = docker.containers_labelled(LABEL, cluster)?;
    if !containers.is_empty() {
        let mut args = vec!["container", "rm", "--force", "--volumes"];
        args.extend(containers.iter().map(String::as_str));
        docker.output(&args)?;
    }
    let networks = docker.networks_labelled(LABEL, cluster)?;
    let mut left = networks.clone();
    let mut attempt = 0;
    while !left.is_empty() {
        let mut args = vec!["network", "rm"];
        args.extend(left.iter().map(String::as_str));
        match docker.output(&args) {
            Ok(_) => break,
            // Right after `rm --force` the engine may still be releasing a container's
            // endpoints ("has active endpoints"): give it a few seconds. Docker 20.10 can
            // also keep an endpoint of a removed container for good (seen here: no
            // container listed, every `network rm` refused until dockerd restarted);
            // forcing each removed container's endpoint off is its documented cure.
            Err(error) if attempt < 20 && error.to_string().contains("active endpoints") => {
                attempt += 1;
                if attempt == 10 {
                    for network in &left {
                        for container in &containers {
                            let _ = docker.output(&["network", "disconnect", "--force", network, container]);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(500));
                left = docker.networks_labelled(LABEL, cluster)?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(DownReport { containers, networks })
}

/// One interface of a container, as it is now.
#[derive(Debug, Clone, Serialize)]
pub struct InterfaceStatus {
    /// Name inside the container (`eth0`, or deploy's `rail0`), `?` when not running.
    pub name: String,
    /// Docker network.
    pub network: String,
    /// MAC address (Docker derives it from the `--ip` address, so it is stable).
    pub mac: String,
    /// IPv4 addresses configured now (inside the container).
    pub addresses: Vec<String>,
}

/// One container, as it is now.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerStatus {
    /// Host name.
    pub host: String,
    /// Role label.
    pub role: String,
    /// Docker state (`running`, `exited`…).
    pub state: String,
    /// Management address.
    pub management: String,
    /// Interfaces, in name order.
    pub interfaces: Vec<InterfaceStatus>,
    /// Image.
    pub image: String,
}

/// Every container of the lab `cluster`, in layout order, with its live interfaces.
///
/// # Errors
/// Docker errors.
pub fn status(docker: &Docker, cluster: &str) -> Result<Vec<ContainerStatus>, LabError> {
    docker.ping()?;
    let management_network = super::layout::management_network(cluster);
    let mut found = Vec::new();
    for name in docker.containers_labelled(LABEL, cluster)? {
        let Some(info) = docker.container(&name)? else { continue };
        let (by_mac, addresses) = if info.state.running {
            let addresses = docker.exec(&name, &["ip", "-o", "-4", "address", "show"], None)?;
            (interfaces_by_mac(docker, &name)?, parse_ip_address(&addresses))
        } else {
            (BTreeMap::new(), BTreeMap::new())
        };
        let mut interfaces: Vec<InterfaceStatus> = info
            .network_settings
            .networks
            .iter()
            .map(|(network, endpoint)| {
                let interface = by_mac.get(&endpoint.mac_address.to_ascii_lowercase()).cloned();
                InterfaceStatus {
                    addresses: interface.as_ref().and_then(|i| addresses.get(i).cloned()).unwrap_or_default(),
                    name: interface.unwrap_or_else(|| "?".to_owned()),
                    network: network.clone(),
                    mac: endpoint.mac_address.clone(),
                }
            })
            .collect();
        interfaces.sort_by_key(|a| natural_key(&a.name));
        let management = info
            .network_settings
            .networks
            .get(&management_network)
            .map(super::docker::Endpoint::address)
            .unwrap_or_default();
        found.push((
            info.label(&format!("{LABEL}.order")).unwrap_or_default().to_owned(),
            ContainerStatus {
                host: info.label(&format!("{LABEL}.host")).unwrap_or(info.short_name()).to_owned(),
                role: info.label(&format!("{LABEL}.role")).unwrap_or_default().to_owned(),
                state: info.state.status.clone(),
                management,
                interfaces,
                image: info.config.image.clone(),
            },
        ));
    }
    found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.host.cmp(&b.1.host)));
    Ok(found.into_iter().map(|(_, status)| status).collect())
}

/// `eth10` after `eth2`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, number) = name.split_at(name.len() - digits);
    (stem.to_owned(), number.parse().unwrap_or(0))
}

/// The `docker exec` command for `command` in the container of `host`; `-t` only when
/// `terminal` (stdin is one). The caller runs it with inherited stdio.
///
/// # Errors
/// [`LabError::Conflict`] when the container does not exist or is not running.
pub fn exec(
    docker: &Docker,
    cluster: &str,
    host: &str,
    command: &[String],
    terminal: bool,
) -> Result<Command, LabError> {
    let name = super::layout::container_name(cluster, host);
    match docker.container(&name)? {
        Some(info) if info.state.running && info.label(LABEL) == Some(cluster) => {}
        Some(info) if info.label(LABEL) == Some(cluster) => {
            return Err(LabError::Conflict(format!("`{host}` is {}: `toolkit lab up` starts it", info.state.status)));
        }
        _ => {
            return Err(LabError::Conflict(format!(
                "lab `{cluster}` has no container `{host}`: `toolkit lab status` lists them"
            )));
        }
    }
    let mut args = vec!["exec".to_owned(), "--interactive".to_owned()];
    if terminal {
        args.push("--tty".to_owned());
    }
    args.push(name);
    args.extend(command.iter().cloned());
    Ok(docker.command(&args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_masks_parse_in_both_spellings() {
        assert_eq!(parse_mask("0x0\n"), Some(0));
        assert_eq!(parse_mask("0x4000"), Some(LLDP_FWD_BIT));
        assert_eq!(parse_mask("16384\n"), Some(LLDP_FWD_BIT));
        assert_eq!(parse_mask("bridge"), None);
    }

    #[test]
    fn ip_link_maps_mac_to_name() {
        let text = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n\
                    9: eth0@if10: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9216 qdisc noqueue state UP mode DEFAULT group default \\    link/ether 02:42:0A:63:00:0b brd ff:ff:ff:ff:ff:ff link-netnsid 0\n";
        let found = parse_ip_link(text);
        assert_eq!(found.len(), 1);
        assert_eq!(found.get("02:42:0a:63:00:0b").map(String::as_str), Some("eth0"));
    }

    #[test]
    fn ip_address_lists_ipv4_per_interface() {
        let text = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n\
                    12: eth2    inet 10.10.0.11/24 brd 10.10.0.255 scope global eth2\\       valid_lft forever\n";
        let found = parse_ip_address(text);
        assert_eq!(found.get("eth2"), Some(&vec!["10.10.0.11/24".to_owned()]));
        assert_eq!(found.len(), 2);
    }

    #[test]
    fn inotify_limit_counts_running_and_new_containers() {
        assert_eq!(inotify_shortfall(128, 8, 8), None, "two labs fit the default");
        assert_eq!(inotify_shortfall(128, 24, 0), None, "nothing to start, nothing to check");
        let message = inotify_shortfall(128, 16, 8).expect("three labs do not");
        assert!(message.contains("24 lab containers (16 running, 8 to start) need about 176"), "{message}");
        assert!(message.contains("this machine allows 128"), "{message}");
        assert!(message.contains("fs.inotify.max_user_instances=1024"), "{message}");
        assert_eq!(inotify_shortfall(1024, 16, 8), None);
    }

    #[test]
    fn authorized_keys_archive_is_a_valid_tar() {
        let archive = authorized_keys_tar("ssh-ed25519 AAAA test\n");
        assert_eq!(archive.len() % 512, 0);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("keys.tar");
        std::fs::write(&path, &archive).expect("write");
        let listing = Command::new("tar").arg("-tvf").arg(&path).output().expect("tar runs");
        let listing = String::from_utf8_lossy(&listing.stdout);
        assert!(listing.contains("drwx------ root/root"), "{listing}");
        assert!(listing.contains("-rw------- root/root") && listing.contains(".ssh/authorized_keys"), "{listing}");
        let extracted = dir.path().join("out");
        std::fs::create_dir(&extracted).expect("mkdir");
        let status = Command::new("tar").arg("-xf").arg(&path).arg("-C").arg(&extracted).status().expect("tar runs");
        assert!(status.success());
        let text = std::fs::read_to_string(extracted.join(".ssh/authorized_keys")).expect("extracted");
        assert_eq!(text, "ssh-ed25519 AAAA test\n");
    }

    #[test]
    fn boot_installer_is_valid_shell_and_flushes_only_fabric_interfaces() {
        let layout = lab_layout();
        let node = layout.containers.iter().find(|c| c.host == "node01").expect("node01");
        let macs = ["02:42:0a:c8:00:02".to_owned(), "02:42:0a:c8:00:22".to_owned()];
        let installer = boot_installer(node, &macs);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("installer.sh");
        std::fs::write(&path, &installer).expect("write");
        let check = Command::new("sh").arg("-n").arg(&path).output().expect("sh runs");
        assert!(check.status.success(), "{}\n{installer}", String::from_utf8_lossy(&check.stderr));
        assert!(installer.contains("fabric_macs=\"02:42:0a:c8:00:02 02:42:0a:c8:00:22\""), "{installer}");
        assert!(installer.contains("10.10.0.11\tnode01\n"), "{installer}");
        assert!(installer.contains("Before=sysinit.target network-pre.target systemd-networkd.service"));
        assert!(installer.contains("SuccessAction=exit-force\nSuccessActionExitStatus=0\n"));
        // Every here-document is closed, so the shell never swallows the rest.
        assert_eq!(installer.matches("<<'TOOLKIT_LAB_EOF'").count(), installer.matches("\nTOOLKIT_LAB_EOF\n").count());
    }

    #[test]
    fn containers_restart_when_their_systemd_reboots() {
        let layout = lab_layout();
        let args = create_args(&layout, &layout.containers[0], 0, "toolkit-lab:test", "1");
        assert!(args.contains(&"--restart=on-failure".to_owned()), "{args:?}");
    }

    fn lab_layout() -> Layout {
        crate::lab::layout::tests::lab(false).expect("plans")
    }

    #[test]
    fn interface_names_sort_naturally() {
        let mut names = vec!["eth10", "eth2", "eth0", "rail1"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["eth0", "eth2", "eth10", "rail1"]);
    }
}
