//! The `roce-qos` validator's comparison: what each rail NIC of a node reports (trust,
//! PFC, DSCP map, ECN, CNP DSCP, ToS) against the fabric's QoS, the values the switch
//! render uses.
//!
//! Stage: validate. Input: the parsed dump ([`RoceQosDump`]), the expected
//! [`HostQos`] and the node's planned rail netdevs. Output: one sentence per mismatch
//! naming the interface, what it has and what the fabric has; empty when they agree.
//! Validators reach it as the `roce_qos_mismatches(output, expected, netdevs)`
//! expression function.

use crate::parsers::mlnx_qos::{InterfaceQos, RoceQosDump};
use crate::topology::qos::HostQos;

/// Every difference between the node's rail NICs and the fabric's QoS.
#[must_use]
pub fn mismatches(dump: &RoceQosDump, expected: &HostQos, netdevs: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for netdev in netdevs {
        match dump.interfaces.iter().find(|interface| &interface.netdev == netdev) {
            Some(interface) => compare(interface, expected, &mut out),
            None => out.push(format!("{netdev}: not in the output")),
        }
    }
    out
}

fn compare(interface: &InterfaceQos, expected: &HostQos, out: &mut Vec<String>) {
    let name = &interface.netdev;
    let setting = |key: &str| interface.settings.get(key).map_or("absent", String::as_str);
    match &interface.mlnx_qos {
        None => out.push(format!("{name}: `mlnx_qos -i {name}` printed no QoS (is DOCA-OFED installed?)")),
        Some(qos) => {
            let trust = qos.trust.as_deref().unwrap_or("unknown");
            if trust != expected.trust {
                out.push(format!("{name}: trust {trust}, fabric trusts {}", expected.trust));
            }
            let wanted: Vec<u8> = (0u8..8).filter(|p| expected.pfc.get(usize::from(*p)) == Some(&true)).collect();
            if qos.pfc_enabled != wanted {
                out.push(format!(
                    "{name}: PFC on priorities {}, fabric: {}",
                    list(&qos.pfc_enabled),
                    if wanted.is_empty() { "none (lossy)".to_owned() } else { format!("{} only", list(&wanted)) }
                ));
            }
            match qos.dscp_to_priority.get(&expected.dscp) {
                Some(priority) if *priority == expected.priority => {}
                found => out.push(format!(
                    "{name}: DSCP {} maps to priority {}, fabric: {}",
                    expected.dscp,
                    found.map_or_else(|| "none".to_owned(), u8::to_string),
                    expected.priority
                )),
            }
        }
    }
    let ecn = if expected.ecn { "1" } else { "0" };
    for point in ["roce_np", "roce_rp"] {
        let key = format!("{point}.{}", expected.priority);
        let found = setting(&key);
        if found != ecn {
            out.push(format!("{name}: ECN {point} on priority {} is {found}, fabric: {ecn}", expected.priority));
        }
    }
    let cnp = setting("cnp_dscp");
    if cnp != expected.cnp_dscp.to_string() {
        out.push(format!("{name}: CNP DSCP {cnp}, fabric: {}", expected.cnp_dscp));
    }
    for key in ["traffic_class", "default_roce_tos"] {
        let found = setting(key);
        if tos_value(found) != Some(expected.tos) {
            out.push(format!("{name}: {key} {found}, fabric: ToS {}", expected.tos));
        }
    }
}

/// `106`, or MLNX_OFED's `Global tclass=106`.
fn tos_value(text: &str) -> Option<u8> {
    let number = text.rsplit(['=', ' ']).next()?;
    number.trim().parse().ok()
}

fn list(values: &[u8]) -> String {
    if values.is_empty() {
        return "none".to_owned();
    }
    values.iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::blueprint::schema::{RoceMode, RoceQos};
    use crate::parsers::mlnx_qos::parse;
    use crate::topology::qos::host_qos;

    const OFED42: &str = include_str!("../../tests/fixtures/parsers/mlnx_qos_i_eth2_dscp_trust_ofed42.txt");

    fn expected() -> HostQos {
        host_qos(&RoceQos { mode: RoceMode::Lossless, pfc_priority: Some(3), ecn: true, dscp: 26, cnp_dscp: 48 })
    }

    fn good_settings() -> BTreeMap<String, String> {
        [
            ("rdma_device", "mlx5_0"),
            ("roce_np.3", "1"),
            ("roce_rp.3", "1"),
            ("cnp_dscp", "48"),
            ("traffic_class", "Global tclass=106"),
            ("default_roce_tos", "106"),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
    }

    fn dump(text: &str, settings: BTreeMap<String, String>) -> RoceQosDump {
        let qos = parse(text).expect("parses");
        RoceQosDump { interfaces: vec![InterfaceQos { netdev: "rail0".to_owned(), mlnx_qos: Some(qos), settings }] }
    }

    #[test]
    fn the_recorded_host_fails_on_pfc_for_priority_3_roce() {
        let found = mismatches(&dump(OFED42, good_settings()), &expected(), &["rail0".to_owned()]);
        assert_eq!(found, ["rail0: PFC on priorities 0, 2, 6, 7, fabric: 3 only"]);
    }

    #[test]
    fn a_host_matching_the_fabric_passes() {
        let fixed = OFED42.replace("enabled 1 0 1 0 0 0 1 1", "enabled 0 0 0 1 0 0 0 0");
        let found = mismatches(&dump(&fixed, good_settings()), &expected(), &["rail0".to_owned()]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn every_setting_is_compared_and_a_missing_rail_is_named() {
        let mut settings = good_settings();
        settings.insert("roce_rp.3".to_owned(), "0".to_owned());
        settings.insert("cnp_dscp".to_owned(), "46".to_owned());
        settings.remove("default_roce_tos");
        let text = OFED42.replace("Priority trust state: dscp", "Priority trust state: pcp");
        let found =
            mismatches(&dump(&text, settings), &expected(), &["rail0".to_owned(), "rail1".to_owned()]).join("\n");
        for needle in [
            "rail0: trust pcp, fabric trusts dscp",
            "rail0: ECN roce_rp on priority 3 is 0, fabric: 1",
            "rail0: CNP DSCP 46, fabric: 48",
            "rail0: default_roce_tos absent, fabric: ToS 106",
            "rail1: not in the output",
        ] {
            assert!(found.contains(needle), "`{needle}` missing from:\n{found}");
        }
    }
}
