//! The gate's Lua scripts, each loaded once per process and called by its SHA (EVALSHA; the
//! `redis` crate loads a script again when Redis answers NOSCRIPT).

use crate::gate::GateError;
use redis::Script;
use std::sync::LazyLock;

pub(super) static RESERVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/reserve.lua")));
pub(super) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
pub(super) static LOAD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/load.lua")));
pub(super) static UPDATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/update.lua")));
pub(super) static TAKE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/take.lua")));
pub(super) static GIVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/give.lua")));
pub(super) static CLAIM: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/claim.lua")));

pub(super) static ACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/ack.lua")));
pub(super) static BURY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/bury.lua")));

/// An `EVALSHA` of `script` over `keys`, its arguments to follow, built as one command so it
/// can lead a pipeline (`Script::invoke_async` sends it alone).
pub(super) fn command(script: &Script, keys: &[&str]) -> redis::Cmd {
    let mut command = redis::cmd("EVALSHA");
    command.arg(script.get_hash()).arg(keys.len()).arg(keys);
    command
}

/// A Redis failure, as the gate reports it.
pub(super) fn unavailable(e: redis::RedisError) -> GateError {
    GateError::Unavailable(anyhow::Error::new(e).context("stock gate (Redis)"))
}
