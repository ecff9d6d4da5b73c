//! IP pools: carving equal subnets and addresses out of a CIDR block by arithmetic,
//! so a 32,768-node plan never iterates a pool.
//!
//! Stage: expand. Input: a pool and a count. Output: subnets and addresses, or a
//! [`PoolError`] saying how many were needed and how many fit.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// A pool too small for what is asked of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pool `{pool}` holds {fits} /{prefix} blocks, {needed} are needed")]
pub struct PoolError {
    /// The pool.
    pub pool: Ipv4Net,
    /// Prefix length of each block.
    pub prefix: u8,
    /// Blocks needed.
    pub needed: usize,
    /// Blocks that fit.
    pub fits: u64,
}

/// `count` equal blocks of `/prefix` from a pool.
#[derive(Debug, Clone, Copy)]
pub struct Pool {
    base: u32,
    prefix: u8,
}

impl Pool {
    /// Checks that `count` blocks of `/prefix` fit in `pool`.
    ///
    /// # Errors
    /// [`PoolError`] when they do not.
    pub fn new(pool: Ipv4Net, prefix: u8, count: usize) -> Result<Self, PoolError> {
        let fits = if prefix < pool.prefix_len() { 0 } else { 1_u64 << (prefix - pool.prefix_len()) };
        if (count as u64) > fits {
            return Err(PoolError { pool, prefix, needed: count, fits });
        }
        Ok(Self { base: u32::from(pool.network()), prefix })
    }

    /// Block number `index`.
    #[must_use]
    pub fn subnet(&self, index: usize) -> Ipv4Net {
        let size = 1_u64 << (32 - u32::from(self.prefix));
        let start = u64::from(self.base) + index as u64 * size;
        let start = u32::try_from(start).unwrap_or(u32::MAX);
        Ipv4Net::new(Ipv4Addr::from(start), self.prefix).unwrap_or_default()
    }

    /// The address of block `index` (for /32 pools).
    #[must_use]
    pub fn address(&self, index: usize) -> Ipv4Addr {
        self.subnet(index).network()
    }
}

/// The smallest prefix whose subnet holds `hosts` usable addresses.
#[must_use]
pub fn prefix_for_hosts(hosts: u32) -> u8 {
    let needed = u64::from(hosts) + 2; // network and broadcast
    let bits = 64 - (needed - 1).leading_zeros();
    u8::try_from(32_u32.saturating_sub(bits)).unwrap_or(0).min(30)
}

/// Usable host number `index` (0 = first usable) of `subnet`.
#[must_use]
pub fn nth_host(subnet: Ipv4Net, index: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(subnet.network()).saturating_add(index + 1))
}

/// Number of usable host addresses in `subnet`.
#[must_use]
pub fn usable_hosts(subnet: Ipv4Net) -> u64 {
    (1_u64 << (32 - u32::from(subnet.prefix_len()))).saturating_sub(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_fit_hosts() {
        assert_eq!(prefix_for_hosts(33), 26);
        assert_eq!(prefix_for_hosts(62), 26);
        assert_eq!(prefix_for_hosts(63), 25);
        assert_eq!(prefix_for_hosts(5), 29);
    }

    #[test]
    fn carves_blocks_by_arithmetic_and_refuses_overflow() {
        let pool: Ipv4Net = "10.200.0.0/16".parse().expect("net");
        let blocks = Pool::new(pool, 26, 1024).expect("fits exactly");
        assert_eq!(blocks.subnet(1).to_string(), "10.200.0.64/26");
        assert_eq!(blocks.subnet(1023).to_string(), "10.200.255.192/26");
        let error = Pool::new(pool, 26, 1025).expect_err("one too many");
        assert_eq!(
            error.to_string(),
            "pool `10.200.0.0/16` holds 1024 /26 blocks, 1024 are needed".replace("1024 are", "1025 are")
        );
    }
}
