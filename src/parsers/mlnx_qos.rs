//! `mlnx_qos -i <netdev>` (MLNX_OFED / DOCA-OFED) output, and the `roce-qos`
//! validator's per-interface dump that wraps it with the ECN and ToS sysfs values.
//!
//! Stage: parse (leaf). Input: the text `mlnx_qos -i` printed (DCBX mode, trust state,
//! DSCP → priority map, cable length, the PFC table, one block per traffic class), or
//! the dump: `### netdev <name>` sections, each `mlnx_qos -i` output, a
//! `### settings` line and `key value` lines. Output: [`MlnxQos`] / [`RoceQosDump`].
//!
//! The tool indents some lines and separates blocks with blank lines depending on
//! its version; the parser relies on neither, only on the labels.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{ParseError, Summary, integer, quoted};

/// Priorities of an 802.1Qbb link.
const PRIORITIES: usize = 8;

/// What `mlnx_qos -i` showed for one interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MlnxQos {
    /// `DCBX mode: OS controlled`.
    pub dcbx_mode: Option<String>,
    /// `Priority trust state: dscp` (`pcp` or `dscp`).
    pub trust: Option<String>,
    /// DSCP → priority, from the `dscp2prio mapping` rows (only with trust dscp).
    pub dscp_to_priority: BTreeMap<u8, u8>,
    /// `Cable len`, in metres.
    pub cable_length: Option<u32>,
    /// Priorities with PFC enabled, ascending.
    pub pfc_enabled: Vec<u8>,
    /// One entry per traffic class.
    pub traffic_classes: Vec<TrafficClass>,
}

/// `tc: N ratelimit: …, tsa: …, bw: N%` and its `priority:` lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficClass {
    /// Traffic class number.
    pub tc: u8,
    /// `unlimited` or a rate.
    pub ratelimit: Option<String>,
    /// `ets`, `strict` or `vendor`.
    pub tsa: Option<String>,
    /// ETS bandwidth share in %, for `ets`.
    pub bandwidth_percent: Option<u32>,
    /// Priorities mapped to this class.
    pub priorities: Vec<u8>,
}

/// Parses `mlnx_qos -i` output.
///
/// # Errors
/// A labelled line whose value is malformed, a PFC table without its `enabled` row,
/// or an output without the trust state (not `mlnx_qos -i` output).
pub fn parse(text: &str) -> Result<MlnxQos, ParseError> {
    parse_lines(text.lines().enumerate().map(|(index, line)| (index + 1, line)), text)
}

fn parse_lines<'a>(lines: impl Iterator<Item = (usize, &'a str)>, text: &str) -> Result<MlnxQos, ParseError> {
    let mut output = MlnxQos::default();
    let mut pfc_header: Option<Vec<u8>> = None;
    let mut pfc_row_seen = false;
    for (number, raw) in lines {
        let line = raw.trim();
        if let Some(value) = line.strip_prefix("DCBX mode:") {
            output.dcbx_mode = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("Priority trust state:") {
            output.trust = Some(value.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("prio:") {
            dscp_row(rest, number, &mut output.dscp_to_priority)?;
        } else if let Some(value) = line.strip_prefix("Cable len:") {
            output.cable_length = Some(integer(value, number, "the cable length")?);
        } else if let Some(rest) = line.strip_prefix("priority ").filter(|_| pfc_header.is_none()) {
            // `priority 0 1 2 3 4 5 6 7`: the PFC table's header.
            let columns: Result<Vec<u8>, _> = rest.split_whitespace().map(|token| priority(token, number)).collect();
            pfc_header = Some(columns?);
        } else if let Some(rest) = line.strip_prefix("enabled") {
            let header = pfc_header
                .as_ref()
                .ok_or_else(|| ParseError::at(number, "the PFC table's `priority 0 1 … 7` row first", quoted(line)))?;
            output.pfc_enabled = pfc_row(header, rest, number)?;
            pfc_row_seen = true;
        } else if let Some(rest) = line.strip_prefix("tc:") {
            output.traffic_classes.push(traffic_class(rest, number)?);
        } else if let Some(rest) = line.strip_prefix("priority:") {
            let class = output
                .traffic_classes
                .last_mut()
                .ok_or_else(|| ParseError::at(number, "a `tc:` line before its priorities", quoted(line)))?;
            for token in rest.split([',', ' ']).filter(|token| !token.is_empty()) {
                class.priorities.push(priority(token, number)?);
            }
        }
    }
    if output.trust.is_none() {
        return Err(ParseError::end_of_input(text, "`Priority trust state:` (is this `mlnx_qos -i` output?)"));
    }
    if pfc_header.is_some() && !pfc_row_seen {
        return Err(ParseError::end_of_input(text, "the PFC table's `enabled` row"));
    }
    Ok(output)
}

fn priority(token: &str, line: usize) -> Result<u8, ParseError> {
    let value: u8 = integer(token, line, "a priority")?;
    if usize::from(value) >= PRIORITIES {
        return Err(ParseError::at(line, "a priority from 0 to 7", quoted(token)));
    }
    Ok(value)
}

/// `prio:3 dscp:31,30,29,28,27,26,25,24,`
fn dscp_row(rest: &str, line: usize, map: &mut BTreeMap<u8, u8>) -> Result<(), ParseError> {
    let (prio, dscps) =
        rest.split_once("dscp:").ok_or_else(|| ParseError::at(line, "`prio:N dscp:a,b,…`", quoted(rest)))?;
    let prio = priority(prio, line)?;
    for token in dscps.split(',').map(str::trim).filter(|token| !token.is_empty()) {
        let dscp: u8 = integer(token, line, "a DSCP")?;
        if dscp > 63 {
            return Err(ParseError::at(line, "a DSCP from 0 to 63", quoted(token)));
        }
        map.insert(dscp, prio);
    }
    Ok(())
}

/// `enabled 1 0 1 0 0 0 1 1` under `priority 0 1 … 7`.
fn pfc_row(header: &[u8], rest: &str, line: usize) -> Result<Vec<u8>, ParseError> {
    let flags: Vec<&str> = rest.split_whitespace().collect();
    if flags.len() != header.len() {
        return Err(ParseError::at(
            line,
            format!("{} PFC flags, one per priority", header.len()),
            format!("{} flags", flags.len()),
        ));
    }
    let mut enabled = Vec::new();
    for (priority, flag) in header.iter().zip(flags) {
        match flag {
            "1" => enabled.push(*priority),
            "0" => {}
            other => return Err(ParseError::at(line, "PFC flags `0` or `1`", quoted(other))),
        }
    }
    enabled.sort_unstable();
    Ok(enabled)
}

/// `0 ratelimit: unlimited, tsa: ets, bw: 10%`
fn traffic_class(rest: &str, line: usize) -> Result<TrafficClass, ParseError> {
    let mut words = rest.trim().splitn(2, char::is_whitespace);
    let tc = integer(words.next().unwrap_or_default(), line, "a traffic class")?;
    let mut class = TrafficClass { tc, ratelimit: None, tsa: None, bandwidth_percent: None, priorities: Vec::new() };
    for field in words.next().unwrap_or_default().split(',') {
        let Some((key, value)) = field.split_once(':') else { continue };
        let value = value.trim();
        match key.trim() {
            "ratelimit" => class.ratelimit = Some(value.to_owned()),
            "tsa" => class.tsa = Some(value.to_owned()),
            "bw" => class.bandwidth_percent = Some(integer(value.trim_end_matches('%'), line, "an ETS share")?),
            _ => {}
        }
    }
    Ok(class)
}

impl Summary for MlnxQos {
    fn summary(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "trust {}, PFC on priorities [{}], {} DSCP mappings, {} traffic classes",
            self.trust.as_deref().unwrap_or("?"),
            join(&self.pfc_enabled),
            self.dscp_to_priority.len(),
            self.traffic_classes.len()
        );
        out
    }
}

fn join(values: &[u8]) -> String {
    values.iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
}

/// One rail NIC as the `roce-qos` validator's dump shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceQos {
    /// The netdev (`rail0`).
    pub netdev: String,
    /// `mlnx_qos -i` of it; `None` when the tool failed (its message is in `settings.error`).
    pub mlnx_qos: Option<MlnxQos>,
    /// `key value` lines after `### settings`: `rdma_device`, `roce_np.N`, `roce_rp.N`,
    /// `cnp_dscp`, `traffic_class`, `default_roce_tos`, each as read (`absent` when the
    /// file does not exist).
    pub settings: BTreeMap<String, String>,
}

/// The dump of every rail NIC of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoceQosDump {
    /// One entry per `### netdev` section, in order.
    pub interfaces: Vec<InterfaceQos>,
}

/// Parses the `roce-qos` dump.
///
/// # Errors
/// Text before the first `### netdev` line, a malformed `mlnx_qos` section, or no
/// section at all.
pub fn parse_dump(text: &str) -> Result<RoceQosDump, ParseError> {
    let mut interfaces = Vec::new();
    let mut lines = text.lines().enumerate().map(|(index, line)| (index + 1, line)).peekable();
    while let Some((number, line)) = lines.next() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let Some(netdev) = trimmed.strip_prefix("### netdev ") else {
            return Err(ParseError::at(number, "`### netdev <name>`", quoted(trimmed)));
        };
        let mut qos_lines = Vec::new();
        while let Some((_, next)) = lines.peek() {
            if next.trim() == "### settings" || next.trim().starts_with("### netdev ") {
                break;
            }
            qos_lines.extend(lines.next());
        }
        let mut settings = BTreeMap::new();
        if lines.peek().is_some_and(|(_, next)| next.trim() == "### settings") {
            lines.next();
            while let Some((_, next)) = lines.peek() {
                if next.trim().starts_with("### netdev ") {
                    break;
                }
                if let Some((key, value)) = next.trim().split_once(' ') {
                    settings.insert(key.to_owned(), value.trim().to_owned());
                }
                lines.next();
            }
        }
        let has_qos = qos_lines.iter().any(|(_, line)| line.contains("Priority trust state:"));
        let mlnx_qos = if has_qos { Some(parse_lines(qos_lines.into_iter(), text)?) } else { None };
        interfaces.push(InterfaceQos { netdev: netdev.trim().to_owned(), mlnx_qos, settings });
    }
    if interfaces.is_empty() {
        return Err(ParseError::end_of_input(text, "a `### netdev <name>` section"));
    }
    Ok(RoceQosDump { interfaces })
}

impl Summary for RoceQosDump {
    fn summary(&self) -> String {
        let mut out = String::new();
        for interface in &self.interfaces {
            let qos = interface.mlnx_qos.as_ref().map_or_else(|| "mlnx_qos failed\n".to_owned(), Summary::summary);
            let _ = write!(out, "{}: {qos}", interface.netdev);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFED42: &str = include_str!("../../tests/fixtures/parsers/mlnx_qos_i_eth2_dscp_trust_ofed42.txt");

    #[test]
    fn reads_the_recorded_ofed_4_2_output() {
        let qos = parse(OFED42).expect("parses");
        assert_eq!(qos.dcbx_mode.as_deref(), Some("OS controlled"));
        assert_eq!(qos.trust.as_deref(), Some("dscp"));
        assert_eq!(qos.dscp_to_priority.len(), 64);
        assert_eq!(qos.dscp_to_priority.get(&26), Some(&3));
        assert_eq!(qos.dscp_to_priority.get(&48), Some(&6));
        assert_eq!(qos.cable_length, Some(10));
        // The recorded host has PFC on the wrong priorities for RoCE on priority 3.
        assert_eq!(qos.pfc_enabled, [0, 2, 6, 7]);
        assert_eq!(qos.traffic_classes.len(), 8);
        assert_eq!(qos.traffic_classes[0].priorities, [1]);
        assert_eq!(qos.traffic_classes[6].tsa.as_deref(), Some("strict"));
        assert_eq!(qos.traffic_classes[7].bandwidth_percent, Some(40));
    }

    #[test]
    fn malformed_outputs_name_the_line() {
        let bad_flag = OFED42.replace("enabled 1 0 1 0 0 0 1 1", "enabled 1 0 1 0 0 0 1 x");
        assert_eq!(parse(&bad_flag).expect_err("bad flag").line(), Some(15));
        let short = OFED42.replace("enabled 1 0 1 0 0 0 1 1", "enabled 1 0 1");
        assert_eq!(parse(&short).expect_err("short row").line(), Some(15));
        let bad_dscp = OFED42.replace("prio:3 dscp:31", "prio:3 dscp:99");
        assert_eq!(parse(&bad_dscp).expect_err("bad dscp").line(), Some(7));
        assert!(parse("Cable len: 10\n").is_err(), "no trust state: not mlnx_qos output");
        assert!(parse("").is_err());
    }

    #[test]
    fn reads_a_dump_of_two_interfaces() {
        let text = format!(
            "### netdev rail0\n{OFED42}\n### settings\nrdma_device mlx5_0\nroce_np.3 1\ntraffic_class Global tclass=106\n\
             ### netdev rail1\nmlnx_qos: cannot open rail1\n### settings\nrdma_device absent\n"
        );
        let dump = parse_dump(&text).expect("parses");
        assert_eq!(dump.interfaces.len(), 2);
        assert_eq!(dump.interfaces[0].netdev, "rail0");
        assert_eq!(dump.interfaces[0].mlnx_qos.as_ref().map(|q| q.pfc_enabled.clone()), Some(vec![0, 2, 6, 7]));
        assert_eq!(dump.interfaces[0].settings["traffic_class"], "Global tclass=106");
        assert!(dump.interfaces[1].mlnx_qos.is_none());
        assert_eq!(dump.interfaces[1].settings["rdma_device"], "absent");
        assert!(parse_dump("garbage\n").is_err());
        assert!(parse_dump("").is_err());
    }
}
