//! `seckill bench`: the load generator (crate `seckill_bench`) given this server's database and
//! secrets through its [`Ledger`] trait, the only part of a run that needs the server's code.

use crate::app::{ADMIN_TOKEN, TOKEN_SECRET, open_store, secret_setting};
use crate::auth::TokenSigner;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, Secret};
use crate::domain::{OrderId, OrderStatus, ProductId, Username};
use crate::store::Store;
use anyhow::Context;
use async_trait::async_trait;
use seckill_bench::{Ledger, StoredProduct};
use std::sync::Arc;

/// A password hash no password matches: bench shoppers only ever use their tokens.
const NO_PASSWORD: &str = "!bench-shopper-without-a-password";
/// Accounts created per transaction.
const USERS_PER_TRANSACTION: usize = 5_000;

/// Runs `seckill bench` against `--url`, or else this configuration's `http_addr`.
pub async fn run(config: Config, args: seckill_bench::Args) -> anyhow::Result<()> {
    let default_url = format!("http://{}", config.http_addr);
    seckill_bench::run(args, &default_url, async || {
        StoreLedger::open(&config).await
    })
    .await
}

/// The database a server of this configuration uses, with the secrets it signs and admits by.
struct StoreLedger {
    store: Arc<dyn Store>,
    signer: TokenSigner,
    admin_token: Secret,
    /// The database's URL, credentials hidden.
    location: String,
}

impl StoreLedger {
    /// Opens the configured database and reads (or, on a database no server has started on
    /// yet, generates) the secrets the server would.
    async fn open(config: &Config) -> anyhow::Result<Self> {
        let store = open_store(config).await?;
        let (secret, _) = secret_setting(&*store, config.secret.as_ref(), TOKEN_SECRET).await?;
        let (admin_token, _) =
            secret_setting(&*store, config.admin_token.as_ref(), ADMIN_TOKEN).await?;
        let signer = TokenSigner::new(
            secret.expose().as_bytes(),
            (config.session_ttl_secs * 1000) as i64,
        );
        Ok(Self {
            store,
            signer,
            admin_token,
            location: config.database_url.redacted(),
        })
    }
}

#[async_trait]
impl Ledger for StoreLedger {
    async fn create_shoppers(&self, names: &[String]) -> anyhow::Result<Vec<String>> {
        let names: Vec<Username> = names
            .iter()
            .map(|name| Username::parse(name))
            .collect::<Result<_, _>>()
            .context("bench user names")?;
        let now = SystemClock.now_ms();
        let mut tokens = Vec::with_capacity(names.len());
        for chunk in names.chunks(USERS_PER_TRANSACTION) {
            let ids = self.store.create_users(chunk, NO_PASSWORD, now).await?;
            for (name, id) in chunk.iter().zip(ids) {
                let id = id.with_context(|| format!("user {} exists already", name.as_str()))?;
                tokens.push(self.signer.issue(id, name, now).0);
            }
        }
        Ok(tokens)
    }

    fn admin_token(&self) -> &str {
        self.admin_token.expose()
    }

    async fn product(&self, id: i64) -> anyhow::Result<Option<StoredProduct>> {
        let product = self.store.product(ProductId(id)).await?;
        Ok(product.map(|product| StoredProduct {
            name: product.name,
            stock: product.stock,
            stock_total: product.stock_total,
        }))
    }

    async fn holdings(&self, product: i64) -> anyhow::Result<Vec<u32>> {
        let holdings = self.store.holdings(ProductId(product)).await?;
        Ok(holdings.into_iter().map(|(_, units)| units).collect())
    }

    async fn stored_among(&self, orders: &[i64]) -> anyhow::Result<Vec<i64>> {
        let orders: Vec<OrderId> = orders.iter().copied().map(OrderId).collect();
        let stored = self.store.stored_among(&orders).await?;
        Ok(stored.into_iter().map(|order| order.0).collect())
    }

    async fn paid_among(&self, orders: &[i64]) -> anyhow::Result<Vec<i64>> {
        let mut paid = Vec::new();
        for &id in orders {
            if let Some(order) = self.store.order(OrderId(id)).await?
                && order.status == OrderStatus::Paid
            {
                paid.push(id);
            }
        }
        Ok(paid)
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}
