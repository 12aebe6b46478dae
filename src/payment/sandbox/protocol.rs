//! Both directions of Alipay's signatures, seen from the gateway: checking a shop's signed
//! request, and signing what the gateway says back (notifications, returns, answers).

use super::SandboxSettings;
use super::trades::SandboxTrade;
use crate::domain::OrderId;
use crate::payment::alipay::beijing;
use crate::payment::alipay::sign::{AppKey, SignError, string_to_sign, string_to_verify};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Form or query parameters, in the order they came.
pub(super) type Params = Vec<(String, String)>;

/// Decodes an `application/x-www-form-urlencoded` body or a query string.
pub(super) fn parse_params(text: &[u8]) -> Params {
    form_urlencoded::parse(text).into_owned().collect()
}

/// The first value of `key`.
pub(super) fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Reads an `out_trade_no` of this shop: a Snowflake order id in decimal.
pub(super) fn order_id(text: &str) -> Option<OrderId> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok().map(OrderId)).flatten()
}

fn pairs(params: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

/// Why a request was not taken as the shop's, with Alipay's `sub_code`.
#[derive(Debug, thiserror::Error)]
pub(super) enum RequestError {
    #[error("the request has no sign")]
    MissingSignature,
    #[error("sign_type must be RSA2")]
    SignType,
    #[error("the parameter {0} appears more than once")]
    Repeated(String),
    #[error("the signature does not verify with the app's public key: {0}")]
    Signature(#[from] SignError),
    #[error("app_id is not the sandbox app's")]
    AppId,
}

impl RequestError {
    /// Alipay's `sub_code` for this refusal (its `code` is `40002`, "Invalid Arguments").
    pub fn sub_code(&self) -> &'static str {
        match self {
            Self::MissingSignature => "isv.missing-signature",
            Self::SignType => "isv.invalid-signature-type",
            Self::Repeated(_) => "isv.invalid-parameter",
            Self::Signature(_) => "isv.invalid-signature",
            Self::AppId => "isv.invalid-app-id",
        }
    }
}

/// Checks that `params` are a request the shop signed: one value per key, RSA2, the request
/// rule's signature under the app's public key, and the sandbox's app id. Repeated keys are
/// refused so that what is checked and what is read can never be two different values.
pub(super) fn verify_request(
    params: &[(String, String)],
    settings: &SandboxSettings,
) -> Result<(), RequestError> {
    let mut seen = HashSet::new();
    if let Some((key, _)) = params.iter().find(|(k, _)| !seen.insert(k.as_str())) {
        return Err(RequestError::Repeated(key.clone()));
    }
    let sign = param(params, "sign").ok_or(RequestError::MissingSignature)?;
    if param(params, "sign_type") != Some("RSA2") {
        return Err(RequestError::SignType);
    }
    let message = string_to_sign(pairs(params));
    settings.app_public_key.verify(&message, sign)?;
    if param(params, "app_id") != Some(settings.app_id.as_str()) {
        return Err(RequestError::AppId);
    }
    Ok(())
}

/// Adds `sign_type` and the gateway's `sign` to `params` by the rule Alipay signs its
/// notifications and returns with (every parameter but those two, empty ones included).
fn sign_as_alipay(key: &AppKey, mut params: Params) -> Result<Params, SignError> {
    let sign = key.sign(&string_to_verify(pairs(&params)))?;
    params.push(("sign_type".to_owned(), "RSA2".to_owned()));
    params.push(("sign".to_owned(), sign));
    Ok(params)
}

fn owned(pairs: &[(&str, String)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The signed asynchronous notification of the trade's current state: fixed by the state
/// change it reports (its time and `notify_id`), so every delivery of it is identical.
pub(super) fn notification(
    settings: &SandboxSettings,
    id: OrderId,
    trade: &SandboxTrade,
) -> Result<Params, SignError> {
    let total = trade.opening.total.to_string();
    let mut params = vec![
        ("notify_time", beijing::format(trade.changed_at)),
        ("notify_type", "trade_status_sync".to_owned()),
        ("notify_id", format!("{}-{}", trade.trade_no, trade.changes)),
        ("app_id", settings.app_id.clone()),
        ("auth_app_id", settings.app_id.clone()),
        ("charset", "utf-8".to_owned()),
        ("version", "1.0".to_owned()),
        ("trade_no", trade.trade_no.clone()),
        ("out_trade_no", id.to_string()),
        ("trade_status", trade.status.as_str().to_owned()),
        ("total_amount", total.clone()),
        ("seller_id", settings.seller_id.clone()),
        ("gmt_create", beijing::format(trade.created_at)),
        ("subject", trade.opening.subject.clone()),
    ];
    if let Some(paid_at) = trade.paid_at {
        params.push(("gmt_payment", beijing::format(paid_at)));
        params.push(("receipt_amount", total.clone()));
        params.push(("buyer_pay_amount", total));
    }
    if let Some((request_no, _)) = trade.refunds.last() {
        params.push(("refund_fee", trade.refunded().to_string()));
        params.push(("gmt_refund", beijing::format(trade.changed_at)));
        params.push(("out_biz_no", request_no.clone()));
    }
    sign_as_alipay(&settings.gateway_key, owned(&params))
}

/// The signed parameters the buyer's browser carries back to the shop's `return_url` after
/// paying, signed like a notification.
pub(super) fn return_params(
    settings: &SandboxSettings,
    id: OrderId,
    trade: &SandboxTrade,
) -> Result<Params, SignError> {
    let params = [
        ("app_id", settings.app_id.clone()),
        ("auth_app_id", settings.app_id.clone()),
        ("charset", "utf-8".to_owned()),
        ("method", format!("{}.return", trade.opening.method)),
        ("out_trade_no", id.to_string()),
        ("seller_id", settings.seller_id.clone()),
        (
            "timestamp",
            beijing::format(trade.paid_at.unwrap_or(trade.changed_at)),
        ),
        ("total_amount", trade.opening.total.to_string()),
        ("trade_no", trade.trade_no.clone()),
        ("version", "1.0".to_owned()),
    ];
    sign_as_alipay(&settings.gateway_key, owned(&params))
}

/// The synchronous answer to `method`: `{"<method>_response": body, "sign": "…"}`, the
/// signature over the response object's JSON text exactly as it is sent.
pub(super) fn signed_answer(
    key: &AppKey,
    method: &str,
    body: Map<String, Value>,
) -> Result<String, SignError> {
    let name = match method {
        "alipay.trade.query" | "alipay.trade.close" | "alipay.trade.refund" => {
            format!("{}_response", method.replace('.', "_"))
        }
        _ => "error_response".to_owned(),
    };
    let response = Value::Object(body).to_string();
    let sign = Value::String(key.sign(&response)?);
    Ok(format!(
        "{{{}:{response},\"sign\":{sign}}}",
        Value::String(name)
    ))
}
