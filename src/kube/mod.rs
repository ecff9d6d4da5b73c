//! Kubernetes API servers over HTTPS: kubeconfig auth and server-side apply.
//!
//! Stage: observe/apply (API targets). Input: the inventory's kubeconfig and context
//! ([`Connection::load`]) and the [`KubeObject`](crate::resource::kube::KubeObject)s
//! render made. Output: live objects and the outcome of applies and deletes. A leaf
//! like `bmc` and `cloud`: it knows HTTP, not plans (`deploy::kube` plans with it).
//!
//! - [`config`]: kubeconfig files: context, cluster, user (certificate, token, exec).
//! - [`exec`]: exec credential plugins (`client.authentication.k8s.io`).
//! - [`client`]: [`KubeClient`]: GET, list by toolkit's label, apply, delete.
//! - [`workload`]: reads by path, label-selected lists and pod logs (validator Jobs).
//! - [`error`]: [`KubeError`], naming the object and what to do, never a secret.

pub mod client;
pub mod config;
pub mod error;
pub mod exec;
pub mod workload;

pub use client::{Applied, ApplyOptions, Deleted, KubeClient};
pub use config::{Connection, Credentials};
pub use error::{FieldCause, FieldConflict, KubeError};
