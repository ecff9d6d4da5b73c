//! Manifests: a plain list of files, directories, packages, services and commands
//! pushed to every inventory host — `toolkit push`, the ad-hoc sibling of a
//! blueprint (what an Ansible playbook of `template`/`file`/`command` tasks does).
//!
//! Stage: load + render. Input: a manifest YAML and an inventory. Output:
//! resources per host; each entry depends on the one before it on the same host,
//! so a manifest runs in the order it is written. Templates (`template.src`) and
//! every path or argument are minijinja templates over the host's `vars`, plus
//! `host_label` and `inventory_hostname` (the host's inventory name).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, UndefinedBehavior};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::inventory::Inventory;
use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target};

/// A manifest file.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Schema version; only `1` exists.
    pub version: u32,
    /// Inventory hosts to push to; all hosts when absent.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// What to make true on each host, in order.
    pub resources: Vec<Entry>,
}

/// One entry: exactly one key naming its kind (`template`, `directory`,
/// `package`, `service` or `command`). A struct of options rather than a serde
/// enum: serde_norway reads externally tagged enums only from YAML tags.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// A file rendered from a template file.
    #[serde(default)]
    pub template: Option<TemplateEntry>,
    /// A directory.
    #[serde(default)]
    pub directory: Option<DirectoryEntry>,
    /// A package, installed.
    #[serde(default)]
    pub package: Option<String>,
    /// A service unit, enabled and running.
    #[serde(default)]
    pub service: Option<String>,
    /// A command; runs on every push unless `creates` says its work is done.
    #[serde(default)]
    pub command: Option<CommandEntry>,
}

/// A file rendered from a template file.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateEntry {
    /// Template path, relative to the manifest.
    pub src: PathBuf,
    /// Destination path on the host.
    pub dest: String,
    /// Octal mode, `"0644"`.
    #[serde(default = "file_mode")]
    pub mode: String,
    /// Owner user.
    #[serde(default = "root")]
    pub owner: String,
    /// Owner group.
    #[serde(default = "root")]
    pub group: String,
}

/// A directory.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DirectoryEntry {
    /// Path on the host.
    pub path: String,
    /// Octal mode, `"0755"`.
    #[serde(default = "dir_mode")]
    pub mode: String,
    /// Owner user.
    #[serde(default = "root")]
    pub owner: String,
}

/// A command.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandEntry {
    /// Program and arguments (each quoted for the remote shell).
    pub argv: Vec<String>,
    /// Skip when this path exists.
    #[serde(default)]
    pub creates: Option<String>,
}

fn file_mode() -> String {
    "0644".to_owned()
}

fn dir_mode() -> String {
    "0755".to_owned()
}

fn root() -> String {
    "root".to_owned()
}

/// Why a manifest could not be turned into resources.
#[derive(Debug, Error)]
pub enum ManifestError {
    /// A template file cannot be read.
    #[error("cannot read template `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A template or templated field failed.
    #[error("`{what}` for host `{host}`: {source}")]
    Template {
        /// Which field or file.
        what: String,
        /// The host.
        host: String,
        /// minijinja's error.
        #[source]
        source: minijinja::Error,
    },
    /// A mode is not octal.
    #[error("mode `{0}` is not an octal number like `0644`")]
    Mode(String),
    /// A host named by the manifest is not in the inventory.
    #[error("host `{0}` is not in the inventory")]
    UnknownHost(String),
    /// An entry names no kind or several.
    #[error("resources[{0}] must have exactly one of `template`, `directory`, `package`, `service`, `command`")]
    EntryKind(usize),
}

/// Turns `manifest` into resources for the inventory's hosts.
///
/// # Errors
/// [`ManifestError`] for unreadable templates, undefined variables, bad modes and
/// unknown hosts.
pub fn resources(manifest: &Manifest, base: &Path, inventory: &Inventory) -> Result<Vec<Resource>, ManifestError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Config files end with a newline; Jinja's default would eat it.
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder().keep_trailing_newline(true).build() {
        env.set_syntax(syntax);
    }
    // Template files are read and compiled once, rendered per host.
    let mut sources = BTreeMap::new();
    for entry in &manifest.resources {
        if let Some(TemplateEntry { src, .. }) = &entry.template {
            let path = base.join(src);
            let text =
                std::fs::read_to_string(&path).map_err(|source| ManifestError::Read { path: path.clone(), source })?;
            sources.insert(src.display().to_string(), text);
        }
    }
    for (name, text) in &sources {
        env.add_template_owned(name.clone(), text.clone()).map_err(|source| ManifestError::Template {
            what: name.clone(),
            host: "(all)".to_owned(),
            source,
        })?;
    }
    let hosts: Vec<&String> = match &manifest.hosts {
        Some(names) => names
            .iter()
            .map(|name| {
                inventory
                    .hosts
                    .get_key_value(name)
                    .map(|(k, _)| k)
                    .ok_or_else(|| ManifestError::UnknownHost(name.clone()))
            })
            .collect::<Result<_, _>>()?,
        None => inventory.hosts.keys().collect(),
    };
    let mut out = Vec::with_capacity(hosts.len() * manifest.resources.len());
    for host in hosts {
        let mut context: BTreeMap<String, String> = inventory.hosts[host].vars.clone();
        context.insert("host_label".to_owned(), host.clone());
        context.insert("inventory_hostname".to_owned(), host.clone());
        let field = |what: &str, text: &str| -> Result<String, ManifestError> {
            env.render_str(text, minijinja::value::Serde(&context)).map_err(|source| ManifestError::Template {
                what: what.to_owned(),
                host: host.clone(),
                source,
            })
        };
        let target = Target::node(host);
        let mut previous: Option<ResourceId> = None;
        for (index, entry) in manifest.resources.iter().enumerate() {
            let kinds = usize::from(entry.template.is_some())
                + usize::from(entry.directory.is_some())
                + usize::from(entry.package.is_some())
                + usize::from(entry.service.is_some())
                + usize::from(entry.command.is_some());
            if kinds != 1 {
                return Err(ManifestError::EntryKind(index));
            }
            let (name, desired) = match entry {
                Entry { template: Some(TemplateEntry { src, dest, mode, owner, group }), .. } => {
                    let key = src.display().to_string();
                    let template = env.get_template(&key).map_err(|source| ManifestError::Template {
                        what: key.clone(),
                        host: host.clone(),
                        source,
                    })?;
                    let text = template
                        .render(minijinja::value::Serde(&context))
                        .map_err(|source| ManifestError::Template { what: key.clone(), host: host.clone(), source })?;
                    let path = field("dest", dest)?;
                    let desired = Desired::File {
                        path: path.clone(),
                        content: Content::new(text),
                        mode: octal(mode)?,
                        owner: owner.clone(),
                        group: group.clone(),
                        secret: false,
                        check: None,
                    };
                    (path, desired)
                }
                Entry { directory: Some(DirectoryEntry { path, mode, owner }), .. } => {
                    let path = field("path", path)?;
                    (path.clone(), Desired::Directory { path, mode: octal(mode)?, owner: owner.clone() })
                }
                Entry { package: Some(name), .. } => (name.clone(), Desired::Package { name: name.clone() }),
                Entry { service: Some(name), .. } => (
                    name.clone(),
                    Desired::Service {
                        name: name.clone(),
                        enabled: true,
                        running: true,
                        watches: Vec::new(),
                        on_change: OnChange::Restart,
                    },
                ),
                Entry { command: Some(CommandEntry { argv, creates }), .. } => {
                    let argv = argv.iter().map(|word| field("argv", word)).collect::<Result<Vec<_>, _>>()?;
                    let creates = creates.as_deref().map(|path| field("creates", path)).transpose()?;
                    let description = crate::resource::shell::summarize(&argv);
                    (
                        description.clone(),
                        Desired::Command { argv, creates, unless: None, description, undo: None, reads: None },
                    )
                }
                Entry { .. } => return Err(ManifestError::EntryKind(index)),
            };
            let resource = Resource::new(target.clone(), &name, desired).after(previous.take());
            previous = Some(resource.id.clone());
            out.push(resource);
        }
    }
    Ok(out)
}

fn octal(mode: &str) -> Result<u32, ManifestError> {
    u32::from_str_radix(mode.trim_start_matches("0o"), 8).map_err(|_| ManifestError::Mode(mode.to_owned()))
}
