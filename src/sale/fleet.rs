//! The server processes of a cluster and the queues between them, as the dashboard sees them:
//! each server shares its buy counts, so the dashboard of any one shows the buys of all, and
//! the message queues tell their depths. The deployment mode supplies it (Redis and RabbitMQ in
//! cluster mode); a process alone has none, and its dashboard shows its own buys.

use super::BuyCounts;
use async_trait::async_trait;

/// One server's buys by outcome as it shared them: `(outcome, count)`.
pub type SharedBuys = Vec<(String, u64)>;

/// The other servers' buy counts and the queues' depths.
#[async_trait]
pub trait Fleet: Send + Sync + 'static {
    /// Shares this server's buy counts with the others. Each server shares them once a second;
    /// counts not shared again for a few seconds are dropped (their server has stopped).
    async fn share_buys(&self, counts: &BuyCounts) -> anyhow::Result<()>;

    /// The counts the other live servers shared last, one list a server.
    async fn others_buys(&self) -> anyhow::Result<Vec<SharedBuys>>;

    /// Messages ready in each queue of the deployment, by the queue's name; none when it has
    /// no queues.
    async fn queue_depths(&self) -> anyhow::Result<Vec<(String, u64)>>;
}
