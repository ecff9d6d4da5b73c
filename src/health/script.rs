//! The node's health program as text: one POSIX `sh` script per node with every
//! check's probe, limits and action, from `templates/health/check.sh.j2`.
//!
//! Stage: health (render-time, pure; `deploy` calls it). Input: one node's [`NodeChecks`]. Output: the
//! script's text.

use serde::Serialize;

use super::{CORDON_ANNOTATION, NodeChecks, NodeControl, REASON_PREFIX};
use crate::render::{RenderError, Renderer};
use crate::resource::Content;
use crate::transport::quote::quote;

/// The template of the script.
pub const TEMPLATE: &str = "health/check.sh.j2";

/// Where node exporter's textfile collector reads `*.prom` files.
pub const TEXTFILE_DIR: &str = crate::model::monitoring::TEXTFILE_DIR;

/// The kubelet's kubeconfig as kubeadm writes it: the node cordons itself with the
/// kubelet's own credentials (NodeRestriction lets a node patch its own Node's
/// `spec.unschedulable` and annotations, not its taints: docs/health.md).
pub const KUBECONFIG: &str = crate::render::kubeadm::KUBELET_CONF;

/// The lock the fast and slow runs take around the decision on Kubernetes (the Slurm
/// script has the same path written out).
pub const LOCK: &str = "/run/toolkit-health.lock";

/// kubectl's discovery cache: the node's runs share it instead of asking the API
/// server for its resource lists on every run (a systemd unit has no `$HOME`).
pub const KUBECTL_CACHE: &str = "/var/cache/toolkit/kubectl";

/// The marker that ends each probe's here-document.
const PROBE_END: &str = "TOOLKIT_PROBE";

#[derive(Serialize)]
struct ScriptView<'a> {
    node: String,
    textfile_dir: &'static str,
    reason_prefix: &'static str,
    kubernetes: bool,
    kubeconfig: &'static str,
    lock: &'static str,
    kubectl_cache: &'static str,
    annotation: &'static str,
    /// The annotation's key as a kubectl JSONPath segment (its dots escaped).
    annotation_path: String,
    checks: Vec<CheckView<'a>>,
}

#[derive(Serialize)]
struct CheckView<'a> {
    id: &'a str,
    subject: &'a str,
    cadence: &'a str,
    action: &'a str,
    timeout: u64,
    probe: Option<&'a str>,
    /// One shell word: `measurement comparison value severity;…`.
    limits: String,
    /// One shell word: why the check does not run here.
    skipped: Option<String>,
}

/// The script of `checks.node`, taking the node out of service the way `control` does.
///
/// # Errors
/// The template fails, or a probe contains the line that would end its here-document.
pub fn render(checks: &NodeChecks, control: NodeControl, renderer: &Renderer) -> Result<String, RenderError> {
    renderer.render(TEMPLATE, view(checks, control)?)
}

/// [`render`] as a file's content: only its hash when `renderer` keeps no texts
/// ([`Renderer::without_texts`]; ~20 KB per node, 80 MB at 4,096 nodes).
///
/// # Errors
/// As [`render`].
pub fn content(checks: &NodeChecks, control: NodeControl, renderer: &Renderer) -> Result<Content, RenderError> {
    renderer.render_content(TEMPLATE, view(checks, control)?)
}

/// What the template sees.
fn view(checks: &NodeChecks, control: NodeControl) -> Result<ScriptView<'_>, RenderError> {
    let views: Vec<CheckView<'_>> = checks
        .checks
        .iter()
        .map(|check| {
            let limits = check
                .limits
                .iter()
                .map(|limit| {
                    format!(
                        "{} {} {} {}",
                        limit.measurement,
                        limit.comparison,
                        limit.value,
                        if limit.warning { "warning" } else { "failure" }
                    )
                })
                .collect::<Vec<_>>()
                .join(";");
            CheckView {
                id: &check.id,
                subject: &check.subject,
                cadence: check.cadence.as_str(),
                action: check.action.as_str(),
                timeout: check.timeout,
                probe: check.probe.as_deref(),
                limits: quote(&limits).into_owned(),
                skipped: check.skipped.as_deref().map(|why| quote(why).into_owned()),
            }
        })
        .collect();
    if let Some(check) = views.iter().find(|view| view.probe.is_some_and(|probe| probe.lines().any(|l| l == PROBE_END)))
    {
        return Err(RenderError::Model {
            what: format!("the health checks of `{}`", checks.node),
            reason: format!(
                "the health probe of `{}` has a line `{PROBE_END}`, which would end its here-document",
                check.id
            ),
        });
    }
    Ok(ScriptView {
        node: quote(&checks.node).into_owned(),
        textfile_dir: TEXTFILE_DIR,
        reason_prefix: REASON_PREFIX,
        kubernetes: control == NodeControl::Kubernetes,
        kubeconfig: KUBECONFIG,
        lock: LOCK,
        kubectl_cache: KUBECTL_CACHE,
        annotation: CORDON_ANNOTATION,
        annotation_path: CORDON_ANNOTATION.replace('.', "\\."),
        checks: views,
    })
}
