//! The end of a run: a table on stdout (throughput, latency percentiles, outcomes, checks) and
//! the same as JSON for scripts.

use crate::load::Outcome;
use crate::setup::Sale;
use crate::verify::Check;
use crate::{Args, Guard, Scenario};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// Latency of one kind of request, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl From<&Histogram<u64>> for Latency {
    fn from(h: &Histogram<u64>) -> Self {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Self {
            count: h.len(),
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }
}

/// A run's report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    /// What the sale asked of buyers besides a session.
    pub guard: Guard,
    pub url: String,
    pub concurrency: usize,
    /// The product the crowd bought (none for `ceiling`).
    pub product: Option<i64>,
    pub stock: i64,
    /// The stock buckets the product was split into.
    pub buckets: u8,
    pub seconds: f64,
    pub requests: u64,
    pub requests_per_sec: f64,
    pub latency_ms: BTreeMap<&'static str, Latency>,
    pub outcomes: BTreeMap<String, u64>,
    /// CPU microseconds per request of each process watched (`--cpu-of`), by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cpu_us_per_request: BTreeMap<String, f64>,
    pub checks: Vec<Check>,
    /// Every check held (true when none ran).
    pub passed: bool,
}

impl Report {
    /// Sums a run up.
    pub fn new(
        args: &Args,
        url: &str,
        sale: Option<&Sale>,
        outcome: &Outcome,
        checks: Vec<Check>,
        cpu_us_per_request: BTreeMap<String, f64>,
    ) -> Self {
        let seconds = outcome.elapsed.as_secs_f64();
        let requests = outcome.requests();
        Self {
            scenario: args.scenario,
            guard: args.guard,
            url: url.to_owned(),
            concurrency: args.concurrency,
            product: sale.map(|s| s.product),
            stock: sale.map_or(0, |s| s.stock),
            buckets: args.buckets,
            seconds,
            requests,
            requests_per_sec: requests as f64 / seconds.max(f64::EPSILON),
            latency_ms: outcome
                .latency
                .iter()
                .map(|(kind, h)| (*kind, Latency::from(h)))
                .collect(),
            outcomes: outcome.answers.clone(),
            cpu_us_per_request,
            passed: checks.iter().all(|c| c.passed),
            checks,
        }
    }

    /// Prints the table.
    pub fn print(&self) {
        let guarded = match self.guard {
            Guard::None => String::new(),
            guard => format!(", {} guard", guard.as_str()),
        };
        println!(
            "\n{:?} against {}{guarded}: {} requests in {:.1} s = {:.0} req/s ({} in flight)",
            self.scenario,
            self.url,
            self.requests,
            self.seconds,
            self.requests_per_sec,
            self.concurrency
        );
        println!(
            "\n{:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency", "count", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
        );
        for (kind, l) in &self.latency_ms {
            println!(
                "{kind:<8} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                l.count, l.p50, l.p90, l.p99, l.p999, l.max
            );
        }
        println!("\n{:<32} {:>9}", "outcome", "count");
        for (outcome, n) in &self.outcomes {
            println!("{outcome:<32} {n:>9}");
        }
        if !self.cpu_us_per_request.is_empty() {
            println!("\n{:<32} {:>9}", "CPU per request", "µs");
            for (process, micros) in &self.cpu_us_per_request {
                println!("{process:<32} {micros:>9.1}");
            }
        }
        if !self.checks.is_empty() {
            println!();
            for check in &self.checks {
                let verdict = if check.passed { "PASS" } else { "FAIL" };
                println!("{verdict}  {:<34} {}", check.name, check.detail);
            }
        }
    }
}
