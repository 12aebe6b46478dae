//! Taking the money: a signed pay URL for the buyer, then the provider's word (a notification,
//! or its answer when asked) applied exactly once. An order becomes paid only on that word,
//! checked against the order; money that arrives for a cancelled order goes back. A pay call
//! with an `Idempotency-Key` keeps its answer in the database, so a retry gets the same pay URL.

use super::SaleService;
use super::orders::{OrderError, QueuedPayment};
use crate::domain::{IdempotencyKey, Millis, Order, OrderId, OrderStatus, UserId};
use crate::payment::{Channel, PayRequest, PaymentProvider, Trade};
use crate::store::{PayAnswer, PaymentRecord, StoreResult};
use std::net::SocketAddr;

/// Where the buyer pays an order.
#[derive(Debug, Clone)]
pub struct PayLink {
    pub order_id: OrderId,
    /// The provider's name (`sandbox` or `alipay`).
    pub provider: &'static str,
    pub pay_url: String,
}

/// What a provider's word did to its order.
#[derive(Debug)]
pub enum Settled {
    /// The order is paid (by this word, or already before it).
    Paid(Order),
    /// The order had been cancelled: the money went back.
    Refunded(Order),
    /// The trade is not paid (`WAIT_BUYER_PAY`, `TRADE_CLOSED`): nothing to do.
    NotPaid,
    /// The order is still on its way to the database: the payment waits in the paid queue.
    Queued,
}

/// What the provider said about an overdue order.
pub(super) enum Asked {
    /// Not paid: the order may be cancelled.
    Unpaid,
    /// Paid after all, and settled so.
    Settled,
    /// Not known now (the gateway cannot be reached, or disagrees with the order).
    Unknown,
}

/// How many refunds due one read of the database finds.
const REFUNDS_AT_ONCE: i64 = 100;

impl SaleService {
    /// The provider, or why there is none: a server without one never takes payments for free.
    pub(super) fn provider(&self) -> Result<&dyn PaymentProvider, OrderError> {
        self.provider.as_deref().ok_or(OrderError::NotConfigured)
    }

    /// The provider's name, when there is one.
    pub fn provider_name(&self) -> Option<&'static str> {
        self.provider.as_deref().map(PaymentProvider::name)
    }

    /// A signed URL at which `user` pays their order. Paying happens at the provider; the order
    /// is paid when its word arrives ([`SaleService::notified`]).
    pub async fn pay(
        &self,
        user: UserId,
        id: OrderId,
        channel: Channel,
        reached_at: Option<SocketAddr>,
    ) -> Result<PayLink, OrderError> {
        let order = self.order_of(user, id).await?;
        let provider = self.provider()?;
        match order.status {
            OrderStatus::Paid => return Err(OrderError::AlreadyPaid),
            OrderStatus::Cancelled | OrderStatus::Refunded => return Err(OrderError::Cancelled),
            OrderStatus::AwaitingPayment if order.is_overdue(self.now()) => {
                return Err(OrderError::WindowClosed);
            }
            OrderStatus::AwaitingPayment => {}
        }
        if order.pay_started_at.is_none() {
            self.store.mark_pay_started(id, self.now()).await?;
        }
        let pay_url = provider
            .pay_url(&PayRequest {
                order: id,
                subject: &order.product_name,
                total: order.total,
                expires_at: order.pay_before,
                channel,
                reached_at,
            })
            .map_err(OrderError::Unavailable)?;
        Ok(PayLink {
            order_id: id,
            provider: provider.name(),
            pay_url,
        })
    }

    /// Applies a notification from the provider: verified (signature, app id, seller id),
    /// checked against its order (which must exist, for the same amount), recorded, and
    /// applied once however often it comes.
    pub async fn notified(&self, params: &[(String, String)]) -> Result<Settled, OrderError> {
        let notification = match self.provider()?.verify_notification(params) {
            Ok(notification) => notification,
            Err(e) => {
                let refused = Err(OrderError::Untrusted(e));
                count_payment(&refused);
                return refused;
            }
        };
        self.settle(&notification.trade, &notification.notify_id)
            .await
    }

    /// The order a buyer's browser brings back from the provider, once its parameters verify.
    /// What it shows is the order as stored: the notification, not the return, pays.
    pub async fn returned(&self, params: &[(String, String)]) -> Result<Order, OrderError> {
        let id = self
            .provider()?
            .verify_return(params)
            .map_err(OrderError::Untrusted)?;
        self.store.order(id).await?.ok_or(OrderError::NotFound)
    }

    /// Applies a provider's word about `trade`, recorded under `key`, and counts what it did.
    async fn settle(&self, trade: &Trade, key: &str) -> Result<Settled, OrderError> {
        let settled = self.apply_word(trade, key).await;
        count_payment(&settled);
        settled
    }

    async fn apply_word(&self, trade: &Trade, key: &str) -> Result<Settled, OrderError> {
        let Some(order) = self.store.order(trade.order).await? else {
            return match self.missing(trade.order) {
                OrderError::Pending if trade.status.is_paid() => self.queue(trade, key).await,
                missing => Err(missing),
            };
        };
        if trade.total != order.total {
            return Err(OrderError::Mismatch("total_amount"));
        }
        self.store
            .record_payment(&PaymentRecord {
                key,
                order: order.id,
                provider: self.provider()?.name(),
                trade_no: &trade.trade_no,
                amount: trade.total,
                trade_status: trade.status.as_str(),
                paid: trade.status.is_paid(),
                received_at: self.now(),
            })
            .await?;
        if !trade.status.is_paid() {
            return Ok(Settled::NotPaid);
        }
        self.apply_paid(order, trade.paid_at.unwrap_or_else(|| self.now()))
            .await
    }

    /// Hands a paid trade whose order is still on its way to the paid queue; without one, the
    /// provider is told to come back later.
    async fn queue(&self, trade: &Trade, key: &str) -> Result<Settled, OrderError> {
        let queue = self.payments.as_ref().ok_or(OrderError::Pending)?;
        let payment = QueuedPayment {
            trade: trade.clone(),
            key: key.to_owned(),
        };
        queue
            .enqueue(&payment)
            .await
            .map_err(OrderError::Unavailable)?;
        Ok(Settled::Queued)
    }

    /// Applies a payment from the paid queue once its order is stored (`Pending` until then).
    pub async fn apply_queued(&self, payment: &QueuedPayment) -> Result<Settled, OrderError> {
        if self.store.order(payment.trade.order).await?.is_none() {
            return Err(self.missing(payment.trade.order));
        }
        self.settle(&payment.trade, &payment.key).await
    }

    /// Money arrived for `order`, paid at `at`: the order is paid if it still awaits payment
    /// and its window was open then; if it was (or now is) cancelled, the money goes back.
    async fn apply_paid(&self, order: Order, at: Millis) -> Result<Settled, OrderError> {
        let id = order.id;
        match order.status {
            OrderStatus::Paid => return Ok(Settled::Paid(order)),
            OrderStatus::Refunded => return Ok(Settled::Refunded(order)),
            OrderStatus::Cancelled => return self.refund(order).await.map(Settled::Refunded),
            OrderStatus::AwaitingPayment => {}
        }
        if self.store.mark_paid(id, at).await? {
            return Ok(Settled::Paid(Order {
                status: OrderStatus::Paid,
                paid_at: Some(at),
                ..order
            }));
        }
        // Lost a race with a cancel, or paid after the window closed.
        let order = self.stored(id).await?;
        match order.status {
            OrderStatus::Paid => Ok(Settled::Paid(order)),
            OrderStatus::Refunded => Ok(Settled::Refunded(order)),
            OrderStatus::Cancelled => self.refund(order).await.map(Settled::Refunded),
            OrderStatus::AwaitingPayment => {
                let order = match self.cancel_now(id).await? {
                    Some(cancelled) => cancelled,
                    None => self.stored(id).await?,
                };
                Box::pin(self.apply_paid(order, at)).await
            }
        }
    }

    /// Sends the money for a cancelled order back (the order's stock went back on sale at its
    /// cancel, once) and marks the order refunded. The provider refunds one order once
    /// however often it is asked, so a retry after a failure is safe.
    pub(super) async fn refund(&self, order: Order) -> Result<Order, OrderError> {
        self.provider()?
            .refund(order.id, order.total)
            .await
            .map_err(|e| OrderError::Unavailable(e.into()))?;
        self.store.mark_refunded(order.id, self.now()).await?;
        tracing::info!(order = order.id.0, "money sent back: refunded");
        Ok(Order {
            status: OrderStatus::Refunded,
            ..order
        })
    }

    /// Makes the refunds still due (a refund that failed when its notification came, or an
    /// operator's the provider could not take at once). Run by the ticker; returns how many it
    /// made. A refund the provider does not take holds up no other: it waits (see
    /// [`backoff`](super::backoff)) while the others are made. A failing database ends the
    /// step, for the next one.
    pub async fn retry_refunds(&self) -> Result<usize, OrderError> {
        if self.provider.is_none() {
            return Ok(0);
        }
        let mut due = Vec::new();
        loop {
            let after = due.last().copied().unwrap_or(OrderId(0));
            let page = self.store.refunds_due(after, REFUNDS_AT_ONCE).await?;
            let last_page = (page.len() as i64) < REFUNDS_AT_ONCE;
            due.extend(page);
            if last_page {
                break;
            }
        }
        self.refund_backoff
            .keep_only(&due.iter().copied().collect());
        let mut refunded = 0;
        for id in due {
            let now = std::time::Instant::now();
            if !self.refund_backoff.ready(id, now) {
                continue;
            }
            let order = self.stored(id).await?;
            if order.status != OrderStatus::Cancelled {
                self.refund_backoff.forget(id);
                continue;
            }
            match self.refund(order).await {
                Ok(_) => {
                    self.refund_backoff.forget(id);
                    refunded += 1;
                }
                Err(OrderError::Unavailable(e)) => {
                    let wait = self.refund_backoff.failed(id, now);
                    tracing::warn!(order = id.0, ?wait, error = %e, "the provider did not take a refund: it is asked again later");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(refunded)
    }

    /// Before an overdue order is cancelled: asks the provider whether the buyer paid after
    /// all, and settles a paid trade.
    pub(super) async fn ask_provider(&self, id: OrderId) -> Result<Asked, OrderError> {
        let Some(provider) = &self.provider else {
            return Ok(Asked::Unpaid);
        };
        match provider.query(id).await {
            Ok(Some(trade)) if trade.status.is_paid() => {
                let key = format!("query:{}", trade.trade_no);
                match self.settle(&trade, &key).await {
                    Ok(_) => Ok(Asked::Settled),
                    Err(e @ OrderError::Mismatch(_)) => {
                        tracing::warn!(order = id.0, error = %e, "the provider's trade does not match the order: left for an operator");
                        Ok(Asked::Unknown)
                    }
                    Err(e) => Err(e),
                }
            }
            Ok(_) => Ok(Asked::Unpaid),
            Err(e) => {
                tracing::warn!(order = id.0, error = %e, "cannot ask the payment gateway: the order waits for the next sweep");
                Ok(Asked::Unknown)
            }
        }
    }

    /// After a cancel: closes the order's trade at the provider, so it takes no payment for
    /// it. Best effort: a payment that still arrives is refunded.
    pub(super) async fn close_trade(&self, id: OrderId) {
        if let Some(provider) = &self.provider
            && let Err(e) = provider.close(id).await
        {
            tracing::warn!(order = id.0, error = %e, "closing the trade failed");
        }
    }

    /// [`SaleService::pay`] with an idempotency key: the first call's answer is kept, and a
    /// retry (the same buyer and key, for the same order and channel, within the key's
    /// lifetime) gets it again, whatever became of the order since; the key sent for another
    /// order or channel is refused ([`OrderError::KeyReused`]).
    pub async fn pay_with_key(
        &self,
        user: UserId,
        id: OrderId,
        channel: Channel,
        reached_at: Option<SocketAddr>,
        key: Option<IdempotencyKey>,
    ) -> Result<PayLink, OrderError> {
        let Some(key) = key else {
            return self.pay(user, id, channel, reached_at).await;
        };
        let now = self.now();
        let kept = self.store.pay_answer(user, &key).await?;
        if let Some(kept) = kept.filter(|kept| IdempotencyKey::is_live(kept.created_at, now)) {
            return self.pay_replayed(&kept, id, channel);
        }
        let link = self.pay(user, id, channel, reached_at).await?;
        let answer = PayAnswer {
            user,
            key,
            order: id,
            channel: channel.as_str().to_owned(),
            pay_url: link.pay_url,
            created_at: now,
        };
        self.store.keep_pay_answer(&answer).await?;
        // A retry that ran alongside may have kept its answer first: all answer with that one.
        let kept = self.store.pay_answer(user, &answer.key).await?;
        self.pay_replayed(kept.as_ref().unwrap_or(&answer), id, channel)
    }

    /// A kept pay answer, for a call asking to pay order `id` through `channel`.
    fn pay_replayed(
        &self,
        kept: &PayAnswer,
        id: OrderId,
        channel: Channel,
    ) -> Result<PayLink, OrderError> {
        if kept.order != id || kept.channel != channel.as_str() {
            return Err(OrderError::KeyReused);
        }
        Ok(PayLink {
            order_id: id,
            provider: self.provider_name().ok_or(OrderError::NotConfigured)?,
            pay_url: kept.pay_url.clone(),
        })
    }

    /// Drops the kept pay answers whose keys' lifetime has passed; how many. Run by the
    /// ticker.
    pub async fn forget_expired_pay_answers(&self) -> StoreResult<u64> {
        let before = self.now() - IdempotencyKey::LIFETIME_MS;
        self.store.forget_pay_answers(before).await
    }
    /// An order that must be in the database.
    async fn stored(&self, id: OrderId) -> Result<Order, OrderError> {
        self.store.order(id).await?.ok_or(OrderError::NotFound)
    }
}

/// Counts a provider's word under what it did (`seckill_payments_total`): `refused` is a word
/// that is not the provider's or disagrees with its order, `failed` one not applied on our
/// side (the provider sends it again).
fn count_payment(settled: &Result<Settled, OrderError>) {
    let counter = match settled {
        Ok(Settled::Paid(_)) => metrics::counter!("seckill_payments_total", "result" => "paid"),
        Ok(Settled::Refunded(_)) => {
            metrics::counter!("seckill_payments_total", "result" => "refunded")
        }
        Ok(Settled::NotPaid) => {
            metrics::counter!("seckill_payments_total", "result" => "not_paid")
        }
        Ok(Settled::Queued) => metrics::counter!("seckill_payments_total", "result" => "queued"),
        Err(OrderError::Untrusted(_) | OrderError::Mismatch(_)) => {
            metrics::counter!("seckill_payments_total", "result" => "refused")
        }
        Err(_) => metrics::counter!("seckill_payments_total", "result" => "failed"),
    };
    counter.increment(1);
}
