//! A rolling restart as a client sees it: shoppers who buy once through the load balancer and
//! then keep reading their orders, every answer recorded (a failure is any 5xx, any other
//! answer a buy or a read must not get, and any request without an answer); and a watch on a
//! stopping server's own `/readyz`, which must go 503 before the server stops accepting.

use super::buy;
use super::http::{client_builder, code, status_and_json};
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A request that failed.
pub struct Failure {
    /// When it was sent, from the crowd's start.
    pub sent: Duration,
    /// `buy` or `orders`.
    pub request: &'static str,
    /// The status and body, or the transport error with its causes.
    pub error: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} sent at {:?}: {}",
            self.request, self.sent, self.error
        )
    }
}

/// What one shopper got.
struct Shopped {
    /// The buy's order, when accepted.
    order: Option<i64>,
    /// How many requests were answered as they should be.
    answered: usize,
    /// The requests that were not.
    failures: Vec<Failure>,
}

/// What the crowd got, once every shopper has stopped.
pub struct Tally {
    /// The orders of the buys answered 202.
    pub accepted: HashSet<i64>,
    /// Requests answered as they should be.
    pub answered: usize,
    /// Requests that failed.
    pub failures: Vec<Failure>,
}

/// Shoppers at work: each buys one unit, then reads their orders every second until told to
/// stop.
pub struct Shoppers {
    /// Tells the shoppers to stop once they have read their orders after their buy.
    stop: watch::Sender<bool>,
    /// Requests answered as they should be so far, to see traffic flow through each restart.
    answered: Arc<AtomicUsize>,
    /// Buys sent and answered (or failed) so far, to restart under a crowd and to stop it
    /// only once everyone has bought.
    bought: Arc<AtomicUsize>,
    /// Each shopper's task.
    tasks: Vec<JoinHandle<Shopped>>,
}

impl Shoppers {
    /// One shopper per token, buying `product` through `base`, the `i`-th at `i × spacing`
    /// from now: the buys spread over the restarts.
    pub fn start(
        client: &reqwest::Client,
        base: &str,
        tokens: Vec<String>,
        product: i64,
        spacing: Duration,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let answered = Arc::new(AtomicUsize::new(0));
        let bought = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let tasks = tokens
            .into_iter()
            .enumerate()
            .map(|(i, token)| {
                let shopper = Shopper {
                    client: client.clone(),
                    base: base.to_owned(),
                    token,
                    start,
                    answered: answered.clone(),
                };
                let mut stopped = stopped.clone();
                let bought = bought.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(start + spacing * i as u32).await;
                    let mut shopped = Shopped {
                        order: None,
                        answered: 0,
                        failures: Vec::new(),
                    };
                    shopper.buy(product, &mut shopped).await;
                    bought.fetch_add(1, Ordering::SeqCst);
                    loop {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        shopper.read_orders(&mut shopped).await;
                        if *stopped.borrow() {
                            return shopped;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                            _ = stopped.wait_for(|stop| *stop) => {}
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            answered,
            bought,
            tasks,
        }
    }

    /// Requests answered as they should be so far.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    /// Waits until `n` shoppers have bought (up to 60 s).
    pub async fn wait_bought(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.bought.load(Ordering::SeqCst) < n {
            assert!(
                Instant::now() < deadline,
                "{n} buys not answered after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the shoppers (each reads its orders once more after its buy) and tallies.
    pub async fn finish(self) -> Tally {
        self.stop.send_replace(true);
        let mut tally = Tally {
            accepted: HashSet::new(),
            answered: 0,
            failures: Vec::new(),
        };
        for task in self.tasks {
            let shopped = tokio::time::timeout(Duration::from_secs(120), task)
                .await
                .expect("a shopper was still waiting for an answer after 120 s")
                .unwrap();
            if let Some(order) = shopped.order {
                assert!(tally.accepted.insert(order), "order {order} answered twice");
            }
            tally.answered += shopped.answered;
            tally.failures.extend(shopped.failures);
        }
        tally
    }
}

/// One shopper's link to the shop.
struct Shopper {
    /// The crowd's client (its connections to the load balancer kept alive).
    client: reqwest::Client,
    /// The load balancer's URL.
    base: String,
    /// The shopper's session.
    token: String,
    /// The crowd's start, to date failures.
    start: Instant,
    /// The crowd's count of requests answered as they should be.
    answered: Arc<AtomicUsize>,
}

impl Shopper {
    /// One buy of one unit: 202 or 409 `sold_out`, anything else is a failure.
    async fn buy(&self, product: i64, shopped: &mut Shopped) {
        let sent = self.start.elapsed();
        let request = buy::request(&self.client, &self.base, &self.token, product, 1);
        let outcome = match request.send().await {
            Err(e) => Err(transport_error(&e)),
            Ok(response) => match status_and_json(response).await {
                (StatusCode::ACCEPTED, body) => {
                    shopped.order = body["order_id"].as_str().and_then(|id| id.parse().ok());
                    Ok(())
                }
                (StatusCode::CONFLICT, body) if code(&body) == "sold_out" => Ok(()),
                (status, body) => Err(format!("{status}: {body}")),
            },
        };
        self.record("buy", sent, outcome, shopped);
    }

    /// `GET /api/v1/orders`: 200, anything else is a failure.
    async fn read_orders(&self, shopped: &mut Shopped) {
        let sent = self.start.elapsed();
        let request = self
            .client
            .get(format!("{}/api/v1/orders", self.base))
            .bearer_auth(&self.token);
        let outcome = match request.send().await {
            Err(e) => Err(transport_error(&e)),
            Ok(response) => match status_and_json(response).await {
                (StatusCode::OK, _) => Ok(()),
                (status, body) => Err(format!("{status}: {body}")),
            },
        };
        self.record("orders", sent, outcome, shopped);
    }

    fn record(
        &self,
        request: &'static str,
        sent: Duration,
        outcome: Result<(), String>,
        shopped: &mut Shopped,
    ) {
        match outcome {
            Ok(()) => {
                shopped.answered += 1;
                self.answered.fetch_add(1, Ordering::SeqCst);
            }
            Err(error) => shopped.failures.push(Failure {
                sent,
                request,
                error,
            }),
        }
    }
}

/// A transport error with its causes (a reset connection shows as a cause).
fn transport_error(error: &reqwest::Error) -> String {
    let mut text = format!("no answer: {error}");
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// When a stopping server's `/readyz` first answered 503 and when it first refused a
/// connection, from the moment it was told to stop.
#[derive(Debug)]
pub struct Drain {
    /// The first 503.
    pub unready: Option<Duration>,
    /// The first refused connection: it no longer accepts.
    pub refused: Option<Duration>,
}

/// Watches `base`'s `/readyz` every 10 ms, each time on a new connection, from now until it
/// refuses a connection (up to 60 s).
pub fn watch_drain(base: &str) -> JoinHandle<Drain> {
    let url = format!("{base}/readyz");
    let client = client_builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let since = Instant::now();
    tokio::spawn(async move {
        let mut drain = Drain {
            unready: None,
            refused: None,
        };
        while since.elapsed() < Duration::from_secs(60) {
            match client.get(&url).send().await {
                Ok(response) if response.status() == StatusCode::SERVICE_UNAVAILABLE => {
                    drain.unready.get_or_insert(since.elapsed());
                }
                Err(e) if e.is_connect() => {
                    drain.refused = Some(since.elapsed());
                    break;
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drain
    })
}
