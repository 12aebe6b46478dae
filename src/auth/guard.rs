//! What a guarded sale asks of a buyer besides a session, signed with a key derived from the
//! server secret and checked in memory: any server checks what any other issued, with no
//! database and no Redis on the way.
//!
//! - A **buy token**, `seal("t:{user}:{product}:{expires_at}")`, proves that this user fetched
//!   it for this product through the sale page's own request shortly before buying, so a script
//!   that skips the page cannot buy.
//! - A **challenge**, `seal("c:{expires_at}:{difficulty}:{scope}")`, is a proof-of-work puzzle:
//!   find a nonce such that SHA-256(challenge ‖ nonce) starts with `difficulty` zero bits. It is
//!   stateless, so it may be answered more than once until it expires; what an answer earns is
//!   bound to the challenge's scope (one user's buy of one product, or one username's
//!   registration), so solving it once helps nobody else.
//!
//! The key is not the session key: a session token is never a buy token or a challenge, and the
//! `t:` and `c:` prefixes keep those two apart.

use super::token::{HmacSha256, PAYLOAD_ROOM, open, seal};
use crate::domain::{Millis, ProductId, UserId};
use hmac::Mac;
use sha2::{Digest, Sha256};
use std::fmt;

/// The longest nonce an answer may carry.
pub const MAX_NONCE_LEN: usize = 64;
/// How long a challenge may be answered: long enough for a slow phone to solve it.
pub const CHALLENGE_TTL_MS: Millis = 120_000;

/// What a challenge's answer is good for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// A buy token for one user and one product.
    Buy { user: UserId, product: ProductId },
    /// Registering one username.
    Registration(&'a str),
}

impl fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Buy { user, product } => write!(f, "b{}.{}", user.0, product.0),
            Self::Registration(username) => write!(f, "r{username}"),
        }
    }
}

/// Signs and checks buy tokens and challenges.
pub struct GuardSigner {
    mac: HmacSha256,
}

impl GuardSigner {
    /// A signer keyed with a key derived from the server `secret`.
    pub fn new(secret: &[u8]) -> Self {
        let mut derive =
            HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
        derive.update(b"seckill guard key");
        let key = derive.finalize().into_bytes();
        Self {
            mac: HmacSha256::new_from_slice(&key).expect("HMAC accepts keys of any length"),
        }
    }

    /// A buy token for `user`'s buys of `product` until `expires_at`.
    pub fn buy_token(&self, user: UserId, product: ProductId, expires_at: Millis) -> String {
        seal(
            &self.mac,
            &format!("t:{}:{}:{expires_at}", user.0, product.0),
        )
    }

    /// Whether `token` is a buy token signed here for `user` and `product` and unexpired at
    /// `now`. No allocation: every buy of a guarded product checks one.
    pub fn check_buy_token(
        &self,
        token: &str,
        user: UserId,
        product: ProductId,
        now: Millis,
    ) -> bool {
        let mut room = [0u8; PAYLOAD_ROOM];
        let Some(payload) = open(&self.mac, token, &mut room) else {
            return false;
        };
        let mut parts = payload.split(':');
        let claims = (|| {
            (parts.next()? == "t").then_some(())?;
            let token_user: i64 = parts.next()?.parse().ok()?;
            let token_product: i64 = parts.next()?.parse().ok()?;
            let expires_at: Millis = parts.next()?.parse().ok()?;
            parts
                .next()
                .is_none()
                .then_some((token_user, token_product, expires_at))
        })();
        claims.is_some_and(|(token_user, token_product, expires_at)| {
            token_user == user.0 && token_product == product.0 && now < expires_at
        })
    }

    /// A challenge for `scope` asking for `difficulty` leading zero bits, answerable until
    /// `expires_at`.
    pub fn challenge(&self, scope: Scope<'_>, difficulty: u8, expires_at: Millis) -> String {
        seal(&self.mac, &format!("c:{expires_at}:{difficulty}:{scope}"))
    }

    /// Whether `nonce` answers `challenge`, a challenge signed here for `scope` and unexpired
    /// at `now`: SHA-256(challenge ‖ nonce) has the leading zero bits the challenge asks for.
    pub fn check_answer(
        &self,
        challenge: &str,
        nonce: &str,
        scope: Scope<'_>,
        now: Millis,
    ) -> bool {
        if nonce.is_empty() || nonce.len() > MAX_NONCE_LEN {
            return false;
        }
        let mut room = [0u8; PAYLOAD_ROOM];
        let Some(payload) = open(&self.mac, challenge, &mut room) else {
            return false;
        };
        let mut parts = payload.splitn(4, ':');
        let terms = (|| {
            (parts.next()? == "c").then_some(())?;
            let expires_at: Millis = parts.next()?.parse().ok()?;
            let difficulty: u8 = parts.next()?.parse().ok()?;
            Some((expires_at, difficulty, parts.next()?))
        })();
        let Some((expires_at, difficulty, bound_to)) = terms else {
            return false;
        };
        now < expires_at
            && bound_to == scope.to_string()
            && leading_zero_bits(challenge, nonce) >= u32::from(difficulty)
    }
}

/// The leading zero bits of SHA-256(challenge ‖ nonce).
fn leading_zero_bits(challenge: &str, nonce: &str) -> u32 {
    let digest = Sha256::new()
        .chain_update(challenge)
        .chain_update(nonce)
        .finalize();
    let mut zeros = 0;
    for byte in digest {
        zeros += byte.leading_zeros();
        if byte != 0 {
            break;
        }
    }
    zeros
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_000_000;

    /// The first nonce, counting up in decimal, that answers `challenge`: what a client does.
    fn solve(challenge: &str, difficulty: u8) -> String {
        (0u64..)
            .map(|n| n.to_string())
            .find(|nonce| leading_zero_bits(challenge, nonce) >= u32::from(difficulty))
            .unwrap()
    }

    fn signer() -> GuardSigner {
        GuardSigner::new(b"0123456789abcdef0123456789abcdef")
    }

    fn buy(user: i64, product: i64) -> Scope<'static> {
        Scope::Buy {
            user: UserId(user),
            product: ProductId(product),
        }
    }

    #[test]
    fn a_buy_token_buys_only_for_its_user_and_product_until_it_expires() {
        let token = signer().buy_token(UserId(7), ProductId(3), NOW + 10);
        let check = |t: &str, user, product, now| {
            signer().check_buy_token(t, UserId(user), ProductId(product), now)
        };
        assert!(check(&token, 7, 3, NOW));
        assert!(check(&token, 7, 3, NOW + 9));
        assert!(!check(&token, 7, 3, NOW + 10), "expired");
        assert!(!check(&token, 8, 3, NOW), "another user");
        assert!(!check(&token, 7, 4, NOW), "another product");
        let other_key = GuardSigner::new(b"another secret entirely, 32 bytes");
        assert!(!other_key.check_buy_token(&token, UserId(7), ProductId(3), NOW));
        let (payload, sig) = token.split_once('.').unwrap();
        let mut flipped = sig.to_owned().into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let tampered = format!("{payload}.{}", String::from_utf8(flipped).unwrap());
        assert!(!check(&tampered, 7, 3, NOW));
        for junk in ["", ".", "t:7:3:99999999", &format!("{payload}."), "a.b.c"] {
            assert!(!check(junk, 7, 3, NOW), "{junk}");
        }
    }

    #[test]
    fn neither_a_session_token_nor_a_challenge_is_a_buy_token() {
        let session = crate::auth::TokenSigner::new(b"0123456789abcdef0123456789abcdef", 1_000);
        let name = crate::domain::Username::parse("alice").unwrap();
        let (token, _) = session.issue(UserId(7), &name, NOW);
        assert!(!signer().check_buy_token(&token, UserId(7), ProductId(3), NOW));
        let challenge = signer().challenge(buy(7, 3), 0, NOW + 10);
        assert!(!signer().check_buy_token(&challenge, UserId(7), ProductId(3), NOW));
        let token = signer().buy_token(UserId(7), ProductId(3), NOW + 10);
        assert!(!signer().check_answer(&token, "1", buy(7, 3), NOW));
    }

    #[test]
    fn a_challenge_is_answered_by_a_solved_nonce_for_its_scope_until_it_expires() {
        let challenge = signer().challenge(buy(7, 3), 8, NOW + 10);
        let nonce = solve(&challenge, 8);
        assert!(leading_zero_bits(&challenge, &nonce) >= 8);
        let check = |nonce: &str, scope, now| signer().check_answer(&challenge, nonce, scope, now);
        assert!(check(&nonce, buy(7, 3), NOW));
        assert!(!check(&nonce, buy(7, 3), NOW + 10), "expired");
        assert!(!check(&nonce, buy(8, 3), NOW), "another user");
        assert!(!check(&nonce, buy(7, 4), NOW), "another product");
        assert!(!check(&nonce, Scope::Registration("b7.3"), NOW));
        let wrong = (0u64..)
            .map(|n| n.to_string())
            .find(|n| leading_zero_bits(&challenge, n) < 8)
            .unwrap();
        assert!(!check(&wrong, buy(7, 3), NOW), "too few zero bits");
        assert!(!check("", buy(7, 3), NOW));
        assert!(!check(&"0".repeat(MAX_NONCE_LEN + 1), buy(7, 3), NOW));
        // The difficulty is the signed one: a forged easier challenge is refused.
        let (_, sig) = challenge.split_once('.').unwrap();
        use base64::Engine;
        let easy = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("c:{}:0:b7.3", NOW + 10));
        assert!(!signer().check_answer(&format!("{easy}.{sig}"), "0", buy(7, 3), NOW));
    }

    #[test]
    fn a_registration_challenge_is_bound_to_its_username() {
        let challenge = signer().challenge(Scope::Registration("alice"), 4, NOW + 10);
        let nonce = solve(&challenge, 4);
        let check =
            |name| signer().check_answer(&challenge, &nonce, Scope::Registration(name), NOW);
        assert!(check("alice"));
        assert!(!check("alicf"));
    }

    #[test]
    fn zero_bits_are_counted_across_bytes() {
        // SHA-256("abc") starts with 0xba: no zero bit.
        assert_eq!(leading_zero_bits("ab", "c"), 0);
        for nonce in 0..200 {
            let nonce = nonce.to_string();
            let digest = Sha256::digest(format!("x{nonce}"));
            let bits: String = digest.iter().map(|b| format!("{b:08b}")).collect();
            let expected = bits.find('1').unwrap_or(256) as u32;
            assert_eq!(leading_zero_bits("x", &nonce), expected);
        }
    }

    mod properties {
        use super::*;
        use crate::domain::edits::edit;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// A buy token buys for its own user and product only, until its expiry.
            #[test]
            fn a_buy_token_is_good_for_its_user_and_product_only(
                user in any::<i64>(),
                product in any::<i64>(),
                other in any::<i64>(),
                expires_at in NOW + 1..i64::MAX,
            ) {
                let token = signer().buy_token(UserId(user), ProductId(product), expires_at);
                let check = |u, p, now| signer().check_buy_token(&token, UserId(u), ProductId(p), now);
                prop_assert!(check(user, product, NOW));
                prop_assert!(!check(user, product, expires_at));
                prop_assert_eq!(check(other, product, NOW), other == user);
                prop_assert_eq!(check(user, other, NOW), other == product);
            }

            /// A buy token changed in any character buys nothing.
            #[test]
            fn a_changed_buy_token_never_checks(user in any::<i64>(), product in any::<i64>(), edit in edit()) {
                let token = signer().buy_token(UserId(user), ProductId(product), NOW + 10);
                if let Some(changed) = edit.apply(&token) {
                    prop_assert!(!signer().check_buy_token(&changed, UserId(user), ProductId(product), NOW));
                }
            }

            /// A challenge asking for no work is answered by any nonce, for its scope; changed
            /// in any character it answers nothing, whatever the nonce.
            #[test]
            fn a_changed_challenge_is_never_answered(
                user in any::<i64>(),
                product in any::<i64>(),
                nonce in "[0-9a-z]{1,64}",
                edit in edit(),
            ) {
                let challenge = signer().challenge(buy(user, product), 0, NOW + 10);
                prop_assert!(signer().check_answer(&challenge, &nonce, buy(user, product), NOW));
                if let Some(changed) = edit.apply(&challenge) {
                    prop_assert!(!signer().check_answer(&changed, &nonce, buy(user, product), NOW));
                }
            }

            /// Text from anywhere is neither a buy token nor a challenge, and never panics.
            #[test]
            fn arbitrary_text_is_no_token_and_no_challenge(
                text in any::<String>(),
                nonce in any::<String>(),
                shaped in "[A-Za-z0-9_-]{0,180}[.][A-Za-z0-9_-]{0,60}",
            ) {
                for token in [&text, &shaped] {
                    prop_assert!(!signer().check_buy_token(token, UserId(1), ProductId(1), NOW));
                    prop_assert!(!signer().check_answer(token, &nonce, buy(1, 1), NOW));
                    prop_assert!(!signer().check_answer(token, &nonce, Scope::Registration("alice"), NOW));
                }
            }
        }
    }
}
