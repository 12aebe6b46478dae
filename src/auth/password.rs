//! Argon2id password hashes, run through a [`Hasher`] that bounds how many run at once and
//! shares them fairly between client addresses.
//!
//! One hash holds 19 MiB (argon2's default memory cost) and a whole core, by design. So hashes
//! run on threads of their own, never on the workers that answer buys and `/healthz`; at most
//! one per core runs at a time; a few more requests may wait a moment for their turn, and
//! anything beyond that is refused at once with [`Busy`]. A flood of sign-ins then costs a
//! fixed amount of memory and CPU instead of an amount that grows with the flood.
//!
//! The places (turns and the queue) are shared between addresses (an IPv6 address counts as its
//! /64, as the throttles count it). A turn that comes free goes to the next address in line
//! that has a request waiting, round-robin. One address alone may take every place; when they
//! are all taken, a request from an address holding fewer takes the place of the newest waiting
//! request of the address holding the most, which is refused. So each address keeps at least
//! its share of the places, and one address sending many sign-ins at once waits behind itself,
//! while a sign-in from another address waits for about one hash per address ahead of it.
//!
//! Each hashing thread keeps its argon2 working memory and reuses it for every hash it runs
//! (`hash_password_into_with_memory`), so the hashes' memory is taken once per thread instead
//! of churned through the allocator, whose freed 19 MiB blocks end up split by small
//! allocations and do not go back to the system.

use crate::domain::Password;
use anyhow::Context;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// Requests that may wait for a turn, per turn: enough to smooth a burst of sign-ins, few
/// enough that the last in line is served within a handful of hashes.
const QUEUE_PER_TURN: usize = 4;

/// How long a request waits for its turn before it is refused; reached only when hashes run
/// far slower than usual (a starved machine), since the queue is a few hashes long.
const MAX_WAIT: Duration = Duration::from_secs(1);

/// The gate every password hash goes through: a fixed number of turns (hashes running at
/// once) and a short queue in front of them, shared fairly between addresses.
pub struct Hasher {
    /// Who holds the turns and who waits for them.
    lanes: Arc<Lanes>,
    max_wait: Duration,
    running: Arc<Gauge>,
    /// Hands a hash to the hashing threads.
    jobs: SyncSender<Job>,
}

/// The turns and the requests waiting for them, by address.
struct Lanes {
    /// The number of turns, for [`Hasher::turns`].
    turns: usize,
    /// Most requests holding or waiting for a turn, all addresses together: what bounds the
    /// queue's length, its wait and the addresses tracked.
    places: usize,
    queue: Mutex<Queue>,
}

/// The state behind [`Lanes`]'s lock.
#[derive(Default)]
struct Queue {
    /// Turns nobody holds; only ever above zero while nobody waits.
    free: usize,
    /// The addresses holding or waiting for a turn, none other: at most `places` of them.
    by_address: HashMap<IpAddr, Lane>,
    /// The addresses with a request waiting, each once, in the order they are served.
    order: VecDeque<IpAddr>,
}

/// One address's requests at the hasher.
#[derive(Default)]
struct Lane {
    /// Turns it holds.
    running: usize,
    /// Its requests waiting, first come first served, each told its turn through its sender.
    waiting: VecDeque<oneshot::Sender<Turn>>,
}

/// A hash to run, with what it reports back.
type Job = Box<dyn FnOnce() + Send>;

/// Hashes running right now and the most that ever ran at once, so the bound can be observed.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// One running hash in the [`Gauge`], from `enter` until dropped (also by a panic).
struct Counted<'a>(&'a Gauge);

impl<'a> Counted<'a> {
    fn enter(gauge: &'a Gauge) -> Self {
        let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.peak.fetch_max(now, Ordering::SeqCst);
        Self(gauge)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Refused: this address's places or everybody's are taken, or the wait for a turn ran out.
/// Nothing was checked or changed; the client may try again in a moment.
#[derive(Debug, thiserror::Error)]
#[error("too many passwords are being checked right now")]
pub struct Busy;

/// The right to run one hash, held by an address. It goes back only when the hash has
/// finished, even if the request that asked for it has gone, so abandoned requests cannot
/// stack up hashes; it then goes to the next address in line.
pub struct Turn {
    lanes: Arc<Lanes>,
    /// The address holding it, as the hasher counts it.
    holder: IpAddr,
    running: Arc<Gauge>,
    jobs: SyncSender<Job>,
}

impl Hasher {
    /// One turn per core (`available_parallelism`), with a short queue.
    pub fn per_core() -> anyhow::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        Self::new(cores, QUEUE_PER_TURN * cores, MAX_WAIT)
    }

    /// `turns` hashes at once (at least one) on as many threads, `queue` more requests waiting
    /// up to `max_wait`. The threads end when the hasher and its turns are gone.
    pub fn new(turns: usize, queue: usize, max_wait: Duration) -> anyhow::Result<Self> {
        let turns = turns.max(1);
        // Never full: a job is sent only by the holder of a turn, and there are `turns` turns.
        let (jobs, queued) = std::sync::mpsc::sync_channel(turns);
        let queued = Arc::new(Mutex::new(queued));
        for _ in 0..turns {
            let queued = queued.clone();
            std::thread::Builder::new()
                .name("password-hash".into())
                .spawn(move || run_jobs(&queued))
                .context("starting a password hashing thread")?;
        }
        Ok(Self {
            lanes: Arc::new(Lanes {
                turns,
                places: turns + queue,
                queue: Mutex::new(Queue {
                    free: turns,
                    ..Queue::default()
                }),
            }),
            max_wait,
            running: Arc::default(),
            jobs,
        })
    }

    /// Waits for a turn for a request from `from`, or refuses at once when every place is taken
    /// and no address holds more than this one would, or after the wait runs out.
    pub async fn turn(&self, from: IpAddr) -> Result<Turn, Busy> {
        let holder = crate::domain::network(from);
        let told = {
            let mut queue = self.lanes.lock();
            queue.forget_gone();
            if queue.free > 0 {
                queue.free -= 1;
                queue.by_address.entry(holder).or_default().running += 1;
                return Ok(self.turn_of(holder));
            }
            if queue.held() >= self.lanes.places && !queue.make_room_for(holder) {
                return Err(Busy);
            }
            let (tell, told) = oneshot::channel();
            let lane = queue.by_address.entry(holder).or_default();
            lane.waiting.push_back(tell);
            if lane.waiting.len() == 1 {
                queue.order.push_back(holder);
            }
            told
        };
        // Given up (out of time, or the request gone), the place is forgotten at the next
        // count, and a turn handed over meanwhile is dropped here and goes on to the next.
        match tokio::time::timeout(self.max_wait, told).await {
            Ok(Ok(turn)) => Ok(turn),
            _ => Err(Busy),
        }
    }

    /// A turn that `holder` now holds.
    fn turn_of(&self, holder: IpAddr) -> Turn {
        Turn {
            lanes: self.lanes.clone(),
            holder,
            running: self.running.clone(),
            jobs: self.jobs.clone(),
        }
    }

    /// How many hashes may run at once.
    pub fn turns(&self) -> usize {
        self.lanes.turns
    }

    /// The most hashes that have run at once since start: never above [`Hasher::turns`].
    pub fn peak_running(&self) -> usize {
        self.running.peak.load(Ordering::Relaxed)
    }
}

impl Lanes {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Lane {
    /// Places it holds: turns and requests waiting.
    fn held(&self) -> usize {
        self.running + self.waiting.len()
    }
}

impl Queue {
    /// Places held by everybody.
    fn held(&self) -> usize {
        self.by_address.values().map(Lane::held).sum()
    }

    /// Forgets the requests that stopped waiting, and the addresses left with nothing.
    fn forget_gone(&mut self) {
        self.by_address.retain(|_, lane| {
            lane.waiting.retain(|tell| !tell.is_closed());
            lane.held() > 0
        });
        self.line_up();
    }

    /// Keeps in line the addresses that still have a request waiting: an address is in line
    /// once, and only while it has one.
    fn line_up(&mut self) {
        let by_address = &self.by_address;
        self.order.retain(|address| {
            by_address
                .get(address)
                .is_some_and(|l| !l.waiting.is_empty())
        });
    }

    /// Frees a place for `holder` when another address holds more places than `holder` would
    /// with it: the newest waiting request of the address holding the most is refused. Whether
    /// there is room now.
    fn make_room_for(&mut self, holder: IpAddr) -> bool {
        let after = self.by_address.get(&holder).map_or(0, Lane::held) + 1;
        let most = self
            .by_address
            .iter_mut()
            .filter(|(address, lane)| **address != holder && !lane.waiting.is_empty())
            .max_by_key(|(_, lane)| lane.held());
        let Some((_, lane)) = most.filter(|(_, lane)| lane.held() > after) else {
            return false;
        };
        // Dropping its sender tells the waiting request it is refused.
        lane.waiting.pop_back();
        self.line_up();
        true
    }

    /// Takes a turn back from `holder`.
    fn give_back(&mut self, holder: IpAddr) {
        if let Some(lane) = self.by_address.get_mut(&holder) {
            lane.running = lane.running.saturating_sub(1);
            if lane.held() == 0 {
                self.by_address.remove(&holder);
            }
        }
    }

    /// The next request in line, round-robin between addresses, counted as holding a turn:
    /// its address and where to tell it. None when nobody waits; the turn is then free.
    fn next_in_line(&mut self) -> Option<(IpAddr, oneshot::Sender<Turn>)> {
        while let Some(address) = self.order.pop_front() {
            let Some(lane) = self.by_address.get_mut(&address) else {
                continue;
            };
            let Some(tell) = lane.waiting.pop_front() else {
                continue;
            };
            lane.running += 1;
            if !lane.waiting.is_empty() {
                self.order.push_back(address);
            }
            return Some((address, tell));
        }
        self.free += 1;
        None
    }
}

impl Drop for Turn {
    /// Hands the turn to the next request in line. One that stopped waiting drops it again,
    /// which hands it on once more.
    fn drop(&mut self) {
        let next = {
            let mut queue = self.lanes.lock();
            queue.give_back(self.holder);
            queue.next_in_line()
        };
        if let Some((holder, tell)) = next {
            let _ = tell.send(Turn {
                lanes: self.lanes.clone(),
                holder,
                running: self.running.clone(),
                jobs: self.jobs.clone(),
            });
        }
    }
}

impl Turn {
    /// Hashes a new password into a self-describing PHC string (algorithm, parameters, salt).
    pub async fn hash(self, password: Password) -> anyhow::Result<String> {
        self.run(move || new_hash(password.expose().as_bytes()))
            .await?
            .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
    }

    /// Checks a password attempt against a stored hash; a malformed hash counts as a mismatch.
    /// With no stored hash (unknown username) it checks against a throwaway hash, so "no such
    /// user" and "wrong password" cost the same time and cannot be told apart.
    pub async fn verify(
        self,
        attempt: String,
        stored_hash: Option<String>,
    ) -> anyhow::Result<bool> {
        self.run(move || {
            let known = stored_hash.is_some();
            let stored = stored_hash.unwrap_or_else(|| dummy_hash().to_owned());
            let matches = matches(attempt.as_bytes(), &stored).unwrap_or(false);
            known && matches
        })
        .await
    }

    /// Runs `work` on a hashing thread, counted as running, and gives the turn back after it.
    async fn run<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        let (answer, answered) = oneshot::channel();
        let jobs = self.jobs.clone();
        let job: Job = Box::new(move || {
            // The whole turn moves here, so its permits go back when the hash is done, not
            // when the request is: uncounted first, so the next hash never overlaps this one
            // in the gauge, and before the answer, so whoever is answered finds it free.
            let turn = self;
            let counted = Counted::enter(&turn.running);
            let result = work();
            drop(counted);
            drop(turn);
            let _ = answer.send(result);
        });
        jobs.try_send(job)
            .map_err(|e| anyhow::anyhow!("handing a hash to its thread: {e}"))?;
        answered.await.context("a password hash failed")
    }
}

/// A hashing thread: runs jobs until the hasher is gone. Threads of its own, rather than
/// tokio's blocking pool (which starts another thread whenever none is idle at that instant),
/// so the working memory each keeps is one per turn.
fn run_jobs(queued: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held while taking a job, never while running one.
        let next = queued.lock().map(|jobs| jobs.recv());
        let Ok(Ok(job)) = next else { return };
        // A hash that panics must not take its thread along; its caller sees no answer.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
    }
}

thread_local! {
    /// This thread's argon2 working memory, grown by its first hash and reused by the rest.
    static MEMORY: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// argon2 of `password` and `salt` into `out`, in this thread's working memory.
fn argon2_into(
    argon2: &Argon2<'_>,
    params: &Params,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> argon2::Result<()> {
    MEMORY.with_borrow_mut(|blocks| {
        // Any contents will do: argon2 writes every block before it reads it.
        blocks.resize(params.block_count(), Block::default());
        argon2.hash_password_into_with_memory(password, salt, out, &mut blocks[..])
    })
}

/// A new PHC string for `password` with argon2's default algorithm, version and parameters
/// (what `PasswordHasher::hash_password` gives, in reused memory).
fn new_hash(password: &[u8]) -> argon2::password_hash::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    let params = Params::default();
    let argon2 = Argon2::new(Algorithm::default(), Version::default(), params.clone());
    let mut salt_bytes = [0; 64];
    let salt_bytes = salt.as_salt().decode_b64(&mut salt_bytes)?;
    let output = Output::init_with(Params::DEFAULT_OUTPUT_LEN, |out| {
        Ok(argon2_into(&argon2, &params, password, salt_bytes, out)?)
    })?;
    let hash = PasswordHash {
        algorithm: Algorithm::default().ident(),
        version: Some(Version::default().into()),
        params: (&params).try_into()?,
        salt: Some(salt.as_salt()),
        hash: Some(output),
    };
    Ok(hash.to_string())
}

/// Whether `attempt` is the password behind the PHC string `stored`, with the algorithm,
/// version and parameters it names (what `PasswordVerifier::verify_password` checks, in reused
/// memory). The outputs are compared in constant time.
fn matches(attempt: &[u8], stored: &str) -> argon2::password_hash::Result<bool> {
    let parsed = PasswordHash::new(stored)?;
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return Ok(false);
    };
    let algorithm = Algorithm::try_from(parsed.algorithm)?;
    let version = parsed.version.map(Version::try_from).transpose()?;
    let params = Params::try_from(&parsed)?;
    let argon2 = Argon2::new(algorithm, version.unwrap_or_default(), params.clone());
    let mut salt_bytes = [0; 64];
    let salt_bytes = salt.decode_b64(&mut salt_bytes)?;
    let computed = Output::init_with(expected.len(), |out| {
        Ok(argon2_into(&argon2, &params, attempt, salt_bytes, out)?)
    })?;
    Ok(computed == expected)
}

fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| new_hash(b"no user has this password").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[tokio::test]
    async fn a_hash_verifies_its_password_and_nothing_else() {
        let hasher = Hasher::new(1, 0, MAX_WAIT).unwrap();
        let turn = || async { hasher.turn(HERE).await.unwrap() };
        let h = turn()
            .await
            .hash(Password::parse("correct horse").unwrap())
            .await
            .unwrap();
        let verify = |attempt: &str, stored: Option<String>| {
            let attempt = attempt.to_owned();
            async { turn().await.verify(attempt, stored).await.unwrap() }
        };
        assert!(verify("correct horse", Some(h.clone())).await);
        assert!(!verify("wrong horse!", Some(h)).await);
        assert!(!verify("no user has this password", None).await);
    }

    #[test]
    fn hashes_in_reused_memory_agree_with_argon2s_own_hasher_and_verifier() {
        use argon2::password_hash::{PasswordHasher, PasswordVerifier};
        let ours = new_hash(b"correct horse").unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(
            Argon2::default()
                .verify_password(b"correct horse", &parsed)
                .is_ok()
        );
        assert!(
            Argon2::default()
                .verify_password(b"wrong horse", &parsed)
                .is_err()
        );
        // The memory now holds another hash's blocks; a small cost, to check other parameters.
        let params = Params::new(64, 3, 1, None).unwrap();
        let theirs = Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password(b"battery staple", &SaltString::generate(&mut OsRng))
            .unwrap()
            .to_string();
        assert!(matches(b"battery staple", &theirs).unwrap());
        assert!(!matches(b"battery stapler", &theirs).unwrap());
        assert!(matches(b"correct horse", &ours).unwrap());
        assert!(matches(b"x", "not a hash").is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_hashes_run_at_once_than_there_are_turns() {
        let hasher = Arc::new(Hasher::new(2, 16, Duration::from_secs(60)).unwrap());
        let checks: Vec<_> = (0..12u8)
            .map(|i| {
                let hasher = hasher.clone();
                tokio::spawn(async move {
                    let from = IpAddr::from([10, 0, 0, i]);
                    let turn = hasher.turn(from).await.unwrap();
                    turn.verify(format!("guess {i}"), None).await.unwrap()
                })
            })
            .collect();
        for check in checks {
            assert!(!check.await.unwrap());
        }
        assert_eq!(hasher.turns(), 2);
        assert!(
            (1..=2).contains(&hasher.peak_running()),
            "{} hashes ran at once with 2 turns",
            hasher.peak_running()
        );
    }

    /// Waits until `hasher` counts `waiting` requests waiting.
    async fn until_waiting(hasher: &Hasher, waiting: usize) {
        loop {
            let now: usize = {
                let queue = hasher.lanes.lock();
                queue.by_address.values().map(|l| l.waiting.len()).sum()
            };
            if now == waiting {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    /// A request for a turn from `from`, in a task of its own.
    fn ask(hasher: &Arc<Hasher>, from: &str) -> tokio::task::JoinHandle<Result<Turn, Busy>> {
        let (hasher, from) = (hasher.clone(), from.parse().unwrap());
        tokio::spawn(async move { hasher.turn(from).await })
    }

    #[tokio::test]
    async fn beyond_the_places_a_request_is_refused_at_once_and_a_waiter_after_its_deadline() {
        let hasher = Arc::new(Hasher::new(1, 1, Duration::from_millis(200)).unwrap());
        let held = hasher.turn(HERE).await.unwrap();
        let waiter = ask(&hasher, "127.0.0.1");
        until_waiting(&hasher, 1).await;
        let started = std::time::Instant::now();
        assert!(hasher.turn(HERE).await.is_err(), "the places are taken");
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "refused at once"
        );
        assert!(waiter.await.unwrap().is_err(), "the wait ran out");
        drop(held);
        assert!(hasher.turn(HERE).await.is_ok(), "turns come back");
    }

    #[tokio::test]
    async fn a_newcomer_takes_the_place_of_the_newest_waiter_of_the_address_holding_most() {
        let hasher = Arc::new(Hasher::new(1, 3, Duration::from_secs(60)).unwrap());
        let held = hasher.turn("10.0.0.1".parse().unwrap()).await.unwrap();
        let mut flood = Vec::new();
        for waiting in 1..=3 {
            flood.push(ask(&hasher, "10.0.0.1"));
            until_waiting(&hasher, waiting).await;
        }
        let mut others = Vec::new();
        for from in ["10.0.0.2", "10.0.0.3", "10.0.0.4"] {
            others.push(ask(&hasher, from));
            let refused = flood.pop().unwrap();
            assert!(
                refused.await.unwrap().is_err(),
                "the flood's newest is refused"
            );
        }
        assert!(
            hasher.turn("10.0.0.5".parse().unwrap()).await.is_err(),
            "nobody holds more than a newcomer would"
        );
        drop(held);
        for other in others {
            drop(other.await.unwrap().unwrap());
        }
    }

    #[tokio::test]
    async fn turns_go_round_the_addresses_that_wait_and_an_ipv6_network_is_one_address() {
        let hasher = Arc::new(Hasher::new(1, 5, Duration::from_secs(60)).unwrap());
        let mut turn = hasher.turn("10.0.0.1".parse().unwrap()).await.unwrap();
        let mut waiting = vec![("flood", ask(&hasher, "10.0.0.1"))];
        until_waiting(&hasher, 1).await;
        for from in ["2001:db8::1", "2001:db8::2"] {
            waiting.push(("v6", ask(&hasher, from)));
            until_waiting(&hasher, waiting.len()).await;
        }
        for (name, from) in [("b", "10.0.0.2"), ("c", "10.0.0.3")] {
            waiting.push((name, ask(&hasher, from)));
            until_waiting(&hasher, waiting.len()).await;
        }
        // Every place is taken, and the network holds no fewer than any other address.
        let refused = hasher.turn("2001:db8::3".parse().unwrap()).await;
        assert!(refused.is_err(), "an IPv6 /64 counts as one address");
        let mut served = Vec::new();
        for _ in 0..6 {
            drop(turn);
            let at = loop {
                if let Some(at) = waiting.iter().position(|(_, t)| t.is_finished()) {
                    break at;
                }
                tokio::task::yield_now().await;
            };
            let (name, task) = waiting.remove(at);
            turn = task.await.unwrap().unwrap();
            served.push(name);
            if served.len() == 1 {
                waiting.push(("flood", ask(&hasher, "10.0.0.1")));
                until_waiting(&hasher, waiting.len()).await;
            }
        }
        assert_eq!(served, ["flood", "v6", "b", "c", "flood", "v6"]);
    }
}
