//! Snowflake ids: order ids made in the process, unique without asking the database, roughly
//! ordered by time, 64 bits.
//!
//! Layout: 41 bits of milliseconds since [`EPOCH_MS`], 10 bits of node id, 12 bits of sequence.
//! The timestamp and sequence live together in one atomic word, so threads never take a lock and
//! never get the same id. If the clock goes backwards the generator keeps counting from the last
//! time it issued (borrowing from the future) instead of waiting or repeating: ids stay unique
//! and increasing.

use crate::clock::SharedClock;
use std::sync::atomic::{AtomicU64, Ordering};

/// 2024-01-01T00:00:00Z: the ids' zero. 41 bits of milliseconds last until 2093.
pub const EPOCH_MS: i64 = 1_704_067_200_000;
const NODE_BITS: u32 = 10;
const SEQUENCE_BITS: u32 = 12;
/// The largest node id (1023): one per process that makes ids at the same time.
pub const MAX_NODE_ID: u16 = (1 << NODE_BITS) - 1;

/// Makes ids for one node.
pub struct Snowflake {
    node: u64,
    clock: SharedClock,
    /// `(ms since EPOCH_MS) << SEQUENCE_BITS | sequence` of the last id issued. A sequence that
    /// overflows carries into the milliseconds, which is exactly "move to the next millisecond".
    last: AtomicU64,
}

/// Why a node id was refused.
#[derive(Debug, thiserror::Error)]
#[error("node id must be at most {MAX_NODE_ID}")]
pub struct InvalidNodeId;

impl Snowflake {
    /// A generator for `node`, which must be unique among the processes running at once.
    pub fn new(node: u16, clock: SharedClock) -> Result<Self, InvalidNodeId> {
        if node > MAX_NODE_ID {
            return Err(InvalidNodeId);
        }
        Ok(Self {
            node: u64::from(node),
            clock,
            last: AtomicU64::new(0),
        })
    }

    /// The next id.
    pub fn next_id(&self) -> i64 {
        let now = u64::try_from(self.clock.now_ms() - EPOCH_MS).unwrap_or(0);
        let mut current = self.last.load(Ordering::Relaxed);
        loop {
            let next = if now > current >> SEQUENCE_BITS {
                now << SEQUENCE_BITS
            } else {
                current + 1
            };
            match self.last.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return self.compose(next),
                Err(actual) => current = actual,
            }
        }
    }

    /// The node id this generator stamps into its ids.
    pub fn node(&self) -> u16 {
        self.node as u16
    }

    fn compose(&self, state: u64) -> i64 {
        let millis = state >> SEQUENCE_BITS;
        let sequence = state & ((1 << SEQUENCE_BITS) - 1);
        let id = (millis << (NODE_BITS + SEQUENCE_BITS)) | (self.node << SEQUENCE_BITS) | sequence;
        // 41 bits of time keep the top bit clear until 2093, so the id is a positive i64.
        id as i64
    }
}

/// When an id was made (Unix ms), read back from its time bits: lets a process tell an order
/// that may still be on its way to the database from one that never existed.
pub fn made_at(id: i64) -> crate::domain::Millis {
    (id >> (NODE_BITS + SEQUENCE_BITS)) + EPOCH_MS
}

/// The node whose generator made an id, read back from its node bits: with [`made_at`], tells
/// which process made an order and whether that was since it started.
pub fn node_of(id: i64) -> u16 {
    ((id >> SEQUENCE_BITS) & i64::from(MAX_NODE_ID)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn an_id_tells_when_it_was_made() {
        let clock = Arc::new(ManualClock::new(EPOCH_MS + 86_400_000));
        let ids = Snowflake::new(1023, clock).unwrap();
        let id = ids.next_id();
        assert_eq!(made_at(id), EPOCH_MS + 86_400_000);
        assert_eq!(node_of(id), 1023);
        assert_eq!(ids.node(), 1023);
    }

    #[test]
    fn ids_are_unique_across_threads_even_within_one_millisecond() {
        let clock = Arc::new(ManualClock::new(EPOCH_MS + 1_000));
        let ids = Arc::new(Snowflake::new(7, clock).unwrap());
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let ids = ids.clone();
                std::thread::spawn(move || (0..20_000).map(|_| ids.next_id()).collect::<Vec<_>>())
            })
            .collect();
        let mut seen = HashSet::new();
        for h in handles {
            for id in h.join().unwrap() {
                assert!(id > 0);
                assert!(seen.insert(id), "duplicate id {id}");
            }
        }
        assert_eq!(seen.len(), 160_000);
    }

    #[test]
    fn ids_keep_increasing_when_the_clock_goes_backwards() {
        let clock = Arc::new(ManualClock::new(EPOCH_MS + 10_000));
        let ids = Snowflake::new(1, clock.clone()).unwrap();
        let before = ids.next_id();
        clock.advance(-5_000);
        let after = ids.next_id();
        assert!(after > before);
    }

    #[test]
    fn different_nodes_never_collide_at_the_same_instant() {
        let clock: SharedClock = Arc::new(ManualClock::new(EPOCH_MS + 42));
        let a = Snowflake::new(1, clock.clone()).unwrap();
        let b = Snowflake::new(2, clock).unwrap();
        assert_ne!(a.next_id(), b.next_id());
    }

    #[test]
    fn node_ids_above_ten_bits_are_refused() {
        let clock: SharedClock = Arc::new(ManualClock::new(0));
        assert!(Snowflake::new(MAX_NODE_ID + 1, clock).is_err());
    }
}
