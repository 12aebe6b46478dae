//! Orders in the console: find one by its id, or filter by buyer, product and status (newest
//! first, a page at a time), with each order's status and the payment provider's words kept
//! for it; and refund a paid order through the sale service, as the admin API does.

use super::{AdminSession, ConsoleForm, mistake, page, see_other, utc_time};
use crate::domain::{Operator, OrderId, OrderStatus, ProductId, UserId};
use crate::error::{ApiError, AppPath, AppQuery};
use crate::http::AppState;
use crate::sale::OrderRecord;
use crate::store::OrderSearch;
use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

/// The most orders one page shows.
const SHOWN: i64 = 100;

/// What to look for: an order id, or any of a user id, a product and a status; the page to
/// show (`before`); and the order just refunded, whose outcome the page tells.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Search {
    order: String,
    user: String,
    product: String,
    status: String,
    before: String,
    refunded: String,
}

/// The fields of a search, in the order links spell them.
const SEARCH_FIELDS: [&str; 5] = ["order", "user", "product", "status", "before"];

impl Search {
    /// The search a refund form came from, in its hidden fields.
    fn from_form(form: &ConsoleForm) -> Self {
        let field = |name| form.field(name).to_owned();
        Self {
            order: field("order"),
            user: field("user"),
            product: field("product"),
            status: field("status"),
            before: field("before"),
            refunded: String::new(),
        }
    }

    fn trimmed(self) -> Self {
        let trim = |value: String| value.trim().to_owned();
        Self {
            order: trim(self.order),
            user: trim(self.user),
            product: trim(self.product),
            status: trim(self.status),
            before: trim(self.before),
            refunded: trim(self.refunded),
        }
    }

    fn value(&self, name: &str) -> &str {
        match name {
            "order" => &self.order,
            "user" => &self.user,
            "product" => &self.product,
            "status" => &self.status,
            _ => &self.before,
        }
    }

    /// The page's address with `changes` made to the search (an empty value drops a field).
    fn url(&self, changes: &[(&str, &str)]) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for name in SEARCH_FIELDS {
            let value = changes
                .iter()
                .find(|(changed, _)| *changed == name)
                .map_or(self.value(name), |(_, value)| value);
            if !value.is_empty() {
                query.append_pair(name, value);
            }
        }
        for (name, value) in changes {
            if !SEARCH_FIELDS.contains(name) && !value.is_empty() {
                query.append_pair(name, value);
            }
        }
        format!("/admin/orders?{}", query.finish())
    }

    fn is_empty(&self) -> bool {
        SEARCH_FIELDS.iter().all(|name| self.value(name).is_empty())
    }
}

/// One payment record of an order.
struct PaymentRow {
    provider: String,
    trade_no: String,
    amount: String,
    trade_status: String,
    paid: bool,
    received_at: String,
}

/// One order found.
struct OrderRow {
    id: String,
    user_id: i64,
    product: String,
    quantity: u32,
    total: String,
    status: &'static str,
    created_at: String,
    payments: Vec<PaymentRow>,
    /// Paid: the operator may refund it.
    refundable: bool,
    /// Its refund is due: the operator may ask the provider again now.
    refund_pending: bool,
}

/// A product to filter by.
struct ProductOption {
    id: String,
    name: String,
}

/// `GET /admin/orders`.
#[derive(Template)]
#[template(path = "admin/orders.html")]
struct OrdersPage {
    csrf: String,
    search: Search,
    products: Vec<ProductOption>,
    statuses: [&'static str; 4],
    searched: bool,
    error: Option<String>,
    /// What became of the order just refunded.
    notice: Option<String>,
    orders: Vec<OrderRow>,
    /// The next page's address, when this page is full.
    older: Option<String>,
}

fn row(record: OrderRecord) -> OrderRow {
    let refund_pending = record.refund_due();
    let order = record.order;
    OrderRow {
        id: order.id.to_string(),
        user_id: order.user_id.0,
        product: order.product_name,
        quantity: order.quantity.get(),
        total: order.total.to_string(),
        status: order.status.as_str(),
        created_at: utc_time(order.created_at),
        refundable: order.status == OrderStatus::Paid,
        refund_pending,
        payments: record
            .payments
            .into_iter()
            .map(|p| PaymentRow {
                provider: p.provider,
                trade_no: p.trade_no,
                amount: p.amount.to_string(),
                trade_status: p.trade_status,
                paid: p.paid,
                received_at: utc_time(p.received_at),
            })
            .collect(),
    }
}

/// A whole number a field may hold (`None` when empty), or the operator's mistake.
fn number(value: &str, what: &str) -> Result<Option<i64>, ApiError> {
    if value.is_empty() {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| ApiError::invalid("invalid_number", format!("{what} is a whole number.")))
}

/// The orders a search finds: the order named, or a page of those the filters pick.
async fn find(state: &AppState, search: &Search) -> Result<Vec<OrderRecord>, ApiError> {
    let orders = match number(&search.order, "An order id")? {
        Some(_)
            if !(search.user.is_empty()
                && search.product.is_empty()
                && search.status.is_empty()) =>
        {
            return Err(ApiError::invalid(
                "invalid_search",
                "Give an order id alone, or filter by user, product and status.",
            ));
        }
        Some(id) => state.store.order(OrderId(id)).await?.into_iter().collect(),
        None if search.is_empty() => Vec::new(),
        None => {
            let filters = OrderSearch {
                user: number(&search.user, "A user id")?.map(UserId),
                product: number(&search.product, "A product id")?.map(ProductId),
                status: Some(search.status.as_str())
                    .filter(|name| !name.is_empty())
                    .map(OrderStatus::named)
                    .transpose()?,
                before: number(&search.before, "An order id")?.map(OrderId),
                limit: SHOWN,
            };
            state.store.search_orders(&filters).await?
        }
    };
    let mut records = Vec::with_capacity(orders.len());
    for order in orders {
        records.push(state.sale.record_of(order).await?);
    }
    Ok(records)
}

/// What became of a refunded order, as it stands now.
async fn outcome(state: &AppState, refunded: &str) -> Result<Option<String>, ApiError> {
    let Ok(id) = refunded.parse() else {
        return Ok(None);
    };
    let Ok(record) = state.sale.order_record(OrderId(id)).await else {
        return Ok(None);
    };
    Ok(Some(if record.refund_due() {
        format!(
            "Order {id} is cancelled and its stock is on sale again, but the payment provider \
             did not take the refund: it is tried again every second."
        )
    } else {
        format!("Order {id} is {}.", record.order.status.as_str())
    }))
}

async fn search_page(
    state: &AppState,
    session: &AdminSession,
    search: Search,
    status: StatusCode,
    error: Option<String>,
) -> Result<Response, ApiError> {
    let search = search.trimmed();
    let (status, error, found) = match find(state, &search).await {
        Ok(found) => (status, error, found),
        Err(e) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(mistake(e)?),
            Vec::new(),
        ),
    };
    let older = (found.len() as i64 == SHOWN && search.order.is_empty())
        .then(|| {
            found
                .last()
                .map(|r| search.url(&[("before", &r.order.id.to_string())]))
        })
        .flatten();
    let products = state
        .store
        .products()
        .await?
        .into_iter()
        .map(|p| ProductOption {
            id: p.id.0.to_string(),
            name: p.name,
        })
        .collect();
    page(
        status,
        &OrdersPage {
            csrf: session.csrf().to_owned(),
            notice: outcome(state, &search.refunded).await?,
            searched: !search.is_empty(),
            search,
            products,
            statuses: OrderStatus::ALL.map(OrderStatus::as_str),
            error,
            orders: found.into_iter().map(row).collect(),
            older,
        },
    )
}

pub(crate) async fn orders_page(
    State(state): State<AppState>,
    session: AdminSession,
    AppQuery(search): AppQuery<Search>,
) -> Result<Response, ApiError> {
    search_page(&state, &session, search, StatusCode::OK, None).await
}

/// `POST /admin/orders/{id}/refund`: back to the search the form came from, which tells the
/// outcome; a refusal (not paid, refunded already) is shown on that search.
pub(crate) async fn refund(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let search = Search::from_form(&form).trimmed();
    match state
        .sale
        .refund_paid(&Operator::Console, OrderId(id))
        .await
    {
        Ok(_) => Ok(see_other(&search.url(&[("refunded", &id.to_string())]))),
        Err(e) => {
            let message = mistake(e.into())?;
            search_page(
                &state,
                &form.session,
                search,
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(message),
            )
            .await
        }
    }
}
