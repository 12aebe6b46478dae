//! Argon2id password hashes, run through a [`Hasher`] that bounds how many run at once.
//!
//! One hash holds 19 MiB (argon2's default memory cost) and a whole core, by design. So it
//! runs on tokio's blocking threads, never on the workers that answer buys and `/healthz`; at
//! most one per core runs at a time; a few more requests may wait a moment for their turn, and
//! anything beyond that is refused at once with [`Busy`]. A flood of sign-ins then costs a
//! fixed amount of memory and CPU instead of an amount that grows with the flood.

use crate::domain::Password;
use anyhow::Context;
use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests that may wait for a turn, per turn: enough to smooth a burst of sign-ins, few
/// enough that the last in line is served within a handful of hashes.
const QUEUE_PER_TURN: usize = 4;

/// How long a request waits for its turn before it is refused; reached only when hashes run
/// far slower than usual (a starved machine), since the queue is a few hashes long.
const MAX_WAIT: Duration = Duration::from_secs(1);

/// The gate every password hash goes through: a fixed number of turns (hashes running at
/// once) and a short queue in front of them.
pub struct Hasher {
    /// One permit per hash that may run at once.
    turns: Arc<Semaphore>,
    /// One permit per request that holds or waits for a turn; none left means [`Busy`].
    places: Arc<Semaphore>,
    /// The number of turns, for [`Hasher::turns`].
    turn_count: usize,
    max_wait: Duration,
    running: Arc<Gauge>,
}

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

/// Refused: every turn is taken and the queue is full, or the wait for a turn ran out. Nothing
/// was checked or changed; the client may try again in a moment.
#[derive(Debug, thiserror::Error)]
#[error("too many passwords are being checked right now")]
pub struct Busy;

/// The right to run one hash. Its permits go back only when the hash has finished, even if the
/// request that asked for it has gone, so abandoned requests cannot stack up hashes.
pub struct Turn {
    _place: OwnedSemaphorePermit,
    _turn: OwnedSemaphorePermit,
    running: Arc<Gauge>,
}

impl Hasher {
    /// One turn per core (`available_parallelism`), with a short queue.
    pub fn per_core() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        Self::new(cores, QUEUE_PER_TURN * cores, MAX_WAIT)
    }

    /// `turns` hashes at once (at least one), `queue` more requests waiting up to `max_wait`.
    pub fn new(turns: usize, queue: usize, max_wait: Duration) -> Self {
        let turns = turns.max(1);
        Self {
            turns: Arc::new(Semaphore::new(turns)),
            places: Arc::new(Semaphore::new(turns + queue)),
            turn_count: turns,
            max_wait,
            running: Arc::default(),
        }
    }

    /// Waits for a turn, or refuses at once when the queue is full, or after the wait runs out.
    pub async fn turn(&self) -> Result<Turn, Busy> {
        let place = self.places.clone().try_acquire_owned().map_err(|_| Busy)?;
        let turn = tokio::time::timeout(self.max_wait, self.turns.clone().acquire_owned())
            .await
            .map_err(|_| Busy)?
            .map_err(|_| Busy)?;
        Ok(Turn {
            _place: place,
            _turn: turn,
            running: self.running.clone(),
        })
    }

    /// How many hashes may run at once.
    pub fn turns(&self) -> usize {
        self.turn_count
    }

    /// The most hashes that have run at once since start: never above [`Hasher::turns`].
    pub fn peak_running(&self) -> usize {
        self.running.peak.load(Ordering::Relaxed)
    }
}

impl Turn {
    /// Hashes a new password into a self-describing PHC string (algorithm, parameters, salt).
    pub async fn hash(self, password: Password) -> anyhow::Result<String> {
        self.run(move || {
            let salt = SaltString::generate(&mut OsRng);
            Argon2::default()
                .hash_password(password.expose().as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
        })
        .await?
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
            let matches = PasswordHash::new(&stored)
                .map(|parsed| {
                    Argon2::default()
                        .verify_password(attempt.as_bytes(), &parsed)
                        .is_ok()
                })
                .unwrap_or(false);
            known && matches
        })
        .await
    }

    /// Runs `work` on a blocking thread, counted as running, and gives the turn back after it.
    async fn run<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        tokio::task::spawn_blocking(move || {
            // The whole turn moves here, so its permits go back when the hash is done, not
            // when the request is. Locals drop in reverse: uncounted first, then the permits,
            // so the next hash never overlaps this one in the gauge.
            let turn = self;
            let _counted = Counted::enter(&turn.running);
            work()
        })
        .await
        .context("a password hash task failed")
    }
}

fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(b"no user has this password", &salt)
            .map(|h| h.to_string())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_and_nothing_else() {
        let hasher = Hasher::new(1, 0, MAX_WAIT);
        let turn = || async { hasher.turn().await.unwrap() };
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_hashes_run_at_once_than_there_are_turns() {
        let hasher = Arc::new(Hasher::new(2, 16, Duration::from_secs(60)));
        let checks: Vec<_> = (0..12)
            .map(|i| {
                let hasher = hasher.clone();
                tokio::spawn(async move {
                    let turn = hasher.turn().await.unwrap();
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

    #[tokio::test]
    async fn beyond_the_queue_a_request_is_refused_at_once_and_a_waiter_after_its_deadline() {
        let hasher = Arc::new(Hasher::new(1, 1, Duration::from_millis(200)));
        let held = hasher.turn().await.unwrap();
        let waiter = tokio::spawn({
            let hasher = hasher.clone();
            async move { hasher.turn().await.map(drop) }
        });
        while hasher.places.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let started = std::time::Instant::now();
        assert!(hasher.turn().await.is_err(), "the queue is full");
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "refused at once"
        );
        assert!(waiter.await.unwrap().is_err(), "the wait ran out");
        drop(held);
        assert!(hasher.turn().await.is_ok(), "turns come back");
    }
}
