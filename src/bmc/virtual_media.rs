//! Virtual media: the BMC fetches an ISO from a URL and shows it to the machine as
//! a CD, so a node boots toolkit's installer with no DHCP or TFTP on its network.
//!
//! Stage: apply (API targets, during provisioning). Input: a connected [`Redfish`]
//! client and a system path. Output: the system's virtual CD ([`VirtualDrive`]),
//! media inserted or ejected.
//!
//! BMCs put the collection in one of two places: under the system (Redfish 2021.1
//! and later, newer iDRACs, sushy-tools) or under the system's manager (older
//! firmware, reached through the system's `Links/ManagedBy`). Both are followed by
//! link; a drive is chosen by its `MediaTypes`, never by its id (`CD1`, `Cd`, `CD`,
//! `1` all exist). The actions' targets are read from the drive's `Actions` when it
//! has them, else the path the Redfish schema defines for them.

use serde_json::{Value, json};

use super::error::BmcError;
use super::redfish::{Redfish, link, members, string_at};

/// A virtual drive that takes CD images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualDrive {
    /// Its path.
    pub path: String,
    /// Where `InsertMedia` is posted.
    pub insert: String,
    /// Where `EjectMedia` is posted.
    pub eject: String,
    /// Whether media is in it now.
    pub inserted: bool,
    /// The image in it, if any.
    pub image: Option<String>,
}

/// The first drive of `drives` (their documents, in the collection's order) that
/// takes a CD or DVD image.
#[must_use]
pub fn choose_cd(drives: &[Value]) -> Option<VirtualDrive> {
    drives.iter().find_map(|drive| {
        let types = drive.get("MediaTypes").and_then(Value::as_array)?;
        if !types.iter().filter_map(Value::as_str).any(|kind| kind == "CD" || kind == "DVD") {
            return None;
        }
        let path = string_at(drive, "/@odata.id")?;
        let action = |name: &str| {
            string_at(drive, &format!("/Actions/#VirtualMedia.{name}/target"))
                .unwrap_or_else(|| format!("{}/Actions/VirtualMedia.{name}", path.trim_end_matches('/')))
        };
        Some(VirtualDrive {
            insert: action("InsertMedia"),
            eject: action("EjectMedia"),
            inserted: drive.get("Inserted").and_then(Value::as_bool).unwrap_or(false),
            image: string_at(drive, "/Image").filter(|image| !image.is_empty()),
            path,
        })
    })
}

impl Redfish {
    /// The system's virtual CD drive.
    ///
    /// # Errors
    /// [`BmcError::Unsupported`] when neither the system nor its managers offer one
    /// (some BMCs sell virtual media as a licence), or see [`BmcError`].
    pub async fn virtual_cd(&self, system: &str) -> Result<VirtualDrive, BmcError> {
        let document = self.get(system).await?;
        let mut collections: Vec<String> = link(&document, "/VirtualMedia").into_iter().collect();
        for manager in document.pointer("/Links/ManagedBy").and_then(Value::as_array).into_iter().flatten() {
            if let Some(path) = link(manager, "") {
                collections.extend(link(&self.get(&path).await?, "/VirtualMedia"));
            }
        }
        for collection in collections {
            let mut drives = Vec::new();
            for member in members(&self.get(&collection).await?) {
                drives.push(self.get(&member).await?);
            }
            if let Some(drive) = choose_cd(&drives) {
                return Ok(drive);
            }
        }
        Err(BmcError::Unsupported {
            host: self.host().to_owned(),
            what: format!("`{system}` has no virtual CD drive (no VirtualMedia member with MediaTypes CD or DVD)"),
        })
    }

    /// Puts the image at `url` in `drive` (read-only), ejecting what was there.
    ///
    /// # Errors
    /// See [`BmcError`]: the BMC could not fetch the image, among others.
    pub async fn insert_media(&self, drive: &VirtualDrive, url: &str) -> Result<(), BmcError> {
        if drive.inserted {
            self.eject_media(drive).await?;
        }
        tracing::info!(host = %self.host(), drive = %drive.path, url, "insert virtual media");
        self.post(&drive.insert, &json!({ "Image": url, "Inserted": true, "WriteProtected": true })).await
    }

    /// Empties `drive`.
    ///
    /// # Errors
    /// See [`BmcError`].
    pub async fn eject_media(&self, drive: &VirtualDrive) -> Result<(), BmcError> {
        self.post(&drive.eject, &json!({})).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mockup(path: &str) -> Value {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/support/mockups/dmtf-rackmount1/Systems/437XR1138R2/VirtualMedia")
            .join(path)
            .join("index.json");
        serde_json::from_slice(&std::fs::read(&file).expect("recorded")).expect("JSON")
    }

    #[test]
    fn the_cd_is_chosen_by_media_type_not_by_order_or_id() {
        // DMTF's collection lists the floppy first; its CD has no Actions object.
        let drives = [mockup("Floppy1"), mockup("CD1")];
        let drive = choose_cd(&drives).expect("a CD");
        assert_eq!(drive.path, "/redfish/v1/Systems/437XR1138R2/VirtualMedia/CD1");
        assert_eq!(drive.insert, "/redfish/v1/Systems/437XR1138R2/VirtualMedia/CD1/Actions/VirtualMedia.InsertMedia");
        assert_eq!(drive.eject, "/redfish/v1/Systems/437XR1138R2/VirtualMedia/CD1/Actions/VirtualMedia.EjectMedia");
        assert!(drive.inserted, "the recording has an image in it");
        assert_eq!(drive.image.as_deref(), Some("redfish.dmtf.org/freeImages/freeOS.1.1.iso"));
        assert_eq!(choose_cd(&[mockup("Floppy1")]), None, "a floppy/USB drive takes no ISO");
    }

    #[test]
    fn action_targets_the_bmc_gives_are_used_as_given() {
        let drive = json!({
            "@odata.id": "/redfish/v1/Managers/iDRAC.Embedded.1/VirtualMedia/CD",
            "MediaTypes": ["CD", "DVD"],
            "Inserted": false,
            "Image": "",
            "Actions": {
                "#VirtualMedia.InsertMedia": { "target": "/redfish/v1/Managers/iDRAC.Embedded.1/VirtualMedia/CD/Actions/VirtualMedia.InsertMedia" },
                "#VirtualMedia.EjectMedia": { "target": "/vendor/eject" }
            }
        });
        let chosen = choose_cd(&[drive]).expect("a CD");
        assert_eq!(chosen.eject, "/vendor/eject");
        assert!(!chosen.inserted);
        assert_eq!(chosen.image, None, "an empty Image is no image");
    }
}
