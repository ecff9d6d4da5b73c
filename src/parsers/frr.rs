//! FRR `show bgp summary json` (vtysh), FRR 8.4.
//!
//! Stage: parse (leaf). Input: the JSON object keyed by address family (`ipv4Unicast`,
//! `ipv6Unicast`, `l2VpnEvpn`) that `vtysh -c 'show bgp summary json'` prints. Output:
//! [`BgpSummary`]: per family the router id and local AS, and per peer its state,
//! `peerState`, prefixes received and sent, uptime and flap counters
//! (fabric_scheduler.md §3.5). `{}` (no BGP instance) is a valid, empty answer.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{ParseError, Summary, json_document};

/// What `show bgp summary json` printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BgpSummary {
    /// One entry per address family, in key order.
    pub address_families: Vec<AddressFamily>,
}

/// One address family.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddressFamily {
    /// `ipv4Unicast`, `ipv6Unicast`, `l2VpnEvpn`, …
    pub name: String,
    /// `routerId`.
    pub router_id: Option<String>,
    /// `as` (local AS).
    pub local_as: Option<u64>,
    /// `vrfName`.
    pub vrf_name: Option<String>,
    /// `failedPeers`: peers not Established.
    pub failed_peers: Option<u32>,
    /// `totalPeers`.
    pub total_peers: Option<u32>,
    /// Peers by name (interface for unnumbered sessions, else address).
    pub peers: Vec<BgpPeer>,
}

/// One BGP neighbour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BgpPeer {
    /// The neighbour key: `swp51` (unnumbered) or an address.
    pub name: String,
    /// Remote host name (with `show-hostname` / the datacenter profile).
    pub hostname: Option<String>,
    /// Remote AS (0 until an unnumbered session learns it).
    pub remote_as: Option<u64>,
    /// Local AS.
    pub local_as: Option<u64>,
    /// FSM state: `Established`, `Idle`, `Active`, `Connect`, `Idle (Admin)`…
    pub state: String,
    /// `OK`, `Admin`, `PfxCt`, `Passive`, `Policy`, …
    pub peer_state: Option<String>,
    /// Prefixes received.
    pub prefixes_received: Option<u64>,
    /// Prefixes sent.
    pub prefixes_sent: Option<u64>,
    /// Time since Established in ms (0 when never).
    pub uptime_msec: Option<u64>,
    /// Sessions established so far.
    pub connections_established: Option<u64>,
    /// Sessions dropped so far (flaps).
    pub connections_dropped: Option<u64>,
    /// `interface`, `ipv4` or `ipv6`.
    pub id_type: Option<String>,
}

impl BgpPeer {
    /// Established and not administratively or policy-blocked.
    #[must_use]
    pub fn is_established(&self) -> bool {
        self.state == "Established" && self.peer_state.as_deref().is_none_or(|state| state == "OK")
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFamily {
    router_id: Option<String>,
    #[serde(rename = "as")]
    local_as: Option<u64>,
    vrf_name: Option<String>,
    failed_peers: Option<u32>,
    total_peers: Option<u32>,
    #[serde(default)]
    peers: BTreeMap<String, RawPeer>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPeer {
    hostname: Option<String>,
    remote_as: Option<u64>,
    local_as: Option<u64>,
    state: String,
    peer_state: Option<String>,
    pfx_rcd: Option<u64>,
    pfx_snt: Option<u64>,
    peer_uptime_msec: Option<u64>,
    connections_established: Option<u64>,
    connections_dropped: Option<u64>,
    id_type: Option<String>,
}

/// Parses `show bgp summary json`.
pub fn parse(text: &str) -> Result<BgpSummary, ParseError> {
    let families: BTreeMap<String, RawFamily> = json_document(text, "FRR `show bgp summary json` output")?;
    let address_families = families
        .into_iter()
        .map(|(name, family)| AddressFamily {
            name,
            router_id: family.router_id,
            local_as: family.local_as,
            vrf_name: family.vrf_name,
            failed_peers: family.failed_peers,
            total_peers: family.total_peers,
            peers: family
                .peers
                .into_iter()
                .map(|(name, peer)| BgpPeer {
                    name,
                    hostname: peer.hostname,
                    remote_as: peer.remote_as,
                    local_as: peer.local_as,
                    state: peer.state,
                    peer_state: peer.peer_state,
                    prefixes_received: peer.pfx_rcd,
                    prefixes_sent: peer.pfx_snt,
                    uptime_msec: peer.peer_uptime_msec,
                    connections_established: peer.connections_established,
                    connections_dropped: peer.connections_dropped,
                    id_type: peer.id_type,
                })
                .collect(),
        })
        .collect();
    Ok(BgpSummary { address_families })
}

impl Summary for BgpSummary {
    fn summary(&self) -> String {
        if self.address_families.is_empty() {
            return "no BGP address families (no BGP instance?)\n".to_owned();
        }
        let mut out = String::new();
        for family in &self.address_families {
            let established = family.peers.iter().filter(|peer| peer.is_established()).count();
            let _ = writeln!(
                out,
                "{} (AS {}, router-id {}): {established} of {} peers established",
                family.name,
                family.local_as.map_or_else(|| "?".to_owned(), |asn| asn.to_string()),
                family.router_id.as_deref().unwrap_or("?"),
                family.peers.len()
            );
            for peer in family.peers.iter().filter(|peer| !peer.is_established()) {
                let _ = writeln!(out, "  {}: {}", peer.name, peer.state);
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

    const LEAF: &str = "frr_8.4.4_show_bgp_summary_json_leaf_2up_1idle.json";

    #[test]
    fn leaf_with_two_established_unnumbered_peers_and_one_idle() {
        let summary = parse(&read(LEAF)).expect("parses");
        assert_eq!(summary.address_families.len(), 1);
        let family = &summary.address_families[0];
        assert_eq!(family.name, "ipv4Unicast");
        assert_eq!(family.router_id.as_deref(), Some("10.0.0.11"));
        assert_eq!(family.local_as, Some(4_200_000_011));
        assert_eq!((family.failed_peers, family.total_peers), (Some(1), Some(3)));
        let names: Vec<&str> = family.peers.iter().map(|peer| peer.name.as_str()).collect();
        assert_eq!(names, ["swp51", "swp52", "swp53"]);
        let spine1 = &family.peers[0];
        assert!(spine1.is_established());
        assert_eq!(spine1.hostname.as_deref(), Some("spine1"));
        assert_eq!(spine1.remote_as, Some(4_200_000_000));
        assert_eq!((spine1.prefixes_received, spine1.prefixes_sent), (Some(1), Some(3)));
        assert_eq!((spine1.connections_established, spine1.connections_dropped), (Some(2), Some(1)));
        assert_eq!(spine1.id_type.as_deref(), Some("interface"));
        let idle = &family.peers[2];
        assert!(!idle.is_established());
        assert_eq!((idle.state.as_str(), idle.remote_as, idle.hostname.as_deref()), ("Idle", Some(0), None));
        assert!(summary.summary().contains("2 of 3 peers established"));
    }

    #[test]
    fn empty_object_means_no_bgp_and_errors_have_lines() {
        assert!(parse("{}\n").expect("parses").address_families.is_empty());
        let text = read(LEAF);
        assert_eq!(parse(&first_lines(&text, 40)).expect_err("is refused").line(), Some(41));
        let garbled = replace_line(&text, 28, "      \"pfxRcd\":\"one\",");
        let error = parse(&garbled).expect_err("is refused");
        assert_eq!(error.line(), Some(28), "{error}");
        assert!(error.to_string().contains("invalid type: string \"one\", expected u64"), "{error}");
    }
}
