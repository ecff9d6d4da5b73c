//! The node health program as resources: the script on every compute node and, where
//! slow checks exist, the systemd service and timer that run them; on Kubernetes, where
//! no slurmd runs the fast checks, a service and timer for those too.
//!
//! Stage: health (render-time, pure; `deploy` calls it). Input: [`NodeChecks`] and [`Settings`].
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
    let timers = Timers::new(settings, renderer)?;
    nodes.iter().map(|checks| Ok((checks.node.clone(), node(checks, settings, &timers, renderer, out)?))).collect()
}

/// Each cadence's timer unit, the same text on every node: rendered once for all of
/// them (at 32,768 nodes, 32,768 renders of one text, each copy kept).
pub struct Timers {
    fast: Content,
    slow: Content,
}

impl Timers {
    /// The timers of `settings`' intervals.
    ///
    /// # Errors
    /// A template fails.
    pub fn new(settings: &Settings, renderer: &Renderer) -> Result<Self, RenderError> {
        let timer =
            |cadence| Ok::<_, RenderError>(Content::new(timer(cadence, interval(settings, cadence), renderer)?));
        Ok(Self { fast: timer(Cadence::Fast)?, slow: timer(Cadence::Slow)? })
    }

    fn of(&self, cadence: Cadence) -> &Content {
        match cadence {
            Cadence::Fast => &self.fast,
            Cadence::Slow => &self.slow,
        }
    }
}

/// [`resources`] of one node, its timers from `timers`: the id of its script.
///
/// # Errors
/// A template fails.
pub fn node(
    checks: &NodeChecks,
    settings: &Settings,
    timers: &Timers,
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
        timed.push(Cadence::Fast);
    }
    if checks.has(Cadence::Slow) {
        timed.push(Cadence::Slow);
    }
    let program_id = program.id.clone();
    out.push(program);
    for cadence in timed {
        timer_units(&checks.node, cadence, timers.of(cadence), settings.control, &program_id, renderer, out)?;
    }
    Ok(program_id)
}

/// How often the timer of `cadence` runs, as the blueprint has it.
fn interval(settings: &Settings, cadence: Cadence) -> std::time::Duration {
    match cadence {
        Cadence::Fast => settings.fast_interval,
        Cadence::Slow => settings.slow_interval,
    }
}

/// The timer of `cadence`, every `interval`.
fn timer(cadence: Cadence, interval: std::time::Duration, renderer: &Renderer) -> Result<String, RenderError> {
    // Slow: DCGM every hour or so, never more often than a minute; fast: as slurmd's
    // HealthCheckInterval would run it.
    let interval = match cadence {
        Cadence::Slow => interval.as_secs().max(60),
        Cadence::Fast => interval.as_secs().max(1),
    };
    renderer.render(
        "health/toolkit-health.timer.j2",
        minijinja::context! {
            cadence => cadence.as_str(), interval => interval, first => interval.min(900), spread => interval / 10
        },
    )
}

/// `toolkit-health-<cadence>.service` and `.timer` (`timer`) on `node`, the timer
/// enabled.
fn timer_units(
    node: &str,
    cadence: Cadence,
    timer: &Content,
    control: NodeControl,
    program: &ResourceId,
    renderer: &Renderer,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let target = &Target::node(node);
    let name = cadence.as_str();
    let after = match control {
        NodeControl::Slurm => "slurmd.service",
        NodeControl::Kubernetes => "kubelet.service",
    };
    // The node's own (it names the node): only its hash when the plan keeps no texts.
    let unit = renderer.render_content(
        "health/toolkit-health.service.j2",
        minijinja::context! { node => node, program => PROGRAM, cadence => name, after => after },
    )?;
    let unit_path = format!("/etc/systemd/system/toolkit-health-{name}.service");
    let timer_path = format!("/etc/systemd/system/toolkit-health-{name}.timer");
    let unit = file(target, &unit_path, unit, 0o644).after([program.clone()]);
    let timer = file(target, &timer_path, timer.clone(), 0o644);
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
