//! Why a provisioning run stops as a whole, and the lock that keeps two runs (or a
//! run and a provisioning service) from driving the same machines at once.
//!
//! Stage: inspect + provision. Kept apart from [`super::flow`] so that the service,
//! which the flow starts, reports the same errors without importing the flow back.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{agent, dhcp, host_keys, image};
use crate::transport::TransportError;

/// Why a provisioning run could not run at all (a node's own failure is in its
/// [`Outcome`] instead).
#[derive(Debug, Error)]
pub enum ProvisionError {
    /// The state file could not be read or written.
    #[error(transparent)]
    State(#[from] crate::plan::state::StateError),
    /// The image could not be built.
    #[error(transparent)]
    Image(#[from] image::ImageError),
    /// The agent could not be built.
    #[error(transparent)]
    Agent(#[from] agent::AgentError),
    /// DHCP could not start.
    #[error(transparent)]
    Dhcp(#[from] dhcp::DhcpError),
    /// The HTTP server could not start.
    #[error("provisioning HTTP server on {address}: {source}")]
    Server {
        /// Where it should have listened.
        address: SocketAddr,
        /// Why it did not.
        #[source]
        source: std::io::Error,
    },
    /// A node's host key or known_hosts could not be written.
    #[error(transparent)]
    HostKey(#[from] host_keys::HostKeyError),
    /// known_hosts could not be updated.
    #[error(transparent)]
    KnownHosts(#[from] TransportError),
    /// The inventory lacks what provisioning needs.
    #[error("{0}")]
    Inventory(String),
    /// Another run drives the same nodes from this machine.
    #[error(
        "another toolkit run is provisioning from this machine ({holder}); wait for it (its lock is `{}`)",
        path.display()
    )]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// What the lock file says of its holder.
        holder: String,
    },
    /// The provisioning service on another host could not run.
    #[error("provisioning service on {host}: {message}")]
    Service {
        /// The host.
        host: String,
        /// What went wrong, in its words.
        message: String,
    },
    /// A file to serve could not be read.
    #[error("`{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The lock file could not be made.
    #[error("provisioning lock `{}`: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Held while a run drives BMCs and serves network boot: two runs would power the
/// same machines off under each other and fight over the DHCP port. An OS lock on a
/// file, so a killed run releases it with its process.
pub struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    /// Takes `cache/run.lock`, or says who holds it.
    ///
    /// # Errors
    /// [`ProvisionError::Busy`] when another process holds it.
    pub fn take(cache: &Path) -> Result<Self, ProvisionError> {
        let path = cache.join("run.lock");
        let lock_error = |source| ProvisionError::Lock { path: path.clone(), source };
        std::fs::create_dir_all(cache).map_err(lock_error)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(lock_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default().trim().to_owned();
                return Err(ProvisionError::Busy { path, holder });
            }
            Err(std::fs::TryLockError::Error(source)) => return Err(lock_error(source)),
        }
        let holder = format!("pid {} since {}", std::process::id(), now());
        let _ = file.set_len(0).and_then(|()| std::io::Write::write_all(&mut file, holder.as_bytes()));
        Ok(Self { _file: file })
    }
}

/// Now, to the second, as the state file records times.
pub(super) fn now() -> String {
    jiff::Timestamp::now().round(jiff::Unit::Second).map_or_else(|_| String::new(), |time| time.to_string())
}
