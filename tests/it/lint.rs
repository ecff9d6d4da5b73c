//! Integration tests: lint.
