//! The cluster's package cache: apt-cacher-ng on one node, and every other node's apt
//! pointed at it, so a driver or OFED install on thousands of nodes fetches each
//! package from outside once. Or, when the site has its own apt proxy or cache, every
//! node pointed at that and nothing deployed.
//!
//! Stage: render. Input: the model. Output: resources appended to `out`, and an
//! ordering ([`ProxySettings::order`]) of what every stage renders:
//! a node's package installs and `apt-get` commands wait for its proxy setting, which
//! waits for the cache's service on the cache node.
//!
//! HTTPS repositories: apt does not send `https://` sources through an HTTP proxy
//! (it would tunnel them, which apt-cacher-ng refuses and could not cache anyway).
//! toolkit's own repositories (NVIDIA's) are therefore written as
//! `http://HTTPS///host/path` when the cluster's cache is deployed: apt talks plain
//! HTTP to the cache, the cache fetches over TLS, and apt still checks every index and
//! package against the repository's signing key ([`source_url`]).

use serde::Serialize;

use crate::blueprint::schema::PACKAGE_CACHE_AUTO_NODES;
use crate::blueprint::schema::Role;
use crate::model::{Model, Node};
use crate::render::common::{file, package, service};
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("packages/apt-cacher-ng.conf.j2", include_str!("../../templates/packages/apt-cacher-ng.conf.j2")),
    ("packages/apt-proxy.conf.j2", include_str!("../../templates/packages/apt-proxy.conf.j2")),
];

/// The cache's settings. Debian's `zz_debconf.conf` sorts after `zz-…`, so the name
/// starts with three `z`s to be read last.
pub const CACHE_CONF: &str = "/etc/apt-cacher-ng/zzz_toolkit.conf";
/// The nodes' proxy setting; `01` so it is read before anything a site adds.
pub const APT_PROXY: &str = "/etc/apt/apt.conf.d/01toolkit-package-cache";
/// apt-cacher-ng's package and unit name.
pub const CACHE_SERVICE: &str = "apt-cacher-ng";
/// apt-cacher-ng's default port.
pub const DEFAULT_PORT: u16 = 3142;

/// Where the cluster's nodes get packages from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageSource {
    /// apt-cacher-ng deployed on `host`, reached at `url` by the other nodes.
    Cache {
        /// The node that runs it.
        host: String,
        /// `http://address:port/`.
        url: String,
        /// Port it listens on.
        port: u16,
        /// Its own way out, if the site has one.
        upstream_proxy: Option<String>,
    },
    /// The site's proxy, used by every node.
    Site {
        /// The proxy's URL as the blueprint gives it.
        url: String,
    },
}

/// What the blueprint's `package_cache` section means for this cluster; `None`:
/// every node fetches from its mirrors itself.
#[must_use]
pub fn resolve(model: &Model) -> Option<PackageSource> {
    let section = &model.blueprint.package_cache;
    let wanted =
        section.enabled.unwrap_or(model.nodes.len() > PACKAGE_CACHE_AUTO_NODES || section.site_proxy.is_some());
    if !wanted {
        return None;
    }
    if let Some(url) = &section.site_proxy {
        return Some(PackageSource::Site { url: url.clone() });
    }
    let node = match &section.host {
        Some(name) => model.nodes.iter().find(|node| &node.name == name)?,
        None => model.first_with(Role::Controller).or_else(|| model.nodes.first())?,
    };
    let port = section.port.unwrap_or(DEFAULT_PORT);
    Some(PackageSource::Cache {
        host: node.name.clone(),
        url: format!("http://{}:{port}/", node.mgmt_address),
        port,
        upstream_proxy: section.upstream_proxy.clone(),
    })
}

/// A repository URL as the nodes' sources list should name it: through the cache's
/// HTTPS remapping when the cluster's own cache is deployed, unchanged otherwise.
#[must_use]
pub fn source_url(source: Option<&PackageSource>, url: &str) -> String {
    match (source, url.strip_prefix("https://")) {
        (Some(PackageSource::Cache { .. }), Some(rest)) => format!("http://HTTPS///{rest}"),
        _ => url.to_owned(),
    }
}

#[derive(Serialize)]
struct CacheConf<'a> {
    port: u16,
    upstream_proxy: Option<&'a str>,
}

#[derive(Serialize)]
struct ProxyConf<'a> {
    what: &'a str,
    url: &'a str,
}

/// Appends the cache (when deployed) and every node's proxy setting.
///
/// # Errors
/// A template that fails to render.
pub fn render(model: &Model, renderer: &Renderer, out: &mut Vec<Resource>) -> Result<(), RenderError> {
    let Some(source) = resolve(model) else { return Ok(()) };
    let (proxy, what, cache_host, ready) = match &source {
        PackageSource::Cache { host, url, port, upstream_proxy } => {
            let target = Target::node(host);
            let conf = Content::new(renderer.render(
                "packages/apt-cacher-ng.conf.j2",
                CacheConf { port: *port, upstream_proxy: upstream_proxy.as_deref() },
            )?);
            let installed = package(&target, CACHE_SERVICE);
            let conf = file(&target, CACHE_CONF, conf, 0o644).after([installed.id.clone()]);
            let daemon = service(&target, CACHE_SERVICE, vec![conf.id.clone()], OnChange::Restart);
            let ready = daemon.id.clone();
            out.extend([installed, conf, daemon]);
            (url.as_str(), format!("the cluster's cache on {host}"), Some(host.as_str()), Some(ready))
        }
        PackageSource::Site { url } => (url.as_str(), "the site's proxy".to_owned(), None, None),
    };
    // One content for every node: the same bytes, hashed once.
    let conf = Content::new(renderer.render("packages/apt-proxy.conf.j2", ProxyConf { what: &what, url: proxy })?);
    for node in proxied(model, cache_host) {
        out.push(file(&Target::node(&node.name), APT_PROXY, conf.clone(), 0o644).after(ready.clone()));
    }
    Ok(())
}

/// The nodes that get a proxy setting: all but the cache's own.
fn proxied<'a>(model: &'a Model, cache_host: Option<&'a str>) -> impl Iterator<Item = &'a Node> {
    model.nodes.iter().filter(move |node| Some(node.name.as_str()) != cache_host)
}

/// Each proxied node's proxy setting, by node name: what the node's package installs
/// and `apt-get` commands wait for, whichever stage rendered them. Known from the model
/// before anything renders, so every stage orders its own output while the other
/// stages still render (at 4,096 nodes a pass over the joined ~230,000 resources was
/// ~8 ms of a plan's sequential path).
#[derive(Debug, Default)]
pub struct ProxySettings<'a> {
    // foldhash: looked up once per package of every node.
    by_node: std::collections::HashMap<&'a str, ResourceId, foldhash::fast::RandomState>,
}

impl<'a> ProxySettings<'a> {
    /// The settings [`render`] writes for `model`'s nodes.
    #[must_use]
    pub fn of(model: &'a Model) -> Self {
        let cache_host = match resolve(model) {
            None => return Self::default(),
            Some(PackageSource::Cache { host, .. }) => model.nodes.iter().find(|node| node.name == host),
            Some(PackageSource::Site { .. }) => None,
        };
        let by_node = proxied(model, cache_host.map(|node| node.name.as_str()))
            .map(|node| (node.name.as_str(), ResourceId::new(&node.name, "file", APT_PROXY)))
            .collect();
        Self { by_node }
    }

    /// Makes every package install and `apt-get` command in `resources` of a proxied
    /// node wait for its proxy setting (once: a second call adds nothing to resources
    /// already ordered).
    pub fn order(&self, resources: &mut [Resource]) {
        if self.by_node.is_empty() {
            return;
        }
        for resource in resources.iter_mut() {
            let uses_apt = match &*resource.desired {
                Desired::Package { .. } => true,
                Desired::Command { argv, .. } => argv.iter().any(|word| word.contains("apt-get")),
                _ => false,
            };
            if uses_apt
                && let Some(proxy) = self.by_node.get(resource.target())
                && !resource.depends_on.contains(proxy)
            {
                resource.depends_on.push(proxy.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn example(name: &str, edit: impl Fn(String) -> String) -> Vec<Resource> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("blueprints").join(name);
        let text = edit(std::fs::read_to_string(&path).expect("example blueprint"));
        let loaded = crate::blueprint::load::load_text(&path, text).expect("loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        let renderer = Renderer::embedded().expect("templates");
        crate::render::render(&model, None, &crate::render::slurm::Secrets::default(), &renderer).expect("renders")
    }

    fn find<'a>(resources: &'a [Resource], id: &str) -> &'a Resource {
        resources.iter().find(|r| r.id.as_str() == id).unwrap_or_else(|| panic!("no `{id}`"))
    }

    fn text(resource: &Resource) -> &str {
        let Desired::File { content, .. } = &*resource.desired else { panic!("{} is not a file", resource.id) };
        content.text()
    }

    #[test]
    fn a_cluster_beyond_a_handful_of_nodes_gets_a_cache_on_its_controller() {
        // 33 nodes, no `package_cache` section: on by default.
        let out = example("h100-superpod-1su.yaml", |text| text);
        let conf = find(&out, &format!("mgmt01:file:{CACHE_CONF}"));
        assert!(text(conf).contains("Port: 3142\n"), "{}", text(conf));
        let daemon = find(&out, "mgmt01:service:apt-cacher-ng");
        assert!(daemon.depends_on.contains(&conf.id));
        let proxy = find(&out, &format!("dgx001:file:{APT_PROXY}"));
        assert!(text(proxy).contains("Acquire::http::Proxy \"http://"), "{}", text(proxy));
        assert_eq!(&proxy.depends_on[..], std::slice::from_ref(&daemon.id), "the cache runs before any node uses it");
        assert!(
            out.iter().all(|r| r.id.as_str() != format!("mgmt01:file:{APT_PROXY}")),
            "the cache host fetches itself"
        );
        // Every package and apt-get of a proxied node waits for the proxy setting.
        for resource in out.iter().filter(|r| r.target() == "dgx001") {
            let apt = match &*resource.desired {
                Desired::Package { .. } => true,
                Desired::Command { argv, .. } => argv.iter().any(|word| word.contains("apt-get")),
                _ => false,
            };
            assert_eq!(apt, resource.depends_on.contains(&proxy.id), "{}", resource.id);
        }
        // NVIDIA's HTTPS repository goes through the cache's TLS remapping.
        let source = out.iter().find(|r| r.id.as_str().starts_with("dgx001:file:/etc/apt/sources.list.d/nvidia-cuda"));
        let source = text(source.expect("the CUDA source"));
        assert!(source.contains(" http://HTTPS///developer.download.nvidia.com/"), "{source}");
        crate::graph::build(out).expect("a graph without cycles or unknown ids");
    }

    #[test]
    fn a_small_cluster_fetches_directly_unless_told_otherwise() {
        let out = example("lab.yaml", |text| text);
        assert!(out.iter().all(|r| !r.id.as_str().contains("apt-cacher-ng") && !r.id.as_str().contains(APT_PROXY)));
        let on = example("lab.yaml", |text| format!("{text}package_cache: {{ enabled: true, port: 3150 }}\n"));
        let proxy = find(&on, &format!("node01:file:{APT_PROXY}"));
        assert!(text(proxy).contains(":3150/\";"), "{}", text(proxy));
        assert!(text(find(&on, &format!("head:file:{CACHE_CONF}"))).contains("Port: 3150\n"));
    }

    #[test]
    fn a_site_proxy_replaces_the_cache() {
        let out = example("h100-superpod-1su.yaml", |text| {
            format!("{text}package_cache: {{ site_proxy: \"http://apt.example.org:3142\" }}\n")
        });
        assert!(out.iter().all(|r| !r.id.as_str().contains("apt-cacher-ng")), "nothing deployed");
        let proxy = find(&out, &format!("mgmt01:file:{APT_PROXY}"));
        assert!(text(proxy).contains("\"http://apt.example.org:3142\""), "{}", text(proxy));
        assert!(proxy.depends_on.is_empty());
        let source = out.iter().find(|r| r.id.as_str().starts_with("dgx001:file:/etc/apt/sources.list.d/nvidia-cuda"));
        assert!(text(source.expect("source")).contains(" https://developer.download.nvidia.com/"), "no remapping");
    }
}
