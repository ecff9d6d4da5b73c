//! Package facts: installed or not, and which version, for many packages in one
//! remote command.
//!
//! Stage: observe. Input: package names. Output: [`PackageFacts`]. Uses
//! `dpkg-query -W` where dpkg exists, `rpm -q` otherwise; a host with neither
//! reports [`PackageManager::None`] and every package [`PackageState::Unknown`].

use std::collections::BTreeMap;

use super::{FactError, ParseError, run_probe, script_argv};
use crate::transport::Executor;

/// First line names the manager; then dpkg's or rpm's own lines. Missing packages
/// make both tools exit non-zero and print to stderr (dpkg) or stdout (rpm), so
/// the exit status is not used: a package not listed as installed is not.
const SCRIPT: &str = r#"if command -v dpkg-query >/dev/null 2>&1; then
  echo 'manager dpkg'
  dpkg-query -W -f '${Package} ${Status} ${Version}\n' -- "$@" 2>/dev/null || true
elif command -v rpm >/dev/null 2>&1; then
  echo 'manager rpm'
  rpm -q --qf '%{NAME} %{VERSION}-%{RELEASE}\n' -- "$@" 2>/dev/null || true
else
  echo 'manager none'
fi
"#;

/// The host's package manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackageManager {
    /// Debian, Ubuntu.
    Dpkg,
    /// RHEL, Rocky, SUSE.
    Rpm,
    /// Neither found.
    None,
}

/// One package on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageState {
    /// Installed at this version.
    Installed {
        /// Version as the manager prints it (`1:9.2p1-2+deb12u10`).
        version: String,
    },
    /// Not installed (never, removed, or only its config files left).
    NotInstalled,
    /// No package manager to ask.
    Unknown,
}

/// Every package asked for, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageFacts {
    /// Which manager answered.
    pub manager: PackageManager,
    /// Every name asked for.
    pub packages: BTreeMap<String, PackageState>,
}

/// The probe's argv for `names`.
#[must_use]
pub fn argv(names: &[String]) -> Vec<String> {
    script_argv(SCRIPT, "toolkit-package-facts", names.iter().cloned())
}

/// Probes `names` on one host.
///
/// # Errors
/// When the command fails or its output is not dpkg's or rpm's.
pub async fn probe<E: Executor>(executor: &E, names: &[String]) -> Result<PackageFacts, FactError> {
    run_probe(executor, "package", &argv(names), |stdout| parse(stdout, names)).await
}

/// Parses the probe's output for `names`.
///
/// # Errors
/// On a missing manager line or a line that is neither dpkg's nor rpm's format.
pub fn parse(stdout: &str, names: &[String]) -> Result<PackageFacts, ParseError> {
    let mut lines = stdout.lines().enumerate();
    let manager = match lines.next() {
        Some((_, "manager dpkg")) => PackageManager::Dpkg,
        Some((_, "manager rpm")) => PackageManager::Rpm,
        Some((_, "manager none")) => PackageManager::None,
        Some((_, line)) => return Err(ParseError::new(1, line, "expected `manager dpkg|rpm|none`")),
        None => return Err(ParseError::new(1, "", "empty output")),
    };
    let default = if manager == PackageManager::None { PackageState::Unknown } else { PackageState::NotInstalled };
    let mut packages: BTreeMap<String, PackageState> =
        names.iter().map(|name| (name.clone(), default.clone())).collect();
    for (index, line) in lines {
        let parsed = match manager {
            PackageManager::Dpkg => parse_dpkg(line),
            PackageManager::Rpm => parse_rpm(line),
            PackageManager::None => Err("no output expected without a package manager"),
        };
        let (name, state) = parsed.map_err(|reason| ParseError::new(index + 1, line, reason))?;
        // Multi-arch packages have one line per architecture: installed wins.
        if let Some(slot) = packages.get_mut(name)
            && !matches!(slot, PackageState::Installed { .. })
        {
            *slot = state;
        }
    }
    Ok(PackageFacts { manager, packages })
}

/// `name want error status version`, e.g. `bash install ok installed 5.2.15-2+b8`
/// or `foo deinstall ok config-files 1.0`; the version is empty when not installed.
fn parse_dpkg(line: &str) -> Result<(&str, PackageState), &'static str> {
    let mut words = line.split(' ');
    let (Some(name), Some(_want), Some(_error), Some(status)) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err("expected `<package> <want> <error> <status> <version>`");
    };
    let version = words.next().unwrap_or_default();
    let state = if status == "installed" {
        PackageState::Installed { version: version.to_owned() }
    } else {
        PackageState::NotInstalled
    };
    Ok((name, state))
}

/// `name version-release`, or rpm's `package foo is not installed`.
fn parse_rpm(line: &str) -> Result<(&str, PackageState), &'static str> {
    if let Some(rest) = line.strip_prefix("package ")
        && let Some(name) = rest.strip_suffix(" is not installed")
    {
        return Ok((name, PackageState::NotInstalled));
    }
    match line.split_once(' ') {
        Some((name, version)) if !version.contains(' ') => {
            Ok((name, PackageState::Installed { version: version.to_owned() }))
        }
        _ => Err("expected `<package> <version>-<release>`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn parses_recorded_dpkg_output() {
        // Recorded on Debian 12 with [`SCRIPT`] over the names below.
        let recorded = include_str!("../../tests/fixtures/facts/package-probe-dpkg.txt");
        let asked = names(&["openssh-server", "frr", "bash", "nonexistent-package-xyz", "libc6"]);
        let facts = parse(recorded, &asked).expect("parses");
        assert_eq!(facts.manager, PackageManager::Dpkg);
        assert_eq!(
            facts.packages["openssh-server"],
            PackageState::Installed { version: "1:9.2p1-2+deb12u10".to_owned() }
        );
        assert!(matches!(facts.packages["frr"], PackageState::Installed { .. }));
        assert_eq!(facts.packages["nonexistent-package-xyz"], PackageState::NotInstalled);
        assert_eq!(facts.packages.len(), asked.len());
    }

    #[test]
    fn config_files_only_is_not_installed() {
        // dpkg's wording for a removed package whose configuration files remain.
        let facts = parse("manager dpkg\nsnmpd deinstall ok config-files 5.9.3\n", &names(&["snmpd"])).expect("parses");
        assert_eq!(facts.packages["snmpd"], PackageState::NotInstalled);
    }

    #[test]
    fn parses_rpm_wording() {
        // rpm's `--qf '%{NAME} %{VERSION}-%{RELEASE}\n'` and its not-installed line
        // (rpm(8)); written by hand: no RPM host to record from here.
        let facts =
            parse("manager rpm\nbash 5.1.8-9.el9\npackage slurm is not installed\n", &names(&["bash", "slurm"]))
                .expect("parses");
        assert_eq!(facts.manager, PackageManager::Rpm);
        assert_eq!(facts.packages["bash"], PackageState::Installed { version: "5.1.8-9.el9".to_owned() });
        assert_eq!(facts.packages["slurm"], PackageState::NotInstalled);
    }

    #[test]
    fn no_manager_means_unknown() {
        let facts = parse("manager none\n", &names(&["x"])).expect("parses");
        assert_eq!(facts.packages["x"], PackageState::Unknown);
        assert!(parse("", &names(&["x"])).is_err());
        assert!(parse("manager dpkg\ngarbage\n", &names(&["x"])).is_err());
    }

    #[test]
    fn the_script_runs_locally() {
        let asked = names(&["bash", "nonexistent-package-xyz"]);
        let argv = argv(&asked);
        let output = std::process::Command::new(&argv[0]).args(&argv[1..]).output().expect("sh");
        let facts = parse(&String::from_utf8_lossy(&output.stdout), &asked).expect("parses");
        if facts.manager == PackageManager::Dpkg {
            assert!(matches!(facts.packages["bash"], PackageState::Installed { .. }));
        }
        assert!(!matches!(facts.packages["nonexistent-package-xyz"], PackageState::Installed { .. }));
    }
}
