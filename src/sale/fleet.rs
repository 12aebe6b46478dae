//! The server processes of a cluster and the queues between them, as the dashboard and the
//! gate's rebuild see them: each server shares its buy counts, so the dashboard of any one
//! shows the buys of all, and the units it accepted of each product and the orders it answered
//! `202` lately, which outlive a Redis that lost its data (they are in the servers' memory) and
//! so tell what that Redis lost; the message queues tell their depths. The deployment mode supplies it (Redis and RabbitMQ in
//! cluster mode); a process alone has none, and its dashboard shows its own buys.

use super::BuyCounts;
use crate::domain::{Millis, Order, OrderId, ProductId, Quantity, UserId};
use crate::ids;
use async_trait::async_trait;

/// One server's buys by outcome as it shared them: `(outcome, count)`.
pub type SharedBuys = Vec<(String, u64)>;

/// The units of each product one server accepted since it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The server's Snowflake node id, which its orders' ids carry.
    pub node: u16,
    /// When it started (Unix ms): every order it made has an id made at or after this.
    pub since: Millis,
    /// Units accepted, by product.
    pub units: Vec<(ProductId, i64)>,
}

/// What the live servers shared of their accepted units.
#[derive(Debug, Clone, Default)]
pub struct AcceptedShares {
    /// One entry per live server.
    pub servers: Vec<Accepted>,
    /// Whether every live server is among them. A Redis that lost the shares starts again from
    /// nothing, and a live server is missing until it has shared again.
    pub complete: bool,
}

/// An order a server answered `202`, as it shares it: what `seckill reconcile` prints of an
/// order answered and then not found. Its id tells which server made it and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The order's id.
    pub order: OrderId,
    /// What was bought.
    pub product: ProductId,
    /// Who bought it.
    pub user: UserId,
    /// How many units.
    pub quantity: Quantity,
}

impl Answered {
    /// What is shared of `order`.
    pub fn of(order: &Order) -> Self {
        Self {
            order: order.id,
            product: order.product_id,
            user: order.user_id,
            quantity: order.quantity,
        }
    }

    /// The Snowflake node id of the server that made the order and answered it.
    pub fn server(&self) -> u16 {
        ids::node_of(self.order.0)
    }

    /// When the order was made (Unix ms): just before the gate took it and its buyer was
    /// answered.
    pub fn made_at(&self) -> Millis {
        ids::made_at(self.order.0)
    }
}

/// Orders a server answered `202` since its last share, to share: its share sequence numbers
/// `from..to` (the first order's and one past the last's, counting every order it answered
/// since it started), or, with `from` `None`, every order it still holds, `to` being one past
/// the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswersToShare {
    /// Where the fleet's copy must end for these to follow on it; `None`: every order held,
    /// which follows on anything.
    pub from: Option<u64>,
    /// One past the last order's sequence number.
    pub to: u64,
    /// The orders, oldest first.
    pub orders: Vec<Answered>,
    /// Orders made before this (Unix ms, this server's clock) are too old to keep.
    pub keep_since: Millis,
}

/// The orders the servers answered `202` lately, as the fleet holds them.
#[derive(Debug, Clone, Default)]
pub struct AnswersShared {
    /// The node ids of the servers whose answers the fleet holds, since their last share
    /// followed on what it held (or replaced it).
    pub servers: Vec<u16>,
    /// Their orders, in no particular order.
    pub orders: Vec<Answered>,
}

/// The other servers' buy counts, every server's accepted units and recent answers, and the
/// queues' depths.
#[async_trait]
pub trait Fleet: Send + Sync + 'static {
    /// Shares this server's buy counts and accepted units with the others. Each server shares
    /// them once a second; counts not shared again for a few seconds are dropped (their server
    /// has stopped).
    async fn share_buys(&self, counts: &BuyCounts, accepted: &Accepted) -> anyhow::Result<()>;

    /// The counts the other live servers shared last, one list a server.
    async fn others_buys(&self) -> anyhow::Result<Vec<SharedBuys>>;

    /// The accepted units every live server shared last, this one's included.
    async fn accepted(&self) -> anyhow::Result<AcceptedShares>;

    /// Adds this server's orders answered `202` lately to what the fleet holds of them, and
    /// forgets the ones too old or beyond the bound. `Ok(false)`: they do not follow on what it
    /// holds (it lost its data, or missed a share), so nothing was added: the caller shares
    /// every order it holds instead.
    async fn share_answers(&self, answers: &AnswersToShare) -> anyhow::Result<bool>;

    /// The orders every server answered `202` lately, as shared.
    async fn answered(&self) -> anyhow::Result<AnswersShared>;

    /// Messages ready in each queue of the deployment, by the queue's name; none when it has
    /// no queues.
    async fn queue_depths(&self) -> anyhow::Result<Vec<(String, u64)>>;
}
