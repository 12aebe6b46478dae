//! Sessions ended before their tokens expire. A token proves itself without I/O, so signing
//! out cannot take it back; instead every server keeps in memory the ids of the sessions that
//! were ended and would still be valid, learns new ones from the database once a second (the
//! server that ended one knows at once), and refuses their tokens. The set holds at most the
//! sessions ended within one token lifetime, and each needed a sign-in (a password hash, of
//! which a server makes a bounded number a second) or the admin token.
//!
//! Disabling an account ends all of its sessions the same way, as one cut-off per account:
//! its tokens issued at or before the cut-off are refused, until the last of them would have
//! expired. Re-enabling the account does not lift it: the owner signs in again.
//!
//! What a session holds open past its request (the console's dashboard stream) watches
//! [`RevokedSessions::news`] and ends as soon as this process learns that its session ended.

use crate::domain::{Millis, UserId};
use std::collections::HashMap;
use std::fmt;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

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
        if hex.len() != 32 {
            return None;
        }
        hex.bytes()
            .try_fold(0u128, |id, digit| {
                Some(id << 4 | u128::from(char::from(digit).to_digit(16)?))
            })
            .map(Self)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// An account's cut-off: tokens issued at or before `at` are refused until `expires_at`, when
/// the last of them expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cutoff {
    at: Millis,
    expires_at: Millis,
}

/// The ended sessions this process knows of, each until its token would have expired, and the
/// cut-offs of disabled accounts.
#[derive(Default)]
pub struct RevokedSessions {
    ended: RwLock<HashMap<SessionId, Millis>>,
    /// Whether any is held: most of the time none is, and checking a token then takes no lock.
    any: AtomicBool,
    cutoffs: RwLock<HashMap<UserId, Cutoff>>,
    /// Whether any cut-off is held, as `any` is for `ended`.
    any_cutoff: AtomicBool,
    /// Marked changed whenever a session is newly ended or a cut-off newly refuses more: a
    /// response held open for a session learns at once that it must end, rather than asking
    /// on a timer. Only news is sent: the sync re-reads known entries every second.
    news: watch::Sender<()>,
}

impl RevokedSessions {
    /// Whether the session was ended.
    pub fn contains(&self, id: SessionId) -> bool {
        self.any.load(Ordering::Acquire) && self.read().contains_key(&id)
    }

    /// Whether a token of `user` for `session`, issued at `issued_at`, is refused: its session
    /// was ended, or its account was disabled after it was issued.
    pub fn refuses(&self, session: SessionId, user: UserId, issued_at: Millis) -> bool {
        self.contains(session)
            || (self.any_cutoff.load(Ordering::Acquire)
                && self
                    .read_cutoffs()
                    .get(&user)
                    .is_some_and(|cutoff| issued_at <= cutoff.at))
    }

    /// Notes that `user`'s tokens issued at or before `at` are refused, until `expires_at`.
    /// A later cut-off of the same account replaces an earlier one, never the reverse.
    pub fn cut_off(&self, user: UserId, at: Millis, expires_at: Millis) {
        let mut cutoffs = self.cutoffs.write().unwrap_or_else(|e| e.into_inner());
        let new = Cutoff { at, expires_at };
        let held = cutoffs.get(&user).copied();
        let kept = held.map_or(new, |held| held.later(new));
        cutoffs.insert(user, kept);
        self.any_cutoff.store(true, Ordering::Release);
        drop(cutoffs);
        if held != Some(kept) {
            self.news.send_replace(());
        }
    }

    /// Notes an ended session, valid until `expires_at` otherwise.
    pub fn insert(&self, id: SessionId, expires_at: Millis) {
        let mut ended = self.ended.write().unwrap_or_else(|e| e.into_inner());
        let known = ended.insert(id, expires_at).is_some();
        self.any.store(true, Ordering::Release);
        drop(ended);
        if !known {
            self.news.send_replace(());
        }
    }

    /// A receiver marked changed whenever a session is newly ended or an account newly cut
    /// off, for whoever holds something open for a session: it then checks whether its own
    /// session is still on.
    pub fn news(&self) -> watch::Receiver<()> {
        self.news.subscribe()
    }

    /// Forgets the sessions and cut-offs whose tokens have expired by `now`: they prove
    /// nothing anyway.
    pub fn forget_expired(&self, now: Millis) {
        let mut ended = self.ended.write().unwrap_or_else(|e| e.into_inner());
        ended.retain(|_, expires_at| *expires_at > now);
        self.any.store(!ended.is_empty(), Ordering::Release);
        drop(ended);
        let mut cutoffs = self.cutoffs.write().unwrap_or_else(|e| e.into_inner());
        cutoffs.retain(|_, cutoff| cutoff.expires_at > now);
        self.any_cutoff
            .store(!cutoffs.is_empty(), Ordering::Release);
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

    fn read_cutoffs(&self) -> std::sync::RwLockReadGuard<'_, HashMap<UserId, Cutoff>> {
        self.cutoffs.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Cutoff {
    /// The later of two cut-offs of one account, which refuses every token either refuses.
    fn later(self, other: Self) -> Self {
        if other.at > self.at { other } else { self }
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

    #[test]
    fn a_cut_off_refuses_the_accounts_tokens_issued_until_then_and_no_others() {
        let revoked = RevokedSessions::default();
        let (alice, bob) = (UserId(1), UserId(2));
        let session = SessionId::random();
        assert!(!revoked.refuses(session, alice, 1_000));
        revoked.cut_off(alice, 1_000, 5_000);
        assert!(revoked.refuses(session, alice, 999));
        assert!(
            revoked.refuses(session, alice, 1_000),
            "issued in the same millisecond"
        );
        assert!(
            !revoked.refuses(session, alice, 1_001),
            "signed in again after"
        );
        assert!(!revoked.refuses(session, bob, 999), "another account");
        revoked.cut_off(alice, 500, 4_500);
        assert!(
            revoked.refuses(session, alice, 999),
            "an earlier cut-off does not shrink it"
        );
        revoked.cut_off(alice, 2_000, 6_000);
        assert!(
            revoked.refuses(session, alice, 1_500),
            "a later one widens it"
        );
        revoked.forget_expired(5_999);
        assert!(revoked.refuses(session, alice, 1_500));
        revoked.forget_expired(6_000);
        assert!(!revoked.refuses(session, alice, 1_500));
        revoked.insert(session, 9_000);
        assert!(
            revoked.refuses(session, bob, 8_000),
            "an ended session is refused too"
        );
    }

    #[test]
    fn news_tells_of_newly_ended_sessions_and_wider_cut_offs_only() {
        let revoked = RevokedSessions::default();
        let mut news = revoked.news();
        let mut told = || {
            let changed = news.has_changed().unwrap();
            news.borrow_and_update();
            changed
        };
        assert!(!told());
        let session = SessionId::random();
        revoked.insert(session, 2_000);
        assert!(told());
        revoked.insert(session, 2_000);
        assert!(!told(), "read again by the sync");
        revoked.cut_off(UserId(1), 1_000, 5_000);
        assert!(told());
        revoked.cut_off(UserId(1), 500, 4_500);
        assert!(!told(), "refuses nothing more");
        revoked.cut_off(UserId(1), 2_000, 6_000);
        assert!(told());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Every id reads back from its hex, and a text is an id exactly when it is 32 hex
            /// digits, the same id whatever their case.
            #[test]
            fn ids_round_trip_and_only_32_hex_digits_parse(id in any::<u128>(), text in any::<String>(), hex in "[0-9a-fA-F]{32}") {
                prop_assert_eq!(SessionId::parse(&SessionId(id).to_string()), Some(SessionId(id)));
                let parsed = SessionId::parse(&hex).map(|id| id.to_string());
                prop_assert_eq!(parsed, Some(hex.to_ascii_lowercase()));
                let is_hex = text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit());
                prop_assert_eq!(SessionId::parse(&text).is_some(), is_hex);
            }
        }
    }
}
