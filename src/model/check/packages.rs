//! Checks of `package_cache`: the cache node exists, proxy URLs are what apt's
//! `Acquire::http::Proxy` and apt-cacher-ng's `Proxy:` accept (and carry no password
//! into the plan), and settings that would be ignored are said to be.

use super::Facts;
use crate::blueprint::LoadedBlueprint;
use crate::diagnostic::{Diagnostic, Diagnostics};

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let section = &loaded.blueprint.package_cache;
    let source = &loaded.source;
    if let (Some(host), Some(names)) = (&section.host, &facts.hostnames)
        && !names.iter().any(|(_, name)| name == host)
    {
        out.push(
            Diagnostic::error("unknown-package-cache-host", format!("no node is named `{host}`"))
                .at(source, "package_cache.host")
                .help("name a node of `node_groups`, or remove `host` to use the Slurm controller"),
        );
    }
    if section.port == Some(0) {
        out.push(
            Diagnostic::error("invalid-package-cache-port", "port 0 cannot be listened on")
                .at(source, "package_cache.port")
                .help("remove `port` for apt-cacher-ng's 3142, or give a port from 1 to 65535"),
        );
    }
    for (key, url) in [("site_proxy", &section.site_proxy), ("upstream_proxy", &section.upstream_proxy)] {
        if let Some(url) = url
            && let Err(problem) = proxy_url(url)
        {
            out.push(
                Diagnostic::error("invalid-proxy-url", format!("`{url}` {problem}"))
                    .at(source, format!("package_cache.{key}"))
                    .help("write it as `http://host:port`, e.g. `http://proxy.example.org:3128`"),
            );
        }
    }
    if section.enabled == Some(false) && section.site_proxy.is_some() {
        out.push(
            Diagnostic::warning("package-cache-ignored", "`site_proxy` is ignored: `enabled` is false")
                .at(source, "package_cache.enabled")
                .help("remove `enabled: false` to send the nodes through the site's proxy"),
        );
    }
    if section.site_proxy.is_some() {
        let ignored = [
            ("host", section.host.is_some()),
            ("port", section.port.is_some()),
            ("upstream_proxy", section.upstream_proxy.is_some()),
        ];
        for (key, _) in ignored.iter().filter(|(_, set)| *set) {
            out.push(
                Diagnostic::warning(
                    "package-cache-ignored",
                    format!("`{key}` is ignored: with `site_proxy` no cache is deployed"),
                )
                .at(source, format!("package_cache.{key}"))
                .help("remove it, or remove `site_proxy` to deploy the cluster's own cache"),
            );
        }
    }
}

/// `http://host[:port][/]` with a host of letters, digits, dots and dashes: quotes,
/// blanks or `;` would end apt.conf's string, and a password would reach the plan.
fn proxy_url(url: &str) -> Result<(), &'static str> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err("is not an `http://` URL (apt and apt-cacher-ng speak plain HTTP to a proxy)");
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err("carries credentials, which would be written into plans and config files");
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && !host.starts_with(['-', '.']);
    if !host_ok {
        return Err("does not name a host (letters, digits, `.` and `-` only, no path)");
    }
    if port.is_some_and(|port| port.parse::<u16>().map_or(true, |port| port == 0)) {
        return Err("has a port that is not a number from 1 to 65535");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::proxy_url;

    #[test]
    fn proxy_urls_are_what_apt_and_apt_cacher_ng_accept() {
        for good in ["http://proxy.example.org:3128", "http://10.0.0.1:3142/", "http://cache"] {
            assert_eq!(proxy_url(good), Ok(()), "{good}");
        }
        for bad in [
            "https://proxy:3128",
            "proxy:3128",
            "http://user:secret@proxy:3128",
            "http://proxy:3128/path",
            "http://pro\"xy:3128",
            "http://proxy; rm -rf /:1",
            "http://proxy:0",
            "http://proxy:99999",
            "http://-proxy",
            "http://",
            "http://prоxy", // Cyrillic о
        ] {
            assert!(proxy_url(bad).is_err(), "{bad} was accepted");
        }
    }
}
