//! Reads a validator run needs beyond apply: any object by its REST path, the
//! objects a label selector picks, and a container's log.
//!
//! Stage: validate (Kubernetes). Input: REST paths of Jobs and pods. Output: their
//! JSON as the server has it, and logs as text. Errors are the client's
//! [`KubeError`]s, mapped from the same `Status` bodies as apply's.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::client::{KubeClient, decode};
use super::error::KubeError;

impl KubeClient {
    /// The object at `path`; `None` when it does not exist.
    ///
    /// # Errors
    /// Transport, auth, an unexpected status or a body that is not JSON.
    pub async fn get_path(&self, path: &str) -> Result<Option<Value>, KubeError> {
        let (status, body) = self.send(Method::GET, path, None).await?;
        match status {
            StatusCode::OK => decode(&Method::GET, &self.url(path), &body).map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(self.status_error(&Method::GET, path, None, status, &body)),
        }
    }

    /// The items of the collection at `path` that `selector` (`key=value,…`) picks.
    ///
    /// # Errors
    /// Transport, auth, an unexpected status or an answer that is not a list.
    pub async fn list_selected(&self, path: &str, selector: &str) -> Result<Vec<Value>, KubeError> {
        let full = format!("{path}?labelSelector={}", escape(selector));
        let (status, body) = self.send(Method::GET, &full, None).await?;
        if status != StatusCode::OK {
            return Err(self.status_error(&Method::GET, &full, None, status, &body));
        }
        let list = decode(&Method::GET, &self.url(&full), &body)?;
        match list.get("items").and_then(Value::as_array) {
            Some(items) => Ok(items.clone()),
            None => {
                Err(KubeError::Decode { method: "GET".into(), url: self.url(&full), reason: "no `items` list".into() })
            }
        }
    }

    /// The log of `container` in pod `namespace/pod` (stdout and stderr interleaved,
    /// as the kubelet keeps them).
    ///
    /// # Errors
    /// Transport, auth, or the server's refusal (a pod gone, a container not started).
    pub async fn pod_log(&self, namespace: &str, pod: &str, container: &str) -> Result<Vec<u8>, KubeError> {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/log?container={}", escape(container));
        let (status, body) = self.send(Method::GET, &path, None).await?;
        if status == StatusCode::OK {
            Ok(body)
        } else {
            Err(self.status_error(&Method::GET, &path, None, status, &body))
        }
    }
}

/// A query value with the characters label selectors use percent-encoded.
fn escape(value: &str) -> String {
    value.replace('%', "%25").replace('/', "%2F").replace('=', "%3D").replace(',', "%2C").replace(' ', "%20")
}
