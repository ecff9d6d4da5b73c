//! Service facts: `systemctl is-enabled` and `is-active` for many units in one
//! remote command.
//!
//! Stage: observe. Input: unit names. Output: one [`ServiceFact`] per unit, in the
//! same order. Hosts without a running systemd (containers, chroots) report
//! [`ActiveState::Unknown`]; `is-enabled` still reads unit files there.

use super::{FactError, ParseError, run_probe, script_argv};
use crate::transport::Executor;

/// First line: `systemd running|offline|none`; then `<enabled> <active>` per unit.
/// `systemctl` prints nothing on stdout for a unit it does not know.
///
/// Each `systemctl` call waits on systemd (~30 ms, far more on a busy host), so the
/// units are asked side by side, 16 at a time, each answer in its own file of a
/// private temp dir, printed in order (in turn where no temp dir can be made).
/// `systemctl show` would ask for all at once but answers differently:
/// `is-enabled` of an alias name says `alias`, `show` the aliased unit's state.
const SCRIPT: &str = r#"if [ -d /run/systemd/system ]; then state=running
elif command -v systemctl >/dev/null 2>&1; then state=offline
else state=none; fi
echo "systemd $state"
one() {
  e=unknown a=unknown
  if [ "$state" != none ]; then
    e=$(systemctl is-enabled -- "$1" 2>/dev/null | head -n 1) || true
    [ -n "$e" ] || e=not-found
  fi
  if [ "$state" = running ]; then
    a=$(systemctl is-active -- "$1" 2>/dev/null | head -n 1) || true
    [ -n "$a" ] || a=unknown
  fi
  echo "$e $a"
}
i=0
if [ "$#" -gt 1 ] && d=$(mktemp -d /dev/shm/toolkit-facts.XXXXXX 2>/dev/null || mktemp -d 2>/dev/null); then
  trap 'rm -rf -- "$d"' EXIT
  for u do
    one "$u" >"$d/$i" &
    i=$((i + 1))
    [ $((i % 16)) -ne 0 ] || wait
  done
  wait
  i=0
  for u do cat -- "$d/$i"; i=$((i + 1)); done
else
  for u do one "$u"; done
fi
"#;

/// Whether the unit starts at boot (`systemctl is-enabled` wording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnabledState {
    /// `enabled`, `enabled-runtime`.
    Enabled,
    /// `disabled`.
    Disabled,
    /// `static`, `indirect`, `generated`, `alias`, `linked`…: not enable-able as such.
    Static(String),
    /// `masked`, `masked-runtime`.
    Masked,
    /// No such unit.
    NotFound,
    /// systemctl is absent.
    Unknown,
}

/// Whether the unit runs now (`systemctl is-active` wording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActiveState {
    /// `active`, `reloading`, `refreshing`.
    Active,
    /// `inactive`.
    Inactive,
    /// `failed`.
    Failed,
    /// `activating`, `deactivating`, `maintenance`: in transition.
    Transitioning(String),
    /// No running systemd to ask.
    Unknown,
}

/// One unit on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceFact {
    /// Unit name as asked.
    pub unit: String,
    /// Boot-time state.
    pub enabled: EnabledState,
    /// Run-time state.
    pub active: ActiveState,
}

/// The probe's argv for `units`.
#[must_use]
pub fn argv(units: &[String]) -> Vec<String> {
    script_argv(SCRIPT, "toolkit-service-facts", units.iter().cloned())
}

/// Probes `units` on one host.
///
/// # Errors
/// When the command fails or prints something else than one line per unit.
pub async fn probe<E: Executor>(executor: &E, units: &[String]) -> Result<Vec<ServiceFact>, FactError> {
    run_probe(executor, "service", &argv(units), |stdout| parse(stdout, units)).await
}

/// Parses the probe's output for `units`.
///
/// # Errors
/// On a missing `systemd` line, an unknown word, or a line count other than the
/// number of units.
pub fn parse(stdout: &str, units: &[String]) -> Result<Vec<ServiceFact>, ParseError> {
    let mut lines = stdout.lines().enumerate();
    match lines.next() {
        Some((_, "systemd running" | "systemd offline" | "systemd none")) => {}
        Some((_, line)) => return Err(ParseError::new(1, line, "expected `systemd running|offline|none`")),
        None => return Err(ParseError::new(1, "", "empty output")),
    }
    let mut facts = Vec::with_capacity(units.len());
    for (index, line) in lines {
        let unit = units.get(facts.len()).ok_or_else(|| ParseError::new(index + 1, line, "more lines than units"))?;
        let (enabled, active) =
            line.split_once(' ').ok_or_else(|| ParseError::new(index + 1, line, "expected `<enabled> <active>`"))?;
        let enabled =
            enabled_state(enabled).ok_or_else(|| ParseError::new(index + 1, line, "unknown is-enabled word"))?;
        let active = active_state(active).ok_or_else(|| ParseError::new(index + 1, line, "unknown is-active word"))?;
        facts.push(ServiceFact { unit: unit.clone(), enabled, active });
    }
    if facts.len() == units.len() {
        Ok(facts)
    } else {
        Err(ParseError::new(facts.len() + 1, "", format!("{} lines for {} units", facts.len(), units.len())))
    }
}

fn enabled_state(word: &str) -> Option<EnabledState> {
    Some(match word {
        "enabled" | "enabled-runtime" => EnabledState::Enabled,
        "disabled" => EnabledState::Disabled,
        "masked" | "masked-runtime" => EnabledState::Masked,
        "not-found" => EnabledState::NotFound,
        "unknown" => EnabledState::Unknown,
        "static" | "indirect" | "generated" | "alias" | "linked" | "linked-runtime" | "transient" | "bad" => {
            EnabledState::Static(word.to_owned())
        }
        _ => return None,
    })
}

fn active_state(word: &str) -> Option<ActiveState> {
    Some(match word {
        "active" | "reloading" | "refreshing" => ActiveState::Active,
        "inactive" => ActiveState::Inactive,
        "failed" => ActiveState::Failed,
        "activating" | "deactivating" | "maintenance" => ActiveState::Transitioning(word.to_owned()),
        "unknown" => ActiveState::Unknown,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(list: &[&str]) -> Vec<String> {
        list.iter().map(|unit| (*unit).to_owned()).collect()
    }

    #[test]
    fn parses_output_recorded_without_a_running_systemd() {
        // Recorded in a Debian 12 container (systemctl installed, systemd not PID 1).
        let recorded = include_str!("../../tests/fixtures/facts/service-probe-offline.txt");
        let asked = units(&["ssh", "frr", "munge", "nonexistent-unit-xyz"]);
        let facts = parse(recorded, &asked).expect("parses");
        assert_eq!(
            facts[0],
            ServiceFact { unit: "ssh".to_owned(), enabled: EnabledState::Enabled, active: ActiveState::Unknown }
        );
        assert_eq!(facts[3].enabled, EnabledState::NotFound);
    }

    #[test]
    fn parses_a_running_systemd() {
        // The words `systemctl is-enabled` / `is-active` print (systemctl(1)).
        let facts = parse(
            "systemd running\nenabled active\ndisabled inactive\nmasked failed\nstatic activating\n",
            &units(&["a", "b", "c", "d"]),
        )
        .expect("parses");
        assert_eq!(facts[1].enabled, EnabledState::Disabled);
        assert_eq!(facts[2].active, ActiveState::Failed);
        assert_eq!(facts[3].enabled, EnabledState::Static("static".to_owned()));
        assert_eq!(facts[3].active, ActiveState::Transitioning("activating".to_owned()));
    }

    #[test]
    fn refuses_surprises() {
        assert!(parse("systemd running\nenabled\n", &units(&["a"])).is_err());
        assert!(parse("systemd running\nenabled active\n", &units(&["a", "b"])).is_err());
        assert!(parse("systemd running\nweird active\n", &units(&["a"])).is_err());
        assert!(parse("hello\n", &units(&[])).is_err());
    }

    #[test]
    fn units_asked_side_by_side_answer_in_order() {
        // A systemctl that answers by name, later units first.
        let dir = tempfile::tempdir().expect("tempdir");
        let stub = dir.path().join("systemctl");
        std::fs::write(
            &stub,
            "#!/bin/sh\nn=${3#u}; sleep \"0.$((40 - n))\"\ncase $3 in *[02468]) echo enabled ;; *) echo disabled ;; esac\n",
        )
        .expect("stub");
        std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
        let asked: Vec<String> = (10..30).map(|n| format!("u{n}")).collect();
        let argv = argv(&asked);
        let output = std::process::Command::new(&argv[0]).args(&argv[1..]).env("PATH", path).output().expect("sh");
        let facts = parse(&String::from_utf8_lossy(&output.stdout), &asked).expect("parses");
        for (number, fact) in (10..30).zip(&facts) {
            let expected = if number % 2 == 0 { EnabledState::Enabled } else { EnabledState::Disabled };
            assert_eq!((fact.unit.as_str(), &fact.enabled), (format!("u{number}").as_str(), &expected));
        }
    }

    #[test]
    fn the_script_runs_locally() {
        let asked = units(&["nonexistent-unit-xyz"]);
        let argv = argv(&asked);
        let output = std::process::Command::new(&argv[0]).args(&argv[1..]).output().expect("sh");
        let facts = parse(&String::from_utf8_lossy(&output.stdout), &asked).expect("parses");
        assert!(matches!(facts[0].enabled, EnabledState::NotFound | EnabledState::Unknown), "{facts:?}");
    }
}
