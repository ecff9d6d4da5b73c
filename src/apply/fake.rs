//! A scripted transport for the walker's unit tests (integration tests use real
//! sshd): every call is logged in one shared, ordered log; answers come from a
//! closure; writes succeed unless their path is listed as failing.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::transport::{Connector, Executor, ExitStatus, Output, TransportError, WriteOutcome, WriteRequest};

/// One call seen by a fake host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    Exec { host: String, argv: Vec<String> },
    Write { host: String, path: String },
}

impl Call {
    pub(crate) fn host(&self) -> &str {
        match self {
            Self::Exec { host, .. } | Self::Write { host, .. } => host,
        }
    }
}

type Responder = dyn Fn(&str, &[String]) -> Output + Send + Sync;

/// What every fake host shares: the log, the answers, the failing paths.
pub(crate) struct Script {
    pub(crate) log: Mutex<Vec<Call>>,
    pub(crate) respond: Box<Responder>,
    pub(crate) failing_writes: HashSet<String>,
    pub(crate) unchanged_writes: HashSet<String>,
    pub(crate) delay: Duration,
    in_flight: AtomicUsize,
    pub(crate) max_in_flight: AtomicUsize,
}

impl Script {
    pub(crate) fn new(respond: impl Fn(&str, &[String]) -> Output + Send + Sync + 'static) -> Self {
        Self {
            log: Mutex::new(Vec::new()),
            respond: Box::new(respond),
            failing_writes: HashSet::new(),
            unchanged_writes: HashSet::new(),
            delay: Duration::from_millis(1),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.log.lock().expect("log").clone()
    }

    async fn step(&self, call: Call) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.log.lock().expect("log").push(call);
        tokio::time::sleep(self.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The answer of [`crate::facts::command`]'s script on a host where no guard holds
/// and no read finds anything: one failed record per probe in `script`.
pub(crate) fn nothing_done(script: &str) -> String {
    let mut out = String::new();
    for line in script.lines() {
        for kind in ["check", "read"] {
            let Some(rest) = line.strip_prefix(&format!("printf '{kind} ")) else { continue };
            let index = rest.split(' ').next().unwrap_or_default();
            let _ =
                if kind == "check" { writeln!(out, "check {index} 1") } else { writeln!(out, "read {index} 1 0\n") };
        }
    }
    out
}

/// The answers of a Debian host where nothing is installed yet and systemd runs.
pub(crate) fn fresh_debian(_host: &str, argv: &[String]) -> Output {
    let ok = |stdout: String| Output { status: ExitStatus::Code(0), stdout: stdout.into_bytes(), stderr: Vec::new() };
    match argv.get(3).map(String::as_str) {
        Some("toolkit-package-facts") => ok("manager dpkg\n".to_owned()),
        Some("toolkit-service-facts") => {
            ok(format!("systemd running\n{}", "disabled inactive\n".repeat(argv.len() - 4)))
        }
        Some("toolkit-directory") => ok("changed\n".to_owned()),
        Some("toolkit-command-facts") => ok(nothing_done(&argv[2])),
        _ if argv.first().map(String::as_str) == Some("test") => {
            Output { status: ExitStatus::Code(1), stdout: Vec::new(), stderr: Vec::new() }
        }
        _ => ok(String::new()),
    }
}

pub(crate) struct FakeHost {
    name: String,
    script: Arc<Script>,
}

impl Executor for FakeHost {
    fn host(&self) -> &str {
        &self.name
    }

    async fn exec(&self, argv: &[String]) -> Result<Output, TransportError> {
        self.script.step(Call::Exec { host: self.name.clone(), argv: argv.to_vec() }).await;
        Ok((self.script.respond)(&self.name, argv))
    }

    async fn exec_with_input(&self, argv: &[String], input: &[u8]) -> Result<Output, TransportError> {
        if argv.get(3).map(String::as_str) == Some("toolkit-batch") {
            return Ok(self.batch(&argv[5..], input).await);
        }
        self.exec(argv).await
    }

    async fn write_file(&self, request: &WriteRequest<'_>) -> Result<WriteOutcome, TransportError> {
        self.script.step(Call::Write { host: self.name.clone(), path: request.path.to_owned() }).await;
        if self.script.failing_writes.contains(request.path) {
            return Err(TransportError::CheckFailed {
                host: self.name.clone(),
                path: request.path.to_owned(),
                command: "check".to_owned(),
                output: "rejected".to_owned(),
            });
        }
        if self.script.unchanged_writes.contains(request.path) {
            return Ok(WriteOutcome::Unchanged);
        }
        Ok(WriteOutcome::Written)
    }
}

impl FakeHost {
    /// Plays a batch script (see `transport::batch`): each file is one scripted
    /// write, each directory one exec, stopping at the first failing write.
    async fn batch(&self, mut words: &[String], _input: &[u8]) -> Output {
        let mut stdout = String::new();
        while let Some(kind) = words.first() {
            if kind == "d" {
                let argv = vec!["mkdir".to_owned(), words[1].clone()];
                self.script.step(Call::Exec { host: self.name.clone(), argv: argv.clone() }).await;
                let output = (self.script.respond)(&self.name, &argv);
                stdout.push_str(if output.success() { "changed\n" } else { "" });
                words = &words[4..];
                continue;
            }
            let path = words[1].as_str();
            self.script.step(Call::Write { host: self.name.clone(), path: path.to_owned() }).await;
            if self.script.failing_writes.contains(path) {
                return Output {
                    status: ExitStatus::Code(1),
                    stdout: stdout.into_bytes(),
                    stderr: b"rejected".to_vec(),
                };
            }
            stdout.push_str(if self.script.unchanged_writes.contains(path) { "unchanged\n" } else { "written\n" });
            words = &words[8..];
        }
        Output { status: ExitStatus::Code(0), stdout: stdout.into_bytes(), stderr: Vec::new() }
    }
}

/// Hands out fake hosts, one cached per name as the SSH pool does; hosts in
/// `unreachable` refuse the connection, and so do hosts in `down` while they are
/// there (shared, so a responder can take a host down, as a reboot does).
pub(crate) struct FakeConnector {
    pub(crate) script: Arc<Script>,
    pub(crate) unreachable: HashSet<String>,
    pub(crate) down: Arc<Mutex<HashSet<String>>>,
    pub(crate) connects: Mutex<Vec<String>>,
    pub(crate) forgotten: Mutex<Vec<String>>,
    hosts: Mutex<HashMap<String, Arc<FakeHost>>>,
}

impl FakeConnector {
    pub(crate) fn new(script: Script) -> Self {
        Self {
            script: Arc::new(script),
            unreachable: HashSet::new(),
            down: Arc::new(Mutex::new(HashSet::new())),
            connects: Mutex::new(Vec::new()),
            forgotten: Mutex::new(Vec::new()),
            hosts: Mutex::new(HashMap::new()),
        }
    }
}

impl Connector for FakeConnector {
    type Executor = FakeHost;

    async fn connect(&self, host: &str) -> Result<Arc<FakeHost>, Arc<TransportError>> {
        self.connects.lock().expect("connects").push(host.to_owned());
        if self.unreachable.contains(host) || self.down.lock().expect("down").contains(host) {
            return Err(Arc::new(TransportError::Connect {
                host: host.to_owned(),
                address: format!("{host}:22"),
                source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            }));
        }
        let mut hosts = self.hosts.lock().expect("hosts");
        let fake = hosts
            .entry(host.to_owned())
            .or_insert_with(|| Arc::new(FakeHost { name: host.to_owned(), script: Arc::clone(&self.script) }));
        Ok(Arc::clone(fake))
    }

    fn forget(&self, host: &str) {
        self.forgotten.lock().expect("forgotten").push(host.to_owned());
        self.hosts.lock().expect("hosts").remove(host);
    }
}
