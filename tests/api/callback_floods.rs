//! The payment provider's callbacks as a hostile client sends them: forged notifications and
//! returns in a flood, and parameter names that carry a line of their own. Those that fail
//! verification are throttled per address and logged a few lines a second, each value
//! escaped; the provider's own notification still pays, from the flooding address too. The
//! server's log lines are caught in the process's own text format.

use crate::support::sandbox::{Params, sold};
use crate::support::{TestApp, code, status_and_json};
use reqwest::StatusCode;
use seckill::config::LogFormat;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::EnvFilter;

/// What the forged parameter name tries to start a log line with.
const FORGED_LINE: &str = "2026-11-27T09:00:00Z ERROR forged";

/// The log lines written on this test's thread, where its server runs (a current-thread
/// runtime), in the text format `seckill serve` writes.
struct Logs {
    lines: Arc<Mutex<Vec<u8>>>,
    _guard: DefaultGuard,
}

/// One writer of [`Logs`].
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        lines.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Catches the warnings and errors from here on.
    fn capture() -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let writer = lines.clone();
        let subscriber = seckill::cli::log_subscriber(
            LogFormat::Text,
            false,
            EnvFilter::new("warn"),
            move || LogWriter(writer.clone()),
        );
        Self {
            lines,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Everything written so far.
    fn text(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&lines).into_owned()
    }

    /// How many lines so far are about payment callbacks.
    fn callback_lines(&self) -> usize {
        self.text()
            .lines()
            .filter(|line| line.contains("payment"))
            .count()
    }
}

/// A notification with a bad signature.
fn forged() -> Params {
    [
        ("out_trade_no", "1"),
        ("total_amount", "0.01"),
        ("trade_status", "TRADE_SUCCESS"),
        ("sign", "AAAA"),
    ]
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .to_vec()
}

/// POSTs a notification from `from` (the proxy's header) or the test's own address; the
/// status, `Retry-After` and text of the answer.
async fn notify_from(
    app: &TestApp,
    from: Option<&str>,
    params: &Params,
) -> (StatusCode, Option<String>, String) {
    let mut request = app.client.post(app.url("/pay/alipay/notify")).form(params);
    if let Some(address) = from {
        request = request.header("x-forwarded-for", address);
    }
    let response = request.send().await.unwrap();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    (
        response.status(),
        retry_after,
        response.text().await.unwrap(),
    )
}

#[tokio::test]
async fn a_parameter_name_with_a_newline_writes_no_log_line_of_its_own() {
    let logs = Logs::capture();
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let name = format!("x\n{FORGED_LINE}");
    let repeated: Params = vec![(name.clone(), "1".into()), (name, "2".into())];
    assert_eq!(app.notify(&repeated).await, "failure");
    let encoded = format!("x%0A{}", FORGED_LINE.replace(' ', "+"));
    let response = app
        .client
        .get(app.url(&format!("/pay/alipay/return?{encoded}=1&{encoded}=2")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    let text = logs.text();
    let forged_lines = text
        .lines()
        .filter(|line| line.starts_with("2026-11-27T09:00:00Z ERROR"))
        .count();
    assert_eq!(forged_lines, 0, "a line of the client's choosing: {text}");
    assert_eq!(
        text.matches("is repeated").count(),
        2,
        "each refusal is logged, escaped: {text}"
    );
}

#[tokio::test]
async fn a_flood_of_forged_callbacks_is_refused_after_a_bound_and_the_genuine_notification_still_pays()
 {
    let logs = Logs::capture();
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (_, orders) = sold(&app, 1, 1).await;
    let (token, order) = &orders[0];
    app.open_checkout(token, order).await;
    let (status, page) = app.checkout(order, "pay_without_notice").await;
    assert_eq!(status, StatusCode::OK, "{page}");

    let started = Instant::now();
    let (mut answered, mut refused) = (0_u64, 0_u64);
    for _ in 0..100 {
        let (status, retry_after, text) = notify_from(&app, None, &forged()).await;
        match status {
            StatusCode::OK => {
                assert_eq!(text, "failure");
                answered += 1;
            }
            StatusCode::TOO_MANY_REQUESTS => {
                // Not `success`, so one more failure to the provider's protocol; in the API's
                // error shape.
                assert!(text.contains("\"rate_limited\""), "{text}");
                assert!(retry_after.is_some(), "a refusal says when to come back");
                refused += 1;
            }
            other => panic!("a forged notification answered {other}: {text}"),
        }
    }
    let elapsed = started.elapsed();
    assert!(refused > 0, "100 forged notifications, none refused");
    // A burst of failures, then one a second.
    assert!(
        answered <= 20 + elapsed.as_secs() + 1,
        "{answered} answered in {elapsed:?}"
    );
    let lines = logs.callback_lines();
    assert!(
        lines as u64 <= answered,
        "{lines} lines for {answered} answered: {}",
        logs.text()
    );

    // The return page counts against the same limit, and answers in the API's error shape.
    let response = app
        .client
        .get(app.url(&format!(
            "/pay/alipay/return?out_trade_no={order}&sign=AAAA"
        )))
        .send()
        .await
        .unwrap();
    assert!(response.headers().contains_key("retry-after"));
    let (status, body) = status_and_json(response).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );

    // The provider's own word, from the same address, is never refused for rate.
    let genuine = app.sandbox_notification(order);
    let (status, _, text) = notify_from(&app, None, &genuine).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "success"));
    app.wait_for_status(token, order, "paid").await;
}

#[tokio::test]
async fn forged_callbacks_from_many_addresses_write_a_few_lines_a_second() {
    let logs = Logs::capture();
    let app = TestApp::spawn_with(TestApp::manual_clock(), |c| {
        c.payment.provider = Some(seckill::config::ProviderKind::Sandbox);
        c.client_ip_header = Some("x-forwarded-for".parse().unwrap());
    })
    .await;
    let started = Instant::now();
    for i in 0..200 {
        let address = format!("10.0.{}.{}", i / 250, i % 250 + 1);
        let (status, _, text) = notify_from(&app, Some(&address), &forged()).await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "failure"));
    }
    let elapsed = started.elapsed();
    // Ten lines in each second that has any, and a flood started inside one second.
    let bound = 10 * (elapsed.as_secs() + 2);
    let lines = logs.callback_lines() as u64;
    assert!(
        lines <= bound.min(199),
        "{lines} lines for 200 forged notifications in {elapsed:?}"
    );
}
