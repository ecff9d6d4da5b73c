//! The integration test binary: one module per area.

mod lint;
mod plan;
mod render_network;
mod render_slurm;
