//! Validate: acceptance tests with thresholds, run on the cluster, parsed into results.
//!
//! Stage: validate. Input: `validators/*.yaml` + the model. Output: [`crate::results`]
//! with numbers and verdicts. This module owns the spec language (`spec`, `expr`,
//! `catalog`) and the run (`run`: choose subjects, execute, judge). Tool outputs are
//! read by [`crate::parsers`]; the node health programs live in [`crate::health`].

pub mod cabling;
pub mod catalog;
pub mod derived;
pub mod drain;
pub mod expr;
pub mod kube;
pub mod pairwise;
pub mod roce_qos;
pub mod run;
pub mod spec;
pub mod subjects;
pub mod timeline;
