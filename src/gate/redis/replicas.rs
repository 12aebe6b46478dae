//! What "kept" means for a change the gate makes in Redis: the master has it, and, when
//! `redis_wait_replicas` asks for them, that many of its replicas too. Redis replicates
//! asynchronously, so a failover to a replica loses what the master had not sent it yet;
//! `WAIT` asks the master how many replicas have every write this connection made, and answers
//! once enough have or its timeout passed.
//!
//! `WAIT` counts the writes of the connection it is sent on, so it follows its change in the
//! same pipeline, on the node that ran it (in a cluster, the pipeline is routed by the script's
//! key). The replication stream is one ordered log: a replica that has a later write of this
//! connection has everything the master wrote before it, including other servers' writes this
//! change read (a retry answered with an order another server kept).
//!
//! What needs the acknowledgement:
//! - a buy taken (or a retry answered with its order): not acknowledged, it is answered
//!   `503 unconfirmed` (its order may or may not survive a failover);
//! - the worker's read of the outbox: it stores only orders the replicas have, so the database
//!   never holds an order a promoted replica would sell again;
//! - releases (a cancel, the deadline sweep, a refund) and the operator's changes (stock added,
//!   a pause, a window): a change lost in a failover gives nothing away twice (units given back
//!   are lost, and undersold until `seckill reconcile --repair`), so they wait, and only log and
//!   count when not acknowledged;
//! - paying changes nothing in the gate (the database holds the payment).

use crate::redis_link::{RedisLink, ScriptRequest};
use redis::{Cmd, FromRedisValue, Pipeline, RedisResult, Script};

/// Sends `request`: through `script`'s reloading when it runs one, else as it is.
async fn run<T: FromRedisValue>(
    redis: &mut RedisLink,
    script: Option<&Script>,
    request: ScriptRequest<'_>,
) -> RedisResult<T> {
    match script {
        Some(script) => crate::redis_link::evalsha(redis, script, request).await,
        None => request.send(redis).await,
    }
}

/// When a change the replicas did not acknowledge was last logged: while a replica lags, every
/// batch and every read of the outbox would log one.
static NOT_KEPT_LOGGED: crate::clock::LogEvery =
    crate::clock::LogEvery::new(std::time::Duration::from_secs(10));

/// How many replicas must acknowledge a change, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    /// Replicas that must have the change; 0: the master alone, no `WAIT` sent.
    pub count: u32,
    /// How long one `WAIT` may block, in milliseconds.
    pub timeout_ms: u64,
}

impl Replicas {
    /// The master alone: nothing waited for.
    pub const NONE: Self = Self {
        count: 0,
        timeout_ms: 0,
    };

    /// The `WAIT` to send after a change, or `None` when no replica is waited for.
    pub(super) fn wait(&self) -> Option<Cmd> {
        (self.count > 0).then(|| {
            let mut wait = redis::cmd("WAIT");
            wait.arg(self.count).arg(self.timeout_ms);
            wait
        })
    }

    /// Sends `command`, an `EVALSHA` of `script` (sent again after the script if a server does
    /// not know it), as [`query`](Self::query) sends a command.
    pub(super) async fn evalsha<T: FromRedisValue>(
        &self,
        redis: &mut RedisLink,
        script: &Script,
        command: Cmd,
    ) -> RedisResult<(T, bool)> {
        self.send(redis, Some(script), command).await
    }

    /// Sends `command`, a change, and, when replicas are waited for, a `WAIT` after it in one
    /// pipeline: its answer, and whether they acknowledged it (always true when none is waited
    /// for).
    pub(super) async fn query<T: FromRedisValue>(
        &self,
        redis: &mut RedisLink,
        command: Cmd,
    ) -> RedisResult<(T, bool)> {
        self.send(redis, None, command).await
    }

    /// [`query`](Self::query), through `script`'s reloading when the command runs it.
    async fn send<T: FromRedisValue>(
        &self,
        redis: &mut RedisLink,
        script: Option<&Script>,
        command: Cmd,
    ) -> RedisResult<(T, bool)> {
        let Some(wait) = self.wait() else {
            let answer = run(redis, script, ScriptRequest::Alone(&command)).await?;
            return Ok((answer, true));
        };
        let mut pipeline = Pipeline::with_capacity(2);
        pipeline.add_command(command).add_command(wait);
        let (answer, acknowledged): (T, i64) =
            run(redis, script, ScriptRequest::Pipelined(&pipeline)).await?;
        Ok((answer, self.enough(acknowledged)))
    }

    /// Whether `acknowledged` replicas (`WAIT`'s answer) are enough.
    pub(super) fn enough(&self, acknowledged: i64) -> bool {
        acknowledged >= i64::from(self.count)
    }

    /// Counts and logs a change made on the master that the replicas did not acknowledge, for
    /// the changes that go on without them (`what` names it).
    pub(super) fn not_kept(&self, what: &'static str) {
        metrics::counter!("seckill_redis_unacknowledged_total", "change" => what).increment(1);
        if NOT_KEPT_LOGGED.due() {
            tracing::warn!(
                change = what,
                replicas = self.count,
                "Redis replicas did not acknowledge a change in time: a failover now could lose \
                 it (more within 10 s are only counted, in seckill_redis_unacknowledged_total)"
            );
        }
    }

    /// Warns at start-up when a master has fewer replicas than every buy will wait for: each
    /// buy would then be answered `503 unconfirmed`. `WAIT` on a connection that wrote nothing
    /// answers at once with the replicas connected (on a cluster, the fewest of any master).
    pub async fn warn_if_fewer(&self, redis: &RedisLink) {
        if self.count == 0 {
            return;
        }
        let connected: redis::RedisResult<i64> = redis::cmd("WAIT")
            .arg(self.count)
            .arg(1)
            .query_async(&mut redis.clone())
            .await;
        match connected {
            Ok(connected) if !self.enough(connected) => tracing::warn!(
                connected,
                wanted = self.count,
                "redis_wait_replicas asks for more replicas than the Redis master has: buys \
                 will be answered 503 unconfirmed until they connect"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not count Redis's replicas"),
        }
    }
}
