//! The `os:` section: the operating system toolkit installs on blank bare-metal
//! nodes before it configures them (and a node group's own `os`, which replaces it).
//!
//! Stage: load. Serde types mirroring the YAML, nothing more: suites, mirrors and
//! package names stay strings so `check` can say what is wrong with them. Where the
//! image is served from and which network boots it is the inventory's
//! `provisioning` section: this section says what the nodes run, not where.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The OS of bare-metal nodes, installed from an image toolkit builds from the
/// distribution's packages (debootstrap) and writes to the disk `disk` selects.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Os {
    /// `debian` or `ubuntu`.
    pub distribution: Distribution,
    /// The release by code name: `bookworm` (Debian 12), `trixie` (13), `jammy`
    /// (Ubuntu 22.04), `noble` (24.04).
    pub suite: String,
    /// The package mirror the image is built from (default: `http://deb.debian.org/debian`
    /// for Debian; Ubuntu needs the site's mirror, e.g. `http://archive.ubuntu.com/ubuntu`).
    #[serde(default)]
    pub mirror: Option<String>,
    /// The kernel package (default `linux-image-amd64` on Debian, `linux-image-generic` on Ubuntu).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Packages installed into the image beyond the base system (kernel, systemd,
    /// OpenSSH, sudo).
    #[serde(default)]
    pub packages: Vec<String>,
    /// The disk the OS is written to. Every hint given must match exactly one disk
    /// (as Ironic's root device hints): never "the first disk".
    pub disk: OsDisk,
    /// System locale (default `C.UTF-8`).
    #[serde(default = "default_locale")]
    pub locale: String,
    /// Time zone, as a tz database name (default `Etc/UTC`).
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// How the node reaches the installer: network boot (`pxe`, the default).
    #[serde(default)]
    pub boot: OsBoot,
    /// Firmware boot mode set with the one-time boot override: `uefi` or `legacy`;
    /// absent, the node keeps the mode it has.
    #[serde(default)]
    pub boot_mode: Option<BootMode>,
}

fn default_locale() -> String {
    "C.UTF-8".to_owned()
}

fn default_timezone() -> String {
    "Etc/UTC".to_owned()
}

/// The distribution an image is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Debian.
    Debian,
    /// Ubuntu.
    Ubuntu,
}

/// How a node boots the installer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OsBoot {
    /// DHCP + TFTP + iPXE + HTTP from toolkit's provisioning service.
    #[default]
    Pxe,
}

/// Firmware boot mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BootMode {
    /// UEFI.
    Uefi,
    /// Legacy BIOS.
    Legacy,
}

/// Which disk receives the OS: every hint given must match, and exactly one disk
/// may match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OsDisk {
    /// A stable device path: `/dev/disk/by-path/…` (the slot) or `/dev/disk/by-id/…`.
    #[serde(default)]
    pub path: Option<String>,
    /// The drive's serial number.
    #[serde(default)]
    pub serial: Option<String>,
    /// The drive's World Wide Name (`0x5000c500a1b2c3d4`).
    #[serde(default)]
    pub wwn: Option<String>,
    /// The drive's model as the kernel reports it.
    #[serde(default)]
    pub model: Option<String>,
    /// Smallest size accepted, in GiB.
    #[serde(default)]
    pub min_gib: Option<u64>,
    /// Largest size accepted, in GiB.
    #[serde(default)]
    pub max_gib: Option<u64>,
}

impl OsDisk {
    /// Whether no hint is given (which `check` refuses).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}
