//! The in-process gate of embedded mode. Each product has its own mutex, held only for a few
//! comparisons and map updates (never across an `.await`), so buys of different products never
//! wait for each other and buys of one product are serialized exactly as a Redis script would be.

use super::{GateError, GateProduct, Rejection, Reserved, StockGate};
use crate::domain::{IdempotencyKey, Millis, Order, ProductId, SaleWindow, UserId};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// The embedded [`StockGate`].
#[derive(Default)]
pub struct MemoryGate {
    /// Products by id. The outer lock is taken for writing only to add a product.
    products: RwLock<HashMap<ProductId, Arc<Mutex<Slot>>>>,
}

struct Slot {
    window: SaleWindow,
    paused: bool,
    remaining: i64,
    per_user_limit: u32,
    holdings: HashMap<UserId, u32>,
    /// Orders placed with an idempotency key, by buyer. Those past the key's lifetime go when
    /// their buyer takes units with a key again, the rest with the product.
    kept: HashMap<UserId, Vec<Order>>,
}

impl Slot {
    /// The live order kept for `order`'s buyer and idempotency key at `now`.
    fn kept(&self, order: &Order, now: Millis) -> Option<&Order> {
        let key = order.idempotency_key.as_ref()?;
        self.kept.get(&order.user_id)?.iter().find(|kept| {
            kept.idempotency_key.as_ref() == Some(key)
                && IdempotencyKey::is_live(kept.created_at, now)
        })
    }

    /// Keeps a keyed order just taken, dropping its buyer's keys whose lifetime has passed.
    fn keep(&mut self, order: &Order, now: Millis) {
        let mine = self.kept.entry(order.user_id).or_default();
        mine.retain(|kept| IdempotencyKey::is_live(kept.created_at, now));
        mine.push(order.clone());
    }
}

impl MemoryGate {
    /// An empty gate.
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&self, id: ProductId) -> Option<Arc<Mutex<Slot>>> {
        self.products
            .read()
            .expect("gate map lock poisoned")
            .get(&id)
            .cloned()
    }

    fn with_slot<T>(&self, id: ProductId, f: impl FnOnce(&mut Slot) -> T) -> Result<T, GateError> {
        let slot = self.slot(id).ok_or(Rejection::NotLoaded)?;
        let mut slot = slot.lock().expect("gate slot lock poisoned");
        Ok(f(&mut slot))
    }
}

#[async_trait]
impl StockGate for MemoryGate {
    async fn forget(&self, id: ProductId) -> Result<(), GateError> {
        self.products
            .write()
            .expect("gate map lock poisoned")
            .remove(&id);
        Ok(())
    }

    async fn load(&self, p: GateProduct) -> Result<bool, GateError> {
        let mut kept: HashMap<UserId, Vec<Order>> = HashMap::new();
        for order in p.kept {
            kept.entry(order.user_id).or_default().push(order);
        }
        let slot = Slot {
            window: p.window,
            paused: p.paused,
            remaining: p.remaining,
            per_user_limit: p.per_user_limit,
            holdings: p.holdings.into_iter().collect(),
            kept,
        };
        let mut products = self.products.write().expect("gate map lock poisoned");
        if products.contains_key(&p.id) {
            return Ok(false);
        }
        products.insert(p.id, Arc::new(Mutex::new(slot)));
        Ok(true)
    }

    async fn configure(
        &self,
        id: ProductId,
        window: SaleWindow,
        per_user_limit: u32,
    ) -> Result<(), GateError> {
        self.with_slot(id, |slot| {
            slot.window = window;
            slot.per_user_limit = per_user_limit;
        })
    }

    async fn set_paused(&self, id: ProductId, paused: bool) -> Result<(), GateError> {
        self.with_slot(id, |slot| slot.paused = paused)
    }

    async fn reserve(&self, order: &Order, now: Millis) -> Result<Reserved, GateError> {
        let units = order.quantity.get();
        self.with_slot(order.product_id, |slot| {
            if let Some(kept) = slot.kept(order, now) {
                return if kept.quantity == order.quantity {
                    Ok(Reserved::Replayed(kept.clone()))
                } else {
                    Err(Rejection::KeyReused)
                };
            }
            if now < slot.window.start {
                return Err(Rejection::NotStarted);
            }
            if now >= slot.window.end {
                return Err(Rejection::Ended);
            }
            if slot.paused {
                return Err(Rejection::Paused);
            }
            let held = slot.holdings.get(&order.user_id).copied().unwrap_or(0);
            if held + units > slot.per_user_limit {
                return Err(Rejection::LimitReached);
            }
            if slot.remaining < i64::from(units) {
                return Err(Rejection::SoldOut {
                    remaining: slot.remaining,
                });
            }
            slot.remaining -= i64::from(units);
            slot.holdings.insert(order.user_id, held + units);
            if order.idempotency_key.is_some() {
                slot.keep(order, now);
            }
            Ok(Reserved::Taken {
                remaining: slot.remaining,
            })
        })?
        .map_err(GateError::from)
    }

    async fn kept(&self, order: &Order) -> Result<Option<Order>, GateError> {
        let Some(slot) = self.slot(order.product_id) else {
            return Ok(None);
        };
        let slot = slot.lock().expect("gate slot lock poisoned");
        Ok(slot.kept(order, order.created_at).cloned())
    }

    async fn drop_key(&self, order: &Order) -> Result<(), GateError> {
        let dropped = self.with_slot(order.product_id, |slot| {
            if let Some(mine) = slot.kept.get_mut(&order.user_id) {
                mine.retain(|kept| kept.id != order.id);
            }
        });
        match dropped {
            Err(GateError::Rejected(Rejection::NotLoaded)) => Ok(()),
            other => other,
        }
    }

    async fn release(&self, order: &Order) -> Result<(), GateError> {
        let units = order.quantity.get();
        self.with_slot(order.product_id, |slot| {
            slot.remaining += i64::from(units);
            if let Some(held) = slot.holdings.get_mut(&order.user_id) {
                *held = held.saturating_sub(units);
                if *held == 0 {
                    slot.holdings.remove(&order.user_id);
                }
            }
        })
    }

    async fn add_stock(&self, id: ProductId, units: i64) -> Result<(), GateError> {
        self.with_slot(id, |slot| slot.remaining += units)
    }

    async fn remaining(&self, id: ProductId) -> Result<Option<i64>, GateError> {
        Ok(self
            .slot(id)
            .map(|slot| slot.lock().expect("gate slot lock poisoned").remaining))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Money, OrderId, OrderStatus, Quantity, StockBuckets};

    fn order(user: i64, units: i64) -> Order {
        Order {
            id: OrderId(1),
            user_id: UserId(user),
            product_id: ProductId(1),
            product_name: "p".into(),
            unit_price: Money::from_cents(100).unwrap(),
            quantity: Quantity::parse(units).unwrap(),
            total: Money::from_cents(100).unwrap(),
            status: OrderStatus::AwaitingPayment,
            created_at: 0,
            pay_before: 1,
            paid_at: None,
            cancelled_at: None,
            pay_started_at: None,
            idempotency_key: None,
        }
    }

    async fn gate(stock: i64, limit: u32) -> MemoryGate {
        let gate = MemoryGate::new();
        gate.load(GateProduct {
            id: ProductId(1),
            window: SaleWindow::new(100, 200).unwrap(),
            paused: false,
            remaining: stock,
            per_user_limit: limit,
            buckets: StockBuckets::ONE,
            holdings: vec![],
            released: vec![],
            kept: vec![],
        })
        .await
        .unwrap();
        gate
    }

    fn rejection(r: Result<Reserved, GateError>) -> Rejection {
        match r {
            Err(GateError::Rejected(r)) => r,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    /// The units left after a buy that took units.
    fn left(r: Result<Reserved, GateError>) -> i64 {
        match r {
            Ok(Reserved::Taken { remaining }) => remaining,
            other => panic!("expected units taken, got {other:?}"),
        }
    }

    /// Order `id` of `user` for `units`, placed at `at` with `key`.
    fn keyed(id: i64, user: i64, units: i64, at: Millis, key: &str) -> Order {
        Order {
            id: OrderId(id),
            created_at: at,
            idempotency_key: Some(IdempotencyKey::parse(key).unwrap()),
            ..order(user, units)
        }
    }

    fn replayed(r: Result<Reserved, GateError>) -> OrderId {
        match r {
            Ok(Reserved::Replayed(first)) => first.id,
            other => panic!("expected a replay, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn sells_exactly_the_stock_including_the_last_unit_with_multi_unit_orders() {
        let gate = gate(5, 2).await;
        assert_eq!(left(gate.reserve(&order(1, 2), 150).await), 3);
        assert_eq!(left(gate.reserve(&order(2, 2), 150).await), 1);
        assert_eq!(
            rejection(gate.reserve(&order(3, 2), 150).await),
            Rejection::SoldOut { remaining: 1 }
        );
        assert_eq!(left(gate.reserve(&order(3, 1), 150).await), 0);
        assert_eq!(
            rejection(gate.reserve(&order(4, 1), 150).await),
            Rejection::SoldOut { remaining: 0 }
        );
    }

    #[tokio::test]
    async fn enforces_the_window_and_the_per_user_limit() {
        let gate = gate(10, 1).await;
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 99).await),
            Rejection::NotStarted
        );
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 200).await),
            Rejection::Ended
        );
        gate.reserve(&order(1, 1), 100).await.unwrap();
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 101).await),
            Rejection::LimitReached
        );
    }

    #[tokio::test]
    async fn a_release_returns_the_units_and_lets_the_buyer_buy_again() {
        let gate = gate(1, 1).await;
        gate.reserve(&order(1, 1), 150).await.unwrap();
        gate.release(&order(1, 1)).await.unwrap();
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(1));
        assert_eq!(left(gate.reserve(&order(1, 1), 150).await), 0);
    }

    #[tokio::test]
    async fn a_paused_product_refuses_every_buy_and_takes_nothing_until_resumed() {
        let gate = gate(2, 1).await;
        gate.set_paused(ProductId(1), true).await.unwrap();
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 150).await),
            Rejection::Paused
        );
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(2));
        // The window still decides first: a paused sale that ended says so.
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 200).await),
            Rejection::Ended
        );
        // The refused buy counted nothing against the buyer's limit.
        gate.set_paused(ProductId(1), false).await.unwrap();
        assert_eq!(left(gate.reserve(&order(1, 1), 150).await), 1);
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 150).await),
            Rejection::LimitReached
        );
    }

    #[tokio::test]
    async fn a_product_loaded_paused_stays_paused_and_pausing_an_unknown_one_is_refused() {
        let gate = MemoryGate::new();
        gate.load(GateProduct {
            id: ProductId(1),
            window: SaleWindow::new(100, 200).unwrap(),
            paused: true,
            remaining: 5,
            per_user_limit: 1,
            buckets: StockBuckets::ONE,
            holdings: vec![],
            released: vec![],
            kept: vec![],
        })
        .await
        .unwrap();
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 150).await),
            Rejection::Paused
        );
        assert!(matches!(
            gate.set_paused(ProductId(2), true).await,
            Err(GateError::Rejected(Rejection::NotLoaded))
        ));
    }

    #[tokio::test]
    async fn a_retried_key_replays_its_order_and_takes_nothing_whatever_the_sale_says_now() {
        let gate = gate(3, 2).await;
        assert_eq!(left(gate.reserve(&keyed(1, 7, 1, 150, "k"), 150).await), 2);
        // The retry, after the window closed: the first order, nothing taken.
        assert_eq!(
            replayed(gate.reserve(&keyed(2, 7, 1, 250, "k"), 250).await),
            OrderId(1)
        );
        gate.set_paused(ProductId(1), true).await.unwrap();
        assert_eq!(
            replayed(gate.reserve(&keyed(3, 7, 1, 160, "k"), 160).await),
            OrderId(1)
        );
        gate.set_paused(ProductId(1), false).await.unwrap();
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(2));
        // The key with another quantity is refused; another key or buyer buys anew.
        assert_eq!(
            rejection(gate.reserve(&keyed(4, 7, 2, 150, "k"), 150).await),
            Rejection::KeyReused
        );
        assert_eq!(left(gate.reserve(&keyed(5, 7, 1, 150, "k2"), 150).await), 1);
        assert_eq!(left(gate.reserve(&keyed(6, 8, 1, 150, "k"), 150).await), 0);
        assert_eq!(
            gate.kept(&keyed(9, 8, 1, 170, "k"))
                .await
                .unwrap()
                .map(|o| o.id),
            Some(OrderId(6))
        );
        assert_eq!(gate.kept(&keyed(9, 8, 1, 170, "k3")).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_key_expires_a_day_after_its_order_and_a_dropped_key_is_decided_afresh() {
        let gate = gate(3, 3).await;
        let day = IdempotencyKey::LIFETIME_MS;
        assert_eq!(left(gate.reserve(&keyed(1, 7, 1, 150, "k"), 150).await), 2);
        gate.configure(ProductId(1), SaleWindow::new(100, 2 * day).unwrap(), 3)
            .await
            .unwrap();
        // A day on, the key names a new buy.
        let later = 150 + day;
        assert_eq!(
            left(gate.reserve(&keyed(2, 7, 1, later, "k"), later).await),
            1
        );
        assert_eq!(
            replayed(gate.reserve(&keyed(3, 7, 1, later, "k"), later).await),
            OrderId(2)
        );
        // The order never became durable: its key goes with its units.
        gate.release(&keyed(2, 7, 1, later, "k")).await.unwrap();
        gate.drop_key(&keyed(2, 7, 1, later, "k")).await.unwrap();
        assert_eq!(
            left(gate.reserve(&keyed(4, 7, 1, later, "k"), later).await),
            1
        );
    }

    #[tokio::test]
    async fn a_loaded_product_replays_the_keyed_orders_it_was_given() {
        let gate = MemoryGate::new();
        gate.load(GateProduct {
            id: ProductId(1),
            window: SaleWindow::new(100, 200).unwrap(),
            paused: false,
            remaining: 0,
            per_user_limit: 1,
            buckets: StockBuckets::ONE,
            holdings: vec![(UserId(7), 1)],
            released: vec![],
            kept: vec![keyed(1, 7, 1, 120, "k")],
        })
        .await
        .unwrap();
        assert_eq!(
            replayed(gate.reserve(&keyed(2, 7, 1, 150, "k"), 150).await),
            OrderId(1)
        );
        assert_eq!(
            rejection(gate.reserve(&keyed(3, 7, 1, 150, "other"), 150).await),
            Rejection::LimitReached
        );
    }

    #[tokio::test]
    async fn an_unknown_product_is_not_loaded() {
        let gate = MemoryGate::new();
        assert_eq!(
            rejection(gate.reserve(&order(1, 1), 150).await),
            Rejection::NotLoaded
        );
    }
}
