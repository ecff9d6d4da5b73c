//! Interface names by MAC: a script, a boot unit and a run-once command that give
//! a host's or switch's interfaces the names the model uses (`rail0`, `swp26`, `hosts`).
//!
//! Stage: render. Input: `(MAC, name)` pairs from the inventory (`hosts.<name>.rail_macs`,
//! `switches.<name>.port_macs`). Output: resources appended to `out`, and the id of
//! the command after which the names exist, for the network and FRR configuration
//! to depend on.
//!
//! Why not netplan's `set-name` or a systemd `.link` file: both go through udev, which
//! renames a device only when it appears and does not run at all in containers (the
//! lab). An `ip link set … name` works on any Linux, on a running system, at once.
//! The unit repeats it at every boot, before networkd and FRR.

use serde::Serialize;

use crate::render::common::{apply_once, file, unwatched_service};
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Resource, ResourceId, Target};
use crate::topology::ports::{MAX_INTERFACE_NAME, is_interface_name};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("host/link-names.sh.j2", include_str!("../../templates/host/link-names.sh.j2")),
    ("host/link-names.service.j2", include_str!("../../templates/host/link-names.service.j2")),
];

/// The script that renames interfaces.
pub const SCRIPT: &str = "/usr/local/sbin/toolkit-link-names";
/// The unit that runs it at boot.
pub const UNIT: &str = "toolkit-link-names.service";
const UNIT_PATH: &str = "/etc/systemd/system/toolkit-link-names.service";
const SERVICE: &str = "toolkit-link-names";
const APPLY: &str = "link-names";

/// One interface to name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkName {
    /// MAC address, lowercase (as `/sys/class/net/*/address` shows it).
    pub mac: String,
    /// The name it gets.
    pub name: String,
}

impl LinkName {
    /// A checked pair: `mac` is six hex pairs separated by `:` (any case), `name`
    /// an interface name of letters, digits, `-`, `_` and `.`, at most 15 long.
    /// Both reach a shell script, so nothing else gets through.
    ///
    /// # Errors
    /// [`RenderError::Model`] naming `owner` (where in the inventory the pair is).
    pub fn new(owner: &str, mac: &str, name: &str) -> Result<Self, RenderError> {
        let invalid = |reason: String| RenderError::Model { what: format!("interface names of {owner}"), reason };
        if !is_mac(mac) {
            return Err(invalid(format!("`{mac}` is not a MAC address (six hex pairs separated by `:`)")));
        }
        if !is_interface_name(name) {
            return Err(invalid(format!(
                "`{name}` is not an interface name: 1 to {MAX_INTERFACE_NAME} letters, digits, `-`, `_` or `.`"
            )));
        }
        Ok(Self { mac: mac.to_ascii_lowercase(), name: name.to_owned() })
    }
}

fn is_mac(text: &str) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    parts.len() == 6 && parts.iter().all(|part| part.len() == 2 && part.chars().all(|c| c.is_ascii_hexdigit()))
}

#[derive(Serialize)]
struct ScriptContext<'a> {
    hostname: &'a str,
    names: String,
    links: &'a [LinkName],
}

/// Renders the per-target script; the unit, the same everywhere, is rendered once.
pub struct LinkNamer<'a> {
    renderer: &'a Renderer,
    unit: Content,
}

impl<'a> LinkNamer<'a> {
    /// Renders the unit.
    ///
    /// # Errors
    /// A template that fails.
    pub fn new(renderer: &'a Renderer) -> Result<Self, RenderError> {
        #[derive(Serialize)]
        struct UnitContext {
            script: &'static str,
        }
        let unit = Content::new(renderer.render("host/link-names.service.j2", UnitContext { script: SCRIPT })?);
        Ok(Self { renderer, unit })
    }

    /// Appends the resources that name `links` on `target`; returns the id of the
    /// command after which they carry their names, or `None` when there is nothing
    /// to name (no resources then).
    ///
    /// # Errors
    /// Two pairs with the same MAC or the same name, or a template that fails.
    pub fn render(
        &self,
        target: &Target,
        links: &[LinkName],
        out: &mut Vec<Resource>,
    ) -> Result<Option<ResourceId>, RenderError> {
        if links.is_empty() {
            return Ok(None);
        }
        for (index, link) in links.iter().enumerate() {
            if let Some(other) = links[..index].iter().find(|other| other.mac == link.mac || other.name == link.name) {
                return Err(RenderError::Model {
                    what: format!("interface names of `{}`", target.name),
                    reason: format!(
                        "`{}` ({}) and `{}` ({}) share a MAC or a name",
                        other.name, other.mac, link.name, link.mac
                    ),
                });
            }
        }
        let names = links.iter().map(|link| link.name.as_str()).collect::<Vec<_>>().join(", ");
        let script = Content::new(
            self.renderer.render("host/link-names.sh.j2", ScriptContext { hostname: &target.name, names, links })?,
        );
        let script_file = file(target, SCRIPT, script.clone(), 0o755);
        let unit_file = file(target, UNIT_PATH, self.unit.clone(), 0o644);
        // The unit covers boots; this covers the running system, once per script content.
        let apply = apply_once(
            target,
            APPLY,
            &script,
            SCRIPT,
            "name network interfaces by MAC address (rail0, swp26…) before they are configured",
        )
        .after([script_file.id.clone()]);
        let service = unwatched_service(target, SERVICE, [unit_file.id.clone(), apply.id.clone()]);
        let done = apply.id.clone();
        out.extend([script_file, unit_file, apply, service]);
        Ok(Some(done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Desired;

    fn target() -> Target {
        Target::node("node01")
    }

    #[test]
    fn pairs_are_checked_and_macs_lowercased() {
        let link = LinkName::new("`node01`", "02:42:0A:C8:00:02", "rail0").expect("valid");
        assert_eq!(link.mac, "02:42:0a:c8:00:02");
        for (mac, name) in [
            ("02:42:0a:c8:00", "rail0"),
            ("02:42:0a:c8:00:0g", "rail0"),
            ("02:42:0a:c8:00:02", "rail 0"),
            ("02:42:0a:c8:00:02", "rail0;reboot"),
            ("02:42:0a:c8:00:02", "a-name-too-long-"),
            ("02:42:0a:c8:00:02", ".."),
            ("02:42:0a:c8:00:02", ""),
            ("02:42:0a:c8:00:02", "x/y"),
        ] {
            assert!(LinkName::new("`node01`", mac, name).is_err(), "{mac} {name}");
        }
    }

    #[test]
    fn script_names_every_link_and_the_apply_command_runs_once_per_content() {
        let renderer = Renderer::embedded().expect("templates parse");
        let namer = LinkNamer::new(&renderer).expect("unit renders");
        let links = [
            LinkName::new("n", "02:42:0a:c8:00:02", "rail0").expect("valid"),
            LinkName::new("n", "02:42:0a:c8:00:22", "rail1").expect("valid"),
        ];
        let mut out = Vec::new();
        let done = namer.render(&target(), &links, &mut out).expect("renders").expect("something to name");
        assert_eq!(done.as_str(), "node01:command:link-names");
        let ids: Vec<&str> = out.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "node01:file:/usr/local/sbin/toolkit-link-names",
                "node01:file:/etc/systemd/system/toolkit-link-names.service",
                "node01:command:link-names",
                "node01:service:toolkit-link-names",
            ]
        );
        let Desired::File { content, mode, .. } = &*out[0].desired else { panic!("{:?}", out[0]) };
        assert_eq!(*mode, 0o755);
        assert!(content.text().contains("current=$(find_link '02:42:0a:c8:00:22' 'rail1')\n"));
        // The script parses as POSIX sh (what `/bin/sh` is on Debian: dash).
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("toolkit-link-names");
        std::fs::write(&path, content.text()).expect("write");
        let check = std::process::Command::new("sh").arg("-n").arg(&path).output().expect("sh runs");
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        let Desired::Command { argv, creates, .. } = &*out[2].desired else { panic!("{:?}", out[2]) };
        let marker = creates.as_deref().expect("a marker");
        assert!(marker.starts_with("/var/lib/toolkit/applied/link-names-"), "{marker}");
        assert!(argv[2].starts_with("/usr/local/sbin/toolkit-link-names && "), "{argv:?}");
        assert!(namer.render(&target(), &[], &mut out).expect("renders").is_none());
    }

    #[test]
    fn a_mac_or_name_listed_twice_is_refused() {
        let renderer = Renderer::embedded().expect("templates parse");
        let namer = LinkNamer::new(&renderer).expect("unit renders");
        let twice = [
            LinkName::new("n", "02:42:0a:c8:00:02", "rail0").expect("valid"),
            LinkName::new("n", "02:42:0a:c8:00:02", "rail1").expect("valid"),
        ];
        assert!(namer.render(&target(), &twice, &mut Vec::new()).is_err());
    }
}
