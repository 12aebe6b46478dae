//! `seckill migrate` as an operator runs it: it names each migration it applies, and says
//! nothing of them once the database is up to date.

use std::process::Command;

fn migrate(database: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("migrate")
        .env_clear()
        .env("SECKILL_DATABASE_URL", database)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("is up to date"), "{said}");
    said.into_owned()
}

#[test]
fn migrate_names_what_it_applied_and_only_that() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}/fresh.db", dir.path().display());
    let first = migrate(&database);
    assert!(first.contains("applied migration: initial"), "{first}");
    let again = migrate(&database);
    assert!(!again.contains("applied migration"), "{again}");
}
