//! AWS Signature Version 4 for toolkit's requests, through the `aws-sigv4` crate.
//!
//! Stage: observe/apply (cloud). Input: a request's method, URL, headers and body, the
//! credentials, region and service. Output: the headers to add (`Authorization`,
//! `X-Amz-Date`, `X-Amz-Security-Token`). The secret key never leaves this module
//! except into the HMAC.

use std::time::SystemTime;

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

use crate::http::Sensitive;

/// AWS credentials; the secret parts print as `***`.
#[derive(Debug, Clone)]
pub struct AwsCredentials {
    /// Access key id (`AKIA…`), shown in errors.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: Sensitive,
    /// Session token of temporary credentials.
    pub session_token: Option<Sensitive>,
}

impl AwsCredentials {
    /// Long-term credentials.
    #[must_use]
    pub fn new(access_key_id: &str, secret_access_key: &str) -> Self {
        Self {
            access_key_id: access_key_id.to_owned(),
            secret_access_key: Sensitive::new(secret_access_key),
            session_token: None,
        }
    }

    /// From `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`.
    #[must_use]
    pub fn from_env() -> Option<Self> {
        let access = std::env::var("AWS_ACCESS_KEY_ID").ok()?;
        let secret = std::env::var("AWS_SECRET_ACCESS_KEY").ok()?;
        let mut credentials = Self::new(&access, &secret);
        credentials.session_token = std::env::var("AWS_SESSION_TOKEN").ok().map(Sensitive::new);
        Some(credentials)
    }

    fn identity(&self) -> Identity {
        aws_credential_types::Credentials::new(
            &self.access_key_id,
            self.secret_access_key.expose(),
            self.session_token.as_ref().map(|token| token.expose().to_owned()),
            None,
            "toolkit",
        )
        .into()
    }
}

/// Why a request could not be signed (a URL or header the signer cannot read).
#[derive(Debug, thiserror::Error)]
#[error("cannot sign the request: {0}")]
pub struct SignError(String);

/// What to sign.
#[derive(Debug, Clone, Copy)]
pub struct SigningScope<'a> {
    /// Region (`us-east-1`).
    pub region: &'a str,
    /// Service signing name (`ec2`, `iam`).
    pub service: &'a str,
    /// Signing time.
    pub time: SystemTime,
}

/// Signs a request and returns the headers to add to it.
///
/// # Errors
/// [`SignError`] when the URL or a header is not signable.
pub fn sign_headers(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    credentials: &AwsCredentials,
    scope: SigningScope<'_>,
) -> Result<Vec<(String, String)>, SignError> {
    let identity = credentials.identity();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(scope.region)
        .name(scope.service)
        .time(scope.time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|error| SignError(error.to_string()))?
        .into();
    let request = SignableRequest::new(method, url, headers.iter().copied(), SignableBody::Bytes(body))
        .map_err(|error| SignError(error.to_string()))?;
    let (instructions, _signature) = sign(request, &params).map_err(|error| SignError(error.to_string()))?.into_parts();
    Ok(instructions.headers().map(|(name, value)| (name.to_owned(), value.to_owned())).collect())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    /// 2015-08-30T12:36:00Z, the time of AWS's published SigV4 examples.
    fn example_time() -> SystemTime {
        UNIX_EPOCH + Duration::from_mins(24_015_636)
    }

    fn example_credentials() -> AwsCredentials {
        AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    }

    fn authorization(headers: &[(String, String)]) -> &str {
        headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
            .map(|(_, value)| value.as_str())
            .expect("an Authorization header")
    }

    /// `get-vanilla` from AWS's SigV4 test suite.
    #[test]
    fn signs_the_published_get_vanilla_vector() {
        let scope = SigningScope { region: "us-east-1", service: "service", time: example_time() };
        let headers = sign_headers(
            "GET",
            "https://example.amazonaws.com/",
            &[("host", "example.amazonaws.com")],
            b"",
            &example_credentials(),
            scope,
        )
        .expect("signs");
        assert_eq!(
            authorization(&headers),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        assert!(headers.iter().any(|(name, value)| name == "x-amz-date" && value == "20150830T123600Z"));
    }

    /// The IAM `ListUsers` example of AWS's "Create a signed AWS API request" guide.
    #[test]
    fn signs_the_published_iam_list_users_example() {
        let scope = SigningScope { region: "us-east-1", service: "iam", time: example_time() };
        let headers = sign_headers(
            "GET",
            "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08",
            &[("host", "iam.amazonaws.com"), ("content-type", "application/x-www-form-urlencoded; charset=utf-8")],
            b"",
            &example_credentials(),
            scope,
        )
        .expect("signs");
        assert_eq!(
            authorization(&headers),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn secrets_do_not_print() {
        let mut credentials = example_credentials();
        credentials.session_token = Some(Sensitive::new("session-token-value"));
        let debug = format!("{credentials:?}");
        assert!(debug.contains("AKIDEXAMPLE"));
        assert!(!debug.contains("wJalrXUtnFEMI"), "{debug}");
        assert!(!debug.contains("session-token-value"), "{debug}");
    }
}
