//! Idempotency keys (`Idempotency-Key`): a client names a request it may send again, so a retry
//! gets the first answer instead of a second order. A key belongs to the user who sent it: the
//! same key from two users names two requests.

use super::Millis;
use std::fmt;

/// A client's name for one request, checked once at the edge: 1 to [`IdempotencyKey::MAX_LEN`]
/// printable ASCII characters without spaces (a UUID, a random token).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a key was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "Idempotency-Key must be 1 to {max} printable ASCII characters without spaces",
    max = IdempotencyKey::MAX_LEN
)]
pub struct InvalidIdempotencyKey;

impl IdempotencyKey {
    /// Long enough for any UUID or random token, short enough to keep beside every order.
    pub const MAX_LEN: usize = 64;

    /// How long a key names its request, from the moment its order was made: a retry within
    /// it gets that order; afterwards the key is free again. Retries come within seconds or
    /// minutes; a day also covers a client that retries after coming back online.
    pub const LIFETIME_MS: Millis = 24 * 60 * 60 * 1000;

    /// Parses a key as a client sent it.
    pub fn parse(value: &str) -> Result<Self, InvalidIdempotencyKey> {
        let printable = value.bytes().all(|b| b.is_ascii_graphic());
        if printable && (1..=Self::MAX_LEN).contains(&value.len()) {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidIdempotencyKey)
        }
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether a key used at `used_at` still names its request at `now`.
    pub fn is_live(used_at: Millis, now: Millis) -> bool {
        now - used_at < Self::LIFETIME_MS
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_printable_tokens_up_to_the_limit() {
        for good in [
            "a",
            "8e03978e-40d5-43e8-bc93-6894a57f9324",
            "\"quoted\"",
            "~!@#$%^&*()_+{}|:<>?",
            &"k".repeat(IdempotencyKey::MAX_LEN),
        ] {
            assert_eq!(IdempotencyKey::parse(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn refuses_empty_long_spaced_control_and_non_ascii_keys() {
        for bad in [
            "",
            " ",
            "a b",
            "tab\there",
            "new\nline",
            "nul\0",
            "del\x7f",
            "ключ",
            &"k".repeat(IdempotencyKey::MAX_LEN + 1),
        ] {
            assert_eq!(
                IdempotencyKey::parse(bad),
                Err(InvalidIdempotencyKey),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_key_lives_a_day_from_its_use() {
        let day = IdempotencyKey::LIFETIME_MS;
        assert!(IdempotencyKey::is_live(1_000, 1_000));
        assert!(IdempotencyKey::is_live(1_000, 1_000 + day - 1));
        assert!(!IdempotencyKey::is_live(1_000, 1_000 + day));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// A key is accepted exactly when it is 1 to 64 printable ASCII characters, and is
            /// kept as sent.
            #[test]
            fn a_key_is_kept_as_sent_exactly_when_it_is_printable_ascii(
                text in any::<String>(),
                printable in "[!-~]{1,64}",
            ) {
                prop_assert_eq!(IdempotencyKey::parse(&printable).unwrap().to_string(), printable);
                let valid = (1..=IdempotencyKey::MAX_LEN).contains(&text.len())
                    && text.bytes().all(|b| b.is_ascii_graphic());
                match IdempotencyKey::parse(&text) {
                    Ok(key) => prop_assert!(valid && key.as_str() == text),
                    Err(_) => prop_assert!(!valid),
                }
            }
        }
    }
}
