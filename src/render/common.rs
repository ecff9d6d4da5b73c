//! Resource builders shared by the render modules: a root-owned file, a service,
//! a package, and a command run once per content of a file.
//!
//! Stage: render. Input: a target and what the resource holds. Output: one
//! [`Resource`]. It imports no render module, so every render module can import it
//! without an import circle.

use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target};

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
    Resource::new(
        target.clone(),
        name,
        Desired::Command {
            argv: vec!["sh".to_owned(), "-c".to_owned(), script],
            creates: Some(marker),
            unless: None,
            description: description.to_owned(),
            undo: None,
            reads: None,
        },
    )
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
    Resource::new(
        target.clone(),
        path,
        Desired::File {
            path: path.to_owned(),
            content,
            mode,
            owner: owner.to_owned(),
            group: group.to_owned(),
            secret: false,
            check: None,
        },
    )
}

/// An enabled, running service that depends on the files it watches.
pub(crate) fn service(target: &Target, name: &str, watches: Vec<ResourceId>, on_change: OnChange) -> Resource {
    let depends = watches.clone();
    Resource::new(
        target.clone(),
        name,
        Desired::Service { name: name.to_owned(), enabled: true, running: true, watches, on_change },
    )
    .after(depends)
}

/// A package installed by the OS package manager.
pub(crate) fn package(target: &Target, name: &str) -> Resource {
    Resource::new(target.clone(), name, Desired::Package { name: name.to_owned() })
}
