//! Shoppers. A user is an account with a password, never an IP address or a client header.

use super::Refusal;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A user's database id, the identity carried in session tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UserId(pub i64);

/// A login name: 3–32 characters of ASCII letters, digits, `_`, `.` or `-`, so it is safe
/// to show anywhere and cannot impersonate another name with look-alike characters. Names are
/// the same whatever their case (`Alice` is `alice`): kept in lower case, so no one registers
/// `ALICE` beside `alice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Username(String);

/// Why a username was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a username has 3 to 32 characters: letters, digits, '_', '.' or '-'")]
pub struct InvalidUsername;

impl Username {
    /// Parses a name from the edge of the system.
    pub fn parse(raw: &str) -> Result<Self, InvalidUsername> {
        let ok_len = (3..=32).contains(&raw.len());
        let ok_chars = raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if ok_len && ok_chars {
            Ok(Self(raw.to_ascii_lowercase()))
        } else {
            Err(InvalidUsername)
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Username {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The beginning of the names an operator looks for: trimmed and in lower case, as names are
/// kept, and no longer than a name; empty finds every name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePrefix(String);

impl NamePrefix {
    /// The longest prefix worth searching for: a username's length.
    pub const MAX_LEN: usize = 32;

    /// Parses an operator's search (the field `name`), refused as `invalid_name`.
    pub fn parse(raw: &str) -> Result<Self, Refusal> {
        let name = raw.trim().to_ascii_lowercase();
        if name.len() > Self::MAX_LEN {
            return Err(Refusal::new(
                "invalid_name",
                format!("a username has at most {} characters", Self::MAX_LEN),
            ));
        }
        Ok(Self(name))
    }

    /// The prefix, or `None` when it is empty and finds every name.
    pub fn get(&self) -> Option<&str> {
        Some(self.0.as_str()).filter(|name| !name.is_empty())
    }
}

/// A new password: 8–128 characters. The upper bound keeps hashing cost bounded.
pub struct Password(String);

/// Why a password was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a password has 8 to 128 characters")]
pub struct WeakPassword;

impl Password {
    /// Parses a password chosen at registration.
    pub fn parse(raw: &str) -> Result<Self, WeakPassword> {
        if (8..=128).contains(&raw.chars().count()) {
            Ok(Self(raw.to_owned()))
        } else {
            Err(WeakPassword)
        }
    }

    /// The secret itself, only for hashing.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Never print a password, even in debug logs.
impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_are_short_plain_ascii() {
        assert!(Username::parse("alice_01").is_ok());
        assert_eq!(Username::parse("Alice.B").unwrap().as_str(), "alice.b");
        for bad in ["al", "", "a b c", "ålice", "<script>", &"x".repeat(33)] {
            assert_eq!(Username::parse(bad), Err(InvalidUsername), "{bad}");
        }
    }

    #[test]
    fn a_name_prefix_is_a_trimmed_lower_case_beginning_of_a_name() {
        assert_eq!(NamePrefix::parse("  Tro ").unwrap().get(), Some("tro"));
        assert_eq!(NamePrefix::parse("   ").unwrap().get(), None);
        assert!(NamePrefix::parse(&"x".repeat(32)).is_ok());
        let refusal = NamePrefix::parse(&"x".repeat(33)).unwrap_err();
        assert_eq!(refusal.code, "invalid_name");
        assert_eq!(refusal.message, "a username has at most 32 characters");
    }

    #[test]
    fn passwords_have_bounded_length() {
        assert!(Password::parse("12345678").is_ok());
        assert!(Password::parse("1234567").is_err());
        assert!(Password::parse(&"x".repeat(129)).is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn name_rules(raw: &str) -> bool {
            (3..=32).contains(&raw.len())
                && raw
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// A name is accepted exactly when it follows the rules, kept in lower case, and
            /// reads back as itself.
            #[test]
            fn names_follow_the_rules_and_read_back_as_themselves(
                raw in any::<String>(),
                shaped in "[A-Za-z0-9_.\\-]{0,34}",
            ) {
                for raw in [raw, shaped] {
                    match Username::parse(&raw) {
                        Ok(name) => {
                            prop_assert!(name_rules(&raw));
                            prop_assert_eq!(name.as_str(), raw.to_ascii_lowercase());
                            prop_assert_eq!(Username::parse(name.as_str()), Ok(name.clone()));
                        }
                        Err(_) => prop_assert!(!name_rules(&raw)),
                    }
                }
            }

            /// A password is 8 to 128 characters (not bytes) of anything, kept as typed.
            #[test]
            fn passwords_are_eight_to_a_hundred_and_twenty_eight_characters(raw in ".{0,140}") {
                let chars = raw.chars().count();
                match Password::parse(&raw) {
                    Ok(password) => prop_assert!((8..=128).contains(&chars) && password.expose() == raw),
                    Err(_) => prop_assert!(!(8..=128).contains(&chars)),
                }
            }
        }
    }
}
