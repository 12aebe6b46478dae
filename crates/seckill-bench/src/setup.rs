//! Before the crowd arrives: shoppers created in the database in bulk with session tokens signed
//! by the server's own secret (through the [`Ledger`]), and a product on sale now, created
//! through the admin API like an operator would. A guarded sale starts a few seconds later
//! instead, in a guarded event: its shoppers fetch their buy tokens before the start.

use crate::Ledger;
use crate::guard::Guard;
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
    /// The shoppers' buy tokens, in the same order, once fetched (a guarded sale only).
    pub buy_tokens: Option<Arc<Vec<String>>>,
}

/// How long after its creation a guarded sale starts: the time its shoppers have to fetch their
/// buy tokens (a longer fetch delays the crowd, not the sale).
const GUARDED_START_DELAY_SECS: i64 = 5;

/// The sale a run asks for.
pub struct Wanted {
    /// Shoppers in the crowd.
    pub users: usize,
    pub stock: i64,
    pub per_user_limit: u32,
    /// The stock buckets the product's stock is split into in a shared gate.
    pub buckets: u8,
    pub guard: Guard,
}

/// Creates the crowd and the product.
pub async fn prepare(
    ledger: &impl Ledger,
    client: &reqwest::Client,
    base: &str,
    wanted: &Wanted,
) -> anyhow::Result<Sale> {
    let &Wanted {
        users,
        stock,
        per_user_limit,
        ..
    } = wanted;
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
    let product = create_product(client, base, ledger.admin_token(), &name, wanted).await?;
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
        buy_tokens: None,
    })
}

/// The product on sale, on sale now; a guarded one in an event of its guard that starts in
/// [`GUARDED_START_DELAY_SECS`].
async fn create_product(
    client: &reqwest::Client,
    base: &str,
    admin_token: &str,
    name: &str,
    wanted: &Wanted,
) -> anyhow::Result<i64> {
    let guard = wanted.guard;
    let now = chrono::Utc::now();
    let ends_at = (now + chrono::Duration::hours(1)).to_rfc3339();
    let mut product = json!({
        "name": name,
        "original_price_cents": 10_000,
        "sale_price_cents": 4_999,
        "stock": wanted.stock,
        "per_user_limit": wanted.per_user_limit,
    });
    if wanted.buckets > 1 {
        product["buckets"] = json!(wanted.buckets);
    }
    if guard == Guard::None {
        product["starts_at"] = json!((now - chrono::Duration::seconds(1)).to_rfc3339());
        product["ends_at"] = json!(ends_at);
    } else {
        let starts_at = now + chrono::Duration::seconds(GUARDED_START_DELAY_SECS);
        let event = json!({
            "title": format!("{name} ({} guard)", guard.as_str()),
            "starts_at": starts_at.to_rfc3339(),
            "ends_at": ends_at,
            "guard": guard.as_str(),
        });
        let event = admin_post(client, base, admin_token, "events", &event).await?;
        product["event_id"] = event["id"].clone();
    }
    let product = admin_post(client, base, admin_token, "products", &product).await?;
    product["id"]
        .as_i64()
        .context("the created product has no id")
}

/// `POST /api/v1/admin/{what}` with `body`: the created thing.
async fn admin_post(
    client: &reqwest::Client,
    base: &str,
    admin_token: &str,
    what: &str,
    body: &Value,
) -> anyhow::Result<Value> {
    let response = client
        .post(format!("{base}/api/v1/admin/{what}"))
        .bearer_auth(admin_token)
        .json(body)
        .send()
        .await
        .with_context(|| format!("reaching {base}"))?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!(
            "creating the bench's {what} answered {status}: {body} (same admin token and database as the server?)"
        );
    }
    Ok(body)
}

/// Waits until the server says the product's sale is live: a guarded sale starts a few seconds
/// after its creation.
pub async fn wait_until_live(
    client: &reqwest::Client,
    base: &str,
    product: i64,
) -> anyhow::Result<()> {
    let url = format!("{base}/api/v1/products/{product}");
    for _ in 0..600 {
        let shown: Value = client.get(&url).send().await?.json().await?;
        if shown["status"] == "live" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("product {product} never went on sale")
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
