//! Bare metal: from a blank server behind a BMC to a node deploy can configure.
//!
//! Stage: inspect + provision (driven by `deploy`, before the API and SSH stages).
//! Input: the expanded model (node groups, the blueprint's `os` section), the
//! inventory's BMCs and provisioning network. Output: per node, hardware checked
//! against the blueprint, an OS written to the chosen disk and booted, SSH reachable
//! with the host key toolkit generated — or the step it stopped at.
//!
//! - [`verify`]: the BMC's inventory against the blueprint (pure).
//! - [`image`]: the OS image, built from Debian packages, cached by content hash.
//! - [`agent`]: the RAM-disk deploy agent that writes the image to the chosen disk.
//! - [`overlay`]: the per-node files laid over the image (hostname, network, keys).
//! - [`disk`]: which disk receives the image (root device hints, never "the first disk").
//! - [`server`]: the HTTP server iPXE and the agent talk to; [`progress`]: what was seen of each node.
//! - [`host_keys`]: each node's SSH host key, generated and pinned before its first boot.
//! - [`dhcp`]: dnsmasq as DHCP/proxy-DHCP + TFTP for network boot, and its log.
//! - [`error`]: why a run stops as a whole, and the lock one run holds.
//! - [`service`]: the server and dnsmasq run together, here or on another host over SSH.
//! - [`iso`]: the per-node boot ISO a BMC inserts as virtual media (no DHCP needed).

pub mod agent;
pub mod dhcp;
pub mod disk;
pub mod error;
pub mod flow;
pub mod host_keys;
pub mod image;
pub mod iso;
pub mod overlay;
pub mod plan;
pub mod progress;
pub mod server;
pub mod service;
pub mod verify;
