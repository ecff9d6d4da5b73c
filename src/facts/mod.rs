//! Facts: what is on a host now, read, never decided on.
//!
//! Stage: observe. Input: an [`Executor`] for one host and what to look at (paths,
//! packages, units). Output: typed facts ([`file::FileState`],
//! [`package::PackageState`], [`service::ServiceFact`], [`os::OsFact`],
//! [`frr::FrrFact`], [`command::CommandFact`]). Each probe is one remote command for all of its subjects, so a
//! host costs one round trip per fact kind however many resources it has; the
//! parsers are pure and tested on outputs recorded from real systems
//! (`tests/fixtures/facts/`). Plan compares; apply changes; facts only read.

pub mod command;
pub mod file;
pub mod frr;
pub mod os;
pub mod package;
pub mod service;

use std::collections::HashMap;

use crate::resource::{Desired, Resource};
use crate::transport::{Executor, ExitStatus, Output, TransportError};

/// A probe that could not run or whose output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FactError {
    /// The command did not get to run.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The probe ran and failed.
    #[error("{fact} probe on `{host}` failed ({status}): {stderr}")]
    Probe {
        /// Target name.
        host: String,
        /// Which probe.
        fact: &'static str,
        /// How it ended.
        status: ExitStatus,
        /// Last lines of stderr.
        stderr: String,
    },
    /// The output was not what the probe prints.
    #[error("{fact} probe on `{host}`: cannot read output line {line} `{text}`: {reason}")]
    Parse {
        /// Target name.
        host: String,
        /// Which probe.
        fact: &'static str,
        /// 1-based line of the output.
        line: usize,
        /// The line.
        text: String,
        /// What was expected.
        reason: String,
    },
}

/// A line a parser could not read; the probe adds host and fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// The line.
    pub text: String,
    /// What was expected.
    pub reason: String,
}

impl ParseError {
    pub(crate) fn new(line: usize, text: &str, reason: impl Into<String>) -> Self {
        Self { line, text: text.to_owned(), reason: reason.into() }
    }

    fn for_probe(self, host: &str, fact: &'static str) -> FactError {
        FactError::Parse { host: host.to_owned(), fact, line: self.line, text: self.text, reason: self.reason }
    }
}

/// Runs a probe script and hands its stdout to `parse`, turning failures into
/// [`FactError`]s that name host and probe.
async fn run_probe<E: Executor, T>(
    executor: &E,
    fact: &'static str,
    argv: &[String],
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, FactError> {
    let output: Output = executor.exec(argv).await?;
    if !output.success() {
        return Err(FactError::Probe {
            host: executor.host().to_owned(),
            fact,
            stderr: output.stderr_tail(),
            status: output.status,
        });
    }
    parse(&output.stdout_text()).map_err(|error| error.for_probe(executor.host(), fact))
}

/// `sh -c SCRIPT probe-name args…`: the script sees `args` as `"$@"`.
fn script_argv(script: &str, name: &str, args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut words = vec!["sh".to_owned(), "-c".to_owned(), script.to_owned(), name.to_owned()];
    words.extend(args);
    words
}

/// The facts that the resources of one host are compared with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// By path: every file and directory resource's path.
    pub files: HashMap<String, file::FileState>,
    /// Every package resource's name; `None` when no package was asked for.
    pub packages: Option<package::PackageFacts>,
    /// By unit name: every service resource.
    pub services: HashMap<String, service::ServiceFact>,
    /// By resource id: every command's guard or read (none for a command without either).
    pub commands: HashMap<String, command::CommandFact>,
}

/// Reads the facts for `resources` (all on `executor`'s host): one probe per kind
/// (every command's guard or read in one), the kinds run concurrently over the one
/// connection.
///
/// # Errors
/// The first probe that fails.
pub async fn gather<E: Executor>(executor: &E, resources: &[&Resource]) -> Result<HostFacts, FactError> {
    let mut paths = Vec::new();
    let mut packages = Vec::new();
    let mut units = Vec::new();
    let mut commands = Vec::new();
    let mut command_ids = Vec::new();
    for resource in resources {
        match &*resource.desired {
            Desired::File { path, .. } | Desired::Directory { path, .. } => paths.push(path.clone()),
            Desired::Package { name } => packages.push(name.clone()),
            Desired::Service { name, .. } => units.push(name.clone()),
            Desired::Command { reads: Some(reads), .. } => {
                commands.push(command::Probe::Read(&reads.argv));
                command_ids.push(resource.id.to_string());
            }
            Desired::Command { creates, unless, .. } if creates.is_some() || unless.is_some() => {
                commands.push(command::Probe::Guard { creates: creates.as_deref(), unless: unless.as_deref() });
                command_ids.push(resource.id.to_string());
            }
            Desired::Command { .. } | Desired::Api(_) => {}
        }
    }
    let files = async { if paths.is_empty() { Ok(Vec::new()) } else { file::probe(executor, &paths).await } };
    let package_facts =
        async { if packages.is_empty() { Ok(None) } else { package::probe(executor, &packages).await.map(Some) } };
    let service_facts =
        async { if units.is_empty() { Ok(Vec::new()) } else { service::probe(executor, &units).await } };
    let (files, packages, services, commands) =
        tokio::try_join!(files, package_facts, service_facts, command::probe(executor, &commands))?;
    Ok(HostFacts {
        files: paths.into_iter().zip(files).collect(),
        packages,
        services: services.into_iter().map(|fact| (fact.unit.clone(), fact)).collect(),
        commands: command_ids.into_iter().zip(commands).collect(),
    })
}
