//! The server processes of a cluster and the queues between them, as the dashboard and the
//! gate's rebuild see them: each server shares its buy counts, so the dashboard of any one
//! shows the buys of all, and the units it accepted of each product, which outlive a Redis that
//! lost its data (they are in the servers' memory) and so tell what that Redis lost; the
//! message queues tell their depths. The deployment mode supplies it (Redis and RabbitMQ in
//! cluster mode); a process alone has none, and its dashboard shows its own buys.

use super::BuyCounts;
use crate::domain::{Millis, ProductId};
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

/// The other servers' buy counts, every server's accepted units and the queues' depths.
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

    /// Messages ready in each queue of the deployment, by the queue's name; none when it has
    /// no queues.
    async fn queue_depths(&self) -> anyhow::Result<Vec<(String, u64)>>;
}
