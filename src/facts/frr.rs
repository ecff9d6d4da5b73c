//! FRR facts: the running configuration, as `vtysh -c 'show running-config'` prints
//! it.
//!
//! Stage: observe. Input: an optional FRR pathspace (`vtysh -N`). Output: [`FrrFact`]
//! — not installed, not running (with vtysh's message), or the running
//! configuration with its version, hostname and BGP instance picked out.

use super::FactError;
use crate::transport::{Executor, tail};

/// First line says whether vtysh exists; then vtysh's own output.
const SCRIPT: &str = r#"command -v vtysh >/dev/null 2>&1 || { echo 'frr absent'; exit 0; }
echo 'frr present'
exec vtysh "$@" -c 'show running-config'
"#;

/// FRR on one host or switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrrFact {
    /// No `vtysh`.
    NotInstalled,
    /// vtysh could not reach the daemons.
    NotRunning {
        /// What vtysh said.
        message: String,
    },
    /// The running configuration.
    Running(FrrConfig),
}

/// A running configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrrConfig {
    /// From `frr version` on: the configuration text, without vtysh's banner.
    pub text: String,
    /// `frr version 8.4.4`.
    pub version: Option<String>,
    /// The last `hostname` line (zebra prints the system's, then the configured one).
    pub hostname: Option<String>,
    /// `router bgp <asn>` of the default VRF.
    pub bgp_asn: Option<u32>,
    /// `bgp router-id` of that instance.
    pub router_id: Option<String>,
}

/// The probe's argv; `pathspace` selects a named FRR instance (`vtysh -N`).
#[must_use]
pub fn argv(pathspace: Option<&str>) -> Vec<String> {
    let mut argv = vec!["sh".to_owned(), "-c".to_owned(), SCRIPT.to_owned(), "toolkit-frr-facts".to_owned()];
    if let Some(pathspace) = pathspace {
        argv.extend(["-N".to_owned(), pathspace.to_owned()]);
    }
    argv
}

/// Probes one host.
///
/// # Errors
/// Only when the command cannot run; vtysh failing is [`FrrFact::NotRunning`].
pub async fn probe<E: Executor>(executor: &E, pathspace: Option<&str>) -> Result<FrrFact, FactError> {
    let output = executor.exec(&argv(pathspace)).await?;
    let stdout = output.stdout_text();
    let Some(rest) = stdout.strip_prefix("frr present\n") else {
        return if stdout.starts_with("frr absent") {
            Ok(FrrFact::NotInstalled)
        } else {
            Err(FactError::Probe {
                host: executor.host().to_owned(),
                fact: "frr",
                stderr: output.stderr_tail(),
                status: output.status,
            })
        };
    };
    if output.success() {
        Ok(FrrFact::Running(parse(rest)))
    } else {
        let message = format!("{}\n{}", tail(rest), output.stderr_tail());
        Ok(FrrFact::NotRunning { message: message.trim().to_owned() })
    }
}

/// Parses `show running-config` output.
#[must_use]
pub fn parse(stdout: &str) -> FrrConfig {
    // vtysh prints "Building configuration...", a blank line and "Current
    // configuration:" before the configuration itself.
    let text = stdout
        .find("Current configuration:")
        .and_then(|start| stdout[start..].find('\n').map(|end| &stdout[start + end + 1..]))
        .unwrap_or(stdout);
    let mut config = FrrConfig { text: text.to_owned(), version: None, hostname: None, bgp_asn: None, router_id: None };
    let mut in_default_bgp = false;
    for line in text.lines() {
        if let Some(version) = line.strip_prefix("frr version ") {
            config.version = Some(version.trim().to_owned());
        } else if let Some(hostname) = line.strip_prefix("hostname ") {
            config.hostname = Some(hostname.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("router bgp ") {
            let mut words = rest.split_whitespace();
            let asn = words.next().and_then(|asn| asn.parse().ok());
            in_default_bgp = words.next().is_none() && config.bgp_asn.is_none();
            if in_default_bgp {
                config.bgp_asn = asn;
            }
        } else if in_default_bgp && let Some(router_id) = line.trim().strip_prefix("bgp router-id ") {
            config.router_id = Some(router_id.trim().to_owned());
        } else if line == "exit" {
            in_default_bgp = false;
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_recorded_running_config() {
        // Recorded from FRR 8.4.4 (Debian 12): zebra and bgpd in their own pathspace,
        // bgpd started with a leaf's configuration; see tests/fixtures/facts/README.md.
        let recorded = include_str!("../../tests/fixtures/facts/frr-running-config.txt");
        let config = parse(recorded);
        assert_eq!(config.version.as_deref(), Some("8.4.4"));
        assert_eq!(config.hostname.as_deref(), Some("leaf01"));
        assert_eq!(config.bgp_asn, Some(65101));
        assert_eq!(config.router_id.as_deref(), Some("10.0.0.11"));
        assert!(config.text.starts_with("!\nfrr version 8.4.4\n"), "{}", config.text);
        assert!(config.text.trim_end().ends_with("end"));
    }

    #[test]
    fn a_vrf_instance_is_not_the_default_one() {
        let config = parse("router bgp 65001 vrf red\n bgp router-id 1.1.1.1\nexit\n");
        assert_eq!((config.bgp_asn, config.router_id), (None, None));
    }

    #[test]
    fn the_script_reports_vtysh_presence_locally() {
        // `-N` names a pathspace no daemon uses, so vtysh (when installed) fails to connect.
        let argv = argv(Some("toolkit-no-such-instance"));
        let output = std::process::Command::new(&argv[0]).args(&argv[1..]).output().expect("sh");
        let stdout = String::from_utf8_lossy(&output.stdout);
        if std::path::Path::new("/usr/bin/vtysh").exists() {
            assert!(stdout.starts_with("frr present\n") && !output.status.success(), "{stdout}");
        } else {
            assert_eq!(stdout, "frr absent\n");
        }
    }
}
