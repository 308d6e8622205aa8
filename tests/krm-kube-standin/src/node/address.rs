//! Pod addresses: one loopback address 127.0.0.N per pod, held with a lock file so that no two
//! stand-ins (even in different processes) use one at the same time.

use crate::util;
use std::net::Ipv4Addr;

/// A pod IP held for as long as this value lives.
#[derive(Debug)]
pub struct PodIp {
    octet: u8,
    _lock: std::fs::File,
}

impl PodIp {
    /// The address.
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, self.octet)
    }
}

/// Allocates the lowest free 127.0.0.N (N = 10..=254), held by an `flock` on a lock file (see
/// [`util::lock_address`]) across threads and processes.
pub fn allocate_ip() -> Option<PodIp> {
    (10..=254u8).find_map(|octet| {
        util::lock_address(Ipv4Addr::new(127, 0, 0, octet)).map(|f| PodIp { octet, _lock: f })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_exclusive_and_freed() {
        let a = allocate_ip().unwrap();
        let b = allocate_ip().unwrap();
        assert_ne!(a.addr(), b.addr());
        assert!(a.addr().octets()[3] >= 10);
        drop(a);
        let c = allocate_ip().unwrap();
        assert_ne!(c.addr(), b.addr());
    }
}
