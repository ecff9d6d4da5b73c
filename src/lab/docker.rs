//! Docker through its command line: one argv per call (never a shell string), answers
//! parsed from `--format` or `inspect` JSON into the few fields the lab reads.
//!
//! Stage: IO (the only module of the lab that runs `docker`). Input: argv vectors.
//! Output: text, exit status or typed inspect results; [`DockerError`] names the
//! command and carries Docker's own message.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use ipnet::Ipv4Net;
use serde::Deserialize;
use thiserror::Error;

/// Why a Docker command failed.
#[derive(Debug, Error)]
pub enum DockerError {
    /// No `docker` program.
    #[error(
        "`{program}` was not found: the lab needs Docker Engine (the `docker` command; TOOLKIT_DOCKER names another)"
    )]
    NotFound {
        /// The program looked for.
        program: String,
    },
    /// The program ran but the daemon did not answer.
    #[error("cannot reach the Docker daemon: {message}")]
    Unreachable {
        /// Docker's message.
        message: String,
    },
    /// A command failed.
    #[error("`docker {command}` failed: {message}")]
    Failed {
        /// The arguments, for the message.
        command: String,
        /// Docker's message (stderr).
        message: String,
    },
    /// The program could not be started.
    #[error("cannot run `{program}`")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Docker answered something the lab cannot read.
    #[error("cannot read the answer of `docker {command}`")]
    Parse {
        /// The arguments.
        command: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// The `docker` command line.
#[derive(Debug, Clone)]
pub struct Docker {
    program: OsString,
}

/// A network as `docker network inspect` shows it (the fields the lab reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkInfo {
    /// Docker's ID; its first 12 digits name the bridge (`br-…`).
    #[serde(default)]
    pub id: String,
    /// Name.
    pub name: String,
    /// Labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// `--internal`.
    #[serde(default)]
    pub internal: bool,
    /// Address management.
    #[serde(rename = "IPAM", default)]
    pub ipam: Option<Ipam>,
}

/// IPAM section of a network.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Ipam {
    /// Pools.
    #[serde(default)]
    pub config: Option<Vec<IpamConfig>>,
}

/// One IPAM pool.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct IpamConfig {
    /// Subnet (IPv4 or IPv6).
    #[serde(default)]
    pub subnet: Option<String>,
}

impl NetworkInfo {
    /// Its IPv4 subnets.
    #[must_use]
    pub fn subnets(&self) -> Vec<Ipv4Net> {
        self.ipam
            .iter()
            .flat_map(|ipam| ipam.config.iter().flatten())
            .filter_map(|config| config.subnet.as_deref()?.parse().ok())
            .collect()
    }

    /// The value of a label.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    /// The Linux bridge Docker made for it (bridge driver, no explicit name).
    #[must_use]
    pub fn bridge(&self) -> Option<String> {
        self.id.get(..12).map(|short| format!("br-{short}"))
    }
}

/// A container as `docker container inspect` shows it (the fields the lab reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerInfo {
    /// Name, with Docker's leading `/`.
    pub name: String,
    /// Run state.
    pub state: ContainerState,
    /// Configuration.
    pub config: ContainerConfig,
    /// Networks.
    pub network_settings: NetworkSettings,
    /// Times Docker restarted it by its restart policy (a `systemctl reboot` inside)
    /// since it was last started by hand.
    #[serde(default)]
    pub restart_count: u64,
    /// Host-side settings (restart policy).
    #[serde(default)]
    pub host_config: HostConfig,
}

/// Host-side settings of a container (the fields the lab reads).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostConfig {
    /// What Docker does when the container's main process exits.
    #[serde(default)]
    pub restart_policy: RestartPolicy,
}

/// `--restart` of a container.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RestartPolicy {
    /// `no`, `on-failure`, `always`, `unless-stopped` (empty means `no`).
    #[serde(default)]
    pub name: String,
}

/// Run state.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerState {
    /// `created`, `running`, `exited`….
    pub status: String,
    /// Running now.
    pub running: bool,
    /// When its main process last started (RFC 3339).
    #[serde(default)]
    pub started_at: String,
}

/// Configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerConfig {
    /// Image reference it was created from.
    pub image: String,
    /// Labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

/// Networks of a container.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkSettings {
    /// By network name.
    #[serde(default)]
    pub networks: BTreeMap<String, Endpoint>,
}

/// A container's endpoint on one network.
#[derive(Debug, Clone, Deserialize)]
pub struct Endpoint {
    /// Address Docker assigned (empty when not running).
    #[serde(rename = "IPAddress", default)]
    pub ip_address: String,
    /// MAC address (empty when not running).
    #[serde(rename = "MacAddress", default)]
    pub mac_address: String,
    /// Static address asked for with `--ip`.
    #[serde(rename = "IPAMConfig", default)]
    pub ipam_config: Option<EndpointIpam>,
}

/// Static addresses of an endpoint.
#[derive(Debug, Clone, Deserialize)]
pub struct EndpointIpam {
    /// IPv4 address.
    #[serde(rename = "IPv4Address", default)]
    pub ipv4_address: Option<String>,
}

impl ContainerInfo {
    /// The value of a label.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        self.config.labels.as_ref()?.get(key).map(String::as_str)
    }

    /// Name without Docker's leading `/`.
    #[must_use]
    pub fn short_name(&self) -> &str {
        self.name.trim_start_matches('/')
    }
}

impl Endpoint {
    /// The address: Docker's current one, else the static one asked for.
    #[must_use]
    pub fn address(&self) -> String {
        if self.ip_address.is_empty() {
            self.ipam_config.as_ref().and_then(|c| c.ipv4_address.clone()).unwrap_or_default()
        } else {
            self.ip_address.clone()
        }
    }
}

impl Default for Docker {
    fn default() -> Self {
        Self::new()
    }
}

impl Docker {
    /// `docker` from `PATH`, or the program `TOOLKIT_DOCKER` names.
    #[must_use]
    pub fn new() -> Self {
        Self { program: std::env::var_os("TOOLKIT_DOCKER").unwrap_or_else(|| OsString::from("docker")) }
    }

    /// A command for `args`, for callers that wire stdio themselves (`exec -it`, `import`).
    #[must_use]
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut command = Command::new(&self.program);
        command.args(args);
        command
    }

    /// The daemon's version, or why it cannot be reached.
    ///
    /// # Errors
    /// [`DockerError::NotFound`] without a `docker` program, [`DockerError::Unreachable`]
    /// when the daemon does not answer.
    pub fn ping(&self) -> Result<String, DockerError> {
        let output = self.raw(&["version", "--format", "{{.Server.Version}}"], None)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        } else {
            Err(DockerError::Unreachable { message: last_words(&output) })
        }
    }

    /// The cgroup version of the daemon's host (`1` or `2`).
    ///
    /// # Errors
    /// As [`Docker::output`].
    pub fn cgroup_version(&self) -> Result<String, DockerError> {
        self.output(&["info", "--format", "{{.CgroupVersion}}"])
    }

    /// Runs `args`; stdout, trimmed, when it succeeds.
    ///
    /// # Errors
    /// [`DockerError::Failed`] with Docker's message when it exits non-zero.
    pub fn output<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String, DockerError> {
        self.output_with_input(args, None)
    }

    /// Runs `args` with `input` on stdin; stdout, trimmed, when it succeeds.
    ///
    /// # Errors
    /// As [`Docker::output`].
    pub fn output_with_input<S: AsRef<OsStr>>(&self, args: &[S], input: Option<&str>) -> Result<String, DockerError> {
        let output = self.raw(args, input)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim_end().to_owned())
        } else {
            Err(DockerError::Failed { command: describe(args), message: last_words(&output) })
        }
    }

    /// Runs `args` and returns the raw output, whatever the exit status.
    ///
    /// # Errors
    /// [`DockerError::NotFound`] or [`DockerError::Spawn`] when it cannot run at all.
    pub fn raw<S: AsRef<OsStr>>(&self, args: &[S], input: Option<&str>) -> Result<Output, DockerError> {
        let mut command = self.command(args);
        command.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|source| self.spawn_error(source))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            // A failed write shows up as the command's own error below.
            let _ = stdin.write_all(text.as_bytes());
        }
        child.wait_with_output().map_err(|source| self.spawn_error(source))
    }

    pub(crate) fn spawn_error(&self, source: std::io::Error) -> DockerError {
        let program = self.program.to_string_lossy().into_owned();
        if source.kind() == std::io::ErrorKind::NotFound {
            DockerError::NotFound { program }
        } else {
            DockerError::Spawn { program, source }
        }
    }

    /// True when the image exists locally.
    ///
    /// # Errors
    /// When Docker cannot be run.
    pub fn image_exists(&self, reference: &str) -> Result<bool, DockerError> {
        Ok(self.raw(&["image", "inspect", "--format", "{{.Id}}", reference], None)?.status.success())
    }

    /// Every network Docker has.
    ///
    /// # Errors
    /// As [`Docker::output`]; [`DockerError::Parse`] for unreadable JSON.
    pub fn networks(&self) -> Result<Vec<NetworkInfo>, DockerError> {
        // Another lab going down may remove a network between the listing and the
        // inspection: list again, a few times.
        let mut attempts = 0;
        loop {
            let ids = self.output(&["network", "ls", "--quiet", "--no-trunc"])?;
            let mut args = vec!["network", "inspect"];
            args.extend(ids.lines().map(str::trim).filter(|id| !id.is_empty()));
            if args.len() == 2 {
                return Ok(Vec::new());
            }
            match self.output(&args) {
                Ok(json) => {
                    return serde_json::from_str(&json)
                        .map_err(|source| DockerError::Parse { command: "network inspect".into(), source });
                }
                Err(DockerError::Failed { message, .. }) if attempts < 3 && message.contains("not found") => {
                    attempts += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The container named `name`, or `None`.
    ///
    /// # Errors
    /// As [`Docker::output`], except that a missing container is `Ok(None)`.
    pub fn container(&self, name: &str) -> Result<Option<ContainerInfo>, DockerError> {
        let output = self.raw(&["container", "inspect", name], None)?;
        if !output.status.success() {
            let message = last_words(&output);
            if message.contains("No such") {
                return Ok(None);
            }
            return Err(DockerError::Failed { command: format!("container inspect {name}"), message });
        }
        let mut found: Vec<ContainerInfo> = serde_json::from_slice(&output.stdout)
            .map_err(|source| DockerError::Parse { command: "container inspect".into(), source })?;
        Ok(found.pop())
    }

    /// Names of containers (any state) with `label=value`.
    ///
    /// # Errors
    /// As [`Docker::output`].
    pub fn containers_labelled(&self, label: &str, value: &str) -> Result<Vec<String>, DockerError> {
        let filter = format!("label={label}={value}");
        let names = self.output(&["container", "ls", "--all", "--filter", &filter, "--format", "{{.Names}}"])?;
        Ok(sorted_lines(&names))
    }

    /// Names of networks with `label=value`.
    ///
    /// # Errors
    /// As [`Docker::output`].
    pub fn networks_labelled(&self, label: &str, value: &str) -> Result<Vec<String>, DockerError> {
        let filter = format!("label={label}={value}");
        let names = self.output(&["network", "ls", "--filter", &filter, "--format", "{{.Name}}"])?;
        Ok(sorted_lines(&names))
    }

    /// Runs `command` in a running container; its output whatever its exit status.
    ///
    /// # Errors
    /// When Docker cannot be run.
    pub fn exec_raw(&self, container: &str, command: &[&str], input: Option<&str>) -> Result<Output, DockerError> {
        let mut args = vec!["exec"];
        if input.is_some() {
            args.push("--interactive");
        }
        args.push(container);
        args.extend_from_slice(command);
        self.raw(&args, input)
    }

    /// Runs `command` in a running container; stdout when it exits 0.
    ///
    /// # Errors
    /// [`DockerError::Failed`] with the command's stderr when it does not.
    pub fn exec(&self, container: &str, command: &[&str], input: Option<&str>) -> Result<String, DockerError> {
        let output = self.exec_raw(container, command, input)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(DockerError::Failed {
                command: format!("exec {container} {}", command.join(" ")),
                message: last_words(&output),
            })
        }
    }
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
    lines.sort();
    lines
}

fn describe<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}

/// The last lines of stderr (or stdout), where programs say what went wrong.
#[must_use]
pub fn last_words(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let text = if stderr.trim().is_empty() { String::from_utf8_lossy(&output.stdout) } else { stderr };
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
    if tail.is_empty() { format!("exit status {}", output.status) } else { tail }
}
