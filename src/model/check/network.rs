//! Checks of addresses and ASNs: CIDR syntax, pool sizes against the planned
//! fabric, overlapping networks, and RFC 7938/6996 ASN plans.

use std::ops::RangeInclusive;

use ipnet::Ipv4Net;

use super::Facts;
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::FabricKind;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::model::expand::MANAGEMENT_RESERVED;
use crate::topology::addressing::{Pool, prefix_for_hosts, usable_hosts};

/// Private 2-byte ASNs (RFC 6996).
const PRIVATE_ASN_16: RangeInclusive<u32> = 64_512..=65_534;
/// Private 4-byte ASNs (RFC 6996).
const PRIVATE_ASN_32: RangeInclusive<u32> = 4_200_000_000..=4_294_967_294;

pub(super) fn check(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let networks = parse_networks(loaded, out);
    let find = |path: &str| networks.iter().find(|(p, _)| *p == path).map(|(_, net)| *net);
    pools(loaded, facts, find(RAIL_POOL), find(LOOPBACK_POOL), out);
    management(loaded, facts, find(INBAND), out);
    overlaps(loaded, &networks, out);
    asns(loaded, facts, out);
}

const RAIL_POOL: &str = "fabric.compute.addressing.rail_pool";
const LOOPBACK_POOL: &str = "fabric.compute.addressing.loopback_pool";
const INBAND: &str = "fabric.management.inband.subnet";

/// Parses every network of the blueprint, reporting those that are not IPv4 CIDR.
fn parse_networks(loaded: &LoadedBlueprint, out: &mut Diagnostics) -> Vec<(&'static str, Ipv4Net)> {
    let fabric = &loaded.blueprint.fabric;
    let mut candidates: Vec<(&'static str, &str)> = vec![
        (RAIL_POOL, &fabric.compute.addressing.rail_pool),
        (LOOPBACK_POOL, &fabric.compute.addressing.loopback_pool),
        (INBAND, &fabric.management.inband.subnet),
    ];
    if let Some(oob) = &fabric.management.oob {
        candidates.push(("fabric.management.oob.subnet", &oob.subnet));
    }
    if let Some(storage) = &fabric.storage {
        candidates.push(("fabric.storage.subnet", &storage.subnet));
    }
    let mut parsed = Vec::with_capacity(candidates.len());
    for (path, text) in candidates {
        match text.trim().parse::<Ipv4Net>() {
            Ok(net) => {
                if net.addr() != net.network() {
                    out.push(
                        Diagnostic::warning(
                            "cidr-host-bits-set",
                            format!("`{text}` has host bits set; the network is `{}`", net.trunc()),
                        )
                        .at(&loaded.source, path)
                        .help(format!("did you mean `{}`?", net.trunc())),
                    );
                }
                parsed.push((path, net.trunc()));
            }
            Err(_) => out.push(
                Diagnostic::error("invalid-cidr", format!("`{text}` is not an IPv4 network in CIDR form"))
                    .at(&loaded.source, path)
                    .help("write the network address and prefix length, e.g. `10.200.0.0/16`"),
            ),
        }
    }
    parsed
}

fn pools(
    loaded: &LoadedBlueprint,
    facts: &Facts,
    rail_pool: Option<Ipv4Net>,
    loopback_pool: Option<Ipv4Net>,
    out: &mut Diagnostics,
) {
    let Some(sizing) = facts.sizing() else { return };
    if let Some(pool) = rail_pool {
        let prefix = prefix_for_hosts(sizing.nodes_per_su.saturating_add(1));
        if let Err(error) = Pool::new(pool, prefix, sizing.leaves as usize) {
            out.push(
                Diagnostic::error(
                    "pool-too-small",
                    format!(
                        "rail pool too small: `{}` leaves each need a /{prefix} for `{}` nodes and the gateway; {error}",
                        sizing.leaves, sizing.nodes_per_su
                    ),
                )
                .at(&loaded.source, RAIL_POOL)
                .help(format!("use a pool of at least /{}", pool_prefix_needed(prefix, u64::from(sizing.leaves)))),
            );
        }
    }
    if let Some(pool) = loopback_pool {
        let switches = u64::from(sizing.leaves) + u64::from(sizing.spines) + u64::from(sizing.cores);
        if let Err(error) = Pool::new(pool, 32, usize::try_from(switches).unwrap_or(usize::MAX)) {
            out.push(
                Diagnostic::error(
                    "pool-too-small",
                    format!("loopback pool too small for `{switches}` switches: {error}"),
                )
                .at(&loaded.source, LOOPBACK_POOL)
                .help(format!("use a pool of at least /{}", pool_prefix_needed(32, switches))),
            );
        }
    }
}

/// The longest prefix of a pool that holds `count` blocks of `/prefix`.
fn pool_prefix_needed(prefix: u8, count: u64) -> u8 {
    let bits = 64 - count.saturating_sub(1).leading_zeros();
    u8::try_from(u32::from(prefix).saturating_sub(bits)).unwrap_or(0)
}

fn management(loaded: &LoadedBlueprint, facts: &Facts, inband: Option<Ipv4Net>, out: &mut Diagnostics) {
    let Some(subnet) = inband else { return };
    let room = usable_hosts(subnet).saturating_sub(u64::from(MANAGEMENT_RESERVED));
    if facts.total_nodes > room {
        let needed = facts.total_nodes + u64::from(MANAGEMENT_RESERVED) + 2;
        let bits = 64 - needed.saturating_sub(1).leading_zeros();
        out.push(
            Diagnostic::error(
                "management-subnet-too-small",
                format!(
                    "management subnet `{subnet}` has room for `{room}` nodes (after `{MANAGEMENT_RESERVED}` reserved addresses), `{}` are declared",
                    facts.total_nodes
                ),
            )
            .at(&loaded.source, INBAND)
            .help(format!("use at least a /{}", 32_u32.saturating_sub(bits))),
        );
    }
}

fn overlaps(loaded: &LoadedBlueprint, networks: &[(&'static str, Ipv4Net)], out: &mut Diagnostics) {
    for (later, (path, net)) in networks.iter().enumerate() {
        for (other_path, other) in &networks[..later] {
            if net.contains(&other.network()) || other.contains(&net.network()) {
                out.push(
                    Diagnostic::error("overlapping-networks", format!("`{net}` overlaps `{other}` (`{other_path}`)"))
                        .at(&loaded.source, *path)
                        .help("give every network its own range: routes and firewall rules assume they are disjoint"),
                );
            }
        }
    }
}

fn asns(loaded: &LoadedBlueprint, facts: &Facts, out: &mut Diagnostics) {
    let compute = &loaded.blueprint.fabric.compute;
    // InfiniBand has no BGP; the ASNs are unused there.
    if compute.kind != FabricKind::Roce {
        return;
    }
    let Some(sizing) = facts.sizing() else { return };
    let addressing = &compute.addressing;
    let base_path = "fabric.compute.addressing";
    let leaves = sizing.leaves.max(1);
    let Some(last_leaf) = addressing.leaf_asn_base.checked_add(leaves - 1) else {
        out.push(
            Diagnostic::error(
                "asn-overflow",
                format!(
                    "`{leaves}` leaf ASNs from `{}` run past the largest ASN `{}`",
                    addressing.leaf_asn_base,
                    u32::MAX
                ),
            )
            .at(&loaded.source, format!("{base_path}.leaf_asn_base"))
            .help("start the leaf ASNs lower, e.g. at `4200000100`"),
        );
        return;
    };
    let leaf_range = addressing.leaf_asn_base..=last_leaf;
    let has_cores = sizing.cores > 0;
    let mut upper = vec![("spine_asn", addressing.spine_asn)];
    if has_cores {
        upper.push(("core_asn", addressing.core_asn));
    }
    for (key, asn) in &upper {
        if leaf_range.contains(asn) {
            out.push(
                Diagnostic::error(
                    "asn-collision",
                    format!("`{key}` `{asn}` is inside the leaf ASNs `{}`–`{last_leaf}`", addressing.leaf_asn_base),
                )
                .at(&loaded.source, format!("{base_path}.{key}"))
                .help("each leaf has its own ASN and the spines share one (RFC 7938): move it outside the leaf range"),
            );
        }
    }
    if has_cores && addressing.spine_asn == addressing.core_asn {
        out.push(
            Diagnostic::error("asn-collision", format!("spines and cores share ASN `{}`", addressing.spine_asn))
                .at(&loaded.source, format!("{base_path}.core_asn"))
                .help("give the core layer its own ASN"),
        );
    }
    let mut checked = vec![("leaf_asn_base", addressing.leaf_asn_base, last_leaf)];
    checked.extend(upper.iter().map(|(key, asn)| (*key, *asn, *asn)));
    for (key, first, last) in checked {
        let private = (PRIVATE_ASN_16.contains(&first) && PRIVATE_ASN_16.contains(&last))
            || (PRIVATE_ASN_32.contains(&first) && PRIVATE_ASN_32.contains(&last));
        if !private {
            let shown = if first == last { format!("`{first}`") } else { format!("`{first}`–`{last}`") };
            out.push(
                Diagnostic::warning("asn-not-private", format!("ASN {shown} is not a private ASN"))
                    .at(&loaded.source, format!("{base_path}.{key}"))
                    .help("use private ASNs (RFC 6996): 64512–65534 or 4200000000–4294967294"),
            );
        }
    }
}
