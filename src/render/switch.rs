//! Switches: FRR `frr.conf` (BGP unnumbered leaf/spine), NVUE startup YAML (Cumulus) with RoCE QoS; InfiniBand `opensm.conf` and `partitions.conf` on subnet-manager hosts.
//!
//! Stage: render. Input: the model and, when given, the inventory (switch OS and port
//! prefix per switch). Output: resources appended to `out`.
//!
//! Which config a switch gets: the inventory's `os` for it; without an inventory (or
//! a switch it does not list) a RoCE switch is plain FRR on Linux with `swp` ports.
//! InfiniBand switches get nothing: the subnet manager programs them, so the SM hosts
//! get `opensm.conf` and `partitions.conf` instead. SONiC is refused with
//! [`RenderError::UnsupportedSwitchOs`] rather than skipped. Port names follow
//! [`crate::topology::ports`].

use std::net::Ipv4Addr;

use serde::Serialize;

use crate::blueprint::schema::{FabricKind, InfinibandSpec, RoceMode, RoceQos, SubnetManagerKind};
use crate::inventory::{Inventory, SwitchOs};
use crate::model::Model;
use crate::render::common::{Command, SysctlApply, apply_once, owned_file, package, service};
use crate::render::links::{LinkName, LinkNamer};
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target};
use crate::topology::ports::{self, DEFAULT_PORT_PREFIX, Direction, FabricPort, HOST_INTERFACE, HOST_VLAN};
use crate::topology::qos::{CNP_PRIORITY, DEFAULT_PRIORITY as DEFAULT_ROCE_PRIORITY, roce_priority};
use crate::topology::{Switch, SwitchRole};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("frr/frr.conf.j2", include_str!("../../templates/frr/frr.conf.j2")),
    ("frr/daemons.j2", include_str!("../../templates/frr/daemons.j2")),
    ("frr/sysctl.conf.j2", include_str!("../../templates/frr/sysctl.conf.j2")),
    ("nvue/startup.yaml.j2", include_str!("../../templates/nvue/startup.yaml.j2")),
    ("opensm/opensm.conf.j2", include_str!("../../templates/opensm/opensm.conf.j2")),
    ("opensm/partitions.conf.j2", include_str!("../../templates/opensm/partitions.conf.j2")),
];

/// FRR's integrated configuration.
pub const FRR_CONF: &str = "/etc/frr/frr.conf";
/// Which FRR daemons run.
pub const FRR_DAEMONS: &str = "/etc/frr/daemons";
/// Forwarding and IPv6 sysctls of an FRR switch.
pub const FRR_SYSCTL: &str = "/etc/sysctl.d/90-toolkit-frr.conf";
/// The NVUE configuration toolkit patches in. Not `/etc/nvue.d/startup.yaml`: NVUE
/// rewrites that file itself on every `nv config apply` (auto-save), so owning it
/// would show a change on every plan.
pub const NVUE_CONF: &str = "/etc/toolkit/nvue.yaml";
/// OpenSM options.
pub const OPENSM_CONF: &str = "/etc/opensm/opensm.conf";
/// OpenSM partitions (PKeys).
pub const OPENSM_PARTITIONS: &str = "/etc/opensm/partitions.conf";

/// ECMP width floor; raised to a switch's fabric port count, capped where NVUE stops (128).
const MIN_MAXIMUM_PATHS: u32 = 64;
const MAX_MAXIMUM_PATHS: u32 = 128;

/// OpenSM's highest priority (0–15), given to the first subnet manager host.
const TOP_SM_PRIORITY: u8 = 15;

/// NVIDIA's RoCE defaults: data on switch priority 3 with DSCP 26, CNPs with DSCP 48 on priority 6.
const DEFAULT_ROCE_DSCP: u8 = 26;
const DEFAULT_CNP_DSCP: u8 = 48;
/// The traffic class `nv set qos roce` reserves for RoCE, and where other priorities go.
const ROCE_TRAFFIC_CLASS: u8 = 3;
const DEFAULT_TRAFFIC_CLASS: u8 = 0;

/// How one switch is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform<'a> {
    /// OS flavour.
    pub os: SwitchOs,
    /// Port name prefix (`swp`).
    pub port_prefix: &'a str,
}

/// The platform of switch `name`, or `None` when switches are not configured by
/// toolkit (InfiniBand: the subnet manager programs them).
#[must_use]
pub fn platform<'a>(model: &Model, inventory: Option<&'a Inventory>, name: &str) -> Option<Platform<'a>> {
    if model.fabric.kind == FabricKind::Infiniband {
        return None;
    }
    let entry = inventory.and_then(|inventory| inventory.switches.get(name));
    Some(Platform {
        os: entry.map_or(SwitchOs::Frr, |switch| switch.os),
        port_prefix: entry.and_then(|switch| switch.port_prefix.as_deref()).unwrap_or(DEFAULT_PORT_PREFIX),
    })
}

/// Ids of the resources that make switch `index`'s configuration live, for resources
/// that need the switch routing first (a node's rail addresses after its leaves).
/// Empty when toolkit does not configure that switch.
#[must_use]
pub fn config_resources(model: &Model, inventory: Option<&Inventory>, index: usize) -> Vec<ResourceId> {
    let Some(switch) = model.fabric.switches.get(index) else {
        return Vec::new();
    };
    match platform(model, inventory, &switch.name).map(|platform| platform.os) {
        Some(SwitchOs::Frr) => {
            vec![ResourceId::new(&switch.name, "file", FRR_CONF), ResourceId::new(&switch.name, "service", "frr")]
        }
        Some(SwitchOs::CumulusNvue) => {
            vec![ResourceId::new(&switch.name, "file", NVUE_CONF), ResourceId::new(&switch.name, "command", NVUE_APPLY)]
        }
        Some(SwitchOs::Sonic) | None => Vec::new(),
    }
}

const NVUE_APPLY: &str = "nvue-apply";
const FRR_SYSCTL_APPLY: &str = "sysctl-frr";

/// Appends this module's resources.
///
/// # Errors
/// A template that fails to render, a SONiC switch, or invalid InfiniBand partitions.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    match model.fabric.kind {
        FabricKind::Roce => render_ethernet(model, inventory, renderer, out),
        FabricKind::Infiniband => match &model.fabric.infiniband {
            Some(spec) if spec.subnet_manager.kind == SubnetManagerKind::Opensm => {
                render_opensm(model, spec, renderer, out)
            }
            // UFM owns routing and partitions through its own API; nothing to write on hosts.
            _ => Ok(()),
        },
    }
}

fn render_ethernet(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let platforms: Vec<Platform<'_>> = model
        .fabric
        .switches
        .iter()
        .map(|switch| {
            platform(model, inventory, &switch.name)
                .unwrap_or(Platform { os: SwitchOs::Frr, port_prefix: DEFAULT_PORT_PREFIX })
        })
        .collect();
    if let Some((switch, _)) = model.fabric.switches.iter().zip(&platforms).find(|(_, p)| p.os == SwitchOs::Sonic) {
        return Err(RenderError::UnsupportedSwitchOs {
            switch: switch.name.clone(),
            os: "sonic".to_owned(),
            help: "set `os: frr` or `os: cumulus-nvue` for it in the inventory, or configure it by hand",
        });
    }
    // Which node sits on each leaf port, to label node ports.
    let mut nodes_at: Vec<Vec<Option<&str>>> =
        model.fabric.switches.iter().map(|switch| vec![None; switch.down_ports as usize]).collect();
    for node in &model.nodes {
        for rail in &node.rails {
            let slot = (rail.leaf_port as usize).checked_sub(1);
            if let Some(entry) = nodes_at.get_mut(rail.leaf).zip(slot).and_then(|(ports, slot)| ports.get_mut(slot)) {
                *entry = Some(node.name.as_str());
            }
        }
    }
    let mut frr_shared = None;
    let mut link_namer = None;
    for (index, switch) in model.fabric.switches.iter().enumerate() {
        let own_ports: Vec<FabricPort> = model.fabric.ports_of(index).collect();
        let nodes = nodes_at.get(index).map_or(&[][..], Vec::as_slice);
        // Only NVUE lists the node ports: FRR's view without them is a tenth of the size.
        let nodes = (platforms[index].os == SwitchOs::CumulusNvue).then_some(nodes);
        let view = SwitchView::new(model, switch, &own_ports, nodes, &platforms, platforms[index].port_prefix);
        match platforms[index].os {
            SwitchOs::Frr => {
                let shared = match &frr_shared {
                    Some(shared) => shared,
                    None => frr_shared.insert(FrrShared::render(renderer)?),
                };
                let links = port_links(inventory, &switch.name)?;
                let ports_named = if links.is_empty() {
                    None
                } else {
                    let namer = match &link_namer {
                        Some(namer) => namer,
                        None => link_namer.insert(LinkNamer::new(renderer)?),
                    };
                    namer.render(&Target::switch(&switch.name), &links, out)?
                };
                // One BGP session per fabric cable the switch ends.
                render_frr(&view, shared, ports_named, own_ports.len(), renderer, out)?;
            }
            SwitchOs::CumulusNvue => {
                if inventory.and_then(|i| i.switches.get(&switch.name)).is_some_and(|s| !s.port_macs.is_empty()) {
                    return Err(RenderError::Model {
                        what: format!("switch `{}`", switch.name),
                        reason: "`port_macs` renames ports, which Cumulus Linux names itself: remove them".to_owned(),
                    });
                }
                render_nvue(model, &view, renderer, out)?;
            }
            SwitchOs::Sonic => {}
        }
    }
    Ok(())
}

/// What FRR and NVUE templates both need about one switch.
#[derive(Debug, Serialize)]
struct SwitchView<'a> {
    hostname: &'a str,
    role: SwitchRole,
    asn: u32,
    loopback: Ipv4Addr,
    rail: Option<u32>,
    su: Option<u32>,
    /// Leaf only: the L3 interface facing its nodes.
    host_interface: Option<HostInterface>,
    /// Leaf only, and only for NVUE (frr.conf does not list them): node ports
    /// 1..=down_ports.
    host_ports: Vec<HostPort>,
    fabric_ports: Vec<PortView<'a>>,
    maximum_paths: u32,
    mtu: u32,
}

#[derive(Debug, Serialize)]
struct HostInterface {
    name: &'static str,
    /// Gateway address with the subnet's prefix length.
    address: String,
    rail: u32,
    su: u32,
    first_port: String,
    last_port: String,
}

#[derive(Debug, Serialize)]
struct HostPort {
    name: String,
    /// `node01 rail0`, or `free node slot 5` for a slot of the scalable unit without a node.
    description: String,
}

#[derive(Debug, Serialize)]
struct PortView<'a> {
    name: String,
    direction: Direction,
    peer: &'a str,
    peer_port: String,
}

impl<'a> SwitchView<'a> {
    fn new(
        model: &'a Model,
        switch: &'a Switch,
        own_ports: &[FabricPort],
        nodes: Option<&[Option<&str>]>,
        platforms: &[Platform<'_>],
        prefix: &str,
    ) -> Self {
        let fabric_ports: Vec<PortView<'a>> = own_ports
            .iter()
            .map(|port| {
                let peer = model.fabric.switches.get(port.peer);
                let peer_prefix = platforms.get(port.peer).map_or(DEFAULT_PORT_PREFIX, |p| p.port_prefix);
                PortView {
                    name: ports::port_name(prefix, port.port),
                    direction: port.direction,
                    peer: peer.map_or("?", |peer| peer.name.as_str()),
                    peer_port: ports::port_name(peer_prefix, port.peer_port),
                }
            })
            .collect();
        let is_leaf = switch.role == SwitchRole::Leaf;
        let host_interface = match (is_leaf, switch.host_subnet, switch.gateway) {
            (true, Some(subnet), Some(gateway)) => Some(HostInterface {
                name: HOST_INTERFACE,
                address: format!("{gateway}/{}", subnet.prefix_len()),
                rail: switch.rail.unwrap_or(0),
                su: switch.su.unwrap_or(0),
                first_port: ports::port_name(prefix, 1),
                last_port: ports::port_name(prefix, switch.down_ports),
            }),
            _ => None,
        };
        // `nodes`: `None` where the ports are not listed.
        let host_ports = if let (Some(host), Some(nodes)) = (&host_interface, nodes) {
            (1..=switch.down_ports)
                .map(|port| HostPort {
                    name: ports::port_name(prefix, port),
                    description: match nodes.get(port as usize - 1).copied().flatten() {
                        Some(node) => format!("{node} rail{}", host.rail),
                        None => format!("free node slot {port}"),
                    },
                })
                .collect()
        } else {
            Vec::new()
        };
        let port_count = u32::try_from(fabric_ports.len()).unwrap_or(u32::MAX);
        Self {
            hostname: &switch.name,
            role: switch.role,
            asn: switch.asn,
            loopback: switch.loopback,
            rail: switch.rail,
            su: switch.su,
            host_interface,
            host_ports,
            fabric_ports,
            maximum_paths: port_count.clamp(MIN_MAXIMUM_PATHS, MAX_MAXIMUM_PATHS),
            mtu: model.fabric.switch_mtu,
        }
    }
}

/// FRR files that are the same on every FRR switch, rendered once.
struct FrrShared {
    daemons: Content,
    sysctl: Content,
    sysctl_apply: SysctlApply,
}

impl FrrShared {
    fn render(renderer: &Renderer) -> Result<Self, RenderError> {
        let sysctl = Content::new(renderer.render("frr/sysctl.conf.j2", ())?);
        let sysctl_apply = SysctlApply::new(
            FRR_SYSCTL_APPLY,
            FRR_SYSCTL,
            &sysctl,
            "apply forwarding and IPv6 sysctls (BGP unnumbered needs IPv6 link-local)",
        );
        Ok(Self { daemons: Content::new(renderer.render("frr/daemons.j2", ())?), sysctl, sysctl_apply })
    }
}

/// The inventory's `port_macs` of switch `name`, checked.
fn port_links(inventory: Option<&Inventory>, name: &str) -> Result<Vec<LinkName>, RenderError> {
    let Some(switch) = inventory.and_then(|inventory| inventory.switches.get(name)) else {
        return Ok(Vec::new());
    };
    let owner = format!("`switches.{name}.port_macs`");
    switch.port_macs.iter().map(|(port, mac)| LinkName::new(&owner, mac, port)).collect()
}

/// `named`: the command after which the switch's ports carry the names frr.conf uses;
/// `sessions`: the BGP sessions the switch must have (one per switch-to-switch cable).
fn render_frr(
    view: &SwitchView<'_>,
    shared: &FrrShared,
    named: Option<ResourceId>,
    sessions: usize,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let target = Target::switch(view.hostname);
    let config = renderer.render_content("frr/frr.conf.j2", view)?;
    let frr = package(&target, "frr");
    // frr-reload.py, which `systemctl reload frr` runs, ships in frr-pythontools.
    let tools = package(&target, "frr-pythontools");
    let daemons = owned_file(&target, FRR_DAEMONS, shared.daemons.clone(), 0o640, "frr", "frr").after([frr.id.clone()]);
    let mut conf = owned_file(&target, FRR_CONF, config, 0o640, "frr", "frr").after([frr.id.clone()]).after(named);
    if let Desired::File { check, .. } = std::sync::Arc::make_mut(&mut conf.desired) {
        *check = Some(["vtysh", "--dryrun", "-f", "{}"].map(str::to_owned).to_vec());
    }
    let sysctl = owned_file(&target, FRR_SYSCTL, shared.sysctl.clone(), 0o644, "root", "root");
    let sysctl_apply = shared.sysctl_apply.on(&target).after([sysctl.id.clone()]);
    // Reload, not restart: `frrinit.sh reload` restarts only watchfrr (which starts
    // daemons newly enabled in `daemons`, e.g. bgpd on first deploy) and applies
    // frr.conf as a diff with frr-reload.py, so sessions to unchanged neighbours stay
    // up. A restart would drop every BGP session of the switch for a config edit.
    let service = service(&target, "frr", vec![daemons.id.clone(), conf.id.clone()], OnChange::Reload)
        .after([tools.id.clone(), sysctl_apply.id.clone()]);
    let verify = bgp_verify(&target, sessions).after([service.id.clone()]);
    out.extend([frr, tools, daemons, conf, sysctl, sysctl_apply, service, verify]);
    Ok(())
}

/// Name of the command that proves a switch's BGP sessions are up.
pub const BGP_VERIFY: &str = "bgp-established";
/// How long deploy waits for sessions after FRR (re)loads: BGP unnumbered needs IPv6
/// router advertisements first, then the datacenter profile's 3 s timers.
const BGP_VERIFY_SECONDS: u32 = 90;

/// Reads `show bgp summary json` on stdin; exits 1, saying which sessions are not
/// Established, unless at least `argv[1]` are. Python because FRR's reload tooling
/// (frr-pythontools, installed with FRR) already needs it; no single quotes, as it
/// travels inside a shell's single-quoted string.
const BGP_CHECK: &str = r#"import json, sys
want = int(sys.argv[1])
peers = {}
for family in json.load(sys.stdin).values():
    if isinstance(family, dict):
        peers.update(family.get("peers", {}))
down = sorted(name + " " + str(peer.get("state")) for name, peer in peers.items() if peer.get("state") != "Established")
up = len(peers) - len(down)
if down or up < want:
    problems = ["not Established: " + ", ".join(down)] if down else []
    if len(peers) < want:
        problems.append("%d planned session(s) not configured" % (want - len(peers)))
    print("%d of %d BGP sessions Established; %s" % (up, want, "; ".join(problems)))
    sys.exit(1)
"#;

/// The check as a shell pipeline, the expected count in `$1`.
fn bgp_check_pipeline() -> String {
    format!("vtysh -c 'show bgp summary json' | python3 -c '{BGP_CHECK}' \"$1\"")
}

/// A config accepted by FRR is not yet a working fabric: after the reload, deploy
/// waits until every session is Established (failing with the ones that are not),
/// and a later plan shows this step again whenever a session is down.
fn bgp_verify(target: &Target, sessions: usize) -> Resource {
    let check = bgp_check_pipeline();
    let wait = format!(
        "waited=0; until out=$({check}); do waited=$((waited + 2)); \
         if [ \"$waited\" -gt \"$2\" ]; then echo \"$out\" >&2; exit 1; fi; sleep 2; done"
    );
    let count = sessions.to_string();
    Command::new(
        ["sh", "-c", &wait, "toolkit-bgp-verify", &count, &BGP_VERIFY_SECONDS.to_string()].map(str::to_owned).to_vec(),
        format!("wait until the switch's {sessions} BGP session(s) are Established"),
    )
    .unless(["sh", "-c", &format!("{check} >/dev/null"), "toolkit-bgp-check", &count].map(str::to_owned).to_vec())
    // A wait changes nothing on the switch.
    .undo(Vec::new())
    .on(target, BGP_VERIFY)
}

/// RoCE QoS as NVUE needs it: the defaults of `nv set qos roce` plus the remapping
/// needed when the blueprint moves RoCE off priority 3 / DSCP 26 (reference §3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct RoceView {
    mode: &'static str,
    /// PFC switch priority when it is not the default 3 (lossless only).
    pfc_priority: Option<u8>,
    egress_queue: Vec<QueueEntry>,
    dscp_map: Vec<DscpEntry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
struct QueueEntry {
    switch_priority: u8,
    traffic_class: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
struct DscpEntry {
    dscp: u8,
    switch_priority: u8,
}

fn roce_view(qos: RoceQos) -> RoceView {
    let priority = roce_priority(&qos);
    let moved = priority != DEFAULT_ROCE_PRIORITY;
    let lossless = qos.mode == RoceMode::Lossless;
    let mut egress_queue = Vec::new();
    if moved {
        egress_queue.push(QueueEntry { switch_priority: priority, traffic_class: ROCE_TRAFFIC_CLASS });
        egress_queue.push(QueueEntry { switch_priority: DEFAULT_ROCE_PRIORITY, traffic_class: DEFAULT_TRAFFIC_CLASS });
        egress_queue.sort_by_key(|entry| entry.switch_priority);
    }
    let mut dscp_map = Vec::new();
    if moved || qos.dscp != DEFAULT_ROCE_DSCP {
        dscp_map.push(DscpEntry { dscp: qos.dscp, switch_priority: priority });
    }
    if qos.cnp_dscp != DEFAULT_CNP_DSCP {
        dscp_map.push(DscpEntry { dscp: qos.cnp_dscp, switch_priority: CNP_PRIORITY });
    }
    dscp_map.sort_by_key(|entry| entry.dscp);
    RoceView {
        mode: if lossless { "lossless" } else { "lossy" },
        pfc_priority: (lossless && moved).then_some(priority),
        egress_queue,
        dscp_map,
    }
}

#[derive(Serialize)]
struct NvueContext<'a> {
    #[serde(flatten)]
    switch: &'a SwitchView<'a>,
    host_vlan: u16,
    host_address: Option<&'a str>,
    roce: Option<RoceView>,
}

fn render_nvue(
    model: &Model,
    view: &SwitchView<'_>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let target = Target::switch(view.hostname);
    let nvue = NvueContext {
        switch: view,
        host_vlan: HOST_VLAN,
        host_address: view.host_interface.as_ref().map(|host| host.address.as_str()),
        roce: model.fabric.roce.map(roce_view),
    };
    let content = renderer.render_content("nvue/startup.yaml.j2", &nvue)?;
    let directory = Resource::new(
        target.clone(),
        "/etc/toolkit",
        Desired::Directory { path: "/etc/toolkit".to_owned(), mode: 0o755, owner: "root".to_owned() },
    );
    let conf = owned_file(&target, NVUE_CONF, content.clone(), 0o644, "root", "root").after([directory.id.clone()]);
    // `patch`, not `replace`: the file holds only what toolkit owns, so the switch keeps
    // its users, management VRF and anything else set outside toolkit.
    let apply = apply_once(
        &target,
        NVUE_APPLY,
        &content,
        &format!("nv config patch {NVUE_CONF} && nv config apply -y"),
        "apply the NVUE configuration (BGP unnumbered, RoCE QoS)",
    )
    .after([conf.id.clone()]);
    out.extend([directory, conf, apply]);
    Ok(())
}

#[derive(Serialize)]
struct OpensmContext<'a> {
    hostname: &'a str,
    sm_hosts: &'a [&'a str],
    sm_priority: u8,
    routing_engine: &'a str,
    root_guid_file: Option<&'a str>,
    partition_config_file: &'a str,
}

#[derive(Serialize)]
struct PartitionsContext<'a> {
    cluster: &'a str,
    partitions: Vec<PartitionView<'a>>,
}

#[derive(Debug, Serialize)]
struct PartitionView<'a> {
    name: &'a str,
    pkey: String,
    ipoib: bool,
    /// IBTA MTU code of the IPoIB multicast group (5 = 4096), so IPoIB gets the
    /// fabric's MTU instead of OpenSM's default 2048.
    ipoib_mtu: Option<u8>,
    tenants: &'a [String],
}

/// IBTA encoding of an InfiniBand MTU (`mtu=` in partitions.conf).
fn ibta_mtu(mtu: u32) -> Option<u8> {
    match mtu {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

fn partition_views(spec: &InfinibandSpec, fabric_mtu: u32) -> Result<Vec<PartitionView<'_>>, RenderError> {
    spec.pkeys
        .iter()
        .map(|partition| {
            let invalid = |reason: String| RenderError::Model {
                what: format!("InfiniBand partition `{}`", partition.name),
                reason,
            };
            // The partitions.conf grammar uses `=,:;#` and blanks as delimiters.
            if partition.name.is_empty()
                || !partition.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                return Err(invalid("names are letters, digits, `_`, `-` and `.`".to_owned()));
            }
            let value = partition
                .pkey
                .strip_prefix("0x")
                .or_else(|| partition.pkey.strip_prefix("0X"))
                .and_then(|hex| u16::from_str_radix(hex, 16).ok())
                .filter(|value| (0x0001..=0x7ffe).contains(value))
                .ok_or_else(|| invalid(format!("pkey `{}` is not hex between 0x0001 and 0x7ffe", partition.pkey)))?;
            Ok(PartitionView {
                name: &partition.name,
                pkey: format!("0x{value:04x}"),
                ipoib: partition.ipoib,
                ipoib_mtu: ibta_mtu(fabric_mtu).filter(|_| partition.ipoib),
                tenants: &partition.tenants,
            })
        })
        .collect()
}

fn render_opensm(
    model: &Model,
    spec: &InfinibandSpec,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let sm_hosts: Vec<&str> = spec
        .subnet_manager
        .groups
        .iter()
        .filter_map(|name| model.groups.iter().find(|group| &group.name == name))
        .flat_map(|group| model.group_nodes(group))
        .map(|node| node.name.as_str())
        .collect();
    if sm_hosts.is_empty() {
        return Ok(());
    }
    let partitions = Content::new(renderer.render(
        "opensm/partitions.conf.j2",
        PartitionsContext { cluster: &model.name, partitions: partition_views(spec, model.fabric.switch_mtu)? },
    )?);
    for (rank, host) in sm_hosts.iter().enumerate() {
        let target = Target::node(host);
        let sm_priority = TOP_SM_PRIORITY.saturating_sub(u8::try_from(rank).unwrap_or(u8::MAX));
        let conf = Content::new(renderer.render(
            "opensm/opensm.conf.j2",
            OpensmContext {
                hostname: host,
                sm_hosts: &sm_hosts,
                sm_priority,
                routing_engine: &spec.subnet_manager.routing_engine,
                // Spine port GUIDs are only known once the fabric is discovered.
                root_guid_file: None,
                partition_config_file: OPENSM_PARTITIONS,
            },
        )?);
        let opensm = package(&target, "opensm");
        let conf = owned_file(&target, OPENSM_CONF, conf, 0o644, "root", "root").after([opensm.id.clone()]);
        let partitions = owned_file(&target, OPENSM_PARTITIONS, partitions.clone(), 0o644, "root", "root")
            .after([opensm.id.clone()]);
        // Restart: Debian's opensm.service is a oneshot wrapper with no reload; its
        // opensm@<port> instances are PartOf it and restart with it. Forwarding tables
        // stay programmed in the switches while the SM restarts (a standby SM takes over).
        let service = service(&target, "opensm", vec![conf.id.clone(), partitions.id.clone()], OnChange::Restart);
        out.extend([opensm, conf, partitions, service]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos(mode: RoceMode, priority: Option<u8>, dscp: u8, cnp_dscp: u8) -> RoceQos {
        RoceQos { mode, pfc_priority: priority, ecn: true, dscp, cnp_dscp }
    }

    /// The guard through a real `sh` and `python3`, with a `vtysh` on PATH that prints
    /// FRR 8.4.4's recorded summary (2 sessions Established, 1 Idle).
    fn bgp_guard(expected: usize, all_up: bool) -> std::process::Output {
        let dir = tempfile::tempdir().expect("tempdir");
        let recorded = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/parsers/frr_8.4.4_show_bgp_summary_json_leaf_2up_1idle.json"
        );
        let mut summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(recorded).expect("fixture")).expect("JSON");
        if all_up {
            for peer in summary["ipv4Unicast"]["peers"].as_object_mut().expect("peers").values_mut() {
                peer["state"] = "Established".into();
            }
        }
        let answer = dir.path().join("summary.json");
        std::fs::write(&answer, summary.to_string()).expect("write");
        let vtysh = dir.path().join("vtysh");
        std::fs::write(&vtysh, format!("#!/bin/sh\ncat {}\n", answer.display())).expect("write");
        std::fs::set_permissions(&vtysh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let target = Target::switch("leaf0");
        let Desired::Command { unless: Some(argv), .. } =
            std::sync::Arc::unwrap_or_clone(bgp_verify(&target, expected).desired)
        else {
            panic!("a guarded command")
        };
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
        let check = argv.iter().map(|word| word.replace(" >/dev/null", "")).collect::<Vec<_>>();
        std::process::Command::new(&check[0]).args(&check[1..]).env("PATH", path).output().expect("sh runs")
    }

    #[test]
    fn bgp_guard_passes_only_when_enough_sessions_are_established() {
        if std::process::Command::new("python3").arg("--version").output().is_err() {
            crate::testing::cannot_run("python3 is not installed: apt-get install python3");
            return;
        }
        // As recorded: the Idle session fails it, whatever the count asked.
        for expected in [2, 3] {
            let run = bgp_guard(expected, false);
            let said = String::from_utf8_lossy(&run.stdout);
            assert!(!run.status.success(), "{said}");
            assert!(
                said.starts_with(&format!("2 of {expected} BGP sessions Established; not Established: ")),
                "{said}"
            );
            assert!(said.contains(" Idle"), "names the Idle session: {said}");
        }
        // The same switch with that session up passes for 3, not for 4 planned cables.
        assert!(bgp_guard(3, true).status.success());
        let four = bgp_guard(4, true);
        assert!(!four.status.success());
        assert_eq!(
            String::from_utf8_lossy(&four.stdout),
            "3 of 4 BGP sessions Established; 1 planned session(s) not configured\n"
        );
    }

    #[test]
    fn nvidia_defaults_need_no_remapping() {
        let view = roce_view(qos(RoceMode::Lossless, Some(3), 26, 48));
        assert_eq!(view, RoceView { mode: "lossless", pfc_priority: None, egress_queue: vec![], dscp_map: vec![] });
        assert_eq!(roce_view(qos(RoceMode::Lossy, None, 26, 48)).mode, "lossy");
    }

    #[test]
    fn moving_roce_to_another_priority_remaps_pfc_queue_and_dscp() {
        let view = roce_view(qos(RoceMode::Lossless, Some(2), 26, 48));
        assert_eq!(view.pfc_priority, Some(2));
        assert_eq!(
            view.egress_queue,
            vec![
                QueueEntry { switch_priority: 2, traffic_class: 3 },
                QueueEntry { switch_priority: 3, traffic_class: 0 }
            ]
        );
        assert_eq!(view.dscp_map, vec![DscpEntry { dscp: 26, switch_priority: 2 }]);
    }

    fn spec(pkeys: &[(&str, &str)]) -> InfinibandSpec {
        InfinibandSpec {
            subnet_manager: crate::blueprint::schema::SubnetManager {
                kind: SubnetManagerKind::Opensm,
                groups: vec![],
                routing_engine: "ftree,updn".to_owned(),
            },
            pkeys: pkeys
                .iter()
                .map(|(name, pkey)| crate::blueprint::schema::PKey {
                    name: (*name).to_owned(),
                    pkey: (*pkey).to_owned(),
                    tenants: vec![],
                    ipoib: false,
                })
                .collect(),
        }
    }

    #[test]
    fn partitions_normalise_pkeys_and_refuse_what_partitions_conf_cannot_hold() {
        let ok = spec(&[("team-a", "0xA01"), ("storage", "0x0100")]);
        let views = partition_views(&ok, 4096).expect("valid");
        assert!(views.iter().all(|v| v.ipoib_mtu.is_none()), "no IPoIB, no multicast group");
        assert_eq!(views.iter().map(|v| v.pkey.as_str()).collect::<Vec<_>>(), ["0x0a01", "0x0100"]);
        for (name, pkey) in [("a b", "0x0001"), ("x;y", "0x0001"), ("ok", "0x7fff"), ("ok", "0x0000"), ("ok", "12")] {
            let error = partition_views(&spec(&[(name, pkey)]), 4096).expect_err("invalid");
            assert!(matches!(error, RenderError::Model { .. }), "{name} {pkey}: {error}");
        }
    }

    #[test]
    fn lossy_mode_never_enables_pfc_and_other_dscps_are_mapped() {
        let view = roce_view(qos(RoceMode::Lossy, Some(4), 24, 46));
        assert_eq!(view.pfc_priority, None);
        assert_eq!(
            view.dscp_map,
            vec![DscpEntry { dscp: 24, switch_priority: 4 }, DscpEntry { dscp: 46, switch_priority: 6 }]
        );
    }
}
