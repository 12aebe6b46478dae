//! Guarded sales: before the start, every shopper fetches its buy token as the sale page does
//! (`POST /api/v1/products/{id}/buy-token`, after solving the puzzle of
//! `GET /api/v1/products/{id}/challenge` for a `challenge` sale), and then buys with it. The
//! fetching is set-up, not load: it is not timed with the crowd.

use anyhow::{Context, bail};
use clap::ValueEnum;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What the sale the bench puts on asks of its buyers, as the server's event guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Guard {
    /// A session is enough.
    None,
    /// Buys carry a buy token.
    Token,
    /// Buys carry a buy token, handed out for a solved puzzle.
    Challenge,
}

impl Guard {
    /// The server's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Token => "token",
            Self::Challenge => "challenge",
        }
    }
}

/// The first decimal nonce (0, 1, 2, …) such that SHA-256(challenge ‖ nonce) starts with
/// `difficulty` zero bits: the answer to a guarded sale's puzzle, found as the sale page finds
/// it.
pub fn solve(challenge: &str, difficulty: u8) -> String {
    let prefix = Sha256::new().chain_update(challenge);
    (0u64..)
        .map(|n| n.to_string())
        .find(|nonce| {
            let digest = prefix.clone().chain_update(nonce).finalize();
            leading_zero_bits(&digest) >= u32::from(difficulty)
        })
        .expect("some nonce answers any puzzle the server sets")
}

fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut zeros = 0;
    for byte in digest {
        zeros += byte.leading_zeros();
        if *byte != 0 {
            break;
        }
    }
    zeros
}

/// Answers the server turns a token request away with before trying again: the bench waits as
/// long as it is told, this many times at most per shopper.
const TRIES: usize = 20;

/// A buy token for each shopper (in the shoppers' order), `concurrency` requests at a time.
pub async fn fetch_tokens(
    client: &reqwest::Client,
    base: &str,
    product: i64,
    guard: Guard,
    shoppers: &Arc<Vec<String>>,
    concurrency: usize,
) -> anyhow::Result<Vec<String>> {
    eprintln!(
        "fetching {} buy tokens ({} sale)…",
        shoppers.len(),
        guard.as_str()
    );
    let next = Arc::new(AtomicUsize::new(0));
    let fetchers: Vec<_> = (0..concurrency.min(shoppers.len()))
        .map(|_| {
            let (client, base) = (client.clone(), base.to_owned());
            let (shoppers, next) = (shoppers.clone(), next.clone());
            tokio::spawn(async move {
                let mut fetched = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(shopper) = shoppers.get(i) else {
                        return Ok::<_, anyhow::Error>(fetched);
                    };
                    let token = fetch_token(&client, &base, product, guard, shopper).await?;
                    fetched.push((i, token));
                }
            })
        })
        .collect();
    let mut tokens = vec![String::new(); shoppers.len()];
    for fetcher in fetchers {
        for (i, token) in fetcher.await.context("a token fetcher panicked")?? {
            tokens[i] = token;
        }
    }
    Ok(tokens)
}

/// One shopper's buy token: the puzzle solved first for a `challenge` sale.
async fn fetch_token(
    client: &reqwest::Client,
    base: &str,
    product: i64,
    guard: Guard,
    shopper: &str,
) -> anyhow::Result<String> {
    let answer = match guard {
        Guard::Challenge => {
            let url = format!("{base}/api/v1/products/{product}/challenge");
            let puzzle = call(client.get(url).bearer_auth(shopper)).await?;
            let challenge = puzzle["challenge"]
                .as_str()
                .context("a challenge without `challenge`")?
                .to_owned();
            let difficulty = puzzle["difficulty"]
                .as_u64()
                .and_then(|d| u8::try_from(d).ok())
                .context("a challenge without `difficulty`")?;
            let found = challenge.clone();
            let nonce = tokio::task::spawn_blocking(move || solve(&found, difficulty)).await?;
            json!({ "challenge": challenge, "nonce": nonce })
        }
        Guard::Token | Guard::None => json!({}),
    };
    let url = format!("{base}/api/v1/products/{product}/buy-token");
    let granted = call(client.post(url).bearer_auth(shopper).json(&answer)).await?;
    granted["token"]
        .as_str()
        .map(str::to_owned)
        .context("a buy token answer without `token`")
}

/// A request's JSON answer, sent again after the `Retry-After` of a refusal that has one
/// (`too_early`, `rate_limited`).
async fn call(request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    for _ in 0..TRIES {
        let attempt = request
            .try_clone()
            .context("a request that cannot be sent twice")?;
        let response = attempt.send().await?;
        let status = response.status();
        let wait = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let body: Value = response.json().await.unwrap_or(Value::Null);
        match wait {
            _ if status.is_success() => return Ok(body),
            Some(secs) if status.is_client_error() => {
                tokio::time::sleep(Duration::from_secs(secs.clamp(1, 60))).await;
            }
            _ => bail!("fetching a buy token answered {status}: {body}"),
        }
    }
    bail!("fetching a buy token was refused {TRIES} times")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solved_puzzle_has_the_zero_bits_asked_for() {
        for difficulty in [0, 1, 8, 12] {
            let nonce = solve("a challenge", difficulty);
            let digest = Sha256::digest(format!("a challenge{nonce}"));
            assert!(leading_zero_bits(&digest) >= u32::from(difficulty));
        }
        assert_eq!(solve("anything", 0), "0");
        assert_eq!(leading_zero_bits(&[0, 0x10, 0xff]), 11);
    }
}
