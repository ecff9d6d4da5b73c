//! The provisioning service: the HTTP server the nodes boot from and, for network
//! boot, dnsmasq — on the machine running toolkit, or on another host over SSH
//! (the inventory's `provisioning.host`: the controller, a boot server on the nodes'
//! network).
//!
//! Stage: provision (IO: HTTP, DHCP, SSH). Input: a [`ServiceSpec`]. Output: a
//! running [`Service`] whose events say what the network saw of each node, and the
//! bytes served per node when it stops. On another host toolkit runs itself: it
//! copies its own executable and the files it serves there (named by their
//! SHA-256, so the next run copies nothing), starts `toolkit provision-service` over
//! SSH and reads its events as JSON lines. The remote service lives as long as that
//! channel: a toolkit killed mid-run drops the connection, the service reads
//! end-of-file and stops its dnsmasq, so nothing is left answering DHCP.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::dhcp::{DhcpConfig, DhcpEvent, Dnsmasq};
use super::error::{ProvisionError, RunLock};
use super::server::{Event, Files, NodeBoot, Server};
use crate::transport::Executor as _;
use crate::transport::session::{Spawned, SshSession};
use crate::transport::ssh::{SshOptions, SshTarget};

/// What a service serves, and to whom.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceSpec {
    /// Where the HTTP server listens.
    pub bind: SocketAddr,
    /// `host:port` in the URLs handed to nodes.
    pub advertise: String,
    /// The agent and the image.
    pub files: Files,
    /// The nodes it answers.
    pub nodes: Vec<NodeBoot>,
    /// dnsmasq's configuration, for network boot (its boot URL is the server's).
    pub dhcp: Option<DhcpConfig>,
    /// dnsmasq's directory (configuration, log, TFTP root).
    pub run_dir: PathBuf,
    /// Where the service takes the provisioning lock itself (on another host; here
    /// the run holds it).
    pub lock_dir: Option<PathBuf>,
}

/// What the network saw of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Observed {
    /// A request to the HTTP server (or the agent's report).
    Http(Event),
    /// A line of dnsmasq's log.
    Dhcp(DhcpEvent),
}

/// A line the remote service prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Message {
    /// Serving.
    Ready,
    /// Something seen.
    Observed(Observed),
    /// Stopped: bytes sent to each node.
    Served(HashMap<String, u64>),
    /// It could not start.
    Failed(String),
}

/// The other host a service runs on.
#[derive(Debug, Clone)]
pub struct RemoteHost {
    /// How to reach it.
    pub target: SshTarget,
    /// SSH options (key, known_hosts, timeouts).
    pub options: SshOptions,
    /// Its directory for toolkit's files (`/var/lib/toolkit/provision`).
    pub dir: String,
}

/// A running service.
pub struct Service {
    /// What it sees, as it happens.
    pub events: UnboundedReceiver<Observed>,
    running: Running,
}

enum Running {
    Local { server: Server, dnsmasq: Option<Dnsmasq>, forward: tokio::task::JoinHandle<()> },
    Remote { session: SshSession, process: Spawned, forward: tokio::task::JoinHandle<HashMap<String, u64>> },
}

impl Service {
    /// Starts the server and, with [`ServiceSpec::dhcp`], dnsmasq, here.
    ///
    /// # Errors
    /// [`ProvisionError::Server`] when the address cannot be bound, a DHCP error
    /// when dnsmasq refuses its configuration or cannot start.
    pub async fn start_here(spec: &ServiceSpec) -> Result<Self, ProvisionError> {
        let (server, mut http) = Server::start(spec.bind, &spec.advertise, spec.files.clone(), spec.nodes.clone())
            .await
            .map_err(|source| ProvisionError::Server { address: spec.bind, source })?;
        let dnsmasq = match &spec.dhcp {
            Some(config) => {
                let config = DhcpConfig { boot_url: server.boot_url(), ..config.clone() };
                match Dnsmasq::start(&config, &spec.run_dir) {
                    Ok(dnsmasq) => Some(dnsmasq),
                    Err(error) => {
                        server.stop().await;
                        return Err(error.into());
                    }
                }
            }
            None => None,
        };
        let (sender, events) = unbounded_channel();
        let with_dhcp = dnsmasq.is_some();
        let mut dhcp = dnsmasq.as_ref().map_or_else(|| unbounded_channel().1, Dnsmasq::events);
        let forward = tokio::spawn(async move {
            loop {
                let observed = tokio::select! {
                    event = http.recv() => event.map(Observed::Http),
                    event = dhcp.recv(), if with_dhcp => event.map(Observed::Dhcp),
                };
                let Some(observed) = observed else { break };
                if sender.send(observed).is_err() {
                    break;
                }
            }
        });
        Ok(Self { events, running: Running::Local { server, dnsmasq, forward } })
    }

    /// Copies what `spec` serves to `host` (what is not there yet), starts the
    /// service there over SSH and waits until it serves. `note` says what is copied.
    ///
    /// # Errors
    /// SSH failures naming the host; [`ProvisionError::Service`] when the host
    /// cannot run this toolkit or the service did not start (with its words).
    pub async fn start_on(
        host: &RemoteHost,
        spec: &ServiceSpec,
        note: &(dyn Fn(&str) + Sync),
    ) -> Result<Self, ProvisionError> {
        let name = host.target.host.clone();
        let refused = |message: String| ProvisionError::Service { host: name.clone(), message };
        let session = SshSession::connect(&host.target, &host.options).await?;
        let machine = session.exec(&argv(&["uname", "-m"])).await?.into_success(&name, &argv(&["uname", "-m"]))?;
        let machine = machine.stdout_text().trim().to_owned();
        if machine != std::env::consts::ARCH {
            return Err(refused(format!(
                "it is {machine}, this toolkit is built for {}: run toolkit from a machine of its architecture",
                std::env::consts::ARCH
            )));
        }
        let executable = std::env::current_exe().map_err(|error| refused(format!("this toolkit's path: {error}")))?;
        let mut copies = vec![(executable, None)];
        copies.push((spec.files.kernel.clone(), None));
        copies.push((spec.files.initrd.clone(), None));
        copies.push((spec.files.image.clone(), Some(spec.files.image_sha256.clone())));
        copies.extend(spec.nodes.iter().filter_map(|node| node.iso.clone()).map(|iso| (iso, None)));
        let named = tokio::task::spawn_blocking(move || {
            copies
                .into_iter()
                .map(|(path, known)| {
                    let hash = match known {
                        Some(hash) => hash,
                        None => super::image::file_sha256(&path).map_err(|error| error.to_string())?,
                    };
                    let file_name =
                        path.file_name().map_or_else(String::new, |name| name.to_string_lossy().into_owned());
                    Ok((format!("files/{}-{file_name}", &hash[..16]), path))
                })
                .collect::<Result<Vec<(String, PathBuf)>, String>>()
        })
        .await
        .map_err(|error| refused(error.to_string()))?
        .map_err(|error| refused(format!("hashing what it serves: {error}")))?;
        let remote: HashMap<PathBuf, String> =
            named.iter().map(|(relative, path)| (path.clone(), format!("{}/{relative}", host.dir))).collect();
        let missing = missing_files(&session, &host.dir, &named).await?;
        let started = Instant::now();
        let mut bytes = 0;
        for (relative, path) in named.iter().filter(|(relative, _)| missing.contains(relative)) {
            bytes += copy(&session, path, &format!("{}/{relative}", host.dir)).await?;
        }
        if bytes > 0 {
            note(&format!("copied {bytes} bytes to {name} in {:.1} s", started.elapsed().as_secs_f64()));
        }
        let there = |path: &Path| PathBuf::from(&remote[path]);
        let mut remote_spec = spec.clone();
        remote_spec.files.kernel = there(&spec.files.kernel);
        remote_spec.files.initrd = there(&spec.files.initrd);
        remote_spec.files.image = there(&spec.files.image);
        for node in &mut remote_spec.nodes {
            node.iso = node.iso.as_deref().map(there);
        }
        remote_spec.run_dir = PathBuf::from(format!("{}/run", host.dir));
        remote_spec.lock_dir = Some(PathBuf::from(&host.dir));
        // It holds the nodes' private host keys (their overlays): 0600, and read
        // then removed by the service.
        let spec_path = format!("{}/run/service-{}.json", host.dir, std::process::id());
        let json = serde_json::to_vec(&remote_spec).map_err(|error| refused(error.to_string()))?;
        let write = argv(&["sh", "-c", "umask 077 && mkdir -p \"${1%/*}\" && cat > \"$1\"", "sh", &spec_path]);
        session.exec_with_input(&write, &json).await?.into_success(&name, &write)?;
        let binary = &remote[&std::env::current_exe().unwrap_or_default()];
        let mut process = session.spawn(&argv(&[binary, "provision-service", &spec_path])).await?;
        let first = tokio::time::timeout(Duration::from_mins(1), process.lines.recv()).await;
        match first.ok().flatten().as_deref().map(serde_json::from_str::<Message>) {
            Some(Ok(Message::Ready)) => {}
            Some(Ok(Message::Failed(error))) => return Err(refused(error)),
            _ => {
                let output = process.finish().await;
                let _ = session.exec(&argv(&["rm", "-f", &spec_path])).await;
                return Err(refused(format!(
                    "`toolkit provision-service` did not start ({}): {}",
                    output.status,
                    output.stderr_tail()
                )));
            }
        }
        let (sender, events) = unbounded_channel();
        let mut lines = std::mem::replace(&mut process.lines, unbounded_channel().1);
        let forward = tokio::spawn(async move {
            let mut served = HashMap::new();
            while let Some(line) = lines.recv().await {
                match serde_json::from_str::<Message>(&line) {
                    Ok(Message::Observed(observed)) => {
                        let _ = sender.send(observed);
                    }
                    Ok(Message::Served(bytes)) => served = bytes,
                    Ok(Message::Ready | Message::Failed(_)) => {}
                    Err(error) => tracing::debug!(%line, %error, "provisioning service line"),
                }
            }
            served
        });
        Ok(Self { events, running: Running::Remote { session, process, forward } })
    }

    /// Stops it (requests under way are cut): the bytes of files (ISO, kernel,
    /// initrd, image) sent to each node.
    pub async fn stop(self) -> HashMap<String, u64> {
        match self.running {
            Running::Local { server, dnsmasq, forward } => {
                forward.abort();
                if let Some(dnsmasq) = dnsmasq {
                    dnsmasq.stop();
                }
                let served = server.served();
                server.stop().await;
                served
            }
            Running::Remote { session, process, forward } => {
                let _ = process.send(b"stop\n").await;
                let output = process.finish().await;
                if !output.success() {
                    tracing::warn!(host = session.target().host, status = %output.status, stderr = output.stderr_tail(), "the provisioning service ended badly");
                }
                let served = forward.await.unwrap_or_default();
                session.close().await;
                served
            }
        }
    }
}

/// `toolkit provision-service SPEC`: the service on this host, its events on
/// standard output as JSON lines, until standard input says `stop` or ends.
///
/// # Errors
/// The specification cannot be read (a start failure is printed as a line).
pub async fn serve_stdio(spec_path: &Path) -> std::io::Result<()> {
    let text = std::fs::read(spec_path)?;
    // It holds the nodes' private host keys.
    let _ = std::fs::remove_file(spec_path);
    let spec: ServiceSpec = serde_json::from_slice(&text).map_err(std::io::Error::other)?;
    let say = |message: &Message| {
        let mut line = serde_json::to_string(message).unwrap_or_default();
        line.push('\n');
        let mut stdout = std::io::stdout().lock();
        let _ =
            std::io::Write::write_all(&mut stdout, line.as_bytes()).and_then(|()| std::io::Write::flush(&mut stdout));
    };
    let _lock = match spec.lock_dir.as_deref().map(RunLock::take).transpose() {
        Ok(lock) => lock,
        Err(error) => {
            say(&Message::Failed(error.to_string()));
            return Ok(());
        }
    };
    let mut service = match Service::start_here(&spec).await {
        Ok(service) => service,
        Err(error) => {
            say(&Message::Failed(error.to_string()));
            return Ok(());
        }
    };
    say(&Message::Ready);
    let mut input = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            observed = service.events.recv() => match observed {
                Some(observed) => say(&Message::Observed(observed)),
                None => break,
            },
            line = input.next_line() => match line {
                Ok(Some(line)) if line.trim() != "stop" => {}
                _ => break,
            },
        }
    }
    let served = service.stop().await;
    say(&Message::Served(served));
    Ok(())
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|&word| word.to_owned()).collect()
}

/// Which of `named` (relative to `dir`) the host lacks. Files arrive under a
/// temporary name and are renamed whole, so a present name is a complete copy.
async fn missing_files(
    session: &SshSession,
    dir: &str,
    named: &[(String, PathBuf)],
) -> Result<Vec<String>, ProvisionError> {
    let mut command = argv(&["sh", "-c", "cd \"$1\" && shift && for f; do [ -f \"$f\" ] || echo \"$f\"; done", "sh"]);
    command.push(dir.to_owned());
    command.extend(named.iter().map(|(relative, _)| relative.clone()));
    let create = argv(&["mkdir", "-p", &format!("{dir}/files"), &format!("{dir}/run")]);
    session.exec(&create).await?.into_success(&session.target().host, &create)?;
    let output = session.exec(&command).await?.into_success(&session.target().host, &command)?;
    Ok(output.stdout_text().lines().map(str::to_owned).collect())
}

/// Streams `path` to `to` on the host (executable: toolkit itself is among them).
async fn copy(session: &SshSession, path: &Path, to: &str) -> Result<u64, ProvisionError> {
    let io = |source| ProvisionError::Io { path: path.to_owned(), source };
    let mut file = tokio::fs::File::open(path).await.map_err(io)?;
    let size = file.metadata().await.map_err(io)?.len();
    let command = argv(&["sh", "-c", "cat > \"$1.part\" && chmod 0755 \"$1.part\" && mv \"$1.part\" \"$1\"", "sh", to]);
    session.exec_reading(&command, &mut file).await?.into_success(&session.target().host, &command)?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::provision::server::EventKind;

    #[test]
    fn messages_are_one_json_line_each_and_read_back() {
        let messages = [
            Message::Ready,
            Message::Observed(Observed::Http(Event {
                node: "vm01".to_owned(),
                mac: "52:54:00:77:00:11".to_owned(),
                kind: EventKind::Progress { step: "writing".to_owned(), detail: Some("/dev/vda".to_owned()) },
            })),
            Message::Observed(Observed::Dhcp(DhcpEvent::Ack {
                mac: "52:54:00:77:00:11".to_owned(),
                address: "10.77.0.11".parse().expect("address"),
            })),
            Message::Served(HashMap::from([("vm01".to_owned(), 1_299_071_424)])),
            Message::Failed("dnsmasq: failed to bind DHCP server socket: Address in use".to_owned()),
        ];
        for message in messages {
            let line = serde_json::to_string(&message).expect("serializes");
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(serde_json::from_str::<Message>(&line).expect("reads back"), message, "{line}");
        }
    }

    #[tokio::test]
    async fn a_service_here_serves_the_boot_script_and_reports_its_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("writes");
            path
        };
        let files = Files {
            kernel: file("vmlinuz", b"kernel"),
            initrd: file("initrd", b"initrd"),
            image: file("disk.raw", b"image"),
            image_size: 5,
            image_sha256: "0".repeat(64),
            root_partition: 2,
        };
        let spec = ServiceSpec {
            bind: "127.0.0.1:0".parse().expect("address"),
            advertise: "127.0.0.1:0".to_owned(),
            files,
            nodes: vec![NodeBoot {
                name: "vm01".to_owned(),
                macs: vec!["52:54:00:77:00:11".to_owned()],
                disk: super::super::disk::DiskRule::default(),
                overlay: Vec::new(),
                expected: None,
                address: None,
                iso: None,
            }],
            dhcp: None,
            run_dir: dir.path().join("run"),
            lock_dir: None,
        };
        let mut service = Service::start_here(&spec).await.expect("starts");
        let Running::Local { server, .. } = &service.running else { panic!("a local service") };
        let mut stream = tokio::net::TcpStream::connect(server.address()).await.expect("connects");
        tokio::io::AsyncWriteExt::write_all(
            &mut stream,
            b"GET /agent/52-54-00-77-00-11/vmlinuz HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        .await
        .expect("asks");
        let mut answer = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer).await.expect("answers");
        assert!(
            answer.starts_with(b"HTTP/1.1 200") && answer.ends_with(b"\r\n\r\nkernel"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        let seen = tokio::time::timeout(Duration::from_secs(5), service.events.recv()).await.expect("an event");
        assert!(matches!(seen, Some(Observed::Http(Event { kind: EventKind::KernelFetched, .. }))), "{seen:?}");
        assert_eq!(service.stop().await.get("vm01"), Some(&6));
    }
}
