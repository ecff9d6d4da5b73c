//! iputils `ping` output.
//!
//! Stage: parse (leaf). Input: the stdout+stderr of `ping -c N [-M do -s SIZE] HOST`.
//! Output: [`PingOutput`]: target, payload size, replies, the statistics block (packets
//! transmitted and received, errors, duplicates, loss, rtt min/avg/max/mdev in ms) and
//! the error lines (`ping: local error: message too long, mtu=1400` is how a jumbo-frame
//! path that is too small shows up with `-M do`).
//!
//! A run that could not start (`ping: connect: Network is unreachable`) has no
//! statistics: it is a typed failure, not a parse error.

use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, float, integer, quoted};

/// What one ping run printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingOutput {
    /// Host as given (`127.0.0.1`, a name).
    pub target: Option<String>,
    /// Resolved address.
    pub address: Option<String>,
    /// ICMP payload bytes (`-s`).
    pub payload_bytes: Option<u32>,
    /// IP packet bytes (payload + 28).
    pub packet_bytes: Option<u32>,
    /// Echo replies.
    pub replies: Vec<PingReply>,
    /// Lines reporting errors (`ping: …`, `From … Destination Host Unreachable`).
    pub errors: Vec<String>,
    /// The statistics block; `None` when ping failed before sending.
    pub statistics: Option<PingStatistics>,
    /// Why ping did not run, when there are no statistics.
    pub failure: Option<String>,
}

/// One echo reply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingReply {
    /// 1-based line.
    pub line: usize,
    /// `icmp_seq`.
    pub sequence: u32,
    /// `ttl`.
    pub ttl: Option<u32>,
    /// Round-trip time in ms.
    pub time_ms: Option<f64>,
}

/// The `--- host ping statistics ---` block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingStatistics {
    /// Packets transmitted.
    pub transmitted: u32,
    /// Packets received.
    pub received: u32,
    /// `+N errors`.
    pub errors: u32,
    /// `+N duplicates`.
    pub duplicates: u32,
    /// Packet loss in %.
    pub loss_percent: f64,
    /// Total time in ms.
    pub time_ms: Option<f64>,
    /// Round-trip times; absent when nothing came back.
    pub rtt: Option<Rtt>,
}

/// `rtt min/avg/max/mdev = a/b/c/d ms`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rtt {
    /// Minimum, ms.
    pub min_ms: f64,
    /// Average, ms.
    pub avg_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
    /// Mean deviation, ms (absent in BusyBox output).
    pub mdev_ms: Option<f64>,
}

/// Parses ping output.
pub fn parse(text: &str) -> Result<PingOutput, ParseError> {
    let mut output = PingOutput {
        target: None,
        address: None,
        payload_bytes: None,
        packet_bytes: None,
        replies: Vec::new(),
        errors: Vec::new(),
        statistics: None,
        failure: None,
    };
    let mut in_statistics = false;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() {
            continue;
        }
        if let Some(rest) = content.strip_prefix("PING ") {
            header(rest, line, &mut output)?;
        } else if content.starts_with("---") && content.ends_with("ping statistics ---") {
            in_statistics = true;
        } else if in_statistics && content.contains("packets transmitted") {
            output.statistics = Some(counts(content, line)?);
        } else if in_statistics && (content.starts_with("rtt ") || content.starts_with("round-trip ")) {
            let statistics = output.statistics.as_mut().ok_or_else(|| {
                ParseError::at(line, "`N packets transmitted, …` before the rtt line", quoted(content))
            })?;
            statistics.rtt = Some(rtt(content, line)?);
        } else if content.contains("icmp_seq=") && content.contains(" bytes from ") {
            output.replies.push(reply(content, line)?);
        } else if content.starts_with("ping:") || content.starts_with("From ") || content.contains("icmp_seq=") {
            output.errors.push(content.to_owned());
        } else {
            return Err(ParseError::at(
                line,
                "a ping line (`PING …`, a reply, an error or statistics)",
                quoted(content),
            ));
        }
    }
    if in_statistics && output.statistics.is_none() {
        return Err(ParseError::end_of_input(text, "`N packets transmitted, M received, …` (the output is truncated)"));
    }
    if output.statistics.is_none() {
        match output.errors.first() {
            Some(error) => output.failure = Some(error.clone()),
            None => return Err(ParseError::end_of_input(text, "the `--- HOST ping statistics ---` block")),
        }
    }
    Ok(output)
}

/// `127.0.0.1 (127.0.0.1) 1472(1500) bytes of data.`, or with `-I`
/// `127.0.0.1 (127.0.0.1) from 127.0.0.1 lo: 1472(1500) bytes of data.`
fn header(rest: &str, line: usize, output: &mut PingOutput) -> Result<(), ParseError> {
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    output.target = tokens.first().map(|target| (*target).to_owned());
    output.address = tokens.get(1).map(|address| address.trim_matches(|c| c == '(' || c == ')').to_owned());
    // The sizes are the word before `bytes`; `-I` inserts `from <source> <device>:` ahead of them.
    let sizes = tokens.iter().position(|token| *token == "bytes").and_then(|at| at.checked_sub(1)).unwrap_or(2);
    if let Some(sizes) = tokens.get(sizes).filter(|_| sizes >= 2) {
        let (payload, packet) = sizes.split_once('(').unwrap_or((sizes, ""));
        output.payload_bytes = Some(integer(payload, line, "the payload size")?);
        if !packet.is_empty() {
            output.packet_bytes = Some(integer(packet.trim_end_matches(')'), line, "the packet size")?);
        }
    }
    Ok(())
}

/// `1480 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.342 ms`.
fn reply(content: &str, line: usize) -> Result<PingReply, ParseError> {
    let field = |key: &str| content.split_whitespace().find_map(|token| token.strip_prefix(key));
    let sequence = integer(field("icmp_seq=").unwrap_or_default(), line, "`icmp_seq`")?;
    let ttl = field("ttl=").map(|ttl| integer(ttl, line, "`ttl`")).transpose()?;
    let time_ms = field("time=").map(|time| float(time, line, "`time`")).transpose()?;
    Ok(PingReply { line, sequence, ttl, time_ms })
}

/// `3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2050ms`.
fn counts(content: &str, line: usize) -> Result<PingStatistics, ParseError> {
    let mut statistics = PingStatistics {
        transmitted: 0,
        received: 0,
        errors: 0,
        duplicates: 0,
        loss_percent: 0.0,
        time_ms: None,
        rtt: None,
    };
    let mut seen_loss = false;
    for part in content.split(',').map(str::trim) {
        let mut words = part.split_whitespace();
        let first = words.next().unwrap_or_default();
        let second = words.next().unwrap_or_default();
        match (first, second) {
            (count, "packets") => statistics.transmitted = integer(count, line, "packets transmitted")?,
            (count, "received") => statistics.received = integer(count, line, "packets received")?,
            (count, "errors") => statistics.errors = integer(count.trim_start_matches('+'), line, "errors")?,
            (count, "duplicates") => {
                statistics.duplicates = integer(count.trim_start_matches('+'), line, "duplicates")?;
            }
            (percent, "packet") => {
                statistics.loss_percent = float(percent.trim_end_matches('%'), line, "the packet loss")?;
                seen_loss = true;
            }
            ("time", time) => statistics.time_ms = Some(float(time.trim_end_matches("ms"), line, "the time")?),
            _ => {}
        }
    }
    if !seen_loss {
        return Err(ParseError::at(line, "`N% packet loss` in the statistics", quoted(content)));
    }
    Ok(statistics)
}

/// `rtt min/avg/max/mdev = 0.052/0.150/0.342/0.135 ms`.
fn rtt(content: &str, line: usize) -> Result<Rtt, ParseError> {
    let expected = "`rtt min/avg/max/mdev = a/b/c/d ms`";
    let (_, values) = content.split_once('=').ok_or_else(|| ParseError::at(line, expected, quoted(content)))?;
    let values = values.trim().trim_end_matches("ms").trim();
    let numbers: Vec<&str> = values.split('/').collect();
    if numbers.len() < 3 {
        return Err(ParseError::at(line, expected, quoted(content)));
    }
    Ok(Rtt {
        min_ms: float(numbers[0], line, "rtt min")?,
        avg_ms: float(numbers[1], line, "rtt avg")?,
        max_ms: float(numbers[2], line, "rtt max")?,
        mdev_ms: numbers.get(3).map(|mdev| float(mdev, line, "rtt mdev")).transpose()?,
    })
}

impl Summary for PingOutput {
    fn summary(&self) -> String {
        let target = self.target.as_deref().unwrap_or("?");
        let Some(statistics) = &self.statistics else {
            return format!("ping {target} failed: {}\n", self.failure.as_deref().unwrap_or("?"));
        };
        let mut out = format!(
            "ping {target}: {} sent, {} received, {}% loss",
            statistics.transmitted, statistics.received, statistics.loss_percent
        );
        if statistics.errors > 0 {
            let _ = write!(out, ", {} errors", statistics.errors);
        }
        if let Some(rtt) = &statistics.rtt {
            let _ = write!(out, ", rtt avg {} ms", rtt.avg_ms);
        }
        out.push('\n');
        if let Some(error) = self.errors.first() {
            let _ = writeln!(out, "first error: {error}");
        }
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::{first_lines, read, replace_line};
    use super::*;

    #[test]
    fn loopback_1472_with_dont_fragment() {
        let output = parse(&read("ping_iputils_20221126_loopback_1472_df_ok.txt")).expect("parses");
        assert_eq!(output.target.as_deref(), Some("127.0.0.1"));
        assert_eq!((output.payload_bytes, output.packet_bytes), (Some(1472), Some(1500)));
        assert_eq!(output.replies.len(), 3);
        assert_eq!(output.replies[0].time_ms, Some(0.342));
        assert_eq!(output.replies[2].ttl, Some(64));
        let statistics = output.statistics.expect("present");
        assert_eq!((statistics.transmitted, statistics.received, statistics.errors), (3, 3, 0));
        assert_eq!(statistics.loss_percent, 0.0);
        assert_eq!(statistics.time_ms, Some(2056.0));
        assert_eq!(statistics.rtt, Some(Rtt { min_ms: 0.052, avg_ms: 0.150, max_ms: 0.342, mdev_ms: Some(0.135) }));
    }

    #[test]
    fn a_header_with_the_source_and_device_of_dash_i() {
        // `ping -I lo` (iputils 20221126) names the source address and device before the sizes.
        let text = read("ping_iputils_20221126_loopback_1472_df_ok.txt").replace(
            "PING 127.0.0.1 (127.0.0.1) 1472(1500)",
            "PING 127.0.0.1 (127.0.0.1) from 127.0.0.1 lo: 1472(1500)",
        );
        let output = parse(&text).expect("parses");
        assert_eq!((output.payload_bytes, output.packet_bytes), (Some(1472), Some(1500)));
        assert_eq!(output.address.as_deref(), Some("127.0.0.1"));
    }

    #[test]
    fn path_mtu_1400_fails_with_errors_and_total_loss() {
        let output = parse(&read("ping_iputils_20221126_mtu1400_df_1472_fail.txt")).expect("parses");
        assert!(output.replies.is_empty());
        assert_eq!(output.errors.len(), 3);
        assert_eq!(output.errors[0], "ping: local error: message too long, mtu=1400");
        let statistics = output.statistics.expect("present");
        assert_eq!((statistics.transmitted, statistics.received, statistics.errors), (3, 0, 3));
        assert_eq!(statistics.loss_percent, 100.0);
        assert_eq!(statistics.rtt, None);
    }

    #[test]
    fn unreachable_host_loses_everything_without_rtt() {
        let output = parse(&read("ping_iputils_20221126_unreachable_100pct_loss.txt")).expect("parses");
        let statistics = output.statistics.expect("present");
        assert_eq!((statistics.transmitted, statistics.received, statistics.loss_percent), (3, 0, 100.0));
        assert_eq!(statistics.rtt, None);
    }

    #[test]
    fn network_unreachable_is_a_typed_failure() {
        let output = parse(&read("ping_iputils_20221126_network_unreachable.txt")).expect("parses");
        assert_eq!(output.failure.as_deref(), Some("ping: connect: Network is unreachable"));
        assert!(output.statistics.is_none());
    }

    #[test]
    fn truncated_and_garbled() {
        let text = read("ping_iputils_20221126_loopback_1472_df_ok.txt");
        assert_eq!(parse(&first_lines(&text, 6)).expect_err("is refused").line(), Some(7));
        assert_eq!(parse(&first_lines(&text, 4)).expect_err("is refused").line(), Some(5));
        let garbled = replace_line(&text, 8, "rtt min/avg/max/mdev = 0.052/fast/0.342/0.135 ms");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 8: expected a number for rtt avg, found `fast`"
        );
        let garbled = replace_line(&text, 7, "3 packets transmitted, three received, 0% packet loss, time 2056ms");
        assert_eq!(parse(&garbled).expect_err("is refused").line(), Some(7));
        assert_eq!(parse("hello\n").expect_err("is refused").line(), Some(1));
    }
}
