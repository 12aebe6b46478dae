//! Orders a test writes straight to the store, past the gate.

use seckill::clock::{Clock, SystemClock};
use seckill::domain::{Money, Order, OrderId, OrderStatus, ProductId, Quantity, UserId};

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
