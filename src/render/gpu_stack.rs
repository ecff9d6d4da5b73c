//! The GPU node software of real hardware: NVIDIA's apt repository (key, source, pins),
//! the driver, Fabric Manager (with nvlsm on fourth-generation NVSwitches), nvidia-persistenced, the DOCA/MLNX OFED or inbox RDMA
//! stack, nvidia-peermem, DCGM, enroot and the pyxis SPANK plugin.
//!
//! Stage: render. Input: the model (each GPU group's resolved
//! [`Stack`](crate::model::software::Stack)) and the inventory. Output: resources
//! appended to `out`, after the Slurm ones: `slurmd` is made to watch the SPANK
//! configuration it loads.
//!
//! Only nodes with GPUs whose inventory entry is not `fake_gpu_devices` get any of this
//! (the lab's container nodes have no GPUs to drive), and only when the blueprint
//! declares a `software` section. Nothing here can run on this machine: the resources
//! are golden-tested (`tests/it/render_gpu_stack.rs`) and applied on real nodes.
//!
//! Order on a node: curl → keys → apt sources and pins → `apt-get update` (once per
//! content) → kernel headers → driver → Fabric Manager, persistenced, DCGM services;
//! OFED → peermem; enroot → its config; pyxis → plugstack.conf → slurmd restart.
//! Files are rendered once per node group and shared by its nodes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::blueprint::schema::{Role, SchedulerKind, SoftwareOs};
use crate::inventory::Inventory;
use crate::model::software::Stack;
use crate::model::{Group, Model};
use crate::render::common::{
    APPLIED_DIR, Command, apply_once, apt_update, file, load_modules, package, pinned_install, unwatched_service,
};
use crate::render::{RenderError, Renderer, package_cache};
use crate::resource::{Content, Desired, Disruption, Resource, ResourceId, Target, watched_file};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("gpu/apt-source.list.j2", include_str!("../../templates/gpu/apt-source.list.j2")),
    ("gpu/nvidia-pin.pref.j2", include_str!("../../templates/gpu/nvidia-pin.pref.j2")),
    ("gpu/modules-load.conf.j2", include_str!("../../templates/gpu/modules-load.conf.j2")),
    ("gpu/enroot.conf.j2", include_str!("../../templates/gpu/enroot.conf.j2")),
    ("gpu/enroot-tmpfiles.conf.j2", include_str!("../../templates/gpu/enroot-tmpfiles.conf.j2")),
    ("gpu/plugstack.conf.j2", include_str!("../../templates/gpu/plugstack.conf.j2")),
];

/// NVIDIA's CUDA repository key (ASCII-armoured; apt reads `.asc` keyrings directly).
pub const CUDA_KEYRING: &str = "/etc/apt/keyrings/nvidia-cuda.asc";
/// NVIDIA's CUDA repository source.
pub const CUDA_SOURCE: &str = "/etc/apt/sources.list.d/nvidia-cuda.list";
/// Driver and Fabric Manager version pins.
pub const NVIDIA_PIN: &str = "/etc/apt/preferences.d/nvidia-driver.pref";
/// NVIDIA networking's key (DOCA-Host and MLNX_OFED repositories).
pub const MELLANOX_KEYRING: &str = "/etc/apt/keyrings/mellanox.asc";
/// Where that key is published.
pub const MELLANOX_KEY_URL: &str = "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub";
/// The DOCA-Host or MLNX_OFED repository source.
pub const NETWORK_SOURCE: &str = "/etc/apt/sources.list.d/nvidia-networking.list";
/// Loads nvidia-peermem at boot.
pub const PEERMEM_MODULES: &str = "/etc/modules-load.d/nvidia-peermem.conf";
/// enroot's system configuration.
pub const ENROOT_CONF: &str = "/etc/enroot/enroot.conf";
/// enroot's shared directories, made at boot.
pub const ENROOT_TMPFILES: &str = "/etc/tmpfiles.d/enroot.conf";
/// Slurm's SPANK configuration (the default `PlugStackConfig` next to slurm.conf).
pub const PLUGSTACK: &str = "/etc/slurm/plugstack.conf";
/// Where pyxis' `make install prefix=/usr/local` puts the plugin.
pub const PYXIS_PLUGIN: &str = "/usr/local/lib/slurm/spank_pyxis.so";

/// Packages the driver and Fabric Manager pins cover (globs; a pin applies only to the
/// versions it names, so other packages matching a glob keep their own versions).
const PINNED: &[&str] = &["nvidia-*", "libnvidia-*", "libcuda1*", "cuda-drivers*", "firmware-nvidia-gsp*"];

/// Appends the GPU software of every real GPU node, and pyxis on the Slurm hosts that
/// run `srun`/`sbatch` (controller and login) when some GPU node runs containers.
///
/// # Errors
/// A template that fails to render.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<SlurmdPlugstacks, RenderError> {
    let slurm = model.blueprint.scheduler.kind == SchedulerKind::Slurm;
    let mut plugstacks: HashMap<String, (ResourceId, ResourceId)> = HashMap::new();
    let mut cluster_pyxis: Option<(String, Content)> = None;
    // Nodes that got the GPU stack (and with it the `curl` package).
    let mut with_stack: HashSet<&str> = HashSet::new();
    for group in &model.groups {
        let Some(stack) = group.software.as_ref() else { continue };
        let real: Vec<&str> = model
            .group_nodes(group)
            .iter()
            .map(|node| node.name.as_str())
            .filter(|name| !is_fake(inventory, name))
            .collect();
        let Some(&first_name) = real.first() else { continue };
        let files = GroupFiles::new(model, group, stack, renderer)?;
        if cluster_pyxis.is_none()
            && let (Some(containers), Some(plugstack)) = (&stack.containers, &files.plugstack)
        {
            cluster_pyxis = Some((containers.pyxis.clone(), plugstack.clone()));
        }
        // Every node of the group gets the same resources but for its name: rendered
        // once for the first node, copied for the others with ids and target renamed
        // (thousands of nodes per group; formatting each one's scripts was most of the
        // time of this stage).
        let start = out.len();
        let first = Target::node(first_name);
        node_resources(&first, stack, &files, out);
        let pyxis = if slurm
            && group.has_role(Role::Compute)
            && let (Some(containers), Some(plugstack)) = (&stack.containers, &files.plugstack)
        {
            Some(pyxis_resources(&first, &containers.pyxis, plugstack, true, out))
        } else {
            None
        };
        let end = out.len();
        out.reserve((end - start) * (real.len() - 1));
        let block = Block::new(&out[start..end]);
        for (position, &name) in real.iter().enumerate() {
            with_stack.insert(name);
            let ids: Vec<ResourceId> = if position == 0 {
                out[start..end].iter().map(|resource| resource.id.clone()).collect()
            } else {
                let target = Target::node(name);
                let ids = renamed_ids(&out[start..end], &first.name, name);
                for index in start..end {
                    let copy = retarget(&out[index], &target, &|id| block.rename(id, &ids, &first.name, name));
                    out.push(copy);
                }
                ids
            };
            if let Some((conf, build)) = &pyxis {
                let shared = |id| block.rename(id, &ids, &first.name, name);
                plugstacks.insert(name.to_owned(), (shared(conf), shared(build)));
            }
        }
    }
    if slurm && let Some((version, plugstack)) = &cluster_pyxis {
        // srun and sbatch load SPANK plugins too (spank(8): `local` and `allocator`
        // contexts): a `required` plugin missing there fails every container job.
        for group in model.groups.iter().filter(|g| g.has_role(Role::Controller) || g.has_role(Role::Login)) {
            for node in model.group_nodes(group) {
                if plugstacks.contains_key(&node.name) || is_fake(inventory, &node.name) {
                    continue;
                }
                let has_curl = with_stack.contains(node.name.as_str());
                pyxis_resources(&Target::node(&node.name), version, plugstack, has_curl, out);
            }
        }
    }
    Ok(SlurmdPlugstacks(plugstacks))
}

/// Per node, the pyxis plugstack file and build that its slurmd (rendered by another
/// stage) must restart on and come after: applied once every stage has rendered.
#[derive(Debug, Default)]
pub struct SlurmdPlugstacks(HashMap<String, (ResourceId, ResourceId)>);

impl SlurmdPlugstacks {
    /// Makes each node's slurmd in `resources` watch and follow its plugstack.
    pub fn apply(&self, resources: &mut [Resource]) {
        restart_slurmd_on_plugstack(&self.0, resources);
    }
}

/// The resources of a group's first node, which every other node's copy follows.
struct Block {
    /// Each resource's position in the block, by id.
    positions: HashMap<ResourceId, usize>,
}

impl Block {
    fn new(prototypes: &[Resource]) -> Self {
        Self { positions: prototypes.iter().enumerate().map(|(index, r)| (r.id.clone(), index)).collect() }
    }

    /// `id` on target `to`: for a resource of the block, the copy's own id in `ids`
    /// (one allocation per id, however many resources depend on it).
    fn rename(&self, id: &ResourceId, ids: &[ResourceId], from: &str, to: &str) -> ResourceId {
        match self.positions.get(id).and_then(|&index| ids.get(index)) {
            Some(shared) => shared.clone(),
            None => rename(id, from, to),
        }
    }
}

/// The ids of `prototypes` on target `to`.
fn renamed_ids(prototypes: &[Resource], from: &str, to: &str) -> Vec<ResourceId> {
    prototypes.iter().map(|resource| rename(&resource.id, from, to)).collect()
}

/// A copy of `prototype` on `target`: its id and every id it refers to on the
/// prototype's own target renamed by `renamed` (ids on other targets stay).
fn retarget(prototype: &Resource, target: &Target, renamed: &dyn Fn(&ResourceId) -> ResourceId) -> Resource {
    Resource {
        id: renamed(&prototype.id),
        // Shared: a service names the files it watches without their target.
        desired: std::sync::Arc::clone(&prototype.desired),
        depends_on: prototype.depends_on.iter().map(renamed).collect(),
        disruption: prototype.disruption,
        target_kind: target.kind,
    }
}

/// `id` with target `from` replaced by `to` (`from:kind:name` → `to:kind:name`).
fn rename(id: &ResourceId, from: &str, to: &str) -> ResourceId {
    match id.0.strip_prefix(from).filter(|rest| rest.starts_with(':')) {
        Some(rest) => {
            let mut renamed = String::with_capacity(to.len() + rest.len());
            renamed.push_str(to);
            renamed.push_str(rest);
            ResourceId(renamed.into())
        }
        None => id.clone(),
    }
}

/// Whether the inventory marks `name` as a node without real GPUs and NICs (the lab's).
pub(crate) fn is_fake(inventory: Option<&Inventory>, name: &str) -> bool {
    inventory.and_then(|inventory| inventory.hosts.get(name)).is_some_and(|host| host.fake_gpu_devices)
}

/// slurmd loads SPANK plugins once, at start (spank(8): "if configuration is changed or
/// plugins are updated, slurmd must be restarted"): it watches plugstack.conf and
/// starts after the plugin is built.
fn restart_slurmd_on_plugstack(plugstacks: &HashMap<String, (ResourceId, ResourceId)>, out: &mut [Resource]) {
    if plugstacks.is_empty() {
        return;
    }
    for resource in out.iter_mut() {
        // The cheap test first: one resource in dozens is a slurmd. Only then a copy
        // of what it wants to change, shared again below.
        if !matches!(&*resource.desired, Desired::Service { name, .. } if name == "slurmd") {
            continue;
        }
        let Some((file, build)) = plugstacks.get(resource.target()) else { continue };
        let Desired::Service { watches, .. } = Arc::make_mut(&mut resource.desired) else { continue };
        watches.push(watched_file(file));
        resource.depends_on.extend([file.clone(), build.clone()]);
    }
    // Every node of a group changed its slurmd alike: one copy per group again.
    crate::resource::SharedDesired::default().share(out);
}

/// Every file text of one group, rendered once.
struct GroupFiles {
    cuda_source: Option<Content>,
    pin: Option<Content>,
    network_source: Option<Content>,
    network_packages: Vec<String>,
    /// Hash input of `apt-get update`: every source and pin of the node.
    apt_lists: Option<Content>,
    peermem: Option<Content>,
    enroot: Option<(Content, Content)>,
    plugstack: Option<Content>,
}

#[derive(Serialize)]
struct SourceContext<'a> {
    name: &'a str,
    keyring: &'a str,
    url: &'a str,
    suite: &'a str,
}

#[derive(Serialize)]
struct PinContext<'a> {
    packages: &'a [&'a str],
    pin: String,
    fabric_manager: bool,
}

#[derive(Serialize)]
struct Modules<'a> {
    why: &'a str,
    modules: &'a [&'a str],
}

#[derive(Serialize)]
struct Plugstack<'a> {
    pyxis: &'a str,
    plugin: &'a str,
}

#[derive(Serialize)]
struct Tmpfiles {
    paths: Vec<String>,
}

#[derive(Serialize)]
struct EnrootContext<'a> {
    version: &'a str,
    local: Option<&'a str>,
    cache: String,
    data: String,
    temp: String,
}

impl GroupFiles {
    fn new(model: &Model, group: &Group, stack: &Stack, renderer: &Renderer) -> Result<Self, RenderError> {
        let needs_cuda_repo = stack.driver.is_some() || stack.dcgm.is_some();
        let packages = package_cache::resolve(model);
        let cuda_source = if needs_cuda_repo {
            let url = package_cache::source_url(packages.as_ref(), &stack.cuda_repo());
            let context =
                SourceContext { name: "NVIDIA CUDA repository", keyring: CUDA_KEYRING, url: &url, suite: "/" };
            Some(Content::new(renderer.render("gpu/apt-source.list.j2", context)?))
        } else {
            None
        };
        let pin = match &stack.driver {
            Some(driver) => Some(Content::new(renderer.render(
                "gpu/nvidia-pin.pref.j2",
                PinContext { packages: PINNED, pin: driver.apt_pin(), fabric_manager: stack.fabric_manager },
            )?)),
            None => None,
        };
        let (network_source, network_packages) = match stack.network_repo() {
            Some((url, network_packages)) => {
                let url = package_cache::source_url(packages.as_ref(), &url);
                let context = SourceContext {
                    name: "NVIDIA networking repository",
                    keyring: MELLANOX_KEYRING,
                    url: &url,
                    suite: "./",
                };
                (Some(Content::new(renderer.render("gpu/apt-source.list.j2", context)?)), network_packages)
            }
            None => (None, stack.inbox_packages()),
        };
        let lists: Vec<&str> = [&cuda_source, &pin, &network_source].into_iter().flatten().map(Content::text).collect();
        let apt_lists = (!lists.is_empty()).then(|| Content::new(lists.concat()));
        let peermem = if stack.peermem {
            Some(Content::new(renderer.render(
                "gpu/modules-load.conf.j2",
                Modules { why: "GPUDirect RDMA between GPUs and the rail NICs", modules: &["nvidia-peermem"] },
            )?))
        } else {
            None
        };
        let enroot = match &stack.containers {
            Some(containers) => Some(enroot_files(model, group, &containers.enroot, renderer)?),
            None => None,
        };
        let plugstack = match &stack.containers {
            Some(containers) => Some(Content::new(
                renderer
                    .render("gpu/plugstack.conf.j2", Plugstack { pyxis: &containers.pyxis, plugin: PYXIS_PLUGIN })?,
            )),
            None => None,
        };
        Ok(Self { cuda_source, pin, network_source, network_packages, apt_lists, peermem, enroot, plugstack })
    }
}

/// enroot.conf and its tmpfiles.d entry: image cache and container data on the node's
/// scratch when the group has local NVMe (images are large and unpacked per job),
/// under /var/lib/enroot otherwise.
fn enroot_files(
    model: &Model,
    group: &Group,
    version: &str,
    renderer: &Renderer,
) -> Result<(Content, Content), RenderError> {
    let local = model.scratch.as_ref().filter(|_| group.local_nvme > 0).map(|scratch| scratch.mount.as_str());
    let base =
        local.map_or_else(|| "/var/lib/enroot".to_owned(), |mount| format!("{}/enroot", mount.trim_end_matches('/')));
    let context = EnrootContext {
        version,
        local,
        cache: format!("{base}/cache"),
        data: format!("{base}/data"),
        temp: local.map_or_else(|| "/tmp".to_owned(), |_| format!("{base}/tmp")),
    };
    let mut paths = vec!["/run/enroot".to_owned(), context.cache.clone(), context.data.clone()];
    if local.is_some() {
        paths.push(context.temp.clone());
    }
    let conf = Content::new(renderer.render("gpu/enroot.conf.j2", &context)?);
    let tmpfiles = Content::new(renderer.render("gpu/enroot-tmpfiles.conf.j2", Tmpfiles { paths })?);
    Ok((conf, tmpfiles))
}

fn command(target: &Target, name: &str, argv: Vec<String>, guard: Guard, description: &str) -> Resource {
    let command = Command::new(argv, description);
    match guard {
        Guard::Creates(path) => command.creates(path),
        Guard::Unless(argv) => command.unless(argv),
    }
    .on(target, name)
}

enum Guard {
    Creates(String),
    Unless(Vec<String>),
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

/// The kernel headers DKMS builds the NVIDIA and OFED modules against.
const fn headers_package(os: SoftwareOs) -> &'static str {
    match os {
        SoftwareOs::Debian12 => "linux-headers-amd64",
        SoftwareOs::Ubuntu2204 => "linux-headers-generic",
    }
}

/// A key fetched over HTTPS into `path`, once.
fn fetch_key(target: &Target, name: &str, url: &str, path: &str, curl: &ResourceId) -> Resource {
    command(
        target,
        name,
        strings(&["curl", "-fsSL", "--create-dirs", "-o", path, url]),
        Guard::Creates(path.to_owned()),
        &format!("fetch the repository signing key {url}"),
    )
    .after([curl.clone()])
}

fn node_resources(target: &Target, stack: &Stack, files: &GroupFiles, out: &mut Vec<Resource>) {
    let curl = package(target, "curl");
    let curl_id = curl.id.clone();
    out.push(curl);
    let mut sources = Vec::new();
    if let Some(source) = &files.cuda_source {
        let key = fetch_key(target, "nvidia-cuda-key", &stack.cuda_key_url(), CUDA_KEYRING, &curl_id);
        let list = file(target, CUDA_SOURCE, source.clone(), 0o644).after([key.id.clone()]);
        sources.push(list.id.clone());
        out.extend([key, list]);
    }
    if let Some(pin) = &files.pin {
        let pin = file(target, NVIDIA_PIN, pin.clone(), 0o644);
        sources.push(pin.id.clone());
        out.push(pin);
    }
    if let Some(source) = &files.network_source {
        let key = fetch_key(target, "mellanox-key", MELLANOX_KEY_URL, MELLANOX_KEYRING, &curl_id);
        let list = file(target, NETWORK_SOURCE, source.clone(), 0o644).after([key.id.clone()]);
        sources.push(list.id.clone());
        out.extend([key, list]);
    }
    let mut ready = vec![curl_id.clone()];
    if let Some(lists) = &files.apt_lists {
        let update = apt_update(
            target,
            "apt-update-nvidia",
            lists,
            "read NVIDIA's package lists after their sources or pins changed",
        )
        .after(sources);
        ready = vec![update.id.clone()];
        out.push(update);
    }
    let needs_headers = stack.driver.is_some() || !files.network_packages.is_empty();
    if needs_headers {
        let headers = package(target, headers_package(stack.os)).after(ready.iter().cloned());
        ready.push(headers.id.clone());
        out.push(headers);
    }

    // The RDMA stack first: nvidia-peermem is built against the OFED kernel modules.
    let mut network = Vec::new();
    for name in &files.network_packages {
        // A new RDMA stack reloads the mlx5 modules (openibd restart drops every RDMA
        // user), and MLNX-OFED's installer updates adapter firmware, which takes a reset.
        let resource = package(target, name).after(ready.iter().cloned()).disrupts(Disruption::Reboot);
        network.push(resource.id.clone());
        out.push(resource);
    }
    // One apt transaction for everything the driver pin covers: a new version moves the
    // driver, persistenced and Fabric Manager together (Fabric Manager refuses to run a
    // version other than the driver's).
    let mut driver = Vec::new();
    let mut gpu_services = Vec::new();
    if let Some(pin) = stack.driver.as_ref().map(crate::model::software::Driver::apt_pin) {
        let mut packages = stack.driver_packages();
        packages.extend(stack.persistenced.then(|| "nvidia-persistenced".to_owned()));
        packages.extend(stack.fabric_manager_package());
        // Modules in use cannot be unloaded, and the first install must also get nouveau
        // out of the initramfs: a driver change takes the node down and up again.
        let install = driver_install(target, &pin, &packages)
            .after(ready.iter().cloned())
            .after(network.iter().cloned())
            .disrupts(Disruption::Reboot);
        driver.push(install.id.clone());
        out.push(install);
    }
    if stack.persistenced {
        let running = unwatched_service(target, "nvidia-persistenced", driver.clone());
        gpu_services.push(running.id.clone());
        out.push(running);
    }
    if stack.fabric_manager_package().is_some() {
        let mut after = driver.clone();
        if stack.nvlsm {
            // Fabric Manager starts the NVLink Subnet Manager on fourth-generation NVSwitches.
            let nvlsm = package(target, "nvlsm").after(ready.iter().cloned()).disrupts(Disruption::Drain);
            after.push(nvlsm.id.clone());
            out.push(nvlsm);
        }
        // CUDA fails with cudaErrorSystemNotReady until Fabric Manager is back.
        let running = unwatched_service(target, "nvidia-fabricmanager", after).disrupts(Disruption::Drain);
        gpu_services.push(running.id.clone());
        out.push(running);
    }
    if let Some(peermem) = &files.peermem {
        let modules = file(target, PEERMEM_MODULES, peermem.clone(), 0o644).disrupts(Disruption::Drain);
        let load = load_modules(
            target,
            "modprobe-nvidia-peermem",
            peermem,
            &["nvidia-peermem"],
            "load nvidia-peermem for GPUDirect RDMA",
        )
        .after([modules.id.clone()])
        .after(driver.iter().cloned())
        .after(network.iter().cloned())
        .disrupts(Disruption::Drain);
        out.extend([modules, load]);
    }
    if let Some(name) = stack.dcgm_package() {
        // DCGM's diagnostics check the whole stack: start it after the GPU services.
        // DCGM holds the GPUs while it upgrades: jobs lose their health watches.
        let dcgm = package(target, &name)
            .after(ready.iter().cloned())
            .after(driver.iter().cloned())
            .disrupts(Disruption::Drain);
        let mut after = vec![dcgm.id.clone()];
        after.extend(gpu_services.iter().cloned());
        let running = unwatched_service(target, "nvidia-dcgm", after);
        out.extend([dcgm, running]);
    }
    if let (Some(containers), Some((conf, tmpfiles))) = (&stack.containers, &files.enroot) {
        let install = enroot_install(target, &containers.enroot, &[curl_id]);
        let conf = file(target, ENROOT_CONF, conf.clone(), 0o644).after([install.id.clone()]);
        let tmpfiles_file = file(target, ENROOT_TMPFILES, tmpfiles.clone(), 0o644);
        let directories = apply_once(
            target,
            "enroot-directories",
            tmpfiles,
            &format!("systemd-tmpfiles --create {ENROOT_TMPFILES}"),
            "make enroot's shared runtime, cache and data directories",
        )
        .after([tmpfiles_file.id.clone()]);
        out.extend([install, conf, tmpfiles_file, directories]);
    }
}

/// The driver's packages at the pinned version (see [`pinned_install`]).
fn driver_install(target: &Target, pin: &str, packages: &[String]) -> Resource {
    pinned_install(
        target,
        "nvidia-driver",
        pin,
        packages,
        &format!("install the NVIDIA driver packages at {pin}: {}", packages.join(", ")),
    )
}

/// enroot and enroot+caps from the release's `.deb`s (NVIDIA's installation guide), the
/// version travelling as a positional argument; skipped when dpkg has that version.
fn enroot_install(target: &Target, version: &str, after: &[ResourceId]) -> Resource {
    let install = r#"set -e; cd "$(mktemp -d)"; for name in enroot enroot+caps; do curl -fsSLO "https://github.com/NVIDIA/enroot/releases/download/v$1/${name}_$1-1_amd64.deb"; done; DEBIAN_FRONTEND=noninteractive apt-get install -y -q "./enroot_$1-1_amd64.deb" "./enroot+caps_$1-1_amd64.deb""#;
    let installed = r#"test "$(dpkg-query -W -f='${Version}' enroot 2>/dev/null)" = "$1-1""#;
    command(
        target,
        "enroot-install",
        strings(&["sh", "-c", install, "sh", version]),
        Guard::Unless(strings(&["sh", "-c", installed, "sh", version])),
        &format!("install enroot {version} and enroot+caps from NVIDIA's GitHub release"),
    )
    .after(after.iter().cloned())
}

/// pyxis built from its release tarball against the node's Slurm headers
/// (`make install prefix=/usr/local` → [`PYXIS_PLUGIN`]), then plugstack.conf.
/// Returns the ids of plugstack.conf and of the build.
fn pyxis_resources(
    target: &Target,
    version: &str,
    plugstack: &Content,
    has_curl: bool,
    out: &mut Vec<Resource>,
) -> (ResourceId, ResourceId) {
    let mut tools = Vec::new();
    for name in ["curl", "build-essential", "libslurm-dev"] {
        if name == "curl" && has_curl {
            tools.push(ResourceId::new(&target.name, "package", "curl"));
            continue;
        }
        let resource = package(target, name);
        tools.push(resource.id.clone());
        out.push(resource);
    }
    let marker = format!("{APPLIED_DIR}/pyxis-{version}");
    let script = format!(
        r#"set -e; src="$(mktemp -d)"; curl -fsSL "https://github.com/NVIDIA/pyxis/archive/refs/tags/v$1.tar.gz" | tar -xz -C "$src" --strip-components=1; make -C "$src" install prefix=/usr/local; rm -rf "$src"; mkdir -p {APPLIED_DIR}; rm -f {APPLIED_DIR}/pyxis-*; touch "{APPLIED_DIR}/pyxis-$1""#
    );
    let build = command(
        target,
        "pyxis-build",
        strings(&["sh", "-c", &script, "sh", version]),
        Guard::Creates(marker),
        &format!("build and install the pyxis {version} SPANK plugin"),
    )
    .after(tools)
    .after([ResourceId::new(&target.name, "package", "slurm-client")]);
    let conf = file(target, PLUGSTACK, plugstack.clone(), 0o644).after([build.id.clone()]);
    let ids = (conf.id.clone(), build.id.clone());
    out.extend([build, conf]);
    ids
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Runs the guard of [`driver_install`] here, against this host's dpkg database.
    fn guard_passes(pin: &str, packages: &[&str]) -> bool {
        let packages: Vec<String> = packages.iter().map(|name| (*name).to_owned()).collect();
        let resource = driver_install(&Target::node("here"), pin, &packages);
        let Desired::Command { unless: Some(unless), .. } = std::sync::Arc::unwrap_or_clone(resource.desired) else {
            panic!("a guarded command")
        };
        Command::new(&unless[0]).args(&unless[1..]).status().expect("sh runs").success()
    }

    #[test]
    fn a_copy_renames_its_own_targets_ids_only() {
        let prototype = unwatched_service(
            &Target::node("gpu001"),
            "nvidia-dcgm",
            vec![ResourceId::new("gpu001", "package", "dcgm"), ResourceId::new("ctl01", "package", "slurmctld")],
        );
        let mut prototype = prototype;
        if let Desired::Service { watches, .. } = std::sync::Arc::make_mut(&mut prototype.desired) {
            watches.push(watched_file(&ResourceId::new("gpu001", "file", "/etc/dcgm.conf")));
        }
        let copy = retarget(&prototype, &Target::node("gpu0012"), &|id| rename(id, "gpu001", "gpu0012"));
        assert_eq!(copy.id.as_str(), "gpu0012:service:nvidia-dcgm");
        assert_eq!(copy.target(), "gpu0012");
        let after: Vec<&str> = copy.depends_on.iter().map(ResourceId::as_str).collect();
        assert_eq!(after, ["gpu0012:package:dcgm", "ctl01:package:slurmctld"]);
        assert!(Arc::ptr_eq(&copy.desired, &prototype.desired), "what it wants is shared");
        let watches: Vec<ResourceId> = copy.watches().collect();
        assert_eq!(watches, [ResourceId::new("gpu0012", "file", "/etc/dcgm.conf")]);
        // Within a node's copy, each of its resources' ids is one allocation.
        let prototypes = [package(&Target::node("gpu001"), "dcgm"), prototype];
        let block = Block::new(&prototypes);
        let ids = renamed_ids(&prototypes, "gpu001", "gpu0012");
        let copy =
            retarget(&prototypes[1], &Target::node("gpu0012"), &|id| block.rename(id, &ids, "gpu001", "gpu0012"));
        assert!(copy.depends_on[0].0.shares(&ids[0].0));
        assert_eq!(copy.id, ids[1]);
        // A target whose name extends another's is not the same target.
        let other = ResourceId::new("gpu0010", "package", "curl");
        assert_eq!(rename(&other, "gpu001", "gpu002"), other);
    }

    #[test]
    fn the_driver_guard_matches_installed_versions_against_the_pin() {
        let Ok(output) = Command::new("dpkg-query").args(["-W", "-f=${Version}", "dpkg"]).output() else {
            eprintln!("skipped: no dpkg-query here");
            return;
        };
        let version = String::from_utf8_lossy(&output.stdout).into_owned();
        let major = version.split('.').next().expect("a version");
        assert!(guard_passes(&version, &["dpkg"]), "exact version {version}");
        assert!(guard_passes(&format!("{major}.*"), &["dpkg"]), "branch glob {major}.*");
        assert!(!guard_passes("0.0.1-*", &["dpkg"]), "another version reinstalls");
        assert!(!guard_passes(&version, &["dpkg", "toolkit-no-such-package"]), "a missing package installs");
    }
}
