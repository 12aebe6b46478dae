//! Sessions ended before their tokens expire. A token proves itself without I/O, so signing
//! out cannot take it back; instead every server keeps in memory the ids of the sessions that
//! were ended and would still be valid, learns new ones from the database once a second (the
//! server that ended one knows at once), and refuses their tokens. The set holds at most the
//! sessions ended within one token lifetime, and each needed a sign-in (a password hash, of
//! which a server makes a bounded number a second) or the admin token.

use crate::domain::Millis;
use std::collections::HashMap;
use std::fmt;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// A session's id: 128 random bits, carried in its token and written as 32 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(u128);

impl SessionId {
    /// A fresh, unguessable id.
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// Reads the 32 hex digits of [`Display`](fmt::Display); anything else is no id.
    pub fn parse(hex: &str) -> Option<Self> {
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u128::from_str_radix(hex, 16).ok().map(Self))
            .flatten()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The ended sessions this process knows of, each until its token would have expired.
#[derive(Default)]
pub struct RevokedSessions {
    ended: RwLock<HashMap<SessionId, Millis>>,
    /// Whether any is held: most of the time none is, and checking a token then takes no lock.
    any: AtomicBool,
}

impl RevokedSessions {
    /// Whether the session was ended.
    pub fn contains(&self, id: SessionId) -> bool {
        self.any.load(Ordering::Acquire) && self.read().contains_key(&id)
    }

    /// Notes an ended session, valid until `expires_at` otherwise.
    pub fn insert(&self, id: SessionId, expires_at: Millis) {
        let mut ended = self.ended.write().unwrap_or_else(|e| e.into_inner());
        ended.insert(id, expires_at);
        self.any.store(true, Ordering::Release);
    }

    /// Forgets the sessions whose tokens have expired by `now`: they prove nothing anyway.
    pub fn forget_expired(&self, now: Millis) {
        let mut ended = self.ended.write().unwrap_or_else(|e| e.into_inner());
        ended.retain(|_, expires_at| *expires_at > now);
        self.any.store(!ended.is_empty(), Ordering::Release);
    }

    /// How many ended sessions are held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<SessionId, Millis>> {
        self.ended.read().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_their_hex_and_nothing_else_parses() {
        let id = SessionId::random();
        assert_eq!(SessionId::parse(&id.to_string()), Some(id));
        assert_eq!(SessionId::parse(&format!("{:032x}", 7u128)).unwrap().0, 7);
        for junk in [
            "",
            "7",
            &"0".repeat(31),
            &"0".repeat(33),
            &"g".repeat(32),
            "+0000000000000000000000000000007",
        ] {
            assert_eq!(SessionId::parse(junk), None, "{junk}");
        }
    }

    #[test]
    fn an_ended_session_is_refused_until_its_token_expires() {
        let revoked = RevokedSessions::default();
        let (ended, other) = (SessionId::random(), SessionId::random());
        assert!(!revoked.contains(ended));
        revoked.insert(ended, 2_000);
        assert!(revoked.contains(ended));
        assert!(!revoked.contains(other));
        revoked.forget_expired(1_999);
        assert!(revoked.contains(ended), "not expired yet");
        revoked.forget_expired(2_000);
        assert!(!revoked.contains(ended));
        assert!(revoked.is_empty());
    }
}
