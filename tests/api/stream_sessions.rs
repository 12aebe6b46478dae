//! A console dashboard stream lasts no longer than its session: signing out on any server, or
//! the session expiring, ends every stream the session holds open, including those of a copied
//! cookie, and gives their places back, so a flood of them under an ended session does not
//! lock the operator's next session out of the dashboard.
//!
//! Console sessions belong to whoever holds the admin token, not to an account, so disabling
//! an account ends no console session; shoppers have no stream.

use crate::support::operator::{Operator, browser_builder, operator_with};
use crate::support::{TestApp, client_builder};
use reqwest::redirect::Policy;
use reqwest::{Client, Response, StatusCode};
use seckill::clock::SystemClock;
use seckill::http::admin::SESSION_TTL_MS;
use seckill::http::admin::dashboard::MAX_STREAMS;
use std::sync::Arc;
use std::time::Duration;

/// How long a stream may take to end before the test fails: far beyond the revocation sync's
/// second and the stream's own, on a busy machine. A bound on failing, not a speed asserted.
const END_WITHIN: Duration = Duration::from_secs(20);

/// An operator signed in to `app`'s console, in a browser that does not follow redirects.
async fn signed_in(app: &TestApp) -> Operator {
    operator_with(app, browser_builder(app).redirect(Policy::none())).await
}

/// A client of its own, holding nothing but the cookie it is given.
fn bare_client() -> Client {
    client_builder().redirect(Policy::none()).build().unwrap()
}

/// Opens the dashboard stream on `app` with the session cookie `cookie` (a `Cookie` header
/// value), and reads its first event, so the stream is known to be running.
async fn open_stream(app: &TestApp, client: &Client, cookie: &str) -> Response {
    let mut stream = client
        .get(app.url("/admin/dashboard/stream"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let first = tokio::time::timeout(END_WITHIN, stream.chunk())
        .await
        .expect("the first event at once")
        .unwrap()
        .expect("a first event");
    assert!(
        String::from_utf8_lossy(&first).contains("snapshot"),
        "{first:?}"
    );
    stream
}

/// The status of a new dashboard stream on `app` for `cookie`, closed at once.
async fn stream_status(app: &TestApp, client: &Client, cookie: &str) -> StatusCode {
    client
        .get(app.url("/admin/dashboard/stream"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
}

/// Reads `stream` to its end and asserts that its last event says the session ended; panics
/// if it is still running after [`END_WITHIN`].
async fn assert_ends(stream: Response, why: &str) {
    let rest = tokio::time::timeout(END_WITHIN, stream.text())
        .await
        .unwrap_or_else(|_| panic!("the stream still runs after {END_WITHIN:?}: {why}"))
        .expect("the stream ends cleanly");
    let last = rest.trim_end().rsplit("\n\n").next().unwrap_or_default();
    assert!(
        last.contains("event: ended"),
        "{why}: the last event: {last}"
    );
}

/// Signs `operator` out of `app`'s console with the form's CSRF token.
async fn sign_out(app: &TestApp, operator: &Operator) {
    let signed_out = operator
        .browser
        .post(app.url("/admin/logout"))
        .form(&[("csrf", &operator.csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn signing_out_ends_the_sessions_streams_here_and_on_every_server() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    let operator = signed_in(&first).await;
    let other = signed_in(&first).await;
    let cookie = operator.cookie(&first);
    let client = bare_client();
    let here = open_stream(&first, &client, &cookie).await;
    let there = open_stream(&second, &client, &cookie).await;
    let others = open_stream(&second, &client, &other.cookie(&first)).await;

    sign_out(&first, &operator).await;
    assert_ends(here, "on the server that took the sign-out").await;
    assert_ends(there, "on another server over the same database").await;

    // Another session's stream goes on: it sends its next second.
    let mut others = others;
    let next = tokio::time::timeout(END_WITHIN, others.chunk())
        .await
        .expect("the other session's next event")
        .unwrap();
    assert!(next.is_some(), "the other session's stream ended too");
    drop(others);
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn an_expired_session_ends_its_stream() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    let operator = signed_in(&app).await;
    let cookie = operator.cookie(&app);
    let stream = open_stream(&app, &bare_client(), &cookie).await;

    clock.advance(SESSION_TTL_MS);
    assert_ends(stream, "past the session's expiry").await;
    app.stop().await;
}

#[tokio::test]
async fn streams_of_a_signed_out_session_give_their_places_to_the_next_session() {
    let app = TestApp::spawn().await;
    let operator = signed_in(&app).await;
    let copied = operator.cookie(&app);
    let client = bare_client();
    let mut streams = Vec::with_capacity(MAX_STREAMS);
    for _ in 0..MAX_STREAMS {
        streams.push(open_stream(&app, &client, &copied).await);
    }
    let next = signed_in(&app).await;
    let next_cookie = next.cookie(&app);
    assert_eq!(
        stream_status(&app, &client, &next_cookie).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "every place is taken by the copied cookie"
    );

    sign_out(&app, &operator).await;
    for stream in streams {
        assert_ends(stream, "a stream of the copied cookie").await;
    }
    assert_eq!(
        stream_status(&app, &client, &next_cookie).await,
        StatusCode::OK,
        "the next session opens its dashboard"
    );
    app.stop().await;
}
