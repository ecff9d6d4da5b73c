//! After the SSH stage of a kubeadm cluster: the control plane's admin kubeconfig
//! (`/etc/kubernetes/admin.conf`, written by `kubeadm init`) copied to the path the
//! inventory's `kubernetes.kubeconfig` names, so the API stage can reach the cluster
//! it just made. Never over an existing file: a kubeconfig the user put there wins.
//!
//! Stage: deploy (after apply). Input: the control plane's session, the remote and
//! local paths. Output: whether the file was written. The kubeconfig holds the
//! cluster-admin key: it is written 0600, and neither its content nor the command's
//! output reaches a message.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use thiserror::Error;

use crate::transport::{Executor, TransportError};

/// Why the kubeconfig could not be copied.
#[derive(Debug, Error)]
pub enum FetchError {
    /// The control plane could not be asked.
    #[error("cannot read `{remote}` on `{host}`: {source}")]
    Transport {
        /// The control plane.
        host: String,
        /// The remote path.
        remote: String,
        /// What failed.
        #[source]
        source: TransportError,
    },
    /// `cat` failed there: `kubeadm init` has not run (or failed).
    #[error("`{remote}` is not on `{host}` yet: `kubeadm init` has not run there")]
    Missing {
        /// The control plane.
        host: String,
        /// The remote path.
        remote: String,
    },
    /// The local file could not be written.
    #[error("cannot write `{path}`: {source}")]
    Write {
        /// The local path.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Copies `remote` from `executor`'s host to `local` (mode 0600) unless `local`
/// exists. Returns whether it wrote the file.
///
/// # Errors
/// [`FetchError`]: the host unreachable, the file not there, the local write failed.
pub async fn fetch_admin_kubeconfig<E: Executor>(executor: &E, remote: &str, local: &Path) -> Result<bool, FetchError> {
    if local.exists() {
        return Ok(false);
    }
    let argv = ["cat", "--", remote].map(str::to_owned);
    let output = executor.exec(&argv).await.map_err(|source| FetchError::Transport {
        host: executor.host().to_owned(),
        remote: remote.to_owned(),
        source,
    })?;
    if !output.success() || output.stdout.is_empty() {
        return Err(FetchError::Missing { host: executor.host().to_owned(), remote: remote.to_owned() });
    }
    let write_error = |source| FetchError::Write { path: local.display().to_string(), source };
    if let Some(parent) = local.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(write_error)?;
    }
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(local).map_err(write_error)?;
    file.write_all(&output.stdout).map_err(write_error)?;
    file.sync_all().map_err(write_error)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::transport::{ExitStatus, Output};

    /// Runs each command on this machine: `cat` reads a real file.
    struct Here;

    impl Executor for Here {
        fn host(&self) -> &'static str {
            "ctl01"
        }

        async fn exec(&self, argv: &[String]) -> Result<Output, TransportError> {
            let output = std::process::Command::new(&argv[0]).args(&argv[1..]).output().expect("runs");
            let status = output.status.code().map_or(ExitStatus::Unknown, |code| ExitStatus::Code(code.unsigned_abs()));
            Ok(Output { status, stdout: output.stdout, stderr: output.stderr })
        }

        async fn exec_with_input(&self, argv: &[String], _input: &[u8]) -> Result<Output, TransportError> {
            self.exec(argv).await
        }
    }

    #[test]
    fn copies_once_private_and_says_when_init_has_not_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let remote = dir.path().join("admin.conf");
        let local = dir.path().join("inventories/cluster.kubeconfig");
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let missing = runtime.block_on(fetch_admin_kubeconfig(&Here, remote.to_str().expect("utf8"), &local));
        let error = missing.expect_err("no admin.conf yet").to_string();
        assert!(error.contains("`kubeadm init` has not run"), "{error}");
        assert!(!local.exists());
        std::fs::write(&remote, "apiVersion: v1\nkind: Config\nusers: [{name: kubernetes-admin}]\n").expect("writes");
        let wrote = runtime.block_on(fetch_admin_kubeconfig(&Here, remote.to_str().expect("utf8"), &local));
        assert!(wrote.expect("copies"));
        assert_eq!(std::fs::read(&local).expect("reads"), std::fs::read(&remote).expect("reads"));
        assert_eq!(std::fs::metadata(&local).expect("meta").permissions().mode() & 0o777, 0o600);
        std::fs::write(&remote, "changed").expect("writes");
        let again = runtime.block_on(fetch_admin_kubeconfig(&Here, remote.to_str().expect("utf8"), &local));
        assert!(!again.expect("no error"), "an existing kubeconfig is kept");
        assert_ne!(std::fs::read_to_string(&local).expect("reads"), "changed");
    }
}
