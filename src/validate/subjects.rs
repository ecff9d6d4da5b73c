//! Subjects of a validator: which nodes, pairs, rails, switches (or the cluster) it
//! runs on, where each command runs, and the template context of each.
//!
//! Stage: validate (pure). Input: a [`ValidatorSpec`], the [`Model`], the [`Site`]
//! (what the inventory can reach) and the `--nodes` filter. Output: [`Subject`]s in
//! a stable order. Contexts are minijinja values that share the cluster-wide part,
//! so thousands of subjects do not copy the node list thousands of times.

use std::collections::{BTreeMap, BTreeSet};

use minijinja::value::Value;
use serde_json::json;

use super::derived::benchmark_filesystem;
use super::expr::to_value;
use super::spec::{NodeSelection, Pairing, RunsOn, SpecScope, ValidatorSpec};
use crate::blueprint::schema::{FabricKind, FilesystemKind, Role, SchedulerKind};
use crate::inventory::Inventory;
use crate::model::{Model, Node, hostlist, slurm};
use crate::topology::ports::{self, DEFAULT_PORT_PREFIX, Direction};
use crate::topology::qos::host_qos;

/// What the inventory says about reaching the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Site {
    /// Hosts and switches with an SSH target.
    pub hosts: BTreeSet<String>,
    /// Switch port prefix by switch (`swp` when absent).
    pub port_prefixes: BTreeMap<String, String>,
    /// Rail NIC MACs by node and rail, lowercase.
    pub rail_macs: BTreeMap<String, BTreeMap<u32, String>>,
}

impl Site {
    /// From an inventory.
    #[must_use]
    pub fn from_inventory(inventory: &Inventory) -> Self {
        Self {
            hosts: inventory.hosts.keys().chain(inventory.switches.keys()).cloned().collect(),
            port_prefixes: crate::topology::lldp::port_prefixes(inventory),
            rail_macs: crate::topology::lldp::rail_macs(inventory),
        }
    }

    /// Every node and switch of the model reachable (dry runs and tests).
    #[must_use]
    pub fn everything(model: &Model) -> Self {
        Self {
            hosts: model
                .nodes
                .iter()
                .map(|n| n.name.clone())
                .chain(model.fabric.switches.iter().map(|s| s.name.clone()))
                .collect(),
            ..Self::default()
        }
    }

    /// The port prefix of `switch`.
    #[must_use]
    pub fn port_prefix(&self, switch: &str) -> &str {
        self.port_prefixes.get(switch).map_or(DEFAULT_PORT_PREFIX, String::as_str)
    }
}

/// One thing a validator checks, with where its command runs.
#[derive(Debug, Clone)]
pub struct Subject {
    /// `node01`, `node01+node02`, `node01+node02/rail0`, `leaf0`, or the cluster name.
    pub name: String,
    /// Where the steps run.
    pub host: String,
    /// Where the server command runs (the peer), for validators with a server.
    pub server_host: Option<String>,
    /// Indexes of the nodes under test (one, two, or every selected node for the cluster).
    pub nodes: Vec<usize>,
    /// Index of the switch under test.
    pub switch: Option<usize>,
    /// Rail of a rail subject.
    pub rail: Option<u32>,
    /// The template context.
    pub context: Value,
}

/// The subjects of one validator and the nodes they were made from. Each subject is
/// kept as what it checks ([`Key`]) and made, with its template context, when it is
/// asked for: a health plan at 32,768 nodes names ~460,000 subjects, and holding each
/// with its context at once was most of that plan's memory.
#[derive(Debug, Clone)]
pub struct Expansion {
    keys: Vec<Key>,
    /// Indexes of the selected nodes.
    pub selected: Vec<usize>,
    /// Why there are no subjects, when there are none.
    pub empty_reason: Option<String>,
    /// What every subject sees ([`base_context`]).
    base: Value,
    /// The controller, when the steps run there.
    controller: Option<String>,
    /// Each switch's view, for a switch validator.
    switches: Vec<Value>,
}

/// What one subject checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Node(usize),
    Pair { first: usize, second: usize, rail: Option<u32> },
    Switch(usize),
    Cluster,
}

impl Expansion {
    /// How many subjects.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No subjects.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Where the steps of subject `at` run, without making it.
    #[must_use]
    pub fn host<'e>(&'e self, at: usize, model: &'e Model) -> &'e str {
        if let Some(controller) = &self.controller {
            return controller;
        }
        match self.keys[at] {
            Key::Node(index) | Key::Pair { first: index, .. } => &model.nodes[index].name,
            Key::Switch(index) => &model.fabric.switches[index].name,
            Key::Cluster => "",
        }
    }

    /// Subject `at`, with the node views `views` has made.
    pub fn subject(&self, at: usize, views: &mut NodeViews<'_>) -> Subject {
        let model = views.model;
        let host = || self.host(at, model).to_owned();
        match self.keys[at] {
            Key::Node(index) => Subject {
                name: model.nodes[index].name.clone(),
                host: host(),
                server_host: None,
                nodes: vec![index],
                switch: None,
                rail: None,
                context: merge_values(BTreeMap::from([("node", views.get(index))]), &self.base),
            },
            Key::Pair { first, second, rail } => self.pair(views, first, second, rail, ""),
            Key::Switch(index) => Subject {
                name: model.fabric.switches[index].name.clone(),
                host: host(),
                server_host: None,
                nodes: Vec::new(),
                switch: Some(index),
                rail: None,
                context: merge_values(BTreeMap::from([("switch", self.switches[index].clone())]), &self.base),
            },
            Key::Cluster => Subject {
                name: model.name.clone(),
                host: host(),
                server_host: None,
                nodes: self.selected.clone(),
                switch: None,
                rail: None,
                context: self.base.clone(),
            },
        }
    }

    /// A pair made as this expansion's pairs are, outside them: a re-test, its name
    /// marked with `suffix` (` (second pass)`).
    pub fn pair(
        &self,
        views: &mut NodeViews<'_>,
        first: usize,
        second: usize,
        rail: Option<u32>,
        suffix: &str,
    ) -> Subject {
        pair_subject(views, &self.base, self.controller.as_deref(), first, second, rail, suffix)
    }

    /// Every subject, in order.
    #[must_use]
    pub fn subjects(&self, model: &Model) -> Vec<Subject> {
        let mut views = NodeViews::new(model);
        (0..self.len()).map(|at| self.subject(at, &mut views)).collect()
    }
}

/// The nodes a selection names, in model order, restricted to `filter` when given.
#[must_use]
pub fn select_nodes(model: &Model, selection: NodeSelection, filter: Option<&BTreeSet<String>>) -> Vec<usize> {
    model
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| {
            let group = &model.groups[node.group];
            match selection {
                NodeSelection::Compute => group.has_role(Role::Compute),
                NodeSelection::Gpu => group.gpus_per_node > 0,
                NodeSelection::Rail => !node.rails.is_empty(),
                NodeSelection::All => true,
            }
        })
        .filter(|(_, node)| filter.is_none_or(|names| names.contains(&node.name)))
        .map(|(index, _)| index)
        .collect()
}

/// Ring pairs over `count` items: (0,1), (1,2) … (n-1,0); one pair for two items.
#[must_use]
pub fn ring_pairs(count: usize) -> Vec<(usize, usize)> {
    match count {
        0 | 1 => Vec::new(),
        2 => vec![(0, 1)],
        _ => (0..count).map(|index| (index, (index + 1) % count)).collect(),
    }
}

/// Disjoint pairs over `count` items: (0,1), (2,3) …; an odd last item pairs with
/// item 0, so every item is in at least one pair.
#[must_use]
pub fn disjoint_pairs(count: usize) -> Vec<(usize, usize)> {
    if count < 2 {
        return Vec::new();
    }
    let mut pairs: Vec<(usize, usize)> = (0..count / 2).map(|pair| (2 * pair, 2 * pair + 1)).collect();
    if count % 2 == 1 {
        pairs.push((count - 1, 0));
    }
    pairs
}

/// Expands `spec` into subjects.
///
/// # Errors
/// When the validator runs on the controller and the cluster has none.
pub fn expand(
    spec: &ValidatorSpec,
    model: &Model,
    site: &Site,
    filter: Option<&BTreeSet<String>>,
    params: &BTreeMap<String, f64>,
) -> Result<Expansion, String> {
    let selected = match spec.scope {
        SpecScope::Switch => Vec::new(),
        _ => select_nodes(model, spec.nodes, filter),
    };
    let base = base_context(model, site, &selected, params);
    let runs_on_controller = spec.runs_on == RunsOn::Controller || spec.scope == SpecScope::Cluster;
    let controller = if runs_on_controller {
        let first = model.first_with(Role::Controller).map(|node| node.name.clone());
        Some(first.ok_or("it runs on the Slurm controller, and no node group has the `controller` role")?)
    } else {
        None
    };
    let pairs = |count: usize| match spec.pairing {
        Pairing::Ring => ring_pairs(count),
        Pairing::Disjoint => disjoint_pairs(count),
    };
    let mut switches = Vec::new();
    let keys: Vec<Key> = match spec.scope {
        SpecScope::Node => selected.iter().map(|&index| Key::Node(index)).collect(),
        SpecScope::NodePair => pairs(selected.len())
            .into_iter()
            .map(|(first, second)| Key::Pair { first: selected[first], second: selected[second], rail: None })
            .collect(),
        SpecScope::Rail => (0..model.fabric.sizing.rails)
            .flat_map(|rail| {
                let on_rail: Vec<usize> = selected
                    .iter()
                    .copied()
                    .filter(|&index| model.nodes[index].rails.iter().any(|port| port.rail == rail))
                    .collect();
                pairs(on_rail.len()).into_iter().map(move |(first, second)| Key::Pair {
                    first: on_rail[first],
                    second: on_rail[second],
                    rail: Some(rail),
                })
            })
            .collect(),
        SpecScope::Switch => {
            switches = (0..model.fabric.switches.len()).map(|index| switch_view(model, site, index)).collect();
            (0..switches.len()).map(Key::Switch).collect()
        }
        SpecScope::Cluster => vec![Key::Cluster],
    };
    let empty_reason = keys.is_empty().then(|| match spec.scope {
        SpecScope::NodePair | SpecScope::Rail => format!(
            "needs at least two {} nodes, {} selected{}",
            describe_selection(spec.nodes),
            selected.len(),
            if filter.is_some() { " by --nodes" } else { "" }
        ),
        SpecScope::Switch => "the compute fabric has no switches".to_owned(),
        _ => format!(
            "no {} nodes{}",
            describe_selection(spec.nodes),
            if filter.is_some() { " among --nodes" } else { "" }
        ),
    });
    Ok(Expansion { keys, selected, empty_reason, base, controller, switches })
}

/// A switch as templates see it, its fabric ports named with the inventory's prefixes.
fn switch_view(model: &Model, site: &Site, index: usize) -> Value {
    let switch = &model.fabric.switches[index];
    let prefix = site.port_prefix(&switch.name);
    let ports: Vec<serde_json::Value> = model
        .fabric
        .ports_of(index)
        .map(|port| {
            let peer = &model.fabric.switches[port.peer];
            json!({
                "name": ports::port_name(prefix, port.port),
                "peer": peer.name,
                "peer_port": ports::port_name(site.port_prefix(&peer.name), port.peer_port),
                "direction": match port.direction { Direction::Up => "up", Direction::Down => "down" },
            })
        })
        .collect();
    to_value(&json!({
        "name": switch.name,
        "role": switch.role,
        "asn": switch.asn,
        "loopback": switch.loopback,
        "rail": switch.rail,
        "su": switch.su,
        "ports": ports,
    }))
}

fn describe_selection(selection: NodeSelection) -> &'static str {
    match selection {
        NodeSelection::Compute => "compute",
        NodeSelection::Gpu => "GPU",
        NodeSelection::Rail => "compute-fabric",
        NodeSelection::All => "",
    }
}

/// A pair subject: `first` runs the command (unless on the controller), `second` is
/// the peer (and runs the server). `suffix` marks re-tests (` (second pass)`).
fn pair_subject(
    views: &mut NodeViews<'_>,
    base: &Value,
    controller: Option<&str>,
    first: usize,
    second: usize,
    rail: Option<u32>,
    suffix: &str,
) -> Subject {
    let model = views.model;
    let (node, peer) = (&model.nodes[first], &model.nodes[second]);
    let mut name = format!("{}+{}", node.name, peer.name);
    let mut specific = BTreeMap::from([("node", views.get(first)), ("peer", views.get(second))]);
    if let Some(rail) = rail {
        name = format!("{name}/rail{rail}");
        let mine = node.rails.iter().find(|port| port.rail == rail);
        let theirs = peer.rails.iter().find(|port| port.rail == rail);
        if let (Some(mine), Some(theirs)) = (mine, theirs) {
            let view = json!({
                "index": rail,
                "netdev": mine.netdev,
                "address": mine.address,
                "mtu": mine.mtu,
                "leaf": model.fabric.switches[mine.leaf].name,
                "peer_netdev": theirs.netdev,
                "peer_address": theirs.address,
                "peer_leaf": model.fabric.switches[theirs.leaf].name,
            });
            specific.insert("rail", to_value(&view));
        }
    }
    name.push_str(suffix);
    Subject {
        name,
        host: controller.map_or_else(|| node.name.clone(), str::to_owned),
        server_host: Some(peer.name.clone()),
        nodes: vec![first, second],
        switch: None,
        rail,
        context: merge_values(specific, base),
    }
}

/// Each node's view as templates see it ([`node_view`]), made once per node however
/// many subjects name it: a rail validator names every node in two pairs per rail,
/// and making each view again was most of a 4,096-node plan's health checks.
/// Kept by node index in a hash table, so a planner that makes a few nodes' subjects
/// at a time holds only their views.
pub struct NodeViews<'m> {
    model: &'m Model,
    views: std::collections::HashMap<usize, Value, foldhash::fast::RandomState>,
}

impl<'m> NodeViews<'m> {
    /// No view made yet.
    #[must_use]
    pub fn new(model: &'m Model) -> Self {
        Self { model, views: std::collections::HashMap::default() }
    }

    /// The model whose nodes they are.
    #[must_use]
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The view of node `index` (shared: a clone is a reference count).
    pub fn get(&mut self, index: usize) -> Value {
        let model = self.model;
        self.views.entry(index).or_insert_with(|| to_value(&node_view(model, &model.nodes[index]))).clone()
    }
}

/// What every subject of a validator sees: the cluster, parameters, the selected
/// nodes and the scheduler's expected objects.
#[must_use]
pub fn base_context(model: &Model, site: &Site, selected: &[usize], params: &BTreeMap<String, f64>) -> Value {
    let names: Vec<&str> = selected.iter().map(|&index| model.nodes[index].name.as_str()).collect();
    let node_gpus: BTreeMap<&str, u32> = selected
        .iter()
        .map(|&index| (model.nodes[index].name.as_str(), model.groups[model.nodes[index].group].gpus_per_node))
        .collect();
    let slurm = if model.blueprint.scheduler.kind == SchedulerKind::Slurm {
        slurm::slurm(model).ok().flatten().map(|config| {
            json!({
                "controller": config.controller,
                "partitions": config.partitions.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
                "qos": config.qos.iter().map(|q| q.name.clone()).collect::<Vec<_>>(),
                "accounting": config.accounting(),
            })
        })
    } else {
        None
    };
    let fabric = &model.fabric;
    to_value(&json!({
        "cluster": {
            "name": model.name,
            "domain": model.domain,
            "fabric": {
                "kind": match fabric.kind { FabricKind::Infiniband => "infiniband", FabricKind::Roce => "roce" },
                "rails": fabric.sizing.rails,
                "link_speed_gbps": fabric.link_speed_gbps,
                "host_mtu": fabric.host_mtu,
                "switch_mtu": fabric.switch_mtu,
                // What every rail NIC must report (the `roce-qos` validator).
                "roce_qos": fabric.roce.as_ref().map(host_qos),
            },
            "controller": model.first_with(Role::Controller).map(|node| node.name.clone()),
            "scratch": model.scratch.as_ref().map(|scratch| scratch.mount.clone()),
            "shared": benchmark_filesystem(model).map(|fs| json!({
                "name": fs.name,
                "kind": match fs.kind { FilesystemKind::Nfs => "nfs", FilesystemKind::Lustre => "lustre" },
                "mount": fs.mount,
            })),
        },
        "params": params,
        "nodes": names,
        "hostlist": hostlist::compress(names.iter().copied()),
        "node_gpus": node_gpus,
        "slurm": slurm,
        // What the monitoring model scrapes: every node, then every switch.
        "monitoring": crate::model::monitoring::host(model).map(|host| json!({
            "host": host,
            "hosts": model.nodes.iter().map(|node| &node.name).chain(model.fabric.switches.iter().map(|switch| &switch.name)).collect::<Vec<_>>(),
            // The node groups whose nodes run the health program (scrape label `group`).
            "health_groups": model.groups.iter().filter(|group| group.has_role(Role::Compute)).map(|group| group.name.clone()).collect::<Vec<_>>(),
        })),
        "reachable": site.hosts.len(),
    }))
}

/// A node as templates see it.
#[must_use]
pub fn node_view(model: &Model, node: &Node) -> serde_json::Value {
    let group = &model.groups[node.group];
    json!({
        "name": node.name,
        "group": group.name,
        "roles": group.roles,
        "address": node.mgmt_address,
        "gpus": group.gpus_per_node,
        "gpu": group.gpu.map(|gpu| json!({ "model": gpu.name, "product": gpu.product, "memory_gib": gpu.memory_gib })),
        // The blueprint's `software` for the node's group: the driver `gpu-inventory`
        // expects and the level `dcgm-diag` runs.
        "driver": group.software.as_ref().and_then(|stack| stack.driver.as_ref()).map(|driver| json!({
            "version": driver.version,
            "branch": driver.branch,
            "expected": driver.expected(),
        })),
        "dcgm_diag_level": group.software.as_ref().and_then(|stack| stack.dcgm).map(|dcgm| dcgm.diag_level),
        // The shared filesystems its group mounts (the `mounts` check) and the daemons
        // toolkit deploys on it (the `services` check).
        "mounts": model
            .filesystems
            .iter()
            .filter(|filesystem| filesystem.client_groups.contains(&node.group))
            .map(|filesystem| filesystem.mount.clone())
            .collect::<Vec<_>>(),
        "services": node_services(model, node),
        "rails": node.rails.iter().map(|port| json!({
            "index": port.rail,
            "netdev": port.netdev,
            "address": port.address,
            "prefix_len": port.prefix_len,
            "gateway": port.gateway,
            "leaf": model.fabric.switches[port.leaf].name,
            "leaf_port": port.leaf_port,
            "mtu": port.mtu,
        })).collect::<Vec<_>>(),
    })
}

/// The long-running daemons toolkit deploys on `node` (as `render::slurm` and
/// `render::monitoring` lay them out): munge on every Slurm host, slurmd on compute
/// nodes, slurmctld on the controller, node exporter everywhere with monitoring on.
fn node_services(model: &Model, node: &Node) -> Vec<&'static str> {
    let group = &model.groups[node.group];
    let mut services = Vec::new();
    if model.blueprint.scheduler.kind == SchedulerKind::Slurm {
        let client = [Role::Controller, Role::Database, Role::Login, Role::Compute];
        let controller = model.first_with(Role::Controller).is_some_and(|first| first.name == node.name);
        if controller || client.iter().any(|role| group.has_role(*role)) {
            services.push("munge");
        }
        if group.has_role(Role::Compute) {
            services.push("slurmd");
        }
        if controller {
            services.push("slurmctld");
        }
    }
    if model.blueprint.monitoring.as_ref().is_some_and(|section| section.enabled) {
        services.push("prometheus-node-exporter");
    }
    services
}

/// A subject's own values over what every subject of the validator sees.
fn merge_values(specific: BTreeMap<&'static str, Value>, base: &Value) -> Value {
    minijinja::value::merge_maps([Value::from_object(specific), base.clone()])
}

/// Names from `--nodes`: comma-separated names or Slurm hostlists (`node[01-04,07]`).
///
/// # Errors
/// A malformed range, named in the message.
pub fn expand_hostlist(text: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    let mut items = Vec::new();
    for character in text.chars() {
        match character {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or_else(|| format!("`{text}`: `]` without `[`"))?,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(character);
    }
    if depth != 0 {
        return Err(format!("`{text}`: `[` without `]`"));
    }
    items.push(current);
    for item in items.iter().map(|item| item.trim()).filter(|item| !item.is_empty()) {
        let Some((prefix, rest)) = item.split_once('[') else {
            names.push(item.to_owned());
            continue;
        };
        let (ranges, suffix) = rest.split_once(']').ok_or_else(|| format!("`{item}`: `[` without `]`"))?;
        for range in ranges.split(',') {
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            let width = start.len();
            let (low, high) = match (start.parse::<u64>(), end.parse::<u64>()) {
                (Ok(low), Ok(high)) if low <= high && high - low < 100_000 => (low, high),
                _ => return Err(format!("`{item}`: `{range}` is not a range like `01-04`")),
            };
            for number in low..=high {
                names.push(format!("{prefix}{number:0width$}{suffix}"));
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::spec::ValidatorSpec;

    fn model(path: &str) -> Model {
        let loaded = crate::blueprint::load(std::path::Path::new(path)).expect("blueprint loads");
        crate::model::expand(&loaded.blueprint).expect("expands")
    }

    fn spec(scope: &str, extra: &str) -> ValidatorSpec {
        let text = format!(
            "id: t\ntitle: t\nfailure: t\ndocs: {{ what: a, why: b, fix: c }}\nscope: {scope}\ncommand: 'true'\nparser: text\n{extra}"
        );
        ValidatorSpec::from_source(&crate::source::SourceFile::new("t.yaml", text)).expect("spec loads")
    }

    fn names(expansion: &Expansion, model: &Model) -> Vec<String> {
        expansion.subjects(model).into_iter().map(|subject| subject.name).collect()
    }

    #[test]
    fn pairings() {
        assert_eq!(ring_pairs(1), vec![]);
        assert_eq!(ring_pairs(2), vec![(0, 1)]);
        assert_eq!(ring_pairs(4), vec![(0, 1), (1, 2), (2, 3), (3, 0)]);
        assert_eq!(disjoint_pairs(4), vec![(0, 1), (2, 3)]);
        assert_eq!(disjoint_pairs(5), vec![(0, 1), (2, 3), (4, 0)]);
        assert_eq!(disjoint_pairs(1), vec![]);
    }

    #[test]
    fn node_and_pair_subjects_of_the_lab() {
        let lab = model("blueprints/lab.yaml");
        let site = Site::everything(&lab);
        let nodes = expand(&spec("node", ""), &lab, &site, None, &BTreeMap::new()).expect("expands");
        assert_eq!(names(&nodes, &lab), ["node01", "node02", "node03", "node04"]);
        assert_eq!(nodes.subjects(&lab)[0].host, "node01");
        let all = expand(&spec("node", "nodes: all"), &lab, &site, None, &BTreeMap::new()).expect("expands");
        assert_eq!(names(&all, &lab)[0], "head");
        let ring = expand(&spec("node-pair", ""), &lab, &site, None, &BTreeMap::new()).expect("expands");
        assert_eq!(names(&ring, &lab), ["node01+node02", "node02+node03", "node03+node04", "node04+node01"]);
        assert_eq!(ring.subjects(&lab)[3].server_host.as_deref(), Some("node01"));
        let disjoint =
            expand(&spec("node-pair", "pairing: disjoint\nruns_on: controller"), &lab, &site, None, &BTreeMap::new())
                .expect("expands");
        assert_eq!(names(&disjoint, &lab), ["node01+node02", "node03+node04"]);
        assert_eq!(disjoint.subjects(&lab)[0].host, "head", "srun from the controller");
        let filter: BTreeSet<String> = ["node02".to_owned()].into();
        let one = expand(&spec("node-pair", ""), &lab, &site, Some(&filter), &BTreeMap::new()).expect("expands");
        assert!(one.is_empty());
        assert_eq!(one.empty_reason.as_deref(), Some("needs at least two compute nodes, 1 selected by --nodes"));
    }

    #[test]
    fn rail_subjects_carry_both_ends_of_the_rail() {
        let lab = model("blueprints/lab.yaml");
        let rails = expand(&spec("rail", ""), &lab, &Site::everything(&lab), None, &BTreeMap::new()).expect("expands");
        assert_eq!(rails.len(), 8, "2 rails x 4 ring pairs");
        assert_eq!(rails.subjects(&lab)[0].name, "node01+node02/rail0");
        assert_eq!(rails.subjects(&lab)[4].name, "node01+node02/rail1");
        let script = crate::validate::expr::render_command(
            "ping -M do -s {{ rail.mtu - 28 }} -I {{ rail.netdev }} {{ rail.peer_address }}",
            &rails.subjects(&lab)[5].context,
        )
        .expect("renders");
        // node02 rail1 is 10.200.0.35 (the second host of leaf1's 10.200.0.32/27), node03 is .36.
        assert_eq!(script, "ping -M do -s 8972 -I rail1 10.200.0.36");
        let superpod = model("blueprints/h100-superpod-1su.yaml");
        let rails = expand(&spec("rail", ""), &superpod, &Site::everything(&superpod), None, &BTreeMap::new())
            .expect("expands");
        assert_eq!(rails.len(), 8 * 31, "8 rails x 31 ring pairs of DGX nodes");
    }

    #[test]
    fn switch_subjects_name_their_fabric_ports_with_the_inventory_prefix() {
        let lab = model("blueprints/lab.yaml");
        let mut site = Site::everything(&lab);
        site.port_prefixes.insert("spine0".to_owned(), "eth".to_owned());
        let switches = expand(&spec("switch", ""), &lab, &site, None, &BTreeMap::new()).expect("expands");
        assert_eq!(names(&switches, &lab), ["leaf0", "leaf1", "spine0"]);
        let script = crate::validate::expr::render_command(
            "{% for p in switch.ports %}{{ p.name }}>{{ p.peer }}:{{ p.peer_port }} {% endfor %}",
            &switches.subjects(&lab)[2].context,
        )
        .expect("renders");
        assert_eq!(script, "eth1>leaf0:swp26 eth2>leaf1:swp26");
    }

    #[test]
    fn the_cluster_subject_runs_on_the_controller_and_sees_the_scheduler() {
        let lab = model("blueprints/lab.yaml");
        let cluster =
            expand(&spec("cluster", ""), &lab, &Site::everything(&lab), None, &BTreeMap::new()).expect("expands");
        assert_eq!(names(&cluster, &lab), ["lab"]);
        assert_eq!(cluster.subjects(&lab)[0].host, "head");
        let text = crate::validate::expr::render_text(
            "{{ hostlist }} {{ slurm.partitions | join(',') }} {{ slurm.qos | join(',') }} {{ node_gpus.node03 }}",
            &cluster.subjects(&lab)[0].context,
        )
        .expect("renders");
        assert_eq!(text, "node[01-04] gpu borrow,team-a,team-b 4");
    }

    #[test]
    fn where_a_subject_runs_is_known_without_making_it() {
        let lab = model("blueprints/lab.yaml");
        let site = Site::everything(&lab);
        for (scope, extra) in [
            ("node", ""),
            ("node-pair", ""),
            ("node-pair", "runs_on: controller"),
            ("rail", ""),
            ("switch", ""),
            ("cluster", ""),
        ] {
            let expansion = expand(&spec(scope, extra), &lab, &site, None, &BTreeMap::new()).expect("expands");
            let hosts: Vec<&str> = (0..expansion.len()).map(|at| expansion.host(at, &lab)).collect();
            let made: Vec<String> = expansion.subjects(&lab).into_iter().map(|subject| subject.host).collect();
            assert!(!made.is_empty(), "{scope} {extra}");
            assert_eq!(hosts, made, "{scope} {extra}");
        }
    }

    #[test]
    fn hostlists_from_the_command_line() {
        assert_eq!(
            expand_hostlist("node[01-03,07],head").expect("expands"),
            ["node01", "node02", "node03", "node07", "head"]
        );
        assert_eq!(expand_hostlist("gpu[8-10]-ib").expect("expands"), ["gpu8-ib", "gpu9-ib", "gpu10-ib"]);
        assert!(expand_hostlist("node[01-").is_err());
        assert!(expand_hostlist("node[04-01]").is_err());
    }
}
