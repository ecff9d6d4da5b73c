//! What toolkit has seen of one installing node, and what to say when it stalls.
//!
//! Stage: pure. Input: observations in the order they arrive (power, DHCP log,
//! HTTP requests, the agent's reports, SSH). Output: the last step seen, for the
//! state file and the progress line, and — once a deadline passes — an error that
//! names the node, the last step seen and what to look at, as an operator would
//! want it at 3 a.m. (`no DHCP request seen`, `lease given but iPXE never asked for
//! its script`…).

use std::fmt;
use std::time::Duration;

/// One thing seen on a node's way from power-on to SSH, in boot order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seen {
    /// The BMC accepted the power-on with the one-time network (or CD) boot.
    PoweredOn,
    /// Its BMC fetched the boot ISO (virtual media; there is no DHCP then).
    MediaFetched,
    /// A DHCP request from one of its MACs.
    DhcpRequest,
    /// DHCP gave it an address.
    LeaseGiven(String),
    /// TFTP sent the iPXE binary.
    BootLoaderSent,
    /// iPXE fetched the node's boot script.
    ScriptFetched,
    /// iPXE fetched the agent's kernel.
    KernelFetched,
    /// iPXE fetched the agent's initrd.
    AgentFetched,
    /// The agent reported the node's hardware.
    AgentUp,
    /// The agent is writing the image.
    Writing,
    /// The image is on the disk.
    Written,
    /// The written bytes' checksum matched.
    Verified,
    /// The node's files are laid over the image.
    Overlay,
    /// The agent finished and powers the node off.
    Done,
    /// The BMC reports the node off after the install.
    PoweredOff,
    /// Powered on to boot from its disk.
    BootingFromDisk,
    /// SSH answered with the pinned host key.
    SshUp,
}

impl fmt::Display for Seen {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PoweredOn => formatter.write_str("powered on for network boot"),
            Self::MediaFetched => formatter.write_str("boot ISO fetched by its BMC"),
            Self::DhcpRequest => formatter.write_str("DHCP request seen"),
            Self::LeaseGiven(address) => write!(formatter, "lease {address} given"),
            Self::BootLoaderSent => formatter.write_str("iPXE sent over TFTP"),
            Self::ScriptFetched => formatter.write_str("boot script fetched"),
            Self::KernelFetched => formatter.write_str("kernel fetched"),
            Self::AgentFetched => formatter.write_str("agent fetched"),
            Self::AgentUp => formatter.write_str("agent reported the hardware"),
            Self::Writing => formatter.write_str("writing the image"),
            Self::Written => formatter.write_str("image written"),
            Self::Verified => formatter.write_str("image verified"),
            Self::Overlay => formatter.write_str("node files written"),
            Self::Done => formatter.write_str("install done"),
            Self::PoweredOff => formatter.write_str("powered off after the install"),
            Self::BootingFromDisk => formatter.write_str("booting from disk"),
            Self::SshUp => formatter.write_str("SSH up"),
        }
    }
}

/// How long each stretch may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Power-on to the first DHCP request.
    pub dhcp: Duration,
    /// Power-on to SSH.
    pub install: Duration,
}

/// How the installer reaches the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Delivery {
    /// PXE: DHCP, TFTP, then HTTP.
    #[default]
    Network,
    /// The BMC's virtual CD: nothing on the network until the agent reports.
    VirtualMedia,
}

/// A node's progress: the furthest step seen and when.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    last: Option<(Seen, Duration)>,
    delivery: Delivery,
}

impl Progress {
    /// A node's progress, installed through `delivery`.
    #[must_use]
    pub fn via(delivery: Delivery) -> Self {
        Self { last: None, delivery }
    }

    /// Records `seen` at `elapsed` since power-on. Steps only move forward: a DHCP
    /// renewal seen while the agent writes does not take the node back.
    pub fn observe(&mut self, seen: Seen, elapsed: Duration) {
        if self.last.as_ref().is_none_or(|(last, _)| seen > *last) {
            self.last = Some((seen, elapsed));
        }
    }

    /// The furthest step seen.
    #[must_use]
    pub fn last(&self) -> Option<&Seen> {
        self.last.as_ref().map(|(seen, _)| seen)
    }

    /// `lease 10.0.0.12 given at 14 s`, for the state file.
    #[must_use]
    pub fn last_seen(&self) -> Option<String> {
        self.last.as_ref().map(|(seen, at)| format!("{seen} at {} s", at.as_secs()))
    }

    /// The error once a deadline has passed at `elapsed`, or `None` while there is time.
    #[must_use]
    pub fn overdue(&self, elapsed: Duration, deadlines: Deadlines, macs: &[String]) -> Option<String> {
        if self.delivery == Delivery::VirtualMedia {
            // The first deadline is the agent's first word: there is no DHCP to see.
            let heard = self.last().is_some_and(|seen| *seen >= Seen::AgentUp);
            if !heard && elapsed >= deadlines.dhcp {
                let last = self.last_seen().unwrap_or_else(|| "nothing".to_owned());
                return Some(format!(
                    "the agent on the virtual CD never reported within {} s of power-on (last seen: {last}): did \
                     it boot from the CD (boot order, Secure Boot), and can {} reach the provisioning server?",
                    deadlines.dhcp.as_secs(),
                    macs.first().map_or("its NIC", String::as_str),
                ));
            }
        }
        let reached_dhcp = self.last().is_some_and(|seen| *seen >= Seen::DhcpRequest);
        if !reached_dhcp && elapsed >= deadlines.dhcp {
            return Some(format!(
                "no DHCP request seen from {} within {} s of power-on: is the boot NIC cabled to the \
                 provisioning network and network boot (PXE) enabled in its firmware?",
                macs.join(", "),
                deadlines.dhcp.as_secs()
            ));
        }
        if elapsed < deadlines.install {
            return None;
        }
        let last = self.last_seen().unwrap_or_else(|| "nothing".to_owned());
        let hint = match self.last() {
            None | Some(Seen::PoweredOn) => "the BMC powered it on but nothing was heard from it",
            Some(Seen::MediaFetched) => "it never booted the agent from the virtual CD: see the node's console",
            Some(Seen::DhcpRequest) => "DHCP saw it but gave no lease: is its MAC the one inspection recorded?",
            Some(Seen::LeaseGiven(_) | Seen::BootLoaderSent) => {
                "it got an address but iPXE never asked for its boot script: TFTP or the HTTP port blocked?"
            }
            Some(Seen::ScriptFetched | Seen::KernelFetched | Seen::AgentFetched) => {
                "the agent never reported: it did not boot, or found no network (see the node's console)"
            }
            Some(Seen::AgentUp | Seen::Writing | Seen::Written | Seen::Verified | Seen::Overlay) => {
                "the agent stopped reporting while installing: see the node's console"
            }
            Some(Seen::Done) => "the install finished but the node never powered off",
            Some(Seen::PoweredOff | Seen::BootingFromDisk) => {
                "it never answered SSH from its disk: see the node's console (boot loader, network config)"
            }
            Some(Seen::SshUp) => return None,
        };
        Some(format!("not reachable after {} s; last seen: {last}; {hint}", deadlines.install.as_secs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINES: Deadlines = Deadlines { dhcp: Duration::from_mins(3), install: Duration::from_mins(30) };

    fn macs() -> Vec<String> {
        vec!["52:54:00:00:00:01".to_owned()]
    }

    #[test]
    fn no_dhcp_is_named_after_the_dhcp_deadline_only() {
        let mut progress = Progress::default();
        progress.observe(Seen::PoweredOn, Duration::ZERO);
        assert_eq!(progress.overdue(Duration::from_secs(179), DEADLINES, &macs()), None);
        let error = progress.overdue(Duration::from_mins(3), DEADLINES, &macs()).expect("overdue");
        assert!(error.starts_with("no DHCP request seen from 52:54:00:00:00:01 within 180 s"), "{error}");
    }

    #[test]
    fn a_stall_names_the_last_step_seen() {
        let mut progress = Progress::default();
        progress.observe(Seen::PoweredOn, Duration::ZERO);
        progress.observe(Seen::DhcpRequest, Duration::from_secs(9));
        progress.observe(Seen::LeaseGiven("10.77.0.11".to_owned()), Duration::from_secs(10));
        progress.observe(Seen::KernelFetched, Duration::from_secs(14));
        // A renewal later does not move the node back.
        progress.observe(Seen::LeaseGiven("10.77.0.11".to_owned()), Duration::from_secs(30));
        assert_eq!(progress.last_seen().as_deref(), Some("kernel fetched at 14 s"));
        assert_eq!(progress.overdue(Duration::from_mins(10), DEADLINES, &macs()), None);
        let error = progress.overdue(Duration::from_mins(30), DEADLINES, &macs()).expect("overdue");
        assert!(error.contains("last seen: kernel fetched at 14 s; the agent never reported"), "{error}");
    }

    #[test]
    fn virtual_media_waits_for_the_agent_not_for_dhcp() {
        let mut progress = Progress::via(Delivery::VirtualMedia);
        progress.observe(Seen::PoweredOn, Duration::ZERO);
        progress.observe(Seen::MediaFetched, Duration::from_secs(2));
        let error = progress.overdue(Duration::from_mins(3), DEADLINES, &macs()).expect("overdue");
        assert!(
            error.starts_with("the agent on the virtual CD never reported within 180 s of power-on (last seen: boot ISO fetched by its BMC at 2 s)"),
            "{error}"
        );
        assert!(!error.contains("DHCP"), "{error}");
        progress.observe(Seen::AgentUp, Duration::from_secs(40));
        assert_eq!(progress.overdue(Duration::from_mins(10), DEADLINES, &macs()), None, "heard from: no DHCP wanted");
    }

    #[test]
    fn ssh_up_is_never_overdue() {
        let mut progress = Progress::default();
        progress.observe(Seen::SshUp, Duration::from_secs(70));
        assert_eq!(progress.overdue(Duration::from_secs(4000), DEADLINES, &macs()), None);
    }
}
