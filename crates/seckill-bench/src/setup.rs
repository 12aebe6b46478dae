//! Before the crowd arrives: shoppers created in the database in bulk with session tokens signed
//! by the server's own secret (through the [`Ledger`]), and a product on sale now, created
//! through the admin API like an operator would.

use crate::Ledger;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The sale a run drives, and what checking it afterwards needs.
#[derive(Clone)]
pub struct Sale {
    pub product: i64,
    pub stock: i64,
    pub per_user_limit: u32,
    /// The crowd's session tokens, one per shopper.
    pub shoppers: Arc<Vec<String>>,
}

/// Creates the crowd and the product.
pub async fn prepare(
    ledger: &impl Ledger,
    client: &reqwest::Client,
    base: &str,
    users: usize,
    stock: i64,
    per_user_limit: u32,
) -> anyhow::Result<Sale> {
    // Names this run's shoppers and product apart from earlier runs' on the same database.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        % 100_000_000;
    let names: Vec<String> = (0..users).map(|i| format!("bench{run}-{i}")).collect();
    eprintln!("creating {users} shoppers…");
    let shoppers = ledger.create_shoppers(&names).await?;
    let name = format!("Bench phone {run}");
    let product = create_product(
        client,
        base,
        ledger.admin_token(),
        &name,
        stock,
        per_user_limit,
    )
    .await?;
    // The checks read this database: one the server does not use would fail them all, after
    // the whole crowd ran, with nothing to say why. (Its own product may have the same id.)
    if ledger
        .product(product)
        .await?
        .is_none_or(|found| found.name != name)
    {
        bail!(
            "product {product} was created through {base} but is not in {}: give the bench \
             the server's SECKILL_DATABASE_URL, the checks read the database",
            ledger.location()
        );
    }
    wait_until_on_sale(client, base, product).await?;
    Ok(Sale {
        product,
        stock,
        per_user_limit,
        shoppers: Arc::new(shoppers),
    })
}

async fn create_product(
    client: &reqwest::Client,
    base: &str,
    admin_token: &str,
    name: &str,
    stock: i64,
    per_user_limit: u32,
) -> anyhow::Result<i64> {
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
    body["id"].as_i64().context("the created product has no id")
}

/// Waits until the server shows the product as on sale (a server that did not create it learns
/// of it on its next catalog refresh).
async fn wait_until_on_sale(
    client: &reqwest::Client,
    base: &str,
    product: i64,
) -> anyhow::Result<()> {
    let url = format!("{base}/api/v1/products/{product}");
    for _ in 0..50 {
        let response = client.get(&url).send().await?;
        if response.status().is_success() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the server never showed product {product} as on sale")
}
