//! A crowd of buyers against server processes while a backend fails: each buyer buys one unit
//! and tries again as a client would, and the checks every fault must leave true (each
//! accepted order stored exactly once, no process down).

use super::app::TestApp;
use super::buy;
use super::http::{client_builder, code};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::process::Child;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What a buyer was answered in the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 202, with the order id.
    Accepted(i64),
    /// 409 `sold_out`.
    SoldOut,
    /// 503: the server could not decide the buy now.
    Unavailable,
    /// No answer: the connection was refused or cut.
    NoAnswer,
}

/// One buy over HTTP, with `Idempotency-Key: key` when given.
pub async fn try_buy(
    client: &reqwest::Client,
    server: &str,
    token: &str,
    product: i64,
    key: Option<&str>,
) -> Outcome {
    let mut request = buy::request(client, server, token, product, 1);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let Ok(response) = request.send().await else {
        return Outcome::NoAnswer;
    };
    let status = response.status();
    let Ok(body) = response.json::<Value>().await else {
        return Outcome::NoAnswer;
    };
    match status {
        StatusCode::ACCEPTED => {
            Outcome::Accepted(body["order_id"].as_str().unwrap().parse().unwrap())
        }
        StatusCode::CONFLICT => {
            assert_eq!(code(&body), "sold_out", "{body}");
            Outcome::SoldOut
        }
        StatusCode::SERVICE_UNAVAILABLE => Outcome::Unavailable,
        other => panic!("unexpected {other}: {body}"),
    }
}

/// One buyer's buy, once answered.
#[derive(Debug, Clone, Copy)]
pub struct Bought {
    pub outcome: Outcome,
    /// How many times it was sent (more than once after a 503, or after no answer).
    pub tries: usize,
    /// The index of the server that gave the last answer.
    pub server: usize,
}

/// A crowd of buyers, one buy each, spread over the servers in turn.
pub struct Crowd {
    /// How many buys were accepted so far, for a test that strikes mid-crowd.
    accepted: Arc<AtomicUsize>,
    /// Each buyer's task, ending with their last answer.
    buys: Vec<JoinHandle<Bought>>,
}

impl Crowd {
    /// Starts one buy of one unit per token, at most `in_flight` at once. A buy answered 503 is
    /// sent again to the next server; with `keyed`, each buyer sends an `Idempotency-Key` and
    /// a buy without an answer is sent again too, with the same key, as a client retries. It
    /// gives up after 60 s.
    pub fn start(
        client: &reqwest::Client,
        servers: &[String],
        tokens: Vec<String>,
        product: i64,
        in_flight: usize,
        keyed: bool,
    ) -> Self {
        let accepted = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(in_flight));
        let servers: Arc<[String]> = servers.into();
        let buys = tokens
            .into_iter()
            .enumerate()
            .map(|(i, token)| {
                let (client, servers) = (client.clone(), servers.clone());
                let (accepted, gate) = (accepted.clone(), gate.clone());
                tokio::spawn(async move {
                    let _permit = gate.acquire().await.unwrap();
                    let key = keyed.then(|| format!("crowd-{i}"));
                    let sent = Instant::now();
                    let mut tries = 0;
                    loop {
                        let server = (i + tries) % servers.len();
                        tries += 1;
                        let outcome =
                            try_buy(&client, &servers[server], &token, product, key.as_deref())
                                .await;
                        let again = match outcome {
                            Outcome::Accepted(_) | Outcome::SoldOut => false,
                            Outcome::Unavailable => true,
                            Outcome::NoAnswer => keyed,
                        };
                        if !again || sent.elapsed() > Duration::from_secs(60) {
                            if matches!(outcome, Outcome::Accepted(_)) {
                                accepted.fetch_add(1, Ordering::SeqCst);
                            }
                            return Bought {
                                outcome,
                                tries,
                                server,
                            };
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                })
            })
            .collect();
        Self { accepted, buys }
    }

    /// How many buys were accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits until `n` buys were accepted (up to 60 s).
    pub async fn wait_accepted(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.accepted() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} buys accepted after 60 s",
                self.accepted()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Every buyer's answer, once all are in (up to 90 s). Each buyer got an order or "sold
    /// out": none was left without an answer or with a 503.
    pub async fn answers(self) -> Vec<Bought> {
        let mut answers = Vec::with_capacity(self.buys.len());
        for buy in self.buys {
            let bought = tokio::time::timeout(Duration::from_secs(90), buy)
                .await
                .expect("the crowd was not answered within 90 s")
                .unwrap();
            assert!(
                matches!(bought.outcome, Outcome::Accepted(_) | Outcome::SoldOut),
                "a buyer was left with {bought:?}"
            );
            answers.push(bought);
        }
        answers
    }
}

/// The accepted order ids of `answers`, asserting no id was answered twice.
pub fn accepted_ids(answers: &[Bought]) -> HashSet<i64> {
    let mut ids = HashSet::new();
    for bought in answers {
        if let Outcome::Accepted(id) = bought.outcome {
            assert!(ids.insert(id), "two buyers were answered with order {id}");
        }
    }
    ids
}

/// Waits until every accepted order is stored, then checks the database: the orders of
/// `product` not cancelled are exactly `accepted` (each stored once: the id is the key), no
/// more than its `stock`, and its stock was taken once per order.
pub async fn assert_stored_exactly(
    observer: &TestApp,
    product: i64,
    stock: i64,
    accepted: &HashSet<i64>,
) {
    let stored: HashSet<i64> = observer.live_order_ids(product).await.into_iter().collect();
    let lost = accepted.difference(&stored).count();
    let unanswered = stored.difference(accepted).count();
    assert!(
        lost == 0 && unanswered == 0,
        "{lost} accepted orders not stored, {unanswered} stored orders nobody was answered"
    );
    let sold = accepted.len() as i64;
    assert!(sold <= stock, "{sold} sold of {stock}");
    assert_eq!(observer.stored(product).await, (sold, sold, stock - sold));
}

/// Fails the test if any process has exited.
pub fn assert_alive(processes: &mut [(&str, &mut Child)]) {
    for (name, process) in processes {
        if let Some(exit) = process.try_wait().unwrap() {
            panic!("the {name} exited ({exit})");
        }
    }
}

/// An HTTP client for a crowd: answers may take long while a backend is down.
pub fn crowd_client() -> reqwest::Client {
    client_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}
