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
//! Only a server with a fleet to share with (cluster mode) counts: a process alone makes every
//! order durable before it answers, so nothing it accepted can go unaccounted for, and its buys
//! skip the count.

use super::SaleService;
use crate::domain::{Millis, Order, OrderId, ProductId};
use crate::ids;
use crate::store::OrderSearch;
use std::collections::{HashMap, HashSet};

/// Orders of a product read from the database per page, newest first.
const PAGE: i64 = 1_000;

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
