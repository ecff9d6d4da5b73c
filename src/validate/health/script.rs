//! The node's health program as text: one POSIX `sh` script per node with every
//! check's probe, limits and action, from `templates/health/check.sh.j2`.
//!
//! Stage: validate (render-time, pure). Input: one node's [`NodeChecks`]. Output: the
//! script's text.

use serde::Serialize;

use super::{NodeChecks, REASON_PREFIX};
use crate::render::{RenderError, Renderer};
use crate::transport::quote::quote;

/// The template of the script.
pub const TEMPLATE: &str = "health/check.sh.j2";

/// Where node exporter's textfile collector reads `*.prom` files.
pub const TEXTFILE_DIR: &str = crate::model::monitoring::TEXTFILE_DIR;

/// The marker that ends each probe's here-document.
const PROBE_END: &str = "TOOLKIT_PROBE";

#[derive(Serialize)]
struct ScriptView<'a> {
    node: String,
    textfile_dir: &'static str,
    reason_prefix: &'static str,
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

/// The script of `checks.node`.
///
/// # Errors
/// The template fails, or a probe contains the line that would end its here-document.
pub fn render(checks: &NodeChecks, renderer: &Renderer) -> Result<String, RenderError> {
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
    renderer.render(
        TEMPLATE,
        ScriptView {
            node: quote(&checks.node).into_owned(),
            textfile_dir: TEXTFILE_DIR,
            reason_prefix: REASON_PREFIX,
            checks: views,
        },
    )
}
