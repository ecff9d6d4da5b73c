//! Simulated hosts for benchmarks of a whole deploy: each keeps what toolkit did to
//! it (files by hash and metadata, directories, packages, enabled and running units,
//! commands run) and answers toolkit's probes from that, as a Debian host with
//! systemd would. A host starts empty; after a deploy it is converged, so a second
//! deploy measures the orchestration of a no-change run — the real observe, plan,
//! walker and state writer — without thousands of machines.
//!
//! Commands are opaque argvs to a host. The hosts are told the graph's commands so
//! that, once a command has run, its guard holds and its read prints the values it
//! set, which is what a real host answers after the command did its work.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::graph::ResourceGraph;
use crate::resource::Desired;
use crate::transport::{Connector, Executor, ExitStatus, Output, TransportError, WriteOutcome, WriteRequest, quote};

/// What a host knows of its commands, keyed by quoted command lines (the form the
/// probe scripts carry them in).
#[derive(Default)]
struct Commands {
    /// A `creates` path (quoted) → the command that creates it.
    creates: HashMap<String, String>,
    /// An `unless` line → the command it guards.
    unless: HashMap<String, String>,
    /// A read line → the command it reads, and what it prints once that ran.
    reads: HashMap<String, (String, String)>,
}

#[derive(Default)]
struct Disk {
    /// Path → `sha256 mode owner group`, as the file probe prints it.
    files: HashMap<String, String>,
    /// Path → `mode owner`.
    dirs: HashMap<String, String>,
    packages: HashSet<String>,
    enabled: HashSet<String>,
    active: HashSet<String>,
    /// Command lines run.
    ran: HashSet<String>,
}

/// One simulated host.
pub(crate) struct SimHost {
    name: String,
    commands: Arc<Commands>,
    disk: Mutex<Disk>,
}

/// Hands out simulated hosts, one per name, each keeping its disk across deploys.
pub(crate) struct SimCluster {
    commands: HashMap<String, Arc<Commands>>,
    hosts: Mutex<HashMap<String, Arc<SimHost>>>,
}

impl SimCluster {
    /// Empty hosts for the targets of `graph`.
    pub(crate) fn new(graph: &ResourceGraph) -> Self {
        let mut commands: HashMap<String, Commands> = HashMap::new();
        for resource in &graph.resources {
            let Desired::Command { argv, creates, unless, reads, .. } = &*resource.desired else { continue };
            let Ok(line) = quote::command_line(argv) else { continue };
            let host = commands.entry(resource.target().to_string()).or_default();
            if let Some(path) = creates {
                host.creates.insert(quote::quote(path).into_owned(), line.clone());
            }
            if let Some(unless) = unless.as_deref().and_then(|unless| quote::command_line(unless).ok()) {
                host.unless.insert(unless, line.clone());
            }
            if let Some(reads) = reads
                && let Ok(read) = quote::command_line(&reads.argv)
            {
                let printed = reads.wanted.iter().fold(String::new(), |mut printed, (_, value)| {
                    let _ = writeln!(printed, "{value}");
                    printed
                });
                host.reads.insert(read, (line.clone(), printed));
            }
        }
        Self {
            commands: commands.into_iter().map(|(host, commands)| (host, Arc::new(commands))).collect(),
            hosts: Mutex::new(HashMap::new()),
        }
    }
}

impl Connector for SimCluster {
    type Executor = SimHost;

    async fn connect(&self, host: &str) -> Result<Arc<SimHost>, Arc<TransportError>> {
        let mut hosts = self.hosts.lock().expect("hosts");
        let found = hosts.entry(host.to_owned()).or_insert_with(|| {
            Arc::new(SimHost {
                name: host.to_owned(),
                commands: self.commands.get(host).cloned().unwrap_or_default(),
                disk: Mutex::new(Disk::default()),
            })
        });
        Ok(Arc::clone(found))
    }
}

fn ok(stdout: String) -> Output {
    Output { status: ExitStatus::Code(0), stdout: stdout.into_bytes(), stderr: Vec::new() }
}

impl SimHost {
    fn answer(&self, argv: &[String]) -> Output {
        let mut disk = self.disk.lock().expect("disk");
        let subjects = argv.get(4..).unwrap_or_default();
        match argv.get(3).map(String::as_str) {
            Some("toolkit-file-facts") => {
                // Written in place: the host's answer is not what the bench measures.
                let mut out = String::with_capacity(subjects.len() * 96);
                for path in subjects {
                    file_line(&mut out, &disk, path);
                }
                ok(out)
            }
            Some("toolkit-package-facts") => {
                let mut out = String::from("manager dpkg\n");
                for name in subjects.iter().filter(|name| disk.packages.contains(*name)) {
                    let _ = writeln!(out, "{name} install ok installed 1.0-1");
                }
                ok(out)
            }
            Some("toolkit-service-facts") => {
                let mut out = String::from("systemd running\n");
                for unit in subjects {
                    let enabled = if disk.enabled.contains(unit) { "enabled" } else { "disabled" };
                    let active = if disk.active.contains(unit) { "active" } else { "inactive" };
                    let _ = writeln!(out, "{enabled} {active}");
                }
                ok(out)
            }
            Some("toolkit-os-facts") => ok("6.1.0-28-amd64\nx86_64\nID=debian\nVERSION_ID=\"12\"\n".to_owned()),
            Some("toolkit-command-facts") => ok(self.command_facts(&disk, &argv[2])),
            Some("toolkit-directory") => {
                let (path, mode, owner) = (&subjects[0], &subjects[1], &subjects[2]);
                disk.dirs.insert(path.clone(), format!("{mode} {owner}"));
                ok("changed\n".to_owned())
            }
            _ => {
                if argv.first().map(String::as_str) == Some("systemctl") {
                    systemctl(&mut disk, argv);
                } else if argv.iter().any(|word| word == "apt-get") && argv.iter().any(|word| word == "install") {
                    let names = argv.iter().skip_while(|word| *word != "install").skip(1);
                    disk.packages.extend(names.filter(|word| !word.starts_with('-') && !word.contains("::")).cloned());
                } else if let Ok(line) = quote::command_line(argv) {
                    disk.ran.insert(line);
                }
                ok(String::new())
            }
        }
    }

    /// Answers a [`crate::facts::command`] script: each probe is a function `pN`
    /// whose body carries the quoted paths and command lines the host was told about
    /// (a command line may span lines, so bodies are cut at the next function).
    fn command_facts(&self, disk: &Disk, script: &str) -> String {
        let ran = |command: Option<&String>| command.is_some_and(|line| disk.ran.contains(line));
        let between = |text: &'_ str, from: &str, to: &str| -> Option<String> {
            let rest = &text[text.find(from)? + from.len()..];
            Some(rest[..rest.rfind(to)?].to_owned())
        };
        let mut out = String::new();
        let mut rest = script;
        let mut index = 0;
        while let Some(at) = rest.find(&format!("p{index}() {{\n")) {
            rest = &rest[at..];
            let next =
                rest.find(&format!("\np{}() {{\n", index + 1)).or_else(|| rest.find("\nn=")).unwrap_or(rest.len());
            let body = &rest[..next];
            if body.contains("\nout=$( (") {
                let read = between(body, "out=$( (", "); s=$?; printf x;").unwrap_or_default();
                match self.commands.reads.get(&read).filter(|(command, _)| disk.ran.contains(command)) {
                    Some((_, printed)) => {
                        let _ = writeln!(out, "read {index} 0 {}\n{printed}", printed.len());
                    }
                    None => {
                        let _ = writeln!(out, "read {index} 1 0\n");
                    }
                }
            } else {
                let creates = between(body, "if test -e ", "; then s=");
                let unless = between(body, "else (", ") >/dev/null; s=$?")
                    .or_else(|| between(body, "{\n(", ") >/dev/null; s=$?"));
                let done = creates.is_some_and(|path| ran(self.commands.creates.get(&path)))
                    || unless.is_some_and(|line| ran(self.commands.unless.get(&line)));
                let _ = writeln!(out, "check {index} {}", u8::from(!done));
            }
            rest = &rest[next..];
            index += 1;
        }
        out
    }

    /// Plays a [`crate::transport::batch`] script: directories and files recorded.
    fn batch(&self, mut words: &[String]) -> Output {
        let mut disk = self.disk.lock().expect("disk");
        let mut stdout = String::new();
        while let Some(kind) = words.first() {
            if kind == "d" {
                disk.dirs.insert(words[1].clone(), format!("{} {}", words[2], words[3]));
                stdout.push_str("changed\n");
                words = &words[4..];
            } else {
                let (path, mode, owner, group, sha256) = (&words[1], &words[3], &words[4], &words[5], &words[6]);
                disk.files.insert(path.clone(), format!("{sha256} {mode} {owner} {group}"));
                stdout.push_str("written\n");
                words = &words[8..];
            }
        }
        ok(stdout)
    }
}

fn file_line(out: &mut String, disk: &Disk, path: &str) {
    if let Some(file) = disk.files.get(path) {
        let _ = writeln!(out, "file {file}");
    } else if let Some(dir) = disk.dirs.get(path) {
        let _ = writeln!(out, "dir {dir} root");
    } else {
        out.push_str("missing\n");
    }
}

/// `systemctl [verbs…] -- unit`: enable, start and restart change what the service
/// probe answers; anything else (daemon-reload, reload) changes nothing it reads.
fn systemctl(disk: &mut Disk, argv: &[String]) {
    let Some(unit) = argv.iter().skip_while(|word| *word != "--").nth(1) else { return };
    let verbs = &argv[1..];
    let has = |verb: &str| verbs.iter().any(|word| word == verb);
    if has("enable") {
        disk.enabled.insert(unit.clone());
    }
    if has("start") || has("restart") || has("--now") || has("reload-or-restart") {
        disk.active.insert(unit.clone());
    }
}

impl Executor for SimHost {
    fn host(&self) -> &str {
        &self.name
    }

    async fn exec(&self, argv: &[String]) -> Result<Output, TransportError> {
        Ok(self.answer(argv))
    }

    async fn exec_with_input(&self, argv: &[String], _input: &[u8]) -> Result<Output, TransportError> {
        if argv.get(3).map(String::as_str) == Some("toolkit-batch") {
            return Ok(self.batch(&argv[5..]));
        }
        Ok(self.answer(argv))
    }

    async fn write_file(&self, request: &WriteRequest<'_>) -> Result<WriteOutcome, TransportError> {
        let sha256 = hex::encode(Sha256::digest(request.contents));
        let line = format!(
            "{sha256} {:o} {} {}",
            request.mode,
            request.owner.unwrap_or("root"),
            request.group.unwrap_or("root")
        );
        let mut disk = self.disk.lock().expect("disk");
        let previous = disk.files.insert(request.path.to_owned(), line.clone());
        Ok(if previous.as_deref() == Some(line.as_str()) { WriteOutcome::Unchanged } else { WriteOutcome::Written })
    }
}
