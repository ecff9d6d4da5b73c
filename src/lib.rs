//! toolkit: one declarative blueprint → a running, accepted GPU cluster.
//!
//! The pipeline, one stage per module, each a function from one type to the next:
//!
//! | stage    | module                         | input → output                                   |
//! |----------|--------------------------------|--------------------------------------------------|
//! | load     | [`blueprint::load`], [`inventory`] | YAML file → [`blueprint::LoadedBlueprint`] with key positions |
//! | check    | [`model::check`]               | blueprint (+ inventory) → [`diagnostic::Diagnostics`] |
//! | expand   | [`model`], [`topology`]        | blueprint → [`model::Model`] (nodes, rails, switches, cables, IPs, ASNs) |
//! | render   | [`render`]                     | model + `templates/` → `Vec<`[`resource::Resource`]`>` |
//! | graph    | [`graph`]                      | resources → DAG; cycles and unknown ids are diagnostics |
//! | plan     | [`plan`]                       | resources × recorded state → [`plan::Plan`]       |
//!
//! Everything above is pure and offline; `cli` wires the stages to commands. The
//! network stages: [`deploy::api`] observes and applies API objects (BMCs through
//! [`bmc`], cloud instances through [`cloud`]) before [`deploy`] observes and applies
//! the hosts over SSH ([`transport`], [`apply`]); [`deploy::reboot`] reboots one host
//! and waits until it is back (the rollout's reboot step).

pub mod apply;
pub mod blueprint;
pub mod bmc;
pub mod cli;
pub mod cloud;
pub mod compile;
pub mod deploy;
pub mod diagnostic;
pub mod facts;
pub mod graph;
pub mod health;
pub mod http;
pub mod inventory;
pub mod kube;
pub mod lab;
pub mod manifest;
pub mod memory;
pub mod model;
pub mod parallel;
pub mod parsers;
pub mod plan;
pub mod render;
pub mod report;
pub mod resource;
pub mod results;
pub mod source;
pub mod text;
pub mod topology;
pub mod transport;
pub mod validate;
pub mod yaml;

#[cfg(test)]
pub(crate) mod testing;

pub use cli::run;
