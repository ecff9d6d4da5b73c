//! The integration test binary: one module per area.

mod lab;
mod lint;
mod plan;
mod render_network;
mod render_slurm;
mod parse;
mod report;
mod redfish;
mod cloud;
mod ssh;
