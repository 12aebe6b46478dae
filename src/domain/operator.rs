//! Who made an operator's change, as the audit log names them. Every door an operator comes
//! through (the console, the admin API) hands the sale service one of these with the change,
//! so the change is recorded with its author whichever door it came through.

use sha2::{Digest, Sha256};
use std::fmt;

/// The author of an operator's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operator {
    /// Signed in to the console with the admin token; named `admin`.
    Console,
    /// Through the admin API with a bearer token; named `token` and the token's fingerprint,
    /// which tells tokens apart across a rotation without revealing one.
    Token {
        /// The first eight hex digits of the token's SHA-256.
        fingerprint: String,
    },
}

impl Operator {
    /// The operator who presented the admin token `secret` to the admin API.
    pub fn with_token(secret: &str) -> Self {
        let digest = Sha256::digest(secret.as_bytes());
        let fingerprint = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        Self::Token { fingerprint }
    }
}

/// The audit log's spelling: `admin`, or `token 1a2b3c4d`.
impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Console => f.write_str("admin"),
            Self::Token { fingerprint } => write!(f, "token {fingerprint}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_named_by_its_fingerprint_never_itself() {
        let named = Operator::with_token("secret-admin-token").to_string();
        assert!(named.starts_with("token ") && named.len() == 14, "{named}");
        assert!(!named.contains("secret"));
        assert_eq!(
            named,
            Operator::with_token("secret-admin-token").to_string()
        );
        assert_ne!(named, Operator::with_token("another-token").to_string());
        assert_eq!(Operator::Console.to_string(), "admin");
    }
}
