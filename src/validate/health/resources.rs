//! The node health program as resources: the script on every compute node and, where
//! slow checks exist, the systemd service and timer that run them.
//!
//! Stage: validate (render-time, pure). Input: [`NodeChecks`] and [`Settings`].
//! Output: [`Resource`]s per node, which deploy adds to the graph like any rendered file.
//! slurm.conf's `HealthCheckProgram` lines come from `render::health`.

use super::script;
use super::{NodeChecks, Settings};
use crate::render::common::{file, service};
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target, TargetKind};
use crate::validate::spec::Cadence;

pub use crate::render::health::PROGRAM;

/// Where the program lives (made with its parents).
const PROGRAM_DIR: &str = "/usr/local/lib/toolkit/health";

/// The slow checks' units.
const SLOW_SERVICE: &str = "/etc/systemd/system/toolkit-health-slow.service";
const SLOW_TIMER: &str = "/etc/systemd/system/toolkit-health-slow.timer";
/// The timer as a service resource (`systemctl enable --now` takes the full name).
const SLOW_TIMER_UNIT: &str = "toolkit-health-slow.timer";

/// Per node: the script, and the slow checks' units where it has slow checks.
/// Returns, per node, the id of the script (slurmd is ordered after it).
///
/// # Errors
/// A template fails.
pub fn resources(
    nodes: &[NodeChecks],
    settings: &Settings,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<Vec<(String, ResourceId)>, RenderError> {
    let mut programs = Vec::new();
    for checks in nodes {
        let target = Target { name: checks.node.as_str().into(), kind: TargetKind::Node };
        let text = script::render(checks, renderer)?;
        let directory = Resource::new(
            target.clone(),
            PROGRAM_DIR,
            Desired::Directory { path: PROGRAM_DIR.to_owned(), mode: 0o755, owner: "root".to_owned() },
        );
        let program = file(&target, PROGRAM, Content::new(text), 0o755).after([directory.id.clone()]);
        out.push(directory);
        programs.push((checks.node.clone(), program.id.clone()));
        if checks.has(Cadence::Slow) {
            let interval = settings.slow_interval.as_secs().max(60);
            let unit = renderer.render(
                "health/toolkit-health-slow.service.j2",
                minijinja::context! { node => &checks.node, program => PROGRAM },
            )?;
            let timer = renderer.render(
                "health/toolkit-health-slow.timer.j2",
                minijinja::context! { interval => interval, first => interval.min(900), spread => interval / 10 },
            )?;
            let unit = file(&target, SLOW_SERVICE, Content::new(unit), 0o644).after([program.id.clone()]);
            let timer = file(&target, SLOW_TIMER, Content::new(timer), 0o644);
            let running = service(&target, SLOW_TIMER_UNIT, vec![unit.id.clone(), timer.id.clone()], OnChange::Restart);
            out.extend([program, unit, timer, running]);
        } else {
            out.push(program);
        }
    }
    Ok(programs)
}
