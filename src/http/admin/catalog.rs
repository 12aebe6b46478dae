//! Sale events and products in the console: the lists, creating both, setting an event's guard,
//! changing a product, adding stock to it, pausing and resuming its buying and ending its sale
//! or its event's early, all through the sale service like the admin API, so every server sees
//! a change within a second. The forms are parsed into the same `domain` types as the API's
//! bodies; what is the forms' own is their spelling of times, prices and numbers.

use super::{AdminSession, ConsoleForm, mistake, page, see_other};
use crate::domain::{
    AddedStock, EventTitle, Guard, ImageUrl, Millis, Money, Operator, PerUserLimit, Product,
    ProductId, ProductName, Refusal, SaleWindow, Stock, StockBuckets,
};
use crate::error::{ApiError, AppPath};
use crate::http::AppState;
use crate::sale::{AdminError, NewEventInput, NewProductInput, ProductChanges};
use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, NaiveDateTime, Utc};

/// The form's spelling of a time: `datetime-local`, read as UTC.
const FORM_TIME: &str = "%Y-%m-%dT%H:%M";

/// One sale event in the list.
struct EventRow {
    id: i64,
    title: String,
    /// `upcoming`, `live` or `ended`.
    status: &'static str,
    /// `none`, `token` or `challenge`.
    guard: &'static str,
    starts_at: String,
    ends_at: String,
}

/// One product in the list, or the product being edited.
struct ProductRow {
    id: i64,
    event_id: String,
    name: String,
    image_url: String,
    original_price: String,
    sale_price: String,
    stock_total: i64,
    remaining: i64,
    per_user_limit: u32,
    /// How many buckets a shared gate splits its stock into.
    buckets: u8,
    /// Whether it was loaded into the gate: its buckets are fixed.
    loaded: bool,
    /// `upcoming`, `live` or `ended`.
    status: &'static str,
    /// When buying was paused (UTC, the form's spelling), if it is.
    paused_since: Option<String>,
    starts_at: String,
    ends_at: String,
}

impl ProductRow {
    async fn new(state: &AppState, product: &Product) -> Self {
        Self {
            id: product.id.0,
            event_id: product
                .event_id
                .map(|id| id.to_string())
                .unwrap_or_default(),
            name: product.name.clone(),
            image_url: product.image_url.clone(),
            original_price: product.original_price.to_string(),
            sale_price: product.sale_price.to_string(),
            stock_total: product.stock_total,
            remaining: state.sale.remaining(product).await,
            per_user_limit: product.per_user_limit,
            buckets: product.buckets.get(),
            loaded: product.gate_loaded_at.is_some(),
            status: product.window.status(state.sale.now()).as_str(),
            paused_since: product.paused_at.map(form_time),
            starts_at: form_time(product.window.start),
            ends_at: form_time(product.window.end),
        }
    }
}

/// `GET /admin/products`: every event and product, and the forms to create them.
#[derive(Template)]
#[template(path = "admin/catalog.html")]
struct CatalogPage {
    csrf: String,
    error: Option<String>,
    events: Vec<EventRow>,
    products: Vec<ProductRow>,
    /// Every guard an event may have, for the forms' choices.
    guards: [&'static str; 3],
}

/// `GET /admin/products/{id}`: one product's form and its stock.
#[derive(Template)]
#[template(path = "admin/product.html")]
struct ProductPage {
    csrf: String,
    error: Option<String>,
    product: ProductRow,
}

fn form_time(ms: Millis) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format(FORM_TIME)
        .to_string()
}

fn parse_time(value: &str, field: &str) -> Result<Millis, ApiError> {
    NaiveDateTime::parse_from_str(value, FORM_TIME)
        .or_else(|_| NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S"))
        .map(|t| t.and_utc().timestamp_millis())
        .map_err(|_| {
            ApiError::invalid(
                "invalid_window",
                format!("{field} must be a date and time such as 2030-01-31T10:00"),
            )
        })
}

/// The form's window: both times.
fn form_window(form: &ConsoleForm) -> Result<SaleWindow, ApiError> {
    let start = parse_time(form.field("starts_at"), "starts_at")?;
    let end = parse_time(form.field("ends_at"), "ends_at")?;
    Ok(SaleWindow::parse(start, end)?)
}

/// Both times of a window, or neither (`None`).
fn optional_window(form: &ConsoleForm) -> Result<Option<SaleWindow>, ApiError> {
    match (form.field("starts_at"), form.field("ends_at")) {
        ("", "") => Ok(None),
        _ => form_window(form).map(Some),
    }
}

/// A guard as the form's choice spells it; none when it is left out.
fn form_guard(value: &str) -> Result<Guard, Refusal> {
    match value {
        "" => Ok(Guard::None),
        value => Ok(Guard::parse(value)?),
    }
}

/// A price in yuan as the form spells it, "199" or "199.5" or "199.50".
fn yuan(value: &str, field: &str) -> Result<Money, ApiError> {
    let wrong = || {
        ApiError::invalid(
            "invalid_price",
            format!("{field} must be a price such as 199.00"),
        )
    };
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !(fraction.is_empty() || (fraction.len() <= 2 && digits(fraction))) {
        return Err(wrong());
    }
    let whole: i64 = whole.parse().map_err(|_| wrong())?;
    let cents: i64 = format!("{fraction:0<2}").parse().map_err(|_| wrong())?;
    Ok(Money::price(whole * 100 + cents)?)
}

/// A whole number the form must give.
fn number(value: &str, field: &str) -> Result<i64, ApiError> {
    value
        .parse()
        .map_err(|_| ApiError::invalid("invalid_number", format!("{field} must be a whole number")))
}

/// A whole number the form may leave empty.
fn optional_number(value: &str, field: &str) -> Result<Option<i64>, ApiError> {
    (!value.is_empty())
        .then(|| number(value, field))
        .transpose()
}

async fn catalog_page(
    state: &AppState,
    session: &AdminSession,
    status: StatusCode,
    error: Option<String>,
) -> Result<Response, ApiError> {
    let now = state.sale.now();
    let events = state
        .store
        .events()
        .await?
        .into_iter()
        .map(|e| EventRow {
            id: e.id,
            title: e.title,
            status: e.window.status(now).as_str(),
            guard: e.guard.as_str(),
            starts_at: form_time(e.window.start),
            ends_at: form_time(e.window.end),
        })
        .collect();
    let mut products = Vec::new();
    for product in state.store.products().await? {
        products.push(ProductRow::new(state, &product).await);
    }
    page(
        status,
        &CatalogPage {
            csrf: session.csrf().to_owned(),
            error,
            events,
            products,
            guards: Guard::ALL.map(Guard::as_str),
        },
    )
}

pub(crate) async fn catalog(
    State(state): State<AppState>,
    session: AdminSession,
) -> Result<Response, ApiError> {
    catalog_page(&state, &session, StatusCode::OK, None).await
}

/// The catalog again, with the operator's mistake shown; a server failure stays an error.
async fn catalog_with(
    state: &AppState,
    form: &ConsoleForm,
    error: ApiError,
) -> Result<Response, ApiError> {
    let message = mistake(error)?;
    catalog_page(
        state,
        &form.session,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some(message),
    )
    .await
}

pub(crate) async fn create_event(
    State(state): State<AppState>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let made = async {
        let input = NewEventInput {
            window: form_window(&form)?,
            title: match form.field("title") {
                "" => None,
                title => Some(EventTitle::parse(title)?),
            },
            guard: form_guard(form.field("guard"))?,
        };
        Ok::<_, ApiError>(state.sale.create_event(&Operator::Console, input).await?)
    }
    .await;
    match made {
        Ok(_) => Ok(see_other("/admin/products")),
        Err(e) => catalog_with(&state, &form, e).await,
    }
}

pub(crate) async fn create_product(
    State(state): State<AppState>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let made = async {
        let input = NewProductInput {
            stock: Stock::parse(number(form.field("stock"), "stock")?)?,
            event_id: optional_number(form.field("event_id"), "event")?,
            name: ProductName::parse(form.field("name"))?,
            image_url: match form.field("image_url") {
                "" => None,
                url => Some(ImageUrl::parse(url)?),
            },
            original_price: yuan(form.field("original_price"), "original price")?,
            sale_price: yuan(form.field("sale_price"), "sale price")?,
            per_user_limit: optional_number(form.field("per_user_limit"), "per-user limit")?
                .map(PerUserLimit::parse)
                .transpose()?,
            buckets: optional_number(form.field("buckets"), "buckets")?
                .map(StockBuckets::parse)
                .transpose()?,
            window: optional_window(&form)?,
        };
        Ok(state.sale.create_product(&Operator::Console, input).await?)
    }
    .await;
    match made {
        Ok(product) => Ok(see_other(&format!("/admin/products/{}", product.id.0))),
        Err(e) => catalog_with(&state, &form, e).await,
    }
}

pub(super) async fn product_page(
    state: &AppState,
    session: &AdminSession,
    id: ProductId,
    status: StatusCode,
    error: Option<String>,
) -> Result<Response, ApiError> {
    let product = state
        .sale
        .product(id)
        .await?
        .ok_or_else(ApiError::unknown_product)?;
    page(
        status,
        &ProductPage {
            csrf: session.csrf().to_owned(),
            error,
            product: ProductRow::new(state, &product).await,
        },
    )
}

pub(crate) async fn product(
    State(state): State<AppState>,
    session: AdminSession,
    AppPath(id): AppPath<i64>,
) -> Result<Response, ApiError> {
    product_page(&state, &session, ProductId(id), StatusCode::OK, None).await
}

/// The product's page again after a change, or with the operator's mistake shown.
async fn after_change<T>(
    state: &AppState,
    form: &ConsoleForm,
    id: ProductId,
    outcome: Result<T, ApiError>,
) -> Result<Response, ApiError> {
    match outcome {
        Ok(_) => Ok(see_other(&format!("/admin/products/{}", id.0))),
        Err(e) => {
            let message = mistake(e)?;
            product_page(
                state,
                &form.session,
                id,
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(message),
            )
            .await
        }
    }
}

pub(crate) async fn update_product(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let id = ProductId(id);
    let outcome = async {
        let stored = state.sale.product(id).await?;
        let stored = stored.as_ref();
        let changes = ProductChanges {
            name: edited(
                form.field("name"),
                stored.map(|p| p.name.as_str()),
                ProductName::parse,
            )?,
            image_url: edited(
                form.field("image_url"),
                stored.map(|p| p.image_url.as_str()),
                ImageUrl::parse,
            )?,
            original_price: Some(yuan(form.field("original_price"), "original price")?),
            sale_price: Some(yuan(form.field("sale_price"), "sale price")?),
            per_user_limit: Some(PerUserLimit::parse(number(
                form.field("per_user_limit"),
                "per-user limit",
            )?)?),
            // Left out (an older form, or a loaded product's), the count stays.
            buckets: optional_number(form.field("buckets"), "buckets")?
                .map(StockBuckets::parse)
                .transpose()?,
            window: optional_window(&form)?,
        };
        Ok(state
            .sale
            .update_product(&Operator::Console, id, changes)
            .await?)
    }
    .await;
    after_change(&state, &form, id, outcome).await
}

pub(crate) async fn add_stock(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let id = ProductId(id);
    let outcome = async {
        let units = AddedStock::parse(number(form.field("quantity"), "quantity")?)?;
        Ok(state.sale.add_stock(&Operator::Console, id, units).await?)
    }
    .await;
    after_change(&state, &form, id, outcome).await
}

/// The form's text for a field, parsed, or `None` when it is the text stored: the edit form
/// sends every field, and text stored before a stricter check keeps working until the operator
/// changes it.
fn edited<T>(
    raw: &str,
    stored: Option<&str>,
    parse: impl FnOnce(&str) -> Result<T, Refusal>,
) -> Result<Option<T>, Refusal> {
    if stored.is_some_and(|stored| stored == raw.trim()) {
        return Ok(None);
    }
    parse(raw).map(Some)
}

/// The product's page again after a control.
async fn after_control<T>(
    state: &AppState,
    form: &ConsoleForm,
    id: ProductId,
    controlled: Result<T, AdminError>,
) -> Result<Response, ApiError> {
    after_change(state, form, id, controlled.map_err(ApiError::from)).await
}

pub(crate) async fn pause_product(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let id = ProductId(id);
    let paused = state.sale.set_paused(&Operator::Console, id, true).await;
    after_control(&state, &form, id, paused).await
}

pub(crate) async fn resume_product(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let id = ProductId(id);
    let resumed = state.sale.set_paused(&Operator::Console, id, false).await;
    after_control(&state, &form, id, resumed).await
}

pub(crate) async fn end_product(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let id = ProductId(id);
    let ended = state.sale.end_product(&Operator::Console, id).await;
    after_control(&state, &form, id, ended).await
}

pub(crate) async fn end_event(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    match state.sale.end_event(&Operator::Console, id).await {
        Ok(_) => Ok(see_other("/admin/products")),
        Err(e) => catalog_with(&state, &form, e.into()).await,
    }
}

pub(crate) async fn set_event_guard(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let set = async {
        let guard = Guard::parse(form.field("guard")).map_err(Refusal::from)?;
        Ok::<_, ApiError>(
            state
                .sale
                .set_event_guard(&Operator::Console, id, guard)
                .await?,
        )
    }
    .await;
    match set {
        Ok(_) => Ok(see_other("/admin/products")),
        Err(e) => catalog_with(&state, &form, e).await,
    }
}
