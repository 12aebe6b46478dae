//! What the gate accepted that the database and the outbox cannot show: each server counts, in
//! its own memory, the units of each product it accepted since it started, and shares the
//! counts every second (see [`Fleet`](super::Fleet)). A Redis that lost its data loses the
//! outbox with it, but not these counts: the servers share them again within a second. Against
//! them, per server, the orders the database holds and the outbox still holds (an order's id
//! names its server and when it was made) leave the units **unaccounted for**: on their way
//! through a queue to the database, in a worker's hands, or lost with Redis.
//!
//! A gate rebuilt after Redis lost its data subtracts them, so it never sells what those orders
//! hold (see `SaleService::preheat`), and waits until every live server has shared its counts
//! again; `seckill reconcile` reports them.
//!
//! Each server also holds the orders it answered `202` lately (see `answered.rs`) and shares
//! those new since its last share, all of them again when Redis lost them, so that
//! `seckill reconcile` can name the orders answered and missing, not only count their units.
//!
//! Only a server with a fleet to share with (cluster mode) counts: a process alone makes every
//! order durable before it answers, so nothing it accepted can go unaccounted for, and its buys
//! skip the count.

use super::{Answered, SaleService};
use crate::domain::{Millis, Order, OrderId, ProductId};
use crate::ids;
use crate::store::OrderSearch;
use std::collections::{HashMap, HashSet};

/// Orders of a product read from the database per page, newest first.
const PAGE: i64 = 1_000;

/// Most orders answered `202` one share carries: a share after Redis lost them carries every
/// order held, in calls this size, so that no one call keeps Redis busy long.
const SHARED_PER_CALL: usize = 2_000;

impl SaleService {
    /// This process's accepted units, to share.
    pub(super) fn accepted_share(&self) -> super::Accepted {
        super::Accepted {
            node: self.ids.node(),
            since: self.started_at,
            units: self
                .accepted
                .as_ref()
                .map_or_else(Vec::new, super::buy::AcceptedUnits::snapshot),
        }
    }

    /// Shares the orders this process answered `202` since its last share, in calls of at most
    /// [`SHARED_PER_CALL`]; every order it holds when the fleet lost them (or never had them).
    /// Run once a second, after the accepted units.
    pub(super) async fn share_answers(&self) -> anyhow::Result<()> {
        let (Some(fleet), Some(accepted)) = (&self.fleet, &self.accepted) else {
            return Ok(());
        };
        // A full share after one that did not follow, then what it holds, call by call.
        for _ in 0..super::answered::HELD / SHARED_PER_CALL + 2 {
            let share = accepted.answers_to_share(self.now(), SHARED_PER_CALL);
            let followed = fleet.share_answers(&share).await?;
            accepted.answers_shared(share.to, followed);
            if followed && share.orders.len() < SHARED_PER_CALL {
                break;
            }
        }
        Ok(())
    }

    /// The orders of `id` the servers answered `202` lately that are neither in the outbox nor
    /// in the database: answered, then lost with a Redis that lost its data (or on their way
    /// through a queue, or buried as dead entries). `Ok(None)`: not known, since the fleet does
    /// not hold every live server's answers (Redis lost them lately and not every server has
    /// shared again). A process alone (embedded mode) stores every order before it answers.
    ///
    /// The reads go in this order: the servers' answers, then the outbox, then the database.
    /// An order is in the outbox before its buyer is answered, so before it can be among the
    /// answers read, and it leaves the outbox only once it is stored (with RabbitMQ too: the
    /// entry stays until a consumer stored its order). An order that moves from the outbox to
    /// the database between the two reads is therefore seen in one or the other, never in
    /// neither; read the other way round, it could be in the outbox when the database is read
    /// and gone from it when the outbox is, and would be listed though stored. So every order
    /// listed was answered `202` and is stored nowhere, unless a queue still carries it.
    pub async fn missing_orders(&self, id: ProductId) -> anyhow::Result<Option<Vec<Answered>>> {
        let Some(fleet) = &self.fleet else {
            return Ok(Some(Vec::new()));
        };
        let answers = fleet.answered().await?;
        let shares = fleet.accepted().await?;
        if !shares.complete
            || shares
                .servers
                .iter()
                .any(|share| !answers.servers.contains(&share.node))
        {
            return Ok(None);
        }
        let mut candidates: HashMap<OrderId, Answered> = answers
            .orders
            .into_iter()
            .filter(|answered| answered.product == id)
            .map(|answered| (answered.order, answered))
            .collect();
        if candidates.is_empty() {
            return Ok(Some(Vec::new()));
        }
        for order in self.gate.outbox(id).await? {
            candidates.remove(&order.id);
        }
        let ids: Vec<OrderId> = candidates.keys().copied().collect();
        for stored in self.store.stored_among(&ids).await? {
            candidates.remove(&stored);
        }
        let mut missing: Vec<Answered> = candidates.into_values().collect();
        missing.sort_by_key(|answered| answered.order.0);
        Ok(Some(missing))
    }

    /// Units of `id` the live servers accepted that are neither in the database nor among
    /// `outbox` (the product's outbox, read by the caller). `Ok(None)`: not known yet, since
    /// Redis lost the servers' shares lately and not every live server has shared again. A
    /// process alone (embedded mode) makes every order durable before it answers: nothing of it
    /// is unaccounted for. A server's orders stored without its count (a reply lost after Redis
    /// took the order) never make another server's missing units look smaller.
    pub async fn unaccounted(
        &self,
        id: ProductId,
        outbox: &[Order],
    ) -> anyhow::Result<Option<i64>> {
        let Some(fleet) = &self.fleet else {
            return Ok(Some(0));
        };
        let shares = fleet.accepted().await?;
        if !shares.complete {
            return Ok(None);
        }
        let counted: Vec<(u16, Millis, i64)> = shares
            .servers
            .iter()
            .filter_map(|share| {
                let units = share.units.iter().find(|(p, _)| *p == id)?.1;
                Some((share.node, share.since, units))
            })
            .filter(|(_, _, units)| *units > 0)
            .collect();
        let Some(oldest) = counted.iter().map(|(_, since, _)| *since).min() else {
            return Ok(Some(0));
        };
        // Each order once: one stored may still be in the outbox, not deleted yet.
        let mut seen: HashSet<OrderId> = HashSet::new();
        let mut held: HashMap<(u16, Millis), i64> = HashMap::new();
        let mut count = |order: &Order| {
            if !seen.insert(order.id) {
                return;
            }
            let (node, made) = (ids::node_of(order.id.0), ids::made_at(order.id.0));
            for (server, since, _) in &counted {
                if *server == node && made >= *since {
                    *held.entry((*server, *since)).or_default() += i64::from(order.quantity.get());
                }
            }
        };
        let mut before = None;
        loop {
            let page = self
                .store
                .search_orders(&OrderSearch {
                    user: None,
                    product: Some(id),
                    status: None,
                    before,
                    limit: PAGE,
                })
                .await?;
            page.iter().for_each(&mut count);
            match page.last() {
                Some(last) if page.len() as i64 == PAGE && ids::made_at(last.id.0) >= oldest => {
                    before = Some(last.id);
                }
                _ => break,
            }
        }
        outbox.iter().for_each(&mut count);
        Ok(Some(
            counted
                .iter()
                .map(|(node, since, units)| {
                    (units - held.get(&(*node, *since)).copied().unwrap_or(0)).max(0)
                })
                .sum(),
        ))
    }
}
