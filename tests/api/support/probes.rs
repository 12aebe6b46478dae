//! What a load balancer and a service manager do to a process: read its `/readyz` until it
//! says what they wait for, and send it SIGTERM (or SIGINT) to stop it.

use super::http::status_and_json;
use reqwest::{Client, StatusCode};
use serde_json::Value;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// `/readyz` of the process at `base`: its status and body.
pub async fn readyz(client: &Client, base: &str) -> (StatusCode, Value) {
    let answer = client.get(format!("{base}/readyz")).send().await.unwrap();
    status_and_json(answer).await
}

/// Reads `/readyz` every 100 ms until it answers `status`, failing the test when it has not
/// within `within`; returns the body and how long it took.
pub async fn readyz_turns(
    client: &Client,
    base: &str,
    status: StatusCode,
    within: Duration,
) -> (Value, Duration) {
    let started = Instant::now();
    loop {
        let (now, body) = readyz(client, base).await;
        if now == status {
            return (body, started.elapsed());
        }
        assert!(
            started.elapsed() < within,
            "/readyz still answers {now} {body} after {within:?}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `signal` (`TERM`, `INT`) to `child`, as a service manager stops it.
pub async fn signal(child: &Child, signal: &str) {
    let pid = child.id().expect("the process still runs").to_string();
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .await
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// Waits for `child` to exit within `within`; returns how long it took and whether it exited
/// with status 0.
pub async fn exits_within(child: &mut Child, within: Duration) -> (Duration, bool) {
    let started = Instant::now();
    let status = tokio::time::timeout(within, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the process still runs {within:?} after it was told to stop"))
        .unwrap();
    (started.elapsed(), status.success())
}
