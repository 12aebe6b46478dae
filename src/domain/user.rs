//! Shoppers. A user is an account with a password, never an IP address or a client header.

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
    fn passwords_have_bounded_length() {
        assert!(Password::parse("12345678").is_ok());
        assert!(Password::parse("1234567").is_err());
        assert!(Password::parse(&"x".repeat(129)).is_err());
    }
}
