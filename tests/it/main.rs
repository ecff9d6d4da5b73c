//! The integration test binary: one module per area.

mod cloud;
mod deploy;
mod lab;
mod lab_e2e;
mod lab_health;
mod lab_reboot;
mod lab_removal;
mod lab_rollout;
mod lint;
mod parse;
mod plan;
mod redfish;
mod render_gpu_stack;
mod render_network;
mod render_slurm;
mod report;
mod ssh;
mod support;
mod validate;
