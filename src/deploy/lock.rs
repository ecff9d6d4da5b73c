//! The cluster lock: one deploy at a time, held on the controller host as a
//! directory (`mkdir` is atomic) with an owner file saying who, which process and
//! since when. A second deploy refuses and names the holder; `toolkit unlock
//! --force` removes a lock left by a crashed run.
//!
//! Stage: apply (guard). Input: an executor on the controller. Output: a held lock.

use std::time::{SystemTime, UNIX_EPOCH};

use thiserror::Error;

use crate::transport::{Executor, ExitStatus, TransportError};

/// Where the lock lives on the controller.
pub const LOCK_DIR: &str = "/var/lib/toolkit/deploy.lock";

/// Why the lock could not be taken or released.
#[derive(Debug, Error)]
pub enum LockError {
    /// Someone else holds it.
    #[error(
        "cluster is locked on `{host}` by {holder}; wait for that deploy, or run `toolkit unlock --force` if it died"
    )]
    Held {
        /// Controller host.
        host: String,
        /// The owner file's text.
        holder: String,
    },
    /// The controller could not be reached or refused the command.
    #[error("cluster lock on `{host}`: {source}")]
    Transport {
        /// Controller host.
        host: String,
        /// The transport error.
        #[source]
        source: TransportError,
    },
    /// The lock command failed.
    #[error("cluster lock on `{host}`: {message}")]
    Failed {
        /// Controller host.
        host: String,
        /// What the command said.
        message: String,
    },
}

const ACQUIRE: &str = r#"set -u
dir=$1 owner=$2
mkdir -p -- "$(dirname -- "$dir")" || exit 4
if mkdir -- "$dir" 2>/dev/null; then
  printf '%s\n' "$owner" > "$dir/owner" && echo acquired
else
  cat -- "$dir/owner" 2>/dev/null || echo "an unknown owner (no owner file)"
  exit 3
fi
"#;

/// Who is deploying: `user@host pid N since <UTC time>`.
#[must_use]
pub fn owner_description() -> String {
    let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "unknown".to_owned());
    let host =
        std::fs::read_to_string("/etc/hostname").map_or_else(|_| "localhost".to_owned(), |h| h.trim().to_owned());
    format!("{user}@{host} pid {} since {}", std::process::id(), utc_now())
}

/// Takes the lock on `executor`'s host.
///
/// # Errors
/// [`LockError::Held`] naming the holder, or a transport failure.
pub async fn acquire<E: Executor>(executor: &E, owner: &str) -> Result<(), LockError> {
    let argv = words(&["sh", "-c", ACQUIRE, "toolkit-lock", LOCK_DIR, owner]);
    let host = executor.host().to_owned();
    let output = executor.exec(&argv).await.map_err(|source| LockError::Transport { host: host.clone(), source })?;
    match output.status {
        ExitStatus::Code(0) => Ok(()),
        ExitStatus::Code(3) => Err(LockError::Held { host, holder: output.stdout_text().trim().to_owned() }),
        _ => Err(LockError::Failed { host, message: output.stderr_tail() }),
    }
}

/// Releases the lock (also `toolkit unlock --force`).
///
/// # Errors
/// A transport failure or a failing `rm`.
pub async fn release<E: Executor>(executor: &E) -> Result<(), LockError> {
    let argv = words(&["rm", "-rf", "--", LOCK_DIR]);
    let host = executor.host().to_owned();
    let output = executor.exec(&argv).await.map_err(|source| LockError::Transport { host: host.clone(), source })?;
    if output.success() { Ok(()) } else { Err(LockError::Failed { host, message: output.stderr_tail() }) }
}

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

/// The current time as `YYYY-MM-DDTHH:MM:SSZ`.
#[must_use]
pub fn utc_now() -> String {
    let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format_utc(seconds)
}

/// Formats seconds since the Unix epoch as RFC 3339 UTC (civil-from-days, Hinnant).
#[must_use]
pub fn format_utc(seconds: u64) -> String {
    let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX / 2);
    let rest = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::format_utc;

    #[test]
    fn formats_utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_795_306_662), "2026-11-22T00:17:42Z");
    }
}
