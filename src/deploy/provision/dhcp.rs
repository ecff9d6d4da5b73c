//! Network boot's first half: dnsmasq (Debian's `dnsmasq-base`) as DHCP — or
//! proxy-DHCP where the site owns DHCP — and TFTP, run by toolkit only while nodes
//! install, and its log read back as typed events per MAC.
//!
//! Stage: IO (a child process on the provisioning interface). Input: a
//! [`DhcpConfig`]. Output: the rendered `dnsmasq.conf`, a running [`Dnsmasq`] and
//! its [`DhcpEvent`]s (request, offer, lease, boot file sent), which name what a
//! node that never got further did last.
//!
//! In `dhcp` mode dnsmasq answers only the MACs of the nodes being installed
//! (`dhcp-ignore=tag:!known`): any other machine on the network is left to whoever
//! else serves it. BIOS clients get iPXE's `undionly.kpxe`, UEFI clients (client
//! architecture 7 or 9) `ipxe.efi`, and iPXE itself (user class `iPXE`) the HTTP
//! boot script of toolkit's server.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use ipnet::Ipv4Net;
use thiserror::Error;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Where Debian's `ipxe` package installs its binaries.
pub const IPXE_DIR: &str = "/usr/lib/ipxe";

/// Who gives addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DhcpMode {
    /// dnsmasq gives each node its address, and answers nobody else.
    Dhcp {
        /// The nodes' subnet.
        subnet: Ipv4Net,
    },
    /// The site's DHCP gives addresses; dnsmasq adds the boot information.
    Proxy {
        /// The nodes' subnet.
        subnet: Ipv4Net,
    },
}

/// One node to answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DhcpHost {
    /// Host name.
    pub name: String,
    /// Every MAC it may boot from.
    pub macs: Vec<String>,
    /// Its address.
    pub address: Ipv4Addr,
}

/// What dnsmasq is told.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DhcpConfig {
    /// Interface to listen on.
    pub interface: String,
    /// This machine's address there.
    pub server_address: Ipv4Addr,
    /// DHCP or proxy-DHCP.
    pub mode: DhcpMode,
    /// The nodes.
    pub hosts: Vec<DhcpHost>,
    /// The gateway the nodes get (DHCP mode).
    pub gateway: Option<Ipv4Addr>,
    /// iPXE's script URL (`http://…/boot.ipxe`).
    pub boot_url: String,
}

/// Why dnsmasq could not run.
#[derive(Debug, Error)]
pub enum DhcpError {
    /// A file could not be written or read.
    #[error("DHCP: `{path}`: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// dnsmasq is not installed.
    #[error("DHCP: dnsmasq is not installed (apt-get install dnsmasq-base)")]
    Missing,
    /// iPXE's binaries are not installed.
    #[error("DHCP: `{0}` is missing (apt-get install ipxe)")]
    NoIpxe(PathBuf),
    /// dnsmasq refused the configuration or stopped at once.
    #[error("DHCP: dnsmasq refused `{config}`: {message}")]
    Refused {
        /// The configuration file.
        config: PathBuf,
        /// What dnsmasq said (it names the line).
        message: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DhcpError + '_ {
    move |source| DhcpError::Io { path: path.to_owned(), source }
}

/// The paths of one run under its directory.
struct Paths {
    config: PathBuf,
    log: PathBuf,
    leases: PathBuf,
    pid: PathBuf,
    tftp: PathBuf,
}

impl Paths {
    fn under(dir: &Path) -> Self {
        Self {
            config: dir.join("dnsmasq.conf"),
            log: dir.join("dnsmasq.log"),
            leases: dir.join("dnsmasq.leases"),
            pid: dir.join("dnsmasq.pid"),
            tftp: dir.join("tftp"),
        }
    }
}

impl DhcpConfig {
    /// The configuration file, with paths under `dir`.
    #[must_use]
    pub fn render(&self, dir: &Path) -> String {
        let paths = Paths::under(dir);
        let mut out = String::from("# toolkit's network boot service, written for one provisioning run.\n");
        let _ = writeln!(out, "# No DNS: only DHCP and TFTP.\nport=0");
        let _ = writeln!(out, "interface={}\nbind-interfaces\nexcept-interface=lo", self.interface);
        let _ = writeln!(out, "log-dhcp\nlog-facility={}", paths.log.display());
        let _ = writeln!(out, "pid-file={}\ndhcp-leasefile={}", paths.pid.display(), paths.leases.display());
        let _ = writeln!(out, "enable-tftp\ntftp-root={}", paths.tftp.display());
        // iPXE waits ~13 s for IPv6 router advertisements without one; no-ping saves the
        // second dnsmasq spends checking an address is free (every address is pinned).
        out.push_str("enable-ra\nno-ping\n");
        match self.mode {
            DhcpMode::Dhcp { subnet } => {
                let _ = writeln!(out, "dhcp-range={},static,{},1h", subnet.network(), subnet.netmask());
                out.push_str("# Only the nodes being installed get an answer.\ndhcp-ignore=tag:!known\n");
                for host in &self.hosts {
                    let _ = writeln!(out, "dhcp-host={},{},{}", host.macs.join(","), host.address, host.name);
                }
                if let Some(gateway) = self.gateway {
                    let _ = writeln!(out, "dhcp-option=option:router,{gateway}");
                } else {
                    out.push_str("dhcp-option=option:router\n");
                }
            }
            DhcpMode::Proxy { subnet } => {
                let _ = writeln!(out, "dhcp-range={},proxy,{}", subnet.network(), subnet.netmask());
                for host in &self.hosts {
                    for mac in &host.macs {
                        let _ = writeln!(out, "dhcp-mac=set:known,{mac}");
                    }
                }
                out.push_str("pxe-service=tag:known,tag:!ipxe,x86PC,\"toolkit\",undionly.kpxe\n");
                out.push_str("pxe-service=tag:known,tag:!ipxe,X86-64_EFI,\"toolkit\",ipxe.efi\n");
            }
        }
        out.push_str("dhcp-userclass=set:ipxe,iPXE\n");
        out.push_str("dhcp-match=set:efi64,option:client-arch,7\ndhcp-match=set:efi64,option:client-arch,9\n");
        let _ = writeln!(out, "dhcp-boot=tag:ipxe,{},,{}", self.boot_url, self.server_address);
        let _ = writeln!(out, "dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi,,{}", self.server_address);
        let _ = writeln!(out, "dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe,,{}", self.server_address);
        out
    }
}

/// What dnsmasq logged about a node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DhcpEvent {
    /// `DHCPDISCOVER` from `mac`.
    Discover {
        /// The client.
        mac: String,
    },
    /// `DHCPOFFER` of `address`.
    Offer {
        /// The client.
        mac: String,
        /// Offered.
        address: Ipv4Addr,
    },
    /// `DHCPREQUEST`.
    Request {
        /// The client.
        mac: String,
    },
    /// `DHCPACK` of `address`: the lease is given.
    Ack {
        /// The client.
        mac: String,
        /// Given.
        address: Ipv4Addr,
    },
    /// TFTP sent `file` to the client that holds `address`.
    TftpSent {
        /// The client (from its lease).
        mac: String,
        /// The file.
        file: String,
        /// Sent to.
        address: Ipv4Addr,
    },
}

impl DhcpEvent {
    /// The client's MAC.
    #[must_use]
    pub fn mac(&self) -> &str {
        match self {
            Self::Discover { mac }
            | Self::Request { mac }
            | Self::Offer { mac, .. }
            | Self::Ack { mac, .. }
            | Self::TftpSent { mac, .. } => mac,
        }
    }
}

/// Reads dnsmasq's log lines into events; TFTP lines name an address, which the
/// leases seen so far turn into a MAC.
#[derive(Debug, Default)]
pub struct LogReader {
    leases: Vec<(Ipv4Addr, String)>,
}

impl LogReader {
    /// The event of one log line, if it is one.
    pub fn line(&mut self, line: &str) -> Option<DhcpEvent> {
        if let Some(rest) = line.split_once("dnsmasq-tftp").map(|(_, rest)| rest) {
            let sent = rest.split_once("sent ")?.1;
            let (file, to) = sent.rsplit_once(" to ")?;
            let address: Ipv4Addr = to.trim().parse().ok()?;
            let mac = self.leases.iter().rev().find(|(leased, _)| *leased == address)?.1.clone();
            let file = file.rsplit('/').next().unwrap_or(file).to_owned();
            return Some(DhcpEvent::TftpSent { mac, file, address });
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let position = words.iter().position(|word| word.starts_with("DHCP") && word.contains('('))?;
        let kind = words[position].split('(').next()?;
        let rest = &words[position + 1..];
        let mac = rest.iter().find(|word| word.len() == 17 && word.matches(':').count() == 5)?.to_ascii_lowercase();
        let address = rest.iter().find_map(|word| word.parse::<Ipv4Addr>().ok());
        match (kind, address) {
            ("DHCPDISCOVER", _) => Some(DhcpEvent::Discover { mac }),
            ("DHCPREQUEST", _) => Some(DhcpEvent::Request { mac }),
            ("DHCPOFFER", Some(address)) => Some(DhcpEvent::Offer { mac, address }),
            ("DHCPACK", Some(address)) => {
                self.leases.push((address, mac.clone()));
                Some(DhcpEvent::Ack { mac, address })
            }
            _ => None,
        }
    }
}

/// A running dnsmasq, stopped on [`Dnsmasq::stop`] or drop.
pub struct Dnsmasq {
    child: Child,
    log: PathBuf,
}

impl Dnsmasq {
    /// Writes the configuration under `dir`, checks it with `dnsmasq --test`, and starts it.
    ///
    /// # Errors
    /// [`DhcpError`]: dnsmasq or iPXE missing, a refused configuration (dnsmasq's
    /// words, which name the line), or a start that failed (e.g. the interface is
    /// not there, or another DHCP server holds the port).
    pub fn start(config: &DhcpConfig, dir: &Path) -> Result<Self, DhcpError> {
        let paths = Paths::under(dir);
        std::fs::create_dir_all(&paths.tftp).map_err(io(&paths.tftp))?;
        for file in ["undionly.kpxe", "ipxe.efi"] {
            let from = Path::new(IPXE_DIR).join(file);
            if !from.is_file() {
                return Err(DhcpError::NoIpxe(from));
            }
            let to = paths.tftp.join(file);
            std::fs::copy(&from, &to).map_err(io(&to))?;
        }
        // A run killed outright leaves its dnsmasq holding the DHCP and TFTP ports.
        stop_stale(&paths);
        std::fs::write(&paths.config, config.render(dir)).map_err(io(&paths.config))?;
        let _ = std::fs::remove_file(&paths.log);
        let refused = |message: String| DhcpError::Refused { config: paths.config.clone(), message };
        let test = Command::new("dnsmasq")
            .arg("--test")
            .arg(format!("--conf-file={}", paths.config.display()))
            .output()
            .map_err(|_| DhcpError::Missing)?;
        if !test.status.success() {
            return Err(refused(String::from_utf8_lossy(&test.stderr).trim().to_owned()));
        }
        let mut child = Command::new("dnsmasq")
            .arg("--keep-in-foreground")
            .arg(format!("--conf-file={}", paths.config.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|_| DhcpError::Missing)?;
        // A bind failure ends it at once; give it that moment.
        std::thread::sleep(std::time::Duration::from_millis(300));
        if let Ok(Some(_)) = child.try_wait() {
            let mut message = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut message);
            }
            return Err(refused(message.trim().to_owned()));
        }
        Ok(Self { child, log: paths.log })
    }

    /// The events of its log, as they are written.
    #[must_use]
    pub fn events(&self) -> UnboundedReceiver<DhcpEvent> {
        let (sender, receiver) = unbounded_channel();
        let log = self.log.clone();
        tokio::spawn(async move {
            let mut reader = LogReader::default();
            let mut offset = 0;
            loop {
                if let Ok(text) = tokio::fs::read(&log).await
                    && text.len() > offset
                {
                    let end =
                        text[offset..].iter().rposition(|&byte| byte == b'\n').map_or(offset, |at| offset + at + 1);
                    for line in String::from_utf8_lossy(&text[offset..end]).lines() {
                        if let Some(event) = reader.line(line)
                            && sender.send(event).is_err()
                        {
                            return;
                        }
                    }
                    offset = end;
                }
                if sender.is_closed() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        });
        receiver
    }

    /// The log file (kept after the run, for whoever investigates a node).
    #[must_use]
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Stops it.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stops the dnsmasq a killed run left behind: the one whose pid file is ours and
/// whose command line names our configuration (a recycled pid is someone else's).
fn stop_stale(paths: &Paths) {
    let Some(pid) = std::fs::read_to_string(&paths.pid).ok().and_then(|text| text.trim().parse::<u32>().ok()) else {
        return;
    };
    let Ok(command_line) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return };
    let ours = format!("--conf-file={}", paths.config.display());
    if !command_line.split(|&byte| byte == 0).any(|argument| argument == ours.as_bytes()) {
        return;
    }
    let _ = Command::new("kill").arg(pid.to_string()).status();
    // It releases its sockets as it exits; the new one binds the same ports.
    for _ in 0..50 {
        if !running(pid) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(&paths.pid);
}

/// Whether `pid` is alive (a zombie is not: its sockets are closed).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: DhcpMode) -> DhcpConfig {
        DhcpConfig {
            interface: "br0".to_owned(),
            server_address: "10.77.0.1".parse().expect("ip"),
            mode,
            hosts: vec![
                DhcpHost {
                    name: "vm01".to_owned(),
                    macs: vec!["52:54:00:77:00:11".to_owned(), "52:54:00:77:01:11".to_owned()],
                    address: "10.77.0.11".parse().expect("ip"),
                },
                DhcpHost {
                    name: "vm02".to_owned(),
                    macs: vec!["52:54:00:77:00:12".to_owned()],
                    address: "10.77.0.12".parse().expect("ip"),
                },
            ],
            gateway: None,
            boot_url: "http://10.77.0.1:8069/boot.ipxe".to_owned(),
        }
    }

    #[test]
    fn dhcp_mode_answers_only_the_nodes_and_real_dnsmasq_accepts_both_modes() {
        let dir = Path::new("/run/toolkit/provision");
        let subnet: Ipv4Net = "10.77.0.0/24".parse().expect("net");
        let dhcp = config(DhcpMode::Dhcp { subnet }).render(dir);
        assert!(dhcp.contains("dhcp-range=10.77.0.0,static,255.255.255.0,1h\n"), "{dhcp}");
        assert!(dhcp.contains("dhcp-ignore=tag:!known\n"), "{dhcp}");
        assert!(dhcp.contains("dhcp-host=52:54:00:77:00:11,52:54:00:77:01:11,10.77.0.11,vm01\n"), "{dhcp}");
        assert!(dhcp.contains("dhcp-boot=tag:ipxe,http://10.77.0.1:8069/boot.ipxe,,10.77.0.1\n"), "{dhcp}");
        let proxy = config(DhcpMode::Proxy { subnet }).render(dir);
        assert!(proxy.contains("dhcp-range=10.77.0.0,proxy,255.255.255.0\n"), "{proxy}");
        assert!(!proxy.contains("dhcp-host="), "{proxy}");
        for (name, text) in [("dhcp", dhcp), ("proxy", proxy)] {
            let scratch = tempfile::tempdir().expect("tempdir");
            let file = scratch.path().join("dnsmasq.conf");
            std::fs::write(&file, text).expect("writes");
            let Ok(output) =
                Command::new("dnsmasq").arg("--test").arg(format!("--conf-file={}", file.display())).output()
            else {
                crate::testing::cannot_run("dnsmasq is not installed: apt-get install dnsmasq-base");
                return;
            };
            assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        }
    }

    #[test]
    fn a_typo_is_refused_by_dnsmasq_naming_the_line() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let file = scratch.path().join("dnsmasq.conf");
        std::fs::write(&file, "port=0\ndhcp-rnage=10.0.0.1,static\n").expect("writes");
        let Ok(output) = Command::new("dnsmasq").arg("--test").arg(format!("--conf-file={}", file.display())).output()
        else {
            crate::testing::cannot_run("dnsmasq is not installed: apt-get install dnsmasq-base");
            return;
        };
        assert!(!output.status.success());
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains("line 2"), "{said}");
    }

    /// Lines as dnsmasq 2.90 (Debian 12 backports host) logged a VM's network boot in
    /// this project's VM lab; see tests/fixtures/provision/SOURCE.md.
    /// A process whose command line is `sh -c 'sleep 60; :' --conf-file=<config>`, as
    /// a dnsmasq of that configuration shows (the `:` keeps sh from becoming sleep).
    fn pretend_dnsmasq(config: &Path) -> std::process::Child {
        let argument = format!("--conf-file={}", config.display());
        let child = Command::new("sh").args(["-c", "sleep 60; :"]).arg(&argument).spawn().expect("sh runs");
        // Until it has exec'd, the child shows the test's own command line.
        for _ in 0..100 {
            let shown = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap_or_default();
            if shown.split(|&byte| byte == 0).any(|word| word == argument.as_bytes()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        child
    }

    #[test]
    fn a_killed_runs_dnsmasq_is_stopped_and_nobody_elses_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = Paths::under(dir.path());
        let mut ours = pretend_dnsmasq(&paths.config);
        std::fs::write(&paths.pid, format!("{}\n", ours.id())).expect("pid file");
        stop_stale(&paths);
        let status = ours.wait().expect("waits");
        assert!(!status.success(), "stopped by a signal: {status:?}");
        assert!(!paths.pid.exists());

        let mut other = pretend_dnsmasq(&dir.path().join("someone-else.conf"));
        std::fs::write(&paths.pid, format!("{}\n", other.id())).expect("pid file");
        stop_stale(&paths);
        assert!(other.try_wait().expect("polls").is_none(), "another configuration's process is left alone");
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn the_log_reads_as_events_per_mac() {
        let log = include_str!("../../../tests/fixtures/provision/dnsmasq-pxe-boot.log");
        let mut reader = LogReader::default();
        let events: Vec<DhcpEvent> = log.lines().filter_map(|line| reader.line(line)).collect();
        assert!(events.iter().any(|event| matches!(event, DhcpEvent::Discover { .. })), "{events:?}");
        let acks: Vec<&DhcpEvent> = events.iter().filter(|event| matches!(event, DhcpEvent::Ack { .. })).collect();
        let address: Ipv4Addr = "10.77.0.11".parse().expect("ip");
        assert_eq!(acks, [&DhcpEvent::Ack { mac: "52:54:00:77:00:11".to_owned(), address }]);
        assert!(events.contains(&DhcpEvent::Offer { mac: "52:54:00:77:00:11".to_owned(), address }), "{events:?}");
        assert!(events.iter().all(|event| event.mac() == "52:54:00:77:00:11"), "{events:?}");
        // A TFTP line names the address; the lease names the MAC.
        let sent = reader.line("Dec  5 16:14:29 dnsmasq-tftp[18605]: sent /run/x/tftp/undionly.kpxe to 10.77.0.11");
        assert_eq!(
            sent,
            Some(DhcpEvent::TftpSent {
                mac: "52:54:00:77:00:11".to_owned(),
                file: "undionly.kpxe".to_owned(),
                address
            })
        );
    }
}
