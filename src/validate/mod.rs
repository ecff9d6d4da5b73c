//! Validate: acceptance tests with thresholds, run on the cluster, parsed into results.
//!
//! Stage: validate. Input: `validators/*.yaml` + the model. Output: results with
//! numbers and verdicts. `parsers` read tool outputs (nccl-tests, DCGM, fio…);
//! `results` is the data the report renders.

pub mod cabling;
pub mod catalog;
pub mod derived;
pub mod drain;
pub mod expr;
pub mod health;
pub mod kube;
pub mod pairwise;
pub mod parsers;
pub mod results;
pub mod roce_qos;
pub mod run;
pub mod spec;
pub mod subjects;
pub mod timeline;
