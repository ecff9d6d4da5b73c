//! Integration tests: render_slurm.
