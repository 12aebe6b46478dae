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
pub(super) static CLAIM: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/claim.lua")));

pub(super) static ACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/ack.lua")));
pub(super) static BURY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/bury.lua")));

/// A Redis failure, as the gate reports it.
pub(super) fn unavailable(e: redis::RedisError) -> GateError {
    GateError::Unavailable(anyhow::Error::new(e).context("stock gate (Redis)"))
}
