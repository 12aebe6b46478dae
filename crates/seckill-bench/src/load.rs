//! The crowd: `concurrency` shoppers in flight at once, each taking the next shopper of the
//! sale in turn, until the time or the request budget runs out. Every answer is timed into an
//! HDR histogram per kind of request and counted by its outcome (`accepted`, `sold_out`, …);
//! every accepted order id is kept, for the checks.

use crate::Scenario;
use crate::conn::{Connection, Failure, Payload, Received, Target};
use crate::setup::Sale;
use bytes::Bytes;
use hdrhistogram::Histogram;
use hyper::header::HeaderValue;
use hyper::{Method, StatusCode};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// What to fire.
pub struct Plan {
    pub scenario: Scenario,
    pub concurrency: usize,
    pub duration: Duration,
    pub requests: Option<u64>,
    pub sale: Option<Sale>,
}

/// A buy the server accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub order: i64,
    pub units: i64,
}

/// Everything a run saw.
pub struct Outcome {
    pub elapsed: Duration,
    /// Latency in microseconds, by kind of request (`buy`, `browse`, `pay`, …).
    pub latency: BTreeMap<&'static str, Histogram<u64>>,
    /// Answers by kind and outcome, e.g. `buy accepted` or `buy sold_out`.
    pub answers: BTreeMap<String, u64>,
    pub accepted: Vec<Accepted>,
    /// Orders the crowd cancelled (mixed scenario), whose units went back on sale.
    pub cancelled: Vec<Accepted>,
    /// Orders the crowd paid at the sandbox payment gateway (mixed scenario): its notification
    /// must make each of them paid.
    pub paid: Vec<Accepted>,
}

impl Outcome {
    /// HTTP requests answered (or failed).
    pub fn requests(&self) -> u64 {
        self.answers.values().sum()
    }

    /// How many answers of `kind` had `outcome`.
    pub fn count(&self, kind: &str, outcome: &str) -> u64 {
        self.answers
            .get(&format!("{kind} {outcome}"))
            .copied()
            .unwrap_or(0)
    }
}

/// One shopper-slot's own tallies, merged at the end (no locks while firing). Answers are
/// counted by kind, then outcome, so counting one allocates nothing once its outcome was seen.
#[derive(Default)]
struct Tally {
    latency: BTreeMap<&'static str, Histogram<u64>>,
    answers: BTreeMap<&'static str, BTreeMap<String, u64>>,
    accepted: Vec<Accepted>,
    cancelled: Vec<Accepted>,
    paid: Vec<Accepted>,
}

impl Tally {
    fn record(&mut self, kind: &'static str, took: Duration, outcome: &str) {
        let histogram = self.latency.entry(kind).or_insert_with(new_histogram);
        histogram.saturating_record(took.as_micros() as u64);
        let outcomes = self.answers.entry(kind).or_default();
        match outcomes.get_mut(outcome) {
            Some(n) => *n += 1,
            None => {
                outcomes.insert(outcome.to_owned(), 1);
            }
        }
    }

    fn merge(&mut self, other: Tally) {
        for (kind, histogram) in other.latency {
            let mine = self.latency.entry(kind).or_insert_with(new_histogram);
            let _ = mine.add(&histogram);
        }
        for (kind, outcomes) in other.answers {
            let mine = self.answers.entry(kind).or_default();
            for (outcome, n) in outcomes {
                *mine.entry(outcome).or_default() += n;
            }
        }
        self.accepted.extend(other.accepted);
        self.cancelled.extend(other.cancelled);
        self.paid.extend(other.paid);
    }

    /// Answers keyed `"kind outcome"`, as the report shows them.
    fn answers_by_name(&self) -> BTreeMap<String, u64> {
        self.answers
            .iter()
            .flat_map(|(kind, outcomes)| {
                outcomes
                    .iter()
                    .map(move |(outcome, n)| (format!("{kind} {outcome}"), *n))
            })
            .collect()
    }
}

/// 1 µs to 60 s at three significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Live counters for the progress line: successes, the usual refusals by reason, the rest.
#[derive(Default)]
struct Live {
    requests: AtomicU64,
    accepted: AtomicU64,
    sold_out: AtomicU64,
    limit_reached: AtomicU64,
    rate_limited: AtomicU64,
    other: AtomicU64,
    failed: AtomicU64,
}

impl Live {
    fn count(&self, outcome: &str) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match outcome {
            "accepted" | "ok" => &self.accepted,
            "sold_out" => &self.sold_out,
            "limit_reached" => &self.limit_reached,
            "rate_limited" => &self.rate_limited,
            "timeout" | "connection_error" => &self.failed,
            _ if outcome.starts_with("http_5") => &self.failed,
            _ => &self.other,
        }
        .fetch_add(1, Ordering::Relaxed);
    }
}

/// Shared by the shopper-slots.
struct Crowd {
    target: Target,
    plan: Plan,
    /// Each shopper's `Authorization` header, made once rather than per request.
    tokens: Vec<HeaderValue>,
    /// The buy request's body: one unit of the sale's product, with each shopper's buy token
    /// (in the shoppers' order) when the sale is guarded, else one body for all.
    buy_bodies: Vec<Bytes>,
    next_shopper: AtomicUsize,
    issued: AtomicU64,
    /// Accepted visits of the mixed scenario, to pay or cancel them in a fixed proportion.
    visits: AtomicU64,
    live: Live,
}

/// Fires the crowd and collects what it saw. Fails before firing when a shopper's token
/// cannot be sent as a header.
pub async fn drive(target: Target, plan: Plan) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let deadline = started + plan.duration;
    let concurrency = plan.concurrency;
    let (tokens, buy_bodies) = match &plan.sale {
        Some(sale) => (
            sale.shoppers
                .iter()
                .map(|token| HeaderValue::from_str(&format!("Bearer {token}")))
                .collect::<Result<_, _>>()?,
            buy_bodies(sale),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let crowd = Arc::new(Crowd {
        target,
        plan,
        tokens,
        buy_bodies,
        next_shopper: AtomicUsize::new(0),
        issued: AtomicU64::new(0),
        visits: AtomicU64::new(0),
        live: Live::default(),
    });
    let progress = tokio::spawn(show_progress(crowd.clone(), started));
    let slots: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(crowd.clone().slot(deadline)))
        .collect();
    let mut total = Tally::default();
    for slot in slots {
        if let Ok(tally) = slot.await {
            total.merge(tally);
        }
    }
    let elapsed = started.elapsed();
    progress.abort();
    Ok(Outcome {
        elapsed,
        answers: total.answers_by_name(),
        latency: total.latency,
        accepted: total.accepted,
        cancelled: total.cancelled,
        paid: total.paid,
    })
}

/// The bodies of the sale's buys (see [`Crowd::buy_bodies`]).
fn buy_bodies(sale: &Sale) -> Vec<Bytes> {
    let body = |buy_token: Option<&String>| {
        let mut body = json!({ "product_id": sale.product, "quantity": 1 });
        if let Some(buy_token) = buy_token {
            body["buy_token"] = json!(buy_token);
        }
        Bytes::from(body.to_string())
    };
    match &sale.buy_tokens {
        Some(buy_tokens) => buy_tokens.iter().map(|t| body(Some(t))).collect(),
        None => vec![body(None)],
    }
}

async fn show_progress(crowd: Arc<Crowd>, started: Instant) {
    let bar = ProgressBar::new(crowd.plan.duration.as_millis() as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {elapsed:>4} {msg}") {
        bar.set_style(style);
    }
    let mut last = (Instant::now(), 0);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let live = &crowd.live;
        let requests = live.requests.load(Ordering::Relaxed);
        let rate = (requests - last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), requests);
        bar.set_position(started.elapsed().as_millis() as u64);
        let n = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        bar.set_message(format!(
            "{requests} requests  {rate:.0}/s  ok {}  sold_out {}  limit_reached {}  \
             rate_limited {}  other {}  failed {}",
            n(&live.accepted),
            n(&live.sold_out),
            n(&live.limit_reached),
            n(&live.rate_limited),
            n(&live.other),
            n(&live.failed),
        ));
    }
}

/// The parts of an answer the crowd looks at, borrowed from its body (ids, statuses and error
/// codes never hold escapes).
#[derive(Default, Deserialize)]
struct Reply<'a> {
    order_id: Option<&'a str>,
    status: Option<&'a str>,
    /// Where a pay request sends the shopper.
    #[serde(borrow)]
    pay_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    error: Option<ErrorReply<'a>>,
}

#[derive(Deserialize)]
struct ErrorReply<'a> {
    code: &'a str,
}

/// The path and query of `url` below the bench's path `prefix`: a pay URL names the gateway
/// by the server's public address, which the crowd reaches through its own target.
fn path_of<'u>(url: &'u str, prefix: &str) -> Option<&'u str> {
    let after_scheme = url.split_once("://")?.1;
    let path = &after_scheme[after_scheme.find('/')?..];
    Some(path.strip_prefix(prefix).unwrap_or(path))
}

/// What one request came back with: its status and body, or why there was none.
struct Answer(Result<Received, Failure>);

impl Answer {
    /// The body read as a reply (an empty one when there was no answer). Read only when the
    /// status does not say enough.
    fn reply(&self) -> Reply<'_> {
        match &self.0 {
            Ok(received) => serde_json::from_slice(&received.body).unwrap_or_default(),
            Err(_) => Reply::default(),
        }
    }

    /// `accepted` (202), `ok`, `redirect`, the server's error code, `http_NNN`, or why there
    /// was no answer.
    fn outcome(&self) -> Cow<'_, str> {
        let status = match &self.0 {
            Ok(received) => received.status.as_u16(),
            Err(Failure::Timeout) => return Cow::Borrowed("timeout"),
            Err(Failure::Connection) => return Cow::Borrowed("connection_error"),
        };
        match status {
            202 => Cow::Borrowed("accepted"),
            200..=299 => Cow::Borrowed("ok"),
            300..=399 => Cow::Borrowed("redirect"),
            other => match self.reply().error {
                Some(error) => Cow::Borrowed(error.code),
                None => Cow::Owned(format!("http_{other}")),
            },
        }
    }

    /// How long the server asked to wait before trying again, if it did.
    fn retry_after(&self) -> Option<std::time::Duration> {
        self.0.as_ref().ok()?.retry_after
    }

    /// The order a buy's `202` names (a buy that was not accepted names none).
    fn accepted_order(&self) -> Option<i64> {
        match &self.0 {
            Ok(received) if received.status == StatusCode::ACCEPTED => {
                self.reply().order_id?.parse().ok()
            }
            _ => None,
        }
    }
}

/// Who sends a buy: their `Authorization` header and their buy's body.
#[derive(Clone)]
struct Shopper<'c> {
    auth: &'c HeaderValue,
    buy_body: &'c Bytes,
}

/// One slot's connection and tallies.
struct Slot {
    connection: Connection,
    tally: Tally,
}

impl Crowd {
    /// One slot: fires until the deadline or the request budget.
    async fn slot(self: Arc<Self>, deadline: Instant) -> Tally {
        let mut slot = Slot {
            connection: Connection::new(self.target.clone()),
            tally: Tally::default(),
        };
        while Instant::now() < deadline {
            let turn = self.issued.fetch_add(1, Ordering::Relaxed);
            if self.plan.requests.is_some_and(|max| turn >= max) {
                break;
            }
            match (&self.plan.sale, self.plan.scenario) {
                (Some(sale), Scenario::Mixed) => self.shop(sale, &mut slot, deadline).await,
                (Some(_), _) => {
                    self.buy(self.next_shopper(), &mut slot).await;
                }
                (None, scenario) => {
                    self.send(
                        &mut slot,
                        "healthz",
                        Method::GET,
                        "/healthz",
                        Payload::Nothing,
                    )
                    .await;
                    if scenario == Scenario::Hold {
                        // The connection stays open, idle, until the run ends.
                        tokio::time::sleep_until(deadline).await;
                        break;
                    }
                }
            }
        }
        slot.tally
    }

    fn next_shopper(&self) -> Shopper<'_> {
        let i = self.next_shopper.fetch_add(1, Ordering::Relaxed) % self.tokens.len();
        Shopper {
            auth: &self.tokens[i],
            buy_body: &self.buy_bodies[i % self.buy_bodies.len()],
        }
    }

    /// Sends, times and classifies one request.
    async fn send(
        &self,
        slot: &mut Slot,
        kind: &'static str,
        method: Method,
        path: &str,
        payload: Payload<'_>,
    ) -> Answer {
        let started = Instant::now();
        let answer = Answer(slot.connection.send(method, path, payload).await);
        let took = started.elapsed();
        let outcome = answer.outcome();
        slot.tally.record(kind, took, &outcome);
        self.live.count(&outcome);
        answer
    }

    /// One buy of one unit; the accepted order, if any.
    async fn buy(&self, shopper: Shopper<'_>, slot: &mut Slot) -> Option<Accepted> {
        let body = Payload::Shopper(shopper.auth, shopper.buy_body.clone());
        let answer = self
            .send(slot, "buy", Method::POST, "/api/v1/orders", body)
            .await;
        let order = answer.accepted_order()?;
        let accepted = Accepted { order, units: 1 };
        slot.tally.accepted.push(accepted.clone());
        Some(accepted)
    }

    /// A shopper's visit: look at the product, buy, then pay half the orders and cancel a
    /// quarter of them. Told to try again later (an order still on its way to the database
    /// in cluster mode: `409 order_pending` with `Retry-After`), the shopper waits as asked and
    /// tries again, while the run lasts.
    async fn shop(&self, sale: &Sale, slot: &mut Slot, deadline: Instant) {
        let shopper = self.next_shopper();
        let product = format!("/api/v1/products/{}", sale.product);
        self.send(slot, "browse", Method::GET, &product, Payload::Nothing)
            .await;
        let Some(order) = self.buy(shopper.clone(), slot).await else {
            return;
        };
        let visit = self.visits.fetch_add(1, Ordering::Relaxed);
        // The kind of request is also the last segment of its path.
        let action = match visit % 4 {
            0 | 1 => "pay",
            2 => "cancel",
            _ => return,
        };
        let path = format!("/api/v1/orders/{}/{action}", order.order);
        let answer = loop {
            let empty = Payload::Shopper(shopper.auth, Bytes::new());
            let answer = self.send(slot, action, Method::POST, &path, empty).await;
            match answer.retry_after() {
                Some(wait) if Instant::now() + wait < deadline => tokio::time::sleep(wait).await,
                _ => break answer,
            }
        };
        let reply = answer.reply();
        if action == "cancel" && reply.status == Some("cancelled") {
            slot.tally.cancelled.push(order);
        } else if let Some(pay_url) = reply.pay_url {
            self.pay_at_gateway(slot, order, &pay_url).await;
        }
    }

    /// What a shopper's browser does with a pay URL at the sandbox gateway: opens its checkout
    /// page, then presses "pay", which sends them back to the shop (a redirect).
    async fn pay_at_gateway(&self, slot: &mut Slot, order: Accepted, pay_url: &str) {
        let Some(at_gateway) = path_of(pay_url, self.target.prefix()) else {
            return;
        };
        let page = self
            .send(slot, "checkout", Method::GET, at_gateway, Payload::Nothing)
            .await;
        if page.outcome() != "ok" {
            return;
        }
        let confirm = format!("/sandbox/alipay/checkout/{}", order.order);
        let form = Payload::Form(Bytes::from_static(b"action=pay"));
        let paid = self
            .send(slot, "confirm", Method::POST, &confirm, form)
            .await;
        if paid.outcome() == "redirect" {
            slot.tally.paid.push(order);
        }
    }
}
