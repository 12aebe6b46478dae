//! The Redis keys of one bucket of a product's stock, shared by the gate's scripts and the
//! outbox's readers. They share the bucket's hash tag (`{p:ID}` for a product of one bucket; the
//! tags of several are chosen where the buckets are laid out), so a bucket's scripts run on one
//! shard of a cluster. And the keys that name a product as a whole, and a buyer's claim on an
//! idempotency key, under the buyer's own hash tag.

use crate::domain::{IdempotencyKey, ProductId, UserId};

/// The keys of one bucket.
#[derive(Clone)]
pub(super) struct Keys {
    pub sale: String,
    pub buyers: String,
    pub released: String,
    pub outbox: String,
    pub dead: String,
    /// The orders placed with an idempotency key, by buyer and key.
    pub kept: String,
    /// Units taken from this bucket for another one, by transfer id, until that one has them.
    pub transfers: String,
    /// What every replay key starts with (see [`Keys::replay`]).
    replays: String,
    /// What every received-transfer key starts with (see [`Keys::received`]).
    received: String,
}

impl Keys {
    /// The keys of the bucket with hash tag `tag` under `prefix`.
    pub fn of(prefix: &str, tag: &str) -> Self {
        let base = format!("{prefix}{{{tag}}}");
        Self {
            sale: format!("{base}:sale"),
            buyers: format!("{base}:buyers"),
            released: format!("{base}:released"),
            outbox: format!("{base}:outbox"),
            dead: format!("{base}:dead"),
            kept: format!("{base}:kept"),
            transfers: format!("{base}:transfers"),
            replays: format!("{base}:replay:"),
            received: format!("{base}:got:"),
        }
    }

    /// The replay key of reserve call `call`.
    pub fn replay(&self, call: u64) -> String {
        format!("{}{call:016x}", self.replays)
    }

    /// The key that marks transfer `id` as received by this bucket.
    pub fn received(&self, id: &str) -> String {
        format!("{}{id}", self.received)
    }
}

/// The hash tag of the only bucket of a product of one, the product's own: `p:ID`.
pub(super) fn product_tag(id: ProductId) -> String {
    format!("p:{}", id.0)
}

/// The key naming the hash tags of product `id`'s buckets under `prefix`.
pub(super) fn layout(prefix: &str, id: ProductId) -> String {
    format!("{prefix}{{{}}}:layout", product_tag(id))
}

/// The key that one process loading product `id` under `prefix` holds meanwhile.
pub(super) fn loading(prefix: &str, id: ProductId) -> String {
    format!("{}:loading", layout(prefix, id))
}

/// The key of `user`'s claim on idempotency key `key` under `prefix`.
pub(super) fn claim(prefix: &str, user: UserId, key: &IdempotencyKey) -> String {
    format!("{prefix}{{u:{}}}:key:{key}", user.0)
}
