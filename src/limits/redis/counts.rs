//! This process's view of the shared counts, without I/O: per limit, its current and previous
//! fixed window, and in each, per id, the last total Redis answered and this process's requests
//! since. A request is decided here against those alone; the sync task takes the new requests
//! ([`Counts::take`]) and hands back Redis's totals ([`Counts::settle`]).
//!
//! The decision is the two-window estimate: the current window's count plus the previous one's
//! weighted by the part of it the sliding window still covers, as if its requests had come
//! evenly. Before it, this process's own requests of the id pass a token bucket of the same
//! quota (GCRA: `limit` at once, then one every `window / limit`), so no server lets a key
//! through more than its quota by itself, and a burst is refused here with the bucket's short
//! wait. A request refused by either takes nothing from the other.

use super::super::{Id, IdMap, Quota};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// How a request is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Against the last shared totals and this process's requests since.
    Shared,
    /// Redis has not answered for a while: also against this process's share of the quota
    /// (the quota divided by `servers`, the servers last seen alive), counting only its own
    /// requests of the window.
    Alone { servers: u32 },
}

/// Whom one request is counted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// Every server: sent with the next sync, and decided on the shared totals too.
    Fleet,
    /// This process only, in its token bucket: a request it answers by itself, which costs the
    /// others nothing.
    Here,
}

/// Every limit this process counts for.
pub(super) struct Counts {
    /// One per scope and quota: a deployment has a handful, so finding one is a short scan.
    limits: RwLock<Vec<Arc<Limit>>>,
    /// Most ids of one limit's window; past it, new ids share [`Id::Overflow`].
    max_keys: usize,
}

/// One limit's windows.
pub(super) struct Limit {
    /// The limit's scope: its keys' names in Redis.
    pub(super) scope: &'static str,
    /// How many requests, in how long.
    pub(super) quota: Quota,
    /// The window's length (ms), at least 1.
    pub(super) window_ms: u64,
    /// The token bucket's time between two requests (ns): the window over the limit.
    period_ns: u64,
    /// How far ahead of now the bucket's due time may be when a request passes (ns): the
    /// period times one less than the limit, which lets `limit` requests through at once.
    tolerance_ns: u64,
    /// Its two windows, locked for one request's decision or one sync's take or settle.
    windows: Mutex<Windows>,
}

/// The current fixed window and the one before.
struct Windows {
    current: Window,
    previous: Window,
}

/// One fixed window, the `number`th since the epoch.
#[derive(Default)]
struct Window {
    number: u64,
    by_id: IdMap<Entry>,
    /// The ids with requests not yet taken by a sync, each once.
    dirty: Vec<Id>,
}

/// One id's counts in one window.
#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    /// Every server's requests, as Redis last answered (this process's sent ones included).
    shared: u32,
    /// This process's requests taken by a sync that has not answered yet.
    sent: u32,
    /// This process's requests not yet taken by a sync.
    unsent: u32,
    /// This process's requests of the window, all of them: its share when Redis is away.
    own: u32,
    /// When this process's token bucket for the id is full again (Unix ns), as its last
    /// request in this window left it; the bucket of the id is the later of its two windows'.
    due_ns: u64,
    /// Whether it is in its window's `dirty` list.
    dirty: bool,
}

impl Entry {
    /// The requests of the window as this process knows them.
    fn total(&self) -> u32 {
        self.shared
            .saturating_add(self.sent)
            .saturating_add(self.unsent)
    }
}

/// The new requests of one limit's window, taken for one sync.
pub(super) struct Group {
    pub(super) limit: Arc<Limit>,
    /// The window's number.
    pub(super) number: u64,
    /// Each id with the requests to add to its total (0: its total is only read).
    pub(super) ids: Vec<(Id, u32)>,
}

impl Window {
    fn new(number: u64) -> Self {
        Self {
            number,
            ..Self::default()
        }
    }

    /// Counts one request of `id` here for `reach` (for [`Reach::Fleet`], not yet sent), if
    /// `decide` lets it pass with the window's count so far (and says when the id's bucket is
    /// due then): `id` itself if the window holds it or has room, else the overflow. One lookup
    /// for an id the window holds while it has room for more (a full one asks first whether it
    /// holds the id).
    fn hit(
        &mut self,
        id: &Id,
        reach: Reach,
        max_keys: usize,
        decide: impl Fn(&Entry) -> Result<u64, Duration>,
    ) -> Result<(), Duration> {
        static OVERFLOW: Id = Id::Overflow;
        let Self { by_id, dirty, .. } = self;
        let id = if by_id.len() < max_keys || by_id.contains_key(id) {
            id
        } else {
            &OVERFLOW
        };
        let entry = match by_id.get_mut(id) {
            Some(entry) => {
                let due_ns = decide(entry)?;
                entry.due_ns = due_ns;
                entry
            }
            None => {
                let due_ns = decide(&Entry::default())?;
                let entry = Entry {
                    due_ns,
                    ..Entry::default()
                };
                by_id.entry(id.clone()).or_insert(entry)
            }
        };
        if reach == Reach::Fleet {
            entry.unsent = entry.unsent.saturating_add(1);
            entry.own = entry.own.saturating_add(1);
            if !entry.dirty {
                entry.dirty = true;
                dirty.push(id.clone());
            }
        }
        Ok(())
    }
}

impl Windows {
    /// Moves on to window `number` if it is later than the current one: the current becomes
    /// the previous if it is the one just before, and anything older is dropped.
    fn roll(&mut self, number: u64) {
        if number <= self.current.number {
            return;
        }
        let current = std::mem::replace(&mut self.current, Window::new(number));
        self.previous = if current.number + 1 == number {
            current
        } else {
            Window::new(number - 1)
        };
    }

    /// The window numbered `number`, if held.
    fn numbered(&mut self, number: u64) -> Option<&mut Window> {
        if self.current.number == number {
            Some(&mut self.current)
        } else if self.previous.number == number {
            Some(&mut self.previous)
        } else {
            None
        }
    }
}

impl Limit {
    fn new(scope: &'static str, quota: Quota) -> Self {
        let period_ns = (quota.window().as_nanos() / u128::from(quota.limit())).max(1);
        let period_ns = u64::try_from(period_ns).unwrap_or(u64::MAX);
        Self {
            scope,
            quota,
            window_ms: (quota.window().as_millis() as u64).max(1),
            period_ns,
            tolerance_ns: period_ns.saturating_mul(u64::from(quota.limit() - 1)),
            windows: Mutex::new(Windows {
                current: Window::new(0),
                previous: Window::new(0),
            }),
        }
    }

    /// Counts one request by `id` at `now_ms` (Unix ms) for `reach`, unless it is over the
    /// limit: then how long until it would pass.
    fn hit(
        &self,
        id: &Id,
        now_ms: u64,
        mode: Mode,
        reach: Reach,
        max_keys: usize,
    ) -> Result<(), Duration> {
        let window = self.window_ms;
        let elapsed = now_ms % window;
        let now_ns = now_ms.saturating_mul(1_000_000);
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.roll(now_ms / window);
        let previous = windows.previous.by_id.get(id).copied().unwrap_or_default();
        let quota = self.quota.limit();
        windows.current.hit(id, reach, max_keys, |current| {
            let due_ns = previous.due_ns.max(current.due_ns);
            let earliest_ns = due_ns.saturating_sub(self.tolerance_ns);
            if now_ns < earliest_ns {
                return Err(Duration::from_nanos(earliest_ns - now_ns));
            }
            if reach == Reach::Fleet {
                if let Mode::Alone { servers } = mode {
                    let share = (quota / servers.max(1)).max(1);
                    estimate(share, window, elapsed, previous.own, current.own)?;
                }
                estimate(quota, window, elapsed, previous.total(), current.total())?;
            }
            Ok(due_ns.max(now_ns).saturating_add(self.period_ns))
        })
    }

    /// Takes the window's new requests for one sync: the ids with requests in the previous and
    /// the current window, and for the ids of the current one not yet known in the previous,
    /// their totals there.
    fn take(self: &Arc<Self>, groups: &mut Vec<Group>) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let Windows { current, previous } = &mut *windows;
        if current.dirty.is_empty() && previous.dirty.is_empty() {
            return;
        }
        let taken = |window: &mut Window| -> Vec<(Id, u32)> {
            let dirty = std::mem::take(&mut window.dirty);
            dirty
                .into_iter()
                .filter_map(|id| {
                    let entry = window.by_id.get_mut(&id)?;
                    let add = entry.unsent;
                    entry.sent = entry.sent.saturating_add(add);
                    entry.unsent = 0;
                    entry.dirty = false;
                    Some((id, add))
                })
                .collect()
        };
        let now = taken(current);
        let mut before = taken(previous);
        if now.is_empty() && before.is_empty() {
            return;
        }
        // The previous window's totals of the ids counted now, read without adding, once per
        // window: the previous window only weighs less as time goes.
        let mut read = Vec::new();
        for (id, _) in &now {
            if !previous.by_id.contains_key(id) && !before.iter().any(|(other, _)| other == id) {
                read.push((id.clone(), 0));
            }
        }
        before.extend(read);
        for (number, ids) in [
            (current.number.saturating_sub(1), before),
            (current.number, now),
        ] {
            if !ids.is_empty() {
                groups.push(Group {
                    limit: self.clone(),
                    number,
                    ids,
                });
            }
        }
    }
}

/// Whether one more request fits `quota` in a window of `window` ms, `elapsed` ms into it,
/// with `previous` requests in the window before and `current` in this one; if not, how long
/// until it would.
fn estimate(
    quota: u32,
    window: u64,
    elapsed: u64,
    previous: u32,
    current: u32,
) -> Result<(), Duration> {
    let (q, w, e) = (f64::from(quota), window as f64, elapsed as f64);
    let (p, c) = (f64::from(previous), f64::from(current));
    if p * (w - e) / w + c + 1.0 <= q {
        return Ok(());
    }
    let wait = if c + 1.0 > q {
        // This window alone is full: wait for the next, then until this one weighs less.
        w - e + w * (1.0 - (q - 1.0) / c)
    } else {
        w - e - w * (q - 1.0 - c) / p
    };
    Err(Duration::from_millis(wait.ceil().max(1.0) as u64))
}

impl Counts {
    /// No limit counted yet; at most `max_keys` ids per limit and window.
    pub(super) fn new(max_keys: usize) -> Self {
        Self {
            limits: RwLock::new(Vec::new()),
            max_keys,
        }
    }

    /// The limit of `scope` and `quota`, made on first use.
    fn limit(&self, scope: &'static str, quota: Quota) -> Arc<Limit> {
        let of = |limit: &&Arc<Limit>| limit.scope == scope && limit.quota == quota;
        if let Some(limit) = self
            .limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(of)
        {
            return limit.clone();
        }
        let mut limits = self.limits.write().unwrap_or_else(|p| p.into_inner());
        if let Some(limit) = limits.iter().find(of) {
            return limit.clone();
        }
        let limit = Arc::new(Limit::new(scope, quota));
        limits.push(limit.clone());
        limit
    }

    /// Counts one request by `id` against `scope`'s `quota` at `now_ms` for `reach`, unless
    /// over it.
    pub(super) fn hit(
        &self,
        scope: &'static str,
        quota: Quota,
        id: &Id,
        now_ms: u64,
        mode: Mode,
        reach: Reach,
    ) -> Result<(), Duration> {
        self.limit(scope, quota)
            .hit(id, now_ms, mode, reach, self.max_keys)
    }

    /// Takes every limit's new requests for one sync (in flight until [`Self::settle`]).
    pub(super) fn take(&self) -> Vec<Group> {
        let limits = self
            .limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut groups = Vec::new();
        for limit in &limits {
            limit.take(&mut groups);
        }
        groups
    }

    /// Settles the sync of `groups`: with Redis's `totals` (one per id, in order), or, when
    /// it failed, with their requests back among the ones to send.
    pub(super) fn settle(&self, groups: Vec<Group>, totals: Option<&[u64]>) {
        let mut at = 0;
        for group in groups {
            let limit = &group.limit;
            let mut windows = limit.windows.lock().unwrap_or_else(|p| p.into_inner());
            let held = windows.numbered(group.number);
            let Some(window) = held else {
                at += group.ids.len();
                continue;
            };
            for (id, add) in group.ids {
                let total = totals.map(|totals| totals.get(at).copied().unwrap_or_default());
                at += 1;
                let present = window.by_id.contains_key(&id);
                if !present && (add > 0 || total.is_none() || window.by_id.len() >= self.max_keys) {
                    continue;
                }
                let entry = window.by_id.entry(id.clone()).or_default();
                entry.sent = entry.sent.saturating_sub(add);
                match total {
                    // Totals only grow within a window (unless Redis lost them); an answer
                    // older than another already settled must not take counts back.
                    Some(total) => {
                        entry.shared = entry.shared.max(u32::try_from(total).unwrap_or(u32::MAX))
                    }
                    None => {
                        entry.unsent = entry.unsent.saturating_add(add);
                        if entry.unsent > 0 && !entry.dirty {
                            entry.dirty = true;
                            window.dirty.push(id);
                        }
                    }
                }
            }
        }
    }

    /// Drops the windows older than the one before `now_ms`'s, so an idle limit holds no ids.
    pub(super) fn forget_old(&self, now_ms: u64) {
        let limits = self
            .limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for limit in limits {
            let mut windows = limit.windows.lock().unwrap_or_else(|p| p.into_inner());
            windows.roll(now_ms / limit.window_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE_MS: u64 = 60_000;

    /// A moment 10 s into a minute's window.
    const NOW: u64 = 1_000 * MINUTE_MS + 10_000;

    fn quota(limit: u32) -> Quota {
        Quota::per_window(limit, Duration::from_millis(MINUTE_MS))
    }

    fn id(name: &str) -> Id {
        Id::from(name)
    }

    /// How many requests of `name` pass `counts` at `now`, stopping at the first refused.
    fn passes(counts: &Counts, name: &str, limit: u32, now: u64, mode: Mode) -> u32 {
        let mut passed = 0;
        while counts
            .hit("t", quota(limit), &id(name), now, mode, Reach::Fleet)
            .is_ok()
        {
            passed += 1;
        }
        passed
    }

    /// The requests each id of the sync of `groups` adds, by window number.
    fn adds(groups: &[Group]) -> Vec<(u64, String, u32)> {
        groups
            .iter()
            .flat_map(|g| {
                g.ids
                    .iter()
                    .map(|(id, add)| (g.number, id.to_string(), *add))
            })
            .collect()
    }

    #[test]
    fn a_request_is_decided_on_the_last_shared_total_and_this_process_s_requests_since() {
        let counts = Counts::new(100);
        counts
            .hit("t", quota(10), &id("a"), NOW, Mode::Shared, Reach::Fleet)
            .unwrap();
        let groups = counts.take();
        assert_eq!(
            adds(&groups),
            [(999, "a".into(), 0), (1000, "a".into(), 1)],
            "the previous window's total read, the current one's added to"
        );
        // Redis answers: 2 in the previous window, 6 in this one (5 of other servers).
        counts.settle(groups, Some(&[2, 6]));
        counts
            .hit("t", quota(10), &id("a"), NOW, Mode::Shared, Reach::Fleet)
            .unwrap();
        // 2 × 50/60 + 7 + 1 = 9.7: one more, then 10.7 is over.
        assert_eq!(passes(&counts, "a", 10, NOW, Mode::Shared), 1);
        assert_eq!(
            adds(&counts.take()),
            [(1000, "a".into(), 2)],
            "the previous window's total is read once"
        );
    }

    #[test]
    fn a_failed_sync_sends_its_requests_again_with_the_next() {
        let counts = Counts::new(100);
        for _ in 0..2 {
            counts
                .hit("t", quota(10), &id("a"), NOW, Mode::Shared, Reach::Fleet)
                .unwrap();
        }
        let groups = counts.take();
        assert!(counts.take().is_empty(), "taken once");
        // Still counted while in flight.
        assert_eq!(passes(&counts, "a", 10, NOW, Mode::Shared), 8);
        counts.settle(groups, None);
        assert_eq!(
            adds(&counts.take()),
            [(999, "a".into(), 0), (1000, "a".into(), 10)]
        );
    }

    #[test]
    fn this_process_s_requests_pass_its_bucket_first_the_limit_at_once_then_one_a_period() {
        let counts = Counts::new(100);
        // 3 a minute: at once, then one every 20 s.
        let here = |now| counts.hit("t", quota(3), &id("a"), now, Mode::Shared, Reach::Here);
        for _ in 0..3 {
            here(NOW).unwrap();
        }
        assert!(counts.take().is_empty(), "nothing to send");
        assert_eq!(here(NOW).unwrap_err(), Duration::from_secs(20));
        assert_eq!(here(NOW + 15_000).unwrap_err(), Duration::from_secs(5));
        here(NOW + 20_000).unwrap();
        // A request for every server takes its token too.
        assert_eq!(passes(&counts, "a", 3, NOW + 40_000, Mode::Shared), 1);
        assert_eq!(
            adds(&counts.take()),
            [(999, "a".into(), 0), (1000, "a".into(), 1)]
        );
        // Its bucket outlives its window, in the next one.
        let next = NOW + MINUTE_MS - 10_000;
        assert_eq!(here(next).unwrap_err(), Duration::from_secs(10));
    }

    #[test]
    fn alone_a_server_holds_its_own_requests_to_its_share_of_the_quota() {
        let counts = Counts::new(100);
        let alone = Mode::Alone { servers: 3 };
        assert_eq!(passes(&counts, "a", 10, NOW, alone), 3);
        assert_eq!(passes(&counts, "b", 2, NOW, alone), 1, "at least one");
        // The shared totals it last had still count.
        let groups = counts.take();
        counts.settle(groups, Some(&[0, 9, 0, 1]));
        assert_eq!(passes(&counts, "a", 10, NOW, Mode::Shared), 1);
    }

    #[test]
    fn a_new_window_keeps_the_one_before_and_drops_older_ones() {
        let counts = Counts::new(100);
        assert_eq!(passes(&counts, "a", 4, NOW, Mode::Shared), 4);
        let groups = counts.take();
        counts.settle(groups, Some(&[0, 4]));
        // Halfway into the next window, the previous one's 4 weigh 2.
        let next = NOW + MINUTE_MS + 20_000;
        assert_eq!(passes(&counts, "a", 4, next, Mode::Shared), 2);
        // Two windows on, nothing of them is held.
        counts.forget_old(next + 2 * MINUTE_MS);
        assert!(counts.take().is_empty());
        let limit = counts.limit("t", quota(4));
        let windows = limit.windows.lock().unwrap();
        assert!(windows.current.by_id.is_empty() && windows.previous.by_id.is_empty());
    }

    #[test]
    fn past_its_most_ids_a_window_counts_new_ids_together_and_known_ones_alone() {
        let counts = Counts::new(2);
        for known in ["a", "b"] {
            counts
                .hit("t", quota(2), &id(known), NOW, Mode::Shared, Reach::Fleet)
                .unwrap();
        }
        assert_eq!(passes(&counts, "new 1", 2, NOW, Mode::Shared), 2);
        assert_eq!(passes(&counts, "new 2", 2, NOW, Mode::Shared), 0);
        assert_eq!(passes(&counts, "a", 2, NOW, Mode::Shared), 1);
    }
}
