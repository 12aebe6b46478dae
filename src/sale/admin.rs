//! The operator's changes: sale events, products, stock. Each change reaches the database first
//! and then this process's catalog and gate, so the gate never knows more than the database.

use super::{SaleService, unless_not_loaded, unless_rebuild_waits};
use crate::domain::{Guard, Money, Product, ProductId, SaleEvent, SaleWindow};
use crate::store::{NewProduct, ProductPatch, StoreError};
use std::sync::Arc;

/// Why an operator's change was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{message}")]
    Invalid {
        code: &'static str,
        message: &'static str,
    },
    #[error("no such product")]
    UnknownProduct,
    #[error("no such sale event")]
    UnknownEvent,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Backend(#[from] anyhow::Error),
}

/// A product to put on sale. Without an explicit window it sells during its event's.
#[derive(Debug, Clone)]
pub struct NewProductInput {
    pub event_id: Option<i64>,
    pub name: String,
    pub image_url: String,
    pub original_price: Money,
    pub sale_price: Money,
    pub stock: i64,
    pub per_user_limit: Option<u32>,
    pub window: Option<SaleWindow>,
}

/// Changes to a product; `None` keeps the current value.
pub type ProductChanges = ProductPatch;

fn invalid(code: &'static str, message: &'static str) -> AdminError {
    AdminError::Invalid { code, message }
}

/// A flash sale is a discount: the sale price may not exceed the original.
fn check_prices(original: Money, sale: Money) -> Result<(), AdminError> {
    if sale > original {
        return Err(invalid(
            "invalid_price",
            "the sale price cannot exceed the original price",
        ));
    }
    Ok(())
}

/// A product of an event sells within the event's window: the sale page shows the event's
/// times, and ending the event early must end every product of it.
fn check_within_event(window: SaleWindow, event: Option<&SaleEvent>) -> Result<(), AdminError> {
    match event {
        Some(event) if window.start < event.window.start || window.end > event.window.end => {
            Err(invalid(
                "outside_event",
                "a product's sale must lie within its event's start and end",
            ))
        }
        _ => Ok(()),
    }
}

impl SaleService {
    /// Creates a sale event.
    pub async fn create_event(
        &self,
        title: &str,
        window: SaleWindow,
        guard: Guard,
    ) -> Result<SaleEvent, AdminError> {
        let event = self
            .store
            .create_event(title, window, guard, self.now())
            .await?;
        self.catalog.put_event(event.clone());
        Ok(event)
    }

    /// Creates a product and, if its sale is due, preheats it at once.
    pub async fn create_product(&self, input: NewProductInput) -> Result<Product, AdminError> {
        let event = match input.event_id {
            Some(id) => Some(
                self.event(id)
                    .await?
                    .ok_or_else(|| invalid("unknown_event", "event_id names no sale event"))?,
            ),
            None => None,
        };
        let window = input
            .window
            .or(event.as_ref().map(|e| e.window))
            .ok_or_else(|| {
                invalid(
                    "missing_window",
                    "give an event_id or starts_at and ends_at",
                )
            })?;
        check_within_event(window, event.as_ref())?;
        check_prices(input.original_price, input.sale_price)?;
        let product = self
            .store
            .create_product(
                &NewProduct {
                    event_id: input.event_id,
                    name: input.name,
                    image_url: input.image_url,
                    original_price: input.original_price,
                    sale_price: input.sale_price,
                    stock: input.stock,
                    per_user_limit: input
                        .per_user_limit
                        .unwrap_or(self.settings.default_per_user_limit),
                    window,
                },
                self.now(),
            )
            .await?;
        self.catalog.put(&product);
        unless_rebuild_waits(self.preheat_due().await)?;
        Ok(product)
    }

    /// Changes a product's description, prices, limit or window. A live product's stock and
    /// buyers are left alone; the gate just learns the new window and limit.
    pub async fn update_product(
        &self,
        id: ProductId,
        changes: ProductChanges,
    ) -> Result<Product, AdminError> {
        let current = self.known_product(id).await?;
        check_prices(
            changes.original_price.unwrap_or(current.original_price),
            changes.sale_price.unwrap_or(current.sale_price),
        )?;
        if let (Some(window), Some(event)) = (changes.window, current.event_id) {
            check_within_event(window, self.event(event).await?.as_ref())?;
        }
        let product = self
            .store
            .update_product(id, &changes, self.now())
            .await?
            .ok_or(AdminError::UnknownProduct)?;
        self.reconfigure(&product).await?;
        unless_rebuild_waits(self.preheat_due().await)?;
        Ok(product)
    }

    /// Puts `units` more on sale, also while the sale is live.
    pub async fn add_stock(&self, id: ProductId, units: i64) -> Result<Product, AdminError> {
        let product = self
            .store
            .add_stock(id, units, self.now())
            .await?
            .ok_or(AdminError::UnknownProduct)?;
        unless_not_loaded(self.gate.add_stock(id, units).await)?;
        self.catalog.put(&product);
        self.catalog.restock(id);
        Ok(product)
    }

    /// Every sale event, from memory: the sale page lists them on every load. One created
    /// through another process shows after this one's next catalog read.
    pub fn events(&self) -> Vec<SaleEvent> {
        self.catalog.events()
    }

    /// One sale event, from memory once this process knows it (the database otherwise): an
    /// operator may name an event another process created a moment ago.
    pub async fn event(&self, id: i64) -> Result<Option<SaleEvent>, StoreError> {
        match self.catalog.event(id) {
            Some(event) => Ok(Some(event)),
            None => self.store.event(id).await,
        }
    }

    /// One sale event as shoppers see it, from memory only: every open sale page asks for its
    /// event every two seconds, and a flood of unknown ids must not reach the database. An
    /// event another process created is unknown here until the next catalog refresh, at most
    /// a second later. That is acceptable: a shopper who heard of it from that process within
    /// that second gets a 404 the page's next poll (two seconds on) no longer gets, and
    /// nothing is sold through a read.
    pub fn shown_event(&self, id: i64) -> Option<SaleEvent> {
        self.catalog.event(id)
    }

    /// One product.
    pub async fn product(&self, id: ProductId) -> Result<Option<Product>, StoreError> {
        self.store.product(id).await
    }

    /// One product as shoppers see it: from memory, at most a catalog refresh old, and `None`
    /// for ids this process does not know, without asking the database, for the reasons of
    /// [`Self::shown_event`]. Its stock, taken live from the gate once the product is in it,
    /// is what changes under a crowd; the rest changes when an operator changes it, and at
    /// once for changes through this process.
    pub fn shown_product(&self, id: ProductId) -> Option<Arc<Product>> {
        self.catalog.row(id)
    }

    /// The products of a sale event as shoppers see them (see [`Self::shown_product`]), in
    /// sale order. Every open sale page asks for them every two seconds.
    pub fn shown_products_of_event(&self, event: i64) -> Vec<Arc<Product>> {
        self.catalog.rows_of_event(event)
    }
}
