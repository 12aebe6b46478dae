//! `seckill bench` run as a user runs it, against a test server: it must fire, report, and
//! find every invariant holding (it exits non-zero on a FAIL).

use crate::helpers::{ADMIN_TOKEN, SECRET, TestApp};
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_sells_out_a_test_server_and_finds_every_invariant_holding() {
    let app = TestApp::spawn().await;
    let bench = tokio::task::spawn_blocking({
        let (url, database) = (app.base.clone(), app.db.url.clone());
        move || {
            Command::new(env!("CARGO_BIN_EXE_seckill"))
                .args(["bench", "--scenario", "sellout", "--users", "2000"])
                .args(["--duration", "1s", "--concurrency", "16", "--url", &url])
                .env_clear()
                .env("SECKILL_DATABASE_URL", database)
                .env("SECKILL_SECRET", SECRET)
                .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
                .output()
                .unwrap()
        }
    });
    let output = bench.await.unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report.matches("PASS").count(), 5, "{report}");
    assert!(
        report.contains("buy accepted") && report.contains("buy sold_out"),
        "{report}"
    );
}
