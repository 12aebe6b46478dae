//! Delivers the gateway's asynchronous notifications the way Alipay does: a form POST to the
//! shop's `notify_url`, repeated until the answer's body is exactly `success`, at most
//! [`DELIVERIES`] times, then given up.

use crate::payment::install_crypto_provider;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The waits before each retry, after the first delivery. Alipay spreads its eight deliveries
/// over a day; the sandbox keeps the count but shortens the schedule to about two minutes, so a
/// shop that was down briefly is still told while someone watches.
const RETRY_DELAYS: [Duration; 7] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(15),
    Duration::from_secs(30),
    Duration::from_secs(60),
];

/// Every delivery of a notification, the first included.
pub(super) const DELIVERIES: usize = RETRY_DELAYS.len() + 1;

/// How many notifications may be on their way (or waiting for a retry) at once. Each holds a
/// task and its parameters; beyond this, new ones are dropped, as Alipay too gives up.
const MAX_IN_FLIGHT: usize = 4096;

/// How long one delivery waits for the shop's answer.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends notifications in the background, a bounded number at a time.
#[derive(Debug)]
pub(super) struct Notifier {
    client: reqwest::Client,
    in_flight: Arc<Semaphore>,
}

impl Notifier {
    /// A notifier with its own HTTP client (after installing the process's TLS provider,
    /// without which reqwest cannot build one: a notify URL may be https). Redirects are not
    /// followed: Alipay posts to the `notify_url` it was given, nowhere else.
    pub fn new() -> anyhow::Result<Self> {
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(DELIVERY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            client,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        })
    }

    /// Starts delivering `params` to `url` on a task of its own, or drops them with a warning
    /// when [`MAX_IN_FLIGHT`] notifications are already under way. Must be called within a
    /// Tokio runtime.
    pub fn send(&self, url: String, params: Vec<(String, String)>) {
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            tracing::warn!(%url, "sandbox gateway: too many notifications in flight; dropped");
            return;
        };
        let client = self.client.clone();
        tokio::spawn(async move {
            deliver(&client, &url, &params).await;
            drop(permit);
        });
    }
}

/// Posts until the shop answers `success` or the schedule runs out.
async fn deliver(client: &reqwest::Client, url: &str, params: &[(String, String)]) {
    let waits = std::iter::once(Duration::ZERO).chain(RETRY_DELAYS);
    for (attempt, wait) in (1..).zip(waits) {
        tokio::time::sleep(wait).await;
        match post_once(client, url, params).await {
            Ok(()) => return,
            Err(answer) => {
                tracing::info!(
                    url,
                    attempt,
                    answer,
                    "sandbox gateway: notification refused"
                );
            }
        }
    }
    tracing::warn!(
        url,
        "sandbox gateway: notification given up after {DELIVERIES} deliveries"
    );
}

/// One delivery: `Ok` only for a body that is exactly `success`; otherwise what came back.
async fn post_once(
    client: &reqwest::Client,
    url: &str,
    params: &[(String, String)],
) -> Result<(), String> {
    let response = client
        .post(url)
        .form(params)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.text().await.map_err(|e| e.to_string())?;
    if body == "success" {
        Ok(())
    } else {
        Err(format!(
            "{status}: {}",
            body.chars().take(80).collect::<String>()
        ))
    }
}
