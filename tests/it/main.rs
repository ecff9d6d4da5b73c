//! The integration test binary: one module per area.

mod cloud;
mod deploy;
mod firmware;
mod kubernetes;
mod lab;
mod lab_e2e;
mod lab_firmware;
mod lab_monitoring;
mod lab_package_cache;
mod lab_reboot;
mod lab_removal;
mod lab_rollout;
mod lint;
mod parse;
mod plan;
mod redfish;
mod redfish_static;
mod render_gpu_stack;
mod render_monitoring;
mod render_network;
mod render_roce_qos;
mod render_slurm;
mod report;
mod ssh;
mod support;
mod validate;
