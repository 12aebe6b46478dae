//! `seckill reconcile`: report, and with `--repair` fix, drift between the stock gate and the
//! database, and list the orders the servers answered `202` lately that are neither stored nor
//! in the outbox. In embedded mode the gate lives inside the server process, so only the
//! database's own ledger is checked here.

use crate::app::Core;
use crate::clock::SystemClock;
use crate::config::Config;
use crate::sale::ProductAudit;
use anyhow::bail;
use std::sync::Arc;

/// Options of `seckill reconcile`.
#[derive(clap::Args)]
pub struct Args {
    /// Rebuild each drifting product's gate entry from the database and the outbox.
    #[arg(long)]
    repair: bool,
}

/// Audits every product and prints one line each.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let core = Core::build(&config, Arc::new(SystemClock)).await?;
    let mut audits = core.sale.audit().await?;
    if args.repair {
        for audit in &audits {
            let id = audit.product.id.0;
            let missing = audit.missing_units();
            match audit.gate {
                // Rebuilt from the database, the gate would sell those units again.
                Some(_) if audit.gate_drift() != 0 && missing > 0 => println!(
                    "product {id}: not repaired while {missing} accepted units are neither \
                     stored nor in the outbox"
                ),
                Some(gate) if audit.gate_drift() != 0 && gate.in_flight_units == 0 => {
                    core.sale.rebuild_gate(audit.product.id).await?;
                    println!("product {id}: gate rebuilt from the database");
                }
                // Orders on their way to the database make the two sides move while they are
                // read; rebuilding then could trust a passing picture.
                Some(_) if audit.gate_drift() != 0 => println!(
                    "product {id}: not repaired while orders are in flight; run again once \
                     the workers have drained the outbox"
                ),
                _ => {}
            }
        }
        audits = core.sale.audit().await?;
    }
    core.stop().await;
    print_table(&audits);
    print_missing_orders(&audits);
    let unbalanced = audits.iter().filter(|a| !a.balances()).count();
    if unbalanced > 0 {
        bail!("{unbalanced} product(s) do not balance (see above)");
    }
    println!("every product balances");
    Ok(())
}

fn print_table(audits: &[ProductAudit]) {
    println!(
        "{:>8}  {:<24} {:>8} {:>8} {:>8} {:>9} {:>9} {:>5} {:>6} {:>8}  status",
        "product",
        "name",
        "total",
        "stock",
        "sold",
        "gate left",
        "in flight",
        "dead",
        "drift",
        "missing"
    );
    for audit in audits {
        let p = &audit.product;
        let (left, flight, dead) = match audit.gate {
            Some(g) => (
                g.remaining.to_string(),
                g.in_flight_units.to_string(),
                g.dead.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let missing = audit.missing_units();
        let status = match (audit.ledger_drift(), audit.gate_drift()) {
            _ if audit.balances() => "ok",
            (0, 0) if missing > 0 => {
                "ACCEPTED, NOT STORED: units the servers accepted are neither in the database \
                 nor in the outbox (on their way through a queue, or lost with Redis)"
            }
            (0, 0) => "DEAD ENTRIES: outbox orders no worker could store",
            (0, d) if d > 0 && missing > 0 => {
                "GATE SHORT, ACCEPTED NOT STORED: the gate keeps off sale the units of orders \
                 the servers accepted that are neither stored nor in the outbox"
            }
            (0, d) if d > 0 => "GATE SHORT: undersells",
            (0, _) => "GATE OVER: would oversell",
            _ => "DATABASE LEDGER BROKEN",
        };
        let name: String = p.name.chars().take(24).collect();
        let missing = audit
            .unaccounted
            .map_or_else(|| "?".to_owned(), |units| units.to_string());
        println!(
            "{:>8}  {:<24} {:>8} {:>8} {:>8} {:>9} {:>9} {:>5} {:>6} {:>8}  {status}",
            p.id.0,
            name,
            p.stock_total,
            p.stock,
            audit.sold,
            left,
            flight,
            dead,
            audit.gate_drift() + audit.ledger_drift(),
            missing,
        );
    }
}

/// Lists, under the table, the orders answered `202` and missing, one line each: product, order,
/// user, quantity, when it was made (UTC; its buyer was answered right after) and the node id
/// of the server that answered. A product whose list is not known yet, and that does not
/// balance, says so.
fn print_missing_orders(audits: &[ProductAudit]) {
    let missing: Vec<_> = audits
        .iter()
        .filter_map(|audit| audit.missing_orders.as_ref())
        .flatten()
        .collect();
    for audit in audits {
        if audit.missing_orders.is_none() && !audit.balances() {
            println!(
                "product {}: which orders are missing is not known yet: the servers have not \
                 all shared their answers since Redis lost them; run again in a few seconds",
                audit.product.id.0
            );
        }
    }
    if missing.is_empty() {
        return;
    }
    println!();
    println!(
        "{} order(s) answered 202 are neither stored nor in the outbox (lost with Redis, on \
         their way through a queue, or buried as dead entries):",
        missing.len()
    );
    println!(
        "{:>8}  {:>20} {:>10} {:>8}  {:<23}  {:>6}",
        "product", "order", "user", "quantity", "answered (UTC)", "server"
    );
    for answered in missing {
        let at = chrono::DateTime::from_timestamp_millis(answered.made_at()).map_or_else(
            || "?".to_owned(),
            |at| at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        );
        println!(
            "{:>8}  {:>20} {:>10} {:>8}  {:<23}  {:>6}",
            answered.product.0,
            answered.order.0,
            answered.user.0,
            answered.quantity.get(),
            at,
            answered.server()
        );
    }
}
