//! Integration tests: cloud.
