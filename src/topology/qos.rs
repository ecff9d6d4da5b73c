//! The fabric's RoCE QoS as each end applies it: the switch priority RoCE and CNPs
//! travel on, and the host half (trust, PFC, ECN, ToS) every rail NIC must match.
//!
//! Stage: expand. Input: the blueprint's [`RoceQos`]. Output: [`HostQos`], the values
//! the host render writes at boot and the `roce-qos` validator reads back; the switch
//! render takes its priority from [`roce_priority`], so both ends come from one place.

use serde::{Deserialize, Serialize};

use crate::blueprint::schema::{RoceMode, RoceQos};

/// NVIDIA's RoCE priority (`nv set qos roce`, MLNX_OFED's default DSCP 24–31 → 3).
pub const DEFAULT_PRIORITY: u8 = 3;
/// The priority congestion notification packets travel on.
pub const CNP_PRIORITY: u8 = 6;
/// ECN codepoint ECT(0), set in the low two bits of the ToS so switches can mark CE.
const ECT0: u8 = 0b10;
/// Priorities of an 802.1Qbb link.
pub const PRIORITIES: usize = 8;

/// The priority RoCE data travels on.
#[must_use]
pub fn roce_priority(qos: &RoceQos) -> u8 {
    qos.pfc_priority.unwrap_or(DEFAULT_PRIORITY)
}

/// What every rail NIC of a RoCE fabric is set to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostQos {
    /// `dscp`: classify by the IP header, as the switches do.
    pub trust: String,
    /// PFC per priority 0–7: on for the lossless priority only (none when lossy).
    pub pfc: [bool; PRIORITIES],
    /// The RoCE priority: ECN reaction and notification points are enabled on it.
    pub priority: u8,
    /// RoCE data's DSCP, which must map to `priority`.
    pub dscp: u8,
    /// ECN (DCQCN) on `priority`.
    pub ecn: bool,
    /// DSCP of the CNPs this NIC sends.
    pub cnp_dscp: u8,
    /// Default ToS of RDMA-CM and verbs QPs: DSCP << 2, with ECT(0) when ECN is on.
    pub tos: u8,
}

/// The host half of `qos` (values are checked at lint: priority ≤ 7, DSCP ≤ 63).
#[must_use]
pub fn host_qos(qos: &RoceQos) -> HostQos {
    let priority = roce_priority(qos);
    let mut pfc = [false; PRIORITIES];
    if qos.mode == RoceMode::Lossless
        && let Some(slot) = pfc.get_mut(usize::from(priority))
    {
        *slot = true;
    }
    let ect = if qos.ecn { ECT0 } else { 0 };
    HostQos {
        trust: "dscp".to_owned(),
        pfc,
        priority,
        dscp: qos.dscp,
        ecn: qos.ecn,
        cnp_dscp: qos.cnp_dscp,
        tos: (qos.dscp << 2) | ect,
    }
}

impl HostQos {
    /// `mlnx_qos --pfc` argument: `0,0,0,1,0,0,0,0`.
    #[must_use]
    pub fn pfc_argument(&self) -> String {
        self.pfc.iter().map(|on| if *on { "1" } else { "0" }).collect::<Vec<_>>().join(",")
    }

    /// Whether the NIC's default DSCP map (DSCP `d` → priority `d / 8`) already
    /// sends RoCE data to `priority`; otherwise `--dscp2prio set,DSCP,PRIORITY` is needed.
    #[must_use]
    pub const fn default_map_fits(&self) -> bool {
        self.dscp / 8 == self.priority
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos(mode: RoceMode, priority: Option<u8>, ecn: bool, dscp: u8) -> RoceQos {
        RoceQos { mode, pfc_priority: priority, ecn, dscp, cnp_dscp: 48 }
    }

    #[test]
    fn nvidia_defaults_give_tos_106_and_pfc_on_priority_3_only() {
        let host = host_qos(&qos(RoceMode::Lossless, Some(3), true, 26));
        assert_eq!(host.tos, 106);
        assert_eq!(host.pfc_argument(), "0,0,0,1,0,0,0,0");
        assert!(host.default_map_fits());
        assert_eq!(host.cnp_dscp, 48);
    }

    #[test]
    fn lossy_has_no_pfc_and_no_ect_without_ecn() {
        let host = host_qos(&qos(RoceMode::Lossy, None, false, 26));
        assert_eq!(host.pfc_argument(), "0,0,0,0,0,0,0,0");
        assert_eq!(host.tos, 104);
        assert_eq!(host.priority, DEFAULT_PRIORITY);
    }

    #[test]
    fn a_moved_priority_needs_a_dscp_map_entry() {
        let host = host_qos(&qos(RoceMode::Lossless, Some(2), true, 26));
        assert_eq!(host.pfc_argument(), "0,0,1,0,0,0,0,0");
        assert!(!host.default_map_fits());
        assert_eq!(host.tos, 106);
    }
}
