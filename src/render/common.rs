//! Resource builders shared by the render modules: a file, a service, a package, a
//! command (with its guard, reads and undo), a command run once per content of a
//! file, and `sysctl -p` of a file run when a value it sets differs.
//!
//! Stage: render. Input: a target and what the resource holds. Output: one
//! [`Resource`]. It imports no render module, so every render module can import it
//! without an import circle.

use crate::resource::{Content, Desired, OnChange, Reads, Resource, ResourceId, Target, watched};

/// Where [`apply_once`] keeps its markers.
pub const APPLIED_DIR: &str = "/var/lib/toolkit/applied";

/// A command run once per content of a file: its marker under [`APPLIED_DIR`] carries
/// the content hash, so the command runs again exactly when the content changes (and
/// an offline plan sees a new command fingerprint). `shell_command` is built from
/// toolkit's own constant paths only, never from blueprint values.
pub(crate) fn apply_once(
    target: &Target,
    name: &str,
    content: &Content,
    shell_command: &str,
    description: &str,
) -> Resource {
    let marker = format!("{APPLIED_DIR}/{name}-{}", &content.sha256()[..16]);
    let script = format!("{shell_command} && mkdir -p {APPLIED_DIR} && rm -f {APPLIED_DIR}/{name}-* && touch {marker}");
    Command::new(vec!["sh".to_owned(), "-c".to_owned(), script], description).creates(marker).on(target, name)
}

/// `apt-get update`, run once per content of the sources and pins it reads (`lists`:
/// their concatenation), so new package lists are read exactly when they changed.
pub(crate) fn apt_update(target: &Target, name: &str, lists: &Content, description: &str) -> Resource {
    apply_once(target, name, lists, "apt-get update -q", description)
}

/// `modprobe` of each of `modules` now, once per content of the modules-load.d file
/// (`loads`) that loads them at boot.
pub(crate) fn load_modules(
    target: &Target,
    name: &str,
    loads: &Content,
    modules: &[&str],
    description: &str,
) -> Resource {
    let command = modules.iter().map(|module| format!("modprobe {module}")).collect::<Vec<_>>().join(" && ");
    apply_once(target, name, loads, &command, description)
}

/// `sysctl -p PATH`, run when a value the sysctl.d file at `path` sets differs from
/// the running kernel's (read with `sysctl -n KEY…`), so a plan shows each key old →
/// new and a value changed by hand since is set again. Keys and values come from the
/// rendered `content` itself, the one source of both. No undo: the kernel's previous
/// values are not known, and the file's removal takes effect at the next boot.
///
/// Made once per content and put [`on`](SysctlApply::on) each target: the keys of a
/// node's rails are ~100 strings, parsed and copied once, not per node.
pub(crate) struct SysctlApply {
    name: &'static str,
    desired: std::sync::Arc<Desired>,
}

impl SysctlApply {
    pub(crate) fn new(name: &'static str, path: &str, content: &Content, description: &str) -> Self {
        let wanted = sysctl_settings(content.text());
        let mut read = vec!["sysctl".to_owned(), "-n".to_owned()];
        read.extend(wanted.iter().map(|(key, _)| key.clone()));
        let desired = Command::new(vec!["sysctl".to_owned(), "-p".to_owned(), path.to_owned()], description)
            .reads(Reads { argv: read, wanted })
            .desired();
        Self { name, desired: std::sync::Arc::new(desired) }
    }

    /// The command on `target`.
    pub(crate) fn on(&self, target: &Target) -> Resource {
        Resource::shared(target.clone(), self.name, std::sync::Arc::clone(&self.desired))
    }
}

/// `key = value` lines of a sysctl.d file (sysctl.d(5)): comments and blank lines
/// skipped, a leading `-` (ignore errors) dropped.
fn sysctl_settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with(['#', ';']))
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().trim_start_matches('-').to_owned(), value.trim().to_owned()))
        .collect()
}

/// A root-owned, non-secret file without a check command.
pub(crate) fn file(target: &Target, path: &str, content: Content, mode: u32) -> Resource {
    owned_file(target, path, content, mode, "root", "root")
}

/// A non-secret file without a check command, owned by `owner:group`.
pub(crate) fn owned_file(
    target: &Target,
    path: &str,
    content: Content,
    mode: u32,
    owner: &str,
    group: &str,
) -> Resource {
    any_file(target, path, content, mode, (owner, group), false, None)
}

/// A root-owned, non-secret file that `check` (`{}`: the new file's path) accepts
/// before it replaces the old one.
pub(crate) fn checked_file(target: &Target, path: &str, content: Content, mode: u32, check: &[&str]) -> Resource {
    let check = check.iter().map(|word| (*word).to_owned()).collect();
    any_file(target, path, content, mode, ("root", "root"), false, Some(check))
}

/// A root-owned secret file (never shown, stored only as a hash) without a check command.
pub(crate) fn secret_file(target: &Target, path: &str, content: Content, mode: u32) -> Resource {
    owned_secret_file(target, path, content, mode, "root")
}

/// A secret file (never shown, stored only as a hash) without a check command, owned
/// by `owner` and the group of the same name (a daemon's system user).
pub(crate) fn owned_secret_file(target: &Target, path: &str, content: Content, mode: u32, owner: &str) -> Resource {
    any_file(target, path, content, mode, (owner, owner), true, None)
}

/// A file, made whole (not changed after it is made, which would copy a render
/// stage's shared [`Desired`]).
fn any_file(
    target: &Target,
    path: &str,
    content: Content,
    mode: u32,
    owner: (&str, &str),
    secret: bool,
    check: Option<Vec<String>>,
) -> Resource {
    Resource::new(
        target.clone(),
        path,
        Desired::File {
            path: path.to_owned(),
            content,
            mode,
            owner: owner.0.to_owned(),
            group: owner.1.to_owned(),
            secret,
            check,
        },
    )
}

/// An enabled, running service that depends on the files it watches.
pub(crate) fn service(target: &Target, name: &str, watches: Vec<ResourceId>, on_change: OnChange) -> Resource {
    watching_service(target, name, &watches, on_change).after(watches)
}

/// An enabled, running service that watches `watches` but depends on nothing yet: for
/// a caller that lists every dependency itself, in its own order.
pub(crate) fn watching_service(target: &Target, name: &str, watches: &[ResourceId], on_change: OnChange) -> Resource {
    Resource::new(
        target.clone(),
        name,
        Desired::Service { name: name.to_owned(), enabled: true, running: true, watches: watched(watches), on_change },
    )
}

/// An enabled, running service that watches no file, after `after`: a oneshot boot
/// unit (its run-once command, not a restart, covers a new script) or a daemon whose
/// configuration arrives through its package.
pub(crate) fn unwatched_service(target: &Target, name: &str, after: impl IntoIterator<Item = ResourceId>) -> Resource {
    service(target, name, Vec::new(), OnChange::Restart).after(after)
}

/// Packages at the version an apt pin holds them to (`apt-get install` of a pinned
/// package installs, upgrades or downgrades it to the pin); skipped when dpkg already
/// has every one of them at a version the pin matches. The pin is a glob
/// (`570.124.06-*`, `570.*`), matched by `case`; package names travel as arguments.
pub(crate) fn pinned_install(
    target: &Target,
    name: &str,
    pin: &str,
    packages: &[String],
    description: &str,
) -> Resource {
    let install = r#"shift; DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --allow-downgrades -o Dpkg::Options::=--force-confold "$@""#;
    let pinned = r#"pin=$1; shift; for name in "$@"; do version=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null) || exit 1; case "$version" in $pin) ;; *) exit 1 ;; esac; done"#;
    let mut argv: Vec<String> = ["sh", "-c", install, "sh", pin].map(str::to_owned).to_vec();
    argv.extend(packages.iter().cloned());
    let mut unless: Vec<String> = ["sh", "-c", pinned, "sh", pin].map(str::to_owned).to_vec();
    unless.extend(packages.iter().cloned());
    Command::new(argv, description).unless(unless).on(target, name)
}

/// A command on a target: what it runs, what skips it (`creates`, `unless`, or the
/// values it `reads`) and what undoes it once it leaves the blueprint. The one
/// place render builds a [`Desired::Command`].
pub(crate) struct Command {
    argv: Vec<String>,
    creates: Option<String>,
    unless: Option<Vec<String>>,
    reads: Option<Reads>,
    undo: Option<Vec<String>>,
    description: String,
}

impl Command {
    /// `argv`, run on every deploy until a guard is added; no undo.
    pub(crate) fn new(argv: Vec<String>, description: impl Into<String>) -> Self {
        Self { argv, creates: None, unless: None, reads: None, undo: None, description: description.into() }
    }

    /// Skipped once the file at `path` exists.
    #[must_use]
    pub(crate) fn creates(mut self, path: impl Into<String>) -> Self {
        self.creates = Some(path.into());
        self
    }

    /// Skipped when the command `argv` succeeds.
    #[must_use]
    pub(crate) fn unless(mut self, argv: Vec<String>) -> Self {
        self.unless = Some(argv);
        self
    }

    /// Run when the values `reads` reads differ from the ones it wants.
    #[must_use]
    pub(crate) fn reads(mut self, reads: Reads) -> Self {
        self.reads = Some(reads);
        self
    }

    /// Undone by `argv` once it leaves the blueprint; an empty `argv` says there is
    /// nothing to undo.
    #[must_use]
    pub(crate) fn undo(mut self, argv: Vec<String>) -> Self {
        self.undo = Some(argv);
        self
    }

    /// The desired state, for a caller that shares it between targets.
    pub(crate) fn desired(self) -> Desired {
        let Self { argv, creates, unless, reads, undo, description } = self;
        Desired::Command { argv, creates, unless, description, undo, reads: reads.map(Box::new) }
    }

    /// The command on `target`, named `name`.
    pub(crate) fn on(self, target: &Target, name: &str) -> Resource {
        Resource::new(target.clone(), name, self.desired())
    }
}

/// A package installed by the OS package manager.
pub(crate) fn package(target: &Target, name: &str) -> Resource {
    Resource::new(target.clone(), name, Desired::Package { name: name.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_apply_reads_the_keys_its_file_sets() {
        let text = "# comment\n; other comment\n\nnet.ipv4.ip_forward = 1\n-net/ipv4/conf/all/rp_filter=2\nkernel.x = a \t b\n";
        assert_eq!(
            sysctl_settings(text),
            [
                ("net.ipv4.ip_forward".to_owned(), "1".to_owned()),
                ("net/ipv4/conf/all/rp_filter".to_owned(), "2".to_owned()),
                ("kernel.x".to_owned(), "a \t b".to_owned()),
            ]
        );
        let target = Target::node("node01");
        let content = Content::new("net.ipv4.ip_forward = 1\nnet/ipv4/conf/all/rp_filter = 2\n".to_owned());
        let resource = SysctlApply::new("sysctl-test", "/etc/sysctl.d/t.conf", &content, "apply").on(&target);
        let Desired::Command { argv, reads: Some(reads), creates: None, unless: None, .. } = &*resource.desired else {
            panic!("{resource:?}");
        };
        assert_eq!(argv, &["sysctl", "-p", "/etc/sysctl.d/t.conf"]);
        assert_eq!(reads.argv, ["sysctl", "-n", "net.ipv4.ip_forward", "net/ipv4/conf/all/rp_filter"]);
        // This machine's sysctl prints one line per key, in order, whatever the values.
        if let Ok(output) = std::process::Command::new(&reads.argv[0]).args(&reads.argv[1..]).output()
            && output.status.success()
        {
            let printed = String::from_utf8_lossy(&output.stdout);
            assert!(reads.observed(&printed).is_some(), "{printed:?}");
        }
    }
}
