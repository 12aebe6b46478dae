//! The operator's controls of a running sale: pausing and resuming buying of a product, and
//! ending a product's or a whole event's sale early. Each reaches the database first, then this
//! process's catalog and the gate, whose atomic step decides the next buy on every server the
//! new way; other processes' catalogs (what their shoppers are shown) follow at their next
//! refresh. Orders already taken stay: ending a sale early cancels nothing. A control that
//! changed something is recorded in the audit log with who applied it.

use super::{AdminError, SaleService, unless_not_loaded};
use crate::domain::{Operator, Product, ProductId, SaleEvent};

/// A control applied: the product or event as it is now, and whether this call changed it. A
/// repeat (pausing a paused product, ending an ended sale) changes nothing and answers the same,
/// so an operator may press twice, and only a change is worth an audit entry.
#[derive(Debug, Clone)]
pub struct Controlled<T> {
    /// The product, event or account as it is after the control.
    pub value: T,
    /// Whether this call changed it (and so recorded it in the audit log).
    pub changed: bool,
}

impl<T> Controlled<T> {
    /// A control's outcome, `value` as it is now, with `action` recorded as done by `by` if
    /// the control `changed` it.
    pub(super) async fn recorded(
        sale: &SaleService,
        by: &Operator,
        value: T,
        changed: bool,
        action: String,
    ) -> Self {
        if changed {
            sale.record_change(by, action).await;
        }
        Self { value, changed }
    }
}

impl SaleService {
    /// Pauses (`paused`) or resumes buying of a product, for `by`. The gate is told even when
    /// the database says so already: an earlier call may have failed between the two.
    pub async fn set_paused(
        &self,
        by: &Operator,
        id: ProductId,
        paused: bool,
    ) -> Result<Controlled<Product>, AdminError> {
        let current = self.known_product(id).await?;
        let changed = current.is_paused() != paused;
        let product = if changed {
            self.store
                .set_paused(id, paused, self.now())
                .await?
                .ok_or(AdminError::UnknownProduct)?
        } else {
            current
        };
        self.catalog.put(&product);
        unless_not_loaded(self.gate.set_paused(id, product.is_paused()).await)?;
        let verb = if paused { "paused" } else { "resumed" };
        let action = format!("{verb} product {}", id.0);
        Ok(Controlled::recorded(self, by, product, changed, action).await)
    }

    /// Ends a product's sale now for `by`, unless it has ended: from the next buy on, every
    /// server refuses it as ended. A sale that has not started ends too, and will not start.
    pub async fn end_product(
        &self,
        by: &Operator,
        id: ProductId,
    ) -> Result<Controlled<Product>, AdminError> {
        let now = self.now();
        let current = self.known_product(id).await?;
        let changed = current.window.end > now;
        let product = if changed {
            self.store
                .end_product(id, now)
                .await?
                .ok_or(AdminError::UnknownProduct)?
        } else {
            current
        };
        self.reconfigure(&product).await?;
        let action = format!("ended product {}", id.0);
        Ok(Controlled::recorded(self, by, product, changed, action).await)
    }

    /// Ends a sale event now for `by`, with each of its products whose sale has not ended (see
    /// [`Self::end_product`]). An event that has ended with all its products is left as it is.
    pub async fn end_event(
        &self,
        by: &Operator,
        id: i64,
    ) -> Result<Controlled<SaleEvent>, AdminError> {
        let now = self.now();
        let current = self
            .store
            .event(id)
            .await?
            .ok_or(AdminError::UnknownEvent)?;
        let before = self.products_of_event(id).await?;
        let changed = current.window.end > now || before.iter().any(|p| p.window.end > now);
        let event = if changed {
            self.store
                .end_event(id, now)
                .await?
                .ok_or(AdminError::UnknownEvent)?
        } else {
            current
        };
        self.catalog.put_event(event.clone());
        for product in self.products_of_event(id).await? {
            self.reconfigure(&product).await?;
        }
        let action = format!("ended event {id}");
        Ok(Controlled::recorded(self, by, event, changed, action).await)
    }

    /// A product as the database has it, or the operator's mistake.
    pub(super) async fn known_product(&self, id: ProductId) -> Result<Product, AdminError> {
        self.store
            .product(id)
            .await?
            .ok_or(AdminError::UnknownProduct)
    }

    /// The products of a sale event, from the database.
    pub(super) async fn products_of_event(&self, event: i64) -> Result<Vec<Product>, AdminError> {
        let mut products = self.store.products().await?;
        products.retain(|p| p.event_id == Some(event));
        Ok(products)
    }

    /// Gives this process's catalog and the gate a product's window and limit as the database
    /// has them.
    pub(super) async fn reconfigure(&self, product: &Product) -> Result<(), AdminError> {
        self.catalog.put(product);
        let configured = self
            .gate
            .configure(product.id, product.window, product.per_user_limit)
            .await;
        Ok(unless_not_loaded(configured)?)
    }
}
