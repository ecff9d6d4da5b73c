//! Cloud GPU clusters: instances, placement groups and rail interfaces on AWS EC2.
//!
//! Stage: apply (cloud targets); its output feeds load. Input: a [`ClusterSpec`] (nodes,
//! image, instance type, one subnet per rail) and credentials. Output: running
//! [`Instance`]s tagged with their cluster and node, and from them an
//! [`Inventory`](crate::inventory::Inventory) ([`instance_hosts`]) that the rest
//! of the pipeline deploys to.
//!
//! - [`sigv4`]: request signing (AWS Signature Version 4 through `aws-sigv4`).
//! - [`query`]: the AWS Query protocol (form-encoded `POST`, XML answers, typed errors, retries).
//! - [`ec2`]: placement groups, `RunInstances` with one interface per rail, describe, terminate.
//! - [`observe`]: the cluster's instances and placement groups as the plan compares them.

pub mod ec2;
pub mod observe;
pub mod query;
pub mod sigv4;

use thiserror::Error;

pub use ec2::{CLUSTER_TAG, ClusterSpec, Ec2, Filter, Instance, NODE_TAG, NodeSpec, RailInterface, instance_hosts};
pub use query::QueryClient;
pub use sigv4::{AwsCredentials, SignError};

/// Why a cloud API call failed.
#[derive(Debug, Error)]
pub enum CloudError {
    /// The endpoint is not an http(s) URL.
    #[error("cloud endpoint `{endpoint}` is not an http(s) URL")]
    InvalidEndpoint {
        /// As given.
        endpoint: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client")]
    Client(#[source] reqwest::Error),
    /// The request could not be signed.
    #[error(transparent)]
    Sign(#[from] SignError),
    /// No answer (connection refused, TLS, timeout) after the retries.
    #[error("{service} `{action}` at `{url}` failed after {attempts} attempt(s)")]
    Transport {
        /// Service (`ec2`).
        service: String,
        /// API action.
        action: String,
        /// Endpoint URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        #[source]
        source: reqwest::Error,
    },
    /// The service answered with an error.
    #[error("{service} `{action}` failed: `{code}`: {message} (HTTP {status})")]
    Api {
        /// Service (`ec2`).
        service: String,
        /// API action.
        action: String,
        /// HTTP status.
        status: u16,
        /// AWS error code (`InvalidParameterValue`, `AuthFailure`…).
        code: String,
        /// AWS's message.
        message: String,
    },
    /// A wait ended before the cloud reached the state.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: std::time::Duration,
    },
    /// The answer is not the XML expected.
    #[error("{service} `{action}`: unexpected answer: {reason}")]
    Decode {
        /// Service.
        service: String,
        /// API action.
        action: String,
        /// What was wrong.
        reason: String,
    },
}

impl CloudError {
    /// The AWS error code, when the service answered with one.
    #[must_use]
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}
