//! Demo data: three sale events (one ended, one live now, one starting in a few minutes and
//! guarded by a puzzle the sale page solves) with products, and three shoppers, so a newcomer
//! sees a real sale in the browser at once.
//! Seeding is idempotent: users are created if missing, events only if none is live or upcoming.

use crate::clock::local_time_of_day;
use crate::domain::{Guard, Millis, Money, SaleStatus, SaleWindow, StockBuckets, Username};
use crate::store::{NewProduct, Store};
use std::sync::Arc;

/// The demo shoppers and their passwords, printed at start-up.
pub const DEMO_USERS: [(&str, &str); 3] = [
    ("alice", "alice-password"),
    ("bob", "bob-password"),
    ("carol", "carol-password"),
];

const MINUTE: Millis = 60_000;
const HOUR: Millis = 60 * MINUTE;

/// (name, image, original price, sale price in cents, stock)
type DemoProduct = (&'static str, &'static str, i64, i64, i64);

const LIVE: [DemoProduct; 4] = [
    (
        "Phone X 128G",
        "/static/img/phone.svg",
        599_900,
        399_900,
        10,
    ),
    (
        "Noise-cancelling headphones",
        "/static/img/headphones.svg",
        129_900,
        59_900,
        20,
    ),
    ("Smart watch", "/static/img/watch.svg", 199_900, 99_900, 5),
    (
        "Mirrorless camera",
        "/static/img/camera.svg",
        699_900,
        459_900,
        3,
    ),
];
const UPCOMING: [DemoProduct; 2] = [
    (
        "Running sneakers",
        "/static/img/sneaker.svg",
        89_900,
        29_900,
        10,
    ),
    (
        "West Lake Longjing tea",
        "/static/img/tea.svg",
        39_900,
        9_900,
        50,
    ),
];
const ENDED: [DemoProduct; 1] = [("Gift box", "/static/img/gift.svg", 19_900, 4_900, 8)];

/// Seeds the demo users and, if no sale is live or upcoming at `now`, a fresh set of events.
pub async fn seed(store: &Arc<dyn Store>, now: Millis) -> anyhow::Result<()> {
    let hasher = crate::auth::password::Hasher::per_core()?;
    for (name, password) in DEMO_USERS {
        let username = Username::parse(name)?;
        if store.user_by_name(name).await?.is_none() {
            let turn = hasher.turn(std::net::Ipv4Addr::LOCALHOST.into()).await?;
            let hash = turn.hash(crate::domain::Password::parse(password)?).await?;
            store.create_user(&username, &hash, now).await?;
        }
    }
    let active = store
        .events()
        .await?
        .iter()
        .any(|e| e.window.status(now) != SaleStatus::Ended);
    if active {
        return Ok(());
    }
    let minute = now - now.rem_euclid(MINUTE);
    let slots = [
        (minute - 4 * HOUR, &ENDED[..], Guard::None),
        (minute - MINUTE, &LIVE[..], Guard::None),
        (minute + 3 * MINUTE, &UPCOMING[..], Guard::Challenge),
    ];
    for (start, products, guard) in slots {
        let window = SaleWindow::new(start, start + 2 * HOUR)?;
        let event = store
            .create_event(&local_time_of_day(start), window, guard, now)
            .await?;
        for &(name, image, original, sale, stock) in products {
            let product = NewProduct {
                event_id: Some(event.id),
                name: name.into(),
                image_url: image.into(),
                original_price: Money::from_cents(original)?,
                sale_price: Money::from_cents(sale)?,
                stock,
                per_user_limit: 1,
                buckets: StockBuckets::ONE,
                window,
            };
            store.create_product(&product, now).await?;
        }
    }
    tracing::info!("demo sale seeded");
    Ok(())
}
