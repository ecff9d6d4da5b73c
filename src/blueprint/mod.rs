//! The blueprint: what the cluster is. `schema` mirrors the file, `load` reads it;
//! [`crate::model::check`] finds every semantic problem in it at once.

pub mod duration;
pub mod kueue;
pub mod load;
pub mod release;
pub mod schema;

pub use load::{LoadedBlueprint, load};
pub use schema::Blueprint;
