//! What Slurm needs to know about toolkit's node health program: where it is and
//! how often slurmd runs it. The program itself is rendered from the validators
//! (`validate::health`), which this stage cannot see.
//!
//! Stage: render. Input: the blueprint's `monitoring.health` fast interval. Output:
//! the `HealthCheck*` lines of slurm.conf and this module's templates.

/// The node health program (`check` = fast checks, `check slow` = slow ones).
pub const PROGRAM: &str = "/usr/local/lib/toolkit/health/check";

/// Templates of the health program and its units: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("health/check.sh.j2", include_str!("../../templates/health/check.sh.j2")),
    ("health/toolkit-health-slow.service.j2", include_str!("../../templates/health/toolkit-health-slow.service.j2")),
    ("health/toolkit-health-slow.timer.j2", include_str!("../../templates/health/toolkit-health-slow.timer.j2")),
];

/// slurm.conf keys for a fast interval of `seconds`: every node state (a node running
/// jobs is drained, not killed), cycled through the interval so slurmctld sees the
/// nodes' drains and resumes spread out rather than all at once.
#[must_use]
pub fn slurm_keys(seconds: u64) -> Vec<(&'static str, String)> {
    vec![
        ("HealthCheckProgram", PROGRAM.to_owned()),
        ("HealthCheckInterval", seconds.max(1).to_string()),
        ("HealthCheckNodeState", "ANY,CYCLE".to_owned()),
    ]
}
