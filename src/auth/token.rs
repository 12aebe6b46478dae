//! Stateless session tokens: `base64url(user_id:expires_ms:username) . base64url(HMAC-SHA256)`.
//! Checking one is a hash over a few bytes, no database and no lock, so the buy path can
//! authenticate every request. Tokens cannot be revoked before they expire; keep the lifetime
//! modest (config `session_ttl_secs`) and rotate `SECKILL_SECRET` to log everybody out.

use crate::domain::{Millis, UserId, Username};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The identity a valid token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub user_id: UserId,
    pub username: String,
    pub expires_at: Millis,
}

/// Signs and checks session tokens with the server secret.
pub struct TokenSigner {
    mac: HmacSha256,
    ttl_ms: i64,
}

impl TokenSigner {
    /// A signer keyed with `secret`, issuing tokens valid for `ttl_ms`.
    pub fn new(secret: &[u8], ttl_ms: i64) -> Self {
        Self {
            mac: HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length"),
            ttl_ms,
        }
    }

    /// A token for `user`, valid from `now` for the configured lifetime.
    pub fn issue(&self, user: UserId, username: &Username, now: Millis) -> (String, Millis) {
        let expires_at = now + self.ttl_ms;
        let payload = format!("{}:{}:{}", user.0, expires_at, username);
        let mut mac = self.mac.clone();
        mac.update(payload.as_bytes());
        let sig = mac.finalize().into_bytes();
        (
            format!("{}.{}", B64.encode(payload), B64.encode(sig)),
            expires_at,
        )
    }

    /// The claims of a token that is well formed, correctly signed and not expired at `now`.
    pub fn verify(&self, token: &str, now: Millis) -> Option<Claims> {
        let (payload_b64, sig_b64) = token.split_once('.')?;
        let payload = B64.decode(payload_b64).ok()?;
        let sig = B64.decode(sig_b64).ok()?;
        let mut mac = self.mac.clone();
        mac.update(&payload);
        mac.verify_slice(&sig).ok()?;
        let payload = std::str::from_utf8(&payload).ok()?;
        let mut parts = payload.splitn(3, ':');
        let user_id = parts.next()?.parse().ok()?;
        let expires_at: Millis = parts.next()?.parse().ok()?;
        let username = parts.next()?.to_owned();
        (now < expires_at).then_some(Claims {
            user_id: UserId(user_id),
            username,
            expires_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> TokenSigner {
        TokenSigner::new(b"0123456789abcdef0123456789abcdef", 1_000)
    }

    #[test]
    fn a_fresh_token_proves_its_user() {
        let name = Username::parse("alice").unwrap();
        let (token, exp) = signer().issue(UserId(7), &name, 5_000);
        let claims = signer().verify(&token, 5_500).unwrap();
        assert_eq!(claims.user_id, UserId(7));
        assert_eq!(claims.username, "alice");
        assert_eq!(claims.expires_at, exp);
    }

    #[test]
    fn expired_forged_or_garbled_tokens_prove_nothing() {
        let name = Username::parse("alice").unwrap();
        let (token, _) = signer().issue(UserId(7), &name, 5_000);
        assert!(signer().verify(&token, 6_000).is_none(), "expired");
        let other = TokenSigner::new(b"another secret entirely, 32 bytes", 1_000);
        assert!(other.verify(&token, 5_500).is_none(), "wrong key");
        let (payload, sig) = token.split_once('.').unwrap();
        let forged_payload = B64.encode("1:99999999:alice");
        assert!(
            signer()
                .verify(&format!("{forged_payload}.{sig}"), 5_500)
                .is_none()
        );
        for junk in ["", ".", "abc", &format!("{payload}."), "a.b.c"] {
            assert!(signer().verify(junk, 5_500).is_none(), "{junk}");
        }
    }
}
