//! Idempotent steps, one per kind of [`Desired`] state.
//!
//! Stage: apply. Input: an [`Executor`] for the resource's host and the desired
//! state. Output: [`Step::Changed`] or [`Step::Unchanged`], or an [`OpError`].
//! Every step may be run again safely: a file with the same bytes is not replaced,
//! a directory with the right mode is not touched, only missing packages are
//! installed, a service is started only when stopped, a guarded command is not
//! rerun, a value-setting command runs only when a value differs. File contents
//! never appear in a log or an error.

use crate::facts::FactError;
use crate::facts::command::{self, CommandFact, Probe};
use crate::facts::package::{self, PackageManager, PackageState};
use crate::facts::service::{self, ActiveState, EnabledState, ServiceFact};
use crate::resource::{Desired, OnChange};
use crate::transport::batch::{self, BatchItem};
use crate::transport::{Executor, TransportError, WriteOutcome, WriteRequest};

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The host was changed.
    Changed,
    /// The host already was as desired.
    Unchanged,
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// A remote command failed or could not run.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A fact needed to decide could not be read.
    #[error(transparent)]
    Fact(#[from] FactError),
    /// The step cannot be done on this host as asked.
    #[error("{0}")]
    Refused(String),
}

/// Applies one resource's desired state. `restart` asks a running service to be
/// restarted or reloaded because a file it watches changed in this run.
///
/// # Errors
/// When a command fails; the message names the host and the command, never file
/// contents.
pub async fn apply<E: Executor>(
    executor: &E,
    desired: &Desired,
    restart: Option<OnChange>,
    backup: bool,
) -> Result<Step, OpError> {
    match desired {
        Desired::File { path, content, mode, owner, group, secret, check } => {
            if content.is_unresolved() {
                return Err(OpError::Refused(format!(
                    "secret `{path}` could not be read on this machine; set its source and deploy again"
                )));
            }
            let request = WriteRequest {
                path,
                contents: content.text().as_bytes(),
                mode: *mode,
                owner: Some(owner),
                group: Some(group),
                check: check.as_deref(),
                secret: *secret,
                backup,
            };
            Ok(match executor.write_file(&request).await? {
                WriteOutcome::Written => Step::Changed,
                WriteOutcome::Unchanged => Step::Unchanged,
            })
        }
        Desired::Directory { path, mode, owner } => directory(executor, path, *mode, owner).await,
        // API objects are applied by the API stage (`deploy::api`), never over SSH.
        Desired::Api(item) => Err(OpError::Refused(format!("`{}` is set through its API, not over SSH", item.id()))),
        Desired::Package { name } => {
            let steps = install_packages(executor, std::slice::from_ref(name)).await?;
            Ok(steps.first().copied().unwrap_or(Step::Unchanged))
        }
        Desired::Service { name, enabled, running, .. } => service(executor, name, *enabled, *running, restart).await,
        Desired::Command { argv, creates, unless, reads, .. } => {
            let probe = match reads {
                Some(reads) => Probe::Read(&reads.argv),
                None if creates.is_none() && unless.is_none() => {
                    executor.exec(argv).await?.into_success(executor.host(), argv)?;
                    return Ok(Step::Changed);
                }
                None => Probe::Guard { creates: creates.as_deref(), unless: unless.as_deref() },
            };
            // The same probe as a plan's, so apply and plan agree on what is done.
            let fact = command::probe(executor, &[probe]).await?.pop();
            let done = match (fact, reads) {
                (Some(CommandFact::Done(done)), _) => done,
                (Some(CommandFact::Printed(Some(printed))), Some(reads)) => {
                    reads.observed(&printed).is_some_and(|values| values == reads.fingerprint())
                }
                _ => false,
            };
            if done {
                return Ok(Step::Unchanged);
            }
            executor.exec(argv).await?.into_success(executor.host(), argv)?;
            Ok(Step::Changed)
        }
    }
}

/// Plain files and directories (no check command) in one round trip, in order;
/// one result per item, `None` for items not attempted after a failure.
pub async fn write_batch<E: Executor>(
    executor: &E,
    desired: &[&Desired],
    backup: bool,
) -> Vec<Option<Result<Step, String>>> {
    let items: Vec<BatchItem<'_>> = desired
        .iter()
        .filter_map(|desired| match desired {
            Desired::File { path, content, mode, owner, group, .. } => {
                Some(BatchItem::File { path, contents: content.text().as_bytes(), mode: *mode, owner, group })
            }
            Desired::Directory { path, mode, owner } => Some(BatchItem::Directory { path, mode: *mode, owner }),
            _ => None,
        })
        .collect();
    if items.len() != desired.len() {
        return vec![Some(Err("only files and directories are written in a batch".to_owned())); desired.len()];
    }
    let output = match batch::script(&items, backup) {
        Ok((argv, input)) => executor.exec_with_parts(&argv, &input).await,
        Err(error) => Err(error),
    };
    match output {
        Ok(output) => batch::interpret(executor.host(), &items, &output)
            .into_iter()
            .map(|result| {
                result.map(|result| {
                    result.map(|outcome| match outcome {
                        batch::ItemOutcome::Changed => Step::Changed,
                        batch::ItemOutcome::Unchanged => Step::Unchanged,
                    })
                })
            })
            .collect(),
        Err(error) => vec![Some(Err(error.to_string())); desired.len()],
    }
}

/// `mkdir -p`, `chmod`, `chown`, unless the directory already has that mode and
/// owner.
async fn directory<E: Executor>(executor: &E, path: &str, mode: u32, owner: &str) -> Result<Step, OpError> {
    const SCRIPT: &str = r#"set -eu
p=$1 mode=$2 owner=$3
if [ -d "$p" ] && [ ! -L "$p" ] && [ "$(stat -c '%a %U' -- "$p")" = "$mode $owner" ]; then
  echo unchanged
  exit 0
fi
mkdir -p -- "$p"
chmod -- "$mode" "$p"
chown -- "$owner" "$p"
echo changed
"#;
    let argv = words(&["sh", "-c", SCRIPT, "toolkit-directory", path, &format!("{mode:o}"), owner]);
    let output = executor.exec(&argv).await?.into_success(executor.host(), &argv)?;
    Ok(if output.stdout_text().trim_end() == "unchanged" { Step::Unchanged } else { Step::Changed })
}

/// Installs those of `names` that are missing, in one `apt-get install`; one step
/// per name, in order. Refreshes the package lists once when apt cannot find a
/// package (a fresh host has none).
///
/// # Errors
/// On an invalid name, a host without dpkg, or a failed install.
pub async fn install_packages<E: Executor>(executor: &E, names: &[String]) -> Result<Vec<Step>, OpError> {
    if let Some(bad) = names.iter().find(|name| !is_package_name(name)) {
        return Err(OpError::Refused(format!("`{bad}` is not a valid package name")));
    }
    let facts = package::probe(executor, names).await?;
    if facts.manager != PackageManager::Dpkg {
        return Err(OpError::Refused(format!(
            "`{}` has no dpkg; only apt-get installs are supported",
            executor.host()
        )));
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|name| !matches!(facts.packages.get(*name), Some(PackageState::Installed { .. })))
        .collect();
    if missing.is_empty() {
        return Ok(vec![Step::Unchanged; names.len()]);
    }
    let mut argv = words(&[
        "env",
        "DEBIAN_FRONTEND=noninteractive",
        "apt-get",
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        // Keep locally changed configuration files; toolkit writes its own afterwards.
        "-o",
        "Dpkg::Options::=--force-confold",
    ]);
    argv.extend(missing.iter().map(|name| (*name).clone()));
    let output = executor.exec(&argv).await?;
    if !output.success() {
        let stderr = output.stderr_tail();
        let stale = stderr.contains("Unable to locate package") || stderr.contains("has no installation candidate");
        if !stale {
            output.into_success(executor.host(), &argv)?;
        }
        let update = words(&["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-q"]);
        executor.exec(&update).await?.into_success(executor.host(), &update)?;
        executor.exec(&argv).await?.into_success(executor.host(), &argv)?;
    }
    Ok(names.iter().map(|name| if missing.contains(&name) { Step::Changed } else { Step::Unchanged }).collect())
}

/// Debian policy §5.6.7: lower-case letters, digits, `+ - .`, starting with an
/// alphanumeric — so a name can never be read as an option.
fn is_package_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|first| first.is_ascii_lowercase() || first.is_ascii_digit())
        && bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"+-.".contains(&byte))
        && name.len() >= 2
}

/// Takes unit `unit` to `enabled` and `running`, restarting or reloading it on
/// `restart`; also used to stop and disable a unit that left the blueprint.
///
/// # Errors
/// When the unit cannot be read or a `systemctl` command fails.
pub(crate) async fn service<E: Executor>(
    executor: &E,
    unit: &str,
    enabled: bool,
    running: bool,
    restart: Option<OnChange>,
) -> Result<Step, OpError> {
    let facts = service::probe(executor, &[unit.to_owned()]).await?;
    let fact = facts.into_iter().next().ok_or_else(|| OpError::Refused(format!("no facts for unit `{unit}`")))?;
    let commands = service_commands(executor.host(), &fact, enabled, running, restart)?;
    if !commands.is_empty() && fact.active != ActiveState::Unknown {
        // Deploy may just have written this unit's file (or a drop-in): without a
        // reload, systemd starts the definition it read before and only warns.
        let argv = reload_if_unit_changed(unit);
        executor.exec(&argv).await?.into_success(executor.host(), &argv)?;
    }
    for argv in &commands {
        executor.exec(argv).await?.into_success(executor.host(), argv)?;
    }
    Ok(if commands.is_empty() { Step::Unchanged } else { Step::Changed })
}

/// `systemctl daemon-reload` when systemd says `unit`'s files changed on disk since
/// it loaded them (`NeedDaemonReload`), nothing otherwise: a reload re-runs every
/// generator, so it is not done for services whose files did not change.
#[must_use]
pub fn reload_if_unit_changed(unit: &str) -> Vec<String> {
    words(&[
        "sh",
        "-c",
        r#"if [ "$(systemctl show --property=NeedDaemonReload --value -- "$1")" = yes ]; then systemctl daemon-reload; fi"#,
        "toolkit-daemon-reload",
        unit,
    ])
}

/// The `systemctl` commands that take `fact` to the desired state. Pure, so the
/// decisions are tested without a host.
///
/// # Errors
/// For a masked or missing unit that should run, or a host without a running
/// systemd where the run state must change.
pub fn service_commands(
    host: &str,
    fact: &ServiceFact,
    enabled: bool,
    running: bool,
    restart: Option<OnChange>,
) -> Result<Vec<Vec<String>>, OpError> {
    let unit = fact.unit.as_str();
    match fact.enabled {
        EnabledState::NotFound if enabled || running => {
            return Err(OpError::Refused(format!("unit `{unit}` does not exist on `{host}`")));
        }
        EnabledState::Masked if enabled || running => {
            return Err(OpError::Refused(format!("unit `{unit}` is masked on `{host}`; unmask it first")));
        }
        EnabledState::Unknown => {
            return Err(OpError::Refused(format!("`{host}` has no systemctl to manage `{unit}`")));
        }
        _ => {}
    }
    let is_enabled = fact.enabled == EnabledState::Enabled;
    // `static` and friends cannot be enabled; they count as what they are.
    let can_enable = matches!(fact.enabled, EnabledState::Enabled | EnabledState::Disabled);
    let enable = enabled && !is_enabled && can_enable;
    let disable = !enabled && is_enabled;
    let is_active = match &fact.active {
        ActiveState::Active | ActiveState::Transitioning(_) => Some(true),
        ActiveState::Inactive | ActiveState::Failed => Some(false),
        ActiveState::Unknown => None,
    };
    let wants_run_change = match is_active {
        Some(active) => running != active || (running && restart.is_some()),
        None => running || restart.is_some(),
    };
    if wants_run_change && is_active.is_none() {
        return Err(OpError::Refused(format!("systemd is not running on `{host}`; cannot start or restart `{unit}`")));
    }
    let systemctl = |verb: &[&str]| {
        let mut argv = words(&["systemctl"]);
        argv.extend(verb.iter().map(|word| (*word).to_owned()));
        argv.extend(["--".to_owned(), unit.to_owned()]);
        argv
    };
    let mut commands = Vec::new();
    let start = running && is_active == Some(false);
    if enable && start {
        commands.push(systemctl(&["enable", "--now"]));
    } else {
        if enable {
            commands.push(systemctl(&["enable"]));
        }
        if start {
            commands.push(systemctl(&["start"]));
        }
    }
    if disable {
        commands.push(systemctl(&["disable"]));
    }
    if !running && is_active == Some(true) {
        commands.push(systemctl(&["stop"]));
    }
    // A service started just now already reads the new files.
    if running && is_active == Some(true) {
        match restart {
            Some(OnChange::Restart) => commands.push(systemctl(&["restart"])),
            Some(OnChange::Reload) => commands.push(systemctl(&["reload"])),
            None => {}
        }
    }
    Ok(commands)
}

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|word| (*word).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(enabled: EnabledState, active: ActiveState) -> ServiceFact {
        ServiceFact { unit: "slurmd".to_owned(), enabled, active }
    }

    fn verbs(commands: &[Vec<String>]) -> Vec<String> {
        commands.iter().map(|argv| argv[1..argv.len() - 2].join(" ")).collect()
    }

    #[test]
    fn service_decisions() {
        let run = |fact: &ServiceFact, enabled, running, restart| {
            verbs(&service_commands("node01", fact, enabled, running, restart).expect("decides"))
        };
        let stopped = fact(EnabledState::Disabled, ActiveState::Inactive);
        assert_eq!(run(&stopped, true, true, None), ["enable --now"]);
        // Just started: no restart on top.
        assert_eq!(run(&stopped, true, true, Some(OnChange::Restart)), ["enable --now"]);
        let up = fact(EnabledState::Enabled, ActiveState::Active);
        assert!(run(&up, true, true, None).is_empty());
        assert_eq!(run(&up, true, true, Some(OnChange::Reload)), ["reload"]);
        assert_eq!(run(&up, false, false, None), ["disable", "stop"]);
        let failed = fact(EnabledState::Enabled, ActiveState::Failed);
        assert_eq!(run(&failed, true, true, Some(OnChange::Restart)), ["start"]);
        let fixed = fact(EnabledState::Static("static".to_owned()), ActiveState::Inactive);
        assert_eq!(run(&fixed, true, true, None), ["start"]);
        let argv = &service_commands("n", &stopped, true, false, None).expect("ok")[0];
        assert_eq!(argv, &["systemctl", "enable", "--", "slurmd"]);
    }

    /// Through a real `sh`, with a `systemctl` on PATH that answers as systemd does.
    #[test]
    fn daemon_reload_runs_only_when_the_unit_changed_on_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("log");
        let fake = format!(
            "#!/bin/sh\necho \"$*\" >> {}\ncase \"$*\" in show*changed.service) echo yes;; show*) echo no;; esac\n",
            log.display()
        );
        let program = dir.path().join("systemctl");
        std::fs::write(&program, fake).expect("write");
        std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
        for unit in ["same.service", "changed.service"] {
            let argv = reload_if_unit_changed(unit);
            let status = std::process::Command::new(&argv[0]).args(&argv[1..]).env("PATH", &path).status().expect("sh");
            assert!(status.success());
        }
        let calls = std::fs::read_to_string(&log).expect("log");
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            [
                "show --property=NeedDaemonReload --value -- same.service",
                "show --property=NeedDaemonReload --value -- changed.service",
                "daemon-reload"
            ]
        );
    }

    #[test]
    fn service_refusals_name_the_problem() {
        let message =
            |fact: &ServiceFact| service_commands("node01", fact, true, true, None).expect_err("refused").to_string();
        assert!(message(&fact(EnabledState::Masked, ActiveState::Inactive)).contains("masked"));
        assert!(message(&fact(EnabledState::NotFound, ActiveState::Unknown)).contains("does not exist"));
        assert!(message(&fact(EnabledState::Enabled, ActiveState::Unknown)).contains("systemd is not running"));
        // Without a running systemd, enabling alone still works (it only links files).
        let offline = fact(EnabledState::Disabled, ActiveState::Unknown);
        assert_eq!(verbs(&service_commands("n", &offline, true, false, None).expect("ok")), ["enable"]);
    }

    #[test]
    fn package_names_cannot_be_options() {
        assert!(is_package_name("openssh-server"));
        assert!(is_package_name("libstdc++6"));
        assert!(!is_package_name("-oAPT::x=y"));
        assert!(!is_package_name("Bad"));
        assert!(!is_package_name("a"));
        assert!(!is_package_name("a b"));
    }
}
