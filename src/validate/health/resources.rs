//! The node health program as resources: the script on every compute node and, where
//! slow checks exist, the systemd service and timer that run them; on Kubernetes, where
//! no slurmd runs the fast checks, a service and timer for those too.
//!
//! Stage: validate (render-time, pure). Input: [`NodeChecks`] and [`Settings`].
//! Output: [`Resource`]s per node, which deploy adds to the graph like any rendered file.
//! slurm.conf's `HealthCheckProgram` lines come from `render::health`.

use super::script;
use super::{NodeChecks, NodeControl, Settings};
use crate::render::common::{file, service};
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Desired, OnChange, Resource, ResourceId, Target};
use crate::validate::spec::Cadence;

pub use crate::render::health::PROGRAM;

/// Where the program lives (made with its parents).
const PROGRAM_DIR: &str = "/usr/local/lib/toolkit/health";

/// Per node: the script, and the units of each cadence that no scheduler runs: the
/// slow checks' where the node has slow checks, the fast checks' on Kubernetes.
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
    nodes.iter().map(|checks| Ok((checks.node.clone(), node(checks, settings, renderer, out)?))).collect()
}

/// [`resources`] of one node: the id of its script.
///
/// # Errors
/// A template fails.
pub fn node(
    checks: &NodeChecks,
    settings: &Settings,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<ResourceId, RenderError> {
    let target = Target::node(&checks.node);
    let content = script::content(checks, settings.control, renderer)?;
    let directory = Resource::new(
        target.clone(),
        PROGRAM_DIR,
        Desired::Directory { path: PROGRAM_DIR.to_owned(), mode: 0o755, owner: "root".to_owned() },
    );
    let program = file(&target, PROGRAM, content, 0o755).after([directory.id.clone()]);
    out.push(directory);
    let mut timed = Vec::new();
    if settings.control == NodeControl::Kubernetes && checks.has(Cadence::Fast) {
        timed.push((Cadence::Fast, settings.fast_interval));
    }
    if checks.has(Cadence::Slow) {
        timed.push((Cadence::Slow, settings.slow_interval));
    }
    let program_id = program.id.clone();
    out.push(program);
    for (cadence, interval) in timed {
        timer_units(&checks.node, cadence, interval, settings.control, &program_id, renderer, out)?;
    }
    Ok(program_id)
}

/// `toolkit-health-<cadence>.service` and `.timer` on `node`, the timer enabled.
fn timer_units(
    node: &str,
    cadence: Cadence,
    interval: std::time::Duration,
    control: NodeControl,
    program: &ResourceId,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let target = &Target::node(node);
    let name = cadence.as_str();
    // Slow: DCGM every hour or so, never more often than a minute; fast: as slurmd's
    // HealthCheckInterval would run it.
    let interval = match cadence {
        Cadence::Slow => interval.as_secs().max(60),
        Cadence::Fast => interval.as_secs().max(1),
    };
    let after = match control {
        NodeControl::Slurm => "slurmd.service",
        NodeControl::Kubernetes => "kubelet.service",
    };
    let unit = renderer.render(
        "health/toolkit-health.service.j2",
        minijinja::context! { node => node, program => PROGRAM, cadence => name, after => after },
    )?;
    let timer = renderer.render(
        "health/toolkit-health.timer.j2",
        minijinja::context! { cadence => name, interval => interval, first => interval.min(900), spread => interval / 10 },
    )?;
    let unit_path = format!("/etc/systemd/system/toolkit-health-{name}.service");
    let timer_path = format!("/etc/systemd/system/toolkit-health-{name}.timer");
    let unit = file(target, &unit_path, Content::new(unit), 0o644).after([program.clone()]);
    let timer = file(target, &timer_path, Content::new(timer), 0o644);
    // `systemctl enable --now` takes the timer's full name.
    let running = service(
        target,
        &format!("toolkit-health-{name}.timer"),
        vec![unit.id.clone(), timer.id.clone()],
        OnChange::Restart,
    );
    out.extend([unit, timer, running]);
    Ok(())
}
