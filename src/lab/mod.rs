//! The local lab: the cluster of a blueprint as Docker containers on this machine, so
//! deploy and validate have real sshd, systemd, Slurm and FRR to talk to.
//!
//! Stage: outside the pipeline (it makes targets for it). Input: the [`Model`](crate::model::Model)
//! and the inventory. Output: containers and networks, labelled `toolkit.lab=<cluster>`,
//! and an SSH key and known_hosts for them. Nothing of toolkit's configuration goes in:
//! each container is the OS, the packages, sshd with the lab's key, and networks.
//!
//! - [`layout`] (pure): which containers and networks, which addresses, which `ethN`.
//! - [`image`]: the base image, built with debootstrap and `docker import`, cached by recipe hash.
//! - [`docker`]: the `docker` command line, one argv per call, typed answers.
//! - [`keys`]: the lab's SSH client key and known_hosts.
//! - [`cluster`]: `up`, `down`, `status`, `exec`.

pub mod cluster;
pub mod docker;
pub mod image;
pub mod keys;
pub mod layout;

use std::path::PathBuf;

use thiserror::Error;

pub use cluster::{Paths, down, exec, status, up};
pub use docker::{Docker, DockerError};
pub use layout::{LABEL, Layout};

/// Why the lab could not be built, started or inspected.
#[derive(Debug, Error)]
pub enum LabError {
    /// Docker failed.
    #[error(transparent)]
    Docker(#[from] DockerError),
    /// The blueprint cannot be laid out as containers.
    #[error("{0}")]
    Layout(String),
    /// A program the lab needs is missing.
    #[error("`{program}` is not installed: {hint}")]
    MissingTool {
        /// The program.
        program: &'static str,
        /// How to get it.
        hint: &'static str,
    },
    /// A program the lab runs failed.
    #[error("`{program}` failed: {message}")]
    Tool {
        /// The program.
        program: String,
        /// Its last words.
        message: String,
    },
    /// A file or directory could not be used.
    #[error("cannot use `{path}`")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Something Docker has does not belong to this lab.
    #[error("{0}")]
    Conflict(String),
    /// A container did not come up in time.
    #[error("{0}")]
    Timeout(String),
}

impl LabError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
