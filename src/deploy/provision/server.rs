//! The provisioning HTTP server: what iPXE and the deploy agent fetch, and what the
//! agent reports back, while nodes install.
//!
//! Stage: IO (a TCP listener on the provisioning network). Input: the image, the
//! agent, and per node its MACs, disk rule, overlay and in-band expectations.
//! Output: [`Event`]s (what each node fetched and reported), in arrival order.
//!
//! Routes (every node-specific one names the MAC, so each request says whose it is):
//! - `GET /boot.ipxe`: chains to the script of the MAC iPXE booted from;
//! - `GET /boot/<mac>.ipxe`: the agent's kernel and initrd for a node being
//!   installed, `exit` (boot the next device) for any other machine;
//! - `GET /agent/<mac>/vmlinuz`, `/agent/<mac>/initrd.img`, `/image/<mac>/disk.img`;
//! - `GET /media/<mac>.iso`: the node's boot ISO, fetched by its BMC (virtual media);
//! - `POST /agent/<mac>/inventory`: the agent's hardware report; the answer chooses
//!   the disk (or refuses), as `key=value` lines busybox sh reads;
//! - `POST /agent/<mac>/progress`: `step=…` and `detail=…` lines;
//! - `GET /overlay/<mac>.tar`: the node's files, its private host key among them —
//!   served only to the address DHCP gave that node, when toolkit gave it.
//!
//! A small HTTP/1.1 server of its own (one request per connection, `Connection:
//! close`): the protocol is a handful of fixed paths, and iPXE and busybox wget
//! need nothing more.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::disk::{self, AgentDisk, DiskRule};

/// What the agent reports of the machine it runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInventory {
    /// Block devices.
    #[serde(default)]
    pub disks: Vec<AgentDisk>,
    /// Network interfaces.
    #[serde(default)]
    pub nics: Vec<AgentNic>,
    /// PCI functions.
    #[serde(default)]
    pub pci: Vec<AgentPci>,
    /// CPUs.
    #[serde(default)]
    pub cpus: Option<AgentCpus>,
    /// `MemTotal` in KiB.
    #[serde(default)]
    pub memory_kib: Option<u64>,
}

/// A NIC as the agent sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentNic {
    /// Kernel name.
    pub name: String,
    /// MAC.
    #[serde(default)]
    pub mac: Option<String>,
    /// Link speed, when up.
    #[serde(default)]
    pub speed_mbps: Option<u64>,
}

/// A PCI function (sysfs ids as `0x10de`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPci {
    /// `0000:17:00.0`.
    pub address: String,
    /// Vendor id.
    pub vendor: String,
    /// Device id.
    pub device: String,
    /// Class code (`0x030200`: 3D controller).
    pub class: String,
}

/// CPUs as `/proc/cpuinfo` counts them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCpus {
    /// Sockets.
    pub sockets: u32,
    /// Cores, all sockets.
    pub cores: u32,
    /// Hardware threads, all sockets.
    pub threads: u32,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
}

impl AgentInventory {
    /// NVIDIA display and 3D controllers (class 0x03xxxx), as `lspci` counts GPUs.
    #[must_use]
    pub fn nvidia_gpus(&self) -> u32 {
        self.pci.iter().filter(|function| function.vendor == "0x10de" && function.class.starts_with("0x03")).count()
            as u32
    }
}

/// What the blueprint says the agent must find (the BMC may not report GPUs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InBand {
    /// GPUs per node.
    pub gpus: Option<u32>,
    /// Memory per node, GiB.
    pub memory_gib: Option<u64>,
}

impl InBand {
    /// Each difference, worded as inspection words them (`7 GPUs, blueprint 8`).
    #[must_use]
    pub fn mismatches(&self, found: &AgentInventory) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(wanted) = self.gpus {
            let have = found.nvidia_gpus();
            if have != wanted {
                out.push(format!("{have} GPUs, blueprint {wanted}"));
            }
        }
        if let (Some(wanted), Some(kib)) = (self.memory_gib, found.memory_kib) {
            // MemTotal leaves out what firmware and the kernel reserve: a few percent.
            let gib = kib as f64 / f64::from(1_u32 << 20);
            if gib < wanted as f64 * 0.9 {
                out.push(format!("{gib:.1} GiB memory, blueprint {wanted}"));
            }
        }
        out
    }
}

/// One node the server answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeBoot {
    /// Host name.
    pub name: String,
    /// Every MAC it may boot from (lower case, colons).
    pub macs: Vec<String>,
    /// Which disk receives the image.
    pub disk: DiskRule,
    /// Its overlay archive.
    pub overlay: Vec<u8>,
    /// What the agent must find.
    pub expected: Option<InBand>,
    /// The address DHCP gives it, when toolkit's DHCP does: only that address gets
    /// its overlay.
    pub address: Option<Ipv4Addr>,
    /// Its boot ISO, when its BMC boots it from virtual media.
    pub iso: Option<PathBuf>,
}

/// The files every node boots and receives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Files {
    /// Agent kernel.
    pub kernel: PathBuf,
    /// Agent initrd.
    pub initrd: PathBuf,
    /// The whole-disk image.
    pub image: PathBuf,
    /// Its size.
    pub image_size: u64,
    /// Its SHA-256.
    pub image_sha256: String,
    /// The root partition's number in it.
    pub root_partition: u32,
}

impl Files {
    /// What a run serves: `image` and the agent made from it.
    #[must_use]
    pub fn of(image: &super::image::BuiltImage, agent: &super::agent::AgentFiles) -> Self {
        Self {
            kernel: agent.kernel.clone(),
            initrd: agent.initrd.clone(),
            image: image.disk.clone(),
            image_size: image.size_bytes,
            image_sha256: image.sha256.clone(),
            root_partition: image.root_partition,
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// Its BMC fetched the node's boot ISO (virtual media).
    MediaFetched,
    /// iPXE fetched the node's boot script.
    BootScript,
    /// iPXE fetched the agent's kernel.
    KernelFetched,
    /// iPXE fetched the agent's initrd.
    InitrdFetched,
    /// The agent reported; the server chose `disk`.
    Inventory {
        /// The device the agent writes.
        disk: Option<String>,
        /// What it reported.
        inventory: Box<AgentInventory>,
    },
    /// The agent was told not to write, and why.
    Refused(String),
    /// The agent reported a step.
    Progress {
        /// `writing`, `written`, `verified`, `overlay`, `done`, `failed`.
        step: String,
        /// What it said with it.
        detail: Option<String>,
    },
    /// The image was sent whole.
    ImageServed {
        /// Bytes sent.
        bytes: u64,
    },
}

/// An event of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Host name.
    pub node: String,
    /// The MAC the request named.
    pub mac: String,
    /// What.
    pub kind: EventKind,
}

struct Shared {
    advertise: String,
    /// Bytes of files sent, per node.
    served: std::sync::Mutex<HashMap<String, u64>>,
    files: Files,
    nodes: Vec<NodeBoot>,
    by_mac: HashMap<String, usize>,
    events: UnboundedSender<Event>,
}

/// The running server.
pub struct Server {
    address: SocketAddr,
    advertise: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// `52-54-00-aa-bb-cc` or `52:54:00:AA:BB:CC` → `52:54:00:aa:bb:cc`: as dnsmasq logs
/// MACs and the agent reports them.
#[must_use]
pub fn normalize_mac(mac: &str) -> String {
    mac.trim().to_ascii_lowercase().replace('-', ":")
}

impl Server {
    /// Listens on `bind`; URLs handed to nodes use `advertise` (`host:port`).
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn start(
        bind: SocketAddr,
        advertise: &str,
        files: Files,
        nodes: Vec<NodeBoot>,
    ) -> std::io::Result<(Self, UnboundedReceiver<Event>)> {
        let listener = TcpListener::bind(bind).await?;
        let address = listener.local_addr()?;
        let advertise = if advertise.ends_with(":0") {
            format!("{}:{}", advertise.trim_end_matches(":0"), address.port())
        } else {
            advertise.to_owned()
        };
        let (sender, receiver) = unbounded_channel();
        let by_mac = nodes
            .iter()
            .enumerate()
            .flat_map(|(index, node)| node.macs.iter().map(move |mac| (normalize_mac(mac), index)))
            .collect();
        let shared = Arc::new(Shared {
            advertise: advertise.clone(),
            served: std::sync::Mutex::default(),
            files,
            nodes,
            by_mac,
            events: sender,
        });
        let serving = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            let shared = serving;
            loop {
                let Ok((stream, peer)) = listener.accept().await else { continue };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Err(error) = serve(&shared, stream, peer).await {
                        tracing::debug!(%peer, %error, "provisioning request");
                    }
                });
            }
        });
        Ok((Self { address, advertise, shared, task }, receiver))
    }

    /// Where it listens.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The URL DHCP hands to iPXE.
    #[must_use]
    pub fn boot_url(&self) -> String {
        format!("http://{}/boot.ipxe", self.advertise)
    }

    /// Bytes of files (ISO, kernel, initrd, image) sent to each node so far.
    #[must_use]
    pub fn served(&self) -> HashMap<String, u64> {
        self.shared.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Stops listening (requests under way are cut).
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 4096];
    let end = loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
        if buffer.len() > 16 * 1024 {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or_default().split_whitespace();
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or_default().to_owned();
    let length = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let mut body = buffer[end + 4..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    body.truncate(length);
    Ok(Some(Request { method, path, body }))
}

async fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

async fn send_file(stream: &mut TcpStream, path: &std::path::Path) -> std::io::Result<u64> {
    let mut file = tokio::fs::File::open(path).await?;
    let length = file.metadata().await?.len();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let sent = tokio::io::copy(&mut file, stream).await?;
    stream.shutdown().await?;
    Ok(sent)
}

async fn serve(shared: &Shared, mut stream: TcpStream, peer: SocketAddr) -> std::io::Result<()> {
    let Some(request) = read_request(&mut stream).await? else { return Ok(()) };
    // Clients may escape the colons of a MAC in a path (`%3A`).
    let path = request.path.replace("%3A", ":").replace("%3a", ":");
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let node_of = |mac: &str| {
        let mac = normalize_mac(mac);
        shared.by_mac.get(&mac).map(|&index| (&shared.nodes[index], mac))
    };
    let emit = |node: &NodeBoot, mac: &str, kind: EventKind| {
        let _ = shared.events.send(Event { node: node.name.clone(), mac: mac.to_owned(), kind });
    };
    let base = format!("http://{}", shared.advertise);
    match (request.method.as_str(), parts.as_slice()) {
        ("GET", ["boot.ipxe"]) => {
            let script = format!("#!ipxe\nchain {base}/boot/${{mac:hexhyp}}.ipxe\n");
            respond(&mut stream, "200 OK", "text/plain", script.as_bytes()).await
        }
        ("GET", ["boot", file]) => {
            let mac = file.trim_end_matches(".ipxe");
            let Some((node, mac)) = node_of(mac) else {
                // Not a node being installed: boot whatever comes next.
                return respond(&mut stream, "200 OK", "text/plain", b"#!ipxe\nexit\n").await;
            };
            emit(node, &mac, EventKind::BootScript);
            // In URLs the MAC is written with hyphens: iPXE escapes a colon in a path.
            // Debian 12's iPXE (EFI) needs the initrd named, and named on the command line.
            let path = mac.replace(':', "-");
            let cmdline = super::agent::cmdline(&base, &mac, None);
            let script = format!(
                "#!ipxe\nkernel {base}/agent/{path}/vmlinuz initrd=agent.img {cmdline}\n\
                 initrd --name agent.img {base}/agent/{path}/initrd.img\nboot\n"
            );
            respond(&mut stream, "200 OK", "text/plain", script.as_bytes()).await
        }
        ("GET", ["agent", mac, file @ ("vmlinuz" | "initrd.img")]) => {
            let Some((node, mac)) = node_of(mac) else { return not_found(&mut stream).await };
            let (path, kind) = if *file == "vmlinuz" {
                (&shared.files.kernel, EventKind::KernelFetched)
            } else {
                (&shared.files.initrd, EventKind::InitrdFetched)
            };
            emit(node, &mac, kind);
            count(shared, node, send_file(&mut stream, path).await?);
            Ok(())
        }
        ("GET", ["media", file]) => {
            let Some((node, mac)) = node_of(file.trim_end_matches(".iso")) else { return not_found(&mut stream).await };
            let Some(iso) = &node.iso else { return not_found(&mut stream).await };
            emit(node, &mac, EventKind::MediaFetched);
            count(shared, node, send_file(&mut stream, iso).await?);
            Ok(())
        }
        ("GET", ["image", mac, "disk.img"]) => {
            let Some((node, mac)) = node_of(mac) else { return not_found(&mut stream).await };
            let bytes = send_file(&mut stream, &shared.files.image).await?;
            count(shared, node, bytes);
            emit(node, &mac, EventKind::ImageServed { bytes });
            Ok(())
        }
        ("GET", ["overlay", file]) => {
            let Some((node, _)) = node_of(file.trim_end_matches(".tar")) else { return not_found(&mut stream).await };
            if node.address.is_some_and(|address| peer.ip() != IpAddr::V4(address)) {
                return respond(&mut stream, "403 Forbidden", "text/plain", b"not from this node's address\n").await;
            }
            respond(&mut stream, "200 OK", "application/x-tar", &node.overlay).await
        }
        ("POST", ["agent", mac, "inventory"]) => {
            let Some((node, mac)) = node_of(mac) else { return not_found(&mut stream).await };
            let answer = match serde_json::from_slice::<AgentInventory>(&request.body) {
                Ok(inventory) => decide(shared, node, &mac, inventory, &base),
                Err(error) => {
                    let reason = format!("the agent's inventory is not valid JSON: {error}");
                    emit(node, &mac, EventKind::Refused(reason.clone()));
                    format!("action=refuse\nreason={reason}\n")
                }
            };
            respond(&mut stream, "200 OK", "text/plain", answer.as_bytes()).await
        }
        ("POST", ["agent", mac, "progress"]) => {
            let Some((node, mac)) = node_of(mac) else { return not_found(&mut stream).await };
            let text = String::from_utf8_lossy(&request.body);
            let value = |key: &str| text.lines().find_map(|line| line.strip_prefix(key)).map(|v| v.trim().to_owned());
            if let Some(step) = value("step=") {
                emit(node, &mac, EventKind::Progress { step, detail: value("detail=") });
            }
            respond(&mut stream, "200 OK", "text/plain", b"ok\n").await
        }
        _ => not_found(&mut stream).await,
    }
}

fn count(shared: &Shared, node: &NodeBoot, bytes: u64) {
    let mut served = shared.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *served.entry(node.name.clone()).or_default() += bytes;
}

async fn not_found(stream: &mut TcpStream) -> std::io::Result<()> {
    respond(stream, "404 Not Found", "text/plain", b"not found\n").await
}

/// The answer to an inventory: install on the chosen disk, or refuse with why.
fn decide(shared: &Shared, node: &NodeBoot, mac: &str, inventory: AgentInventory, base: &str) -> String {
    let mismatches = node.expected.as_ref().map(|expected| expected.mismatches(&inventory)).unwrap_or_default();
    let refuse = |reason: String, inventory: AgentInventory| {
        let _ = shared.events.send(Event {
            node: node.name.clone(),
            mac: mac.to_owned(),
            kind: EventKind::Inventory { disk: None, inventory: Box::new(inventory) },
        });
        let _ = shared.events.send(Event {
            node: node.name.clone(),
            mac: mac.to_owned(),
            kind: EventKind::Refused(reason.clone()),
        });
        format!("action=refuse\nreason={}\n", reason.replace('\n', " "))
    };
    if !mismatches.is_empty() {
        return refuse(format!("hardware differs from the blueprint: {}", mismatches.join("; ")), inventory);
    }
    let chosen = match disk::select(&node.disk, &inventory.disks) {
        Ok(chosen) => chosen.device(),
        Err(error) => return refuse(error.to_string(), inventory),
    };
    let files = &shared.files;
    let path = mac.replace(':', "-");
    let answer = format!(
        "action=install\ndisk={chosen}\nimage={base}/image/{path}/disk.img\nimage_size={}\nimage_sha256={}\n\
         root_partition={}\noverlay={base}/overlay/{path}.tar\n",
        files.image_size, files.image_sha256, files.root_partition
    );
    let _ = shared.events.send(Event {
        node: node.name.clone(),
        mac: mac.to_owned(),
        kind: EventKind::Inventory { disk: Some(chosen), inventory: Box::new(inventory) },
    });
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn request(address: SocketAddr, method: &str, path: &str, body: &str) -> String {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        let text = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        stream.write_all(text.as_bytes()).await.expect("sends");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        answer
    }

    fn inventory(gpus: usize) -> String {
        let pci: Vec<String> = (0..gpus)
            .map(|n| {
                format!(r#"{{"address":"0000:{n:02x}:00.0","vendor":"0x10de","device":"0x2330","class":"0x030200"}}"#)
            })
            .collect();
        format!(
            r#"{{"disks":[{{"name":"vda","size_bytes":8589934592,"model":null,"serial":"disk-1","wwn":null,"by_path":"pci-0000:00:04.0","by_id":"virtio-disk-1","rotational":false}}],"nics":[{{"name":"ens3","mac":"52:54:00:77:00:11","speed_mbps":null}}],"pci":[{}],"cpus":{{"sockets":1,"cores":1,"threads":1,"model":"QEMU TCG CPU"}},"memory_kib":1004000}}"#,
            pci.join(",")
        )
    }

    #[tokio::test]
    async fn a_node_is_answered_and_reported_others_boot_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kernel = dir.path().join("vmlinuz");
        std::fs::write(&kernel, b"kernel bytes").expect("writes");
        let files = Files {
            kernel: kernel.clone(),
            initrd: kernel.clone(),
            image: kernel.clone(),
            image_size: 12,
            image_sha256: "ab".repeat(32),
            root_partition: 2,
        };
        let node = NodeBoot {
            name: "vm01".to_owned(),
            macs: vec!["52:54:00:77:00:11".to_owned()],
            disk: DiskRule { min_gib: Some(4), ..DiskRule::default() },
            overlay: b"overlay".to_vec(),
            expected: Some(InBand { gpus: Some(0), memory_gib: Some(1) }),
            address: Some(Ipv4Addr::LOCALHOST),
            iso: Some(kernel),
        };
        let (server, mut events) =
            Server::start("127.0.0.1:0".parse().expect("addr"), "127.0.0.1:0", files, vec![node])
                .await
                .expect("starts");
        let address = server.address();
        assert!(server.boot_url().ends_with(&format!(":{}/boot.ipxe", address.port())));
        let chain = request(address, "GET", "/boot.ipxe", "").await;
        assert!(chain.contains("chain http://127.0.0.1:") && chain.contains("/boot/${mac:hexhyp}.ipxe"), "{chain}");
        let media = request(address, "GET", "/media/52-54-00-77-00-11.iso", "").await;
        assert_eq!(server.served()["vm01"], 12, "the ISO's bytes");
        assert!(media.ends_with("\r\n\r\nkernel bytes"), "the node's ISO: {media}");
        let unknown = request(address, "GET", "/media/52-54-00-99-99-99.iso", "").await;
        assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
        let other = request(address, "GET", "/boot/52-54-00-99-99-99.ipxe", "").await;
        assert!(other.ends_with("#!ipxe\nexit\n"), "{other}");
        let script = request(address, "GET", "/boot/52-54-00-77-00-11.ipxe", "").await;
        assert!(script.contains("initrd --name agent.img"), "{script}");
        assert!(script.contains("toolkit.mac=52:54:00:77:00:11"), "{script}");
        assert!(script.contains("/agent/52-54-00-77-00-11/vmlinuz "), "{script}");
        let kernel = request(address, "GET", "/agent/52%3A54%3A00%3A77%3A00%3A11/vmlinuz", "").await;
        assert!(kernel.ends_with("\r\n\r\nkernel bytes"), "{kernel}");
        let answer = request(address, "POST", "/agent/52:54:00:77:00:11/inventory", &inventory(0)).await;
        assert!(answer.contains("action=install\ndisk=/dev/vda\n"), "{answer}");
        assert!(answer.contains("/image/52-54-00-77-00-11/disk.img\nimage_size=12\n"), "{answer}");
        let overlay = request(address, "GET", "/overlay/52-54-00-77-00-11.tar", "").await;
        assert!(overlay.ends_with("overlay"), "{overlay}");
        let _ =
            request(address, "POST", "/agent/52:54:00:77:00:11/progress", "step=failed\ndetail=dd: no space\n").await;
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            assert_eq!(event.node, "vm01");
            seen.push(match event.kind {
                EventKind::Inventory { disk, .. } => format!("inventory {disk:?}"),
                other => format!("{other:?}"),
            });
        }
        assert_eq!(
            seen,
            [
                "MediaFetched",
                "BootScript",
                "KernelFetched",
                "inventory Some(\"/dev/vda\")",
                "Progress { step: \"failed\", detail: Some(\"dd: no space\") }"
            ]
        );
        server.stop().await;
    }

    #[test]
    fn in_band_differences_are_worded_as_inspection_words_them() {
        let found: AgentInventory = serde_json::from_str(&inventory(7)).expect("parses");
        assert_eq!(found.nvidia_gpus(), 7);
        let expected = InBand { gpus: Some(8), memory_gib: Some(2) };
        assert_eq!(expected.mismatches(&found), ["7 GPUs, blueprint 8", "1.0 GiB memory, blueprint 2"]);
        assert!(InBand { gpus: Some(7), memory_gib: Some(1) }.mismatches(&found).is_empty());
    }
}
