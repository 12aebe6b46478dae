//! `GET /readyz`: whether this process can do its job now, for a load balancer or an
//! orchestrator. A probe reads what a background task last found, so it costs no call to any
//! backend however often it comes: each backend the process needs (its database, and in
//! cluster mode Redis, and RabbitMQ where configured) is checked about once a second with a
//! short timeout, and the result is kept here. A process that is shutting down answers
//! `draining` from the first signal on, whatever its checks say. `/healthz` stays the liveness
//! check: it answers as long as the process serves at all.

use super::AppState;
use axum::Json;
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::task::JoinHandle;
use utoipa::ToSchema;

/// How often each backend is checked: a lost backend shows in `/readyz` within this plus
/// [`CHECK_TIMEOUT`], and a returned one within this.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long one check may take before its backend counts as unreachable.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a check says before it has run once.
const NOT_CHECKED: &str = "not checked yet";

/// One backend's check: its name in the answer (`database`, `redis`, `amqp`) and the call that
/// proves it reachable, failing with the reason.
pub struct Check {
    /// The key of its result in the answer's `checks`.
    pub name: &'static str,
    /// One round trip to the backend; an error is the reason it is not ready.
    pub probe: Box<dyn Fn() -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>,
}

/// This process's readiness, shared by the checks that write it and the probes that read it.
#[derive(Default)]
pub struct Readiness {
    /// Each check's latest word: `ok` or why not. Written once a second per check.
    results: RwLock<BTreeMap<&'static str, String>>,
    /// Set at the first signal to stop: the process answers `draining` from then on.
    draining: AtomicBool,
}

/// The answer's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every check passed: send it requests.
    Ready,
    /// A backend is unreachable (or not checked yet): send requests elsewhere.
    NotReady,
    /// Shutting down: send requests elsewhere; it still serves those that come for a while.
    Draining,
}

/// The body of `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadinessView {
    /// `ready` (status 200), else `not_ready` or `draining` (status 503).
    pub status: Status,
    /// Each backend this process needs: `ok`, or why it is not. A backend this process does
    /// not use is left out: `redis` in embedded mode, `amqp` without RabbitMQ.
    pub checks: Checks,
}

/// The results of the checks, by backend.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Checks {
    /// The database: reachable, and its schema carries every migration this binary knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// Redis (cluster mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// RabbitMQ (only where `amqp_url` is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp: Option<String>,
}

impl Readiness {
    /// Starts checking: each of `checks` in a task of its own, once every [`CHECK_EVERY`], the
    /// first at once. The tasks run until aborted.
    pub fn spawn(self: &Arc<Self>, checks: Vec<Check>) -> Vec<JoinHandle<()>> {
        let mut results = self.results.write().unwrap_or_else(PoisonError::into_inner);
        checks
            .into_iter()
            .map(|check| {
                results.insert(check.name, NOT_CHECKED.to_owned());
                let readiness = self.clone();
                tokio::spawn(async move { readiness.keep_checking(check).await })
            })
            .collect()
    }

    /// One check's loop: a round trip a second, its result kept and shown as a gauge.
    async fn keep_checking(&self, check: Check) {
        let mut ticks = tokio::time::interval(CHECK_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let gauge = metrics::gauge!("seckill_readiness_check", "check" => check.name);
        loop {
            ticks.tick().await;
            let word = match tokio::time::timeout(CHECK_TIMEOUT, (check.probe)()).await {
                Ok(Ok(())) => "ok".to_owned(),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => format!("no answer within {} s", CHECK_TIMEOUT.as_secs()),
            };
            gauge.set(if word == "ok" { 1.0 } else { 0.0 });
            let mut results = self.results.write().unwrap_or_else(PoisonError::into_inner);
            if let Some(last) = results.get_mut(check.name)
                && *last != word
            {
                if word != "ok" {
                    tracing::warn!(check = check.name, reason = %word, "not ready");
                } else if last != NOT_CHECKED {
                    tracing::info!(check = check.name, "ready again: the backend answers");
                }
                *last = word;
            }
        }
    }

    /// From now on the process answers `draining`: it is shutting down.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
        metrics::gauge!("seckill_draining").set(1.0);
    }

    /// What `/readyz` answers now.
    pub fn view(&self) -> ReadinessView {
        let results = self.results.read().unwrap_or_else(PoisonError::into_inner);
        let all_ok = results.values().all(|word| word == "ok");
        let status = if self.draining.load(Ordering::Relaxed) {
            Status::Draining
        } else if all_ok {
            Status::Ready
        } else {
            Status::NotReady
        };
        let word = |name: &str| results.get(name).cloned();
        ReadinessView {
            status,
            checks: Checks {
                database: word("database"),
                redis: word("redis"),
                amqp: word("amqp"),
            },
        }
    }
}

impl FromRef<AppState> for Arc<Readiness> {
    fn from_ref(state: &AppState) -> Self {
        state.readiness.clone()
    }
}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    summary = "Whether this process can do its job now",
    description = "For load balancers: read from memory, never a call to a backend. Each \
        backend the process needs is checked about once a second, so a lost one turns the \
        answer to 503 within seconds, and its return back to 200. `checks` names only the \
        backends this process uses: `database` always, `redis` in cluster mode, `amqp` where \
        RabbitMQ is configured. From the first SIGTERM or SIGINT on, the answer is `503` with \
        `draining`. Served by `seckill worker --addr` too.",
    responses(
        (status = 200, description = "`ready`: every check is `ok`", body = ReadinessView),
        (status = 503, description = "`not_ready` (a check names its reason) or `draining` \
            (shutting down)", body = ReadinessView),
    )
)]
pub(crate) async fn readyz(State(readiness): State<Arc<Readiness>>) -> Response {
    let view = readiness.view();
    let status = match view.status {
        Status::Ready => StatusCode::OK,
        Status::NotReady | Status::Draining => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(view)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &'static str, answer: fn() -> anyhow::Result<()>) -> Check {
        Check {
            name,
            probe: Box::new(move || Box::pin(async move { answer() })),
        }
    }

    #[tokio::test]
    async fn ready_only_once_every_check_passed_and_draining_wins() {
        let readiness = Arc::new(Readiness::default());
        assert_eq!(readiness.view().status, Status::Ready, "no checks: ready");
        let tasks = readiness.spawn(vec![
            check("database", || Ok(())),
            check("redis", || Err(anyhow::anyhow!("connection refused"))),
        ]);
        let view = readiness.view();
        assert_eq!(view.status, Status::NotReady);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let view = readiness.view();
        assert_eq!(view.status, Status::NotReady);
        assert_eq!(view.checks.database.as_deref(), Some("ok"));
        assert_eq!(view.checks.redis.as_deref(), Some("connection refused"));
        assert_eq!(view.checks.amqp, None);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["status"], "not_ready");
        assert!(json["checks"].get("amqp").is_none(), "{json}");
        readiness.drain();
        assert_eq!(readiness.view().status, Status::Draining);
        for task in tasks {
            task.abort();
        }
    }
}
