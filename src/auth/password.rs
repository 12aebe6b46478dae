//! Argon2id password hashes. Hashing costs tens of milliseconds of CPU by design, so it runs
//! on the blocking pool, never on the threads that answer buy requests.

use crate::domain::Password;
use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use std::sync::OnceLock;

/// Hashes a new password into a self-describing PHC string (algorithm, parameters, salt).
pub async fn hash(password: Password) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.expose().as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
    })
    .await?
}

/// Checks a password attempt against a stored hash; a malformed hash counts as a mismatch.
/// With no stored hash (unknown username) it checks against a throwaway hash, so "no such
/// user" and "wrong password" cost the same time and cannot be told apart.
pub async fn verify(attempt: String, stored_hash: Option<String>) -> anyhow::Result<bool> {
    Ok(tokio::task::spawn_blocking(move || {
        let known = stored_hash.is_some();
        let stored = stored_hash.unwrap_or_else(|| dummy_hash().to_owned());
        let matches = PasswordHash::new(&stored)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(attempt.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false);
        known && matches
    })
    .await?)
}

fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(b"no user has this password", &salt)
            .map(|h| h.to_string())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_and_nothing_else() {
        let h = hash(Password::parse("correct horse").unwrap())
            .await
            .unwrap();
        assert!(
            verify("correct horse".into(), Some(h.clone()))
                .await
                .unwrap()
        );
        assert!(!verify("wrong horse!".into(), Some(h)).await.unwrap());
        assert!(
            !verify("no user has this password".into(), None)
                .await
                .unwrap()
        );
    }
}
