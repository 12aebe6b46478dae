//! The command line: one binary, one subcommand per job, each with its own options and `run`.

mod bench;
mod config_check;
mod demo;
mod migrate;
mod reconcile;
mod serve;
mod worker;

use crate::config::{Config, FILE_VARIABLE, LogFormat};
use crate::redact::Escaping;
use clap::{Parser, Subcommand};
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::{DefaultFields, FormatFields, Writer};
use tracing_subscriber::util::SubscriberInitExt;

/// seckill: a flash-sale system that sells exactly the stock.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// A TOML configuration file; `SECKILL_*` environment variables override it.
    /// `seckill config check` shows what a file and the environment make.
    #[arg(long, global = true, env = FILE_VARIABLE)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(config_check::Command),
    /// The jobs, each run over the loaded configuration.
    #[command(flatten)]
    Job(Job),
}

/// The subcommands that need the configuration loaded and valid before they run.
#[derive(Subcommand)]
enum Job {
    /// Run the HTTP server (and, in embedded mode, everything else).
    Serve(serve::Args),
    /// Create or update the database schema, then exit.
    Migrate,
    /// Seed demo users and a demo sale, then exit.
    Demo,
    /// Run the pipeline's consumers (cluster mode): store accepted orders, cancel unpaid ones.
    Worker(worker::Args),
    /// Drive a running seckill with a crowd of shoppers, then check the invariants held.
    Bench(seckill_bench::Args),
    /// Check that the stock gate and the database agree, product by product; exits non-zero
    /// when they do not.
    Reconcile(reconcile::Args),
}

/// Parses the command line, runs the subcommand, and turns its error into a message and a
/// non-zero exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    crate::payment::install_crypto_provider();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            rt.block_on(async {
                match cli.command {
                    // It reads the configuration itself, to report what is wrong with it.
                    Command::Config(command) => config_check::run(command, cli.config),
                    Command::Job(job) => run_job(job, Config::load(cli.config.as_deref())?).await,
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

/// Runs `job` over `config`.
async fn run_job(job: Job, config: Config) -> anyhow::Result<()> {
    // Nothing logs before this: a configuration error is printed on its own.
    init_tracing(config.log_format);
    match job {
        Job::Serve(args) => serve::run(config, args).await,
        Job::Migrate => migrate::run(config).await,
        Job::Demo => demo::run(config).await,
        Job::Worker(args) => worker::run(config, args).await,
        Job::Bench(args) => bench::run(config, args).await,
        Job::Reconcile(args) => reconcile::run(config, args).await,
    }
}

/// Logs to stderr (colored only on a terminal); stdout carries what the user asked for.
fn init_tracing(format: LogFormat) {
    let stderr = std::io::stderr();
    let ansi = std::io::IsTerminal::is_terminal(&stderr);
    // The levels `RUST_LOG` says; by default info, and only warnings from the SQL driver and
    // the HTTP tracing layer.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,sqlx=warn,tower_http=warn".into());
    log_subscriber(format, ansi, filter, std::io::stderr).init();
}

/// The subscriber that writes the log lines `filter` lets through in `format` to `writer`. In
/// text, every field (the message too) is escaped ([`EscapedFields`]); JSON escapes its own.
pub fn log_subscriber<W>(
    format: LogFormat,
    ansi: bool,
    filter: EnvFilter,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(lines.with_ansi(ansi).fmt_fields(EscapedFields).finish()),
        LogFormat::Json => Box::new(lines.json().finish()),
    }
}

/// The fields of a text log line as tracing writes them, through [`Escaping`]: a value that
/// carries what a client sent (a parameter's name, a header) cannot end its line and start a
/// forged one.
struct EscapedFields;

impl<'w> FormatFields<'w> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut escaping = Escaping(&mut writer);
        DefaultFields::new().format_fields(Writer::new(&mut escaping), fields)
    }
}

/// The operator's requests to stop (SIGINT or SIGTERM), counted: the first means "finish the
/// work in hand and exit", a second "and do not wait through the grace".
struct StopSignals(tokio::sync::watch::Receiver<u32>);

impl StopSignals {
    /// A future that completes once `n` signals have arrived.
    fn nth(&self, n: u32) -> impl Future<Output = ()> + Send + 'static {
        let mut count = self.0.clone();
        async move {
            if count.wait_for(|&seen| seen >= n).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Counts SIGINT and SIGTERM from now on. The handlers are registered here, at the call, not
/// when a future is first awaited: a process registers before it starts working, so a signal
/// that arrives while it is starting or working is caught, where the default action would end
/// it on the spot.
fn shutdown_signals() -> StopSignals {
    let (count, counted) = tokio::sync::watch::channel(0u32);
    #[cfg(unix)]
    let (mut interrupt, mut terminate) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    tokio::spawn(async move {
        loop {
            #[cfg(unix)]
            tokio::select! {
                () = delivery(&mut interrupt) => {},
                () = delivery(&mut terminate) => {},
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
            count.send_modify(|seen| *seen += 1);
        }
    });
    StopSignals(counted)
}

/// The next delivery of a registered signal; never, if it could not be registered.
#[cfg(unix)]
async fn delivery(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex, PoisonError};

    /// Log lines written into memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            lines.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_logs_are_one_object_a_line_with_the_event_fields() {
        let lines = Lines::default();
        let writer = lines.clone();
        let filter = EnvFilter::new("info");
        let subscriber = log_subscriber(LogFormat::Json, false, filter, move || writer.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(order = 42, "order cancelled");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let objects: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(objects.len(), 1, "{text}");
        assert_eq!(objects[0]["level"], "WARN");
        assert_eq!(objects[0]["fields"]["message"], "order cancelled");
        assert_eq!(objects[0]["fields"]["order"], 42);
    }

    #[test]
    fn text_logs_escape_what_could_start_a_forged_line() {
        let lines = Lines::default();
        let writer = lines.clone();
        let filter = EnvFilter::new("info");
        let subscriber = log_subscriber(LogFormat::Text, false, filter, move || writer.clone());
        let forged = "x\n2026-11-27T09:00:00Z ERROR forged\r\u{1b}[2K";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", path = %forged);
            let _entered = span.enter();
            tracing::warn!(error = %forged, name = forged, "refused {forged}");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains(['\r', '\u{1b}']), "{text}");
        assert_eq!(
            text.matches("x\\n2026-11-27T09:00:00Z ERROR forged")
                .count(),
            4,
            "{text}"
        );
    }
}
