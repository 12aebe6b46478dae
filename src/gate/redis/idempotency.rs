//! Idempotency keys in the Redis gate. A key is kept in two places:
//!
//! - with its order, in the product's `kept` hash (field `USER:KEY`, value
//!   `MADE_AT:UNITS:ORDER`), written by the reserve script in the step that takes the stock and
//!   appends the order to the outbox: a retry on any server is answered with that order, and a
//!   server that dies before answering loses nothing the retry needs;
//! - as the buyer's claim on the key (`PREFIX{u:USER}:key:KEY`, `PRODUCT:UNITS:ORDER_ID`), made
//!   before the buy is decided. A product's script cannot see the keys of other products (they
//!   may live on other shards), so the claim is what refuses a key sent again for another
//!   product. A refused buy frees its claim, as a refusal keeps nothing and the key may then
//!   name another buy.
//!
//! Both last the key's lifetime ([`IdempotencyKey::LIFETIME_MS`]): claims expire on their own,
//! the kept orders are skipped once older and go with their hash a lifetime after its last one.

use super::keys;
use super::lua::{CLAIM, unavailable};
use crate::domain::{IdempotencyKey, Millis, Order};
use crate::gate::GateError;
use crate::redis_link::RedisLink;

/// `order`'s field in its product's `kept` hash.
pub(super) fn field(order: &Order, key: &IdempotencyKey) -> String {
    format!("{}:{key}", order.user_id.0)
}

/// What the `kept` hash holds for `order`, encoded as `encoded`: as the reserve script writes
/// it.
pub(super) fn kept_value(order: &Order, encoded: &str) -> String {
    format!("{}:{}:{encoded}", order.created_at, order.quantity.get())
}

/// The order a `kept` hash value holds, if its key is still live at `now` (and the value
/// readable: anything else is no order to answer with).
pub(super) fn kept_order(value: &[u8], now: Millis) -> Option<Order> {
    let value = std::str::from_utf8(value).ok()?;
    let (made_at, rest) = value.split_once(':')?;
    let (_units, encoded) = rest.split_once(':')?;
    let made_at: Millis = made_at.parse().ok()?;
    if !IdempotencyKey::is_live(made_at, now) {
        return None;
    }
    Order::decode(encoded.as_bytes()).ok()
}

/// Whose claim a buy found on its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// None was there: the key is this buy's now (or a copy of this very call's, re-sent).
    Mine,
    /// Another buy's, for the same product and quantity: a retry, which the product's own
    /// script answers.
    Shared,
    /// Another buy's, for another product or quantity.
    Foreign,
}

/// A buy's claim on its idempotency key.
pub(super) struct KeyClaim {
    key: String,
    /// `PRODUCT:UNITS:ORDER_ID`: what the buy asks for, then which buy asks.
    value: String,
}

impl KeyClaim {
    /// The claim of `order`, placed with `key`, under `prefix`.
    pub fn of(prefix: &str, order: &Order, key: &IdempotencyKey) -> Self {
        Self {
            key: keys::claim(prefix, order.user_id, key),
            value: format!(
                "{}:{}:{}",
                order.product_id.0,
                order.quantity.get(),
                order.id.0
            ),
        }
    }

    /// Claims the key unless a claim is there; whose claim the key holds now.
    pub async fn make(&self, redis: &mut RedisLink) -> Result<Claim, GateError> {
        let held: Option<String> = self.run(redis, "claim").await?;
        let asks = |claim: &str| claim.rsplit_once(':').map(|(asks, _)| asks.to_owned());
        Ok(match held {
            None => Claim::Mine,
            Some(held) if held == self.value => Claim::Mine,
            Some(held) if asks(&held) == asks(&self.value) => Claim::Shared,
            Some(_) => Claim::Foreign,
        })
    }

    /// Drops the claim if it is still this buy's: the buy was refused.
    pub async fn free(&self, redis: &mut RedisLink) {
        self.settle(redis, "free").await;
    }

    /// Makes the claim this buy's: it took the units while another buy's claim was there.
    pub async fn hold(&self, redis: &mut RedisLink) {
        self.settle(redis, "hold").await;
    }

    /// Frees or holds the claim. A failure is logged and left: the claim expires on its own,
    /// and the product's kept order answers a retry of the key either way.
    async fn settle(&self, redis: &mut RedisLink, op: &str) {
        if let Err(e) = self.run(redis, op).await {
            tracing::warn!(claim = self.key, op, error = %e, "settling an idempotency key's claim");
        }
    }

    async fn run(&self, redis: &mut RedisLink, op: &str) -> Result<Option<String>, GateError> {
        CLAIM
            .key(&self.key)
            .arg(op)
            .arg(&self.value)
            .arg(IdempotencyKey::LIFETIME_MS)
            .invoke_async(redis)
            .await
            .map_err(unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Money, OrderId, OrderStatus, ProductId, Quantity, UserId};

    fn order(id: i64, product: i64, units: i64) -> Order {
        let price = Money::from_cents(100).unwrap();
        Order {
            id: OrderId(id),
            user_id: UserId(7),
            product_id: ProductId(product),
            product_name: "Kettle".into(),
            unit_price: price,
            quantity: Quantity::parse(units).unwrap(),
            total: price.times(units as u32),
            status: OrderStatus::AwaitingPayment,
            created_at: 1_000,
            pay_before: 901_000,
            paid_at: None,
            cancelled_at: None,
            pay_started_at: None,
            idempotency_key: Some(IdempotencyKey::parse("k:1").unwrap()),
        }
    }

    #[test]
    fn a_kept_value_gives_its_order_back_until_the_key_expires() {
        let order = order(1, 1, 2);
        let value = kept_value(&order, &order.encode());
        assert!(value.starts_with("1000:2:{"));
        assert_eq!(kept_order(value.as_bytes(), 1_000), Some(order.clone()));
        let expired = 1_000 + IdempotencyKey::LIFETIME_MS;
        assert_eq!(kept_order(value.as_bytes(), expired), None);
        assert_eq!(kept_order(b"1000:2:not an order", 1_000), None);
        assert_eq!(kept_order(b"garbage", 1_000), None);
    }

    #[test]
    fn the_reserve_script_keeps_keys_as_long_as_the_domain_says() {
        let lifetime = format!("local lifetime = {}", IdempotencyKey::LIFETIME_MS);
        assert!(include_str!("scripts/reserve.lua").contains(&lifetime));
        let expiry = format!("'PEXPIRE', KEYS[4], {}", IdempotencyKey::LIFETIME_MS);
        assert!(include_str!("scripts/load.lua").contains(&expiry));
    }

    /// The claims against a real Redis: the first buy claims, its retry shares, another product
    /// or quantity is foreign; a refused buy frees only its own claim; the claim lives the key's
    /// lifetime.
    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_claim_refuses_the_key_for_another_buy_until_freed() {
        let mut redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:claims:", std::process::id());
        let first = order(1, 1, 1);
        let key = first.idempotency_key.clone().unwrap();
        let claim = KeyClaim::of(&prefix, &first, &key);
        assert_eq!(claim.make(&mut redis).await.unwrap(), Claim::Mine);
        // The same call re-sent finds its own claim.
        assert_eq!(claim.make(&mut redis).await.unwrap(), Claim::Mine);
        let retry = KeyClaim::of(&prefix, &order(2, 1, 1), &key);
        assert_eq!(retry.make(&mut redis).await.unwrap(), Claim::Shared);
        for other in [order(3, 2, 1), order(4, 1, 2)] {
            let claim = KeyClaim::of(&prefix, &other, &key);
            assert_eq!(claim.make(&mut redis).await.unwrap(), Claim::Foreign);
        }
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&claim.key)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(ttl > IdempotencyKey::LIFETIME_MS - 60_000, "{ttl}");

        // A retry's refusal leaves the first buy's claim; the first's own refusal frees it.
        retry.free(&mut redis).await;
        let other = KeyClaim::of(&prefix, &order(3, 2, 1), &key);
        assert_eq!(other.make(&mut redis).await.unwrap(), Claim::Foreign);
        claim.free(&mut redis).await;
        assert_eq!(other.make(&mut redis).await.unwrap(), Claim::Mine);
        // A retry that took the units while another's claim was there makes the claim its own.
        retry.hold(&mut redis).await;
        assert_eq!(retry.make(&mut redis).await.unwrap(), Claim::Mine);

        let _: () = redis::cmd("DEL")
            .arg(&claim.key)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
}
