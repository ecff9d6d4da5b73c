//! Integration tests: plan.
