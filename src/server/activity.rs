//! What is happening on one connection, written by its socket and its requests and read by the
//! connection's own task (to park it or close it) and by the server loop (to choose which
//! connections to shed).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One connection's counters, from accept to close.
#[derive(Debug)]
pub(super) struct Activity {
    /// When the connection was accepted.
    born: Instant,
    /// When bytes last moved either way or a request began or ended, as nanoseconds after
    /// `born`: how long the connection has been idle or stalled.
    active: AtomicU64,
    read: AtomicU64,
    begun: AtomicU64,
    answered: AtomicU64,
    /// Requests begun when bytes last arrived: fewer than begun now means every byte read so
    /// far belonged to requests already begun (bar a pipelined next one, which hyper hands
    /// back on parking).
    begun_at_last_read: AtomicU64,
    /// The socket took no more of the answer at the last try: hyper still holds some of it.
    write_blocked: AtomicBool,
    /// The number of the request whose body the client has not finished sending, or 0.
    body_pending: AtomicU64,
    /// Bytes read while no request was with the application, since the last request began:
    /// the head arriving, held in hyper's buffer and charged to the server's head budget.
    head: AtomicU64,
    /// When the head arriving began, as nanoseconds after `born`: the heads arriving the
    /// longest are shed first when the budget is spent.
    head_since: AtomicU64,
    /// A request's body was dropped before its end since the last request began. hyper reads
    /// what is left of it as it would the next head, so the bytes counted in `head` may not
    /// all be the head's; hyper's own bound on a head applies then.
    body_abandoned: AtomicBool,
    /// What the head held when the server shed the connection for it, until the connection
    /// has closed and given it back: counted apart, so the same memory is not shed twice.
    shed_charge: AtomicU64,
    /// Told when the server sheds this connection to make room for another.
    pub shed: Notify,
}

impl Activity {
    /// A connection accepted now, with nothing read or written yet.
    pub fn new() -> Self {
        Self {
            born: Instant::now(),
            active: AtomicU64::new(0),
            read: AtomicU64::new(0),
            begun: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            begun_at_last_read: AtomicU64::new(0),
            write_blocked: AtomicBool::new(false),
            body_pending: AtomicU64::new(0),
            head: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            body_abandoned: AtomicBool::new(false),
            shed_charge: AtomicU64::new(0),
            shed: Notify::new(),
        }
    }

    /// When anything last happened on the connection.
    pub fn last_active(&self) -> Instant {
        self.born + Duration::from_nanos(self.active.load(Ordering::Relaxed))
    }

    fn touch(&self) {
        self.active.store(self.age(), Ordering::Relaxed);
    }

    /// Nanoseconds since the connection was accepted.
    fn age(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// When the connection, parked with nothing read, must have sent something: a fresh one
    /// owes its first request within `header_read`, one that has been served may idle for
    /// `idle`.
    pub fn park_deadline(&self, header_read: Duration, idle: Duration) -> Instant {
        if self.begun.load(Ordering::Relaxed) == 0 {
            self.born + header_read
        } else {
            self.last_active() + idle
        }
    }

    /// A mark that changes whenever a request arrives on the connection.
    pub fn mark(&self) -> (u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.begun.load(Ordering::Relaxed),
        )
    }

    /// A request was read (its head); `body_pending` if its body is still to come.
    pub fn request_begun(&self, body_pending: bool) -> u64 {
        let number = self.begun.fetch_add(1, Ordering::Relaxed) + 1;
        self.body_pending
            .store(if body_pending { number } else { 0 }, Ordering::Relaxed);
        self.body_abandoned.store(false, Ordering::Relaxed);
        self.touch();
        number
    }

    /// A request's body was dropped before the client had sent all of it.
    pub fn body_abandoned(&self) {
        self.body_abandoned.store(true, Ordering::Relaxed);
    }

    /// Counts `n` bytes read while no request is with the application as the head's, after
    /// `bytes_arrived` recorded their read; the head's bytes so far, and whether they are all
    /// the head's (see `body_abandoned`).
    pub fn head_arrived(&self, n: usize) -> (usize, bool) {
        let before = self.head.fetch_add(n as u64, Ordering::Relaxed);
        if before == 0 {
            // The time of this read, which `bytes_arrived` has just recorded.
            let now = self.active.load(Ordering::Relaxed);
            self.head_since.store(now, Ordering::Relaxed);
        }
        let head = usize::try_from(before + n as u64).unwrap_or(usize::MAX);
        (head, !self.body_abandoned.load(Ordering::Relaxed))
    }

    /// The head's bytes counted so far, now no longer counted: its request began, the
    /// connection was parked or closed, or it was shed.
    pub fn head_taken(&self) -> usize {
        usize::try_from(self.head.swap(0, Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// The head's bytes counted so far.
    pub fn head(&self) -> usize {
        usize::try_from(self.head.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Records that the connection was shed while its head held `charge`.
    pub fn shed_for_head(&self, charge: usize) {
        self.shed_charge.store(charge as u64, Ordering::Relaxed);
    }

    /// What the head held when the connection was shed for it, now given back; 0 if it was not.
    pub fn shed_charge_taken(&self) -> usize {
        usize::try_from(self.shed_charge.swap(0, Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Since when the head arriving has been arriving, if bytes of one are counted.
    pub fn head_since(&self) -> Option<Instant> {
        (self.head.load(Ordering::Relaxed) > 0)
            .then(|| self.born + Duration::from_nanos(self.head_since.load(Ordering::Relaxed)))
    }

    /// Request `number`'s body has been read to its end, or dropped.
    pub fn body_done(&self, number: u64) {
        let _ = self
            .body_pending
            .compare_exchange(number, 0, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The application has answered the request last begun.
    pub fn request_answered(&self) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    /// The number of requests begun on the connection so far.
    pub fn begun(&self) -> u64 {
        self.begun.load(Ordering::Relaxed)
    }

    /// A request is with the application.
    pub fn answering(&self) -> bool {
        self.answered.load(Ordering::Relaxed) != self.begun.load(Ordering::Relaxed)
    }

    /// The application is working on a request it has whole: the one state in which the
    /// connection waits on the server, not the client, so no deadline cuts it off.
    pub fn handling(&self) -> bool {
        self.answering() && self.body_pending.load(Ordering::Relaxed) == 0
    }

    /// No request is with the application and the socket takes the answers: the connection
    /// is idle, or waits for a request's head, and may be shed.
    pub fn sheddable(&self) -> bool {
        !self.answering() && !self.write_blocked.load(Ordering::Relaxed)
    }

    /// Every request read so far is answered and written out, and a request began since the
    /// last bytes arrived: the connection waits for its next request. (After a wake-up, or
    /// with the first bytes of a request in, it waits for that request to begin: parked then,
    /// it would only be woken by its own unread bytes again.)
    pub fn between_requests(&self) -> bool {
        self.sheddable()
            && self.begun_at_last_read.load(Ordering::Relaxed) < self.begun.load(Ordering::Relaxed)
    }

    /// Sheddable, and not between requests: nothing is owed to the client, which has not
    /// finished sending a request's head (or has sent nothing yet).
    pub fn awaiting_head(&self) -> bool {
        self.sheddable() && !self.between_requests()
    }

    /// `n` bytes were read from the client.
    pub fn bytes_arrived(&self, n: usize) {
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        let begun = self.begun.load(Ordering::Relaxed);
        self.begun_at_last_read.store(begun, Ordering::Relaxed);
        self.touch();
    }

    /// Records a write attempt on the socket.
    pub fn wrote<T>(&self, attempt: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        self.write_blocked
            .store(attempt.is_pending(), Ordering::Relaxed);
        if let Poll::Ready(Ok(_)) = attempt {
            self.touch();
        }
        attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_between_requests_once_all_it_read_is_answered_and_written() {
        let activity = Activity::new();
        assert!(!activity.between_requests(), "nothing asked yet");
        assert!(activity.awaiting_head());
        activity.bytes_arrived(100);
        assert!(!activity.between_requests(), "a request arriving");
        assert!(activity.awaiting_head());
        activity.request_begun(false);
        assert!(!activity.between_requests(), "a request in progress");
        assert!(!activity.sheddable());
        activity.request_answered();
        assert!(activity.between_requests());
        let _ = activity.wrote(Poll::<std::io::Result<()>>::Pending);
        assert!(
            !activity.between_requests(),
            "the answer still being written"
        );
        assert!(!activity.sheddable());
        let _ = activity.wrote(Poll::Ready(Ok(())));
        assert!(activity.between_requests());
        activity.bytes_arrived(10);
        assert!(!activity.between_requests(), "the next request arriving");
        assert!(activity.awaiting_head());
    }

    #[test]
    fn a_request_whose_body_is_still_coming_waits_on_the_client() {
        let activity = Activity::new();
        let first = activity.request_begun(true);
        assert!(activity.answering() && !activity.handling());
        activity.body_done(first);
        assert!(activity.handling());
        activity.request_answered();
        let second = activity.request_begun(true);
        activity.body_done(first);
        assert!(!activity.handling(), "a late end of the first body");
        activity.body_done(second);
        assert!(activity.handling());
    }

    #[test]
    fn a_fresh_connection_owes_its_first_request_sooner_than_a_served_one_idles() {
        let activity = Activity::new();
        let (header_read, idle) = (Duration::from_secs(1), Duration::from_secs(60));
        assert!(activity.park_deadline(header_read, idle) < Instant::now() + header_read * 2);
        activity.request_begun(false);
        activity.request_answered();
        assert!(activity.park_deadline(header_read, idle) > Instant::now() + idle / 2);
    }
}
