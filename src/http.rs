//! What the HTTP leaves (`bmc`, `cloud`, `kube`) share, and nothing else: the
//! secret wrapper, the retry policy and its backoff, rustls' crypto provider and the
//! client builder with its TLS trust. Each leaf imports this and never another leaf.
//!
//! Stage: core of the network leaves. Input: settings. Output: a configured
//! `reqwest::ClientBuilder`, [`Sensitive`] values, [`Attempts`] of one request.

use std::fmt;
use std::time::Duration;

/// A secret string (password, token, key): printed as `***`, readable only on purpose.
#[derive(Clone, PartialEq, Eq)]
pub struct Sensitive(String);

impl Sensitive {
    /// Wraps a secret.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that sends it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Sensitive {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("***")
    }
}

impl fmt::Display for Sensitive {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("***")
    }
}

/// How often and how patiently a request is retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (at least 1).
    pub attempts: u32,
    /// Wait before the second attempt; doubled each time.
    pub initial_backoff: Duration,
    /// Longest wait between attempts (also caps `Retry-After`).
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { attempts: 4, initial_backoff: Duration::from_millis(250), max_backoff: Duration::from_secs(4) }
    }
}

/// The attempts of one request under a [`RetryPolicy`]: exponential backoff, capped,
/// with the server's `Retry-After` taken when it names a wait.
#[derive(Debug, Clone)]
pub struct Attempts {
    policy: RetryPolicy,
    made: u32,
    backoff: Duration,
}

impl Attempts {
    /// No attempt made yet.
    #[must_use]
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy, made: 0, backoff: policy.initial_backoff }
    }

    /// Counts one more attempt and returns its number (from 1).
    pub fn start(&mut self) -> u32 {
        self.made += 1;
        self.made
    }

    /// Whether the attempt under way is the last the policy allows.
    #[must_use]
    pub fn is_last(&self) -> bool {
        self.made >= self.policy.attempts.max(1)
    }

    /// How long to wait before the next attempt: `retry_after` when the server named
    /// one, else the backoff; never more than the policy's longest wait.
    #[must_use]
    pub fn wait(&self, retry_after: Option<Duration>) -> Duration {
        retry_after.unwrap_or(self.backoff).min(self.policy.max_backoff)
    }

    /// Sleeps [`Self::wait`] and doubles the backoff.
    pub async fn pause(&mut self, retry_after: Option<Duration>) {
        tokio::time::sleep(self.wait(retry_after)).await;
        self.backoff = (self.backoff * 2).min(self.policy.max_backoff);
    }
}

/// Installs ring as rustls' crypto provider once per process (reqwest is built
/// without a provider of its own so that no C toolchain beyond `cc` is needed);
/// another one already installed is kept.
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // A concurrent install may win the race; either provider is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A client builder with toolkit's user agent, `timeout` per request and at most
/// 10 s to connect, the crypto provider installed.
pub fn client_builder(timeout: Duration) -> reqwest::ClientBuilder {
    ensure_crypto_provider();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .user_agent(concat!("toolkit/", env!("CARGO_PKG_VERSION")))
}

/// Trusts only the certificates of the PEM bundle `pem` (an inventory's or a
/// kubeconfig's CA) instead of the system roots.
///
/// # Errors
/// Why the bundle is unusable: not PEM, or no certificate in it.
pub fn trust_only(builder: reqwest::ClientBuilder, pem: &[u8]) -> Result<reqwest::ClientBuilder, String> {
    let certificates = reqwest::Certificate::from_pem_bundle(pem).map_err(|error| error.to_string())?;
    if certificates.is_empty() {
        return Err("no PEM certificate in it".to_owned());
    }
    Ok(builder.tls_certs_only(certificates))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_retry_after_is_capped() {
        let policy = RetryPolicy {
            attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(3),
        };
        let mut attempts = Attempts::new(policy);
        assert_eq!(attempts.start(), 1);
        assert!(!attempts.is_last());
        assert_eq!(attempts.wait(None), Duration::from_millis(1));
        assert_eq!(attempts.wait(Some(Duration::from_mins(1))), Duration::from_millis(3));
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime").block_on(async {
            attempts.pause(None).await;
            assert_eq!(attempts.wait(None), Duration::from_millis(2));
            attempts.pause(None).await;
            assert_eq!(attempts.wait(None), Duration::from_millis(3));
        });
        assert_eq!(attempts.start(), 2);
        assert_eq!(attempts.start(), 3);
        assert!(attempts.is_last());
        assert_eq!(format!("{:?}", Sensitive::new("hunter2")), "***");
        assert_eq!(Sensitive::new("hunter2").to_string(), "***");
    }
}
