//! The templates of toolkit's node health program. The program itself is rendered
//! from the validators (`health`), which this stage cannot see.
//!
//! Stage: render. Input: none. Output: this module's templates; slurm.conf's
//! `HealthCheck*` lines come from the model (`model::slurm`).

pub use crate::model::slurm::HEALTH_PROGRAM as PROGRAM;

/// Templates of the health program and its units: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("health/check.sh.j2", include_str!("../../templates/health/check.sh.j2")),
    ("health/toolkit-health.service.j2", include_str!("../../templates/health/toolkit-health.service.j2")),
    ("health/toolkit-health.timer.j2", include_str!("../../templates/health/toolkit-health.timer.j2")),
];
