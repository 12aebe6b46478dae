//! The operator's changes: sale events, products, stock, product images. Each change reaches
//! the database first and then this process's catalog and gate, so the gate never knows more
//! than the database, and is recorded in the audit log with who made it. They take the
//! operator's input parsed into `domain` types, so every door gives the same verdict.

use super::{SaleService, unless_not_loaded, unless_rebuild_waits};
use crate::clock::local_time_of_day;
use crate::domain::{
    AddedStock, EventTitle, Guard, Image, ImageUrl, Money, Operator, PerUserLimit, Product,
    ProductId, ProductName, Refusal, SaleEvent, SaleWindow, Stock, StockBuckets,
};
use crate::store::{NewProduct, ProductPatch, StoreError};
use std::sync::Arc;

/// Why an operator's change was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A rule between values, each valid alone, said no (a sale price above the original, a
    /// product's sale outside its event's): the same shape as a refused value.
    #[error(transparent)]
    Invalid(#[from] Refusal),
    /// The product named does not exist.
    #[error("no such product")]
    UnknownProduct,
    /// The sale event named does not exist.
    #[error("no such sale event")]
    UnknownEvent,
    /// The account named does not exist.
    #[error("no such user")]
    UnknownUser,
    /// The change would split the stock of a product already in the gate into other buckets:
    /// the gate's buckets hold its stock and buyers, so their count is fixed from the first
    /// load on. Nothing was changed.
    #[error("the stock buckets can be changed only before the product is preheated")]
    ProductLoaded,
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The gate or a preheat failed.
    #[error(transparent)]
    Backend(#[from] anyhow::Error),
}

/// A sale event to create, from an operator's parsed input.
#[derive(Debug, Clone)]
pub struct NewEventInput {
    /// Without one, the event is named after its start's time of day (e.g. `10:00`).
    pub title: Option<EventTitle>,
    /// When its products sell, unless one has its own window within it.
    pub window: SaleWindow,
    /// What its products' buyers must show besides a session.
    pub guard: Guard,
}

/// A product to put on sale, from an operator's parsed input.
#[derive(Debug, Clone)]
pub struct NewProductInput {
    /// The event it sells in, if any: it must exist, and hold the product's window.
    pub event_id: Option<i64>,
    /// What shoppers see it called.
    pub name: ProductName,
    /// Without one, the shop's placeholder picture.
    pub image_url: Option<ImageUrl>,
    /// The price before the sale, shown struck through.
    pub original_price: Money,
    /// What a buyer pays: at most the original price.
    pub sale_price: Money,
    /// The units it goes on sale with.
    pub stock: Stock,
    /// Without one, the service's default ([`super::SaleSettings::default_per_user_limit`]).
    pub per_user_limit: Option<PerUserLimit>,
    /// Without one, [`StockBuckets::ONE`]: the whole stock decided in one place.
    pub buckets: Option<StockBuckets>,
    /// Without one, it sells during its event's window (and needs an event).
    pub window: Option<SaleWindow>,
}

/// Changes to a product, from an operator's parsed input; `None` keeps the current value (see
/// [`NewProductInput`] for each field).
#[derive(Debug, Clone, Default)]
pub struct ProductChanges {
    pub name: Option<ProductName>,
    pub image_url: Option<ImageUrl>,
    pub original_price: Option<Money>,
    pub sale_price: Option<Money>,
    pub per_user_limit: Option<PerUserLimit>,
    /// Refused ([`AdminError::ProductLoaded`]) once the product is in the gate, unless it is
    /// the count it has.
    pub buckets: Option<StockBuckets>,
    pub window: Option<SaleWindow>,
}

impl From<ProductChanges> for ProductPatch {
    fn from(changes: ProductChanges) -> Self {
        Self {
            name: changes.name.map(|n| n.as_str().to_owned()),
            image_url: changes.image_url.map(|u| u.as_str().to_owned()),
            original_price: changes.original_price,
            sale_price: changes.sale_price,
            per_user_limit: changes.per_user_limit.map(PerUserLimit::get),
            buckets: changes.buckets,
            window: changes.window,
        }
    }
}

/// The picture of a product created without one: a static asset every server has.
const PLACEHOLDER_IMAGE: &str = "/static/img/gift.svg";

fn invalid(code: &'static str, message: &'static str) -> AdminError {
    AdminError::Invalid(Refusal::new(code, message))
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
    /// Creates a sale event for `by`.
    pub async fn create_event(
        &self,
        by: &Operator,
        input: NewEventInput,
    ) -> Result<SaleEvent, AdminError> {
        let title = match input.title {
            Some(title) => title.as_str().to_owned(),
            None => local_time_of_day(input.window.start),
        };
        let event = self
            .store
            .create_event(&title, input.window, input.guard, self.now())
            .await?;
        self.catalog.put_event(event.clone());
        let action = format!("created event {} \"{}\"", event.id, event.title);
        let action = match event.guard {
            Guard::None => action,
            guard => format!("{action} guarded by {}", guard.as_str()),
        };
        self.record_change(by, action).await;
        Ok(event)
    }

    /// Creates a product for `by` and, if its sale is due, preheats it at once.
    pub async fn create_product(
        &self,
        by: &Operator,
        input: NewProductInput,
    ) -> Result<Product, AdminError> {
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
                    name: input.name.as_str().to_owned(),
                    image_url: input
                        .image_url
                        .as_ref()
                        .map_or(PLACEHOLDER_IMAGE, ImageUrl::as_str)
                        .to_owned(),
                    original_price: input.original_price,
                    sale_price: input.sale_price,
                    stock: input.stock.get(),
                    per_user_limit: input
                        .per_user_limit
                        .map_or(self.settings.default_per_user_limit, PerUserLimit::get),
                    buckets: input.buckets.unwrap_or(StockBuckets::ONE),
                    window,
                },
                self.now(),
            )
            .await?;
        self.catalog.put(&product);
        let action = format!("created product {} \"{}\"", product.id.0, product.name);
        self.record_change(by, action).await;
        unless_rebuild_waits(self.preheat_due().await)?;
        Ok(product)
    }

    /// Changes a product's description, prices, limit, window or, until it is loaded into the
    /// gate, its buckets for `by`. A live product's stock and buyers are left alone; the gate
    /// just learns the new window and limit.
    pub async fn update_product(
        &self,
        by: &Operator,
        id: ProductId,
        changes: ProductChanges,
    ) -> Result<Product, AdminError> {
        let product = self.change_product(id, changes).await?;
        self.record_change(by, format!("changed product {}", id.0))
            .await;
        Ok(product)
    }

    /// Keeps an uploaded image for `by`: whether it is new, rather than the same bytes kept
    /// already (which changes nothing and is not recorded).
    pub async fn upload_image(&self, by: &Operator, image: &Image) -> Result<bool, StoreError> {
        let new = self.store.put_image(image, self.now()).await?;
        if new {
            self.record_change(by, format!("uploaded image {}", image.id))
                .await;
        }
        Ok(new)
    }

    /// Keeps `image` and makes `url`, where it is served, the product's picture, for `by`.
    pub async fn set_product_image(
        &self,
        by: &Operator,
        id: ProductId,
        image: &Image,
        url: ImageUrl,
    ) -> Result<Product, AdminError> {
        self.store.put_image(image, self.now()).await?;
        let action = format!("set the image of product {} to {url}", id.0);
        let changes = ProductChanges {
            image_url: Some(url),
            ..ProductChanges::default()
        };
        let product = self.change_product(id, changes).await?;
        self.record_change(by, action).await;
        Ok(product)
    }

    /// Applies `changes` to a product, in the database, the catalog and the gate.
    async fn change_product(
        &self,
        id: ProductId,
        changes: ProductChanges,
    ) -> Result<Product, AdminError> {
        let current = self.known_product(id).await?;
        let buckets = changes.buckets;
        if buckets.is_some_and(|b| b != current.buckets) && current.gate_loaded_at.is_some() {
            return Err(AdminError::ProductLoaded);
        }
        check_prices(
            changes.original_price.unwrap_or(current.original_price),
            changes.sale_price.unwrap_or(current.sale_price),
        )?;
        if let (Some(window), Some(event)) = (changes.window, current.event_id) {
            check_within_event(window, self.event(event).await?.as_ref())?;
        }
        let product = self
            .store
            .update_product(id, &changes.into(), self.now())
            .await?
            .ok_or(AdminError::UnknownProduct)?;
        // Loaded since `current` was read: the store refused the whole patch.
        if buckets.is_some_and(|b| b != product.buckets) && product.gate_loaded_at.is_some() {
            return Err(AdminError::ProductLoaded);
        }
        self.reconfigure(&product).await?;
        unless_rebuild_waits(self.preheat_due().await)?;
        Ok(product)
    }

    /// Puts `units` more on sale for `by`, also while the sale is live.
    pub async fn add_stock(
        &self,
        by: &Operator,
        id: ProductId,
        units: AddedStock,
    ) -> Result<Product, AdminError> {
        let units = units.get();
        let product = self
            .store
            .add_stock(id, units, self.now())
            .await?
            .ok_or(AdminError::UnknownProduct)?;
        unless_not_loaded(self.gate.add_stock(id, units).await)?;
        self.catalog.put(&product);
        self.catalog.restock(id);
        self.record_change(by, format!("added {units} units to product {}", id.0))
            .await;
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
