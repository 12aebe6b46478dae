//! Guarded events: the guard of a product's sale as this process knows it, which the HTTP layer
//! checks before a buy, and the operator's change of an event's guard. The guard is read with
//! each product, so every process's catalog has it within a catalog refresh of a change.

use super::{AdminError, Controlled, SaleService};
use crate::domain::{Guard, Operator, ProductId, SaleEvent, SaleWindow};

impl SaleService {
    /// A product's guard and sale window, from memory; `None` for a product this process does
    /// not know (which the buy itself turns away as unknown).
    pub fn guard_of(&self, id: ProductId) -> Option<(Guard, SaleWindow)> {
        self.catalog.guard(id)
    }

    /// Sets a sale event's guard: the database first, then this process's catalog, the event
    /// and its products, so this process checks buys the new way at once and every other one
    /// after its next catalog refresh. Setting the guard it has changes nothing; a change is
    /// recorded as done by `by`.
    pub async fn set_event_guard(
        &self,
        by: &Operator,
        id: i64,
        guard: Guard,
    ) -> Result<Controlled<SaleEvent>, AdminError> {
        let current = self
            .store
            .event(id)
            .await?
            .ok_or(AdminError::UnknownEvent)?;
        let changed = current.guard != guard;
        let event = if changed {
            self.store
                .set_event_guard(id, guard)
                .await?
                .ok_or(AdminError::UnknownEvent)?
        } else {
            current
        };
        self.catalog.put_event(event.clone());
        for product in self.products_of_event(id).await? {
            self.catalog.put(&product);
        }
        let action = format!("set the guard of event {id} to {}", guard.as_str());
        Ok(Controlled::recorded(self, by, event, changed, action).await)
    }
}
