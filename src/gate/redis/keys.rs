//! The Redis keys of one product, shared by the gate's scripts and the outbox's readers. They
//! share the hash tag `{p:ID}`, so a product's scripts run on one shard of a cluster. And a
//! buyer's claim on an idempotency key, under the buyer's own hash tag.

use crate::domain::{IdempotencyKey, ProductId, UserId};

/// The keys of one product.
#[derive(Clone)]
pub(super) struct Keys {
    pub sale: String,
    pub buyers: String,
    pub released: String,
    pub outbox: String,
    pub dead: String,
    /// The orders placed with an idempotency key, by buyer and key.
    pub kept: String,
    /// What every replay key starts with (see [`Keys::replay`]).
    replays: String,
}

impl Keys {
    /// The keys of product `id` under `prefix`.
    pub fn of(prefix: &str, id: ProductId) -> Self {
        let base = format!("{prefix}{{p:{}}}", id.0);
        Self {
            sale: format!("{base}:sale"),
            buyers: format!("{base}:buyers"),
            released: format!("{base}:released"),
            outbox: format!("{base}:outbox"),
            dead: format!("{base}:dead"),
            kept: format!("{base}:kept"),
            replays: format!("{base}:replay:"),
        }
    }

    /// The replay key of reserve call `call`.
    pub fn replay(&self, call: u64) -> String {
        format!("{}{call:016x}", self.replays)
    }
}

/// The key of `user`'s claim on idempotency key `key` under `prefix`.
pub(super) fn claim(prefix: &str, user: UserId, key: &IdempotencyKey) -> String {
    format!("{prefix}{{u:{}}}:key:{key}", user.0)
}
