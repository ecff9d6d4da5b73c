//! `lldpctl -f json` (and `-f json0`) output of lldpd.
//!
//! Stage: parse (leaf). Input: the neighbour document. Output: [`LldpNeighbors`]: one
//! entry per (local interface, neighbour) with the neighbour's system name, chassis
//! id, port id and description, management addresses and TTL — what cabling
//! verification compares with the cabling plan.
//!
//! `-f json` changes shape with the count: one interface is an object keyed by its
//! name, several are an array of such objects; values that can repeat (`mgmt-ip`) are a
//! string or an array. `-f json0` always uses arrays of `{"value": …}`. Both are read.
//! No neighbours is `{"lldp": {}}`, a valid, empty answer.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::{ParseError, Summary, json_document};

/// The neighbours lldpd knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LldpNeighbors {
    /// One entry per (local interface, neighbour).
    pub neighbors: Vec<LldpNeighbor>,
}

/// One neighbour seen on one local interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LldpNeighbor {
    /// Local interface (`ens1np0`).
    pub local_interface: String,
    /// Protocol (`LLDP`, `CDPv2`).
    pub via: Option<String>,
    /// Neighbour system name (`leaf1`).
    pub system_name: Option<String>,
    /// Neighbour system description.
    pub system_description: Option<String>,
    /// Chassis id type (`mac`, `local`).
    pub chassis_id_type: Option<String>,
    /// Chassis id.
    pub chassis_id: Option<String>,
    /// Port id type (`ifname`, `mac`, `local`).
    pub port_id_type: Option<String>,
    /// Port id (`swp1`, or a MAC).
    pub port_id: Option<String>,
    /// Port description (`swp1` on Linux peers).
    pub port_description: Option<String>,
    /// Management addresses.
    pub management_addresses: Vec<String>,
    /// TTL in seconds.
    pub ttl: Option<u32>,
}

/// Parses `lldpctl -f json` or `-f json0` output.
pub fn parse(text: &str) -> Result<LldpNeighbors, ParseError> {
    let root: Value = json_document(text, "`lldpctl -f json` output")?;
    let first_line = text.lines().position(|line| line.trim_start().starts_with('{')).map_or(1, |at| at + 1);
    let shape = |what: &str| ParseError::at(first_line, what.to_owned(), "a document without it");
    let lldp = root.get("lldp").ok_or_else(|| shape("an `lldp` object"))?;
    let mut neighbors = Vec::new();
    match lldp {
        // json: {"lldp": {"interface": {name: {...}} | [{name: {...}}, …]}}
        Value::Object(object) => {
            for entry in as_list(object.get("interface")) {
                let Value::Object(named) = entry else { return Err(shape("interfaces as objects keyed by name")) };
                for (name, interface) in named {
                    neighbors.push(json_neighbor(name, interface));
                }
            }
        }
        // json0: {"lldp": [{"interface": [{"name": …, "chassis": [{…}], "port": [{…}]}]}]}
        Value::Array(sections) => {
            for section in sections {
                for interface in as_list(section.get("interface")) {
                    neighbors.push(json0_neighbor(interface));
                }
            }
        }
        _ => return Err(shape("an `lldp` object or array")),
    }
    Ok(LldpNeighbors { neighbors })
}

/// A value that is one item or an array of items, as a list.
fn as_list(value: Option<&Value>) -> Vec<&Value> {
    match value {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![other],
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn json_neighbor(local_interface: &str, interface: &Value) -> LldpNeighbor {
    // The chassis is keyed by the system name when the neighbour sends one.
    let (system_name, chassis) = match interface.get("chassis") {
        Some(Value::Object(chassis)) if !chassis.contains_key("id") && chassis.len() == 1 => {
            let (name, body) =
                chassis.iter().next().map_or((None, None), |(name, body)| (Some(name.clone()), Some(body)));
            (name, body)
        }
        other => (None, other),
    };
    let chassis_id = chassis.and_then(|chassis| chassis.get("id"));
    let port = interface.get("port");
    let port_id = port.and_then(|port| port.get("id"));
    LldpNeighbor {
        local_interface: local_interface.to_owned(),
        via: text(interface.get("via")),
        system_name,
        system_description: text(chassis.and_then(|chassis| chassis.get("descr"))),
        chassis_id_type: text(chassis_id.and_then(|id| id.get("type"))),
        chassis_id: text(chassis_id.and_then(|id| id.get("value"))),
        port_id_type: text(port_id.and_then(|id| id.get("type"))),
        port_id: text(port_id.and_then(|id| id.get("value"))),
        port_description: text(port.and_then(|port| port.get("descr"))),
        management_addresses: as_list(chassis.and_then(|chassis| chassis.get("mgmt-ip")))
            .into_iter()
            .filter_map(|address| text(Some(address)))
            .collect(),
        ttl: text(port.and_then(|port| port.get("ttl"))).and_then(|ttl| ttl.parse().ok()),
    }
}

/// json0 wraps every value: `"name": [{"value": "leaf1"}]`.
fn json0_value(value: Option<&Value>, key: &str) -> Option<String> {
    let first = as_list(value.and_then(|value| value.get(key))).into_iter().next()?;
    text(first.get("value")).or_else(|| text(Some(first)))
}

fn json0_neighbor(interface: &Value) -> LldpNeighbor {
    let chassis = as_list(interface.get("chassis")).into_iter().next();
    let chassis_id = chassis.and_then(|chassis| as_list(chassis.get("id")).into_iter().next());
    let port = as_list(interface.get("port")).into_iter().next();
    let port_id = port.and_then(|port| as_list(port.get("id")).into_iter().next());
    LldpNeighbor {
        local_interface: text(interface.get("name")).unwrap_or_default(),
        via: text(interface.get("via")),
        system_name: json0_value(chassis, "name"),
        system_description: json0_value(chassis, "descr"),
        chassis_id_type: text(chassis_id.and_then(|id| id.get("type"))),
        chassis_id: text(chassis_id.and_then(|id| id.get("value"))),
        port_id_type: text(port_id.and_then(|id| id.get("type"))),
        port_id: text(port_id.and_then(|id| id.get("value"))),
        port_description: json0_value(port, "descr"),
        management_addresses: as_list(chassis.and_then(|chassis| chassis.get("mgmt-ip")))
            .into_iter()
            .filter_map(|address| text(address.get("value")))
            .collect(),
        ttl: json0_value(port, "ttl").and_then(|ttl| ttl.parse().ok()),
    }
}

impl Summary for LldpNeighbors {
    fn summary(&self) -> String {
        if self.neighbors.is_empty() {
            return "no LLDP neighbours\n".to_owned();
        }
        let mut out = String::new();
        for neighbor in &self.neighbors {
            let _ = writeln!(
                out,
                "{} -> {} {}",
                neighbor.local_interface,
                neighbor.system_name.as_deref().unwrap_or("?"),
                neighbor.port_description.as_deref().or(neighbor.port_id.as_deref()).unwrap_or("?")
            );
        }
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::{first_lines, read};
    use super::*;

    #[test]
    fn one_neighbor_is_an_object_keyed_by_interface() {
        let found = parse(&read("lldpctl_1.0.16_json_1_neighbor.json")).expect("parses");
        assert_eq!(found.neighbors.len(), 1);
        let neighbor = &found.neighbors[0];
        assert_eq!(neighbor.local_interface, "ens1np0");
        assert_eq!(neighbor.via.as_deref(), Some("LLDP"));
        assert_eq!(neighbor.system_name.as_deref(), Some("leaf1"));
        assert_eq!(neighbor.chassis_id_type.as_deref(), Some("mac"));
        assert_eq!(neighbor.chassis_id.as_deref(), Some("82:89:48:d3:1e:b5"));
        assert_eq!(neighbor.port_description.as_deref(), Some("swp1"));
        assert_eq!(neighbor.management_addresses, ["10.10.0.0", "fe80::8089:48ff:fed3:1eb5"]);
        assert_eq!(neighbor.ttl, Some(120));
    }

    #[test]
    fn two_neighbors_are_an_array_and_json0_reads_the_same() {
        let json = parse(&read("lldpctl_1.0.16_json_2_neighbors.json")).expect("parses");
        let interfaces: Vec<&str> = json.neighbors.iter().map(|n| n.local_interface.as_str()).collect();
        assert_eq!(interfaces, ["ens1np0", "ens2np0"]);
        let ports: Vec<Option<&str>> = json.neighbors.iter().map(|n| n.port_description.as_deref()).collect();
        assert_eq!(ports, [Some("swp1"), Some("swp2")]);
        let json0 = parse(&read("lldpctl_1.0.16_json0_2_neighbors.json")).expect("parses");
        assert_eq!(json0, json);
    }

    #[test]
    fn no_neighbors_and_errors() {
        assert!(parse(&read("lldpctl_1.0.16_json_no_neighbors.json")).expect("parses").neighbors.is_empty());
        let text = read("lldpctl_1.0.16_json_1_neighbor.json");
        assert_eq!(parse(&first_lines(&text, 20)).expect_err("is refused").line(), Some(21));
        assert_eq!(
            parse("{\"other\": 1}").expect_err("is refused").to_string(),
            "could not parse line 1: expected an `lldp` object, found a document without it"
        );
    }
}
