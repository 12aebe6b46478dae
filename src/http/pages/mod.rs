//! Server-rendered pages: the sale, sign-in and the buyer's orders. They render from the same
//! sale service as the API; the page script then talks to the API for buying and paying.
//! Every page carries an ETag, so a refresh that changes nothing costs a 304, and is in the
//! shopper's language (see [`i18n`]).

pub mod i18n;
mod next;
pub mod views;

use super::api::catalog::product_views_of_event;
use super::api::sessions::{revoke, session_cookie};
use super::assets::cached;
use crate::domain::{OrderStatus, SaleStatus};
use crate::error::{ApiError, AppPath, AppQuery};
use crate::http::AppState;
use crate::http::extract::CurrentUser;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use i18n::{LANG_COOKIE, Lang};
use next::local_path;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use views::{EventTab, LoginPage, OrderRow, OrdersPage, Page, ProductCard, SalePage};

/// A page in the request's language, with its ETag. The page differs by the session and
/// language cookies and by `Accept-Language`, so caches must key on those.
pub(super) fn render(request: &HeaderMap, page: &impl Page) -> Result<Response, ApiError> {
    let html = page
        .render_in(Lang::of(request).strings())
        .map_err(anyhow::Error::from)?;
    let digest = Sha256::digest(&html).into();
    let mut response = cached(
        request,
        html,
        &digest,
        "text/html; charset=utf-8",
        "private, no-cache",
    );
    response.headers_mut().insert(
        header::VARY,
        HeaderValue::from_static("Cookie, Accept-Language"),
    );
    Ok(response)
}

/// Keeps the chosen language in a cookie for a year and goes back to the page the switch was
/// on. A plain link, so it works without the script; it only changes a preference, so a GET
/// is harmless.
pub(crate) async fn switch_language(
    State(state): State<AppState>,
    AppPath(code): AppPath<String>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(lang) = Lang::from_code(&code) else {
        return Err(ApiError::not_found("unknown_language", "no such language"));
    };
    let secure = if state.secure_cookies { "; Secure" } else { "" };
    let code = lang.code();
    let cookie = format!("{LANG_COOKIE}={code}; Path=/; SameSite=Lax; Max-Age=31536000{secure}");
    let back = request
        .get(header::REFERER)
        .and_then(|r| r.to_str().ok())
        .and_then(|r| r.parse::<Uri>().ok())
        .and_then(|uri| uri.path_and_query().map(|pq| pq.as_str().to_owned()));
    let location = HeaderValue::from_str(&local_path(back)).map_err(anyhow::Error::from)?;
    let cookie = HeaderValue::from_str(&cookie).map_err(anyhow::Error::from)?;
    Ok((
        StatusCode::SEE_OTHER,
        [(header::SET_COOKIE, cookie), (header::LOCATION, location)],
    )
        .into_response())
}

/// The server's clock in Unix milliseconds, as the sale's windows are: the page script sets
/// its countdowns by it, so the pages themselves carry no time and keep their ETags.
pub(crate) async fn server_time(State(state): State<AppState>) -> Response {
    (
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(serde_json::json!({ "now_ms": state.sale.now() })),
    )
        .into_response()
}

#[derive(Deserialize)]
pub(crate) struct SaleQuery {
    event: Option<String>,
}

pub(crate) async fn sale_page(
    State(state): State<AppState>,
    user: Option<CurrentUser>,
    AppQuery(query): AppQuery<SaleQuery>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let now = state.sale.now();
    let events = state.sale.events();
    // The asked-for event, which must be one the catalog knows, else the live one, else the
    // next to start, else the last.
    let asked = match query.event {
        Some(asked) => Some(
            asked
                .parse::<i64>()
                .ok()
                .filter(|id| events.iter().any(|e| e.id == *id))
                .ok_or_else(|| ApiError::not_found("unknown_event", "no such sale event"))?,
        ),
        None => None,
    };
    let selected = asked.or_else(|| {
        let by_status = |s| events.iter().find(|e| e.window.status(now) == s);
        by_status(SaleStatus::Live)
            .or_else(|| by_status(SaleStatus::Upcoming))
            .or(events.last())
            .map(|e| e.id)
    });
    let tabs = events
        .iter()
        .map(|e| EventTab {
            id: e.id,
            title: e.title.clone(),
            status: e.window.status(now).as_str(),
            starts_at_ms: e.window.start,
            ends_at_ms: e.window.end,
            selected: Some(e.id) == selected,
        })
        .collect();
    let products = match selected {
        Some(id) => product_views_of_event(&state, id).await,
        None => Vec::new(),
    };
    let held = match &user {
        Some(user) => units_held(&state, user).await?,
        None => HashMap::new(),
    };
    let token_lead_ms = (state.guard.settings.token_lead_secs * 1000) as i64;
    let cards = products
        .into_iter()
        .map(|p| ProductCard {
            held: held
                .get(&p.id)
                .is_some_and(|&units| units >= p.per_user_limit),
            id: p.id,
            name: p.name,
            image_url: p.image_url,
            original_price: crate::domain::Money::from_cents(p.original_price_cents)
                .map(|m| m.to_string())
                .unwrap_or_default(),
            sale_price: crate::domain::Money::from_cents(p.sale_price_cents)
                .map(|m| m.to_string())
                .unwrap_or_default(),
            stock_total: p.stock_total,
            remaining: p.remaining,
            sold_percent: p.sold_percent,
            almost_gone: p.remaining > 0 && p.remaining * 10 <= p.stock_total,
            status: p.status,
            paused: p.paused,
            guard: p.guard,
            token_from_ms: p.starts_at.0 - token_lead_ms,
            starts_at_ms: p.starts_at.0,
            ends_at_ms: p.ends_at.0,
        })
        .collect();
    render(
        &request,
        &SalePage {
            csrf: user
                .as_ref()
                .map(|u| state.auth.tokens.form_token(u.session))
                .unwrap_or_default(),
            username: user.map(|u| u.username),
            events: tabs,
            event_id: selected,
            products: cards,
        },
    )
}

/// Units of each product the shopper holds in orders that are not cancelled.
async fn units_held(state: &AppState, user: &CurrentUser) -> Result<HashMap<i64, u32>, ApiError> {
    let mut held = HashMap::new();
    for order in state.sale.orders_of(user.id).await? {
        if matches!(
            order.status,
            OrderStatus::AwaitingPayment | OrderStatus::Paid
        ) {
            *held.entry(order.product_id.0).or_default() += order.quantity.get();
        }
    }
    Ok(held)
}

#[derive(Deserialize)]
pub(crate) struct LoginQuery {
    next: Option<String>,
}

pub(crate) async fn login_page(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<LoginQuery>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    render(
        &request,
        &LoginPage {
            next: local_path(query.next),
            demo: state.demo,
        },
    )
}

pub(crate) async fn orders_page(
    State(state): State<AppState>,
    user: Option<CurrentUser>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(user) = user else {
        return Ok(Redirect::to("/login?next=%2Forders").into_response());
    };
    state.limits.check_orders(user.id)?;
    let orders = state.sale.orders_of(user.id).await?;
    let rows = orders
        .iter()
        .map(|o| OrderRow {
            id: o.id.to_string(),
            product_name: o.product_name.clone(),
            quantity: i64::from(o.quantity.get()),
            total: o.total.to_string(),
            status: o.status.as_str(),
            created_at_ms: o.created_at,
            pay_before_ms: o.pay_before,
        })
        .collect();
    render(
        &request,
        &OrdersPage {
            csrf: state.auth.tokens.form_token(user.session),
            username: user.username,
            orders: rows,
            sandbox: state.sale.provider_name() == Some("sandbox"),
        },
    )
}

/// Signs out: the form must carry the session's form token, so another site's page cannot
/// sign the shopper out (the same-origin check stops it first; this holds without it too).
pub(crate) async fn logout(
    State(state): State<AppState>,
    user: Option<CurrentUser>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if let Some(user) = user {
        let presented = form_urlencoded::parse(&body)
            .find(|(name, _)| name == "csrf")
            .map(|(_, value)| value.into_owned())
            .unwrap_or_default();
        if !state
            .auth
            .tokens
            .accepts_form_token(user.session, &presented)
        {
            return Err(ApiError::client(
                StatusCode::FORBIDDEN,
                "bad_csrf_token",
                "the form's token is missing or wrong: reload the page and try again",
            ));
        }
        revoke(&state, user.session, user.expires_at).await?;
    }
    let cookie = session_cookie(&state, "", 0)?;
    Ok((StatusCode::SEE_OTHER, cookie, [(header::LOCATION, "/")]).into_response())
}
