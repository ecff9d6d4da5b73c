//! A Helm chart installed from the control host: its values file, and
//! `helm upgrade --install` run once per content of that file.
//!
//! Stage: render. Input: a chart, its version and namespace, and the values.
//! Output: two resources on the control host. The values file is also what a
//! GitOps user takes instead (`toolkit plan --out DIR` writes it under
//! `DIR/<control host>/etc/toolkit/helm/`). Blueprint values reach the shell only as
//! positional parameters (`"$@"`), never inside the script text.

use serde_json::Value;

use crate::render::common::{APPLIED_DIR, Command, file};
use crate::resource::kube::yaml;
use crate::resource::{Content, Resource, Target};

/// Where values files live on the control host.
pub const VALUES_DIR: &str = "/etc/toolkit/helm";

/// A chart toolkit installs.
#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// Helm release name (`gpu-operator`).
    pub release: &'a str,
    /// Chart name in its repository.
    pub chart: &'a str,
    /// Repository URL.
    pub repository: &'a str,
    /// Chart version.
    pub version: &'a str,
    /// Namespace of the release.
    pub namespace: &'a str,
    /// Why, for the values file's header.
    pub title: &'a str,
}

/// The values file's text: a header naming the chart and version (so a new version
/// is a new content, and installs again), then the values as YAML.
#[must_use]
pub fn values_text(chart: &Chart<'_>, values: &Value) -> String {
    format!(
        "# {} — Helm values for chart `{}` {} from {}, release `{}` in namespace `{}`.\n# Rendered by toolkit from the blueprint; edits are overwritten.\n{}",
        chart.title,
        chart.chart,
        chart.version,
        chart.repository,
        chart.release,
        chart.namespace,
        yaml(values)
    )
}

/// The values file and the install command on `host`.
#[must_use]
pub fn resources(host: &Target, chart: &Chart<'_>, values: &Value) -> Vec<Resource> {
    let path = format!("{VALUES_DIR}/{}.yaml", chart.release);
    let content = Content::new(values_text(chart, values));
    let file = file(host, &path, content.clone(), 0o644);
    let name = format!("helm-{}", chart.release);
    let marker = format!("{APPLIED_DIR}/{name}-{}", &content.sha256()[..16]);
    let script = format!(
        "helm upgrade --install \"$@\" && mkdir -p {APPLIED_DIR} && rm -f {APPLIED_DIR}/{name}-* && touch {marker}"
    );
    let argv = [
        "sh",
        "-c",
        &script,
        "helm",
        chart.release,
        chart.chart,
        "--repo",
        chart.repository,
        "--version",
        chart.version,
        "--namespace",
        chart.namespace,
        "--create-namespace",
        "--values",
        &path,
    ]
    .iter()
    .map(|word| (*word).to_owned())
    .collect();
    let install =
        Command::new(argv, format!("helm upgrade --install {} {} {}", chart.release, chart.chart, chart.version))
            .creates(marker)
            .on(host, &name)
            .after([file.id.clone()]);
    vec![file, install]
}
