//! The order batch as the store writes it, on every database: redeliveries, an order repeated
//! within a batch, and a product that cannot cover the whole batch. (Written straight to the
//! store, past the gate, so the checks read the store too.)

use crate::helpers::TestApp;
use seckill::clock::{Clock, SystemClock};
use seckill::domain::{Money, Order, OrderId, OrderStatus, ProductId, Quantity, UserId};
use seckill::store::Persisted::{Duplicate, Inserted, OutOfStock};

/// An order of `quantity` units of `product` by user `id`, as a test writes it by hand, placed
/// now with an hour to pay: the server's once-a-second deadline sweep must not cancel it (and
/// give its units back) while the test counts the stock.
pub fn order(id: i64, product: i64, quantity: i64) -> Order {
    let price = Money::from_cents(100).unwrap();
    let quantity = Quantity::parse(quantity).unwrap();
    let now = SystemClock.now_ms();
    Order {
        id: OrderId(id),
        user_id: UserId(id),
        product_id: ProductId(product),
        product_name: "Kettle".into(),
        unit_price: price,
        quantity,
        total: price.times(quantity.get()),
        status: OrderStatus::AwaitingPayment,
        created_at: now,
        pay_before: now + 3_600_000,
        paid_at: None,
        cancelled_at: None,
        pay_started_at: None,
        idempotency_key: None,
    }
}

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
