//! Release numbers the blueprint names, which lint checks and expand reads: an exact
//! Kubernetes release (kubeadm's `kubernetesVersion` and the pinned packages need one)
//! and the oldest Slurm release the configs must run on (which keys may be written).
//!
//! Stage: load (shared by check and expand). Input: the blueprint's version text.
//! Output: the release and its minor version.

/// A Slurm release, `(year, month)`: `22.05` → `(22, 5)`.
pub type SlurmRelease = (u32, u32);

/// `22.05`, `23.11`, `24.05.3` → `(22, 5)`, `(23, 11)`, `(24, 5)`; `None` for anything else.
#[must_use]
pub fn parse_slurm_release(text: &str) -> Option<SlurmRelease> {
    let mut parts = text.trim().split('.');
    let year: u32 = parts.next()?.parse().ok()?;
    let month_text = parts.next()?;
    let month: u32 = month_text.parse().ok()?;
    if let Some(patch) = parts.next() {
        patch.parse::<u32>().ok()?;
    }
    (parts.next().is_none() && month_text.len() == 2 && (1..=12).contains(&month)).then_some((year, month))
}

/// `MAJOR.MINOR.PATCH` of an exact Kubernetes release (`1.33.4`, `v1.33.4`), and its
/// `MAJOR.MINOR`; `None` for anything else (`1.33`, `stable-1.33`, `1.33.x`).
#[must_use]
pub fn parse_release(version: &str) -> Option<(String, String)> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = version.split('.').collect();
    let numeric = |part: &&str| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit());
    if parts.len() != 3 || !parts.iter().all(numeric) {
        return None;
    }
    Some((version.to_owned(), format!("{}.{}", parts[0], parts[1])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_releases_pin_packages() {
        assert_eq!(parse_release("1.33.4"), Some(("1.33.4".to_owned(), "1.33".to_owned())));
        assert_eq!(parse_release("v1.34.0"), Some(("1.34.0".to_owned(), "1.34".to_owned())));
        for wrong in ["1.33", "stable-1.33", "1.33.x", "1.33.4.1", "1..4", ""] {
            assert_eq!(parse_release(wrong), None, "{wrong}");
        }
    }
}
