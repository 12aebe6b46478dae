//! The open connections of one server: how many there are (to know when it is crowded), and
//! which to shed when there are as many as it may hold.

use super::activity::Activity;
use super::heads::{HEAD_OVERHEAD, Refusal};
use super::limits::Limits;
use hyper::server::conn::http1;
use std::collections::HashMap;
use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// What the server loop and its connections share.
pub(super) struct Connections {
    /// Connections open now, read on every poll of every connection (see [`Self::crowded`]).
    open: AtomicUsize,
    /// Connections parked, or shed for their heads, since the memory was last handed back.
    pub parkings: AtomicU64,
    /// The deadlines and the cap.
    pub limits: Limits,
    /// Most connections open at once.
    pub max: usize,
    /// hyper's settings for every connection, its header-read deadline among them.
    pub http: http1::Builder,
    /// The answer to a head over the bound.
    pub refusal: Refusal,
    /// What the heads arriving on all connections hold, with [`HEAD_OVERHEAD`] each, read
    /// on every read of a head. A connection gives its share back when it has dropped what it
    /// held: its request began, or it was parked or closed.
    heads: AtomicIsize,
    /// The share of `heads` held by connections shed to make room, which they give back as
    /// soon as they close.
    heads_shed: AtomicIsize,
    /// The connections that may still be shed, by number.
    table: Mutex<Table>,
}

/// The sheddable connections, each under a number that is never reused.
#[derive(Default)]
struct Table {
    next: u64,
    slots: HashMap<u64, Arc<Activity>>,
}

impl Connections {
    /// No connections yet, under `limits`, at most `max` at once, each served by `http`, a
    /// head over the bound answered with `refusal`.
    pub fn new(limits: Limits, max: usize, http: http1::Builder, refusal: Refusal) -> Self {
        Self {
            open: AtomicUsize::new(0),
            parkings: AtomicU64::new(0),
            limits,
            max,
            http,
            refusal,
            heads: AtomicIsize::new(0),
            heads_shed: AtomicIsize::new(0),
            table: Mutex::new(Table::default()),
        }
    }

    /// Counts `n` bytes of the head arriving on `activity`'s connection against the budget.
    /// Past three quarters of it, the heads arriving the longest are shed; past all of it
    /// (while the connections shed have not closed yet), this connection is to be closed at
    /// once: `None` then. Otherwise the head's bytes so far, and whether they are all the
    /// head's.
    pub fn head_arrived(&self, activity: &Activity, n: usize) -> Option<(usize, bool)> {
        let (head, exact) = activity.head_arrived(n);
        let charge = if head == n { n + HEAD_OVERHEAD } else { n };
        let held = self.heads.fetch_add(signed(charge), Ordering::Relaxed) + signed(charge);
        let budget = signed(self.limits.head_budget);
        if held > budget / 4 * 3 {
            self.shed_heads();
        }
        (held <= budget).then_some((head, exact))
    }

    /// The head arriving on `activity`'s connection no longer holds memory: its request
    /// began, or the connection was parked or closed.
    pub fn head_done(&self, activity: &Activity) {
        let shed = activity.shed_charge_taken();
        if shed > 0 {
            self.heads_shed.fetch_sub(signed(shed), Ordering::Relaxed);
        }
        let bytes = activity.head_taken();
        if bytes > 0 {
            self.heads
                .fetch_sub(signed(bytes + HEAD_OVERHEAD), Ordering::Relaxed);
        }
    }

    /// Sheds the connections whose heads have been arriving the longest, until the heads not
    /// yet shed hold at most half the budget: the next heads then shed nothing for a while.
    fn shed_heads(&self) {
        let target = signed(self.limits.head_budget / 2);
        let excess = || {
            self.heads.load(Ordering::Relaxed) - self.heads_shed.load(Ordering::Relaxed) - target
        };
        if excess() <= 0 {
            return;
        }
        let mut table = self.table();
        let mut excess = excess();
        let mut arriving: Vec<(Instant, u64)> = table
            .slots
            .iter()
            .filter(|(_, activity)| activity.awaiting_head())
            .filter_map(|(id, activity)| Some((activity.head_since()?, *id)))
            .collect();
        arriving.sort_unstable();
        for (_, id) in arriving {
            if excess <= 0 {
                break;
            }
            if let Some(activity) = table.slots.remove(&id) {
                let charge = activity.head() + HEAD_OVERHEAD;
                activity.shed_for_head(charge);
                self.heads_shed.fetch_add(signed(charge), Ordering::Relaxed);
                self.parkings.fetch_add(1, Ordering::Relaxed);
                activity.shed.notify_one();
                excess -= signed(charge);
            }
        }
    }

    /// More connections are open than the crowd threshold.
    pub fn crowded(&self) -> bool {
        self.open.load(Ordering::Relaxed) > self.limits.crowd
    }

    /// Room for one more connection. At the cap, the connections idle or stalled the longest
    /// are shed first, with a little extra room so that the next few arrivals need no search;
    /// `None` if every open connection is in the middle of a request.
    pub fn admit(self: &Arc<Self>) -> Option<Open> {
        let mut table = self.table();
        if table.slots.len() >= self.max {
            let excess = table.slots.len() + 1 - self.max;
            shed_oldest(&mut table, excess + self.max / 64);
            if table.slots.len() >= self.max {
                return None;
            }
        }
        table.next += 1;
        let (id, activity) = (table.next, Arc::new(Activity::new()));
        table.slots.insert(id, activity.clone());
        drop(table);
        self.open.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("seckill_http_connections_open").increment(1.0);
        Some(Open {
            connections: self.clone(),
            id,
            activity,
        })
    }

    /// Sheds a few of the connections idle or stalled the longest, to free their file
    /// descriptors; how many were.
    pub fn shed_some(&self) -> usize {
        let mut table = self.table();
        let n = 1 + table.slots.len() / 64;
        shed_oldest(&mut table, n)
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // The table stays consistent whatever panicked while holding it.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Tells the `n` sheddable connections that were active longest ago to close, and forgets
/// them, so that they are neither counted nor chosen again while they close.
fn shed_oldest(table: &mut Table, n: usize) -> usize {
    let mut idle: Vec<(Instant, u64)> = table
        .slots
        .iter()
        .filter(|(_, activity)| activity.sheddable())
        .map(|(id, activity)| (activity.last_active(), *id))
        .collect();
    let n = n.min(idle.len());
    if n == 0 {
        return 0;
    }
    if n < idle.len() {
        idle.select_nth_unstable(n - 1);
    }
    for (_, id) in &idle[..n] {
        if let Some(activity) = table.slots.remove(id) {
            activity.shed.notify_one();
        }
    }
    n
}

fn signed(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

/// One open connection, counted while it lives.
pub(super) struct Open {
    connections: Arc<Connections>,
    id: u64,
    /// What is happening on it.
    pub activity: Arc<Activity>,
}

impl Open {
    /// The server this connection belongs to.
    pub fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.connections.head_done(&self.activity);
        self.connections.open.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("seckill_http_connections_open").decrement(1.0);
        self.connections.table().slots.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::time::Duration;

    fn connections(crowd: usize, max: usize) -> Arc<Connections> {
        let limits = Limits {
            crowd,
            ..Limits::default()
        };
        Arc::new(Connections::new(
            limits,
            max,
            http1::Builder::new(),
            Refusal::plain(),
        ))
    }

    #[test]
    fn a_server_is_crowded_past_its_crowd() {
        let connections = connections(1, 10);
        let first = connections.admit().unwrap();
        assert!(!connections.crowded());
        let second = connections.admit().unwrap();
        assert!(connections.crowded());
        drop((first, second));
        assert_eq!(connections.open.load(Ordering::Relaxed), 0);
        assert!(connections.table().slots.is_empty());
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_is_shed_never_one_in_a_request() {
        let connections = connections(1_000, 3);
        let busy = connections.admit().unwrap();
        busy.activity.request_begun(false);
        std::thread::sleep(Duration::from_millis(2));
        let older = connections.admit().unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let newer = connections.admit().unwrap();
        let fourth = connections.admit().expect("room made by shedding");
        assert_eq!(connections.table().slots.len(), 3);
        let shed = |open: &Open| !connections.table().slots.contains_key(&open.id);
        assert!(shed(&older));
        assert!(!shed(&busy) && !shed(&newer) && !shed(&fourth));
        // The shed connection is told, even though it was not waiting yet.
        assert!(older.activity.shed.notified().now_or_never().is_some());

        for open in [&newer, &fourth] {
            open.activity.request_begun(false);
        }
        assert!(
            connections.admit().is_none(),
            "every connection is in a request"
        );
        drop(newer);
        assert!(connections.admit().is_some(), "a connection closed");
    }
}
