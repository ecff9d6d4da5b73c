//! Integration tests: parse.
