//! Hardware inspection through Redfish: what a node is, read from its BMC before
//! anything is written to it.
//!
//! Stage: observe (BMC). Input: a connected [`Redfish`] and a system path. Output:
//! [`Hardware`]: identity, processors, memory, drives, network interfaces with their
//! MACs and PCIe functions. Every part is read through the links the BMC gives
//! (collections' `Members`, the system's `Links.Chassis`), never through guessed
//! ids, and a part the BMC does not serve (404, 5xx, absent link — sushy-tools'
//! libvirt driver has no `Memory` or `PCIeDevices`, many BMCs no `Storage`) is
//! recorded as not reported, with why, instead of as zero.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::BmcError;
use super::redfish::{Redfish, link, members, string_at};

/// A node's hardware as its BMC reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// `Manufacturer`.
    pub manufacturer: Option<String>,
    /// `Model`.
    pub model: Option<String>,
    /// `SerialNumber`.
    pub serial: Option<String>,
    /// `ProcessorSummary.Count` (sockets, on most BMCs).
    pub processor_count: Option<u32>,
    /// `MemorySummary.TotalSystemMemoryGiB`.
    pub memory_gib: Option<f64>,
    /// Present processors (`Status.State` not `Absent`), CPUs and GPUs alike.
    pub processors: Option<Vec<Processor>>,
    /// Populated DIMMs.
    pub dimms: Option<Vec<Dimm>>,
    /// Drives (`Storage` controllers' drives, else `SimpleStorage` devices).
    pub drives: Option<Vec<Drive>>,
    /// Network interfaces.
    pub nics: Option<Vec<Interface>>,
    /// PCIe functions (the system's or its chassis' `PCIeDevices`).
    pub pcie: Option<Vec<PcieFunction>>,
    /// What the BMC did not report, and why (`Memory: HTTP 404`).
    pub not_reported: Vec<String>,
}

/// A processor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Processor {
    /// `Id`.
    pub id: String,
    /// `ProcessorType` (`CPU`, `GPU`, `FPGA`…).
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

/// A populated memory module.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dimm {
    /// `Id`.
    pub id: String,
    /// `CapacityMiB`.
    pub capacity_mib: Option<u64>,
}

/// A drive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drive {
    /// `Id` or `Name`.
    pub id: String,
    /// `Model`.
    pub model: Option<String>,
    /// `SerialNumber`.
    pub serial: Option<String>,
    /// `CapacityBytes`.
    pub capacity_bytes: Option<u64>,
    /// `MediaType` (`SSD`, `HDD`).
    pub media: Option<String>,
    /// `Protocol` (`NVMe`, `SATA`, `SAS`).
    pub protocol: Option<String>,
}

/// A network interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// `Id`.
    pub id: String,
    /// `MACAddress`.
    pub mac: Option<String>,
    /// `PermanentMACAddress`.
    pub permanent_mac: Option<String>,
    /// `LinkStatus`.
    pub link: Option<String>,
    /// `SpeedMbps`.
    pub speed_mbps: Option<u64>,
}

/// A PCIe function.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieFunction {
    /// The device's `Id` / the function's `Id`.
    pub id: String,
    /// `VendorId` (`0x10DE`).
    pub vendor_id: Option<String>,
    /// `DeviceId`.
    pub device_id: Option<String>,
    /// `ClassCode` (`0x030200`: 3D controller).
    pub class_code: Option<String>,
    /// `FunctionType` (`Physical`, `Virtual`).
    pub function_type: Option<String>,
}

/// NVIDIA's PCI vendor id.
pub const NVIDIA: &str = "0x10de";

impl Hardware {
    /// The MACs of its interfaces (the permanent one where the BMC gives it).
    #[must_use]
    pub fn macs(&self) -> Vec<String> {
        let mut macs: Vec<String> = Vec::new();
        let found = self
            .nics
            .iter()
            .flatten()
            .filter_map(|nic| nic.permanent_mac.clone().filter(|mac| !mac.is_empty()).or_else(|| nic.mac.clone()))
            .filter(|mac| !mac.is_empty() && mac != "00:00:00:00:00:00")
            .map(|mac| mac.to_ascii_lowercase());
        // A VLAN interface repeats its parent's MAC.
        for mac in found {
            if !macs.contains(&mac) {
                macs.push(mac);
            }
        }
        macs
    }

    /// CPU sockets: the present CPUs, else the processor summary's count.
    #[must_use]
    pub fn cpu_sockets(&self) -> Option<u32> {
        match &self.processors {
            Some(processors) => {
                let cpus = processors.iter().filter(|p| p.kind.as_deref().is_none_or(|kind| kind == "CPU")).count();
                (cpus > 0).then_some(cpus as u32).or(self.processor_count)
            }
            None => self.processor_count,
        }
    }

    /// Cores of every present CPU together, when each says.
    #[must_use]
    pub fn cpu_cores(&self) -> Option<u32> {
        let cpus: Vec<&Processor> = self
            .processors
            .iter()
            .flatten()
            .filter(|p| p.kind.as_deref().is_none_or(|kind| kind == "CPU"))
            .collect();
        if cpus.is_empty() {
            return None;
        }
        cpus.iter().map(|cpu| cpu.cores).sum()
    }

    /// GPUs: processors of type `GPU` where the BMC lists them so, else NVIDIA
    /// display/3D PCIe functions; `None` when the BMC reports neither.
    #[must_use]
    pub fn gpus(&self) -> Option<u32> {
        let listed = self.processors.iter().flatten().filter(|p| p.kind.as_deref() == Some("GPU")).count();
        if listed > 0 {
            return Some(listed as u32);
        }
        let pcie = self.pcie.as_ref()?;
        Some(
            pcie.iter()
                .filter(|function| {
                    function.vendor_id.as_deref().is_some_and(|vendor| vendor.eq_ignore_ascii_case(NVIDIA))
                        && function.class_code.as_deref().is_some_and(|class| class.to_ascii_lowercase().starts_with("0x03"))
                        && function.function_type.as_deref() != Some("Virtual")
                })
                .count() as u32,
        )
    }
}

/// Whether a failure means "not served here" rather than "cannot talk to the BMC".
fn not_served(error: &BmcError) -> bool {
    matches!(error, BmcError::NotFound { .. } | BmcError::Server { .. } | BmcError::Rejected { .. })
}

fn number(value: &Value, pointer: &str) -> Option<u64> {
    value.pointer(pointer).and_then(Value::as_u64)
}

impl Redfish {
    /// The hardware of `system`.
    ///
    /// # Errors
    /// [`BmcError`] when the system itself cannot be read, or the BMC cannot be
    /// talked to; a part it does not serve is recorded in
    /// [`Hardware::not_reported`] instead.
    pub async fn inspect(&self, system: &str) -> Result<Hardware, BmcError> {
        let value = self.get(system).await?;
        let mut hardware = Hardware {
            manufacturer: string_at(&value, "/Manufacturer"),
            model: string_at(&value, "/Model"),
            serial: string_at(&value, "/SerialNumber"),
            processor_count: number(&value, "/ProcessorSummary/Count").map(|count| count as u32),
            memory_gib: value.pointer("/MemorySummary/TotalSystemMemoryGiB").and_then(Value::as_f64),
            ..Hardware::default()
        };
        hardware.processors = self.part(&value, "/Processors", "Processors", &mut hardware.not_reported, processor).await?;
        hardware.dimms = self
            .part(&value, "/Memory", "Memory", &mut hardware.not_reported, |id, dimm| {
                let capacity = number(dimm, "/CapacityMiB");
                capacity.map(|capacity_mib| Dimm { id: id.to_owned(), capacity_mib: Some(capacity_mib) })
            })
            .await?;
        hardware.drives = self.drives(&value, &mut hardware.not_reported).await?;
        hardware.nics = self
            .part(&value, "/EthernetInterfaces", "EthernetInterfaces", &mut hardware.not_reported, |id, nic| {
                Some(Interface {
                    id: id.to_owned(),
                    mac: string_at(nic, "/MACAddress"),
                    permanent_mac: string_at(nic, "/PermanentMACAddress"),
                    link: string_at(nic, "/LinkStatus"),
                    speed_mbps: number(nic, "/SpeedMbps"),
                })
            })
            .await?;
        hardware.pcie = self.pcie(&value, &mut hardware.not_reported).await?;
        Ok(hardware)
    }

    /// Each member of the collection `pointer` links to, made by `make` (which may
    /// skip one: an absent processor, an empty DIMM slot).
    async fn part<T>(
        &self,
        system: &Value,
        pointer: &str,
        what: &str,
        not_reported: &mut Vec<String>,
        make: impl Fn(&str, &Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>, BmcError> {
        let Some(path) = link(system, pointer) else {
            not_reported.push(format!("{what}: the system links none"));
            return Ok(None);
        };
        let collection = match self.get(&path).await {
            Ok(collection) => collection,
            Err(error) if not_served(&error) => {
                not_reported.push(format!("{what}: {error}"));
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let mut out = Vec::new();
        for member in members(&collection) {
            let value = match self.get(&member).await {
                Ok(value) => value,
                Err(error) if not_served(&error) => {
                    not_reported.push(format!("{what} member `{member}`: {error}"));
                    continue;
                }
                Err(error) => return Err(error),
            };
            if string_at(&value, "/Status/State").as_deref() == Some("Absent") {
                continue;
            }
            let id = string_at(&value, "/Id").unwrap_or_else(|| member.rsplit('/').next().unwrap_or_default().to_owned());
            if let Some(item) = make(&id, &value) {
                out.push(item);
            }
        }
        Ok(Some(out))
    }

    /// Drives of every `Storage` controller, else `SimpleStorage` devices.
    async fn drives(&self, system: &Value, not_reported: &mut Vec<String>) -> Result<Option<Vec<Drive>>, BmcError> {
        let mut notes = Vec::new();
        let controllers = self.part(system, "/Storage", "Storage", &mut notes, |_, value| Some(value.clone())).await?;
        if let Some(controllers) = controllers {
            let mut drives = Vec::new();
            for controller in &controllers {
                let links: Vec<String> = controller
                    .get("Drives")
                    .and_then(Value::as_array)
                    .map(|items| items.iter().filter_map(|item| link(item, "")).collect())
                    .unwrap_or_default();
                for path in links {
                    match self.get(&path).await {
                        Ok(drive) if string_at(&drive, "/Status/State").as_deref() != Some("Absent") => {
                            drives.push(drive_of(&drive));
                        }
                        Ok(_) => {}
                        Err(error) if not_served(&error) => notes.push(format!("Storage drive `{path}`: {error}")),
                        Err(error) => return Err(error),
                    }
                }
            }
            not_reported.extend(notes);
            return Ok(Some(drives));
        }
        let simple = self
            .part(system, "/SimpleStorage", "SimpleStorage", &mut notes, |_, value| {
                let devices = value.get("Devices").and_then(Value::as_array)?;
                Some(
                    devices
                        .iter()
                        .filter(|device| string_at(device, "/Status/State").as_deref() != Some("Absent"))
                        .map(|device| Drive {
                            id: string_at(device, "/Name").unwrap_or_default(),
                            model: string_at(device, "/Model"),
                            capacity_bytes: number(device, "/CapacityBytes"),
                            ..Drive::default()
                        })
                        .collect::<Vec<_>>(),
                )
            })
            .await?;
        if simple.is_none() {
            not_reported.extend(notes);
        }
        Ok(simple.map(|lists| lists.into_iter().flatten().collect()))
    }

    /// PCIe functions, from the system's `PCIeDevices` (Redfish 2019.4+) or its
    /// first chassis'.
    async fn pcie(&self, system: &Value, not_reported: &mut Vec<String>) -> Result<Option<Vec<PcieFunction>>, BmcError> {
        let mut notes = Vec::new();
        let devices = match self.part(system, "/PCIeDevices", "PCIeDevices", &mut notes, |_, v| Some(v.clone())).await? {
            Some(devices) => Some(devices),
            None => match system.pointer("/Links/Chassis/0/@odata.id").and_then(Value::as_str) {
                Some(chassis) => match self.get(chassis).await {
                    Ok(chassis) => {
                        self.part(&chassis, "/PCIeDevices", "Chassis PCIeDevices", &mut notes, |_, v| Some(v.clone()))
                            .await?
                    }
                    Err(error) if not_served(&error) => {
                        notes.push(format!("Chassis: {error}"));
                        None
                    }
                    Err(error) => return Err(error),
                },
                None => None,
            },
        };
        let Some(devices) = devices else {
            not_reported.extend(notes);
            return Ok(None);
        };
        let mut functions = Vec::new();
        for device in &devices {
            let device_id = string_at(device, "/Id").unwrap_or_default();
            let Some(path) = link(device, "/PCIeFunctions") else { continue };
            let collection = match self.get(&path).await {
                Ok(collection) => collection,
                Err(error) if not_served(&error) => {
                    not_reported.push(format!("PCIeFunctions of `{device_id}`: {error}"));
                    continue;
                }
                Err(error) => return Err(error),
            };
            for member in members(&collection) {
                match self.get(&member).await {
                    Ok(function) => functions.push(PcieFunction {
                        id: format!("{device_id}/{}", string_at(&function, "/Id").unwrap_or_default()),
                        vendor_id: string_at(&function, "/VendorId"),
                        device_id: string_at(&function, "/DeviceId"),
                        class_code: string_at(&function, "/ClassCode"),
                        function_type: string_at(&function, "/FunctionType"),
                    }),
                    Err(error) if not_served(&error) => not_reported.push(format!("PCIe function `{member}`: {error}")),
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(Some(functions))
    }
}

fn processor(id: &str, value: &Value) -> Option<Processor> {
    Some(Processor {
        id: id.to_owned(),
        kind: string_at(value, "/ProcessorType"),
        model: string_at(value, "/Model"),
        socket: string_at(value, "/Socket"),
        cores: number(value, "/TotalCores").map(|cores| cores as u32),
        threads: number(value, "/TotalThreads").map(|threads| threads as u32),
    })
}

fn drive_of(value: &Value) -> Drive {
    Drive {
        id: string_at(value, "/Id").or_else(|| string_at(value, "/Name")).unwrap_or_default(),
        model: string_at(value, "/Model"),
        serial: string_at(value, "/SerialNumber"),
        capacity_bytes: number(value, "/CapacityBytes"),
        media: string_at(value, "/MediaType"),
        protocol: string_at(value, "/Protocol"),
    }
}
