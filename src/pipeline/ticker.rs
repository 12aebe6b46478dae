//! The once-a-second housekeeping of every process: read products other processes created or
//! changed, lift sold-out flags where another process's cancel brought stock back, and — on
//! the scheduler leader only — preheat products whose sale is near, cancel orders whose
//! payment window closed (returning their stock), make the refunds still due, drop the pay
//! answers kept for idempotency keys that have expired and spread again the stock buckets a
//! Redis resharding left uneven. The database
//! query is the deadline mechanism in embedded mode and the backstop behind the delay queue in
//! cluster mode, so a crash loses no deadline: the next tick after a restart finds every
//! overdue order.

use super::leader::Leadership;
use crate::sale::{RebuildWaits, SaleService};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Steps of the leader between two clean-ups of expired pay answers: a day's answers expire
/// over the day, so once a minute keeps few around without a write every second.
const STEPS_PER_CLEAN_UP: u64 = 60;

/// Steps of the leader between two checks that every product's stock buckets still sit evenly
/// on the Redis Cluster's masters: a resharding is rare, and the check reads the cluster's slots.
const STEPS_PER_RESPREAD: u64 = 5;

/// Starts the housekeeping loop. It stops between steps once `stop` turns true (or its sender
/// is gone): a cancel is never cut off between the database and the gate.
pub fn spawn(
    sale: Arc<SaleService>,
    mut leadership: Leadership,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut led: u64 = 0;
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                changed = stop.changed() => if changed.is_err() || *stop.borrow() { return },
            }
            if let Err(e) = sale.refresh_catalog().await {
                tracing::error!(error = ?e, "reading products failed");
            }
            sale.refresh_sold_out().await;
            if leadership.lead().await.is_none() {
                continue;
            }
            if let Err(e) = sale.preheat_due().await {
                if e.is::<RebuildWaits>() {
                    tracing::info!("{e}");
                } else {
                    tracing::error!(error = ?e, "preheat failed");
                }
            }
            match sale.expire_overdue().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(cancelled = n, "cancelled overdue orders"),
                Err(e) => tracing::error!(error = ?e, "cancelling overdue orders failed"),
            }
            match sale.retry_refunds().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(refunded = n, "made refunds that were due"),
                Err(e) => tracing::warn!(error = %e, "refunds due wait for the next step"),
            }
            if led.is_multiple_of(STEPS_PER_RESPREAD)
                && let Err(e) = sale.respread_uneven().await
            {
                tracing::warn!(error = %e, "spreading buckets again waits for the next check");
            }
            led += 1;
            if led.is_multiple_of(STEPS_PER_CLEAN_UP)
                && let Err(e) = sale.forget_expired_pay_answers().await
            {
                tracing::warn!(error = %e, "expired pay answers wait for the next clean-up");
            }
        }
    })
}
