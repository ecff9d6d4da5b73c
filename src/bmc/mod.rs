//! Bare metal through its BMC: Redfish over HTTPS.
//!
//! Stage: observe/apply (API targets). Input: the inventory's `bmcs` entry for a host
//! ([`BmcConfig::from_inventory`]). Output: discovered facts and changes made on the BMC.
//!
//! - [`redfish`]: the client ([`Redfish`]): discovery, power, one-time boot, BIOS, firmware;
//!   [`redfish::settings`]: BIOS values in effect and queued for the next reset.
//! - [`session`]: credentials ([`Sensitive`] never prints) and session/basic authentication.
//! - [`version`]: vendor firmware versions compared (newer, older, or why not comparable).
//! - [`inspect`]: the hardware of a system ([`Redfish::inspect`]), each part reported or why not.
//! - [`logs`]: the system's and its managers' event logs (`LogServices`) within a window.
//! - [`virtual_media`]: the system's virtual CD, an ISO inserted and ejected by URL.
//! - [`error`]: [`BmcError`], naming host, URL and user, never a password.
//! - [`resources`]: reads the API objects of the desired state (power, boot override,
//!   BIOS attribute, cloud instance) as they are; their data types are the core's
//!   [`crate::resource::api`], and `plan::api` diffs them.

pub mod error;
pub mod inspect;
pub mod logs;
pub mod redfish;
pub mod resources;
pub mod session;
pub mod version;
pub mod virtual_media;

pub use error::BmcError;
pub use redfish::settings::{BiosSettings, PendingSetting};
pub use redfish::{
    BiosChange, BmcConfig, BootOverride, BootTarget, FirmwareMismatch, Nic, PowerState, Redfish, ResetType,
    RetryPolicy, SystemInfo, bios_diff, firmware_check, power_cycle_type,
};
pub use session::{Credentials, Sensitive};
