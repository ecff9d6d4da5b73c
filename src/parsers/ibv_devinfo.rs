//! `ibv_devinfo [-v]` output (rdma-core).
//!
//! Stage: parse (leaf). Input: `hca_id: <name>` blocks with `key: value` lines and
//! `port: N` sub-blocks. Output: [`IbvDevinfo`]: per HCA firmware, part id
//! (`4129` = ConnectX-7), GUIDs, and per port state (`PORT_ACTIVE`), MTUs, LIDs and link
//! layer. `No IB devices found` is a valid, empty answer.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{ParseError, Summary, integer, quoted};

/// What `ibv_devinfo` printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IbvDevinfo {
    /// HCAs in output order; empty with `No IB devices found`.
    pub hcas: Vec<Hca>,
}

/// One HCA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hca {
    /// 1-based line of `hca_id:`.
    pub line: usize,
    /// Device name (`mlx5_0`).
    pub hca_id: String,
    /// `fw_ver`.
    pub fw_ver: Option<String>,
    /// `vendor_part_id` (4123 CX-6, 4125 CX-6 Dx, 4129 CX-7).
    pub vendor_part_id: Option<u32>,
    /// `node_guid`.
    pub node_guid: Option<String>,
    /// `board_id` (PSID).
    pub board_id: Option<String>,
    /// `phys_port_cnt`.
    pub phys_port_cnt: Option<u32>,
    /// Every other device field (`transport`, `vendor_id`, `-v` fields).
    pub fields: BTreeMap<String, String>,
    /// Ports in output order.
    pub ports: Vec<HcaPort>,
}

/// One port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HcaPort {
    /// 1-based line of `port:`.
    pub line: usize,
    /// Port number.
    pub port: u32,
    /// `PORT_ACTIVE`, `PORT_DOWN`, `PORT_INIT`, …
    pub state: String,
    /// The number in `PORT_ACTIVE (4)`.
    pub state_code: Option<u32>,
    /// `max_mtu` in bytes.
    pub max_mtu: Option<u32>,
    /// `active_mtu` in bytes.
    pub active_mtu: u32,
    /// `port_lid`.
    pub port_lid: Option<u32>,
    /// `sm_lid`.
    pub sm_lid: Option<u32>,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: String,
    /// Every other port field (`GID[  0]`, `-v` fields).
    pub fields: BTreeMap<String, String>,
}

type Fields = BTreeMap<String, (String, usize)>;

/// A port's line, number and fields while the output is read.
type PortLines = (usize, u32, Fields);

/// An HCA's line, id, fields and ports while the output is read.
type HcaLines = (usize, String, Fields, Vec<PortLines>);

/// Parses `ibv_devinfo` output.
pub fn parse(text: &str) -> Result<IbvDevinfo, ParseError> {
    let mut blocks: Vec<HcaLines> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() {
            continue;
        }
        if content == "No IB devices found" {
            return Ok(IbvDevinfo { hcas: Vec::new() });
        }
        let (key, value) =
            content.split_once(':').ok_or_else(|| ParseError::at(line, "`key: value`", quoted(content)))?;
        let (key, value) = (key.trim(), value.trim());
        if key == "hca_id" {
            blocks.push((line, value.to_owned(), Fields::new(), Vec::new()));
            continue;
        }
        let Some((_, _, fields, ports)) = blocks.last_mut() else {
            return Err(ParseError::at(line, "`hca_id: NAME` opening a device", quoted(content)));
        };
        if key == "port" {
            ports.push((line, integer(value, line, "the port number")?, Fields::new()));
            continue;
        }
        let target = match ports.last_mut() {
            Some((_, _, port_fields)) => port_fields,
            None => fields,
        };
        target.insert(key.to_owned(), (value.to_owned(), line));
    }
    if blocks.is_empty() {
        return Err(ParseError::end_of_input(text, "`hca_id: NAME` opening a device"));
    }
    let mut hcas = Vec::new();
    for (line, hca_id, mut fields, ports) in blocks {
        let mut number = |key: &str| -> Result<Option<u32>, ParseError> {
            match fields.remove(key) {
                Some((value, line)) => integer(&value, line, &format!("`{key}`")).map(Some),
                None => Ok(None),
            }
        };
        let vendor_part_id = number("vendor_part_id")?;
        let phys_port_cnt = number("phys_port_cnt")?;
        let ports: Vec<HcaPort> = ports
            .into_iter()
            .map(|(line, port, fields)| finish_port(line, port, fields, &hca_id))
            .collect::<Result<_, _>>()?;
        if let Some(expected) = phys_port_cnt
            && ports.len() < expected as usize
        {
            return Err(ParseError::end_of_input(
                text,
                format!("{expected} ports of `{hca_id}` (found {}: the output is truncated)", ports.len()),
            ));
        }
        let mut take = |key: &str| fields.remove(key).map(|(value, _)| value);
        hcas.push(Hca {
            line,
            fw_ver: take("fw_ver"),
            node_guid: take("node_guid"),
            board_id: take("board_id"),
            hca_id,
            vendor_part_id,
            phys_port_cnt,
            fields: fields.into_iter().map(|(key, (value, _))| (key, value)).collect(),
            ports,
        });
    }
    Ok(IbvDevinfo { hcas })
}

/// `4096 (5)` → 4096; `PORT_ACTIVE (4)` → (`PORT_ACTIVE`, 4).
fn with_code(value: &str) -> (&str, Option<&str>) {
    match value.split_once(" (") {
        Some((word, code)) => (word.trim(), Some(code.trim_end_matches(')').trim())),
        None => (value, None),
    }
}

fn finish_port(line: usize, port: u32, mut fields: Fields, hca: &str) -> Result<HcaPort, ParseError> {
    let mut required = |key: &str| {
        fields.remove(key).ok_or_else(|| {
            ParseError::at(line, format!("`{key}` in port {port} of `{hca}`"), "no such line (the output is truncated)")
        })
    };
    let (state_text, state_line) = required("state")?;
    let (active_mtu_text, active_mtu_line) = required("active_mtu")?;
    let (link_layer, _) = required("link_layer")?;
    let (state, code) = with_code(&state_text);
    let state_code = code.map(|code| integer(code, state_line, "the port state code")).transpose()?;
    let mut optional = |key: &str| -> Result<Option<u32>, ParseError> {
        match fields.remove(key) {
            Some((value, line)) => integer(with_code(&value).0, line, &format!("`{key}`")).map(Some),
            None => Ok(None),
        }
    };
    Ok(HcaPort {
        line,
        port,
        state: state.to_owned(),
        state_code,
        max_mtu: optional("max_mtu")?,
        active_mtu: integer(with_code(&active_mtu_text).0, active_mtu_line, "`active_mtu`")?,
        port_lid: optional("port_lid")?,
        sm_lid: optional("sm_lid")?,
        link_layer,
        fields: fields.into_iter().map(|(key, (value, _))| (key, value)).collect(),
    })
}

impl Summary for IbvDevinfo {
    fn summary(&self) -> String {
        if self.hcas.is_empty() {
            return "no IB devices\n".to_owned();
        }
        let mut out = String::new();
        for hca in &self.hcas {
            for port in &hca.ports {
                let _ = writeln!(
                    out,
                    "{} port {}: {}, MTU {}, {}, FW {}",
                    hca.hca_id,
                    port.port,
                    port.state,
                    port.active_mtu,
                    port.link_layer,
                    hca.fw_ver.as_deref().unwrap_or("?")
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

    const DOWN: &str = "ibv_devinfo_excerpt_cx7_port_down.txt";

    #[test]
    fn cx7_port_down() {
        let info = parse(&read(DOWN)).expect("parses");
        let hca = &info.hcas[0];
        assert_eq!(hca.hca_id, "mlx5_0");
        assert_eq!(hca.fw_ver.as_deref(), Some("28.39.2048"));
        assert_eq!(hca.vendor_part_id, Some(4129));
        assert_eq!(hca.board_id.as_deref(), Some("MT_0000000838"));
        assert_eq!(hca.fields["transport"], "InfiniBand (0)");
        let port = &hca.ports[0];
        assert_eq!((port.state.as_str(), port.state_code), ("PORT_DOWN", Some(1)));
        assert_eq!((port.max_mtu, port.active_mtu), (Some(4096), 4096));
        assert_eq!((port.port_lid, port.sm_lid), (Some(65535), Some(0)));
        assert_eq!(port.link_layer, "InfiniBand");
        assert_eq!(port.fields["port_lmc"], "0x00");
    }

    #[test]
    fn truncated_garbled_and_empty() {
        let text = read(DOWN);
        assert_eq!(
            parse(&first_lines(&text, 14)).expect_err("is refused").to_string(),
            "could not parse line 11: expected `link_layer` in port 1 of `mlx5_0`, found no such line (the output is truncated)"
        );
        let garbled = replace_line(&text, 14, "                        active_mtu:             big (5)");
        assert_eq!(
            parse(&garbled).expect_err("is refused").to_string(),
            "could not parse line 14: expected an integer for `active_mtu`, found `big`"
        );
        assert_eq!(parse(&first_lines(&text, 10)).expect_err("is refused").line(), Some(11));
        assert!(parse("No IB devices found\n").expect("parses").hcas.is_empty());
        assert_eq!(parse("").expect_err("is refused").line(), Some(1));
    }
}
