//! Link flaps from syslog: `<device>: lost carrier` / `<device>: Gained carrier`.
//!
//! Stage: parse (leaf). Input: syslog or `journalctl` lines (systemd-networkd and
//! NetworkManager print the carrier changes of IPoIB and Ethernet interfaces). Output:
//! [`LinkFlaps`]: every carrier event with its timestamp, and per device the number of
//! losses and gains. AzNHC fails a node at 5 losses of one `ib*` device in 24 h; the
//! window and threshold belong to the validator.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, quoted};

/// Carrier events of a log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkFlaps {
    /// Events in log order.
    pub events: Vec<CarrierEvent>,
    /// Per device, its counts.
    pub devices: BTreeMap<String, DeviceFlaps>,
}

/// One carrier change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CarrierEvent {
    /// 1-based line.
    pub line: usize,
    /// The syslog timestamp (`Aug 17 06:18:01`, or an ISO timestamp).
    pub timestamp: Option<String>,
    /// Interface (`ib6`).
    pub device: String,
    /// `false` for `lost carrier`, `true` for `Gained carrier`.
    pub up: bool,
}

/// Counts for one device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeviceFlaps {
    /// `lost carrier` events.
    pub lost: usize,
    /// `Gained carrier` events.
    pub gained: usize,
    /// Timestamp of the first loss.
    pub first_lost: Option<String>,
    /// Timestamp of the last loss.
    pub last_lost: Option<String>,
}

const MONTHS: &[&str] = &["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// Parses carrier events; other lines are ignored.
pub fn parse(text: &str) -> Result<LinkFlaps, ParseError> {
    let mut flaps = LinkFlaps { events: Vec::new(), devices: BTreeMap::new() };
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let found = [
            (": lost carrier", false),
            (": Lost carrier", false),
            (": Gained carrier", true),
            (": gained carrier", true),
        ]
        .into_iter()
        .find_map(|(marker, up)| raw.find(marker).map(|at| (at, up)));
        let Some((at, up)) = found else { continue };
        let device = raw[..at].rsplit([' ', ':']).next().unwrap_or_default();
        if device.is_empty() {
            return Err(ParseError::at(line, "`DEVICE: lost carrier` or `DEVICE: Gained carrier`", quoted(raw)));
        }
        let timestamp = timestamp(raw);
        let counts = flaps.devices.entry(device.to_owned()).or_default();
        if up {
            counts.gained += 1;
        } else {
            counts.lost += 1;
            counts.first_lost.get_or_insert_with(|| timestamp.clone().unwrap_or_default());
            counts.last_lost.clone_from(&timestamp);
        }
        flaps.events.push(CarrierEvent { line, timestamp, device: device.to_owned(), up });
    }
    Ok(flaps)
}

/// `Aug 17 06:18:01 host …` → `Aug 17 06:18:01`; `2024-08-17T06:18:01+00:00 host …` → the first word.
fn timestamp(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [month, day, time, ..] if MONTHS.contains(month) => Some(format!("{month} {day} {time}")),
        [first, ..] if first.len() >= 10 && first.as_bytes()[4] == b'-' && first.contains('T') => {
            Some((*first).to_owned())
        }
        _ => None,
    }
}

impl Summary for LinkFlaps {
    fn summary(&self) -> String {
        if self.devices.is_empty() {
            return "no carrier changes\n".to_owned();
        }
        let mut out = String::new();
        for (device, counts) in &self.devices {
            let _ = writeln!(out, "{device}: lost carrier {} times, gained {} times", counts.lost, counts.gained);
        }
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::read;
    use super::*;

    #[test]
    fn six_losses_of_ib6() {
        let flaps = parse(&read("syslog_ib_link_flap_6events.txt")).expect("parses");
        assert_eq!(flaps.devices.len(), 1);
        let ib6 = &flaps.devices["ib6"];
        assert_eq!((ib6.lost, ib6.gained), (6, 6));
        assert_eq!(ib6.first_lost.as_deref(), Some("Aug 17 06:18:01"));
        assert_eq!(ib6.last_lost.as_deref(), Some("Aug 17 06:18:06"));
        assert_eq!(flaps.events[0].line, 3);
        assert_eq!(flaps.events.len(), 12);
    }

    #[test]
    fn empty_log_and_device_less_line() {
        assert!(parse("").expect("parses").devices.is_empty());
        assert_eq!(parse("x\n: lost carrier\n").expect_err("is refused").line(), Some(2));
    }
}
