//! Remove: undo what left the blueprint, on each host in the reverse of the order
//! it was applied in, hosts in parallel.
//!
//! Stage: apply. Input: the plan's [`Removal`]s (each with the [`Undo`] its record
//! kept), a [`Connector`] and [`ApplyOptions`]. Output: one [`ResourceOutcome`] per
//! removal that acts on a host (packages, commands without an undo and API objects
//! have nothing to run here).
//!
//! Every step is idempotent: deleting a missing file or directory, stopping a
//! stopped or missing unit, and a declared undo with nothing left to undo all
//! succeed, so a rerun after a partial removal converges. On a host, the first
//! failure stops the removals after it (they may be what the failed one needs
//! gone first, in reverse dependency order) and keeps them recorded for a rerun.

use std::time::Instant;

use futures::StreamExt as _;
use indexmap::IndexMap;

use super::ops::{self, OpError, Step};
use super::{ApplyOptions, Outcome, ResourceOutcome, SkipReason};
use crate::plan::removal::{Removal, Undo};
use crate::resource::ResourceId;
use crate::transport::{Connector, Executor};

/// [`ResourceOutcome::index`] of a removal: it is not in the graph any more.
pub const NOT_IN_GRAPH: usize = usize::MAX;

/// The exit status with which a declared undo refuses (its reason on stderr).
pub const UNDO_REFUSED: u32 = 3;

/// Undoes `removals` (in the order given, which [`crate::plan::removal::removals`]
/// makes the reverse apply order), hosts in parallel, at most `options.parallel`
/// at once. Removals that run nothing get no outcome.
pub async fn remove<C: Connector>(removals: &[Removal], connector: &C, options: &ApplyOptions) -> Vec<ResourceOutcome> {
    // Per host, in the order given; each removal with its position in `removals`.
    let mut hosts: IndexMap<&str, Vec<(usize, &Removal, &Undo)>> = IndexMap::new();
    for (position, removal) in removals.iter().enumerate() {
        let Some(undo) = removal.undo.as_ref().filter(|undo| undo.acts()) else { continue };
        hosts.entry(removal.target.as_str()).or_default().push((position, removal, undo));
    }
    let per_host: Vec<Vec<(usize, ResourceOutcome)>> = futures::stream::iter(hosts)
        .map(|(host, list)| remove_on_host(host, list, connector, options))
        .buffer_unordered(options.parallel.max(1))
        .collect()
        .await;
    let mut outcomes: Vec<(usize, ResourceOutcome)> = per_host.into_iter().flatten().collect();
    // Hosts finish in any order; the report lists removals in plan order.
    outcomes.sort_unstable_by_key(|(position, _)| *position);
    outcomes.into_iter().map(|(_, outcome)| outcome).collect()
}

async fn remove_on_host<C: Connector>(
    host: &str,
    list: Vec<(usize, &Removal, &Undo)>,
    connector: &C,
    options: &ApplyOptions,
) -> Vec<(usize, ResourceOutcome)> {
    let mut outcomes = Vec::with_capacity(list.len());
    let mut stop: Option<SkipReason> = None;
    let mut executor = None;
    for (position, removal, undo) in list {
        let id = ResourceId(removal.id.as_str().into());
        if stop.is_none() && options.cancel.is_cancelled() {
            stop = Some(SkipReason::Cancelled);
        }
        let started = Instant::now();
        let outcome = if let Some(reason) = &stop {
            Outcome::Skipped { reason: reason.clone() }
        } else {
            if executor.is_none() {
                executor = Some(connector.connect(host).await.map_err(|error| error.to_string()));
            }
            let result = match executor.as_ref() {
                Some(Ok(session)) => {
                    undo_step(session.as_ref(), undo, options.force, options.backup).await.map_err(|e| e.to_string())
                }
                Some(Err(error)) => Err(error.clone()),
                None => Err(format!("no connection to `{host}`")),
            };
            match result {
                Ok(Step::Changed) => Outcome::Changed,
                Ok(Step::Unchanged) => Outcome::Unchanged,
                Err(error) => {
                    stop = Some(SkipReason::Upstream { id: id.clone() });
                    Outcome::Failed { error }
                }
            }
        };
        let outcome = ResourceOutcome {
            index: NOT_IN_GRAPH,
            id,
            target: host.to_owned(),
            outcome,
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        if let Some(events) = &options.events {
            // The receiver is a progress display; a closed one changes nothing here.
            let _ = events.send(outcome.clone());
        }
        outcomes.push((position, outcome));
    }
    outcomes
}

/// Runs one removal on its host. `force` lets a declared undo go ahead where it
/// would refuse (it sees `TOOLKIT_FORCE=1`); `backup` keeps a deleted file beside
/// where it was as `<path>.<UTC time>.toolkit-backup`, as a replaced one is kept.
///
/// # Errors
/// When a command fails or an undo refuses ([`OpError::Refused`] with its reason).
pub async fn undo_step<E: Executor>(executor: &E, undo: &Undo, force: bool, backup: bool) -> Result<Step, OpError> {
    match undo {
        Undo::DeleteFile { path } => {
            let keep = if backup { "backup" } else { "" };
            delete(executor, &["sh", "-c", DELETE_FILE, "toolkit-delete-file", path, keep]).await
        }
        Undo::DeleteDirectory { path } => {
            delete(executor, &["sh", "-c", DELETE_DIRECTORY, "toolkit-delete-directory", path]).await
        }
        Undo::StopService { unit } => ops::service(executor, unit, false, false, None).await,
        Undo::Run { argv } if argv.is_empty() => Ok(Step::Unchanged),
        Undo::Run { argv } => {
            let argv: Vec<String> = if force {
                ["env", "TOOLKIT_FORCE=1"].iter().map(|word| (*word).to_owned()).chain(argv.iter().cloned()).collect()
            } else {
                argv.clone()
            };
            let output = executor.exec(&argv).await?;
            if output.status == crate::transport::ExitStatus::Code(UNDO_REFUSED) {
                return Err(OpError::Refused(output.stderr_tail().trim().to_owned()));
            }
            output.into_success(executor.host(), &argv)?;
            Ok(Step::Changed)
        }
        Undo::KeepPackage { .. } | Undo::Api | Undo::KubeObject { .. } => Ok(Step::Unchanged),
    }
}

/// Deletes a file (a symlink itself, not its target), or with `backup` as `$2`
/// renames it to a backup; a unit file also reloads systemd, so the unit it
/// defined is gone from it too.
const DELETE_FILE: &str = r#"set -eu
p=$1
if [ -e "$p" ] || [ -L "$p" ]; then
  if [ "${2:-}" = backup ]; then
    mv -- "$p" "$p.$(date -u +%Y%m%dT%H%M%SZ).toolkit-backup"
  else
    rm -f -- "$p"
  fi
  case $p in
  /etc/systemd/system/*|/lib/systemd/system/*|/usr/lib/systemd/system/*)
    if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi ;;
  esac
  echo changed
else
  echo unchanged
fi
"#;

/// Deletes a directory that is empty; one still holding files toolkit did not
/// write (or wrote under another record) is left as it is.
const DELETE_DIRECTORY: &str = r#"set -eu
p=$1
if [ -d "$p" ] && [ ! -L "$p" ] && rmdir -- "$p" 2>/dev/null; then
  echo changed
else
  echo unchanged
fi
"#;

async fn delete<E: Executor>(executor: &E, words: &[&str]) -> Result<Step, OpError> {
    let argv: Vec<String> = words.iter().map(|word| (*word).to_owned()).collect();
    let output = executor.exec(&argv).await?.into_success(executor.host(), &argv)?;
    Ok(if output.stdout_text().trim_end() == "changed" { Step::Changed } else { Step::Unchanged })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::fake::{Call, FakeConnector, Script, fresh_debian};
    use crate::transport::{ExitStatus, Output};

    fn removal(id: &str, undo: Option<Undo>) -> Removal {
        Removal { id: id.to_owned(), target: crate::resource::id_parts(id).0.to_owned(), undo }
    }

    fn run(argv: &[&str]) -> Undo {
        Undo::Run { argv: argv.iter().map(|word| (*word).to_owned()).collect() }
    }

    /// A head whose accounting undos refuse while "jobs run" unless forced; files
    /// exist; `toolkit-exporter` is enabled and running.
    fn host(name: &str, argv: &[String]) -> Output {
        let ok = |stdout: &str| Output { status: ExitStatus::Code(0), stdout: stdout.into(), stderr: Vec::new() };
        let forced = argv.first().map(String::as_str) == Some("env");
        match argv.iter().find(|word| word.starts_with("delete-")).map(String::as_str) {
            Some("delete-user") if !forced => Output {
                status: ExitStatus::Code(UNDO_REFUSED),
                stdout: Vec::new(),
                stderr: b"refusing to delete user `bob`: it has running or pending jobs: 41 (bob, RUNNING)\n".to_vec(),
            },
            Some(_) => ok(""),
            None => match argv.get(3).map(String::as_str) {
                Some("toolkit-delete-file" | "toolkit-delete-directory") => ok("changed\n"),
                Some("toolkit-service-facts") => ok("systemd running\nenabled active\n"),
                _ => fresh_debian(name, argv),
            },
        }
    }

    fn plan() -> Vec<Removal> {
        vec![
            removal("head:command:sacctmgr-user-team-b-bob", Some(run(&["delete-user", "bob"]))),
            removal("head:command:sacctmgr-account-team-b-settings", Some(run(&[]))),
            removal("head:command:sacctmgr-account-team-b", Some(run(&["delete-account", "team-b"]))),
            removal("head:command:sacctmgr-qos-team-b", Some(run(&["delete-qos", "team-b"]))),
            removal("head:command:fake-gpu-devices", None),
            removal("head:package:slurmctld", Some(Undo::KeepPackage { name: "slurmctld".into() })),
            removal(
                "node01:file:/etc/slurm/topology.conf",
                Some(Undo::DeleteFile { path: "/etc/slurm/topology.conf".into() }),
            ),
        ]
    }

    fn outcomes(list: &[ResourceOutcome]) -> Vec<(&str, &Outcome)> {
        list.iter().map(|outcome| (outcome.id.as_str(), &outcome.outcome)).collect()
    }

    #[tokio::test]
    async fn a_refused_undo_names_the_jobs_and_stops_the_removals_that_come_after_it_on_its_host() {
        let connector = FakeConnector::new(Script::new(host));
        let report = remove(&plan(), &connector, &ApplyOptions::default()).await;
        let refused = ResourceId("head:command:sacctmgr-user-team-b-bob".into());
        let upstream = Outcome::Skipped { reason: SkipReason::Upstream { id: refused } };
        let listed = outcomes(&report);
        assert_eq!(listed.len(), 4, "nothing runs for a package, an empty undo or no undo: {listed:?}");
        let Outcome::Failed { error } = listed[0].1 else { panic!("{listed:?}") };
        assert_eq!(error, "refusing to delete user `bob`: it has running or pending jobs: 41 (bob, RUNNING)");
        assert_eq!(
            listed[1..],
            [
                ("head:command:sacctmgr-account-team-b", &upstream),
                ("head:command:sacctmgr-qos-team-b", &upstream),
                ("node01:file:/etc/slurm/topology.conf", &Outcome::Changed),
            ]
        );
        assert!(report.iter().all(|outcome| outcome.index == NOT_IN_GRAPH));
    }

    #[tokio::test]
    async fn force_lets_undos_go_ahead_users_then_account_then_qos() {
        let connector = FakeConnector::new(Script::new(host));
        let options = ApplyOptions { force: true, ..ApplyOptions::default() };
        let report = remove(&plan(), &connector, &options).await;
        assert!(report.iter().all(|outcome| outcome.outcome == Outcome::Changed), "{report:?}");
        let head: Vec<Vec<String>> = connector
            .script
            .calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::Exec { host, argv } if host == "head" => Some(argv),
                _ => None,
            })
            .collect();
        assert_eq!(
            head,
            [
                ["env", "TOOLKIT_FORCE=1", "delete-user", "bob"],
                ["env", "TOOLKIT_FORCE=1", "delete-account", "team-b"],
                ["env", "TOOLKIT_FORCE=1", "delete-qos", "team-b"]
            ]
        );
    }

    #[tokio::test]
    async fn files_directories_and_units_are_deleted_stopped_and_disabled_idempotently() {
        let connector = FakeConnector::new(Script::new(host));
        let unit = Undo::StopService { unit: "toolkit-exporter".into() };
        let session = connector.connect("node01").await.expect("connects");
        assert_eq!(undo_step(session.as_ref(), &unit, false, false).await.expect("stops"), Step::Changed);
        let verbs: Vec<String> = connector
            .script
            .calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::Exec { argv, .. } if argv[0] == "systemctl" => Some(argv[1].clone()),
                _ => None,
            })
            .collect();
        assert_eq!(verbs, ["disable", "stop"]);
        // Already gone: the fake host answers as the script does for a missing path.
        let gone = FakeConnector::new(Script::new(|host, argv: &[String]| {
            let mut output = fresh_debian(host, argv);
            output.stdout = b"unchanged\n".to_vec();
            output
        }));
        let session = gone.connect("node01").await.expect("connects");
        for undo in [Undo::DeleteFile { path: "/etc/a".into() }, Undo::DeleteDirectory { path: "/etc/d".into() }] {
            assert_eq!(undo_step(session.as_ref(), &undo, false, false).await.expect("no-op"), Step::Unchanged);
        }
    }

    /// The removal scripts through a real `sh`, on a temp directory.
    #[test]
    fn delete_scripts_delete_once_and_keep_a_directory_that_is_not_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run_with = |script: &str, path: &std::path::Path, extra: &[&str]| {
            let output = std::process::Command::new("sh")
                .args(["-c", script, "test"])
                .arg(path)
                .args(extra)
                .output()
                .expect("sh");
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        };
        let run = |script: &str, path: &std::path::Path| run_with(script, path, &[]);
        let file = dir.path().join("topology.conf");
        std::fs::write(&file, "x").expect("writes");
        assert_eq!(run(DELETE_FILE, &file), "changed");
        assert!(!file.exists());
        assert_eq!(run(DELETE_FILE, &file), "unchanged");
        std::fs::write(&file, "kept").expect("writes");
        assert_eq!(run_with(DELETE_FILE, &file, &["backup"]), "changed");
        assert!(!file.exists());
        let kept: Vec<String> = std::fs::read_dir(dir.path())
            .expect("lists")
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with("topology.conf.") && name.ends_with(".toolkit-backup"))
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let full = dir.path().join("full");
        std::fs::create_dir(&full).expect("mkdir");
        std::fs::write(full.join("theirs"), "x").expect("writes");
        assert_eq!(run(DELETE_DIRECTORY, &full), "unchanged");
        assert!(full.join("theirs").exists());
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).expect("mkdir");
        assert_eq!(run(DELETE_DIRECTORY, &empty), "changed");
        assert_eq!(run(DELETE_DIRECTORY, &empty), "unchanged");
    }
}
