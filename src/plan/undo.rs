//! What undoes an applied resource: recorded in the state file when the resource is
//! applied, read back when it leaves the blueprint.
//!
//! Stage: plan (data). Input: a resource's [`Desired`] state, or an old record's id
//! and kind. Output: an [`Undo`]. [`super::state`] stores it and [`super::removal`]
//! plans with it; neither needs the other for it.

use serde::{Deserialize, Serialize};

use crate::resource::Desired;

/// What undoing an applied resource takes. Recorded when it is applied, because
/// once it leaves the blueprint nothing else knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Undo {
    /// Delete the file (a unit file also reloads systemd).
    DeleteFile {
        /// Absolute path.
        path: String,
    },
    /// Delete the directory when it is empty; one with files toolkit did not write
    /// is left in place.
    DeleteDirectory {
        /// Absolute path.
        path: String,
    },
    /// Stop and disable the unit; its unit file goes with its own file resource,
    /// when toolkit wrote it.
    StopService {
        /// Unit name without `.service`.
        unit: String,
    },
    /// Run the command's declared undo; an empty `argv` has nothing to undo.
    Run {
        /// Program and arguments, each quoted when sent to a shell.
        argv: Vec<String>,
    },
    /// Packages stay installed: other software may need them.
    KeepPackage {
        /// Package name.
        name: String,
    },
    /// An object behind an API (power, BIOS, instance): the API stage and
    /// `toolkit destroy` deal with it, not the SSH stage.
    Api,
    /// A Kubernetes object, undone by the API stage: deleted at its REST `path`, or
    /// (a namespace, which holds its tenant's workloads; a node, which belongs to its
    /// kubelet) left in place.
    KubeObject {
        /// REST path of the object.
        path: String,
        /// Delete it (else it is left in place).
        delete: bool,
    },
}

impl Undo {
    /// The undo of `desired`; `None` for a command that declares none.
    #[must_use]
    pub fn of(desired: &Desired) -> Option<Self> {
        Some(match desired {
            Desired::File { path, .. } => Self::DeleteFile { path: path.clone() },
            Desired::Directory { path, .. } => Self::DeleteDirectory { path: path.clone() },
            Desired::Service { name, .. } => Self::StopService { unit: name.clone() },
            Desired::Package { name } => Self::KeepPackage { name: name.clone() },
            Desired::Command { undo, .. } => Self::Run { argv: undo.clone()? },
            Desired::Api(item) => match item.kubernetes() {
                Some(object) => {
                    Self::KubeObject { path: object.path(), delete: !object.shared && object.kind != "Namespace" }
                }
                None => Self::Api,
            },
        })
    }

    /// The undo a record keeps for `desired`, whose id is `id`: none when it is the
    /// one the id names ([`Self::derived`]), which most are.
    #[must_use]
    pub fn kept(desired: &Desired, id: &str) -> Option<Self> {
        let named = match desired {
            Desired::File { path, .. } | Desired::Directory { path, .. } => Some(path.as_str()),
            Desired::Service { name, .. } | Desired::Package { name } => Some(name.as_str()),
            Desired::Command { .. } | Desired::Api(_) => None,
        };
        if named.is_some() && named == id.splitn(3, ':').nth(2) {
            return None;
        }
        Self::of(desired).filter(|undo| !undo.is_derived(id, desired.kind()))
    }

    /// Whether this is what [`Self::derived`] makes of `id` and `kind`.
    #[must_use]
    pub fn is_derived(&self, id: &str, kind: &str) -> bool {
        let Some(name) = id.splitn(3, ':').nth(2) else { return false };
        match (self, kind) {
            (Self::DeleteFile { path }, "file") | (Self::DeleteDirectory { path }, "dir") => path == name,
            (Self::StopService { unit }, "service") => unit == name,
            (Self::KeepPackage { name: package }, "package") => package == name,
            (Self::Api, kind) => !matches!(kind, "file" | "dir" | "service" | "package" | "command"),
            _ => false,
        }
    }

    /// The undo of a record from a state file written before undos were kept:
    /// files, directories, units and packages are named by their id
    /// (`<target>:<kind>:<name>`); a command's undo cannot be known.
    #[must_use]
    pub fn derived(id: &str, kind: &str) -> Option<Self> {
        let name = id.splitn(3, ':').nth(2)?.to_owned();
        match kind {
            "file" => Some(Self::DeleteFile { path: name }),
            "dir" => Some(Self::DeleteDirectory { path: name }),
            "service" => Some(Self::StopService { unit: name }),
            "package" => Some(Self::KeepPackage { name }),
            "command" => None,
            _ => Some(Self::Api),
        }
    }

    /// Whether the API stage undoes it (never the SSH stage).
    #[must_use]
    pub fn is_api(&self) -> bool {
        matches!(self, Self::Api | Self::KubeObject { .. })
    }

    /// Whether applying the removal runs something on the host.
    #[must_use]
    pub fn acts(&self) -> bool {
        match self {
            Self::DeleteFile { .. } | Self::DeleteDirectory { .. } | Self::StopService { .. } => true,
            Self::Run { argv } => !argv.is_empty(),
            Self::KeepPackage { .. } | Self::Api | Self::KubeObject { .. } => false,
        }
    }

    /// What the plan says will happen (`None`: a command without an undo).
    #[must_use]
    pub fn reason(undo: Option<&Self>) -> &'static str {
        match undo {
            None => "left in place: no undo",
            Some(Self::DeleteFile { .. } | Self::KubeObject { delete: true, .. }) => {
                "no longer in the blueprint: delete"
            }
            Some(Self::DeleteDirectory { .. }) => "no longer in the blueprint: delete if empty",
            Some(Self::StopService { .. }) => "no longer in the blueprint: stop and disable",
            Some(Self::Run { argv }) if argv.is_empty() => "no longer in the blueprint: nothing to undo",
            Some(Self::Run { .. }) => "no longer in the blueprint: run its undo",
            Some(Self::KeepPackage { .. }) => "left in place: packages are not pruned",
            Some(Self::Api) => "no longer in the blueprint",
            Some(Self::KubeObject { delete: false, .. }) => {
                "left in place: a namespace holds its tenant's workloads, a node belongs to its kubelet"
            }
        }
    }
}
