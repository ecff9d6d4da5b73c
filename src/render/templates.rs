//! The templates compiled into the binary, by name (their path under `templates/`).

/// `(name, text)` of every template.
pub const EMBEDDED: &[(&str, &str)] = &[];
