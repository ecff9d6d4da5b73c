//! The inventory: where the hardware of a blueprint is and how to reach it.
//!
//! Stage: load. Input: a path. Output: [`LoadedInventory`] or diagnostics.

pub mod schema;
pub mod secrets;

use std::path::Path;

pub use schema::{Inventory, SecretRef, SwitchOs};

use crate::diagnostic::Diagnostics;
use crate::source::SourceFile;

/// An inventory with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedInventory {
    /// The typed inventory.
    pub inventory: Inventory,
    /// Its file, for diagnostics.
    pub source: SourceFile,
}

/// Loads the inventory at `path`.
///
/// # Errors
/// Diagnostics for unreadable files, YAML errors, inline secrets and schema errors.
pub fn load(path: &Path) -> Result<LoadedInventory, Diagnostics> {
    let (inventory, source) = crate::yaml::load::<Inventory>(path)?;
    Ok(LoadedInventory { inventory, source })
}
