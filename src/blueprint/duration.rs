//! Durations written the way Prometheus writes them (`15s`, `1h30m`, `2w`): the form
//! of every interval in the blueprint's `monitoring` section, so the same text can go
//! into Prometheus' files unchanged and toolkit can still compute with it.

use std::time::Duration;

/// Units in the order Prometheus requires them, with their length in milliseconds.
const UNITS: [(&str, u64); 7] = [
    ("y", 365 * 24 * 3_600_000),
    ("w", 7 * 24 * 3_600_000),
    ("d", 24 * 3_600_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1000),
    ("ms", 1),
];

/// Parses a Prometheus duration: one or more `<digits><unit>` terms, units from
/// largest to smallest, each at most once (`1h30m`, not `30m1h`).
///
/// # Errors
/// Why `text` is not such a duration, ready for a diagnostic.
pub fn parse(text: &str) -> Result<Duration, String> {
    let form = "a Prometheus duration is terms like `15s`, `5m`, `1h30m` (units y, w, d, h, m, s, ms, largest first)";
    if text.is_empty() {
        return Err(format!("an empty duration: {form}"));
    }
    let mut rest = text;
    let mut next_unit = 0;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 12 {
            return Err(format!("`{text}` is not a duration: {form}"));
        }
        let number: u64 = rest[..digits].parse().map_err(|_| format!("`{text}` is not a duration: {form}"))?;
        rest = &rest[digits..];
        // `ms` before `m`: the longer suffix wins.
        let unit_len = if rest.starts_with("ms") { 2 } else { rest.chars().next().map_or(0, char::len_utf8) };
        let unit = &rest[..unit_len];
        let Some(position) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!("`{text}` has no unit or an unknown one: {form}"));
        };
        if position < next_unit {
            return Err(format!("`{text}` repeats a unit or puts a smaller one first: {form}"));
        }
        next_unit = position + 1;
        total = number
            .checked_mul(UNITS[position].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| format!("`{text}` is too long a duration"))?;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_prometheus_durations() {
        assert_eq!(parse("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_mins(90)));
        assert_eq!(parse("2d"), Ok(Duration::from_hours(48)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1m500ms"), Ok(Duration::from_millis(60_500)));
    }

    #[test]
    fn rejects_what_prometheus_rejects() {
        for bad in ["", "15", "s", "15 s", "30m1h", "1m1m", "1.5h", "15sec", "-1s", "1M"] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
