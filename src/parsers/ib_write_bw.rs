//! perftest bandwidth output (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`), client side.
//!
//! Stage: parse (leaf). Input: the banner (`Key : value` pairs, two per line), QP address
//! lines, and the result table `#bytes #iterations BW peak[U] BW average[U] MsgRate[Mpps]`.
//! Output: [`PerftestBandwidth`]: settings, and per message size the peak and average
//! bandwidth in the printed unit and in Gb/s.
//!
//! The unit is read from the header (validators.md §9 trap 7): `Gb/sec` with
//! `--report_gbits`, else `MB/sec` in older perftest and `MiB/sec` in current ones; both
//! count 2^20 bytes (the label was corrected, not the arithmetic).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, float, integer, quoted};

/// What one perftest bandwidth client printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerftestBandwidth {
    /// `RDMA_Write BW Test`.
    pub test: Option<String>,
    /// Banner settings (`Device` → `rocep1s0f0`, `Number of qps` → `4`, `Mtu` → `1024[B]`).
    pub settings: BTreeMap<String, String>,
    /// Unit of the bandwidth columns as printed (`Gb/sec`, `MiB/sec`, `MB/sec`).
    pub unit: String,
    /// One row per message size.
    pub rows: Vec<BandwidthRow>,
    /// An error perftest printed instead of a table (`Couldn't connect to …`).
    pub failure: Option<String>,
}

/// One message size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandwidthRow {
    /// 1-based line.
    pub line: usize,
    /// Message size in bytes.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Peak bandwidth in the printed unit.
    pub peak: f64,
    /// Average bandwidth in the printed unit.
    pub average: f64,
    /// Average bandwidth in Gb/s (10^9 bit/s).
    pub average_gbps: f64,
    /// Message rate in Mpps.
    pub msg_rate_mpps: f64,
}

/// Parses perftest `*_bw` output.
pub fn parse(text: &str) -> Result<PerftestBandwidth, ParseError> {
    let mut output = PerftestBandwidth {
        test: None,
        settings: BTreeMap::new(),
        unit: String::new(),
        rows: Vec::new(),
        failure: None,
    };
    let mut header_line = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() || content.starts_with("---") {
            continue;
        }
        if content.starts_with("#bytes") {
            output.unit = unit(content, line)?;
            header_line = Some(line);
        } else if header_line.is_some() {
            output.rows.push(row(content, line, &output.unit)?);
        } else if content.ends_with(" Test") && !content.contains(':') {
            output.test = Some(content.to_owned());
        } else if content.starts_with("local address") || content.starts_with("remote address") {
            // Per-QP addresses: nothing an acceptance test reads.
        } else if content.starts_with("Couldn't") || content.starts_with("Unable") || content.contains("Failed to") {
            output.failure.get_or_insert_with(|| content.to_owned());
        } else if content.contains(':') {
            read_settings(content, &mut output.settings);
        }
    }
    if output.failure.is_some() && output.rows.is_empty() {
        return Ok(output);
    }
    if header_line.is_none() {
        return Err(ParseError::end_of_input(
            text,
            "the result header `#bytes #iterations BW peak[…] BW average[…] …`",
        ));
    }
    if output.rows.is_empty() {
        return Err(ParseError::end_of_input(text, "a result row after the `#bytes …` header"));
    }
    Ok(output)
}

/// `Dual-port       : OFF          Device         : rocep1s0f0` → two settings.
fn read_settings(content: &str, settings: &mut BTreeMap<String, String>) {
    let parts: Vec<&str> = content.split(':').collect();
    let mut key = parts[0].trim().to_owned();
    for (index, part) in parts.iter().enumerate().skip(1) {
        let is_last = index + 1 == parts.len();
        // Between two colons: the value, a run of spaces, then the next key.
        let (value, next) = if is_last {
            (part.trim(), "")
        } else {
            let trimmed = part.trim();
            match trimmed.find("  ") {
                Some(at) => (trimmed[..at].trim(), trimmed[at..].trim()),
                None => (trimmed, ""),
            }
        };
        if !key.is_empty() {
            settings.insert(key.clone(), value.to_owned());
        }
        next.clone_into(&mut key);
    }
}

/// The unit inside `BW average[Gb/sec]`.
fn unit(header: &str, line: usize) -> Result<String, ParseError> {
    let expected = "`BW average[UNIT]` in the header";
    let start = header.find("BW average[").ok_or_else(|| ParseError::at(line, expected, quoted(header)))?;
    let rest = &header[start + "BW average[".len()..];
    let end = rest.find(']').ok_or_else(|| ParseError::at(line, expected, quoted(header)))?;
    Ok(rest[..end].to_owned())
}

fn row(content: &str, line: usize, unit: &str) -> Result<BandwidthRow, ParseError> {
    let tokens: Vec<&str> = content.split_whitespace().collect();
    if tokens.len() != 5 {
        return Err(ParseError::at(
            line,
            "5 columns (#bytes #iterations peak average msg-rate)",
            format!("{} columns in {}", tokens.len(), quoted(content)),
        ));
    }
    let average = float(tokens[3], line, "`BW average`")?;
    let bits_per_unit = match unit {
        "Gb/sec" => 1e9,
        "MB/sec" | "MiB/sec" => 1_048_576.0 * 8.0,
        other => return Err(ParseError::at(line, "a unit of Gb/sec, MB/sec or MiB/sec", quoted(other))),
    };
    Ok(BandwidthRow {
        line,
        bytes: integer(tokens[0], line, "`#bytes`")?,
        iterations: integer(tokens[1], line, "`#iterations`")?,
        peak: float(tokens[2], line, "`BW peak`")?,
        average,
        average_gbps: average * bits_per_unit / 1e9,
        msg_rate_mpps: float(tokens[4], line, "`MsgRate`")?,
    })
}

impl Summary for PerftestBandwidth {
    fn summary(&self) -> String {
        if let Some(failure) = &self.failure {
            return format!("perftest failed: {failure}\n");
        }
        let mut out = String::new();
        let device = self.settings.get("Device").map_or("?", String::as_str);
        for row in &self.rows {
            let _ = writeln!(
                out,
                "{} on {device}: {} B: average {} {} ({:.2} Gb/s), peak {}",
                self.test.as_deref().unwrap_or("perftest"),
                row.bytes,
                row.average,
                self.unit,
                row.average_gbps,
                row.peak
            );
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

    const GB10: &str = "ib_write_bw_client_gb10_cx7_roce_200g_4qp.txt";

    #[test]
    fn roce_200g_report_gbits() {
        let output = parse(&read(GB10)).expect("parses");
        assert_eq!(output.test.as_deref(), Some("RDMA_Write BW Test"));
        assert_eq!(output.unit, "Gb/sec");
        assert_eq!(output.settings["Device"], "rocep1s0f0");
        assert_eq!(output.settings["Number of qps"], "4");
        assert_eq!(output.settings["Transport type"], "IB");
        assert_eq!(output.settings["Mtu"], "1024[B]");
        assert_eq!(output.settings["Data ex. method"], "rdma_cm");
        assert_eq!(output.settings["PCIe relax order"], "ON");
        assert_eq!(output.rows.len(), 1);
        let row = &output.rows[0];
        assert_eq!((row.bytes, row.iterations, row.peak, row.average), (65536, 20000, 111.62, 111.61));
        assert_eq!(row.average_gbps, 111.61);
        assert_eq!(row.msg_rate_mpps, 0.212_877);
    }

    #[test]
    fn mib_per_second_is_converted() {
        let text = read(GB10);
        let header = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
        let row = " 65536      20000            13305.30             13305.06             0.212881";
        let output = parse(&replace_line(&replace_line(&text, 25, header), 26, row)).expect("parses");
        assert_eq!(output.unit, "MiB/sec");
        assert!((output.rows[0].average_gbps - 111.61).abs() < 0.01, "{}", output.rows[0].average_gbps);
    }

    #[test]
    fn truncated_and_garbled() {
        let text = read(GB10);
        assert_eq!(parse(&first_lines(&text, 24)).expect_err("is refused").line(), Some(25));
        assert_eq!(parse(&first_lines(&text, 25)).expect_err("is refused").line(), Some(26));
        let garbled =
            replace_line(&text, 26, " 65536      20000            111.62             lots             0.212877");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 26: expected a number for `BW average`, found `lots`"
        );
        let cut = replace_line(&text, 26, " 65536      20000            111.62");
        assert!(parse(&cut).expect_err("is refused").to_string().contains("found 3 columns"));
    }

    #[test]
    fn connection_failure_is_typed() {
        // Message formats from perftest's source (perftest_communication.c).
        let output =
            parse(" Couldn't connect to 10.0.0.2:18515\nUnable to open file descriptor for socket connection\n")
                .expect("parses");
        assert_eq!(output.failure.as_deref(), Some("Couldn't connect to 10.0.0.2:18515"));
    }
}
