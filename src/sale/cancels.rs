//! Cancelling an order that awaits payment: at its buyer's request, or once its payment window
//! closed (the overdue sweep, and the delay queue's deadline). A buyer who went to pay is asked
//! about at the provider first; after the cancel, the trade is closed there. The cancel itself
//! is `orders.rs`'s `cancel_now`, so the stock goes back once.

use super::SaleService;
use super::orders::OrderError;
use super::payments::Asked;
use crate::domain::{Order, OrderId, OrderStatus, UserId};
use crate::store::Overdue;
use futures_util::{StreamExt, stream};

/// What became of one overdue order.
enum Expired {
    Cancelled,
    /// Already paid or cancelled by someone else.
    Settled,
    /// Left awaiting payment for the next sweep.
    Left,
}

/// How many overdue orders one sweep step reads at a time.
const SWEEP_BATCH: i64 = 500;

/// How many of them it cancels at once.
const SWEEP_CANCELS_AT_ONCE: usize = 64;

impl SaleService {
    /// Cancels an unpaid order at the buyer's request; the stock goes back on sale and the
    /// buyer may buy again. Cancelling a cancelled order again is a no-op success.
    pub async fn cancel(&self, user: UserId, id: OrderId) -> Result<Order, OrderError> {
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => return Err(OrderError::AlreadyPaid),
            OrderStatus::Cancelled | OrderStatus::Refunded => return Ok(order),
            OrderStatus::AwaitingPayment => {}
        }
        if let Some(cancelled) = self.cancel_now(id).await? {
            if cancelled.pay_started_at.is_some() {
                self.close_trade(id).await;
            }
            return Ok(cancelled);
        }
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => Err(OrderError::AlreadyPaid),
            _ => Ok(order),
        }
    }

    /// Cancels every order whose payment window has closed. Returns how many this call
    /// cancelled. Run by the ticker; tests call it after moving the clock.
    ///
    /// A sale's unpaid orders fall due together, so many cancels run at once: on SQLite they
    /// share transactions and log syncs. Not more at once: on a database server each cancel
    /// holds a pooled connection that shoppers' requests wait for. An order whose buyer went
    /// to pay is first looked up at the provider; one it cannot be asked about stays for the
    /// next sweep, so a sweep stops when a whole step settled nothing.
    pub async fn expire_overdue(&self) -> Result<usize, OrderError> {
        let now = self.now();
        let mut cancelled = 0;
        loop {
            let overdue = self.store.overdue_orders(now, SWEEP_BATCH).await?;
            let outcomes: Vec<_> = stream::iter(overdue.iter().copied())
                .map(|overdue| self.expire_checked(overdue))
                .buffer_unordered(SWEEP_CANCELS_AT_ONCE)
                .collect()
                .await;
            let mut settled = 0;
            for outcome in outcomes {
                match outcome? {
                    Expired::Cancelled => cancelled += 1,
                    Expired::Settled => settled += 1,
                    Expired::Left => {}
                }
            }
            if (overdue.len() as i64) < SWEEP_BATCH || cancelled + settled == 0 {
                return Ok(cancelled);
            }
        }
    }

    /// Cancels one order if its payment window has closed: the fast path of deadlines (the
    /// delay queue), with the sweep as the backstop.
    pub async fn expire(&self, id: OrderId) -> Result<(), OrderError> {
        if let Some(order) = self.store.order(id).await?
            && order.is_overdue(self.now())
        {
            let pay_started = order.pay_started_at.is_some();
            self.expire_checked(Overdue { id, pay_started }).await?;
        }
        Ok(())
    }

    /// Cancels an overdue order, unless the provider says its buyer paid (then the payment is
    /// settled) or cannot be asked (then it is left).
    async fn expire_checked(&self, overdue: Overdue) -> Result<Expired, OrderError> {
        if overdue.pay_started {
            match self.ask_provider(overdue.id).await? {
                Asked::Unpaid => {}
                Asked::Settled => return Ok(Expired::Settled),
                Asked::Unknown => return Ok(Expired::Left),
            }
        }
        match self.cancel_now(overdue.id).await? {
            Some(_) => {
                metrics::counter!("seckill_deadline_cancels_total").increment(1);
                if overdue.pay_started {
                    self.close_trade(overdue.id).await;
                }
                Ok(Expired::Cancelled)
            }
            None => Ok(Expired::Settled),
        }
    }
}
