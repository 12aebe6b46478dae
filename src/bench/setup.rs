//! Before the crowd arrives: shoppers created in the database in bulk with session tokens signed
//! by the server's own secret, and a product on sale now, created through the admin API like an
//! operator would.

use crate::app::{ADMIN_TOKEN, TOKEN_SECRET, open_store, secret_setting};
use crate::auth::TokenSigner;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::domain::{ProductId, Username};
use crate::store::Store;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A password hash no password matches: bench shoppers only ever use their tokens.
const NO_PASSWORD: &str = "!bench-shopper-without-a-password";
/// Accounts created per transaction.
const USERS_PER_TRANSACTION: usize = 5_000;

/// The sale a run drives, and what checking it afterwards needs.
#[derive(Clone)]
pub struct Sale {
    pub product: ProductId,
    pub stock: i64,
    pub per_user_limit: u32,
    /// The crowd's session tokens, one per shopper.
    pub shoppers: Arc<Vec<String>>,
    pub store: Arc<dyn Store>,
}

/// Creates the crowd and the product.
pub async fn prepare(
    config: &Config,
    client: &reqwest::Client,
    base: &str,
    users: usize,
    stock: i64,
    per_user_limit: u32,
) -> anyhow::Result<Sale> {
    let store = open_store(config).await?;
    let now = SystemClock.now_ms();
    let (secret, _) = secret_setting(&*store, config.secret.as_ref(), TOKEN_SECRET).await?;
    let (admin, _) = secret_setting(&*store, config.admin_token.as_ref(), ADMIN_TOKEN).await?;
    let signer = TokenSigner::new(
        secret.expose().as_bytes(),
        (config.session_ttl_secs * 1000) as i64,
    );
    let run = now % 100_000_000;
    let names: Vec<Username> = (0..users)
        .map(|i| Username::parse(&format!("bench{run}-{i}")))
        .collect::<Result<_, _>>()
        .context("bench user names")?;
    eprintln!("creating {users} shoppers…");
    let mut shoppers = Vec::with_capacity(users);
    for chunk in names.chunks(USERS_PER_TRANSACTION) {
        let ids = store.create_users(chunk, NO_PASSWORD, now).await?;
        for (name, id) in chunk.iter().zip(ids) {
            let id = id.with_context(|| format!("user {} exists already", name.as_str()))?;
            shoppers.push(signer.issue(id, name, now).0);
        }
    }
    let name = format!("Bench phone {run}");
    let product =
        create_product(client, base, admin.expose(), &name, stock, per_user_limit).await?;
    // The checks read this database: one the server does not use would fail them all, after
    // the whole crowd ran, with nothing to say why. (Its own product may have the same id.)
    if store
        .product(product)
        .await?
        .is_none_or(|found| found.name != name)
    {
        bail!(
            "product {} was created through {base} but is not in {}: give the bench the \
             server's SECKILL_DATABASE_URL, the checks read the database",
            product.0,
            crate::redact::url(&config.database_url)
        );
    }
    wait_until_on_sale(client, base, product).await?;
    Ok(Sale {
        product,
        stock,
        per_user_limit,
        shoppers: Arc::new(shoppers),
        store,
    })
}

async fn create_product(
    client: &reqwest::Client,
    base: &str,
    admin_token: &str,
    name: &str,
    stock: i64,
    per_user_limit: u32,
) -> anyhow::Result<ProductId> {
    let now = chrono::Utc::now();
    let response = client
        .post(format!("{base}/api/v1/admin/products"))
        .bearer_auth(admin_token)
        .json(&json!({
            "name": name,
            "original_price_cents": 10_000,
            "sale_price_cents": 4_999,
            "stock": stock,
            "per_user_limit": per_user_limit,
            "starts_at": (now - chrono::Duration::seconds(1)).to_rfc3339(),
            "ends_at": (now + chrono::Duration::hours(1)).to_rfc3339(),
        }))
        .send()
        .await
        .with_context(|| format!("reaching {base}"))?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!(
            "creating the bench product answered {status}: {body} (same admin token and database as the server?)"
        );
    }
    body["id"]
        .as_i64()
        .map(ProductId)
        .context("the created product has no id")
}

/// Waits until the server shows the product as on sale (a server that did not create it learns
/// of it on its next catalog refresh).
async fn wait_until_on_sale(
    client: &reqwest::Client,
    base: &str,
    product: ProductId,
) -> anyhow::Result<()> {
    let url = format!("{base}/api/v1/products/{}", product.0);
    for _ in 0..50 {
        let response = client.get(&url).send().await?;
        if response.status().is_success() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the server never showed product {} as on sale", product.0)
}
