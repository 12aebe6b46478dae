//! Getting accepted orders into the database, and unpaid ones out of the way: group commit for
//! embedded mode; the outbox drain, the RabbitMQ relay and consumers for cluster mode; the
//! scheduler's leader lock and the loop that preheats sales and cancels overdue orders.

pub mod amqp;
pub mod drain;
pub mod group_commit;
pub mod leader;
pub mod ticker;
pub mod worker;

pub use group_commit::GroupCommit;
