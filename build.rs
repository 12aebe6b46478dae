//! Rebuilds when a migration is added: `sqlx::migrate!` embeds the migrations directory at
//! compile time, and cargo would not notice a new file in it on its own.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
