//! Hardware inspection over Redfish: what is in the box, as the BMC reports it.
//!
//! Stage: inspect (before provisioning). Input: a connected [`Redfish`] client and a
//! system path. Output: [`Hardware`]: identity, processors, memory, drives, NICs and
//! PCIe functions — each part either as reported or marked [`Part::NotReported`] with
//! the reason, never a guessed zero.
//!
//! Every resource is reached through the links of the documents read before it
//! (`Processors`, `Memory`, `Storage` → `Drives`, `SimpleStorage`, `EthernetInterfaces`,
//! the system's or its chassis' `PCIeDevices` → `PCIeFunctions`): BMCs name their
//! members freely (`CPU1`, `CPU.Socket.1`, `NIC.Integrated.1-1-1`), so ids are never built.
//! A collection the BMC does not link, or answers 404/5xx for (sushy-tools' libvirt
//! driver: `Memory` 404, `Storage` 500, no `PCIeDevices`), leaves that part not
//! reported and inspection of the rest goes on; a BMC that does not answer at all is
//! an error.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::BmcError;
use super::redfish::{BmcConfig, Redfish};

/// A part of the hardware as the BMC reports it, or why it does not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part<T> {
    /// What the BMC listed.
    Reported(T),
    /// The BMC has no such resource or failed to give it.
    NotReported {
        /// Why (the missing link, or the URL and HTTP status).
        reason: String,
    },
}

impl<T> Part<T> {
    /// The reported value, if any.
    pub fn reported(&self) -> Option<&T> {
        match self {
            Self::Reported(value) => Some(value),
            Self::NotReported { .. } => None,
        }
    }

    /// Why it was not reported, if it was not.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Reported(_) => None,
            Self::NotReported { reason } => Some(reason),
        }
    }
}

/// One processor (`Processors` member): a CPU socket, or a GPU/FPGA where the BMC lists them so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Processor {
    /// `Id`.
    pub id: String,
    /// `ProcessorType` (`CPU`, `GPU`, `FPGA`, `Accelerator`…).
    pub kind: Option<String>,
    /// `Model`.
    pub model: Option<String>,
    /// `Socket`.
    pub socket: Option<String>,
    /// `TotalCores`.
    pub cores: Option<u32>,
    /// `TotalThreads`.
    pub threads: Option<u32>,
}

/// The system's own summary of its processors (`ProcessorSummary`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessorSummary {
    /// `Count` (sockets).
    pub count: Option<u32>,
    /// `CoreCount` (all sockets).
    pub cores: Option<u32>,
    /// `LogicalProcessorCount` (threads, all sockets).
    pub threads: Option<u32>,
    /// `Model`.
    pub model: Option<String>,
}

/// One drive (a `Storage` controller's `Drives` link, or a `SimpleStorage` device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drive {
    /// `Id` (a `SimpleStorage` device has none: its `Name`).
    pub id: String,
    /// `CapacityBytes`.
    pub capacity_bytes: Option<u64>,
    /// `Model`.
    pub model: Option<String>,
    /// `SerialNumber`.
    pub serial: Option<String>,
    /// `MediaType` (`SSD`, `HDD`).
    pub media: Option<String>,
    /// `Protocol` (`NVMe`, `SATA`, `SAS`).
    pub protocol: Option<String>,
}

/// One Ethernet interface of the system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicPort {
    /// `Id`.
    pub id: String,
    /// `MACAddress`.
    pub mac: Option<String>,
    /// `PermanentMACAddress`.
    pub permanent_mac: Option<String>,
    /// `LinkStatus` (`LinkUp`, `NoLink`, `LinkDown`).
    pub link: Option<String>,
    /// `SpeedMbps`.
    pub speed_mbps: Option<u64>,
}

/// One PCIe function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieFunction {
    /// The function's path on the BMC.
    pub uri: String,
    /// `VendorId` (`0x10DE`).
    pub vendor_id: Option<String>,
    /// `DeviceId`.
    pub device_id: Option<String>,
    /// `ClassCode` (`0x030200`: 3D controller).
    pub class_code: Option<String>,
    /// `FunctionType` (`Physical`, `Virtual`).
    pub function_type: Option<String>,
}

/// What the BMC reports about one system's hardware.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// The system's path (`/redfish/v1/Systems/1`).
    pub system: String,
    /// `Manufacturer`.
    pub manufacturer: Option<String>,
    /// `Model`.
    pub model: Option<String>,
    /// `SerialNumber`.
    pub serial: Option<String>,
    /// `ProcessorSummary`, when the system has one.
    pub processor_summary: Option<ProcessorSummary>,
    /// `MemorySummary.TotalSystemMemoryGiB`, when given.
    pub memory_gib: Option<f64>,
    /// Present `Processors` members.
    pub processors: Part<Vec<Processor>>,
    /// Sum of the present DIMMs' `CapacityMiB`.
    pub memory_modules_mib: Part<u64>,
    /// Drives of every storage controller (or `SimpleStorage` devices).
    pub drives: Part<Vec<Drive>>,
    /// Ethernet interfaces.
    pub nics: Part<Vec<NicPort>>,
    /// PCIe functions of the system's (or its chassis') PCIe devices.
    pub pcie: Part<Vec<PcieFunction>>,
}

/// Where documents come from: the BMC, or recorded payloads in tests.
trait Reader {
    /// The JSON document at `path`.
    async fn read(&self, path: &str) -> Result<Value, BmcError>;
}

impl Reader for Redfish {
    async fn read(&self, path: &str) -> Result<Value, BmcError> {
        self.get(path).await
    }
}

impl Redfish {
    /// Reads the hardware of `system` (a path from [`Redfish::systems`]).
    ///
    /// # Errors
    /// The system itself cannot be read, or the BMC stops answering; a part the BMC
    /// lacks or fails on is recorded as [`Part::NotReported`] instead.
    pub async fn inspect(&self, system: &str) -> Result<Hardware, BmcError> {
        inspect_with(self, system).await
    }
}

/// Connects to the BMC of `config`, inspects its only system and closes the session.
///
/// # Errors
/// The BMC cannot be reached or authenticated, has not exactly one system, or the
/// system cannot be read; each error names the host.
pub async fn inspect_bmc(config: BmcConfig) -> Result<Hardware, BmcError> {
    let client = Redfish::connect(config).await?;
    let system = client.system().await?;
    let hardware = client.inspect(&system).await;
    // A session left open only costs the BMC a slot until it times out: the
    // inspection's own outcome matters more than the logout's.
    let _ = client.close().await;
    hardware
}

/// Why a part is not reported: an answer that says the BMC lacks it (404, 4xx, 5xx —
/// sushy-tools answers 500 for `Storage` on libvirt); a transport failure is not
/// tolerated, since then nothing else would be read either.
fn tolerated(error: BmcError) -> Result<String, BmcError> {
    match error {
        BmcError::NotFound { url, .. } => Ok(format!("`{url}` answered HTTP 404")),
        BmcError::Server { url, status, .. } | BmcError::Rejected { url, status, .. } => {
            Ok(format!("`{url}` answered HTTP {status}"))
        }
        BmcError::Decode { url, reason, .. } => Ok(format!("`{url}`: {reason}")),
        other => Err(other),
    }
}

/// A part's outcome: reported, or not with the reason; other errors go up.
fn part<T>(outcome: Result<Result<T, String>, BmcError>) -> Result<Part<T>, BmcError> {
    match outcome {
        Ok(Ok(value)) => Ok(Part::Reported(value)),
        Ok(Err(reason)) => Ok(Part::NotReported { reason }),
        Err(error) => tolerated(error).map(|reason| Part::NotReported { reason }),
    }
}

fn text(value: &Value, pointer: &str) -> Option<String> {
    value.pointer(pointer).and_then(Value::as_str).map(str::to_owned)
}

fn number(value: &Value, pointer: &str) -> Option<u64> {
    value.pointer(pointer).and_then(Value::as_u64)
}

fn small(value: &Value, pointer: &str) -> Option<u32> {
    number(value, pointer).and_then(|n| u32::try_from(n).ok())
}

fn link(value: &Value, pointer: &str) -> Option<String> {
    text(value, &format!("{pointer}/@odata.id"))
}

/// `@odata.id`s of an array of links (`Members`, `Drives`, `Links/Chassis`).
fn links(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(|item| link(item, "")).collect())
        .unwrap_or_default()
}

/// Whether a resource says it is not there (an empty DIMM slot, an unpopulated socket).
fn absent(value: &Value) -> bool {
    text(value, "/Status/State").as_deref() == Some("Absent")
}

async fn inspect_with<R: Reader>(reader: &R, system: &str) -> Result<Hardware, BmcError> {
    let value = reader.read(system).await?;
    let processor_summary = value.get("ProcessorSummary").map(|summary| ProcessorSummary {
        count: small(summary, "/Count"),
        cores: small(summary, "/CoreCount"),
        threads: small(summary, "/LogicalProcessorCount"),
        model: text(summary, "/Model"),
    });
    Ok(Hardware {
        system: system.to_owned(),
        manufacturer: text(&value, "/Manufacturer"),
        model: text(&value, "/Model"),
        serial: text(&value, "/SerialNumber"),
        processor_summary,
        memory_gib: value.pointer("/MemorySummary/TotalSystemMemoryGiB").and_then(Value::as_f64),
        processors: part(processors(reader, &value).await)?,
        memory_modules_mib: part(memory(reader, &value).await)?,
        drives: part(drives(reader, &value).await)?,
        nics: part(nics(reader, &value).await)?,
        pcie: part(pcie(reader, &value).await)?,
    })
}

/// The present members of the collection the system links at `key`, or the reason there are none.
async fn members_of<R: Reader>(reader: &R, system: &Value, key: &str) -> Result<Result<Vec<Value>, String>, BmcError> {
    let Some(path) = link(system, &format!("/{key}")) else {
        return Ok(Err(format!("the system has no `{key}` link")));
    };
    let collection = reader.read(&path).await?;
    let mut items = Vec::new();
    for member in links(&collection, "/Members") {
        let item = reader.read(&member).await?;
        if !absent(&item) {
            items.push(item);
        }
    }
    Ok(Ok(items))
}

async fn processors<R: Reader>(reader: &R, system: &Value) -> Result<Result<Vec<Processor>, String>, BmcError> {
    Ok(members_of(reader, system, "Processors").await?.map(|items| {
        items
            .iter()
            .map(|item| Processor {
                id: text(item, "/Id").unwrap_or_default(),
                kind: text(item, "/ProcessorType"),
                model: text(item, "/Model"),
                // `Socket` is a string in the schema; some BMCs send a number.
                socket: text(item, "/Socket").or_else(|| number(item, "/Socket").map(|n| n.to_string())),
                cores: small(item, "/TotalCores"),
                threads: small(item, "/TotalThreads"),
            })
            .collect()
    }))
}

async fn memory<R: Reader>(reader: &R, system: &Value) -> Result<Result<u64, String>, BmcError> {
    Ok(members_of(reader, system, "Memory")
        .await?
        .map(|items| items.iter().filter_map(|item| number(item, "/CapacityMiB")).sum()))
}

fn drive(item: &Value) -> Drive {
    Drive {
        id: text(item, "/Id").or_else(|| text(item, "/Name")).unwrap_or_default(),
        capacity_bytes: number(item, "/CapacityBytes"),
        model: text(item, "/Model"),
        serial: text(item, "/SerialNumber"),
        media: text(item, "/MediaType"),
        protocol: text(item, "/Protocol"),
    }
}

/// `Storage` → each controller's `Drives`; where `Storage` is missing or fails,
/// `SimpleStorage` devices (older BMCs, sushy-tools) — with both reasons if neither answers.
async fn drives<R: Reader>(reader: &R, system: &Value) -> Result<Result<Vec<Drive>, String>, BmcError> {
    let storage = match members_of(reader, system, "Storage").await {
        Ok(Ok(controllers)) => {
            let mut drives = Vec::new();
            for controller in &controllers {
                for path in links(controller, "/Drives") {
                    let item = reader.read(&path).await?;
                    if !absent(&item) {
                        drives.push(drive(&item));
                    }
                }
            }
            return Ok(Ok(drives));
        }
        Ok(Err(reason)) => reason,
        Err(error) => tolerated(error)?,
    };
    let simple = match members_of(reader, system, "SimpleStorage").await {
        Ok(Ok(controllers)) => {
            let drives = controllers
                .iter()
                .flat_map(|controller| controller.get("Devices").and_then(Value::as_array).cloned().unwrap_or_default())
                .filter(|device| !absent(device))
                .map(|device| drive(&device))
                .collect();
            return Ok(Ok(drives));
        }
        Ok(Err(reason)) => reason,
        Err(error) => tolerated(error)?,
    };
    Ok(Err(format!("{storage}; {simple}")))
}

async fn nics<R: Reader>(reader: &R, system: &Value) -> Result<Result<Vec<NicPort>, String>, BmcError> {
    Ok(members_of(reader, system, "EthernetInterfaces").await?.map(|items| {
        items
            .iter()
            .map(|item| NicPort {
                id: text(item, "/Id").unwrap_or_default(),
                mac: text(item, "/MACAddress"),
                permanent_mac: text(item, "/PermanentMACAddress"),
                link: text(item, "/LinkStatus"),
                speed_mbps: number(item, "/SpeedMbps"),
            })
            .collect()
    }))
}

/// The PCIe device paths: the system's `PCIeDevices` (an array of links in
/// ComputerSystem up to v1.x, a collection link on newer ones), else each linked
/// chassis' `PCIeDevices` collection.
async fn pcie_devices<R: Reader>(reader: &R, system: &Value) -> Result<Result<Vec<String>, String>, BmcError> {
    let direct = links(system, "/PCIeDevices");
    if !direct.is_empty() {
        return Ok(Ok(direct));
    }
    if let Some(path) = link(system, "/PCIeDevices") {
        return Ok(Ok(links(&reader.read(&path).await?, "/Members")));
    }
    let mut devices = Vec::new();
    let mut linked = false;
    for chassis in links(system, "/Links/Chassis") {
        let value = reader.read(&chassis).await?;
        if let Some(path) = link(&value, "/PCIeDevices") {
            linked = true;
            devices.extend(links(&reader.read(&path).await?, "/Members"));
        }
    }
    if linked { Ok(Ok(devices)) } else { Ok(Err("neither the system nor its chassis has `PCIeDevices`".to_owned())) }
}

async fn pcie<R: Reader>(reader: &R, system: &Value) -> Result<Result<Vec<PcieFunction>, String>, BmcError> {
    let devices = match pcie_devices(reader, system).await? {
        Ok(devices) => devices,
        Err(reason) => return Ok(Err(reason)),
    };
    let mut functions = Vec::new();
    for path in devices {
        let device = reader.read(&path).await?;
        // Newer PCIeDevice: a `PCIeFunctions` collection; v1.0–1.3: `Links/PCIeFunctions` array.
        let paths = match link(&device, "/PCIeFunctions") {
            Some(collection) => links(&reader.read(&collection).await?, "/Members"),
            None => links(&device, "/Links/PCIeFunctions"),
        };
        for path in paths {
            let item = reader.read(&path).await?;
            functions.push(PcieFunction {
                uri: path,
                vendor_id: text(&item, "/VendorId"),
                device_id: text(&item, "/DeviceId"),
                class_code: text(&item, "/ClassCode"),
                function_type: text(&item, "/FunctionType"),
            });
        }
    }
    Ok(Ok(functions))
}

/// Why the inventory text could not be given a host's MACs.
#[derive(Debug, thiserror::Error)]
pub enum InventoryEditError {
    /// The host has no entry under `hosts`.
    #[error("{file}: no `hosts.{host}` entry to record its MACs in")]
    NoHost {
        /// The inventory file.
        file: String,
        /// The host.
        host: String,
    },
    /// The entry is laid out in a way not edited in place (a multi-line flow mapping,
    /// or `boot_macs` already written as a block list that differs).
    #[error("{file}:{line}: `hosts.{host}` is not laid out for an edit in place; set `boot_macs: [{macs}]` there")]
    Layout {
        /// The inventory file.
        file: String,
        /// Where the host's entry is.
        line: usize,
        /// The host.
        host: String,
        /// The MACs to write.
        macs: String,
    },
}

/// Where the `{` of a flow mapping opens on a `key: { … }` line, if it does.
fn flow_mapping(line: &str) -> Option<usize> {
    let colon = line.find(':')?;
    let rest = &line[colon + 1..];
    rest.trim_start().starts_with('{').then(|| colon + 1 + (rest.len() - rest.trim_start().len()))
}

/// The MACs of `hardware` to record: each interface's current MAC, else its permanent
/// one, lower-case (as iPXE's `${net0/mac}` and dnsmasq write them), without
/// duplicates or the all-zero MAC some BMCs give a disabled port.
#[must_use]
pub fn boot_macs(hardware: &Hardware) -> Vec<String> {
    let mut macs: Vec<String> = Vec::new();
    for nic in hardware.nics.reported().map(Vec::as_slice).unwrap_or_default() {
        let Some(mac) = nic.mac.as_deref().or(nic.permanent_mac.as_deref()) else { continue };
        let mac = mac.to_ascii_lowercase();
        if mac.is_empty() || mac == "00:00:00:00:00:00" || macs.contains(&mac) {
            continue;
        }
        macs.push(mac);
    }
    macs
}

/// The inventory text with `boot_macs: [..]` set on `hosts.<host>`, every other byte
/// (comments, order, quoting) kept; `None` when it already says exactly that. Edits
/// the text at the positions the source map gives rather than re-serialising, which
/// would drop the operator's comments.
///
/// # Errors
/// No such host, or a layout not edited in place (the error says what to write).
pub fn record_boot_macs(
    source: &crate::source::SourceFile,
    host: &str,
    macs: &[String],
) -> Result<Option<String>, InventoryEditError> {
    let file = source.display_path().display().to_string();
    let host_path = format!("hosts.{host}");
    let list = format!("[{}]", macs.join(", "));
    let layout =
        |line| InventoryEditError::Layout { file: file.clone(), line, host: host.to_owned(), macs: macs.join(", ") };
    let Some(key) = source.map.locate_key(&host_path) else {
        return Err(InventoryEditError::NoHost { file: file.clone(), host: host.to_owned() });
    };
    let mut lines: Vec<String> = source.text.lines().map(str::to_owned).collect();
    let macs_path = format!("{host_path}.boot_macs");
    if let Some(existing) = source.map.locate_key(&macs_path) {
        // Replace a one-line `boot_macs: [...]` up to its closing bracket.
        let line = lines.get_mut(existing.line - 1).ok_or_else(|| layout(existing.line))?;
        let start = line.char_indices().nth(existing.column - 1).map_or(line.len(), |(at, _)| at);
        let open = line[start..].find('[').map(|at| start + at).ok_or_else(|| layout(existing.line))?;
        let close = line[open..].find(']').map(|at| open + at).ok_or_else(|| layout(existing.line))?;
        if line[open..=close] == list {
            return Ok(None);
        }
        line.replace_range(open..=close, &list);
    } else if let Some(open) = flow_mapping(lines.get(key.line - 1).map_or("", String::as_str)) {
        // A one-line flow mapping: `node01: { address: 10.0.0.1 }`.
        let line = lines.get_mut(key.line - 1).ok_or_else(|| layout(key.line))?;
        let close = line.rfind('}').filter(|&close| close > open).ok_or_else(|| layout(key.line))?;
        let inner = line[..close].trim_end();
        let separator = if inner.ends_with('{') { " " } else { ", " };
        let head = inner.to_owned();
        *line = format!("{head}{separator}boot_macs: {list} {}", &line[close..]);
    } else {
        // A block mapping: a new first key, indented as the host's next line is.
        let indent = lines
            .iter()
            .skip(key.line)
            .find(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
            .map(|line| line.len() - line.trim_start().len())
            .filter(|&indent| indent >= key.column)
            .ok_or_else(|| layout(key.line))?;
        lines.insert(key.line, format!("{}boot_macs: {list}", " ".repeat(indent)));
    }
    let mut text = lines.join("\n");
    if source.text.ends_with('\n') {
        text.push('\n');
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests;
