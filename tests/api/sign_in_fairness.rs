//! What one hostile address can do to other people's sign-ins: flood the password hashing (the
//! turns are shared between addresses, so the others still get in) or guess at one account
//! (its own address is throttled, the owner's is not).

use crate::support::{TestApp, code, status_and_json};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::task::JoinSet;

/// The address the hostile client signs in from.
const HOSTILE: &str = "10.6.6.6";
/// The address the owners sign in from.
const OWNERS: &str = "10.0.0.1";
/// Connections the flood keeps busy.
const FLOOD: usize = 64;

/// A server that takes the client's address from `X-Forwarded-For`, with `names` registered
/// (each with the password `NAME-password`).
async fn app_with(names: &[&str]) -> TestApp {
    let app = TestApp::spawn_with(Arc::new(SystemClock), |config| {
        config.client_ip_header = Some("x-forwarded-for".parse().unwrap());
    })
    .await;
    for name in names {
        let creds = json!({ "username": name, "password": format!("{name}-password") });
        let response = app
            .client
            .post(app.url("/api/v1/users"))
            .json(&creds)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    app
}

/// One sign-in attempt from `ip`: its status, error code and `Retry-After` seconds.
async fn sign_in_from(
    client: &reqwest::Client,
    url: &str,
    ip: &str,
    username: &str,
    password: &str,
) -> (StatusCode, String, Option<u64>) {
    let response = client
        .post(url)
        .header("x-forwarded-for", ip)
        .json(&json!({ "username": username, "password": password }))
        .send()
        .await
        .unwrap();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let (status, body) = status_and_json(response).await;
    (status, code(&body).to_owned(), retry_after)
}

/// What the flood got: wrong-password answers and `busy` refusals.
#[derive(Default)]
struct Tally {
    wrong: AtomicUsize,
    busy: AtomicUsize,
}

/// `FLOOD` connections sending wrong sign-ins from [`HOSTILE`] as fast as they are answered,
/// each at a made-up name, so every one that gets a turn hashes and no account throttle
/// stands in the way; until `stop`.
fn flood(app: &TestApp, stop: &Arc<AtomicBool>, tally: &Arc<Tally>) -> JoinSet<()> {
    let mut flood = JoinSet::new();
    for connection in 0..FLOOD {
        let (client, url) = (app.client.clone(), app.url("/api/v1/sessions"));
        let (stop, tally) = (stop.clone(), tally.clone());
        flood.spawn(async move {
            for n in 0.. {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let name = format!("guess-{connection}-{n}");
                let (status, code, _) =
                    sign_in_from(&client, &url, HOSTILE, &name, "wrong-password").await;
                let counter = match (status, code.as_str()) {
                    (StatusCode::UNAUTHORIZED, "invalid_credentials") => &tally.wrong,
                    (StatusCode::SERVICE_UNAVAILABLE, "busy") => &tally.busy,
                    other => panic!("a wrong sign-in answered {other:?}"),
                };
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    flood
}

#[tokio::test]
async fn a_flood_of_wrong_sign_ins_from_one_address_leaves_others_their_turns() {
    let owners = ["alice", "bob", "carol"];
    let app = app_with(&owners).await;
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let mut attackers = flood(&app, &stop, &tally);
    // The hasher is saturated: the flood is being refused for want of places, and hashing.
    while tally.busy.load(Ordering::SeqCst) == 0 || tally.wrong.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }

    let url = app.url("/api/v1/sessions");
    let (mut signed_in, mut refusals) = (0, Vec::new());
    for name in owners.iter().cycle().take(12) {
        let password = format!("{name}-password");
        let mut answer = sign_in_from(&app.client, &url, OWNERS, name, &password).await;
        if answer.0 == StatusCode::SERVICE_UNAVAILABLE && answer.1 == "busy" {
            let secs = answer.2.expect("a busy answer says when to retry");
            refusals.push(secs);
            assert!(secs <= 3, "Retry-After: {secs}");
            tokio::time::sleep(Duration::from_secs(secs)).await;
            answer = sign_in_from(&app.client, &url, OWNERS, name, &password).await;
        }
        match answer {
            (StatusCode::OK, ..) => signed_in += 1,
            (StatusCode::SERVICE_UNAVAILABLE, code, Some(secs)) if code == "busy" => {
                refusals.push(secs);
                assert!(secs <= 3, "Retry-After: {secs}");
            }
            other => panic!("{name}'s right password answered {other:?}"),
        }
    }
    let busy_before = tally.busy.load(Ordering::SeqCst);
    while tally.busy.load(Ordering::SeqCst) == busy_before {
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::SeqCst);
    while let Some(attacker) = attackers.join_next().await {
        attacker.unwrap();
    }

    assert!(
        signed_in >= 11,
        "{signed_in} of 12 right sign-ins got in during the flood (busy, Retry-After: \
         {refusals:?}; the flood: {} wrong, {} busy)",
        tally.wrong.load(Ordering::SeqCst),
        tally.busy.load(Ordering::SeqCst),
    );
    let (peak, turns) = (
        app.state.passwords.peak_running(),
        app.state.passwords.turns(),
    );
    assert!(
        peak <= turns,
        "{peak} hashes ran at once with {turns} turns"
    );
}

#[tokio::test]
async fn guesses_at_an_account_throttle_the_guessers_address_and_never_its_owner() {
    let app = app_with(&["bob", "dora"]).await;
    let (client, url) = (&app.client, app.url("/api/v1/sessions"));
    let mut guesses = Vec::new();
    for _ in 0..6 {
        let (status, code, retry_after) =
            sign_in_from(client, &url, HOSTILE, "bob", "not-his-password").await;
        guesses.push((status, code));
        if status == StatusCode::TOO_MANY_REQUESTS {
            let secs = retry_after.expect("Retry-After");
            assert!((1..=12).contains(&secs), "Retry-After: {secs}");
        }
    }
    let wrong = (StatusCode::UNAUTHORIZED, "invalid_credentials".to_owned());
    let throttled = (
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_sign_ins".to_owned(),
    );
    assert_eq!(
        guesses[..5],
        vec![wrong.clone(); 5],
        "a few mistakes are never throttled"
    );
    assert_eq!(guesses[5], throttled, "the guesser's address is throttled");
    let owner = sign_in_from(client, &url, OWNERS, "bob", "bob-password").await;
    assert_eq!(owner.0, StatusCode::OK, "bob's own sign-in: {owner:?}");
    // An IPv6 guesser is one address with every host of its /64.
    for host in 1..=6 {
        let ip = format!("2001:db8:6:6::{host}");
        let (status, code, _) = sign_in_from(client, &url, &ip, "dora", "not-her-password").await;
        let expected = if host <= 5 { &wrong } else { &throttled };
        assert_eq!(&(status, code), expected, "guess {host} from {ip}");
    }
    let owner = sign_in_from(client, &url, "2001:db8:7::1", "dora", "dora-password").await;
    assert_eq!(owner.0, StatusCode::OK, "dora's own sign-in: {owner:?}");
}
