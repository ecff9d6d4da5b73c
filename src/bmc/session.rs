//! Credentials and Redfish sessions.
//!
//! Stage: observe/apply (BMC). Input: the user and password resolved from the inventory.
//! Output: how each request authenticates: a session token (`POST` to the service's
//! `Sessions` collection, `X-Auth-Token` on every request, `DELETE` of the session when
//! done) or, where the BMC has no session service, HTTP basic auth.
//!
//! Secrets live in [`Sensitive`], whose `Debug` and `Display` print `***`, and go on
//! the wire only in headers marked sensitive.

use reqwest::header::HeaderValue;

pub use crate::http::Sensitive;

/// A BMC user and password.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// User name (shown in errors).
    pub username: String,
    /// Password (never shown).
    pub password: Sensitive,
}

/// How requests authenticate.
#[derive(Debug)]
pub(crate) enum Auth {
    /// A Redfish session: the token and the session's URL (deleted on close).
    Session {
        /// `X-Auth-Token` value, marked sensitive.
        token: HeaderValue,
        /// Absolute URL of the session resource, when the BMC gave one.
        location: Option<String>,
    },
    /// HTTP basic auth on every request.
    Basic,
}

impl Auth {
    /// Adds the authentication to a request.
    pub(crate) fn apply(&self, request: reqwest::RequestBuilder, credentials: &Credentials) -> reqwest::RequestBuilder {
        match self {
            Self::Session { token, .. } => request.header("X-Auth-Token", token.clone()),
            Self::Basic => request.basic_auth(&credentials.username, Some(credentials.password.expose())),
        }
    }
}

/// The session token as a header value that `Debug` and HTTP/2 tables do not reveal.
pub(crate) fn token_header(token: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(token).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let credentials = Credentials { username: "admin".into(), password: Sensitive::new("hunter2") };
        let debug = format!("{credentials:?}");
        assert!(debug.contains("admin"), "{debug}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert_eq!(credentials.password.to_string(), "***");
        let token = token_header("tok3n-value").expect("valid header");
        let auth = Auth::Session { token, location: None };
        assert!(!format!("{auth:?}").contains("tok3n"), "{auth:?}");
    }
}
