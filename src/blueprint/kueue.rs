//! Kueue releases as a blueprint names them (`kueue_version: "0.15.0"`), and the
//! releases that change what toolkit writes.
//!
//! Stage: load/check (and expand, which picks the API from it). Input: the text.
//! Output: [`KueueVersion`].

/// A Kueue release `(major, minor, patch)`.
pub type KueueVersion = (u32, u32, u32);

/// First Kueue serving `v1beta2` (`cohortName`); before it, `v1beta1` (`cohort`).
pub const KUEUE_V1BETA2_SINCE: KueueVersion = (0, 15, 0);
/// First Kueue whose `Topology` is beta (before: `v1alpha1`, which toolkit does not write).
pub const KUEUE_TOPOLOGY_SINCE: KueueVersion = (0, 14, 0);

/// `0.15.0`, `v0.14`, `0.9.1` → the release; `None` when malformed.
#[must_use]
pub fn parse_kueue_version(text: &str) -> Option<KueueVersion> {
    let text = text.trim();
    let text = text.strip_prefix('v').unwrap_or(text);
    let mut parts = text.split('.').map(|part| part.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = match parts.next() {
        Some(patch) => patch?,
        None => 0,
    };
    parts.next().is_none().then_some((major, minor, patch))
}
