//! Request throttles: how many requests one key (a user, an address, a sale event, everybody)
//! may make in a window of time. [`Limiter`] is the trait the HTTP layer counts through; `local`
//! counts in this process (embedded mode) and `redis` for every server sharing a Redis (cluster
//! mode), so N servers do not allow N times the rate.

pub mod local;
pub mod redis;

use crate::domain::network;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// At most `limit` requests per `window` for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u32,
    window: Duration,
}

impl Quota {
    /// `limit` requests in any `window` (both at least 1: 1 request, 1 ms).
    pub fn per_window(limit: u32, window: Duration) -> Self {
        Self {
            limit: limit.max(1),
            window: window.max(Duration::from_millis(1)),
        }
    }

    /// `burst` requests at once, then `per_sec` a second: as a window, `burst` requests (at least
    /// `per_sec`) in the time `per_sec` takes to earn them back.
    pub fn per_sec(per_sec: u32, burst: u32) -> Self {
        let per_sec = per_sec.max(1);
        let limit = burst.max(per_sec);
        let nanos = u64::from(limit) * 1_000_000_000 / u64::from(per_sec);
        Self::per_window(limit, Duration::from_nanos(nanos))
    }

    /// Requests allowed in one window.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.window
    }
}

/// Whose requests one count is of: a limit's scope and an id within it, e.g. user 42.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    scope: &'static str,
    id: Id,
}

impl Key {
    /// The key of `id` within `scope`. Scopes keep limits apart that count the same ids; one
    /// scope has one quota.
    pub fn new(scope: &'static str, id: impl Into<Id>) -> Self {
        Self {
            scope,
            id: id.into(),
        }
    }

    /// The limit it counts for.
    pub fn scope(&self) -> &'static str {
        self.scope
    }

    /// Whose requests it counts.
    pub fn id(&self) -> &Id {
        &self.id
    }
}

/// What the maps by [`Id`] hash with: `foldhash`, seeded at random for each map (ids come from
/// outside, so a client cannot choose ones that collide), at a fraction of the cost of the
/// standard library's SipHash; every buy looks up several ids.
pub type IdHasher = foldhash::fast::RandomState;

/// A map by [`Id`], hashed with [`IdHasher`].
pub type IdMap<V> = std::collections::HashMap<Id, V, IdHasher>;

/// Whose requests a key counts: numbers and addresses are kept as they are, so counting a
/// user or an address makes no text on the buy path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Id {
    Number(i64),
    /// A product sold outside any sale event, which is a sale of its own: written `p` and its
    /// id, apart from the events' numbers.
    Product(i64),
    Address(IpAddr),
    Name(Box<str>),
    /// A name as used from one address (see [`network`](crate::domain::network)): one account's sign-ins from one
    /// client, so a stranger's count of that account is not its owner's.
    NameAt(Box<str>, IpAddr),
    /// The ids a process had no room left to count one by one, counted together (see
    /// `local.rs`): a flood of made-up names or addresses shares one quota.
    Overflow,
}

impl From<i64> for Id {
    fn from(number: i64) -> Self {
        Self::Number(number)
    }
}

impl From<IpAddr> for Id {
    /// The address's [`network`](crate::domain::network).
    fn from(address: IpAddr) -> Self {
        Self::Address(network(address))
    }
}

impl From<(&str, IpAddr)> for Id {
    /// The name from the address's [`network`](crate::domain::network).
    fn from((name, address): (&str, IpAddr)) -> Self {
        Self::NameAt(name.into(), network(address))
    }
}

impl From<&str> for Id {
    fn from(name: &str) -> Self {
        Self::Name(name.into())
    }
}

impl From<String> for Id {
    fn from(name: String) -> Self {
        Self::Name(name.into())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(number) => number.fmt(f),
            Self::Product(id) => write!(f, "p{id}"),
            Self::Address(address) => address.fmt(f),
            Self::Name(name) => name.fmt(f),
            Self::NameAt(name, address) => write!(f, "{name}@{address}"),
            Self::Overflow => f.write_str("(others)"),
        }
    }
}

/// One request counted against one key's quota.
#[derive(Debug, Clone)]
pub struct Hit {
    pub key: Key,
    pub quota: Quota,
}

/// A request over a limit: the first hit that refused it, and how long until it would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The refusing hit's place in the list given to [`Limiter::hit`].
    pub hit: usize,
    pub retry_after: Duration,
}

/// Counts requests against quotas. Synchronous: it counts in this process's memory, whatever
/// it shares with other servers off the request path, so a request's count costs no future.
pub trait Limiter: Send + Sync + 'static {
    /// Counts one request against each of `hits`, in order. The first hit over its quota
    /// refuses the request and ends the count: the hits before it stay counted, the refused one
    /// and those after it are not, so a refused request costs no later limit anything and a
    /// client that waits the `retry_after` gets through.
    fn hit(&self, hits: &[Hit]) -> Result<(), Refused>;

    /// Counts one request as [`Limiter::hit`] does, in this process only: for a request this
    /// process answers by itself, which costs the other servers nothing.
    fn hit_here(&self, hits: &[Hit]) -> Result<(), Refused>;

    /// Lets go of keys idle long enough to be full again, so memory stays bounded by recent
    /// clients.
    fn forget_idle(&self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_with_a_burst_is_the_burst_in_the_time_the_rate_earns_it_back() {
        let quota = Quota::per_sec(5, 10);
        assert_eq!(
            (quota.limit(), quota.window()),
            (10, Duration::from_secs(2))
        );
        let no_burst = Quota::per_sec(200, 0);
        assert_eq!(
            (no_burst.limit(), no_burst.window()),
            (200, Duration::from_secs(1))
        );
        let zero = Quota::per_window(0, Duration::ZERO);
        assert_eq!((zero.limit(), zero.window()), (1, Duration::from_millis(1)));
    }

    #[test]
    fn a_product_without_an_event_is_keyed_apart_from_the_event_of_its_number() {
        assert_eq!(Id::Product(7).to_string(), "p7");
        assert_ne!(Id::Product(7), Id::Number(7));
    }

    #[test]
    fn an_ipv6_host_counts_as_its_network_and_a_mapped_ipv4_as_itself() {
        let id = |text: &str| Id::from(text.parse::<IpAddr>().unwrap());
        assert_eq!(
            id("2001:db8:1:2::1"),
            id("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(id("2001:db8:1:2::1"), id("2001:db8:1:3::1"));
        assert_eq!(id("::ffff:192.0.2.7"), id("192.0.2.7"));
        assert_ne!(id("192.0.2.7"), id("192.0.2.8"));
        let at = |text: &str| Id::from(("bob", text.parse::<IpAddr>().unwrap()));
        assert_eq!(at("2001:db8:1:2::1"), at("2001:db8:1:2::9"));
        assert_ne!(at("192.0.2.7"), at("192.0.2.8"));
        assert_eq!(at("2001:db8:1:2::1").to_string(), "bob@2001:db8:1:2::");
    }
}
