//! The order batch as the store writes it, on every database: redeliveries, an order repeated
//! within a batch, and a product that cannot cover the whole batch. (Written straight to the
//! store, past the gate, so the checks read the store too.)

use crate::support::TestApp;
use crate::support::orders::order;
use seckill::clock::{Clock, SystemClock};
use seckill::domain::{IdempotencyKey, Order, OrderId, ProductId, UserId};
use seckill::pipeline::drain::{Fate, store_batch};
use seckill::store::Persisted::{Duplicate, Inserted, KeyTaken, OutOfStock};

#[tokio::test]
async fn a_batch_stores_each_new_order_once_and_never_more_than_the_stock() {
    let app = TestApp::spawn().await;
    let store = &app.state.store;
    let product = app.live_product(3, 5).await;
    let other = app.live_product(10, 5).await;

    let first = store
        .insert_orders(&[
            order(1, product, 1),
            order(2, product, 1),
            order(1, product, 1),
        ])
        .await
        .unwrap();
    assert_eq!(first, [Inserted, Inserted, Duplicate]);

    // One unit left: the batch's three new units do not fit, so it goes order by order.
    let second = store
        .insert_orders(&[
            order(2, product, 1),
            order(3, product, 2),
            order(4, other, 4),
            order(5, product, 1),
        ])
        .await
        .unwrap();
    assert_eq!(second, [Duplicate, OutOfStock, Inserted, Inserted]);
    for (id, (units, stock)) in [(product, (3, 0)), (other, (4, 6))] {
        let id = ProductId(id);
        let held: u32 = store.holdings(id).await.unwrap().iter().map(|h| h.1).sum();
        let left = store.product(id).await.unwrap().unwrap().stock;
        assert_eq!((i64::from(held), left), (units, stock));
    }
}

#[tokio::test]
async fn a_batch_keeps_an_idempotency_key_with_one_order_and_passes_an_expired_one_on() {
    let app = TestApp::spawn().await;
    let store = &app.state.store;
    let product = app.live_product(10, 5).await;
    let now = SystemClock.now_ms();
    let day = IdempotencyKey::LIFETIME_MS;
    let keyed = |id: i64, user: i64, key: &str, at: i64| Order {
        user_id: UserId(user),
        created_at: at,
        idempotency_key: Some(IdempotencyKey::parse(key).unwrap()),
        ..order(id, product, 1)
    };
    let key_of = |id: i64| async move {
        let stored = store.order(OrderId(id)).await.unwrap().unwrap();
        stored.idempotency_key.map(|key| key.as_str().to_owned())
    };

    // User 1's order of more than a day ago holds key `k`.
    let old = store
        .insert_orders(&[keyed(1, 1, "k", now - day - 1)])
        .await;
    assert_eq!(old.unwrap(), [Inserted]);
    // A new order of theirs with `k` takes it over; another after it in the batch finds it
    // taken; user 2's `k` is theirs; a redelivery within the batch is a duplicate.
    let batch = [
        keyed(2, 1, "k", now),
        keyed(3, 1, "k", now),
        keyed(4, 2, "k", now),
        keyed(2, 1, "k", now),
    ];
    let outcomes = store.insert_orders(&batch).await.unwrap();
    assert_eq!(outcomes, [Inserted, KeyTaken, Inserted, Duplicate]);
    let again = [keyed(5, 1, "k", now), keyed(2, 1, "k", now)];
    assert_eq!(
        store.insert_orders(&again).await.unwrap(),
        [KeyTaken, Duplicate]
    );
    assert_eq!(key_of(1).await, None);
    assert_eq!(key_of(2).await.as_deref(), Some("k"));
    let live: Vec<OrderId> = store
        .keyed_orders(ProductId(product), now - day)
        .await
        .unwrap()
        .iter()
        .map(|order| order.id)
        .collect();
    assert_eq!(live.len(), 2);
    assert!(
        live.contains(&OrderId(2)) && live.contains(&OrderId(4)),
        "{live:?}"
    );

    // A worker storing an accepted order whose key another order holds stores it without.
    let fates = store_batch(store.as_ref(), &[keyed(6, 1, "k", now)]).await;
    assert_eq!(fates.unwrap(), [Fate::Safe]);
    assert_eq!(key_of(6).await, None);
    assert_eq!(key_of(2).await.as_deref(), Some("k"));
    let left = store
        .product(ProductId(product))
        .await
        .unwrap()
        .unwrap()
        .stock;
    assert_eq!(left, 6);
}
