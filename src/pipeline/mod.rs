//! Getting accepted orders into the database, and unpaid ones out of the way: group commit for
//! embedded mode and the loops that cancel overdue orders and preheat sales.

pub mod group_commit;
pub mod ticker;

pub use group_commit::GroupCommit;
