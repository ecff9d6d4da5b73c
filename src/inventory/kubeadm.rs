//! The pin a joining node checks the cluster CA against: `sha256:<hex>` of the CA
//! certificate's DER SubjectPublicKeyInfo, as kubeadm's `caCertHashes` wants it
//! (kubeadm's `pubkeypin.Hash`; the same as `openssl x509 -pubkey | openssl pkey
//! -pubin -outform der | sha256sum`).
//!
//! Also the bootstrap token's format, which lint and render both check.
//!
//! Stage: inventory (read by lint and render). Input: the CA certificate's PEM text,
//! the token. Output: the pin, or why the text is not a certificate. Only the few DER
//! structures on the way to the key are read; nothing is verified (the inventory's CA
//! is trusted as given).

use sha2::{Digest, Sha256};
use thiserror::Error;

/// Why a CA certificate could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CaError {
    /// No `BEGIN CERTIFICATE` block.
    #[error("no `-----BEGIN CERTIFICATE-----` block")]
    NoPem,
    /// The block is not base64.
    #[error("the certificate block is not base64")]
    Base64,
    /// The DER does not have a certificate's shape.
    #[error("not an X.509 certificate: {0}")]
    Der(&'static str),
}

/// Whether `token` has the bootstrap token format `[a-z0-9]{6}.[a-z0-9]{16}` (what
/// `kubeadm token generate` prints and the API server accepts).
#[must_use]
pub fn is_bootstrap_token(token: &str) -> bool {
    let valid = |part: &str, length: usize| {
        part.len() == length && part.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit())
    };
    token.split_once('.').is_some_and(|(id, secret)| valid(id, 6) && valid(secret, 16))
}

/// `sha256:<hex>` of the SubjectPublicKeyInfo of the first certificate in `pem`.
///
/// # Errors
/// [`CaError`] when `pem` holds no readable certificate.
pub fn ca_cert_hash(pem: &str) -> Result<String, CaError> {
    let der = first_certificate(pem)?;
    let spki = subject_public_key_info(&der)?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(spki))))
}

fn first_certificate(pem: &str) -> Result<Vec<u8>, CaError> {
    let (_, rest) = pem.split_once("-----BEGIN CERTIFICATE-----").ok_or(CaError::NoPem)?;
    let (body, _) = rest.split_once("-----END CERTIFICATE-----").ok_or(CaError::NoPem)?;
    let base64: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    data_encoding::BASE64.decode(base64.as_bytes()).map_err(|_| CaError::Base64)
}

/// One DER element: its tag, its whole encoding, and its contents.
struct Element<'a> {
    tag: u8,
    whole: &'a [u8],
    contents: &'a [u8],
}

/// The element at the start of `bytes`, and what follows it.
fn element(bytes: &[u8]) -> Result<(Element<'_>, &[u8]), CaError> {
    let (&tag, rest) = bytes.split_first().ok_or(CaError::Der("truncated"))?;
    let (&first, mut rest) = rest.split_first().ok_or(CaError::Der("truncated length"))?;
    let length = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return Err(CaError::Der("bad length"));
        }
        let (digits, after) = rest.split_at(count);
        rest = after;
        digits.iter().fold(0_usize, |length, &digit| (length << 8) | usize::from(digit))
    };
    if rest.len() < length {
        return Err(CaError::Der("truncated contents"));
    }
    let header = bytes.len() - rest.len();
    let (contents, after) = rest.split_at(length);
    Ok((Element { tag, whole: &bytes[..header + length], contents }, after))
}

const SEQUENCE: u8 = 0x30;
/// `[0] EXPLICIT Version` of a v3 certificate.
const VERSION: u8 = 0xa0;

/// RFC 5280 §4.1: Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version
/// OPTIONAL, serialNumber, signature, issuer, validity, subject,
/// subjectPublicKeyInfo, … }, … }.
fn subject_public_key_info(der: &[u8]) -> Result<&[u8], CaError> {
    let (certificate, _) = element(der)?;
    let (tbs, _) = element(certificate.contents)?;
    if certificate.tag != SEQUENCE || tbs.tag != SEQUENCE {
        return Err(CaError::Der("not a SEQUENCE"));
    }
    let mut rest = tbs.contents;
    let (first, after) = element(rest)?;
    if first.tag == VERSION {
        rest = after;
    }
    // serialNumber, signature, issuer, validity, subject
    for _ in 0..5 {
        rest = element(rest)?.1;
    }
    let (spki, _) = element(rest)?;
    if spki.tag != SEQUENCE {
        return Err(CaError::Der("subjectPublicKeyInfo is not a SEQUENCE"));
    }
    Ok(spki.whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_tokens_follow_kubeadms_format() {
        assert!(is_bootstrap_token("abcdef.0123456789abcdef"));
        for wrong in [
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcdef0",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcde_",
        ] {
            assert!(!is_bootstrap_token(wrong), "{wrong}");
        }
    }

    #[test]
    fn what_is_not_a_certificate_says_so() {
        assert_eq!(ca_cert_hash("hello"), Err(CaError::NoPem));
        assert_eq!(ca_cert_hash("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"), Err(CaError::Base64));
        assert_eq!(
            ca_cert_hash("-----BEGIN CERTIFICATE-----\nMAM=\n-----END CERTIFICATE-----\n"),
            Err(CaError::Der("truncated contents"))
        );
    }
}
