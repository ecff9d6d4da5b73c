//! Host-side network values derived from the model: rail routing tables, the rail
//! pool, rail host names, the management subnet and systemd unit names for mounts.
//!
//! Stage: expand (helpers read by render). Input: [`Model`]. Output: plain values,
//! so templates only lay them out.

use std::fmt::Write as _;

use ipnet::Ipv4Net;

use super::{Model, RailPort};

/// Routing table of rail 0; rail `n` uses `RAIL_TABLE_BASE + n` (and the same number
/// as the priority of its `from <address>` rule, ahead of the main table's 32766).
pub const RAIL_TABLE_BASE: u32 = 100;

/// Routing table (and rule priority) of `rail`.
#[must_use]
pub fn rail_table(rail: u32) -> u32 {
    RAIL_TABLE_BASE + rail
}

/// The pool every leaf subnet is carved from: one route to it per rail reaches every
/// other rail address of the cluster through the rail's own leaf.
#[must_use]
pub fn rail_pool(model: &Model) -> Option<Ipv4Net> {
    model.blueprint.fabric.compute.addressing.rail_pool.parse().ok()
}

/// The in-band management subnet (NFS exports are opened to it).
#[must_use]
pub fn management_subnet(model: &Model) -> Option<Ipv4Net> {
    model.blueprint.fabric.management.inband.subnet.parse().ok()
}

/// The leaf subnet a rail port sits on.
#[must_use]
pub fn rail_subnet(rail: &RailPort) -> Ipv4Net {
    Ipv4Net::new(rail.address, rail.prefix_len).map_or_else(|_| Ipv4Net::from(rail.address), |net| net.trunc())
}

/// Host name of a node's address on `rail`: `node01-rail0`.
#[must_use]
pub fn rail_hostname(node: &str, rail: u32) -> String {
    format!("{node}-rail{rail}")
}

/// A path escaped as `systemd-escape --path` does, the name stem of a mount unit:
/// `/home` → `home`, `/data/x-y` → `data-x\x2dy`, `/` → `-`.
#[must_use]
pub fn systemd_escape_path(path: &str) -> String {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    if components.is_empty() {
        return "-".to_owned();
    }
    let joined = components.join("/");
    let mut escaped = String::with_capacity(joined.len());
    for (index, byte) in joined.bytes().enumerate() {
        match byte {
            b'/' => escaped.push('-'),
            b'.' if index == 0 => escaped.push_str("\\x2e"),
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b':' | b'_' | b'.' => escaped.push(char::from(byte)),
            other => {
                let _ = write!(escaped, "\\x{other:02x}");
            }
        }
    }
    escaped
}

/// The mount unit of `path`: `/data/x` → `data-x.mount`.
#[must_use]
pub fn mount_unit(path: &str) -> String {
    format!("{}.mount", systemd_escape_path(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_paths_like_systemd_escape() {
        // Expected values recorded from `systemd-escape --path` (systemd 252).
        assert_eq!(mount_unit("/home"), "home.mount");
        assert_eq!(mount_unit("/data/x"), "data-x.mount");
        assert_eq!(systemd_escape_path("/data/x-y"), "data-x\\x2dy");
        assert_eq!(systemd_escape_path("/a b/.c/ü"), "a\\x20b-.c-\\xc3\\xbc");
        assert_eq!(systemd_escape_path("/"), "-");
        assert_eq!(systemd_escape_path("//home//x/"), "home-x");
        assert_eq!(systemd_escape_path("/.hidden"), "\\x2ehidden");
    }

    #[test]
    fn rail_tables_follow_the_rail() {
        assert_eq!(rail_table(0), 100);
        assert_eq!(rail_table(7), 107);
        assert_eq!(rail_hostname("gpu001", 3), "gpu001-rail3");
    }
}
