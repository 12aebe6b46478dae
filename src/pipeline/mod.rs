//! Getting accepted orders into the database, and unpaid ones out of the way: each mode's
//! `sale::Durability` side by side ([`GroupCommit`] for embedded mode, [`Outboxed`] for cluster
//! mode); the outbox drain, the RabbitMQ relay and consumers for cluster mode's worker; the
//! scheduler's leader lock and the loop that preheats sales and cancels overdue orders; the
//! servers' shared buy counts and the queues' depths, for the dashboard.

pub mod amqp;
pub mod drain;
pub mod fleet;
pub mod group_commit;
pub mod leader;
mod outboxed;
pub mod ticker;
pub mod worker;

pub use group_commit::GroupCommit;
pub use outboxed::Outboxed;
