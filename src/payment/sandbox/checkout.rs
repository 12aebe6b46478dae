//! The buyer's side of the sandbox: the checkout page a signed pay request opens, and what
//! paying or abandoning there does.

use super::protocol::{self, Params, order_id, param};
use super::trades::{Opening, Refusal, SandboxTrade};
use super::{CHECKOUT_PREFIX, Sandbox};
use crate::domain::{Millis, OrderId};
use crate::payment::TradeStatus;
use crate::payment::alipay::beijing;
use crate::payment::amount::parse_yuan;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;

/// The desktop pay method.
pub(super) const PAGE_PAY: &str = "alipay.trade.page.pay";
/// The mobile-web pay method.
pub(super) const WAP_PAY: &str = "alipay.trade.wap.pay";

/// Alipay's limit on a subject's length, in characters.
const MAX_SUBJECT_CHARS: usize = 256;
/// Alipay's limit on `notify_url` and `return_url`.
const MAX_URL_BYTES: usize = 256;

/// The pages' own policy: their style is inline, and nothing else is loaded. No
/// `form-action`, as browsers apply it to the redirect to the shop after paying.
const PAGE_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'";

#[derive(Template)]
#[template(path = "sandbox/checkout.html")]
struct CheckoutPage {
    subject: String,
    amount: String,
    out_trade_no: String,
    trade_no: String,
    /// `time_expire` as Alipay writes it.
    deadline: Option<String>,
    /// Where the form posts the buyer's choice.
    action: String,
}

#[derive(Template)]
#[template(path = "sandbox/message.html")]
struct MessagePage<'a> {
    title: &'a str,
    text: &'a str,
    /// Back to the shop, when it said where it is.
    link: Option<String>,
}

fn html(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(html) => (
            status,
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CONTENT_SECURITY_POLICY, PAGE_POLICY),
                (header::CACHE_CONTROL, "no-store"),
            ],
            html,
        )
            .into_response(),
        Err(e) => {
            tracing::error!("sandbox gateway: a page did not render: {e}");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

fn message(status: StatusCode, title: &str, text: &str, link: Option<String>) -> Response {
    html(status, &MessagePage { title, text, link })
}

/// A request the page cannot serve: a plain 400 naming why.
fn bad_request(reason: &str) -> Response {
    message(
        StatusCode::BAD_REQUEST,
        "请求被拒绝 Request refused",
        reason,
        None,
    )
}

/// The fields of a pay request's `biz_content` the sandbox reads.
#[derive(Deserialize)]
struct PayContent {
    out_trade_no: String,
    total_amount: String,
    subject: String,
    product_code: String,
    time_expire: Option<String>,
}

/// An `http(s)` URL of printable ASCII within Alipay's length limit: it becomes a link, a
/// redirect and a notification target.
fn url(params: &[(String, String)], key: &str) -> Result<Option<String>, String> {
    let Some(url) = param(params, key).filter(|url| !url.is_empty()) else {
        return Ok(None);
    };
    let web = url.starts_with("http://") || url.starts_with("https://");
    if !web || url.len() > MAX_URL_BYTES || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{key} must be an http(s) URL of at most {MAX_URL_BYTES} bytes"
        ));
    }
    Ok(Some(url.to_owned()))
}

/// The trade a verified pay request asks to open, or why it cannot be one.
fn opening(params: &[(String, String)], now: Millis) -> Result<(OrderId, Opening), String> {
    let (method, product_code) = match param(params, "method") {
        Some(PAGE_PAY) => (PAGE_PAY, "FAST_INSTANT_TRADE_PAY"),
        Some(WAP_PAY) => (WAP_PAY, "QUICK_WAP_WAY"),
        _ => return Err("method must be a page or wap pay".to_owned()),
    };
    let content = param(params, "biz_content").unwrap_or_default();
    let content: PayContent =
        serde_json::from_str(content).map_err(|e| format!("biz_content: {e}"))?;
    if content.product_code != product_code {
        return Err(format!("{method} takes product_code {product_code}"));
    }
    let id = order_id(&content.out_trade_no)
        .ok_or("out_trade_no is not an order number of this shop")?;
    let total = parse_yuan(&content.total_amount)
        .filter(|total| total.cents() > 0)
        .ok_or("total_amount must be yuan with two decimals, at least 0.01")?;
    let chars = content.subject.chars().count();
    if chars == 0 || chars > MAX_SUBJECT_CHARS {
        return Err(format!(
            "subject must have 1 to {MAX_SUBJECT_CHARS} characters"
        ));
    }
    let expires_at = match content.time_expire.as_deref() {
        None | Some("") => None,
        Some(text) => {
            let at = beijing::parse(text).ok_or("time_expire is not yyyy-MM-dd HH:mm:ss")?;
            Some(at)
        }
    };
    if expires_at.is_some_and(|at| at <= now) {
        return Err("time_expire has passed".to_owned());
    }
    let opening = Opening {
        subject: content.subject,
        total,
        expires_at,
        method,
        notify_url: url(params, "notify_url")?,
        return_url: url(params, "return_url")?,
    };
    Ok((id, opening))
}

/// Alipay's trade numbers start with the day they were opened; the order id makes it unique.
fn trade_no(id: OrderId, now: Millis) -> String {
    let day: String = beijing::format(now)
        .chars()
        .take(10)
        .filter(char::is_ascii_digit)
        .collect();
    format!("{day}22{:019}", id.0)
}

/// `scheme://host[:port]/` of an http(s) URL: the shop's front page.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(format!("{scheme}://{}/", &rest[..end]))
}

/// A signed pay request: verified, then its trade opened (or found) and shown.
pub(super) fn open(sandbox: &Sandbox, params: &Params) -> Response {
    if let Err(e) = protocol::verify_request(params, &sandbox.settings) {
        return bad_request(&format!("{e} ({})", e.sub_code()));
    }
    let now = sandbox.now();
    let (id, opening) = match opening(params, now) {
        Ok(opened) => opened,
        Err(reason) => return bad_request(&reason),
    };
    let opened = sandbox
        .book()
        .open(id, opening, trade_no(id, now), now)
        .cloned();
    let trade = match opened {
        Ok(trade) => trade,
        Err(refusal) => {
            return bad_request(&format!("{}: {}", refusal.sub_code(), refusal.sub_msg()));
        }
    };
    shown(id, &trade, false)
}

/// The page a trade shows the buyer: the checkout while it waits for payment (unless the
/// buyer just abandoned it), else where it stands, with a link back to the shop.
fn shown(id: OrderId, trade: &SandboxTrade, abandoned: bool) -> Response {
    let shop = trade.opening.return_url.as_deref().and_then(origin);
    let (title, text) = match trade.status {
        TradeStatus::WaitBuyerPay if !abandoned => {
            return html(StatusCode::OK, &checkout_page(id, trade));
        }
        TradeStatus::WaitBuyerPay => (
            "未付款 Not paid",
            "你没有付款就离开了：交易仍在等待付款，直到截止时间。\
             You left without paying: the trade waits for payment until its deadline.",
        ),
        TradeStatus::Success | TradeStatus::Finished => (
            "已付款 Paid",
            "这笔交易已经付过款。This trade is paid already.",
        ),
        TradeStatus::Closed => (
            "交易已关闭 Trade closed",
            "这笔交易已关闭，不能再付款。This trade is closed and takes no payment.",
        ),
    };
    message(StatusCode::OK, title, text, shop)
}

fn checkout_page(id: OrderId, trade: &SandboxTrade) -> CheckoutPage {
    CheckoutPage {
        subject: trade.opening.subject.clone(),
        amount: trade.opening.total.to_string(),
        out_trade_no: id.to_string(),
        trade_no: trade.trade_no.clone(),
        deadline: trade.opening.expires_at.map(beijing::format),
        action: format!("{CHECKOUT_PREFIX}{id}"),
    }
}

/// `POST` [`CHECKOUT_PATH`](super::CHECKOUT_PATH), `action=pay|pay_without_notice|abandon`:
/// the buyer's choice on the checkout page.
pub async fn decide(
    State(sandbox): State<Arc<Sandbox>>,
    Path(out_trade_no): Path<String>,
    body: Bytes,
) -> Response {
    let Some(id) = order_id(&out_trade_no) else {
        return not_found();
    };
    match param(&protocol::parse_params(&body), "action") {
        Some("pay") => pay(&sandbox, id, Notice::Sent),
        Some("pay_without_notice") => pay(&sandbox, id, Notice::Lost),
        Some("abandon") => abandon(&sandbox, id),
        _ => bad_request("action must be pay, pay_without_notice or abandon"),
    }
}

fn not_found() -> Response {
    let text = "沙箱中没有这笔交易。The sandbox has no such trade.";
    message(
        StatusCode::NOT_FOUND,
        "交易不存在 No such trade",
        text,
        None,
    )
}

/// Whether the shop hears of a payment.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Notice {
    /// The notification goes out, with Alipay's retries.
    Sent,
    /// It is lost on the way, as one can be: so the shop's recovery can be tried (the deadline
    /// sweep asking `alipay.trade.query`, a late notification that `Sandbox::notification`
    /// replays).
    Lost,
}

/// Pays the trade, tells the shop in the background (unless the notice is to be lost), and
/// sends the buyer back to it with the signed return. A second click sends the buyer back
/// again and tells the shop nothing new.
fn pay(sandbox: &Sandbox, id: OrderId, notice: Notice) -> Response {
    let now = sandbox.now();
    let paid = sandbox
        .book()
        .pay(id, now)
        .map(|(newly, trade)| (newly, trade.clone()));
    let (newly, trade) = match paid {
        Ok(paid) => paid,
        Err(Refusal::NotExist) => return not_found(),
        Err(_) => {
            let text = "交易已关闭（已过付款截止时间或已被商家关闭），不能付款。\
                        The trade is closed (past its deadline, or closed by the shop): \
                        it takes no payment.";
            let shop = sandbox
                .book()
                .get(id, now)
                .and_then(|trade| trade.opening.return_url.as_deref().and_then(origin));
            return message(StatusCode::CONFLICT, "交易已关闭 Trade closed", text, shop);
        }
    };
    if newly && notice == Notice::Sent {
        sandbox.notify(id, &trade);
    }
    let Some(return_url) = &trade.opening.return_url else {
        let text = "付款成功。商家会收到通知。Paid: the shop is being notified.";
        return message(StatusCode::OK, "已付款 Paid", text, None);
    };
    let params = match protocol::return_params(&sandbox.settings, id, &trade) {
        Ok(params) => params,
        Err(e) => {
            tracing::error!("sandbox gateway: cannot sign a return: {e}");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&params)
        .finish();
    let separator = if return_url.contains('?') { '&' } else { '?' };
    match HeaderValue::try_from(format!("{return_url}{separator}{query}")) {
        Ok(location) => (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response(),
        Err(_) => bad_request("return_url cannot be a redirect"),
    }
}

/// The buyer leaves without paying: the trade stays open until its deadline.
fn abandon(sandbox: &Sandbox, id: OrderId) -> Response {
    let trade = sandbox.book().get(id, sandbox.now()).cloned();
    match trade {
        Some(trade) => shown(id, &trade, true),
        None => not_found(),
    }
}
