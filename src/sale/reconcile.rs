//! Reconciling the stock gate with the database, the source of truth. Two ledgers must balance
//! for every product:
//!
//! - in the database, `stock_total = stock + units of orders not cancelled`;
//! - between gate and database, `database stock = gate's units left + units in the outbox`
//!   (sold by the gate, not stored yet).
//!
//! A third check needs no ledger: the units the live servers say they accepted must all be in
//! the database or the outbox (see `accepted.rs`). Those that are not are on their way through
//! a queue, or were lost with a Redis that lost its data; the orders the servers answered `202`
//! lately and still hold name which ones.
//!
//! The pipeline moves units between the outbox and the database while they are read, so a
//! product that does not balance is measured again a few times before it is reported.

use super::{Answered, SaleService};
use crate::domain::{Product, ProductId};
use crate::gate::GateAudit;
use std::time::Duration;

/// One product's ledgers.
#[derive(Debug, Clone)]
pub struct ProductAudit {
    pub product: Product,
    /// Units of the product's orders that are not cancelled, in the database.
    pub sold: i64,
    /// The gate's side; `None` when the product is not in the gate.
    pub gate: Option<GateAudit>,
    /// Units the live servers accepted that are neither stored nor in the outbox; `None` when
    /// not known (no fleet, or its counts were collected too briefly).
    pub unaccounted: Option<i64>,
    /// The orders the servers answered `202` lately that are neither stored nor in the outbox,
    /// by id; `None` when not known (the servers' answers were shared too briefly).
    pub missing_orders: Option<Vec<Answered>>,
}

impl ProductAudit {
    /// Units the database itself cannot account for (zero unless it was edited by hand).
    pub fn ledger_drift(&self) -> i64 {
        self.product.stock_total - self.product.stock - self.sold
    }

    /// Database stock minus what the gate accounts for (see [`GateAudit::drift`]).
    pub fn gate_drift(&self) -> i64 {
        self.gate.map_or(0, |gate| gate.drift(self.product.stock))
    }

    /// Units accepted that are neither stored nor in the outbox, as far as known: the servers'
    /// counts, or the units of the orders listed missing when those are more (orders a server
    /// answered before it started again under the same node id, which its counts no longer
    /// hold).
    pub fn missing_units(&self) -> i64 {
        let listed = self.missing_orders.as_ref().map_or(0, |orders| {
            orders
                .iter()
                .map(|answered| i64::from(answered.quantity.get()))
                .sum()
        });
        self.unaccounted.unwrap_or(0).max(listed)
    }

    /// Both ledgers balance, nothing was set aside, and every unit accepted and every order
    /// answered `202` is accounted for.
    pub fn balances(&self) -> bool {
        self.ledger_drift() == 0
            && self.gate_drift() == 0
            && self.gate.is_none_or(|g| g.dead == 0)
            && self.unaccounted.is_none_or(|units| units == 0)
            && self.missing_orders.as_ref().is_none_or(Vec::is_empty)
    }
}

/// How often an unbalanced product is measured before it is reported.
const MEASUREMENTS: usize = 5;

impl SaleService {
    /// Audits every product.
    pub async fn audit(&self) -> anyhow::Result<Vec<ProductAudit>> {
        let mut audits = Vec::new();
        for product in self.store.products().await? {
            audits.push(self.audit_product(product.id).await?);
        }
        Ok(audits)
    }

    async fn audit_product(&self, id: ProductId) -> anyhow::Result<ProductAudit> {
        let mut audit = self.measure(id).await?;
        for _ in 1..MEASUREMENTS {
            if audit.balances() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            audit = self.measure(id).await?;
        }
        Ok(audit)
    }

    /// The database first, then the gate: orders moving through the pipeline in between show
    /// as a passing drift, which the caller measures again. The orders answered and missing
    /// are read before, in an order of their own (see [`Self::missing_orders`]).
    async fn measure(&self, id: ProductId) -> anyhow::Result<ProductAudit> {
        let missing_orders = self.missing_orders(id).await?;
        let product = self
            .store
            .product(id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("product {} vanished", id.0))?;
        let sold = self
            .store
            .holdings(id)
            .await?
            .iter()
            .map(|(_, units)| i64::from(*units))
            .sum();
        let gate = self.gate.audit(id).await?;
        let unaccounted = self.unaccounted(id, &self.gate.outbox(id).await?).await?;
        Ok(ProductAudit {
            product,
            sold,
            gate,
            unaccounted,
            missing_orders,
        })
    }

    /// Rebuilds a product's gate entry from the database and the outbox, as a preheat loads it
    /// (for a product with no units unaccounted for: `--repair` leaves the others alone).
    pub async fn rebuild_gate(&self, id: ProductId) -> anyhow::Result<()> {
        let _turn = self.preheats.turn().await;
        self.gate.forget(id).await?;
        self.catalog.mark_unloaded(id);
        self.load(id, false).await
    }
}
