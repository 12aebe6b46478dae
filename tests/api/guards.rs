//! Guarded sales, tried as a hostile client would: a script that skips the sale page's buy
//! token is refused before the gate and buys nothing; a token is good only for its buyer, its
//! product and its time; a `challenge` sale hands tokens out only for a solved puzzle; an
//! unguarded sale is unaffected; a token from one server buys on another; the operator sets
//! the guard in the console and the API; registration can ask for the puzzle too.

use crate::support::TestDatabase;
use crate::support::operator::{Operator, operator};
use crate::support::{ADMIN_TOKEN, TestApp, assert_form_refused, code, rfc3339, status_and_json};
use crate::support::{fresh_prefix, server_on_with};
use reqwest::StatusCode;
use seckill_bench::solve;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;

const MINUTE: i64 = 60_000;

/// A sale event from `starts_in_ms` after the server's now to an hour after that, guarded by
/// `guard` (the field left out when `None`).
async fn event(app: &TestApp, guard: Option<&str>, starts_in_ms: i64) -> Value {
    let start = app.state.sale.now() + starts_in_ms;
    let mut body = json!({ "starts_at": rfc3339(start), "ends_at": rfc3339(start + 60 * MINUTE) });
    if let Some(guard) = guard {
        body["guard"] = json!(guard);
    }
    let (status, event) = app.admin_post("/api/v1/admin/events", body).await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    event
}

/// A product of `event` with `stock` units, one per buyer.
async fn product_in(app: &TestApp, event: &Value, stock: i64) -> i64 {
    let (status, product) = app
        .admin_post(
            "/api/v1/admin/products",
            json!({
                "event_id": event["id"],
                "name": "Guarded phone",
                "original_price_cents": 10_000,
                "sale_price_cents": 4_999,
                "stock": stock,
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{product}");
    product["id"].as_i64().unwrap()
}

/// A buy of one unit, with `buy_token` if given.
async fn buy_with(
    app: &TestApp,
    session: &str,
    product: i64,
    buy_token: Option<&str>,
) -> (StatusCode, Value) {
    let mut body = json!({ "product_id": product, "quantity": 1 });
    if let Some(buy_token) = buy_token {
        body["buy_token"] = json!(buy_token);
    }
    let request = app.client.post(app.url("/api/v1/orders"));
    status_and_json(
        request
            .bearer_auth(session)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// `POST /api/v1/products/{id}/buy-token`, with `answer` as the body if given.
async fn ask_token(
    app: &TestApp,
    session: &str,
    product: i64,
    answer: Option<Value>,
) -> (StatusCode, Value, Option<String>) {
    let url = app.url(&format!("/api/v1/products/{product}/buy-token"));
    let mut request = app.client.post(url).bearer_auth(session);
    if let Some(answer) = answer {
        request = request.json(&answer);
    }
    let response = request.send().await.unwrap();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    let (status, body) = status_and_json(response).await;
    (status, body, retry_after)
}

/// A buy token the server hands out (for a `challenge` sale, pass the solved answer).
async fn token(app: &TestApp, session: &str, product: i64, answer: Option<Value>) -> String {
    let (status, granted, _) = ask_token(app, session, product, answer).await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    granted["token"].as_str().unwrap().to_owned()
}

/// The product's puzzle, as `session` is given it.
async fn challenge(app: &TestApp, session: &str, product: i64) -> (String, u8) {
    let path = format!("/api/v1/products/{product}/challenge");
    let (status, puzzle) = app.get_json_as(session, &path).await;
    assert_eq!(status, StatusCode::OK, "{puzzle}");
    let difficulty = puzzle["difficulty"].as_u64().unwrap() as u8;
    (puzzle["challenge"].as_str().unwrap().to_owned(), difficulty)
}

/// A nonce that does not answer `challenge`: its hash has fewer than `difficulty` zero bits.
fn wrong_nonce(challenge: &str, difficulty: u8) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|nonce| {
            let digest = Sha256::digest(format!("{challenge}{nonce}"));
            let zeros = digest
                .iter()
                .position(|b| *b != 0)
                .map_or(256, |at| at as u32 * 8 + digest[at].leading_zeros());
            zeros < u32::from(difficulty)
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_skips_the_buy_token_of_a_guarded_sale_is_refused_and_buys_nothing() {
    let app = Arc::new(TestApp::spawn().await);
    let event = event(&app, Some("token"), -MINUTE).await;
    assert_eq!(event["guard"], "token");
    let stock = 5;
    let product = product_in(&app, &event, stock).await;
    assert_eq!(app.product(product).await["guard"], "token");
    let sessions = app.users(40).await;

    // The crowd of scripts, at once: half send no token, half a made-up one.
    let mut scripts = Vec::new();
    for (i, session) in sessions.iter().enumerate() {
        let (app, session) = (app.clone(), session.clone());
        scripts.push(tokio::spawn(async move {
            let made_up = (i % 2 == 1).then_some("eyJ0Ijo.AAAA");
            buy_with(&app, &session, product, made_up).await
        }));
    }
    for (i, script) in scripts.into_iter().enumerate() {
        let (status, body) = script.await.unwrap();
        let expected = if i % 2 == 1 {
            "invalid_buy_token"
        } else {
            "buy_token_required"
        };
        assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, expected));
    }
    assert_eq!(app.stored(product).await, (0, 0, stock));
    assert_eq!(app.product(product).await["remaining"], stock);

    // Through the page's way, the same sale sells.
    let buy_token = token(&app, &sessions[0], product, None).await;
    let (status, body) = buy_with(&app, &sessions[0], product, Some(&buy_token)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(app.stored(product).await, (1, 1, stock - 1));
}

#[tokio::test]
async fn a_buy_token_buys_only_for_its_buyer_and_its_product_until_it_expires() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    let event = event(&app, Some("token"), MINUTE / 2).await;
    let (first, second) = (
        product_in(&app, &event, 5).await,
        product_in(&app, &event, 5).await,
    );
    let sessions = app.users(2).await;
    let (alice, bob) = (&sessions[0], &sessions[1]);

    // Handed out during the countdown, good until a minute after the start.
    let (status, granted, _) = ask_token(&app, alice, first, None).await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    let start = app.state.sale.now() + MINUTE / 2;
    assert_eq!(millis(&granted["expires_at"]), start + MINUTE);
    let alices = granted["token"].as_str().unwrap().to_owned();
    let (status, body) = buy_with(&app, alice, first, Some(&alices)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "not_started")
    );

    clock.advance(MINUTE / 2);
    let refused = |(status, body): (StatusCode, Value)| {
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "invalid_buy_token")
        );
    };
    refused(buy_with(&app, bob, first, Some(&alices)).await);
    refused(buy_with(&app, alice, second, Some(&alices)).await);
    let (payload, signature) = alices.split_once('.').unwrap();
    let mut flipped = signature.as_bytes().to_vec();
    flipped[3] = if flipped[3] == b'A' { b'B' } else { b'A' };
    let tampered = format!("{payload}.{}", String::from_utf8(flipped).unwrap());
    refused(buy_with(&app, alice, first, Some(&tampered)).await);
    let forged = format!("{}.{signature}", bobs_payload(payload, alice, bob, &app));
    refused(buy_with(&app, bob, first, Some(&forged)).await);

    clock.advance(MINUTE);
    refused(buy_with(&app, alice, first, Some(&alices)).await);
    assert_eq!(app.stored(first).await, (0, 0, 5));

    // Once the sale runs, a token lasts a minute from when it is handed out.
    let (status, granted, _) = ask_token(&app, alice, first, None).await;
    assert_eq!(status, StatusCode::OK);
    let now = app.state.sale.now();
    assert_eq!(millis(&granted["expires_at"]), now + MINUTE);
    let fresh = granted["token"].as_str().unwrap();
    let (status, body) = buy_with(&app, alice, first, Some(fresh)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(app.stored(first).await, (1, 1, 4));
    assert_eq!(app.stored(second).await, (0, 0, 5));
}

/// An API time in Unix milliseconds.
fn millis(time: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(time.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

/// Alice's token payload rewritten for Bob, as a forger would (the signature stays Alice's).
fn bobs_payload(payload: &str, alice: &str, bob: &str, app: &TestApp) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let now = app.state.sale.now();
    let id = |session: &str| {
        app.state
            .auth
            .tokens
            .verify(session, now)
            .unwrap()
            .user_id
            .0
    };
    let text = String::from_utf8(b64.decode(payload).unwrap()).unwrap();
    let rewritten = text.replacen(&format!("t:{}:", id(alice)), &format!("t:{}:", id(bob)), 1);
    assert_ne!(text, rewritten);
    b64.encode(rewritten)
}

#[tokio::test]
async fn buy_tokens_are_handed_out_only_from_a_minute_before_the_start_until_the_end() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    let event = event(&app, Some("token"), 5 * MINUTE).await;
    let product = product_in(&app, &event, 5).await;
    let alice = &app.users(1).await[0];

    let (status, body, retry_after) = ask_token(&app, alice, product, None).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "too_early"));
    assert_eq!(retry_after.as_deref(), Some("240"));
    clock.advance(4 * MINUTE - 1_000);
    let (status, body, retry_after) = ask_token(&app, alice, product, None).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "too_early"));
    assert_eq!(retry_after.as_deref(), Some("1"));
    clock.advance(1_000);
    assert_eq!(
        ask_token(&app, alice, product, None).await.0,
        StatusCode::OK
    );

    clock.advance(62 * MINUTE);
    let (status, body, _) = ask_token(&app, alice, product, None).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "ended"));
    let (status, body, _) = ask_token(&app, alice, 987_654, None).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "unknown_product")
    );
    let anonymous = app
        .client
        .post(app.url(&format!("/api/v1/products/{product}/buy-token")));
    assert_eq!(
        anonymous.send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_challenge_sale_hands_a_token_out_only_for_a_solved_puzzle_of_the_buyer() {
    let app = TestApp::spawn_with(Arc::new(seckill::clock::SystemClock), |c| {
        c.guard.challenge_difficulty = 8;
    })
    .await;
    let event = event(&app, Some("challenge"), -MINUTE).await;
    let product = product_in(&app, &event, 5).await;
    let sessions = app.users(2).await;
    let (alice, bob) = (&sessions[0], &sessions[1]);

    let refused = |(status, body, _): (StatusCode, Value, Option<String>), expected: &str| {
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, expected),
            "{body}"
        );
    };
    refused(
        ask_token(&app, alice, product, None).await,
        "challenge_required",
    );
    let (status, body) = buy_with(&app, alice, product, None).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "buy_token_required")
    );

    let (puzzle, difficulty) = challenge(&app, alice, product).await;
    assert_eq!(difficulty, 8);
    let answer = |nonce: &str| Some(json!({ "challenge": puzzle, "nonce": nonce }));
    refused(
        ask_token(&app, alice, product, answer(&wrong_nonce(&puzzle, 8))).await,
        "invalid_challenge_answer",
    );
    let nonce = solve(&puzzle, difficulty);
    refused(
        ask_token(&app, bob, product, answer(&nonce)).await,
        "invalid_challenge_answer",
    );
    refused(
        ask_token(&app, alice, product, Some(json!({ "challenge": puzzle }))).await,
        "challenge_required",
    );
    let garbled = json!({ "challenge": format!("{puzzle}x"), "nonce": nonce });
    refused(
        ask_token(&app, alice, product, Some(garbled)).await,
        "invalid_challenge_answer",
    );
    let (status, body, _) = ask_token(&app, alice, product, Some(json!({ "nonce": 1 }))).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert_eq!(app.stored(product).await, (0, 0, 5));

    let buy_token = token(&app, alice, product, answer(&nonce)).await;
    let (status, body) = buy_with(&app, alice, product, Some(&buy_token)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(app.stored(product).await, (1, 1, 4));
}

#[tokio::test]
async fn an_unguarded_sale_sells_as_before_without_a_token() {
    let app = TestApp::spawn().await;
    let event = event(&app, None, -MINUTE).await;
    assert_eq!(event["guard"], "none");
    let (status, shown) = app
        .get_json(&format!("/api/v1/events/{}", event["id"]))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["guard"], "none");
    let in_event = product_in(&app, &event, 5).await;
    let on_its_own = app.live_product(5, 1).await;
    let alice = &app.users(1).await[0];
    for product in [in_event, on_its_own] {
        assert_eq!(app.product(product).await["guard"], "none");
        let (status, body) = buy_with(&app, alice, product, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    assert_eq!(app.stored(in_event).await, (1, 1, 4));
}

/// A console time, `datetime-local` in UTC, `offset_ms` from the server's now.
fn form_time(app: &TestApp, offset_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(app.state.sale.now() + offset_ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M")
        .to_string()
}

#[tokio::test]
async fn the_operator_sets_an_events_guard_in_the_console_and_the_api_and_the_log_keeps_it() {
    let app = TestApp::spawn().await;
    let Operator { browser, csrf, .. } = operator(&app).await;
    let event_form = |guard: &str| {
        let fields = [
            ("title", "Guarded hour".to_owned()),
            ("starts_at", form_time(&app, 10 * MINUTE)),
            ("ends_at", form_time(&app, 70 * MINUTE)),
            ("guard", guard.to_owned()),
            ("csrf", csrf.clone()),
        ];
        browser.post(app.url("/admin/events")).form(&fields)
    };
    let refused = event_form("captcha").send().await.unwrap();
    assert_form_refused(refused, "guard must be none, token or challenge").await;
    let created = event_form("challenge").send().await.unwrap();
    assert_eq!(created.url().path(), "/admin/products");
    let (_, events) = app.get_json("/api/v1/events").await;
    let event = events.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (event["title"].as_str(), event["guard"].as_str()),
        (Some("Guarded hour"), Some("challenge"))
    );
    let id = event["id"].as_i64().unwrap();
    let listed = created.text().await.unwrap();
    let row = &listed[listed
        .find(&format!("<tr data-event-id=\"{id}\">"))
        .unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains(r#"<option value="challenge" selected>"#),
        "{row}"
    );

    let set = browser
        .post(app.url(&format!("/admin/events/{id}/guard")))
        .form(&[("guard", "token"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(set.url().path(), "/admin/products");
    assert_eq!(
        app.get_json(&format!("/api/v1/events/{id}")).await.1["guard"],
        "token"
    );
    let forged = browser
        .post(app.url(&format!("/admin/events/{id}/guard")))
        .form(&[("guard", "none"), ("csrf", "forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);

    let path = format!("/api/v1/admin/events/{id}");
    let (status, body) = app.admin_patch(&path, json!({ "guard": "bogus" })).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_guard")
    );
    let (status, body) = app
        .admin_patch(&path, json!({ "guard": "token", "title": "x" }))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    let (status, body) = app
        .admin_patch("/api/v1/admin/events/987654", json!({ "guard": "none" }))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "unknown_event")
    );
    let (status, same) = app.admin_patch(&path, json!({ "guard": "token" })).await;
    assert_eq!(
        (status, same["guard"].as_str()),
        (StatusCode::OK, Some("token"))
    );
    let (status, none) = app.admin_patch(&path, json!({ "guard": "none" })).await;
    assert_eq!(
        (status, none["guard"].as_str()),
        (StatusCode::OK, Some("none"))
    );
    let (status, body) = app
        .admin_post(
            "/api/v1/admin/events",
            json!({ "starts_at": rfc3339(app.state.sale.now()), "ends_at": rfc3339(app.state.sale.now() + MINUTE), "guard": "Token" }),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_guard")
    );
    let (_, all) = app.get_json("/api/v1/events").await;
    assert_eq!(
        all.as_array().unwrap().len(),
        1,
        "a refused event is not created"
    );

    let (_, log) = status_and_json(
        app.client
            .get(app.url("/api/v1/admin/audit"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await;
    let actions: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions[..3],
        [
            format!("set the guard of event {id} to none"),
            format!("set the guard of event {id} to token"),
            format!("created event {id} \"Guarded hour\" guarded by challenge"),
        ],
        "the repeat is not logged: {actions:?}"
    );
}

#[tokio::test]
async fn registration_asks_for_a_solved_puzzle_for_the_name_when_configured() {
    let app = TestApp::spawn_with(Arc::new(seckill::clock::SystemClock), |c| {
        c.guard.registration_challenge = true;
        c.guard.challenge_difficulty = 6;
    })
    .await;
    let register = |body: Value| {
        let request = app.client.post(app.url("/api/v1/users")).json(&body);
        async move { status_and_json(request.send().await.unwrap()).await }
    };
    let credentials = json!({ "username": "guest-one", "password": "guest-password" });
    let (status, body) = register(credentials.clone()).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "challenge_required")
    );

    let (status, puzzle) = app
        .get_json("/api/v1/registration/challenge?username=guest-one")
        .await;
    assert_eq!(status, StatusCode::OK, "{puzzle}");
    let challenge = puzzle["challenge"].as_str().unwrap();
    let nonce = solve(challenge, puzzle["difficulty"].as_u64().unwrap() as u8);
    let answered = |username: &str| json!({ "username": username, "password": "guest-password", "challenge": challenge, "nonce": nonce });
    let (status, body) = register(answered("guest-two")).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "invalid_challenge_answer")
    );
    let (status, body) = register(answered("guest-one")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    for bad in ["?username=x", "?username=no%20spaces", "", "?user=guest"] {
        let (status, body) = app
            .get_json(&format!("/api/v1/registration/challenge{bad}"))
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_username")
        );
    }
}

#[tokio::test]
async fn registration_without_the_setting_needs_no_puzzle() {
    let app = TestApp::spawn().await;
    let request = app.client.post(app.url("/api/v1/users"));
    let body = json!({ "username": "plain-guest", "password": "guest-password" });
    let (status, body) = status_and_json(request.json(&body).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_token_from_one_server_buys_on_another_and_a_guard_set_on_one_holds_on_both() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let first = server_on_with(&db, &prefix, true, None, |_| {}).await;
        let event = event(&first, None, -MINUTE).await;
        let product = product_in(&first, &event, 10).await;
        let second = server_on_with(&db, &prefix, true, None, |_| {}).await;
        let sessions = first.users(3).await;

        let path = format!("/api/v1/admin/events/{}", event["id"]);
        let (status, changed) = first.admin_patch(&path, json!({ "guard": "token" })).await;
        assert_eq!(status, StatusCode::OK, "{changed}");
        assert_eq!(changed["guard"], "token");
        let (status, body) = buy_with(&first, &sessions[0], product, None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "buy_token_required")
        );
        // The other server learns the guard with its next catalog read, within a second.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        while second.product(product).await["guard"] != "token" {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second server never learnt the guard"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (status, body) = buy_with(&second, &sessions[0], product, None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "buy_token_required")
        );

        let from_first = token(&first, &sessions[1], product, None).await;
        let (status, body) = buy_with(&second, &sessions[1], product, Some(&from_first)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let from_second = token(&second, &sessions[2], product, None).await;
        let (status, body) = buy_with(&first, &sessions[2], product, Some(&from_second)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(first.stored(product).await, (2, 2, 8));
        second.stop().await;
        first.stop().await;
    }
}
