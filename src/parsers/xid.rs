//! NVIDIA XID events from kernel log lines.
//!
//! Stage: parse (leaf). Input: `dmesg` (uptime or `-T`/`--ctime` timestamps), `journalctl -k`,
//! syslog, or any log that quotes kernel lines (NHC health logs). Output: [`XidLog`]:
//! one event per `NVRM: Xid (PCI:<bus>): <code>, …` line with its GPU, code, process
//! and message, plus counts per code. Which codes are fatal is the validator's call.
//!
//! The code is the first number after the bus id: `45, … caused by previous Xid 149`
//! is XID 45 (the later number is context).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, integer, quoted};

const MARKER: &str = "NVRM: Xid (";

/// The XID events of a log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XidLog {
    /// Events in log order.
    pub events: Vec<XidEvent>,
    /// Event count per XID code.
    pub counts: BTreeMap<u32, usize>,
    /// Distinct GPUs (PCI ids) with at least one event, in order of first event.
    pub gpus: Vec<String>,
}

/// One `NVRM: Xid` line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XidEvent {
    /// 1-based line.
    pub line: usize,
    /// PCI id as the driver prints it (`0000:cb:00`).
    pub pci: String,
    /// The XID code.
    pub code: u32,
    /// `pid=…` when present (`'<unknown>'` for kernel contexts).
    pub pid: Option<String>,
    /// `name=…` when present (the process).
    pub process: Option<String>,
    /// The rest of the line after the code (and pid/name).
    pub message: String,
    /// The bracketed timestamp before `NVRM:` (`3606.832215`, `Fri Aug 30 11:43:09 2024`).
    pub timestamp: Option<String>,
    /// Seconds since boot, when the timestamp is a plain dmesg uptime.
    pub uptime_seconds: Option<f64>,
}

/// Parses every `NVRM: Xid` line in `text`; other lines are ignored.
pub fn parse(text: &str) -> Result<XidLog, ParseError> {
    let mut log = XidLog { events: Vec::new(), counts: BTreeMap::new(), gpus: Vec::new() };
    for (index, raw) in text.lines().enumerate() {
        let Some(at) = raw.find(MARKER) else { continue };
        let event = event(&raw[..at], &raw[at + MARKER.len()..], index + 1, raw)?;
        *log.counts.entry(event.code).or_default() += 1;
        if !log.gpus.contains(&event.pci) {
            log.gpus.push(event.pci.clone());
        }
        log.events.push(event);
    }
    Ok(log)
}

fn event(before: &str, after: &str, line: usize, raw: &str) -> Result<XidEvent, ParseError> {
    let shape = || ParseError::at(line, "`NVRM: Xid (PCI:BUS): CODE, …`", quoted(raw));
    let (pci, rest) = after.split_once("):").ok_or_else(shape)?;
    let pci = pci.strip_prefix("PCI:").ok_or_else(shape)?.to_owned();
    let rest = rest.trim_start();
    let token = rest.split(|c: char| c == ',' || c.is_whitespace()).next().unwrap_or_default();
    let code = integer(token, line, "the XID code")?;
    let mut message = rest[token.len()..].trim_start_matches(',').trim();
    let mut take = |key: &str| -> Option<String> {
        let value = message.strip_prefix(key)?;
        let (value, remaining) = value.split_once(',').unwrap_or((value, ""));
        message = remaining.trim();
        Some(value.trim().to_owned())
    };
    let pid = take("pid=");
    let process = take("name=");
    let timestamp = before.rfind('[').and_then(|open| {
        before[open + 1..].find(']').map(|close| before[open + 1..open + 1 + close].trim().to_owned())
    });
    let uptime_seconds = timestamp.as_deref().and_then(|stamp| stamp.parse::<f64>().ok());
    Ok(XidEvent { line, pci, code, pid, process, message: message.to_owned(), timestamp, uptime_seconds })
}

impl Summary for XidLog {
    fn summary(&self) -> String {
        if self.events.is_empty() {
            return "no XID events\n".to_owned();
        }
        let mut out = format!("{} XID events on {} GPUs:", self.events.len(), self.gpus.len());
        for (code, count) in &self.counts {
            let _ = write!(out, " XID {code} ×{count}");
        }
        out.push('\n');
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::{read, replace_line};
    use super::*;

    #[test]
    fn dmesg_t_with_xid_43_31_94_among_other_nvrm_lines() {
        let log = parse(&read("xid_dmesg_T_535_akash_support_244.txt")).expect("parses");
        assert_eq!(log.events.len(), 4);
        assert_eq!(log.counts, BTreeMap::from([(31, 1), (43, 2), (94, 1)]));
        assert_eq!(log.gpus, ["0000:00:05", "0000:00:07", "0000:00:08"]);
        let contained = &log.events[3];
        assert_eq!((contained.line, contained.code), (11, 94));
        assert_eq!(contained.pid.as_deref(), Some("'<unknown>'"));
        assert_eq!(contained.process.as_deref(), Some("<unknown>"));
        assert_eq!(contained.message, "Contained: SM (0x1). RST: No, D-RST: No");
        assert_eq!(contained.timestamp.as_deref(), Some("Fri Aug  9 13:32:56 2024"));
        assert_eq!(contained.uptime_seconds, None);
        assert_eq!(log.events[0].process.as_deref(), Some("pt_main_thread"));
        assert_eq!(log.events[0].message, "Ch 00000008");
    }

    #[test]
    fn dmesg_ctime_xid_13_and_109() {
        let log = parse(&read("xid_dmesg_ctime_gpud_pr46.txt")).expect("parses");
        assert_eq!(log.counts, BTreeMap::from([(13, 3), (109, 1)]));
        assert_eq!(log.gpus, ["0000:cb:00"]);
        assert_eq!(log.events[3].message, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
    }

    #[test]
    fn journal_lines_take_the_first_code_not_the_previous_xid() {
        let log = parse(&read("xid_journal_kernel_nvlink_open_gpu_kernel_modules_1150.txt")).expect("parses");
        assert_eq!(log.counts, BTreeMap::from([(45, 7)]));
        assert_eq!(log.gpus.len(), 4);
        assert_eq!(log.events[0].message, "Ch 00000001 caused by previous Xid 149");
        assert_eq!(log.events[0].timestamp, None);
    }

    #[test]
    fn xid_quoted_inside_an_nhc_health_log_with_uptime() {
        let log = parse(&read("aznhc_distributed_health_log_sample.txt")).expect("parses");
        assert_eq!(log.events.len(), 1);
        let event = &log.events[0];
        assert_eq!((event.line, event.code, event.pci.as_str()), (2, 119, "0002:00:00"));
        assert_eq!(event.uptime_seconds, Some(3_606.832_215));
        assert_eq!(event.process.as_deref(), Some("nvidia-smi"));
        assert!(event.message.starts_with("Timeout waiting for RPC from GSP1!"));
    }

    #[test]
    fn garbled_xid_lines_name_their_line() {
        let text = read("xid_dmesg_ctime_gpud_pr46.txt");
        let garbled = replace_line(&text, 5, "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): abc, pid=1797828");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 5: expected an integer for the XID code, found `abc`"
        );
        let cut = replace_line(&text, 3, "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb");
        assert_eq!(parse(&cut).expect_err("is refused").line(), Some(3));
        assert!(parse("").expect("parses").events.is_empty());
    }
}
