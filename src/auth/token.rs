//! Session tokens: `base64url(user_id:expires_ms:session_id:username) . base64url(HMAC-SHA256)`.
//! Checking one is a hash over a few bytes, no database, so the buy path can authenticate
//! every request. Signing out ends the token's session, and disabling its account ends every
//! session of the account, through [`RevokedSessions`](super::revocation::RevokedSessions),
//! which the caller checks; rotating
//! `SECKILL_SECRET` ends every session at once.

use super::revocation::SessionId;
use crate::domain::{Millis, UserId, Username};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// Room for the longest payload a signer issues: two numbers of up to 20 characters, a session
/// id of 32, a name of up to 32 and three colons (107 bytes). A longer one was not issued here
/// and fails to decode.
pub(super) const PAYLOAD_ROOM: usize = 128;
/// Room for a signature: 32 bytes, and slack for a garbled one to fail on its length instead.
const SIGNATURE_ROOM: usize = 48;

/// `payload` signed with `mac`: `base64url(payload) . base64url(HMAC-SHA256)`.
pub(super) fn seal(mac: &HmacSha256, payload: &str) -> String {
    let mut mac = mac.clone();
    mac.update(payload.as_bytes());
    let sig = mac.finalize().into_bytes();
    format!("{}.{}", B64.encode(payload), B64.encode(sig))
}

/// The payload of a token [`seal`]ed with `mac`, decoded into `room`; `None` for a token that
/// is garbled, longer than `room` or not signed with `mac`. Decoded on the stack, not into
/// fresh `Vec`s: every buy checks a token.
pub(super) fn open<'r>(
    mac: &HmacSha256,
    token: &str,
    room: &'r mut [u8; PAYLOAD_ROOM],
) -> Option<&'r str> {
    let (payload_b64, sig_b64) = token.split_once('.')?;
    let mut sig = [0u8; SIGNATURE_ROOM];
    let payload_len = B64.decode_slice(payload_b64, &mut room[..]).ok()?;
    let sig_len = B64.decode_slice(sig_b64, &mut sig).ok()?;
    let room: &'r [u8] = room;
    let payload = &room[..payload_len];
    let mut mac = mac.clone();
    mac.update(payload);
    mac.verify_slice(&sig[..sig_len]).ok()?;
    std::str::from_utf8(payload).ok()
}

/// The identity a valid token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub user_id: UserId,
    pub username: String,
    pub expires_at: Millis,
    /// When the token was issued: its expiry less the tokens' lifetime. An account disabled
    /// since then refuses it.
    pub issued_at: Millis,
    /// The session the token belongs to, to end it on sign-out.
    pub session: SessionId,
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

    /// How long a token is valid from its issue.
    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    /// A token for a new session of `user`, valid from `now` for the configured lifetime.
    pub fn issue(&self, user: UserId, username: &Username, now: Millis) -> (String, Millis) {
        let expires_at = now + self.ttl_ms;
        let session = SessionId::random();
        let payload = format!("{}:{expires_at}:{session}:{username}", user.0);
        (seal(&self.mac, &payload), expires_at)
    }

    /// The token a session's page forms carry (against forged posts): the HMAC of the session
    /// id, so only pages rendered for that session have it.
    pub fn form_token(&self, session: SessionId) -> String {
        let mut mac = self.mac.clone();
        mac.update(format!("form:{session}").as_bytes());
        B64.encode(mac.finalize().into_bytes())
    }

    /// Whether `presented` is the form token of `session`, compared in constant time.
    pub fn accepts_form_token(&self, session: SessionId, presented: &str) -> bool {
        let Ok(presented) = B64.decode(presented) else {
            return false;
        };
        let mut mac = self.mac.clone();
        mac.update(format!("form:{session}").as_bytes());
        mac.verify_slice(&presented).is_ok()
    }

    /// The claims of a token that is well formed, correctly signed and not expired at `now`.
    pub fn verify(&self, token: &str, now: Millis) -> Option<Claims> {
        let mut room = [0u8; PAYLOAD_ROOM];
        let payload = open(&self.mac, token, &mut room)?;
        let mut parts = payload.splitn(4, ':');
        let user_id = parts.next()?.parse().ok()?;
        let expires_at: Millis = parts.next()?.parse().ok()?;
        let session = SessionId::parse(parts.next()?)?;
        let username = parts.next()?.to_owned();
        (now < expires_at).then_some(Claims {
            user_id: UserId(user_id),
            username,
            expires_at,
            issued_at: expires_at.saturating_sub(self.ttl_ms),
            session,
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
        assert_eq!(claims.issued_at, 5_000);
        let (again, _) = signer().issue(UserId(7), &name, 5_000);
        let second = signer().verify(&again, 5_500).unwrap();
        assert_ne!(
            claims.session, second.session,
            "each sign-in is its own session"
        );
    }

    #[test]
    fn the_longest_token_issued_still_verifies() {
        let name = Username::parse(&"n".repeat(32)).unwrap();
        let now = i64::MAX - 1_000;
        let (token, _) = signer().issue(UserId(i64::MIN), &name, now);
        assert_eq!(
            signer().verify(&token, now).unwrap().user_id,
            UserId(i64::MIN)
        );
    }

    #[test]
    fn a_form_token_is_its_sessions_only() {
        let (one, other) = (SessionId::random(), SessionId::random());
        let token = signer().form_token(one);
        assert!(signer().accepts_form_token(one, &token));
        assert!(!signer().accepts_form_token(other, &token));
        assert!(!signer().accepts_form_token(one, ""));
        assert!(!signer().accepts_form_token(one, "not base64!"));
    }

    #[test]
    fn expired_forged_or_garbled_tokens_prove_nothing() {
        let name = Username::parse("alice").unwrap();
        let (token, _) = signer().issue(UserId(7), &name, 5_000);
        assert!(signer().verify(&token, 6_000).is_none(), "expired");
        let other = TokenSigner::new(b"another secret entirely, 32 bytes", 1_000);
        assert!(other.verify(&token, 5_500).is_none(), "wrong key");
        let (payload, sig) = token.split_once('.').unwrap();
        let forged_payload = B64.encode(format!("1:99999999:{:032x}:alice", 1));
        assert!(
            signer()
                .verify(&format!("{forged_payload}.{sig}"), 5_500)
                .is_none()
        );
        let long = B64.encode(format!("1:99999999:{:032x}:{}", 1, "n".repeat(90)));
        for junk in [
            "",
            ".",
            "abc",
            &format!("{payload}."),
            "a.b.c",
            &format!("{long}.{sig}"),
        ] {
            assert!(signer().verify(junk, 5_500).is_none(), "{junk}");
        }
    }

    mod properties {
        use super::*;
        use crate::domain::edits::edit;
        use proptest::prelude::*;

        fn alice() -> Username {
            Username::parse("alice").unwrap()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Whatever the user, name and time, a token proves what it was issued for until,
            /// and not at, its expiry.
            #[test]
            fn an_issued_token_proves_exactly_its_claims(
                user in any::<i64>(),
                name in "[a-zA-Z0-9_.-]{3,32}",
                now in 0..i64::MAX / 2,
            ) {
                let name = Username::parse(&name).unwrap();
                let (token, expires_at) = signer().issue(UserId(user), &name, now);
                let claims = signer().verify(&token, now).unwrap();
                prop_assert_eq!(claims.user_id, UserId(user));
                prop_assert_eq!(claims.username.as_str(), name.as_str());
                prop_assert_eq!(claims.expires_at, expires_at);
                prop_assert!(signer().verify(&token, expires_at).is_none());
            }

            /// A token changed in any character proves nothing.
            #[test]
            fn a_changed_token_never_verifies(user in any::<i64>(), edit in edit()) {
                let (token, _) = signer().issue(UserId(user), &alice(), 1_000);
                if let Some(changed) = edit.apply(&token) {
                    prop_assert!(signer().verify(&changed, 1_000).is_none(), "{}", changed);
                }
            }

            /// A form token changed in any character is refused.
            #[test]
            fn a_changed_form_token_is_refused(edit in edit()) {
                let session = SessionId::random();
                let token = signer().form_token(session);
                if let Some(changed) = edit.apply(&token) {
                    prop_assert!(!signer().accepts_form_token(session, &changed));
                }
            }

            /// Text from anywhere, shaped like a token or not, proves nothing and never panics.
            #[test]
            fn arbitrary_text_proves_nothing(
                text in any::<String>(),
                shaped in "[A-Za-z0-9_-]{0,180}[.][A-Za-z0-9_-]{0,60}",
            ) {
                prop_assert!(signer().verify(&text, 0).is_none());
                prop_assert!(signer().verify(&shaped, 0).is_none());
                prop_assert!(!signer().accepts_form_token(SessionId::random(), &text));
            }
        }
    }
}
