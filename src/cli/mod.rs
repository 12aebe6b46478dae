//! The command line: one binary, one subcommand per job, each with its own options and `run`.

mod demo;
mod migrate;
mod reconcile;
mod serve;
mod worker;

use crate::config::Config;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// seckill: a flash-sale system that sells exactly the stock.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// A TOML configuration file; `SECKILL_*` environment variables override it.
    #[arg(long, global = true, env = "SECKILL_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server (and, in embedded mode, everything else).
    Serve(serve::Args),
    /// Create or update the database schema, then exit.
    Migrate,
    /// Seed demo users and a demo sale, then exit.
    Demo,
    /// Run the pipeline's consumers (cluster mode): store accepted orders, cancel unpaid ones.
    Worker,
    /// Drive a running seckill with a crowd of shoppers, then check the invariants held.
    Bench(crate::bench::Args),
    /// Check that the stock gate and the database agree, product by product; exits non-zero
    /// when they do not.
    Reconcile(reconcile::Args),
}

/// Parses the command line, runs the subcommand, and turns its error into a message and a
/// non-zero exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            rt.block_on(async {
                let config = Config::load(cli.config.as_deref())?;
                match cli.command {
                    Command::Serve(args) => serve::run(config, args).await,
                    Command::Migrate => migrate::run(config).await,
                    Command::Demo => demo::run(config).await,
                    Command::Worker => worker::run(config).await,
                    Command::Bench(args) => crate::bench::run(config, args).await,
                    Command::Reconcile(args) => reconcile::run(config, args).await,
                }
            })
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,sqlx=warn,tower_http=warn".into());
    // Logs go to stderr (colored only on a terminal); stdout carries what the user asked for.
    let stderr = std::io::stderr();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&stderr))
        .with_writer(std::io::stderr)
        .init();
}

/// Completes on SIGINT or SIGTERM: the signal to finish the work in hand and exit.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing the work in flight");
}
