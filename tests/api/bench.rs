//! `seckill bench` run as a user runs it, against a test server: it must fire, report, and
//! find every invariant holding (it exits non-zero on a FAIL).

use crate::support::{ADMIN_TOKEN, SECRET, TestApp};
use seckill::clock::SystemClock;
use std::process::{Command, Output};
use std::sync::Arc;

/// `seckill bench ARGS --url <app>` with the server's secrets and `database` for its checks.
async fn bench(app: &TestApp, database: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_seckill"));
    command
        .arg("bench")
        .args(args)
        .args(["--url", &app.base])
        .env_clear()
        .env("SECKILL_DATABASE_URL", database)
        .env("SECKILL_SECRET", SECRET)
        .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN);
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// `seckill bench ARGS` (space-separated) against a fresh test server: its report, once it has
/// passed all `checks` checks.
async fn passing_bench(args: &str, checks: usize) -> String {
    let app = TestApp::spawn_paying(Arc::new(SystemClock)).await;
    passing_bench_on(&app, args, checks).await
}

/// [`passing_bench`] against `app`.
async fn passing_bench_on(app: &TestApp, args: &str, checks: usize) -> String {
    let args: Vec<&str> = args.split_whitespace().collect();
    let output = bench(app, &app.db.url, &args).await;
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report.matches("PASS").count(), checks, "{report}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_sells_out_a_test_server_and_finds_every_invariant_holding() {
    let report = passing_bench(
        "--scenario sellout --users 2000 --concurrency 16 --duration 1s",
        6,
    )
    .await;
    assert!(
        report.contains("buy accepted") && report.contains("buy sold_out"),
        "{report}"
    );
}

/// A guarded sale: every shopper fetches its buy token before the start, solving the server's
/// puzzle first, and buys with it; no buy is refused by the guard or for being early, and every
/// invariant holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_fetches_buy_tokens_before_a_guarded_sale_and_buys_with_them() {
    let app = TestApp::spawn_with(Arc::new(SystemClock), |c| {
        c.guard.challenge_difficulty = 8;
    })
    .await;
    let report = passing_bench_on(
        &app,
        "--scenario sellout --users 300 --concurrency 8 --duration 1s --guard challenge",
        6,
    )
    .await;
    assert!(report.contains("challenge guard"), "{report}");
    assert!(
        report.contains("buy accepted") && report.contains("buy sold_out"),
        "{report}"
    );
    for refusal in ["buy_token_required", "invalid_buy_token", "not_started"] {
        assert!(!report.contains(&format!("buy {refusal}")), "{report}");
    }
}

/// The `hold` crowd makes one request per connection and keeps it open, idle, to the end: what
/// a crowd waiting for the start costs the server's memory (`scripts/bench` reads it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holding_crowd_asks_once_per_connection_and_holds_it_to_the_end() {
    let report = passing_bench("--scenario hold --concurrency 300 --duration 1500ms", 1).await;
    assert!(report.contains(": 300 requests in "), "{report}");
    let held = report
        .lines()
        .find_map(|l| l.split_once("connections answered, then held until "))
        .and_then(|(_, rest)| rest.trim_end_matches(" s").parse::<f64>().ok());
    assert!(held.is_some_and(|s| s >= 1.5), "{report}");
}

/// Checks read from a database the server does not use would all fail after the crowd, with
/// nothing to say why: the bench refuses before the crowd and names the database it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_refuses_a_database_the_server_does_not_use() {
    let app = TestApp::spawn().await;
    let elsewhere = tempfile::tempdir().unwrap();
    let other = format!("sqlite://{}/other.db", elsewhere.path().display());
    let output = bench(&app, &other, &["--users", "10", "--duration", "10s"]).await;
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{error}");
    assert!(
        error.contains("is not in sqlite://") && error.contains("other.db"),
        "{error}"
    );
    assert!(!String::from_utf8_lossy(&output.stdout).contains("requests in"));
}

/// The mixed crowd pays (at the sandbox gateway, whose notifications pay the orders) and cancels
/// for real on every backend. In cluster mode an order paid or cancelled the moment it was
/// bought may still be on its way to the database (`409 order_pending`, `Retry-After: 1`): the
/// shopper waits as told and tries again, so such answers come with more requests of that kind
/// than visits that made one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mixed_crowd_pays_and_cancels_and_tries_again_when_told_to() {
    let report = passing_bench(
        "--scenario mixed --users 500 --concurrency 8 --duration 3s",
        6,
    )
    .await;
    let count = |line: &str| -> usize {
        let found = report.lines().find(|l| l.starts_with(line));
        found.map_or(0, |l| l.split_whitespace().last().unwrap().parse().unwrap())
    };
    let paid = count("pay ok");
    assert!(paid > 0 && count("cancel ok") > 0, "{report}");
    assert_eq!(count("checkout ok"), paid, "{report}");
    assert_eq!(count("confirm redirect"), paid, "{report}");
    // Of every 4 visits with an order, 2 pay and 1 cancels.
    let visits = count("buy accepted");
    for (kind, done, visits) in [
        ("pay", paid, visits / 2 + 1),
        ("cancel", count("cancel ok"), visits / 4 + 1),
    ] {
        let pending = count(&format!("{kind} order_pending"));
        if pending > 0 {
            assert!(
                done + pending > visits,
                "no {kind} was tried again\n{report}"
            );
        }
    }
}
