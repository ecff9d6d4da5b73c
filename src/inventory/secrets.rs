//! Resolves secret references (`{env: NAME}`, `{file: PATH}`) to their values.
//!
//! Stage: render (input). Input: [`SecretRef`]s from the inventory. Output: the
//! value, held only in memory. Values are never formatted into errors or logs: an
//! error names the reference, not what it holds.

use std::path::Path;

use thiserror::Error;

use super::SecretRef;

/// A reference that could not be resolved.
#[derive(Debug, Error)]
pub enum SecretError {
    /// The environment variable is not set.
    #[error("secret `{reference}`: environment variable is not set")]
    MissingEnv {
        /// The reference (`env:NAME`).
        reference: String,
    },
    /// The file cannot be read.
    #[error("secret `{reference}`: {source}")]
    File {
        /// The reference (`file:PATH`).
        reference: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
}

/// Resolves `reference`; relative file paths are taken from `base` (the
/// inventory's directory's parent, i.e. where toolkit runs).
///
/// # Errors
/// [`SecretError`] naming the reference.
pub fn resolve(reference: &SecretRef, base: &Path) -> Result<String, SecretError> {
    match reference {
        SecretRef::Env(name) => {
            std::env::var(name).map_err(|_| SecretError::MissingEnv { reference: reference.to_string() })
        }
        SecretRef::File(path) => {
            let path = if path.is_absolute() { path.clone() } else { base.join(path) };
            std::fs::read_to_string(&path)
                .map(|text| text.trim_end_matches('\n').to_owned())
                .map_err(|source| SecretError::File { reference: reference.to_string(), source })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_files_and_never_shows_values_in_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("key"), "s3cret\n").expect("writes");
        let value = resolve(&SecretRef::File("key".into()), dir.path()).expect("resolves");
        assert_eq!(value, "s3cret");
        let error = resolve(&SecretRef::Env("TOOLKIT_TEST_SURELY_UNSET".into()), dir.path()).expect_err("unset");
        assert_eq!(error.to_string(), "secret `env:TOOLKIT_TEST_SURELY_UNSET`: environment variable is not set");
    }
}
