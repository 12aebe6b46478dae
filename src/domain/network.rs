//! Who a client address stands for, for every count kept per client.

use std::net::IpAddr;

/// The client an address counts as: an IPv6 address counts as its /64, the network one host
/// is given (an address alone would let one host be 2^64 clients); an IPv4 address in IPv6
/// clothing counts as itself.
pub fn network(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
        v4 => v4,
    }
}
