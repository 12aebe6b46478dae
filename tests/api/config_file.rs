//! The configuration file as an operator gives it: `SECKILL_CONFIG` (or `--config`) names it
//! for `serve`, and `seckill config check` shows what it and the `SECKILL_*` variables make, or
//! names what is wrong.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A configuration file with `text` in a directory of its own, kept while the test runs.
fn file_with(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("seckill.toml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// `seckill config check` with `args`, in an environment holding only `variables`.
fn check(args: &[&str], variables: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["config", "check"])
        .args(args)
        .env_clear()
        .envs(variables.iter().copied())
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// The line of the report that shows `key`'s value and source.
fn line<'a>(report: &'a str, key: &str) -> &'a str {
    report
        .lines()
        .find(|line| line.split_whitespace().next() == Some(key))
        .unwrap_or_else(|| panic!("no {key} in\n{report}"))
}

fn path(file: &Path) -> &str {
    file.to_str().unwrap()
}

#[tokio::test]
async fn serve_reads_the_file_seckill_config_names() {
    let (dir, file) = file_with("");
    let database = format!("sqlite://{}", dir.path().join("seckill.db").display());
    std::fs::write(
        &file,
        format!("http_addr = \"127.0.0.1:0\"\ndatabase_url = \"{database}\"\n"),
    )
    .unwrap();
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("serve")
        .env_clear()
        .env("SECKILL_CONFIG", &file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let selling = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("seckill is selling at") {
                return Some(line);
            }
        }
        None
    })
    .await
    .expect("the server did not start within a minute");
    let Some(selling) = selling else {
        let output = server.wait_with_output().await.unwrap();
        panic!("serve exited: {}", text(&output));
    };
    assert!(selling.contains("seckill.db"), "{selling}");
    server.kill().await.unwrap();
}

#[test]
fn config_check_shows_each_value_with_where_it_came_from_and_hides_secrets() {
    let secret = "a-secret-of-at-least-thirty-two-bytes";
    let (_dir, file) = file_with(&format!(
        "max_batch = 100\nsecret = \"{secret}\"\n[rate_limit]\nper_ip_per_sec = 7\n"
    ));
    let output = check(
        &[path(&file)],
        &[
            ("SECKILL_PREHEAT_SECS", "60"),
            ("SECKILL_DATABASE_URL", "postgres://shop:hunter2@db/shop"),
        ],
    );
    let report = text(&output);
    assert!(output.status.success(), "{report}");
    assert!(line(&report, "max_batch").ends_with(" file"), "{report}");
    assert!(line(&report, "max_batch").contains("100"), "{report}");
    assert!(
        line(&report, "rate_limit.per_ip_per_sec").contains("7"),
        "{report}"
    );
    let preheat = line(&report, "preheat_secs");
    assert!(
        preheat.contains("60") && preheat.ends_with("SECKILL_PREHEAT_SECS"),
        "{report}"
    );
    assert!(line(&report, "http_addr").ends_with(" default"), "{report}");
    assert!(
        line(&report, "database_url").contains("db/shop"),
        "{report}"
    );
    assert!(
        line(&report, "deployment:").contains("embedded"),
        "{report}"
    );
    assert!(
        !report.contains(secret) && !report.contains("hunter2"),
        "{report}"
    );
}

#[test]
fn config_check_reads_the_file_seckill_config_names() {
    let (_dir, file) = file_with("redis_url = \"redis://127.0.0.1:6379\"\n");
    let output = check(&[], &[("SECKILL_CONFIG", path(&file))]);
    let report = text(&output);
    assert!(output.status.success(), "{report}");
    assert!(line(&report, "redis_url").ends_with(" file"), "{report}");
    assert!(line(&report, "deployment:").contains("cluster"), "{report}");
}

#[test]
fn config_check_names_a_bad_setting_and_fails() {
    for (setting, key) in [
        ("max_batch = 0", "max_batch"),
        ("max_bacth = 10", "max_bacth"),
        ("database_url = \"oracle://db\"", "database_url"),
        ("client_ip_header = \"not a header\"", "client_ip_header"),
    ] {
        let (_dir, file) = file_with(setting);
        let output = check(&[path(&file)], &[]);
        assert!(!output.status.success(), "{setting}: {}", text(&output));
        assert!(text(&output).contains(key), "{setting}: {}", text(&output));
    }
    let output = check(&[], &[("SECKILL_PER_USER_LIMIT", "0")]);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(
        text(&output).contains("per_user_limit"),
        "{}",
        text(&output)
    );
}

#[test]
fn config_check_names_a_file_it_cannot_read_or_parse() {
    let (dir, file) = file_with("max_batch = [unclosed");
    let output = check(&[path(&file)], &[]);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(text(&output).contains(path(&file)), "{}", text(&output));
    let missing = dir.path().join("missing.toml");
    let output = check(&[], &[("SECKILL_CONFIG", path(&missing))]);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(text(&output).contains(path(&missing)), "{}", text(&output));
}
