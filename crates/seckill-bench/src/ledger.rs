//! The one door from the load generator into the server's own side.
//!
//! A run needs what no HTTP client may have: a crowd created in bulk with session tokens the
//! server accepts, the operator's admin token, and afterwards the database's word on what was
//! sold. This crate does not depend on the server library (the `seckill` binary depends on this
//! crate, and the server must not carry a load generator), so the binary hands it that access
//! through this trait, in plain ids, units and strings.

use async_trait::async_trait;

/// The server's database and secrets, as a run sees them.
#[async_trait]
pub trait Ledger {
    /// Creates an account for each name (none of which may exist yet) and returns a session
    /// token for each, in the same order, signed with the server's secret: a crowd costs
    /// seconds rather than a sign-up per shopper.
    async fn create_shoppers(&self, names: &[String]) -> anyhow::Result<Vec<String>>;

    /// The admin API's bearer token, to put a sale on as an operator would.
    fn admin_token(&self) -> &str;

    /// A product as the database holds it; `None` when it holds no such product.
    async fn product(&self, id: i64) -> anyhow::Result<Option<StoredProduct>>;

    /// The units each buyer of the product holds in orders that are not cancelled, one entry
    /// per buyer.
    async fn holdings(&self, product: i64) -> anyhow::Result<Vec<u32>>;

    /// Those of `orders` that the database holds.
    async fn stored_among(&self, orders: &[i64]) -> anyhow::Result<Vec<i64>>;

    /// Those of `orders` that the database holds as paid.
    async fn paid_among(&self, orders: &[i64]) -> anyhow::Result<Vec<i64>>;

    /// Where the ledger reads, credentials hidden: named when the server writes elsewhere.
    fn location(&self) -> String;
}

/// A product's row, as far as the checks read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProduct {
    /// Its name: a product of the same id in another database has another name.
    pub name: String,
    /// Units still on sale.
    pub stock: i64,
    /// Units ever put on sale: `stock_total - stock` were sold.
    pub stock_total: i64,
}
