//! Host configuration: `/etc/hosts`, rail interfaces (netplan → systemd-networkd), mounts, packages and services of nodes.
//!
//! Stage: render. Input: the model and, when given, the inventory (real management
//! addresses, rail NIC MACs, switch addresses). Output: resources appended to `out`.
//!
//! Scale: `/etc/hosts` is one [`Content`] shared by every node, sysctl and mount unit
//! contents are rendered once per group or filesystem, and only the rail netplan (and
//! the interface-naming script, when the inventory lists rail MACs) is rendered per
//! node — one small template call each.
//!
//! Rails: interfaces are first named by MAC ([`super::links`]), then netplan's YAML is
//! turned into systemd-networkd files with `netplan generate` and networkd reloads
//! them. Not `netplan apply`: it also asks udev to rename and replug devices, which
//! fails where udev does not run (containers) and is not needed once the names exist.
//!
//! Ordering: a node's rail netplan comes after its leaves' configuration (switches
//! route before hosts address their rails), mounts after the NFS server's service.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::blueprint::schema::{FabricKind, FilesystemKind};
use crate::inventory::Inventory;
use crate::model::{Filesystem, Model, Node, network};
use crate::render::common::{SysctlApply, apply_once, file, package, service};
use crate::render::links::{LinkName, LinkNamer};
use crate::render::switch;
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Desired, Disruption, OnChange, Resource, ResourceId, Target};
use crate::topology::ports::is_interface_name;

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("host/hosts.j2", include_str!("../../templates/host/hosts.j2")),
    ("host/netplan-rails.yaml.j2", include_str!("../../templates/host/netplan-rails.yaml.j2")),
    ("host/sysctl-rails.conf.j2", include_str!("../../templates/host/sysctl-rails.conf.j2")),
    ("host/mount.j2", include_str!("../../templates/host/mount.j2")),
    ("host/exports.j2", include_str!("../../templates/host/exports.j2")),
];

/// Name resolution for every node.
pub const HOSTS: &str = "/etc/hosts";
/// Rail interfaces. Netplan refuses group/world-readable files, hence mode 0600.
pub const RAILS_NETPLAN: &str = "/etc/netplan/60-toolkit-rails.yaml";
/// The network daemon the rails' netplan is rendered for (netplan's default backend).
pub const NETWORKD: &str = "systemd-networkd";
/// ARP and reverse-path sysctls of rail interfaces.
pub const RAILS_SYSCTL: &str = "/etc/sysctl.d/90-toolkit-rails.conf";
/// NFS exports of a storage node.
pub const EXPORTS: &str = "/etc/exports";
/// Where systemd mount units are written.
pub const UNIT_DIR: &str = "/etc/systemd/system";
/// Export options: `sync` because jobs on other nodes read what one node wrote;
/// root stays squashed.
const EXPORT_OPTIONS: &str = "rw,sync,no_subtree_check";

/// Appends this module's resources.
///
/// # Errors
/// A template that fails to render, or a model without a parseable rail pool or
/// management subnet, or a filesystem with nothing to mount.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let hosts = renderer.render_content("host/hosts.j2", hosts_context(model, inventory))?;
    let namer = LinkNamer::new(renderer)?;
    let rails = RailRenderer::new(model, inventory, renderer, &namer)?;
    let mounts = MountUnits::new(model, renderer)?;
    let exports = Exports::new(model, renderer)?;
    // One modprobe.d file per group, shared by its nodes.
    let modprobe: Vec<Option<Content>> =
        model.groups.iter().map(|group| module_options(&group.module_options)).collect();
    out.reserve(model.nodes.len() * 8);
    for node in &model.nodes {
        let target = Target::node(&node.name);
        let hosts_file = file(&target, HOSTS, hosts.clone(), 0o644);
        let hosts_id = hosts_file.id.clone();
        out.push(hosts_file);
        rails.render(node, &target, out)?;
        exports.render(node, &target, out);
        mounts.render(node, &target, &hosts_id, out);
        if let Some(content) = &modprobe[node.group] {
            // kmod makes the directory; a minimal image may not have it yet.
            let directory = Resource::new(
                target.clone(),
                MODPROBE_DIR,
                Desired::Directory { path: MODPROBE_DIR.to_owned(), mode: 0o755, owner: "root".to_owned() },
            );
            // Module parameters are read only when the module loads: a reboot takes them.
            let options = file(&target, MODPROBE_CONF, content.clone(), 0o644)
                .after([directory.id.clone()])
                .disrupts(Disruption::Reboot);
            out.extend([directory, options]);
        }
    }
    Ok(())
}

/// Where a group's `module_options` land.
pub const MODPROBE_CONF: &str = "/etc/modprobe.d/90-toolkit.conf";
const MODPROBE_DIR: &str = "/etc/modprobe.d";

/// `options <module> <parameters>` per module (checked at lint: names and
/// `key=value` words only), or nothing without options.
fn module_options(options: &std::collections::BTreeMap<String, String>) -> Option<Content> {
    if options.is_empty() {
        return None;
    }
    let mut text = String::from("# Written by toolkit from the blueprint's module_options.\n");
    for (module, parameters) in options {
        let words: Vec<&str> = parameters.split_whitespace().collect();
        let _ = writeln!(text, "options {module} {}", words.join(" "));
    }
    Some(Content::new(text))
}

#[derive(Serialize)]
struct HostsContext<'a> {
    cluster: &'a str,
    /// `[address, names]` pairs.
    entries: Vec<[String; 2]>,
}

fn names(name: &str, domain: Option<&str>) -> String {
    match domain {
        Some(domain) => format!("{name}.{domain} {name}"),
        None => name.to_owned(),
    }
}

/// Nodes (the inventory's address when it is an IP, else the planned one), switches
/// the inventory places at an IP, then every rail address as `<node>-rail<N>`.
fn hosts_context<'a>(model: &'a Model, inventory: Option<&Inventory>) -> HostsContext<'a> {
    let domain = model.domain.as_deref();
    let rail_count: usize = model.nodes.iter().map(|node| node.rails.len()).sum();
    let mut entries = Vec::with_capacity(model.nodes.len() + rail_count + model.fabric.switches.len());
    for node in &model.nodes {
        let address = inventory
            .and_then(|inventory| inventory.hosts.get(&node.name))
            .and_then(|host| host.address.parse::<IpAddr>().ok())
            .unwrap_or(IpAddr::V4(node.mgmt_address));
        entries.push([address.to_string(), names(&node.name, domain)]);
    }
    if let Some(inventory) = inventory {
        for switch in &model.fabric.switches {
            if let Some(address) =
                inventory.switches.get(&switch.name).and_then(|entry| entry.address.parse::<IpAddr>().ok())
            {
                entries.push([address.to_string(), names(&switch.name, domain)]);
            }
        }
    }
    for node in &model.nodes {
        for rail in &node.rails {
            entries.push([rail.address.to_string(), names(&network::rail_hostname(&node.name, rail.rail), domain)]);
        }
    }
    HostsContext { cluster: &model.name, entries }
}

#[derive(Serialize)]
struct NetplanContext<'a> {
    hostname: &'a str,
    infiniband: bool,
    rails: Vec<RailView<'a>>,
}

#[derive(Serialize)]
struct RailView<'a> {
    netdev: &'a str,
    /// None on IPoIB: its MTU comes from the partition (4092 at most in datagram
    /// mode, so the fabric's 4096 would be refused).
    mtu: Option<u32>,
    address: std::net::Ipv4Addr,
    prefix_len: u8,
    subnet: Ipv4Net,
    /// The leaf on Ethernet; None on InfiniBand, whose switches do not route IP.
    gateway: Option<std::net::Ipv4Addr>,
    pool: Ipv4Net,
    table: u32,
}

#[derive(Serialize)]
struct SysctlContext<'a> {
    netdevs: Vec<&'a str>,
}

/// Renders the rail files of each node; what is shared is computed once.
struct RailRenderer<'a> {
    inventory: Option<&'a Inventory>,
    renderer: &'a Renderer,
    namer: &'a LinkNamer<'a>,
    pool: Option<Ipv4Net>,
    infiniband: bool,
    /// Per switch: the resources that make its config live.
    leaf_configs: Vec<Vec<ResourceId>>,
    /// Per group: the rail sysctl content (same netdev names on every node of a group)
    /// and the command that applies it.
    sysctl: Vec<Option<(Content, SysctlApply)>>,
}

impl<'a> RailRenderer<'a> {
    fn new(
        model: &'a Model,
        inventory: Option<&'a Inventory>,
        renderer: &'a Renderer,
        namer: &'a LinkNamer<'a>,
    ) -> Result<Self, RenderError> {
        let any_rails = model.nodes.iter().any(|node| !node.rails.is_empty());
        let pool = network::rail_pool(model);
        if any_rails && pool.is_none() {
            return Err(RenderError::Model {
                what: RAILS_NETPLAN.to_owned(),
                reason: format!(
                    "rail pool `{}` is not an IPv4 CIDR block",
                    model.blueprint.fabric.compute.addressing.rail_pool
                ),
            });
        }
        let leaf_configs =
            (0..model.fabric.switches.len()).map(|index| switch::config_resources(model, inventory, index)).collect();
        let sysctl = model
            .groups
            .iter()
            .map(|group| {
                let Some(first) = model.group_nodes(group).first().filter(|node| !node.rails.is_empty()) else {
                    return Ok(None);
                };
                let netdevs = first.rails.iter().map(|rail| rail.netdev.as_str()).collect();
                let content = Content::new(renderer.render("host/sysctl-rails.conf.j2", SysctlContext { netdevs })?);
                // After netplan: per-interface keys fail until the (renamed) interfaces exist.
                let apply = SysctlApply::new(
                    "sysctl-rails",
                    RAILS_SYSCTL,
                    &content,
                    "apply ARP and reverse-path settings of the rail interfaces",
                );
                Ok(Some((content, apply)))
            })
            .collect::<Result<_, RenderError>>()?;
        let infiniband = model.fabric.kind == FabricKind::Infiniband;
        Ok(Self { inventory, renderer, namer, pool, infiniband, leaf_configs, sysctl })
    }

    fn render(&self, node: &Node, target: &Target, out: &mut Vec<Resource>) -> Result<(), RenderError> {
        let (Some(pool), false) = (self.pool, node.rails.is_empty()) else {
            return Ok(());
        };
        // Names reach file names, YAML keys and the naming script.
        if let Some(rail) = node.rails.iter().find(|rail| !is_interface_name(&rail.netdev)) {
            return Err(RenderError::Model {
                what: format!("the rails of `{}`", node.name),
                reason: format!(
                    "`{}` is not an interface name: 1 to 15 letters, digits, `-`, `_` or `.` (see `rail_nics.netdev`)",
                    rail.netdev
                ),
            });
        }
        let macs = self.inventory.and_then(|inventory| inventory.hosts.get(&node.name)).map(|host| &host.rail_macs);
        let rails = node
            .rails
            .iter()
            .map(|rail| RailView {
                netdev: &rail.netdev,
                mtu: (!self.infiniband).then_some(rail.mtu),
                address: rail.address,
                prefix_len: rail.prefix_len,
                subnet: network::rail_subnet(rail),
                gateway: (!self.infiniband).then_some(rail.gateway),
                pool,
                table: network::rail_table(rail.rail),
            })
            .collect();
        let netplan = self.renderer.render_content(
            "host/netplan-rails.yaml.j2",
            NetplanContext { hostname: &node.name, infiniband: self.infiniband, rails },
        )?;
        let mut resources = Vec::with_capacity(10);
        let links = match macs {
            Some(macs) => node
                .rails
                .iter()
                .filter_map(|rail| macs.get(&rail.rail).map(|mac| (rail, mac)))
                .map(|(rail, mac)| LinkName::new(&format!("`hosts.{}.rail_macs`", node.name), mac, &rail.netdev))
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let named = self.namer.render(target, &links, &mut resources)?;
        let netplan_package = package(target, "netplan.io");
        let mut after = vec![netplan_package.id.clone()];
        for rail in &node.rails {
            for id in self.leaf_configs.get(rail.leaf).into_iter().flatten() {
                if !after.contains(id) {
                    after.push(id.clone());
                }
            }
        }
        // A rail's address or MTU changes under running RDMA traffic (the mlx5 netdev
        // is rebuilt; queue pairs keep their old path MTU): the node must be empty.
        let netplan_file = file(target, RAILS_NETPLAN, netplan.clone(), 0o600).after(after).disrupts(Disruption::Drain);
        // generate → networkd running → reload. Generating first means networkd starts
        // with the rails' files: a networkd running without them leaves the rails
        // unmanaged, and a unit started meanwhile that wants network-online.target
        // (munge does) waits the 2 minutes of systemd-networkd-wait-online.
        let generate = apply_once(
            target,
            "netplan-generate",
            &netplan,
            "netplan generate",
            "turn the rails' netplan into systemd-networkd files",
        )
        .after([netplan_file.id.clone()])
        .after(named)
        .disrupts(Disruption::Drain);
        let networkd = service(target, NETWORKD, Vec::new(), OnChange::Reload).after([generate.id.clone()]);
        let netplan_apply = apply_once(
            target,
            "netplan-apply",
            &netplan,
            "networkctl reload",
            "bring the rail interfaces up with their addresses and routes",
        )
        .after([networkd.id.clone()])
        .disrupts(Disruption::Drain);
        let netplan_apply_id = netplan_apply.id.clone();
        resources.extend([netplan_package, netplan_file, generate, networkd, netplan_apply]);
        if let Some(Some((sysctl, apply))) = self.sysctl.get(node.group) {
            let sysctl_file = file(target, RAILS_SYSCTL, sysctl.clone(), 0o644);
            let sysctl_apply = apply.on(target).after([sysctl_file.id.clone(), netplan_apply_id]);
            resources.extend([sysctl_file, sysctl_apply]);
        }
        out.extend(resources);
        Ok(())
    }
}

#[derive(Serialize)]
struct MountContext<'a> {
    name: &'a str,
    kind: &'static str,
    source: &'a str,
    mount: &'a str,
    fstype: &'static str,
    options: &'a str,
}

/// One mount unit per filesystem, shared by every client.
struct MountUnits<'a> {
    units: Vec<(&'a Filesystem, String, Content)>,
}

const fn kind_name(kind: FilesystemKind) -> &'static str {
    match kind {
        FilesystemKind::Nfs => "nfs",
        FilesystemKind::Lustre => "lustre",
    }
}

impl<'a> MountUnits<'a> {
    fn new(model: &'a Model, renderer: &Renderer) -> Result<Self, RenderError> {
        let units = model
            .filesystems
            .iter()
            .map(|filesystem| {
                if filesystem.source.is_empty() {
                    return Err(RenderError::Model {
                        what: format!("the mount of filesystem `{}`", filesystem.name),
                        reason: "it has neither a server group nor an endpoint".to_owned(),
                    });
                }
                let kind = kind_name(filesystem.kind);
                let text = renderer.render(
                    "host/mount.j2",
                    MountContext {
                        name: &filesystem.name,
                        kind,
                        source: &filesystem.source,
                        mount: &filesystem.mount,
                        fstype: kind,
                        options: &filesystem.options,
                    },
                )?;
                Ok((filesystem, network::mount_unit(&filesystem.mount), Content::new(text)))
            })
            .collect::<Result<_, RenderError>>()?;
        Ok(Self { units })
    }

    fn render(&self, node: &Node, target: &Target, hosts: &ResourceId, out: &mut Vec<Resource>) {
        let mut nfs_client = None;
        for (filesystem, unit, content) in &self.units {
            if !filesystem.client_groups.contains(&node.group) {
                continue;
            }
            let mut after = vec![hosts.clone()];
            if filesystem.kind == FilesystemKind::Nfs {
                let client = nfs_client.get_or_insert_with(|| {
                    let client = package(target, "nfs-common");
                    let id = client.id.clone();
                    out.push(client);
                    id
                });
                after.push(client.clone());
                if let Some(server) = filesystem.server.as_deref().filter(|server| *server != node.name) {
                    after.push(ResourceId::new(server, "service", "nfs-server"));
                }
            }
            let path = format!("{UNIT_DIR}/{unit}");
            // A remount under running jobs fails (busy) or pulls their files away.
            let unit_file = file(target, &path, content.clone(), 0o644).after(after).disrupts(Disruption::Drain);
            // Restart remounts with the new options; a mount unit has no reload.
            let mount = service(target, unit, vec![unit_file.id.clone()], OnChange::Restart);
            out.extend([unit_file, mount]);
        }
    }
}

#[derive(Serialize)]
struct ExportsContext<'a> {
    hostname: &'a str,
    exports: Vec<ExportView<'a>>,
}

#[derive(Serialize)]
struct ExportView<'a> {
    path: &'a str,
    clients: String,
    options: &'static str,
}

/// `/etc/exports` of each NFS server node.
struct Exports<'a> {
    by_server: HashMap<&'a str, (Vec<&'a str>, Content)>,
}

impl<'a> Exports<'a> {
    fn new(model: &'a Model, renderer: &Renderer) -> Result<Self, RenderError> {
        let mut paths: HashMap<&'a str, Vec<&'a str>> = HashMap::new();
        for filesystem in &model.filesystems {
            if filesystem.kind != FilesystemKind::Nfs {
                continue;
            }
            if let (Some(server), Some(export)) = (filesystem.server.as_deref(), filesystem.export.as_deref()) {
                let list = paths.entry(server).or_default();
                if !list.contains(&export) {
                    list.push(export);
                }
            }
        }
        if paths.is_empty() {
            return Ok(Self { by_server: HashMap::new() });
        }
        let clients = network::management_subnet(model).ok_or_else(|| RenderError::Model {
            what: EXPORTS.to_owned(),
            reason: format!(
                "management subnet `{}` is not an IPv4 CIDR block",
                model.blueprint.fabric.management.inband.subnet
            ),
        })?;
        let mut by_server = HashMap::with_capacity(paths.len());
        for (server, list) in paths {
            let exports = list
                .iter()
                .map(|path| ExportView { path, clients: clients.to_string(), options: EXPORT_OPTIONS })
                .collect();
            let text = renderer.render("host/exports.j2", ExportsContext { hostname: server, exports })?;
            by_server.insert(server, (list, Content::new(text)));
        }
        Ok(Self { by_server })
    }

    fn render(&self, node: &Node, target: &Target, out: &mut Vec<Resource>) {
        let Some((paths, content)) = self.by_server.get(node.name.as_str()) else {
            return;
        };
        let server = package(target, "nfs-kernel-server");
        let mut after = vec![server.id.clone()];
        let mut resources = vec![server];
        for path in paths {
            let directory = Resource::new(
                target.clone(),
                path,
                Desired::Directory { path: (*path).to_owned(), mode: 0o755, owner: "root".to_owned() },
            );
            after.push(directory.id.clone());
            resources.push(directory);
        }
        let exports = file(target, EXPORTS, content.clone(), 0o644).after(after.iter().cloned());
        // Reload runs `exportfs -r`: clients keep their mounts while exports change.
        let nfs = service(target, "nfs-server", vec![exports.id.clone()], OnChange::Reload).after(after);
        resources.extend([exports, nfs]);
        out.extend(resources);
    }
}
