//! The synchronous API at the gateway: `alipay.trade.query`, `.close` and `.refund`, answered
//! in Alipay's shape and signed over the response object's text.

use super::Sandbox;
use super::protocol::{self, Params, param};
use super::trades::{RefundOutcome, Refusal, SandboxTrade};
use crate::domain::OrderId;
use crate::payment::alipay::beijing;
use crate::payment::amount::parse_yuan;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// A response object's fields.
type Body = Map<String, Value>;

/// The fields of an API call's `biz_content` the sandbox reads.
#[derive(Deserialize)]
struct CallContent {
    out_trade_no: String,
    refund_amount: Option<String>,
    out_request_no: Option<String>,
}

fn object(value: Value) -> Body {
    match value {
        Value::Object(map) => map,
        _ => Body::new(),
    }
}

fn success(fields: Value) -> Body {
    let mut body = object(json!({ "code": "10000", "msg": "Success" }));
    body.extend(object(fields));
    body
}

fn failure(code: &str, msg: &str, sub_code: &str, sub_msg: &str) -> Body {
    object(json!({ "code": code, "msg": msg, "sub_code": sub_code, "sub_msg": sub_msg }))
}

/// A business refusal: `40004`, "Business Failed".
fn refused(refusal: Refusal) -> Body {
    failure(
        "40004",
        "Business Failed",
        refusal.sub_code(),
        refusal.sub_msg(),
    )
}

fn invalid_parameter(reason: &str) -> Body {
    failure("40004", "Business Failed", "ACQ.INVALID_PARAMETER", reason)
}

/// Answers one call: verified first, then dispatched on `method`. Every answer is signed,
/// refusals too, so the client can trust a refusal as much as a success.
pub(super) fn answer(sandbox: &Sandbox, params: &Params) -> Response {
    let method = param(params, "method").unwrap_or_default();
    let body = match protocol::verify_request(params, &sandbox.settings) {
        Ok(()) => call(sandbox, method, params),
        Err(e) => failure("40002", "Invalid Arguments", e.sub_code(), &e.to_string()),
    };
    match protocol::signed_answer(&sandbox.settings.gateway_key, method, body) {
        Ok(text) => (
            [(header::CONTENT_TYPE, "application/json;charset=utf-8")],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::error!("sandbox gateway: cannot sign an answer: {e}");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

fn call(sandbox: &Sandbox, method: &str, params: &Params) -> Body {
    if !matches!(
        method,
        "alipay.trade.query" | "alipay.trade.close" | "alipay.trade.refund"
    ) {
        let reason = "the sandbox answers alipay.trade.query, .close and .refund";
        return failure("40002", "Invalid Arguments", "isv.invalid-method", reason);
    }
    let content = param(params, "biz_content").unwrap_or_default();
    let content: CallContent = match serde_json::from_str(content) {
        Ok(content) => content,
        Err(e) => return invalid_parameter(&format!("biz_content: {e}")),
    };
    // An out_trade_no that is no order id of ours can name no trade here.
    let Some(id) = protocol::order_id(&content.out_trade_no) else {
        return refused(Refusal::NotExist);
    };
    let now = sandbox.now();
    let result = match method {
        "alipay.trade.query" => sandbox
            .book()
            .get(id, now)
            .map(|trade| query_body(id, trade))
            .ok_or(Refusal::NotExist),
        "alipay.trade.close" => sandbox.book().close(id, now).map(|trade| {
            success(json!({ "trade_no": trade.trade_no, "out_trade_no": id.to_string() }))
        }),
        _ => return refund(sandbox, id, &content),
    };
    result.unwrap_or_else(refused)
}

fn query_body(id: OrderId, trade: &SandboxTrade) -> Body {
    let total = trade.opening.total.to_string();
    let mut body = success(json!({
        "trade_no": trade.trade_no,
        "out_trade_no": id.to_string(),
        "trade_status": trade.status.as_str(),
        "total_amount": total,
    }));
    if let Some(paid_at) = trade.paid_at {
        body.extend(object(json!({
            "send_pay_date": beijing::format(paid_at),
            "buyer_pay_amount": total,
            "receipt_amount": total,
        })));
    }
    body
}

/// `alipay.trade.refund`; without an `out_request_no`, the `out_trade_no` stands for it, as at
/// Alipay. Money that moved is also notified to the shop, as Alipay does.
fn refund(sandbox: &Sandbox, id: OrderId, content: &CallContent) -> Body {
    let Some(amount) = content.refund_amount.as_deref().and_then(parse_yuan) else {
        return invalid_parameter("refund_amount must be yuan with two decimals");
    };
    let request_no = content
        .out_request_no
        .as_deref()
        .unwrap_or(&content.out_trade_no);
    let refunded = sandbox
        .book()
        .refund(id, request_no, amount, sandbox.now())
        .map(|(outcome, trade)| (outcome, trade.clone()));
    let (outcome, trade) = match refunded {
        Ok(refunded) => refunded,
        Err(refusal) => return refused(refusal),
    };
    if outcome == RefundOutcome::Refunded {
        sandbox.notify(id, &trade);
    }
    let fund_change = if outcome == RefundOutcome::Refunded {
        "Y"
    } else {
        "N"
    };
    success(json!({
        "trade_no": trade.trade_no,
        "out_trade_no": id.to_string(),
        "fund_change": fund_change,
        "refund_fee": trade.refunded().to_string(),
    }))
}
