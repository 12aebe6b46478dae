//! `seckill bench`: a load generator that drives a running seckill (any mode) over HTTP and then
//! proves the invariants held. It creates its crowd straight in the database and signs their
//! session tokens with the server's secret (so a million shoppers cost seconds, not a million
//! sign-ups), puts a sale on through the admin API, fires the crowd, waits for the pipeline to
//! drain, and checks what the database holds against every answer it got.
//!
//! The server's database and secrets are reached only through [`Ledger`], which the `seckill`
//! binary implements: this crate knows the server by its HTTP API and that trait alone.

mod chart;
mod conn;
mod cpu;
mod guard;
mod ledger;
mod load;
mod report;
mod setup;
mod verify;

pub use guard::{Guard, solve};
pub use ledger::{Ledger, StoredProduct};

use anyhow::Context;
use clap::ValueEnum;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Options of `seckill bench`.
#[derive(clap::Args)]
pub struct Args {
    /// The seckill to drive; default: this configuration's `http_addr` on loopback.
    #[arg(long)]
    url: Option<String>,
    /// What the crowd does.
    #[arg(long, value_enum, default_value_t = Scenario::Sellout)]
    scenario: Scenario,
    /// Requests in flight at once (one connection each).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// How long to fire, e.g. `10s` or `500ms`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Stop after this many requests, if that comes first.
    #[arg(long)]
    requests: Option<u64>,
    /// Shoppers in the crowd.
    #[arg(long, default_value_t = 10_000)]
    users: usize,
    /// Units on sale (default: 1 per 100 shoppers for `sellout`, 1 for `soldout`, more than
    /// the crowd can buy for `throughput` and `mixed`).
    #[arg(long)]
    stock: Option<i64>,
    /// Split the product's stock into this many buckets (1 to 64), so a Redis Cluster spreads
    /// its buys over its masters.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=64))]
    buckets: u8,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also draw the latency curves (latency by percentile, per kind of request) as an SVG
    /// file a browser opens.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Skip the invariant checks (when this machine cannot reach the server's database).
    #[arg(long)]
    no_verify: bool,
    /// Guard the sale: every shopper fetches a buy token before the start (solving the
    /// server's puzzle first with `challenge`) and buys with it. Keep `--duration` within the
    /// server's `guard.token_ttl_secs`, or late buys carry expired tokens.
    #[arg(long, value_enum, default_value_t = Guard::None)]
    guard: Guard,
    /// A process on this machine (the server, Redis) whose CPU time during the crowd is
    /// reported per request, read from `/proc`; may be given more than once.
    #[arg(long = "cpu-of", value_name = "PID")]
    cpu_of: Vec<u32>,
}

/// What the crowd does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// The real flash sale: many shoppers, small stock, one unit each; mostly rejections.
    Sellout,
    /// Stock for everyone: every buy succeeds (each shopper may buy up to 100 units).
    Throughput,
    /// One unit on sale, gone at once: measures the sold-out rejection path.
    Soldout,
    /// Shoppers browse the product, buy, then pay some of their orders at the server's sandbox
    /// payment gateway (its notifications pay them) and cancel others.
    Mixed,
    /// `GET /healthz` only: the HTTP ceiling of the same server, to compare against.
    Ceiling,
    /// Every slot opens its connection with one `GET /healthz`, then keeps it open and idle
    /// until the run ends: a crowd with the sale page open, waiting for the start. What the
    /// server's memory holds meanwhile is for the caller to read (`scripts/bench` does).
    Hold,
}

impl Scenario {
    fn stock(self, users: usize) -> i64 {
        match self {
            Self::Sellout => (users as i64 / 100).max(1),
            Self::Soldout => 1,
            Self::Throughput | Self::Mixed | Self::Ceiling | Self::Hold => 100_000_000,
        }
    }

    /// Whether the crowd buys, so a sale must be put on first.
    fn buys(self) -> bool {
        !matches!(self, Self::Ceiling | Self::Hold)
    }

    fn per_user_limit(self) -> u32 {
        match self {
            Self::Sellout | Self::Soldout => 1,
            Self::Throughput | Self::Mixed | Self::Ceiling | Self::Hold => 100,
        }
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: e.g. 10s or 500ms"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{text:?}: use ms, s or m")),
    }
}

/// Runs the benchmark against `args.url`, or else `default_url`; fails (non-zero exit) when an
/// invariant does not hold. `open_ledger` is called only by a crowd that buys, so `ceiling` and
/// `hold` need no database.
pub async fn run<L, F>(args: Args, default_url: &str, open_ledger: F) -> anyhow::Result<()>
where
    L: Ledger,
    F: AsyncFnOnce() -> anyhow::Result<L>,
{
    anyhow::ensure!(
        args.concurrency > 0 && args.users > 0,
        "concurrency and users must be positive"
    );
    let base = args
        .url
        .as_deref()
        .unwrap_or(default_url)
        .trim_end_matches('/')
        .to_owned();
    let target = conn::Target::parse(&base)?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .context("building the HTTP client")?;
    let stock = args
        .stock
        .unwrap_or_else(|| args.scenario.stock(args.users));
    let (ledger, sale) = if args.scenario.buys() {
        let ledger = open_ledger().await?;
        let limit = args.scenario.per_user_limit();
        let wanted = setup::Wanted {
            users: args.users,
            stock,
            per_user_limit: limit,
            buckets: args.buckets,
            guard: args.guard,
        };
        let mut sale = setup::prepare(&ledger, &client, &base, &wanted).await?;
        if args.guard != Guard::None {
            let tokens = guard::fetch_tokens(
                &client,
                &base,
                sale.product,
                args.guard,
                &sale.shoppers,
                args.concurrency,
            )
            .await?;
            sale.buy_tokens = Some(Arc::new(tokens));
            setup::wait_until_live(&client, &base, sale.product).await?;
        }
        (Some(ledger), Some(sale))
    } else {
        (None, None)
    };
    let plan = load::Plan {
        scenario: args.scenario,
        concurrency: args.concurrency,
        duration: args.duration,
        requests: args.requests,
        sale: sale.clone(),
    };
    let watch = cpu::Watch::start(&args.cpu_of)?;
    let outcome = load::drive(target, plan).await?;
    let cpu = watch.per_request(outcome.requests())?;
    let checks = match (&ledger, &sale, args.no_verify) {
        (Some(ledger), Some(sale), false) => verify::check_sale(ledger, sale, &outcome).await?,
        _ if args.scenario == Scenario::Hold => {
            vec![verify::check_held(args.concurrency, &outcome)]
        }
        _ => Vec::new(),
    };
    let report = report::Report::new(&args, &base, sale.as_ref(), &outcome, checks, cpu);
    report.print();
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.chart {
        let svg = chart::svg(&report, &outcome.latency);
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(report.passed, "an invariant does not hold (see FAIL above)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("ten").is_err() && parse_duration("5h").is_err());
    }
}
