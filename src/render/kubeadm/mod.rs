//! A bare-metal Kubernetes cluster brought up by kubeadm (`scheduler.kubernetes.mode:
//! kubeadm`), as ordinary host resources in the graph.
//!
//! Stage: render. Input: the [`Model`] (its [`KubeadmModel`]), the inventory and the
//! [`KubeadmSecrets`] read from it. Output: resources on every node.
//!
//! Order on a node: kernel modules (overlay, br_netfilter) → sysctls → swap off;
//! containerd and its config.toml (checked by `containerd config dump` before it
//! replaces the old one) → containerd restarted; pkgs.k8s.io's key, source and pin →
//! `apt-get update` → kubelet, kubeadm, kubectl at the blueprint's release. Then, on
//! the control plane: the inventory's CA into /etc/kubernetes/pki → `kubeadm init`
//! (skipped once admin.conf exists) → the bootstrap token (re)created when `kubeadm
//! token list` lacks it; on every other node `kubeadm join` (skipped once
//! kubelet.conf exists) after that token command: join → token → init across hosts.
//!
//! The token and the CA key reach only files marked secret (0600), never an argv,
//! a description or the plan; the commands read the token from its file.

pub mod config;

use std::path::Path;

use serde::Serialize;

use crate::inventory::Inventory;
use crate::inventory::kubeadm::{ca_cert_hash, is_bootstrap_token};
use crate::inventory::secrets::resolve;
use crate::model::Model;
use crate::model::kubeadm::{self, KubeNode, KubeadmModel};
use crate::render::common::{
    Command, SysctlApply, apt_update, checked_file, file, load_modules, package, pinned_install, secret_file, service,
    unwatched_service,
};
use crate::render::gpu_stack::is_fake;
use crate::render::{RenderError, Renderer, package_cache};
use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("kubeadm/containerd-config.toml.j2", include_str!("../../../templates/kubeadm/containerd-config.toml.j2")),
    ("kubeadm/sysctl.conf.j2", include_str!("../../../templates/kubeadm/sysctl.conf.j2")),
    ("kubeadm/kubernetes-pin.pref.j2", include_str!("../../../templates/kubeadm/kubernetes-pin.pref.j2")),
];

/// Kernel modules containerd's overlay snapshotter and kube-proxy's bridge rules need.
pub const MODULES: &str = "/etc/modules-load.d/kubernetes.conf";
/// Kubernetes' sysctls.
pub const SYSCTL: &str = "/etc/sysctl.d/90-kubernetes.conf";
/// containerd's configuration.
pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
/// pkgs.k8s.io's signing key (ASCII-armoured; apt reads `.asc` keyrings directly).
pub const KUBERNETES_KEYRING: &str = "/etc/apt/keyrings/kubernetes.asc";
/// pkgs.k8s.io's source.
pub const KUBERNETES_SOURCE: &str = "/etc/apt/sources.list.d/kubernetes.list";
/// The version pin of kubelet, kubeadm and kubectl.
pub const KUBERNETES_PIN: &str = "/etc/apt/preferences.d/kubernetes.pref";
/// Where kubeadm keeps (and finds) the cluster CA.
pub const PKI_DIR: &str = "/etc/kubernetes/pki";
/// toolkit's kubeadm files (0700: they hold the token).
pub const TOOLKIT_DIR: &str = "/etc/kubernetes/toolkit";
/// `kubeadm init --config` (secret: holds the token).
pub const INIT_CONFIG: &str = "/etc/kubernetes/toolkit/kubeadm-init.yaml";
/// `kubeadm join --config` (secret: holds the token).
pub const JOIN_CONFIG: &str = "/etc/kubernetes/toolkit/kubeadm-join.yaml";
/// The bootstrap token alone, read by the token command.
pub const TOKEN_FILE: &str = "/etc/kubernetes/toolkit/bootstrap-token";
pub use crate::model::kubeadm::ADMIN_CONF;
/// Written by `kubeadm join`: the node is in the cluster.
pub const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
/// The pause image kubeadm 1.31 and later expect (containerd 1.6's default is 3.6,
/// which `kubeadm init` warns about).
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The packages pinned to the release.
const PACKAGES: &[&str] = &["kubelet", "kubeadm", "kubectl"];

/// What kubeadm needs from the inventory, read on this machine. `None` where it could
/// not be read (an offline plan without the secrets): the files that hold it are
/// planned as unresolved secrets, which a deploy refuses to write.
#[derive(Clone, Default)]
pub struct KubeadmSecrets {
    /// The CA certificate (PEM; not secret).
    pub ca_cert: Option<String>,
    /// The CA key (PEM).
    pub ca_key: Option<String>,
    /// The bootstrap token.
    pub token: Option<String>,
}

impl std::fmt::Debug for KubeadmSecrets {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("KubeadmSecrets").finish_non_exhaustive()
    }
}

impl KubeadmSecrets {
    /// Reads the inventory's `kubernetes.kubeadm` references; relative paths from `base`.
    #[must_use]
    pub fn from_inventory(inventory: Option<&Inventory>, base: &Path) -> Self {
        let Some(access) = inventory.and_then(|i| i.kubernetes.as_ref()).and_then(|k| k.kubeadm.as_ref()) else {
            return Self::default();
        };
        let cert = if access.ca_cert.is_absolute() { access.ca_cert.clone() } else { base.join(&access.ca_cert) };
        Self {
            ca_cert: std::fs::read_to_string(cert).ok(),
            ca_key: resolve(&access.ca_key, base).ok(),
            token: resolve(&access.bootstrap_token, base).ok(),
        }
    }
}

/// The kubeadm cluster's resources (none unless the blueprint is in mode `kubeadm`).
///
/// # Errors
/// A template that fails, or a CA certificate that is not one.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    secrets: &KubeadmSecrets,
    renderer: &Renderer,
) -> Result<Vec<Resource>, RenderError> {
    let Some(kubeadm) = kubeadm::expand(model) else { return Ok(Vec::new()) };
    let files = Files::new(model, &kubeadm, secrets, renderer)?;
    let mut out = Vec::new();
    let control_plane = Target::node(&kubeadm.control_plane.name);
    let ready = node_resources(model, inventory, &control_plane, &kubeadm.control_plane, &files, &mut out);
    let token = control_plane_resources(&control_plane, &files, ready, &mut out);
    for worker in &kubeadm.workers {
        let target = Target::node(&worker.name);
        let ready = node_resources(model, inventory, &target, worker, &files, &mut out);
        let join = files.join_config(&kubeadm, worker, secrets);
        let config = secret_file(&target, JOIN_CONFIG, join, 0o600).after([directory_id(&target, TOOLKIT_DIR)]);
        let join = command(
            &target,
            "kubeadm-join",
            &["kubeadm", "join", "--config", JOIN_CONFIG],
            KUBELET_CONF,
            "join the node to the Kubernetes cluster (kubeadm join)",
        )
        .after(ready)
        .after([config.id.clone(), token.clone()]);
        let kubelet = unwatched_service(&target, "kubelet", [join.id.clone()]);
        out.extend([config, join, kubelet]);
    }
    Ok(out)
}

/// Every file text of the cluster, rendered once.
struct Files {
    modules: Content,
    sysctl: Content,
    containerd: Content,
    containerd_nvidia: Content,
    source: Content,
    pin: Content,
    /// Hash input of `apt-get update`: the source and the pin.
    apt_lists: Content,
    pin_pattern: String,
    key_url: String,
    init: Content,
    token: Content,
    ca_cert: Content,
    ca_key: Content,
    /// The CA pin; `None` when the CA certificate could not be read here.
    ca_hash: Option<String>,
}

#[derive(Serialize)]
struct Modules<'a> {
    why: &'a str,
    modules: &'a [&'a str],
}

#[derive(Serialize)]
struct Sysctl<'a> {
    settings: &'a [(&'a str, &'a str)],
}

#[derive(Serialize)]
struct Containerd<'a> {
    sandbox_image: &'a str,
    default_runtime: &'a str,
    nvidia: bool,
}

#[derive(Serialize)]
struct Source<'a> {
    name: &'a str,
    keyring: &'a str,
    url: &'a str,
    suite: &'a str,
}

#[derive(Serialize)]
struct AptPin<'a> {
    version: &'a str,
    packages: &'a [&'a str],
    pin: &'a str,
}

fn secret_content(value: Option<String>) -> Content {
    value.map_or_else(Content::unresolved_secret, Content::new)
}

impl Files {
    fn new(
        model: &Model,
        kubeadm: &KubeadmModel,
        secrets: &KubeadmSecrets,
        renderer: &Renderer,
    ) -> Result<Self, RenderError> {
        let modules = Content::new(renderer.render(
            "gpu/modules-load.conf.j2",
            Modules {
                why: "containerd's overlay snapshotter, iptables on bridged pod traffic",
                modules: &["overlay", "br_netfilter"],
            },
        )?);
        let settings = [
            ("net.bridge.bridge-nf-call-iptables", "1"),
            ("net.bridge.bridge-nf-call-ip6tables", "1"),
            ("net.ipv4.ip_forward", "1"),
        ];
        let sysctl = Content::new(renderer.render("kubeadm/sysctl.conf.j2", Sysctl { settings: &settings })?);
        let containerd = |nvidia: bool| -> Result<Content, RenderError> {
            let context = Containerd {
                sandbox_image: SANDBOX_IMAGE,
                default_runtime: if nvidia { "nvidia" } else { "runc" },
                nvidia,
            };
            Ok(Content::new(renderer.render("kubeadm/containerd-config.toml.j2", context)?))
        };
        let repository = format!("https://pkgs.k8s.io/core:/stable:/v{}/deb/", kubeadm.minor);
        let url = package_cache::source_url(package_cache::resolve(model).as_ref(), &repository);
        let source = Content::new(renderer.render(
            "gpu/apt-source.list.j2",
            Source {
                name: "Kubernetes package repository (pkgs.k8s.io)",
                keyring: KUBERNETES_KEYRING,
                url: &url,
                suite: "/",
            },
        )?);
        let pin_pattern = format!("{}-*", kubeadm.version);
        let pin = Content::new(renderer.render(
            "kubeadm/kubernetes-pin.pref.j2",
            AptPin { version: &kubeadm.version, packages: PACKAGES, pin: &pin_pattern },
        )?);
        let apt_lists = Content::new(format!("{}{}", source.text(), pin.text()));
        let ca_hash = match &secrets.ca_cert {
            Some(pem) => Some(ca_cert_hash(pem).map_err(|error| RenderError::Model {
                what: "the kubeadm join configuration".to_owned(),
                reason: format!("the inventory's `kubernetes.kubeadm.ca_cert` is not a CA certificate: {error}"),
            })?),
            None => None,
        };
        if secrets.token.as_deref().is_some_and(|token| !is_bootstrap_token(token)) {
            return Err(RenderError::Model {
                what: "the kubeadm configuration".to_owned(),
                reason: "the inventory's `kubernetes.kubeadm.bootstrap_token` is not `[a-z0-9]{6}.[a-z0-9]{16}` \
                         (make one with `kubeadm token generate`)"
                    .to_owned(),
            });
        }
        let init = secrets.token.as_deref().map(|token| config::yaml_file(&config::init_documents(kubeadm, token)));
        Ok(Self {
            modules,
            sysctl,
            containerd: containerd(false)?,
            containerd_nvidia: containerd(true)?,
            source,
            pin,
            apt_lists,
            pin_pattern,
            key_url: format!("{repository}Release.key"),
            init: secret_content(init),
            token: secret_content(secrets.token.as_ref().map(|token| format!("{token}\n"))),
            ca_cert: secrets.ca_cert.clone().map_or_else(Content::unresolved_secret, Content::new),
            ca_key: secret_content(secrets.ca_key.clone()),
            ca_hash,
        })
    }

    fn join_config(&self, kubeadm: &KubeadmModel, node: &KubeNode, secrets: &KubeadmSecrets) -> Content {
        match (&secrets.token, &self.ca_hash) {
            (Some(token), Some(hash)) => {
                Content::new(config::yaml_file(&[config::join_document(kubeadm, node, token, hash)]))
            }
            _ => Content::unresolved_secret(),
        }
    }
}

fn directory(target: &Target, path: &str, mode: u32) -> Resource {
    Resource::new(target.clone(), path, Desired::Directory { path: path.to_owned(), mode, owner: "root".to_owned() })
}

fn directory_id(target: &Target, path: &str) -> ResourceId {
    ResourceId::new(&target.name, "dir", path)
}

/// A shell script run unless `unless` (also a script) succeeds. Scripts are toolkit's
/// own constant text: no blueprint value reaches them.
fn shell_unless(target: &Target, name: &str, script: &str, unless: &str, description: &str) -> Resource {
    Command::new(["sh", "-c", script].map(str::to_owned).to_vec(), description)
        .unless(["sh", "-c", unless].map(str::to_owned).to_vec())
        .on(target, name)
}

/// A command skipped once `creates` exists.
fn command(target: &Target, name: &str, argv: &[&str], creates: &str, description: &str) -> Resource {
    Command::new(argv.iter().map(|word| (*word).to_owned()).collect(), description).creates(creates).on(target, name)
}

/// What every node gets before kubeadm runs on it; returns the ids kubeadm waits for.
fn node_resources(
    model: &Model,
    inventory: Option<&Inventory>,
    target: &Target,
    node: &KubeNode,
    files: &Files,
    out: &mut Vec<Resource>,
) -> Vec<ResourceId> {
    let modules = file(target, MODULES, files.modules.clone(), 0o644);
    let load = load_modules(
        target,
        "modprobe-kubernetes",
        &files.modules,
        &["overlay", "br_netfilter"],
        "load overlay and br_netfilter for containerd and kube-proxy",
    )
    .after([modules.id.clone()]);
    let sysctl_file = file(target, SYSCTL, files.sysctl.clone(), 0o644);
    // The bridge keys exist only once br_netfilter is loaded.
    let sysctl = SysctlApply::new("sysctl-kubernetes", SYSCTL, &files.sysctl, "apply Kubernetes' sysctls")
        .on(target)
        .after([sysctl_file.id.clone(), load.id.clone()]);
    let swap = swap_off(target);

    let containerd = package(target, "containerd");
    let group =
        model.nodes.iter().find(|candidate| candidate.name == node.name).map(|found| &model.groups[found.group]);
    let stack = group.and_then(|group| group.software.as_ref()).filter(|_| !is_fake(inventory, &node.name));
    let cuda_repository = stack.filter(|stack| stack.driver.is_some() || stack.dcgm.is_some());
    let (config, nvidia) = if node.nvidia_runtime
        && let Some(_) = cuda_repository
    {
        // The runtime's binary comes with the toolkit, from NVIDIA's CUDA repository,
        // which the GPU stack adds.
        let toolkit = package(target, "nvidia-container-toolkit").after([ResourceId::new(
            &target.name,
            "command",
            "apt-update-nvidia",
        )]);
        (files.containerd_nvidia.clone(), Some(toolkit))
    } else {
        (files.containerd.clone(), None)
    };
    // containerd refuses to start on a file it cannot load: check it first.
    let config =
        checked_file(target, CONTAINERD_CONFIG, config, 0o644, &["containerd", "--config", "{}", "config", "dump"])
            .after([containerd.id.clone()]);
    let mut after_config = vec![config.id.clone(), load.id.clone()];
    after_config.extend(nvidia.as_ref().map(|toolkit| toolkit.id.clone()));
    let running = service(target, "containerd", vec![config.id.clone()], OnChange::Restart).after(after_config);

    // curl comes with the GPU stack on its nodes.
    let has_curl = stack.is_some() && group.is_some_and(|group| group.gpu.is_some());
    let curl_id = ResourceId::new(&target.name, "package", "curl");
    let key = command(
        target,
        "kubernetes-key",
        &["curl", "-fsSL", "--create-dirs", "-o", KUBERNETES_KEYRING, &files.key_url],
        KUBERNETES_KEYRING,
        &format!("fetch the repository signing key {}", files.key_url),
    )
    .after([curl_id.clone()]);
    let source = file(target, KUBERNETES_SOURCE, files.source.clone(), 0o644).after([key.id.clone()]);
    let pin = file(target, KUBERNETES_PIN, files.pin.clone(), 0o644);
    let update = apt_update(
        target,
        "apt-update-kubernetes",
        &files.apt_lists,
        "read the Kubernetes package lists after their source or pin changed",
    )
    .after([source.id.clone(), pin.id.clone()]);
    let packages: Vec<String> = PACKAGES.iter().map(|name| (*name).to_owned()).collect();
    let install = pinned_install(
        target,
        "kubernetes-packages",
        &files.pin_pattern,
        &packages,
        &format!("install kubelet, kubeadm and kubectl at {}", files.pin_pattern),
    )
    .after([update.id.clone()]);
    let toolkit_dir = directory(target, TOOLKIT_DIR, 0o700);
    // kubeadm's preflight fails without conntrack (kube-proxy's) and warns without
    // socat (port-forward); neither is a dependency of the pkgs.k8s.io packages.
    let tools: Vec<Resource> = ["conntrack", "socat"].into_iter().map(|name| package(target, name)).collect();
    let mut ready =
        vec![sysctl.id.clone(), swap.id.clone(), running.id.clone(), install.id.clone(), toolkit_dir.id.clone()];
    ready.extend(tools.iter().map(|tool| tool.id.clone()));
    if !has_curl {
        out.push(package(target, "curl"));
    }
    out.extend([modules, load, sysctl_file, sysctl, swap, containerd]);
    out.extend(nvidia);
    out.extend([config, running, key, source, pin, update, install, toolkit_dir]);
    out.extend(tools);
    ready
}

/// The kubelet refuses to start with swap on (its default `failSwapOn`): off now, and
/// commented out of /etc/fstab so it stays off after a reboot.
fn swap_off(target: &Target) -> Resource {
    let entry = r"^[^#[:space:]][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap[[:space:]]";
    let script = format!(
        r"swapoff -a && sed -i -E 's@({entry}.*)$@# \1  # off for the kubelet (toolkit)@' /etc/fstab && systemctl daemon-reload"
    );
    let off = format!(r#"test -z "$(swapon --noheadings --show)" && ! grep -Eq '{entry}' /etc/fstab"#);
    shell_unless(target, "swap-off", &script, &off, "turn swap off now and at boot (the kubelet requires it)")
}

/// The CA, `kubeadm init` and the bootstrap token on the control plane; returns the
/// token command's id, which every join waits for.
fn control_plane_resources(
    target: &Target,
    files: &Files,
    ready: Vec<ResourceId>,
    out: &mut Vec<Resource>,
) -> ResourceId {
    let pki = directory(target, PKI_DIR, 0o755);
    let cert = file(target, &format!("{PKI_DIR}/ca.crt"), files.ca_cert.clone(), 0o644).after([pki.id.clone()]);
    let key = secret_file(target, &format!("{PKI_DIR}/ca.key"), files.ca_key.clone(), 0o600).after([pki.id.clone()]);
    let toolkit_dir = directory_id(target, TOOLKIT_DIR);
    let init_config = secret_file(target, INIT_CONFIG, files.init.clone(), 0o600).after([toolkit_dir.clone()]);
    let token_file = secret_file(target, TOKEN_FILE, files.token.clone(), 0o600).after([toolkit_dir]);
    let init = command(
        target,
        kubeadm::INIT_COMMAND,
        &["kubeadm", "init", "--config", INIT_CONFIG, "--skip-token-print"],
        ADMIN_CONF,
        "create the Kubernetes control plane with the inventory's CA (kubeadm init)",
    )
    .after(ready)
    .after([cert.id.clone(), key.id.clone(), init_config.id.clone()]);
    // The token lives 24 hours: a later deploy that joins a node makes it again. Read
    // from its file, so it is on no command line; kubeadm prints it, so stdout is dropped.
    let create = format!(
        r#"kubeadm token create "$(cat {TOKEN_FILE})" --ttl {ttl} --description "toolkit: joins the cluster's nodes" --kubeconfig {ADMIN_CONF} >/dev/null"#,
        ttl = config::TOKEN_TTL
    );
    let listed = format!(
        r#"kubeadm token list --kubeconfig {ADMIN_CONF} 2>/dev/null | awk 'NR > 1 {{ print $1 }}' | grep -qxF "$(cat {TOKEN_FILE})""#
    );
    let token = shell_unless(
        target,
        "kubeadm-token",
        &create,
        &listed,
        "create the bootstrap token the joins use, when the cluster lacks it",
    )
    .after([init.id.clone(), token_file.id.clone()]);
    let kubelet = unwatched_service(target, "kubelet", [init.id.clone()]);
    let id = token.id.clone();
    out.extend([pki, cert, key, init_config, token_file, init, token, kubelet]);
    id
}

#[cfg(test)]
mod tests;
