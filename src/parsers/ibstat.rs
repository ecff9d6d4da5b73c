//! `ibstat` output (infiniband-diags).
//!
//! Stage: parse (leaf). Input: `CA '<name>'` blocks with `Key: value` lines and `Port N:`
//! sub-blocks. Output: [`Ibstat`]: per CA its type (`MT4129` = ConnectX-7), firmware and
//! GUIDs, and per port state, physical state, rate (Gb/s), LIDs and link layer.
//!
//! Indentation is tabs natively and spaces in pastes (validators.md §9 trap 6), so it
//! is ignored: `CA '…'` and `Port N:` lines open blocks. RoCE ports show `Link layer:
//! Ethernet` and `Base lid: 0`; disabled ports show `Rate: 10` or `40`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, float, integer, quoted};

/// What `ibstat` printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ibstat {
    /// Channel adapters in output order.
    pub cas: Vec<Ca>,
}

/// One channel adapter (HCA).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ca {
    /// 1-based line of `CA '…'`.
    pub line: usize,
    /// Device name (`mlx5_0`).
    pub name: String,
    /// `CA type` (`MT4129`).
    pub ca_type: Option<String>,
    /// `Number of ports`.
    pub number_of_ports: Option<u32>,
    /// `Firmware version`.
    pub firmware_version: Option<String>,
    /// `Hardware version`.
    pub hardware_version: Option<String>,
    /// `Node GUID`.
    pub node_guid: Option<String>,
    /// `System image GUID`.
    pub system_image_guid: Option<String>,
    /// Ports in output order.
    pub ports: Vec<IbPort>,
}

/// One port of a CA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IbPort {
    /// 1-based line of `Port N:`.
    pub line: usize,
    /// Port number.
    pub port: u32,
    /// `Active`, `Down`, `Initializing`, `Armed`.
    pub state: String,
    /// `LinkUp`, `Disabled`, `Polling`, …
    pub physical_state: String,
    /// Rate in Gb/s (`400` NDR, `200` HDR).
    pub rate_gbps: f64,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// `Base lid` (0 on RoCE).
    pub base_lid: Option<u32>,
    /// `SM lid`.
    pub sm_lid: Option<u32>,
    /// `Port GUID`.
    pub port_guid: Option<String>,
    /// Every other `Key: value` of the port.
    pub fields: BTreeMap<String, String>,
}

/// A port while its lines are read.
#[derive(Default)]
struct PortLines {
    line: usize,
    port: u32,
    fields: BTreeMap<String, (String, usize)>,
}

/// A CA while its lines are read.
struct CaLines {
    line: usize,
    name: String,
    fields: BTreeMap<String, (String, usize)>,
    ports: Vec<PortLines>,
}

/// Parses `ibstat` output.
pub fn parse(text: &str) -> Result<Ibstat, ParseError> {
    let mut cas: Vec<CaLines> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() {
            continue;
        }
        if let Some(rest) = content.strip_prefix("CA '") {
            let name = rest.strip_suffix('\'').ok_or_else(|| ParseError::at(line, "`CA 'NAME'`", quoted(content)))?;
            cas.push(CaLines { line, name: name.to_owned(), fields: BTreeMap::new(), ports: Vec::new() });
            continue;
        }
        let Some(ca) = cas.last_mut() else {
            return Err(ParseError::at(line, "`CA 'NAME'` opening a channel adapter", quoted(content)));
        };
        if let Some(number) = content.strip_prefix("Port ").and_then(|rest| rest.strip_suffix(':')) {
            ca.ports.push(PortLines { line, port: integer(number, line, "the port number")?, ..PortLines::default() });
            continue;
        }
        let (key, value) =
            content.split_once(':').ok_or_else(|| ParseError::at(line, "`Key: value`", quoted(content)))?;
        let entry = (value.trim().to_owned(), line);
        match ca.ports.last_mut() {
            Some(port) => port.fields.insert(key.trim().to_owned(), entry),
            None => ca.fields.insert(key.trim().to_owned(), entry),
        };
    }
    if cas.is_empty() {
        return Err(ParseError::end_of_input(text, "`CA 'NAME'` opening a channel adapter"));
    }
    let cas = cas.into_iter().map(|ca| finish_ca(ca, text)).collect::<Result<_, _>>()?;
    Ok(Ibstat { cas })
}

fn finish_ca(mut ca: CaLines, text: &str) -> Result<Ca, ParseError> {
    let mut take = |key: &str| ca.fields.remove(key).map(|(value, _)| value);
    let ca_type = take("CA type");
    let firmware_version = take("Firmware version");
    let hardware_version = take("Hardware version");
    let node_guid = take("Node GUID");
    let system_image_guid = take("System image GUID");
    let number_of_ports = match ca.fields.remove("Number of ports") {
        Some((value, line)) => Some(integer(&value, line, "`Number of ports`")?),
        None => None,
    };
    let name = ca.name;
    let ports: Vec<IbPort> = ca.ports.into_iter().map(|port| finish_port(port, &name)).collect::<Result<_, _>>()?;
    if let Some(expected) = number_of_ports
        && ports.len() < expected as usize
    {
        return Err(ParseError::end_of_input(
            text,
            format!("{expected} ports of `{name}` (found {}: the output is truncated)", ports.len()),
        ));
    }
    Ok(Ca {
        line: ca.line,
        name,
        ca_type,
        number_of_ports,
        firmware_version,
        hardware_version,
        node_guid,
        system_image_guid,
        ports,
    })
}

fn finish_port(mut port: PortLines, ca: &str) -> Result<IbPort, ParseError> {
    let (line, number) = (port.line, port.port);
    let mut required = |key: &str| {
        port.fields.remove(key).ok_or_else(|| {
            ParseError::at(
                line,
                format!("`{key}` in port {number} of `{ca}`"),
                "no such line (the output is truncated)",
            )
        })
    };
    let (state, _) = required("State")?;
    let (physical_state, _) = required("Physical state")?;
    let (rate, rate_line) = required("Rate")?;
    let (link_layer, _) = required("Link layer")?;
    let lid = |fields: &mut BTreeMap<String, (String, usize)>, key: &str| -> Result<Option<u32>, ParseError> {
        match fields.remove(key) {
            Some((value, line)) => integer(&value, line, &format!("`{key}`")).map(Some),
            None => Ok(None),
        }
    };
    let base_lid = lid(&mut port.fields, "Base lid")?;
    let sm_lid = lid(&mut port.fields, "SM lid")?;
    let port_guid = port.fields.remove("Port GUID").map(|(value, _)| value);
    Ok(IbPort {
        line,
        port: number,
        state,
        physical_state,
        rate_gbps: float(&rate, rate_line, "`Rate`")?,
        link_layer,
        base_lid,
        sm_lid,
        port_guid,
        fields: port.fields.into_iter().map(|(key, (value, _))| (key, value)).collect(),
    })
}

impl Summary for Ibstat {
    fn summary(&self) -> String {
        let mut out = String::new();
        for ca in &self.cas {
            for port in &ca.ports {
                let _ = writeln!(
                    out,
                    "{} port {}: {} / {}, {} Gb/s, {}, FW {}",
                    ca.name,
                    port.port,
                    port.state,
                    port.physical_state,
                    port.rate_gbps,
                    port.link_layer,
                    ca.firmware_version.as_deref().unwrap_or("?")
                );
            }
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
    fn cx7_ndr_infiniband() {
        let ibstat = parse(&read("ibstat_excerpt_cx7_ndr_ib_h20_node.txt")).expect("parses");
        assert_eq!(ibstat.cas.len(), 2);
        let ca = &ibstat.cas[1];
        assert_eq!(ca.name, "mlx5_1");
        assert_eq!(ca.ca_type.as_deref(), Some("MT4129"));
        assert_eq!(ca.firmware_version.as_deref(), Some("28.43.2026"));
        assert_eq!(ca.number_of_ports, Some(1));
        let port = &ca.ports[0];
        assert_eq!((port.state.as_str(), port.physical_state.as_str()), ("Active", "LinkUp"));
        assert_eq!(port.rate_gbps, 400.0);
        assert_eq!(port.link_layer, "InfiniBand");
        assert_eq!((port.base_lid, port.sm_lid), (Some(49), Some(1)));
        assert_eq!(port.fields["Capability mask"], "0xa751e848");
    }

    #[test]
    fn cx6_hdr_with_a_disabled_port_at_rate_10() {
        let ibstat = parse(&read("ibstat_excerpt_cx6_hdr_one_port_down.txt")).expect("parses");
        let up = &ibstat.cas[0].ports[0];
        assert_eq!((up.state.as_str(), up.rate_gbps), ("Active", 200.0));
        let down = &ibstat.cas[1].ports[0];
        assert_eq!((down.state.as_str(), down.physical_state.as_str(), down.rate_gbps), ("Down", "Disabled", 10.0));
        assert_eq!(down.base_lid, Some(65535));
    }

    #[test]
    fn roce_ports_are_ethernet_with_lid_0() {
        let ibstat = parse(&read("ibstat_excerpt_cx7_roce_200g_ethernet.txt")).expect("parses");
        for ca in &ibstat.cas {
            assert_eq!(ca.ports[0].link_layer, "Ethernet");
            assert_eq!(ca.ports[0].base_lid, Some(0));
            assert_eq!(ca.ports[0].rate_gbps, 200.0);
        }
    }

    #[test]
    fn space_indented_paste_parses_the_same() {
        let text = read("ibstat_excerpt_cx7_ndr_ib_h20_node.txt");
        let spaces = text.replace('\t', "    ");
        assert_eq!(parse(&spaces).expect("parses"), parse(&text).expect("parses"));
    }

    #[test]
    fn truncated_and_garbled_ports_name_lines() {
        let text = read("ibstat_excerpt_cx6_hdr_one_port_down.txt");
        let cut = first_lines(&text, 28);
        assert_eq!(
            parse(&cut).expect_err("is refused").to_string(),
            "could not parse line 25: expected `Link layer` in port 1 of `mlx5_1`, found no such line (the output is truncated)"
        );
        let garbled = replace_line(&text, 11, "                Rate: fast");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 11: expected a number for `Rate`, found `fast`"
        );
        let cut_before_port = first_lines(&text, 7);
        assert_eq!(parse(&cut_before_port).expect_err("is refused").line(), Some(8));
        assert_eq!(parse("hello\n").expect_err("is refused").line(), Some(1));
    }
}
