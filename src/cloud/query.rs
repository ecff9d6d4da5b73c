//! The AWS Query protocol: `Action=…&Version=…&…` as a signed form `POST`, XML back.
//!
//! Stage: apply (cloud). Input: an action and its parameters. Output: the response XML,
//! or a [`CloudError`] carrying AWS's error code and message. EC2 and IAM both speak it;
//! [`Ec2`](super::Ec2) is built on it and tests use it for IAM.

use std::time::{Duration, SystemTime};

use reqwest::Url;
use serde::Deserialize;

use super::CloudError;
use super::sigv4::{AwsCredentials, SigningScope, sign_headers};
use crate::http::{self, Attempts, RetryPolicy};

/// A signed client for one Query-protocol service at one endpoint.
#[derive(Debug, Clone)]
pub struct QueryClient {
    http: reqwest::Client,
    endpoint: Url,
    host: String,
    region: String,
    service: String,
    version: String,
    credentials: AwsCredentials,
    retry: RetryPolicy,
}

/// Error codes that mean "try again later".
const RETRYABLE_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "ServiceUnavailable",
    "InternalError",
    "Unavailable",
];

impl QueryClient {
    /// A client for `service` (signing name, e.g. `ec2`) API `version` at `endpoint`.
    ///
    /// # Errors
    /// A bad endpoint, or the HTTP client cannot be built.
    pub fn new(
        endpoint: &str,
        region: &str,
        service: &str,
        version: &str,
        credentials: AwsCredentials,
    ) -> Result<Self, CloudError> {
        let invalid = || CloudError::InvalidEndpoint { endpoint: endpoint.to_owned() };
        let url = Url::parse(endpoint).map_err(|_| invalid())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid());
        }
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => return Err(invalid()),
        };
        let http = http::client_builder(Duration::from_mins(1)).build().map_err(CloudError::Client)?;
        Ok(Self {
            http,
            endpoint: url,
            host,
            region: region.to_owned(),
            service: service.to_owned(),
            version: version.to_owned(),
            credentials,
            retry: RetryPolicy::default(),
        })
    }

    /// Replaces the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The region requests are signed for.
    #[must_use]
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Calls `action` with `params` and returns the response XML. Throttling, 5xx and
    /// unanswered requests are retried with exponential backoff; callers make their
    /// mutating calls idempotent (client tokens) so that a retry cannot act twice.
    ///
    /// # Errors
    /// [`CloudError::Api`] with AWS's code and message, or a transport failure.
    pub async fn call(&self, action: &str, params: &[(String, String)]) -> Result<String, CloudError> {
        let mut pairs = vec![("Action".to_owned(), action.to_owned()), ("Version".to_owned(), self.version.clone())];
        pairs.extend(params.iter().cloned());
        let body = form_encode(&pairs);
        let url = self.endpoint.as_str();
        let mut attempts = Attempts::new(self.retry);
        loop {
            let attempt = attempts.start();
            let last = attempts.is_last();
            let content_type = "application/x-www-form-urlencoded; charset=utf-8";
            let scope = SigningScope { region: &self.region, service: &self.service, time: SystemTime::now() };
            let signed = sign_headers(
                "POST",
                url,
                &[("host", &self.host), ("content-type", content_type)],
                body.as_bytes(),
                &self.credentials,
                scope,
            )?;
            let mut request = self.http.post(url).header("content-type", content_type).body(body.clone());
            for (name, value) in signed {
                request = request.header(name, value);
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(error) if !last && (error.is_connect() || error.is_timeout()) => {
                    tracing::debug!(service = %self.service, action, attempt, "no answer; retrying");
                    attempts.pause(None).await;
                    continue;
                }
                Err(source) => {
                    return Err(CloudError::Transport {
                        service: self.service.clone(),
                        action: action.to_owned(),
                        url: url.to_owned(),
                        attempts: attempt,
                        source,
                    });
                }
            };
            let status = response.status();
            let text = response.text().await.map_err(|source| CloudError::Transport {
                service: self.service.clone(),
                action: action.to_owned(),
                url: url.to_owned(),
                attempts: attempt,
                source,
            })?;
            tracing::debug!(service = %self.service, action, status = status.as_u16(), "aws");
            if status.is_success() {
                return Ok(text);
            }
            let (code, message) = parse_error(&text)
                .unwrap_or_else(|| (format!("HTTP{}", status.as_u16()), text.chars().take(200).collect()));
            let retryable =
                matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504) || RETRYABLE_CODES.contains(&code.as_str());
            if retryable && !last {
                tracing::debug!(service = %self.service, action, %code, attempt, "retrying");
                attempts.pause(None).await;
                continue;
            }
            return Err(CloudError::Api {
                service: self.service.clone(),
                action: action.to_owned(),
                status: status.as_u16(),
                code,
                message,
            });
        }
    }

    /// Decodes a response XML into `T`.
    ///
    /// # Errors
    /// [`CloudError::Decode`] naming the action.
    pub fn decode<T: for<'de> Deserialize<'de>>(&self, action: &str, xml: &str) -> Result<T, CloudError> {
        quick_xml::de::from_str(xml).map_err(|error| CloudError::Decode {
            service: self.service.clone(),
            action: action.to_owned(),
            reason: error.to_string(),
        })
    }
}

/// `application/x-www-form-urlencoded`: unreserved characters as they are, space as
/// `+`, everything else `%XX` -- byte for byte what botocore sends, so a service that
/// re-encodes the parsed form to check the signature (moto) gets the same body.
pub(crate) fn form_encode(pairs: &[(String, String)]) -> String {
    fn encode(text: &str, out: &mut String) {
        for byte in text.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
                out.push(char::from(byte));
            } else if byte == b' ' {
                out.push('+');
            } else {
                out.push('%');
                out.push_str(&hex::encode_upper([byte]));
            }
        }
    }
    let mut out = String::new();
    for (index, (name, value)) in pairs.iter().enumerate() {
        if index > 0 {
            out.push('&');
        }
        encode(name, &mut out);
        out.push('=');
        encode(value, &mut out);
    }
    out
}

#[derive(Debug, Deserialize)]
struct ErrorDocument {
    #[serde(rename = "Errors")]
    errors: Option<ErrorList>,
    #[serde(rename = "Error")]
    error: Option<ErrorItem>,
}

#[derive(Debug, Deserialize)]
struct ErrorList {
    #[serde(rename = "Error", default)]
    items: Vec<ErrorItem>,
}

#[derive(Debug, Deserialize)]
struct ErrorItem {
    #[serde(rename = "Code")]
    code: String,
    #[serde(rename = "Message", default)]
    message: String,
}

/// Code and message of an EC2 (`<Response><Errors><Error>`) or IAM/STS
/// (`<ErrorResponse><Error>`) error document.
fn parse_error(xml: &str) -> Option<(String, String)> {
    let document: ErrorDocument = quick_xml::de::from_str(xml).ok()?;
    let item = document.error.or_else(|| document.errors.and_then(|list| list.items.into_iter().next()))?;
    Some((item.code, item.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_forms_like_aws() {
        let pairs = vec![
            ("Action".to_owned(), "RunInstances".to_owned()),
            ("TagSpecification.1.Tag.1.Key".to_owned(), "toolkit:cluster".to_owned()),
            ("Value".to_owned(), "a b/c~d".to_owned()),
        ];
        assert_eq!(
            form_encode(&pairs),
            "Action=RunInstances&TagSpecification.1.Tag.1.Key=toolkit%3Acluster&Value=a+b%2Fc~d"
        );
    }

    #[test]
    fn parses_ec2_and_iam_errors() {
        let ec2 = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code><Message>The instance ID 'i-1' does not exist</Message></Error></Errors><RequestID>r</RequestID></Response>"#;
        assert_eq!(
            parse_error(ec2),
            Some(("InvalidInstanceID.NotFound".to_owned(), "The instance ID 'i-1' does not exist".to_owned()))
        );
        let iam = r#"<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error><Type>Sender</Type><Code>NoSuchEntity</Code><Message>no user</Message></Error><RequestId>x</RequestId></ErrorResponse>"#;
        assert_eq!(parse_error(iam), Some(("NoSuchEntity".to_owned(), "no user".to_owned())));
        assert_eq!(parse_error("not xml at all"), None);
    }
}
