//! Observe: read the targets' facts and express them as a state, so the same pure
//! diff that compares against the last deploy's state file compares against reality.
//!
//! Stage: observe. Input: the resource graph (its SSH resources: API objects are
//! read by [`super::api`]) and a connector. Output:
//! [`Observation`]: records by graph index, fingerprints in the format of
//! [`Desired::fingerprint`], the old text of changed non-secret files (for diffs),
//! and the hosts that could not be read.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt as _;

use crate::facts::command::{self, CommandFact, Probe};
use crate::facts::{self, HostFacts, file::FileState, package::PackageState, service};
use crate::graph::ResourceGraph;
use crate::plan::described::Described;
use crate::plan::state::{Contents, Recorded};
use crate::resource::{Desired, Resource};
use crate::transport::{Connector, Executor};

/// Largest file whose old text is fetched for a diff.
const DIFF_LIMIT: usize = 256 * 1024;

/// What the targets look like now.
#[derive(Debug, Default)]
pub struct Observation {
    /// Observed records by graph index, in the format of the state file's (`None`:
    /// absent, or not read): a vector, not a map by id, so a rerun that finds every
    /// resource as desired builds no key and hashes no id for them.
    pub records: Vec<Option<Recorded>>,
    /// The old texts of changed non-secret files, by hash (for diffs).
    pub contents: Contents,
    /// Hosts whose facts could not be read, with the reason.
    pub unreachable: BTreeMap<String, String>,
}

/// Reads every target's facts, `parallel` hosts at a time; a resource found as
/// desired gets the fingerprint `described` has for it.
pub async fn observe<C: Connector>(
    graph: &ResourceGraph,
    described: &Described,
    connector: &C,
    parallel: usize,
    skip: &std::collections::BTreeSet<String>,
) -> Observation {
    let mut by_host: BTreeMap<&str, Host<'_>> = BTreeMap::new();
    // API objects are observed through their APIs; hosts not up yet are not read.
    for (index, resource) in graph.resources.iter().enumerate() {
        if !matches!(*resource.desired, Desired::Api(_)) && !skip.contains(resource.target()) {
            let host = by_host.entry(resource.target()).or_default();
            host.indexes.push(index);
            host.resources.push(resource);
        }
    }
    let results: Vec<(String, Result<HostState, String>)> = futures::stream::iter(by_host)
        .map(|(name, host)| async move {
            let result = match connector.connect(name).await {
                Ok(executor) => observe_host(executor.as_ref(), &host, described).await,
                Err(error) => Err(error.to_string()),
            };
            (name.to_owned(), result)
        })
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    let mut observation = Observation {
        records: vec![None; graph.resources.len()],
        contents: Contents::default(),
        unreachable: BTreeMap::new(),
    };
    for (host, result) in results {
        match result {
            Ok(host_state) => {
                for (index, record) in host_state.resources {
                    observation.records[index] = Some(record);
                }
                observation.contents.extend(host_state.contents);
            }
            Err(reason) => {
                observation.unreachable.insert(host, reason);
            }
        }
    }
    observation
}

/// One host's resources and their graph indexes, in step.
#[derive(Default)]
struct Host<'g> {
    indexes: Vec<usize>,
    resources: Vec<&'g Resource>,
}

#[derive(Default)]
struct HostState {
    /// By graph index.
    resources: Vec<(usize, Recorded)>,
    contents: BTreeMap<String, String>,
}

async fn observe_host<E: Executor>(executor: &E, host: &Host<'_>, described: &Described) -> Result<HostState, String> {
    let facts = facts::gather(executor, &host.resources).await.map_err(|error| error.to_string())?;
    let mut state = HostState::default();
    // Changed files whose old text a diff needs: (path, old hash).
    let mut old_texts: Vec<(&str, String)> = Vec::new();
    for (&index, resource) in host.indexes.iter().zip(&host.resources) {
        let description = described.get(index);
        let fingerprint = match observed(resource, &facts) {
            Observed::Absent => continue,
            Observed::AsDesired => description.fingerprint.clone(),
            Observed::Other(fingerprint) => fingerprint.into(),
        };
        let secret = matches!(&*resource.desired, Desired::File { secret: true, .. });
        if let (Desired::File { path, content, secret: false, .. }, Some(FileState::File { sha256: old, .. })) =
            (&*resource.desired, facts_file(&resource.desired, &facts))
            && old != content.sha256()
            && !old_texts.iter().any(|(_, hash)| hash == old)
        {
            old_texts.push((path.as_str(), old.clone()));
        }
        state.resources.push((
            index,
            Recorded {
                kind: description.kind.clone(),
                fingerprint,
                secret,
                // Observed, not applied: undos come from the state file.
                undo: None,
                order: 0,
            },
        ));
    }
    for ((_, hash), text) in old_texts.iter().zip(read_old_texts(executor, &old_texts).await) {
        if let Some(text) = text {
            state.contents.insert(hash.clone(), text);
        }
    }
    Ok(state)
}

fn facts_file<'f>(desired: &Desired, facts: &'f HostFacts) -> Option<&'f FileState> {
    match desired {
        Desired::File { path, .. } | Desired::Directory { path, .. } => facts.files.get(path),
        _ => None,
    }
}

/// What a resource's facts say of it.
enum Observed {
    /// Not there.
    Absent,
    /// Exactly as desired: its fingerprint is the desired one.
    AsDesired,
    /// There, otherwise: this fingerprint, in [`Desired::fingerprint`]'s format.
    Other(String),
}

/// What `facts` say of `resource`, compared with what it should be field by field
/// so that one found as desired (a rerun finds nearly all so) costs no formatting.
/// A command whose guard holds is as desired; one that reads its values is
/// fingerprinted by what it read.
fn observed(resource: &Resource, facts: &HostFacts) -> Observed {
    let found = |fingerprint: Option<String>| fingerprint.map_or(Observed::Absent, Observed::Other);
    match &*resource.desired {
        Desired::File { path, content, mode, owner, group, .. } => match facts.files.get(path) {
            Some(state) if state.is_file_with(content.sha256(), *mode, owner, group) => Observed::AsDesired,
            Some(FileState::File { sha256, meta }) => {
                Observed::Other(format!("sha256:{sha256} mode:{:o} owner:{}:{}", meta.mode, meta.owner, meta.group))
            }
            _ => Observed::Absent,
        },
        Desired::Directory { path, mode, owner, .. } => match facts.files.get(path) {
            Some(state) if state.is_directory_with(*mode, owner) => Observed::AsDesired,
            Some(FileState::Directory { meta }) => {
                Observed::Other(format!("dir mode:{:o} owner:{}", meta.mode, meta.owner))
            }
            _ => Observed::Absent,
        },
        Desired::Package { name } => match facts.packages.as_ref().and_then(|facts| facts.packages.get(name)) {
            // A package's fingerprint is its name: installed is as desired.
            Some(PackageState::Installed { .. }) => Observed::AsDesired,
            _ => Observed::Absent,
        },
        Desired::Service { name, enabled: want_enabled, running: want_running, .. } => {
            let Some(fact) = facts.services.get(name) else { return Observed::Absent };
            let enabled = matches!(fact.enabled, service::EnabledState::Enabled | service::EnabledState::Static(_));
            let running = fact.active == service::ActiveState::Active;
            if (enabled, running) == (*want_enabled, *want_running) {
                Observed::AsDesired
            } else {
                Observed::Other(format!("service enabled:{enabled} running:{running}"))
            }
        }
        Desired::Command { reads, .. } => match (facts.commands.get(resource.id.as_str()), reads) {
            (Some(CommandFact::Done(true)), _) => Observed::AsDesired,
            (Some(CommandFact::Printed(Some(printed))), Some(reads)) => found(reads.observed(printed)),
            _ => Observed::Absent,
        },
        Desired::Api(_) => Observed::Absent,
    }
}

/// The old texts of changed files, all in one remote call: at most [`DIFF_LIMIT`]
/// bytes each (`None` for a larger or unreadable file: the plan shows no diff).
async fn read_old_texts<E: Executor>(executor: &E, files: &[(&str, String)]) -> Vec<Option<String>> {
    // One byte over the limit tells a file at the limit from a longer one.
    let limit = (DIFF_LIMIT + 1).to_string();
    let argvs: Vec<Vec<String>> =
        files.iter().map(|(path, _)| ["head", "-c", &limit, "--", path].map(str::to_owned).to_vec()).collect();
    let probes: Vec<Probe<'_>> = argvs.iter().map(|argv| Probe::Read(argv)).collect();
    match command::probe(executor, &probes).await {
        Ok(facts) => facts
            .into_iter()
            .map(|fact| match fact {
                CommandFact::Printed(Some(text)) if text.len() <= DIFF_LIMIT => Some(text),
                _ => None,
            })
            .collect(),
        // Diffs are a courtesy: a failure to read them costs the diffs, not the plan.
        Err(_) => vec![None; files.len()],
    }
}

/// Resource indexes of the graph grouped by target, for callers that need them.
#[must_use]
pub fn by_target(graph: &ResourceGraph) -> HashMap<&str, Vec<usize>> {
    let mut map: HashMap<&str, Vec<usize>> = HashMap::new();
    for (index, resource) in graph.resources.iter().enumerate() {
        map.entry(resource.target()).or_default().push(index);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::fake::{Call, FakeConnector, Script};
    use crate::plan::{self, diff::PlanInputs};
    use crate::resource::{Reads, Target};
    use crate::transport::{ExitStatus, Output};

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|word| (*word).to_owned()).collect()
    }

    fn command(name: &str, creates: Option<String>, unless: Option<Vec<String>>, reads: Option<Reads>) -> Resource {
        let target = Target::node("head");
        Resource::new(
            target,
            name,
            Desired::Command {
                argv: words(&["true"]),
                creates,
                unless,
                description: name.to_owned(),
                undo: None,
                reads: reads.map(Box::new),
            },
        )
    }

    fn qos(printed: &[&str]) -> Reads {
        let mut argv = words(&["printf", "%s\\n"]);
        argv.extend(words(printed));
        if printed.is_empty() {
            argv = words(&["true"]);
        }
        Reads {
            argv,
            wanted: vec![
                ("Priority".to_owned(), "1000".to_owned()),
                ("GrpTRES".to_owned(), "gres/gpu=4".to_owned()),
                ("Preempt".to_owned(), "borrow".to_owned()),
            ],
        }
    }

    /// A host that runs the command-facts script with the real local `sh`.
    fn local_sh(_host: &str, argv: &[String]) -> Output {
        let output = std::process::Command::new(&argv[0]).args(&argv[1..]).output().expect("sh runs");
        Output {
            status: ExitStatus::Code(output.status.code().map_or(255, i32::unsigned_abs)),
            stdout: output.stdout,
            stderr: output.stderr,
        }
    }

    #[tokio::test]
    async fn every_guard_and_read_of_a_host_is_one_call_and_values_show_old_to_new() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("it's done").display().to_string();
        std::fs::write(&marker, "").expect("marker");
        let resources = vec![
            command("QOS team-a", None, None, Some(qos(&["1000", "gres/gpu=8", "borrow"]))),
            command("QOS team-b", None, None, Some(qos(&[]))),
            command("QOS team-c", None, None, Some(qos(&["1000", "gres/gpu=4", "borrow"]))),
            command("made", Some(marker), None, None),
            command("checked", None, Some(words(&["sh", "-c", "echo 'check 5 0'; exit 1"])), None),
        ];
        let graph = crate::graph::build(resources).expect("graph");
        let connector = FakeConnector::new(Script::new(local_sh));
        let described = Described::of(&graph);
        let observation = observe(&graph, &described, &connector, 4, &std::collections::BTreeSet::new()).await;
        assert!(observation.unreachable.is_empty(), "{:?}", observation.unreachable);
        let calls = connector.script.calls();
        assert_eq!(calls.len(), 1, "one remote call for the host: {calls:?}");
        assert!(matches!(&calls[0], Call::Exec { argv, .. } if argv[3] == "toolkit-command-facts"));

        let inputs = PlanInputs { cluster: "lab".to_owned(), ..PlanInputs::default() };
        let plan = plan::diff::diff_observed(&graph, &described, &observation.records, &observation.contents, inputs);
        let text = plan::render::text(&plan);
        assert_eq!(
            text,
            "toolkit will perform the following actions on cluster `lab`:\n\n  \
             ~ command QOS team-a on head  (GrpTRES changed)\n      \
             GrpTRES  gres/gpu=8 → gres/gpu=4\n  \
             + command QOS team-b on head  (not applied yet)\n      \
             Priority  1000\n      \
             GrpTRES   gres/gpu=4\n      \
             Preempt   borrow\n  \
             + command checked on head  (not applied yet)\n\n\
             Plan: 2 to create, 1 to update, 0 to remove, 2 unchanged.\n"
        );
        let json: serde_json::Value = serde_json::from_str(&plan::render::json(&plan).expect("json")).expect("parses");
        assert_eq!(
            json["changes"][0]["values"],
            serde_json::json!([{ "key": "GrpTRES", "before": "gres/gpu=8", "after": "gres/gpu=4" }])
        );
        assert_eq!(json["changes"][1]["values"][0], serde_json::json!({ "key": "Priority", "after": "1000" }));
    }

    #[tokio::test]
    async fn the_old_texts_of_changed_files_are_read_in_one_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let owner = std::process::Command::new("id").arg("-un").output().expect("id runs");
        let owner = String::from_utf8_lossy(&owner.stdout).trim().to_owned();
        let file = |name: &str, old: &str, new: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, old).expect("old file");
            let target = Target::node("node01");
            let path = path.display().to_string();
            Resource::new(
                target,
                &path,
                Desired::File {
                    path: path.clone(),
                    content: crate::resource::Content::new(new.to_owned()),
                    mode: 0o644,
                    owner: owner.clone(),
                    group: owner.clone(),
                    secret: false,
                    check: None,
                },
            )
        };
        let resources = vec![file("a.conf", "A=1\n", "A=2\n"), file("b 'c'.conf", "B=1\n", "B=2\n")];
        let graph = crate::graph::build(resources).expect("graph");
        let connector = FakeConnector::new(Script::new(local_sh));
        let described = Described::of(&graph);
        let observation = observe(&graph, &described, &connector, 4, &std::collections::BTreeSet::new()).await;
        assert!(observation.unreachable.is_empty(), "{:?}", observation.unreachable);
        let mut texts: Vec<&str> = observation.contents.iter().map(|(_, text)| text).collect();
        texts.sort_unstable();
        assert_eq!(texts, ["A=1\n", "B=1\n"]);
        let calls = connector.script.calls();
        assert_eq!(calls.len(), 2, "the file probe, then both old texts at once: {calls:?}");
    }
}
