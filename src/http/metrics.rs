//! `GET /metrics`: what the process measured, in Prometheus text format, for the admin token
//! only (the numbers tell an outsider how a sale goes). The figures themselves are recorded
//! where things happen, with the `metrics` macros; this file installs the one recorder of the
//! process (with `seckill_build_info{version,commit}`), renders it, and keeps every route's
//! request metrics. The process's own figures (CPU, memory, open files) are read at each scrape. The gauges of the dashboard's
//! reading (outbox and queue depths, drift) are brought up to date by the scrape itself.

use super::AppState;
use crate::http::extract::AdminAuth;
use axum::extract::State;
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Histogram, Label};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

/// Upper bounds of the latency histograms' buckets, in seconds: from a buy answered from
/// memory to a request that waited on a slow database.
const SECONDS: &[f64] = &[
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Upper bounds of the buckets of the histograms whose names end in `_size` (how many buys or
/// orders went in one batch), up to the largest batch the configuration allows.
const SIZES: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// How often histogram samples are folded into their buckets between scrapes, so that memory
/// stays bounded when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's recorder, installed on first use. A process installs one recorder only;
/// every server started in it (tests start many) renders the same one.
fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets(SECONDS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_size".into()), SIZES))
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "metrics buckets refused: histograms are summaries");
                PrometheusBuilder::new()
            });
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if let Err(e) = metrics::set_global_recorder(recorder) {
            tracing::warn!(error = %e, "another metrics recorder runs: /metrics is empty");
        }
        metrics::gauge!(
            "seckill_build_info",
            "version" => env!("CARGO_PKG_VERSION"),
            "commit" => env!("SECKILL_COMMIT"),
        )
        .set(1.0);
        let upkeep = handle.clone();
        let spawned = std::thread::Builder::new()
            .name("seckill-metrics".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no metrics upkeep: histograms drain at scrapes");
        }
        handle
    })
}

/// Installs the process's recorder, if no server of this process did yet, so the process
/// records from then on; the router does it when it is built, before any request.
pub fn install() {
    handle();
}

/// How long a scrape waits for the dashboard's reading before it answers with the gauges as
/// they are.
const READING_WAIT: Duration = Duration::from_secs(2);

/// The Prometheus text exposition of everything recorded so far, after the sale's latest
/// reading (at most a second old: scrapes and dashboards share one a second) has set its
/// gauges. A process nobody scrapes or watches does not read them at all.
pub(crate) async fn render(State(state): State<AppState>, _: AdminAuth) -> Response {
    match tokio::time::timeout(READING_WAIT, state.sale.overview()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "reading the sale for /metrics"),
        Err(_) => tracing::warn!("reading the sale for /metrics took too long"),
    }
    super::process_metrics::record();
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], handle().render()).into_response()
}

/// One route's request counters and latency histograms, one of each per method and status it
/// answered with, registered with the recorder once each: finding a metric by its labels builds
/// and hashes a key of them on every call, which costs more than answering `/healthz`. Bounded
/// by the methods and statuses the route answers with. Its requests are recorded by the
/// router's `Routed` layer, which holds one for its route.
pub struct RouteMetrics {
    route: &'static str,
    kinds: RwLock<Vec<Arc<Kind>>>,
}

/// A route's request counter and latency histogram for one method and status.
struct Kind {
    method: &'static str,
    status: u16,
    requests: Counter,
    duration: Histogram,
}

impl Kind {
    fn record(&self, seconds: f64) {
        self.requests.increment(1);
        self.duration.record(seconds);
    }
}

impl RouteMetrics {
    /// The metrics of the route pattern `route` (never a raw path, so the label values are as
    /// few as the routes), none registered yet.
    pub fn new(route: &'static str) -> Self {
        Self {
            route,
            kinds: RwLock::default(),
        }
    }

    /// Counts and times one request with its method (a [`method_label`]) and status.
    pub fn record(&self, method: &'static str, status: u16, seconds: f64) {
        let kinds = self.kinds.read().unwrap_or_else(PoisonError::into_inner);
        let found = kinds
            .iter()
            .find(|kind| kind.method == method && kind.status == status);
        match found {
            Some(kind) => kind.record(seconds),
            None => {
                drop(kinds);
                self.register(method, status).record(seconds);
            }
        }
    }

    /// Registers (once) and returns the metrics of a method and status.
    fn register(&self, method: &'static str, status: u16) -> Arc<Kind> {
        let mut kinds = self.kinds.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(kind) = kinds
            .iter()
            .find(|kind| kind.method == method && kind.status == status)
        {
            return kind.clone();
        }
        let labels = [
            Label::from_static_parts("method", method),
            Label::from_static_parts("route", self.route),
            Label::new("status", status.to_string()),
        ];
        let kind = Arc::new(Kind {
            method,
            status,
            requests: metrics::counter!("seckill_http_requests_total", labels.iter()),
            duration: metrics::histogram!("seckill_http_request_duration_seconds", labels.iter()),
        });
        kinds.push(kind.clone());
        kind
    }
}

/// The method as a label value: the methods the routes take, and `other` for any other, so a
/// client cannot make up label values.
pub(super) fn method_label(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        _ => "other",
    }
}
