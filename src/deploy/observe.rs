//! Observe: read the targets' facts and express them as a state, so the same pure
//! diff that compares against the last deploy's state file compares against reality.
//!
//! Stage: observe. Input: the resource graph (its SSH resources: API objects are
//! read by [`super::api`]) and a connector. Output:
//! [`Observation`]: fingerprints in the format of [`Desired::fingerprint`], the old
//! text of changed non-secret files (for diffs), and the hosts that could not be read.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt as _;

use crate::facts::{self, HostFacts, file::FileState, package::PackageState, service};
use crate::graph::ResourceGraph;
use crate::plan::state::{Recorded, State};
use crate::resource::{Desired, Resource};
use crate::transport::{Connector, Executor};

/// Largest file whose old text is fetched for a diff.
const DIFF_LIMIT: usize = 256 * 1024;

/// What the targets look like now.
#[derive(Debug, Default)]
pub struct Observation {
    /// Observed resources, keyed by id, as a state (no entry = absent).
    pub state: State,
    /// Hosts whose facts could not be read, with the reason.
    pub unreachable: BTreeMap<String, String>,
}

/// Reads every target's facts, `parallel` hosts at a time.
pub async fn observe<C: Connector>(
    graph: &ResourceGraph,
    connector: &C,
    cluster: &str,
    parallel: usize,
    skip: &std::collections::BTreeSet<String>,
) -> Observation {
    let mut by_host: BTreeMap<&str, Vec<&Resource>> = BTreeMap::new();
    // API objects are observed through their APIs; hosts not up yet are not read.
    for resource in graph.resources.iter().filter(|r| !matches!(r.desired, Desired::Api(_))) {
        if !skip.contains(&resource.target.name) {
            by_host.entry(resource.target.name.as_str()).or_default().push(resource);
        }
    }
    let results: Vec<(String, Result<HostState, String>)> = futures::stream::iter(by_host)
        .map(|(host, resources)| async move {
            let result = match connector.connect(host).await {
                Ok(executor) => observe_host(executor.as_ref(), &resources).await,
                Err(error) => Err(error.to_string()),
            };
            (host.to_owned(), result)
        })
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    let mut observation = Observation { state: State::empty(cluster), unreachable: BTreeMap::new() };
    for (host, result) in results {
        match result {
            Ok(host_state) => {
                observation.state.resources.extend(host_state.resources);
                observation.state.contents.extend(host_state.contents);
            }
            Err(reason) => {
                observation.unreachable.insert(host, reason);
            }
        }
    }
    observation
}

#[derive(Default)]
struct HostState {
    resources: BTreeMap<String, Recorded>,
    contents: BTreeMap<String, String>,
}

async fn observe_host<E: Executor>(executor: &E, resources: &[&Resource]) -> Result<HostState, String> {
    let facts = facts::gather(executor, resources).await.map_err(|error| error.to_string())?;
    let mut state = HostState::default();
    for resource in resources {
        let fingerprint = match &resource.desired {
            Desired::Command { creates, unless, .. } => {
                if guard_holds(executor, creates.as_deref(), unless.as_deref()).await? {
                    Some(resource.desired.fingerprint())
                } else {
                    None
                }
            }
            desired => fingerprint(desired, &facts),
        };
        let Some(fingerprint) = fingerprint else { continue };
        let (content_sha256, secret) = match (&resource.desired, facts_file(&resource.desired, &facts)) {
            (Desired::File { secret, .. }, Some(FileState::File { sha256, .. })) => (Some(sha256.clone()), *secret),
            _ => (None, false),
        };
        if let (Desired::File { path, content, secret: false, .. }, Some(old)) = (&resource.desired, &content_sha256)
            && old != content.sha256()
            && let Some(text) = old_text(executor, path).await
        {
            state.contents.insert(old.clone(), text);
        }
        state.resources.insert(
            resource.id.0.clone(),
            Recorded {
                kind: resource.desired.kind().to_owned(),
                fingerprint,
                content_sha256: content_sha256.filter(|_| !secret),
                secret,
                // Observed, not applied: undos come from the state file.
                undo: None,
                order: 0,
            },
        );
    }
    Ok(state)
}

fn facts_file<'f>(desired: &Desired, facts: &'f HostFacts) -> Option<&'f FileState> {
    match desired {
        Desired::File { path, .. } | Desired::Directory { path, .. } => facts.files.get(path),
        _ => None,
    }
}

/// The observed fingerprint of a resource, in [`Desired::fingerprint`]'s format;
/// `None` when it is absent.
fn fingerprint(desired: &Desired, facts: &HostFacts) -> Option<String> {
    match desired {
        Desired::File { path, .. } => match facts.files.get(path)? {
            FileState::File { sha256, meta } => {
                Some(format!("sha256:{sha256} mode:{:o} owner:{}:{}", meta.mode, meta.owner, meta.group))
            }
            _ => None,
        },
        Desired::Directory { path, .. } => match facts.files.get(path)? {
            FileState::Directory { meta } => Some(format!("dir mode:{:o} owner:{}", meta.mode, meta.owner)),
            _ => None,
        },
        Desired::Package { name } => match facts.packages.as_ref()?.packages.get(name)? {
            PackageState::Installed { .. } => Some(format!("package:{name}")),
            _ => None,
        },
        Desired::Service { name, .. } => {
            let fact = facts.services.get(name)?;
            let enabled = matches!(fact.enabled, service::EnabledState::Enabled | service::EnabledState::Static(_));
            let running = fact.active == service::ActiveState::Active;
            Some(format!("service enabled:{enabled} running:{running}"))
        }
        Desired::Command { .. } | Desired::Api(_) => None,
    }
}

/// Whether a command's guard says it has already done its work.
async fn guard_holds<E: Executor>(
    executor: &E,
    creates: Option<&str>,
    unless: Option<&[String]>,
) -> Result<bool, String> {
    if let Some(path) = creates {
        let argv = vec!["test".to_owned(), "-e".to_owned(), path.to_owned()];
        let output = executor.exec(&argv).await.map_err(|error| error.to_string())?;
        if output.success() {
            return Ok(true);
        }
    }
    if let Some(unless) = unless {
        let output = executor.exec(unless).await.map_err(|error| error.to_string())?;
        return Ok(output.success());
    }
    Ok(false)
}

async fn old_text<E: Executor>(executor: &E, path: &str) -> Option<String> {
    let argv = vec!["cat".to_owned(), "--".to_owned(), path.to_owned()];
    let output = executor.exec(&argv).await.ok()?;
    let text = output.stdout_text();
    (output.success() && text.len() <= DIFF_LIMIT).then_some(text)
}

/// Resource indexes of the graph grouped by target, for callers that need them.
#[must_use]
pub fn by_target(graph: &ResourceGraph) -> HashMap<&str, Vec<usize>> {
    let mut map: HashMap<&str, Vec<usize>> = HashMap::new();
    for (index, resource) in graph.resources.iter().enumerate() {
        map.entry(resource.target.name.as_str()).or_default().push(index);
    }
    map
}
