//! After the crowd: wait for the pipeline to drain, then hold the database against every answer
//! the crowd got.

use crate::Ledger;
use crate::load::Outcome;
use crate::setup::Sale;
use serde::Serialize;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

/// One invariant and whether it held.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    pub detail: String,
}

fn check(name: &'static str, passed: bool, detail: String) -> Check {
    Check {
        name,
        passed,
        detail,
    }
}

/// How long the pipeline may take to store what the crowd bought.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

/// Checks the sale's invariants against what the crowd saw.
pub async fn check_sale(
    ledger: &impl Ledger,
    sale: &Sale,
    outcome: &Outcome,
) -> anyhow::Result<Vec<Check>> {
    let accepted_units: i64 = outcome.accepted.iter().map(|a| a.units).sum();
    let cancelled_units: i64 = outcome.cancelled.iter().map(|a| a.units).sum();
    let expected_sold = accepted_units - cancelled_units;
    let holdings = wait_for_drain(ledger, sale.product, expected_sold).await?;
    let sold = units_held(&holdings);
    let product = ledger
        .product(sale.product)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the bench product vanished"))?;
    let ids: Vec<i64> = outcome.accepted.iter().map(|a| a.order).collect();
    let unique: HashSet<_> = ids.iter().collect();
    let stored = ledger.stored_among(&ids).await?.len();
    let sold_out_seen = outcome.count("buy", "sold_out") > 0;
    let (expected, why) = if sold_out_seen {
        (sale.stock, "the crowd met \"sold out\", so all of it")
    } else {
        (expected_sold, "never sold out, so what was accepted")
    };
    let paid = wait_for_payments(ledger, outcome).await?;
    let over_limit = holdings
        .iter()
        .filter(|&&units| units > sale.per_user_limit)
        .count();
    Ok(vec![
        check(
            "sold == min(stock, demand)",
            sold == expected && sold <= sale.stock,
            format!("sold {sold} of {} ({why}: {expected})", sale.stock),
        ),
        check(
            "no shopper above the limit",
            over_limit == 0,
            format!(
                "{over_limit} shoppers hold more than {}",
                sale.per_user_limit
            ),
        ),
        check(
            "every accepted order is stored",
            stored == ids.len(),
            format!("{stored} of {} accepted orders stored", ids.len()),
        ),
        check(
            "no order twice, no order unasked",
            unique.len() == ids.len() && sold == expected_sold,
            format!(
                "{} distinct ids among {} acceptances; {sold} units held for {expected_sold} \
                 accepted and not cancelled",
                unique.len(),
                ids.len()
            ),
        ),
        check(
            "every order paid at the gateway is paid",
            paid == outcome.paid.len(),
            format!(
                "{paid} of {} orders paid through the sandbox gateway are paid",
                outcome.paid.len()
            ),
        ),
        check(
            "database ledger balances",
            product.stock_total - product.stock == sold,
            format!(
                "stock_total {} - stock {} = {} sold",
                product.stock_total,
                product.stock,
                product.stock_total - product.stock
            ),
        ),
    ])
}

/// How many of the orders the crowd paid at the gateway the database holds as paid, once all
/// are or once the count has stopped changing for 5 s: the gateway's notifications arrive
/// after the crowd's answers.
async fn wait_for_payments(ledger: &impl Ledger, outcome: &Outcome) -> anyhow::Result<usize> {
    let ids: Vec<i64> = outcome.paid.iter().map(|a| a.order).collect();
    let mut last = (usize::MAX, Instant::now());
    loop {
        let paid = ledger.paid_among(&ids).await?.len();
        if paid == ids.len() || (paid == last.0 && last.1.elapsed() > Duration::from_secs(5)) {
            return Ok(paid);
        }
        if paid != last.0 {
            last = (paid, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `hold` scenario's one check: every connection was answered, then held to the end.
pub fn check_held(connections: usize, outcome: &Outcome) -> Check {
    let answered = outcome.count("healthz", "ok");
    check(
        "every connection held",
        answered == connections as u64,
        format!(
            "{answered} of {connections} connections answered, then held until {:.1} s",
            outcome.elapsed.as_secs_f64()
        ),
    )
}

/// Each buyer's units in stored orders, once their total reaches `expected`, or once it has
/// stopped changing for 5 s after it began to. Until the first order is stored the wait lasts
/// up to [`DRAIN_TIMEOUT`]: the workers may start only when the crowd has stopped.
async fn wait_for_drain(
    ledger: &impl Ledger,
    product: i64,
    expected: i64,
) -> anyhow::Result<Vec<u32>> {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    let mut first = None;
    let mut moved = false;
    let mut last = (i64::MIN, Instant::now());
    loop {
        let holdings = ledger.holdings(product).await?;
        let sold = units_held(&holdings);
        if sold == expected || Instant::now() >= deadline {
            return Ok(holdings);
        }
        moved |= *first.get_or_insert(sold) != sold;
        if sold != last.0 {
            last = (sold, Instant::now());
        } else if moved && last.1.elapsed() >= Duration::from_secs(5) {
            return Ok(holdings);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn units_held(holdings: &[u32]) -> i64 {
    holdings.iter().map(|&units| i64::from(units)).sum()
}
