//! The dashboard's reading of the sale: per product of the live and upcoming sales its units
//! sold, left, in flight (accepted, not stored yet) and paid, its outbox and the gate's drift
//! from the database; the buys of every server by outcome; the depths of the queues. A process
//! reads it at most once a second, however many dashboards and scrapes ask, and sets the
//! gauges of `/metrics` from that same reading.

use super::{BuyCounts, SaleService};
use crate::domain::{Millis, Product};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// The most products a reading covers, soonest sale first; more are not read live.
const MAX_PRODUCTS: usize = 50;

/// How long a reading is served before the next one is made.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// How many readings in a row a drift must show before it is reported. The pipeline moves
/// units between the outbox and the database while the two are read (see `reconcile.rs`), so
/// one reading may catch a passing drift; a real one lasts.
const DRIFT_READINGS: usize = 3;

/// One product as the dashboard shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ProductOverview {
    pub id: i64,
    pub name: String,
    pub stock_total: i64,
    /// Units taken by live orders, stored or not: the total less what is left.
    pub sold: i64,
    /// Units left to sell, the gate's live count once preheated.
    pub remaining: i64,
    /// Units the gate sold whose orders are not in the database yet.
    pub in_flight: i64,
    /// Orders in the outbox: its depth (cluster mode; an embedded gate has none).
    pub outbox: u64,
    /// Outbox entries no worker could store, set aside for an operator.
    pub dead: u64,
    /// Units in paid orders.
    pub paid: i64,
    /// The database's stock minus the gate's units left and in flight, as every one of the last
    /// [`DRIFT_READINGS`] readings showed it: 0 when they balance, as they should; `None` while
    /// the gate does not hold the product.
    pub drift: Option<i64>,
}

/// Whose buys an overview counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuysFrom {
    /// Every live server of the cluster.
    AllServers,
    /// This server's only: it runs alone, or the others' counts could not be read.
    ThisServer,
}

/// Messages ready in one queue.
#[derive(Debug, Clone, Serialize)]
pub struct QueueDepth {
    pub name: String,
    pub messages: u64,
}

/// What the dashboard shows at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    /// The server's time of the reading, so the page can turn counts into rates.
    pub at: Millis,
    /// Buys by outcome since their servers started, summed over `servers`.
    pub buys: BuyCounts,
    pub buys_from: BuysFrom,
    /// How many servers' buys are counted.
    pub servers: usize,
    pub products: Vec<ProductOverview>,
    /// The queues between the gate and the database; `None` when they could not be read,
    /// empty when the deployment has none.
    pub queues: Option<Vec<QueueDepth>>,
}

/// The latest reading, shared by every caller within its second.
#[derive(Default)]
pub(super) struct Readings(Mutex<Latest>);

#[derive(Default)]
struct Latest {
    /// When the last reading began, and the reading unless it failed.
    made: Option<(Instant, Option<Arc<Overview>>)>,
    /// The drifts each product of the last reading showed lately, oldest first.
    drifts: HashMap<i64, VecDeque<i64>>,
    /// The products whose gauges the last reading set, to zero them once they leave.
    gauged: Vec<i64>,
}

impl SaleService {
    /// The latest overview, read anew once the last is a second old. The lock is held while
    /// reading, so every caller of that second waits for the one reading and shares it: N open
    /// dashboards cost one reading a second, not N.
    pub async fn overview(&self) -> anyhow::Result<Arc<Overview>> {
        let mut latest = self.readings.0.lock().await;
        if let Some((made, reading)) = &latest.made
            && made.elapsed() < FRESH_FOR
        {
            return reading
                .clone()
                .ok_or_else(|| anyhow::anyhow!("the last reading of the sale failed"));
        }
        let began = Instant::now();
        let reading = self.read_overview(&mut latest).await.map(Arc::new);
        latest.made = Some((began, reading.as_ref().ok().cloned()));
        reading
    }

    /// Shares this server's buy counts, accepted units and orders answered `202` lately with
    /// the cluster's other servers; a server alone has no one to tell. Run once a second.
    pub async fn share_buys(&self) -> anyhow::Result<()> {
        match &self.fleet {
            Some(fleet) => {
                fleet
                    .share_buys(&self.buy_counts(), &self.accepted_share())
                    .await?;
                self.share_answers().await
            }
            None => Ok(()),
        }
    }

    async fn read_overview(&self, latest: &mut Latest) -> anyhow::Result<Overview> {
        let at = self.now();
        let (products, (buys, buys_from, servers), queues) =
            tokio::join!(self.read_products(at), self.everyones_buys(), self.queues());
        let mut products = products?;
        latest
            .drifts
            .retain(|id, _| products.iter().any(|p| p.id == *id));
        for product in &mut products {
            let drifts = latest.drifts.entry(product.id).or_default();
            product.drift = product.drift.map(|drift| lasting(drifts, drift));
            if product.drift.is_none() {
                drifts.clear();
            }
        }
        let overview = Overview {
            at,
            buys,
            buys_from,
            servers,
            products,
            queues,
        };
        record(&overview, &mut latest.gauged);
        Ok(overview)
    }

    /// The products whose sale has not ended, as the database and then the gate see them (the
    /// order `reconcile` reads them in).
    async fn read_products(&self, now: Millis) -> anyhow::Result<Vec<ProductOverview>> {
        let mut lines = Vec::new();
        for product in self
            .store
            .products()
            .await?
            .into_iter()
            .filter(|p| p.window.end > now)
            .take(MAX_PRODUCTS)
        {
            lines.push(self.product_overview(product).await?);
        }
        Ok(lines)
    }

    /// One product, its drift as this reading alone measured it.
    async fn product_overview(&self, product: Product) -> anyhow::Result<ProductOverview> {
        let gate = self.gate.audit(product.id).await?;
        let remaining = gate.map_or(product.stock, |g| g.remaining);
        Ok(ProductOverview {
            id: product.id.0,
            sold: product.stock_total - remaining,
            remaining,
            in_flight: gate.map_or(0, |g| g.in_flight_units),
            outbox: gate.map_or(0, |g| g.in_flight_orders),
            dead: gate.map_or(0, |g| g.dead),
            paid: self.store.paid_units(product.id).await?,
            drift: gate.map(|g| g.drift(product.stock)),
            stock_total: product.stock_total,
            name: product.name,
        })
    }

    /// The buys of every live server, this one's as of now; this server's alone when it has
    /// no fleet or the others cannot be read.
    async fn everyones_buys(&self) -> (BuyCounts, BuysFrom, usize) {
        let mut counts = self.buy_counts();
        let Some(fleet) = &self.fleet else {
            return (counts, BuysFrom::ThisServer, 1);
        };
        match fleet.others_buys().await {
            Ok(others) => {
                for (outcome, count) in others.iter().flatten() {
                    if let Some(slot) = counts.iter_mut().find(|(o, _)| o == outcome) {
                        slot.1 = slot.1.saturating_add(*count);
                    }
                }
                (counts, BuysFrom::AllServers, 1 + others.len())
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the other servers' buys");
                (counts, BuysFrom::ThisServer, 1)
            }
        }
    }

    /// The queues' depths: none alone, `None` when they cannot be read.
    async fn queues(&self) -> Option<Vec<QueueDepth>> {
        let Some(fleet) = &self.fleet else {
            return Some(Vec::new());
        };
        match fleet.queue_depths().await {
            Ok(depths) => Some(
                depths
                    .into_iter()
                    .map(|(name, messages)| QueueDepth { name, messages })
                    .collect(),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "reading the queues' depths");
                None
            }
        }
    }
}

/// Adds this reading's `drift` to a product's recent ones and returns the drift all of the
/// last [`DRIFT_READINGS`] show (the one nearest zero), or 0 when one of them balanced or they
/// disagree in sign.
fn lasting(recent: &mut VecDeque<i64>, drift: i64) -> i64 {
    recent.push_back(drift);
    while recent.len() > DRIFT_READINGS {
        recent.pop_front();
    }
    if recent.iter().all(|d| *d > 0) {
        recent.iter().copied().min().unwrap_or(0)
    } else if recent.iter().all(|d| *d < 0) {
        recent.iter().copied().max().unwrap_or(0)
    } else {
        0
    }
}

/// Sets the gauges of `/metrics` from a reading (they describe the whole cluster, so every
/// server reports the same figures): each product's outbox depth, dead entries and drift, each
/// queue's depth. A product no longer read has its gauges zeroed.
fn record(overview: &Overview, gauged: &mut Vec<i64>) {
    let now: Vec<i64> = overview.products.iter().map(|p| p.id).collect();
    for id in gauged.iter().filter(|id| !now.contains(id)) {
        set_product_gauges(*id, 0, 0, 0);
    }
    for p in &overview.products {
        set_product_gauges(p.id, p.outbox, p.dead, p.drift.unwrap_or(0));
    }
    *gauged = now;
    for queue in overview.queues.iter().flatten() {
        metrics::gauge!("seckill_queue_depth", "queue" => queue.name.clone())
            .set(queue.messages as f64);
    }
}

fn set_product_gauges(id: i64, outbox: u64, dead: u64, drift: i64) {
    let product = id.to_string();
    metrics::gauge!("seckill_outbox_depth", "product" => product.clone()).set(outbox as f64);
    metrics::gauge!("seckill_outbox_dead", "product" => product.clone()).set(dead as f64);
    metrics::gauge!("seckill_gate_drift", "product" => product).set(drift as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drift_is_reported_once_it_lasts_and_a_passing_one_never() {
        let mut recent = VecDeque::new();
        assert_eq!(lasting(&mut recent, 0), 0);
        // The pipeline moved an order between the two reads, once.
        assert_eq!(lasting(&mut recent, -1), 0);
        assert_eq!(lasting(&mut recent, 0), 0);
        // The database changed behind the gate's back: reported once every reading shows it.
        assert_eq!(lasting(&mut recent, 3), 0);
        assert_eq!(lasting(&mut recent, 4), 0);
        assert_eq!(lasting(&mut recent, 3), 3);
        assert_eq!(lasting(&mut recent, 5), 3);
        assert_eq!(lasting(&mut recent, -2), 0);
        assert_eq!(recent.len(), DRIFT_READINGS);
    }
}
