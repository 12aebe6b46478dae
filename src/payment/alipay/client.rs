//! The Alipay client: signed pay URLs, verified notifications and returns, and the synchronous
//! `query`, `close` and `refund` calls. Every word from Alipay is checked before it is read: a
//! notification's or a return's signature, then our app id and seller id; an answer's signature
//! over the raw text of its `*_response` object exactly as sent, then the order it names.
//!
//! The `sandbox` provider is this same client pointed at the built-in gateway, so the demo runs
//! the code that talks to Alipay.

use super::beijing;
use super::sign::{
    AlipayPublicKey, AppKey, SignError, signed_query, string_to_sign, string_to_verify,
};
use crate::domain::{Millis, Money, OrderId};
use crate::payment::amount::parse_yuan;
use crate::payment::{
    Channel, GatewayError, Notification, PayRequest, PaymentProvider, Rejected, Trade, TradeStatus,
    install_crypto_provider,
};
use anyhow::Context as _;
use async_trait::async_trait;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Alipay's production gateway, the default: real money moves.
pub const PRODUCTION_GATEWAY: &str = "https://openapi.alipay.com/gateway.do";

/// The gateway of Alipay's own sandbox, for an app made in Alipay's sandbox console: the real
/// protocol and a reachable notify URL with play money, before production keys exist.
pub const ALIPAY_SANDBOX_GATEWAY: &str = "https://openapi-sandbox.dl.alipaydev.com/gateway.do";

/// How long a connection to the gateway may take: a sweep or a refund tries again later
/// rather than hold its task on an unreachable gateway.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a whole call may take, answer included.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle connections kept to the one gateway host, so calls reuse TLS sessions without holding
/// an unbounded pool.
const MAX_IDLE_CONNECTIONS: usize = 8;

/// The largest answer read. A trade's answer is a few dozen short fields, so anything near this
/// is not the protocol and is not buffered further.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The longest `trade_no` or `notify_id` accepted; both are stored for audit. Alipay's are a
/// few dozen characters.
const MAX_ID_BYTES: usize = 128;

/// Alipay's limit on a trade's subject, in characters: a longer one would make it refuse the
/// pay request.
const MAX_SUBJECT_CHARS: usize = 256;

/// The longest text of an answer (a refusal's code and message) carried into an error, which
/// is logged.
const MAX_ERROR_CHARS: usize = 256;

/// The `code` of a synchronous answer that did what was asked.
const SUCCESS: &str = "10000";

/// The `sub_code` for a trade Alipay does not know: the buyer never opened the pay page.
const TRADE_NOT_EXIST: &str = "ACQ.TRADE_NOT_EXIST";

/// What the client needs to speak for one merchant app.
#[derive(Debug)]
pub struct AlipaySettings {
    /// The provider's name in the API: `alipay`, or `sandbox` for the built-in gateway.
    pub provider_name: &'static str,
    /// The merchant app (`app_id`): requests carry it, notifications must name it.
    pub app_id: String,
    /// Signs every request.
    pub app_key: AppKey,
    /// Verifies every notification, return and answer.
    pub alipay_public_key: AlipayPublicKey,
    /// Where requests go: [`PRODUCTION_GATEWAY`], [`ALIPAY_SANDBOX_GATEWAY`] or the built-in
    /// sandbox. It may carry a query of its own.
    pub gateway_url: String,
    /// The merchant's Alipay account (`seller_id`, "2088…"): when set, a notification paid to
    /// anyone else is refused.
    pub seller_id: Option<String>,
    /// Where Alipay posts the asynchronous notification (`notify_url`).
    pub notify_url: String,
    /// Where the buyer's browser comes back after paying (`return_url`).
    pub return_url: String,
    /// The `scheme://host:port` that the three URLs above start with when it stands only for
    /// "this server, wherever the buyer reached it" (no public URL configured, listening on
    /// every address): a pay URL then starts with the address the buyer's connection came in
    /// on instead, so a shopper on another machine is sent back to this one.
    pub reached_base: Option<String>,
}

/// The [`PaymentProvider`] that speaks Alipay's open-platform protocol to one gateway.
#[derive(Debug)]
pub struct AlipayClient {
    settings: AlipaySettings,
    http: reqwest::Client,
}

impl AlipayClient {
    /// A client for `settings`, with bounded connect and call timeouts and a bounded pool of
    /// idle connections. Refuses a gateway URL that is not an absolute URL.
    pub fn new(settings: AlipaySettings) -> anyhow::Result<Self> {
        reqwest::Url::parse(&settings.gateway_url)
            .with_context(|| format!("the Alipay gateway URL {:?}", settings.gateway_url))?;
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
            // The gateway answers in place; a redirect is not the protocol.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the HTTP client for the payment gateway")?;
        Ok(Self { settings, http })
    }

    /// The pay URL for `request` as signed at `now`.
    fn pay_url_at(&self, request: &PayRequest<'_>, now: Millis) -> anyhow::Result<String> {
        let (method, product_code) = match request.channel {
            Channel::Page => ("alipay.trade.page.pay", "FAST_INSTANT_TRADE_PAY"),
            Channel::Wap => ("alipay.trade.wap.pay", "QUICK_WAP_WAY"),
        };
        let biz_content = serde_json::to_string(&PayContent {
            out_trade_no: request.order,
            total_amount: request.total.to_string(),
            subject: at_most(request.subject, MAX_SUBJECT_CHARS),
            product_code,
            time_expire: beijing::format(request.expires_at),
        })?;
        let timestamp = beijing::format(now);
        let rebased = |url: &str| self.rebased(url, request.reached_at);
        let (notify_url, return_url) = (
            rebased(&self.settings.notify_url),
            rebased(&self.settings.return_url),
        );
        let mut params = self.common(method, &timestamp);
        params.extend([
            ("notify_url", notify_url.as_str()),
            ("return_url", return_url.as_str()),
            ("biz_content", biz_content.as_str()),
        ]);
        let query = self.signed(&params)?;
        let gateway = &rebased(&self.settings.gateway_url);
        let separator = if !gateway.contains('?') {
            "?"
        } else if gateway.ends_with(['?', '&']) {
            ""
        } else {
            "&"
        };
        Ok(format!("{gateway}{separator}{query}"))
    }

    /// `url`, starting with the address the buyer reached this server at instead of
    /// [`AlipaySettings::reached_base`], when it starts with that.
    fn rebased(&self, url: &str, reached_at: Option<SocketAddr>) -> String {
        let base = self.settings.reached_base.as_deref();
        match (base.and_then(|base| url.strip_prefix(base)), reached_at) {
            (Some(rest), Some(at)) => {
                let at = SocketAddr::new(at.ip().to_canonical(), at.port());
                format!("http://{at}{rest}")
            }
            _ => url.to_owned(),
        }
    }

    /// The parameters every request carries, before its own.
    fn common<'a>(&'a self, method: &'a str, timestamp: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![
            ("app_id", self.settings.app_id.as_str()),
            ("method", method),
            ("format", "JSON"),
            ("charset", "utf-8"),
            ("sign_type", "RSA2"),
            ("timestamp", timestamp),
            ("version", "1.0"),
        ]
    }

    /// `params` signed with the app key, encoded as a query string (which is also a form
    /// body).
    fn signed(&self, params: &[(&str, &str)]) -> Result<String, SignError> {
        let sign = self
            .settings
            .app_key
            .sign(&string_to_sign(params.iter().copied()))?;
        Ok(signed_query(params.iter().copied(), &sign))
    }

    /// Checks what Alipay signed in a notification or a return: no parameter twice, the
    /// signature, then our app id. Hands back the parameters by name.
    fn check_signed<'a>(
        &self,
        params: &'a [(String, String)],
    ) -> Result<BTreeMap<&'a str, &'a str>, Rejected> {
        let mut fields = BTreeMap::new();
        for (key, value) in params {
            // `sign` and `sign_type` are outside the signature: a second one must not slip by.
            if fields.insert(key.as_str(), value.as_str()).is_some() {
                return Err(Rejected::Malformed(format!("{key:.32} is repeated")));
            }
        }
        let sign = fields
            .get("sign")
            .ok_or_else(|| Rejected::Malformed("no sign".to_owned()))?;
        // The signature does not cover `sign_type`: one naming another algorithm than the one
        // checked here is not what Alipay sends, whatever the signature says.
        if fields.get("sign_type").is_some_and(|&kind| kind != "RSA2") {
            return Err(Rejected::Malformed("sign_type is not RSA2".to_owned()));
        }
        let message = string_to_verify(fields.iter().map(|(&key, &value)| (key, value)));
        self.settings.alipay_public_key.verify(&message, sign)?;
        if fields.get("app_id") != Some(&self.settings.app_id.as_str()) {
            return Err(Rejected::AppId);
        }
        Ok(fields)
    }

    /// When a seller id is configured, the signed one must be ours; `required` says whether a
    /// missing one is refused too (a notification always names its seller).
    fn check_seller(&self, fields: &BTreeMap<&str, &str>, required: bool) -> Result<(), Rejected> {
        let Some(ours) = &self.settings.seller_id else {
            return Ok(());
        };
        match fields.get("seller_id") {
            Some(theirs) if theirs == ours => Ok(()),
            None if !required => Ok(()),
            _ => Err(Rejected::SellerId),
        }
    }

    /// One synchronous call about `order`: signed, posted as a form, and its answer verified
    /// and checked by [`read_answer`].
    async fn call(
        &self,
        method: &str,
        order: OrderId,
        biz_content: &Value,
    ) -> Result<Map<String, Value>, GatewayError> {
        let timestamp = beijing::format(now());
        let biz_content = biz_content.to_string();
        let mut params = self.common(method, &timestamp);
        params.push(("biz_content", &biz_content));
        let body = self.signed(&params).map_err(|e| {
            GatewayError::Unreachable(format!("the request could not be signed: {e}"))
        })?;
        let text = self.post(body).await?;
        read_answer(&text, method, order, &self.settings.alipay_public_key)
    }

    /// Posts a signed form to the gateway and reads the answer's text, at most
    /// [`MAX_ANSWER_BYTES`].
    async fn post(&self, body: String) -> Result<String, GatewayError> {
        let unreachable = |e: reqwest::Error| GatewayError::Unreachable(e.to_string());
        let mut response = self
            .http
            .post(&self.settings.gateway_url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded;charset=utf-8",
            )
            .body(body)
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        if !status.is_success() {
            return Err(GatewayError::Unreachable(format!("HTTP {status}")));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(GatewayError::Unreachable(format!(
                    "the answer is longer than {MAX_ANSWER_BYTES} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        String::from_utf8(bytes)
            .map_err(|_| GatewayError::Unreachable("the answer is not UTF-8".to_owned()))
    }
}

#[async_trait]
impl PaymentProvider for AlipayClient {
    fn name(&self) -> &'static str {
        self.settings.provider_name
    }

    fn pay_url(&self, request: &PayRequest<'_>) -> anyhow::Result<String> {
        self.pay_url_at(request, now())
    }

    fn verify_notification(&self, params: &[(String, String)]) -> Result<Notification, Rejected> {
        let fields = self.check_signed(params)?;
        self.check_seller(&fields, true)?;
        let field = |key: &str| fields.get(key).copied();
        let trade = read_trade(field, "gmt_payment")?;
        let notify_id = bounded_id("notify_id", required(field, "notify_id")?)?;
        Ok(Notification { trade, notify_id })
    }

    fn verify_return(&self, params: &[(String, String)]) -> Result<OrderId, Rejected> {
        let fields = self.check_signed(params)?;
        self.check_seller(&fields, false)?;
        order_id(required(|key| fields.get(key).copied(), "out_trade_no")?)
    }

    async fn query(&self, order: OrderId) -> Result<Option<Trade>, GatewayError> {
        let asked = json!({ "out_trade_no": order });
        match self.call("alipay.trade.query", order, &asked).await {
            Ok(response) => Ok(Some(read_trade(
                |key| response.get(key).and_then(Value::as_str),
                "send_pay_date",
            )?)),
            Err(GatewayError::Refused { code, .. }) if code == TRADE_NOT_EXIST => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn close(&self, order: OrderId) -> Result<(), GatewayError> {
        let asked = json!({ "out_trade_no": order });
        match self.call("alipay.trade.close", order, &asked).await {
            Ok(_) => Ok(()),
            Err(GatewayError::Refused { code, .. }) if code == TRADE_NOT_EXIST => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn refund(&self, order: OrderId, amount: Money) -> Result<(), GatewayError> {
        let asked = json!({
            "out_trade_no": order,
            "refund_amount": amount.to_string(),
            "out_request_no": format!("refund-{order}"),
        });
        self.call("alipay.trade.refund", order, &asked).await?;
        Ok(())
    }
}

/// The `biz_content` of a pay request, its fields in the order they are written.
#[derive(Serialize)]
struct PayContent<'a> {
    /// Serialized as the decimal string, as Alipay's `out_trade_no` is a string.
    out_trade_no: OrderId,
    /// Yuan with two decimals, written from cents.
    total_amount: String,
    subject: &'a str,
    product_code: &'a str,
    time_expire: String,
}

/// The wall clock, for a request's `timestamp`: Alipay compares it with its own clock, so a
/// test's manual clock has no say in it.
fn now() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// The answer `text` to a call of `method` about `order`, verified by [`verified_response`],
/// then checked: it names no other order (and a success names ours), and its `code` is a
/// success, else it is the gateway's refusal.
fn read_answer(
    text: &str,
    method: &str,
    order: OrderId,
    key: &AlipayPublicKey,
) -> Result<Map<String, Value>, GatewayError> {
    let response_key = format!("{}_response", method.replace('.', "_"));
    let response = verified_response(text, &response_key, key)?;
    let field = |key: &str| response.get(key).and_then(Value::as_str).unwrap_or("");
    let code = field("code");
    if code.is_empty() {
        return Err(Rejected::Malformed("the answer has no code".to_owned()).into());
    }
    let named = field("out_trade_no");
    let success = code == SUCCESS;
    if (success && named.is_empty()) || (!named.is_empty() && named != order.to_string()) {
        let why = "the answer is not about the order asked about";
        return Err(Rejected::Malformed(why.to_owned()).into());
    }
    if !success {
        let either = |first: &'static str, second: &'static str| {
            let text = Some(field(first)).filter(|t| !t.is_empty());
            at_most(text.unwrap_or(field(second)), MAX_ERROR_CHARS).to_owned()
        };
        return Err(GatewayError::Refused {
            code: either("sub_code", "code"),
            message: either("sub_msg", "msg"),
        });
    }
    Ok(response)
}

/// The `*_response` object of a synchronous answer (`{"<response_key>": {…}, "sign": "…"}`),
/// parsed only after its signature verified over its raw text exactly as sent. An answer that
/// has only an `error_response` is held to the same rule. Not JSON, or no response object:
/// [`GatewayError::Unreachable`]; unsigned or a bad signature: [`GatewayError::Untrusted`].
fn verified_response(
    text: &str,
    response_key: &str,
    key: &AlipayPublicKey,
) -> Result<Map<String, Value>, GatewayError> {
    let envelope: BTreeMap<String, &RawValue> = serde_json::from_str(text)
        .map_err(|e| GatewayError::Unreachable(format!("the answer is not a JSON object: {e}")))?;
    let raw = envelope
        .get(response_key)
        .or_else(|| envelope.get("error_response"))
        .ok_or_else(|| GatewayError::Unreachable(format!("the answer has no {response_key}")))?
        .get();
    let sign = match envelope.get("sign") {
        Some(sign) => serde_json::from_str::<String>(sign.get())
            .map_err(|_| Rejected::Malformed("sign is not a string".to_owned()))?,
        None => String::new(),
    };
    if sign.is_empty() {
        return Err(Rejected::Malformed(unsigned(raw)).into());
    }
    key.verify(raw, &sign).map_err(Rejected::from)?;
    serde_json::from_str(raw)
        .map_err(|_| Rejected::Malformed("the response is not an object".to_owned()).into())
}

/// Why an unsigned answer is refused, with the codes it carries: an unsigned answer is often
/// the gateway's word about our own configuration (an unknown app id, say).
fn unsigned(raw: &str) -> String {
    let response: Map<String, Value> = serde_json::from_str(raw).unwrap_or_default();
    let field = |key: &str| response.get(key).and_then(Value::as_str).unwrap_or("");
    format!(
        "the answer is not signed (code {:.32}, sub_code {:.64})",
        field("code"),
        field("sub_code")
    )
}

/// A trade from verified fields, whatever carries them: a notification's parameters or a
/// query's answer. `paid_at` names the field of the payment time, which may be absent.
fn read_trade<'a>(
    field: impl Fn(&str) -> Option<&'a str> + Copy,
    paid_at: &str,
) -> Result<Trade, Rejected> {
    let total_amount = required(field, "total_amount")?;
    let trade_status = required(field, "trade_status")?;
    let paid_at = match field(paid_at).filter(|text| !text.is_empty()) {
        Some(text) => Some(beijing::parse(text).ok_or_else(|| malformed(paid_at))?),
        None => None,
    };
    Ok(Trade {
        order: order_id(required(field, "out_trade_no")?)?,
        trade_no: bounded_id("trade_no", required(field, "trade_no")?)?,
        total: parse_yuan(total_amount).ok_or_else(|| malformed("total_amount"))?,
        status: TradeStatus::parse(trade_status).ok_or_else(|| malformed("trade_status"))?,
        paid_at,
    })
}

/// A field that must be present and not empty.
fn required<'a>(field: impl Fn(&str) -> Option<&'a str>, key: &str) -> Result<&'a str, Rejected> {
    field(key)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| Rejected::Malformed(format!("{key} is missing")))
}

/// Our order id, as `out_trade_no` carries it: decimal digits only, no sign.
fn order_id(text: &str) -> Result<OrderId, Rejected> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let id = text.parse().ok().filter(|_| digits);
    id.map(OrderId).ok_or_else(|| malformed("out_trade_no"))
}

/// An identifier of Alipay's, bounded by [`MAX_ID_BYTES`] since it is stored.
fn bounded_id(key: &str, text: &str) -> Result<String, Rejected> {
    if text.len() > MAX_ID_BYTES {
        return Err(Rejected::Malformed(format!(
            "{key} is longer than {MAX_ID_BYTES} bytes"
        )));
    }
    Ok(text.to_owned())
}

fn malformed(key: &str) -> Rejected {
    Rejected::Malformed(format!("{key} is not in Alipay's format"))
}

/// `text` cut to its first `chars` characters.
fn at_most(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(end, _)| &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    use percent_encoding::percent_decode_str;
    use std::sync::{Arc, Mutex};

    const APP_KEY: &str = include_str!("testdata/app_key_pkcs8.pem");
    const APP_PUBLIC_KEY: &str = include_str!("testdata/app_public_key.pem");
    const ALIPAY_KEY: &str = include_str!("testdata/alipay_key_pkcs1.pem");
    const ALIPAY_PUBLIC_KEY: &str = include_str!("testdata/alipay_public_key.pem");
    const VECTORS: &str = include_str!("testdata/vectors.json");

    const APP_ID: &str = "2021000000000001";
    const SELLER_ID: &str = "2088102177649450";
    const ORDER: OrderId = OrderId(7_142_835_012_345_678_901);
    const SUBJECT: &str = "秒杀 iPhone 15 & 充电器 = 1+1/2 *~%";
    const QUERY_KEY: &str = "alipay_trade_query_response";

    fn vectors() -> Value {
        serde_json::from_str(VECTORS).unwrap()
    }

    fn settings(app_id: &str, seller_id: Option<&str>, gateway_url: &str) -> AlipaySettings {
        AlipaySettings {
            provider_name: "alipay",
            app_id: app_id.to_owned(),
            app_key: AppKey::parse(APP_KEY).unwrap(),
            alipay_public_key: AlipayPublicKey::parse(ALIPAY_PUBLIC_KEY).unwrap(),
            gateway_url: gateway_url.to_owned(),
            seller_id: seller_id.map(str::to_owned),
            notify_url: "https://shop.example/pay/alipay/notify".to_owned(),
            return_url: "https://shop.example/pay/alipay/return".to_owned(),
            reached_base: None,
        }
    }

    fn client_with(app_id: &str, seller_id: Option<&str>, gateway_url: &str) -> AlipayClient {
        AlipayClient::new(settings(app_id, seller_id, gateway_url)).unwrap()
    }

    fn client() -> AlipayClient {
        client_with(APP_ID, Some(SELLER_ID), PRODUCTION_GATEWAY)
    }

    fn at(beijing_time: &str) -> Millis {
        beijing::parse(beijing_time).unwrap()
    }

    fn request(channel: Channel) -> PayRequest<'static> {
        PayRequest {
            order: ORDER,
            subject: SUBJECT,
            total: Money::from_cents(599_900).unwrap(),
            expires_at: at("2026-11-24 08:15:00"),
            channel,
            reached_at: None,
        }
    }

    fn get<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn set(params: &mut Vec<(String, String)>, key: &str, value: &str) {
        params.retain(|(k, _)| k != key);
        params.push((key.to_owned(), value.to_owned()));
    }

    fn borrowed(params: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
        params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// A query string or form body back into its pairs.
    fn decode_form(text: &str) -> Vec<(String, String)> {
        let decode = |s: &str| {
            let s = s.replace('+', " ");
            percent_decode_str(&s).decode_utf8().unwrap().into_owned()
        };
        text.split('&')
            .map(|pair| pair.split_once('=').unwrap())
            .map(|(k, v)| (decode(k), decode(v)))
            .collect()
    }

    /// The notification Alipay's SDK signed, as its form parameters.
    fn notification() -> Vec<(String, String)> {
        let pairs = vectors()["notification"]["params"].clone();
        serde_json::from_value(pairs).unwrap()
    }

    /// `params` signed again with the test key that plays Alipay: a notification Alipay really
    /// sent, with the fields a test changed.
    fn signed_by_alipay(mut params: Vec<(String, String)>) -> Vec<(String, String)> {
        params.retain(|(k, _)| k != "sign");
        let message = string_to_verify(borrowed(&params));
        let sign = AppKey::parse(ALIPAY_KEY).unwrap().sign(&message).unwrap();
        params.push(("sign".to_owned(), sign));
        params
    }

    /// A synchronous answer to `method` signed with the test key that plays Alipay.
    fn answer(method: &str, response: &Value) -> String {
        let text = response.to_string();
        let sign = AppKey::parse(ALIPAY_KEY).unwrap().sign(&text).unwrap();
        let key = format!("{}_response", method.replace('.', "_"));
        format!(r#"{{"{key}":{text},"sign":"{sign}"}}"#)
    }

    fn answer_text(name: &str) -> String {
        vectors()["answers"][name]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn alipay_public_key() -> AlipayPublicKey {
        AlipayPublicKey::parse(ALIPAY_PUBLIC_KEY).unwrap()
    }

    fn paid_trade() -> Trade {
        Trade {
            order: ORDER,
            trade_no: "2026112422001446880501234567".to_owned(),
            total: Money::from_cents(599_900).unwrap(),
            status: TradeStatus::Success,
            paid_at: Some(at("2026-11-24 08:00:08")),
        }
    }

    #[test]
    fn the_wap_pay_url_is_the_sdks_for_the_same_order() {
        let url = client()
            .pay_url_at(&request(Channel::Wap), at("2026-11-24 08:00:01"))
            .unwrap();
        let query = vectors()["wap_request"]["query"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(url, format!("{PRODUCTION_GATEWAY}?{query}"));
    }

    #[test]
    fn every_pay_url_verifies_with_the_apps_public_key_and_carries_the_order() {
        let app_public = AlipayPublicKey::parse(APP_PUBLIC_KEY).unwrap();
        for (channel, method, product_code) in [
            (
                Channel::Page,
                "alipay.trade.page.pay",
                "FAST_INSTANT_TRADE_PAY",
            ),
            (Channel::Wap, "alipay.trade.wap.pay", "QUICK_WAP_WAY"),
        ] {
            let url = client().pay_url(&request(channel)).unwrap();
            let query = url.strip_prefix(&format!("{PRODUCTION_GATEWAY}?")).unwrap();
            let params = decode_form(query);
            let sign = get(&params, "sign").unwrap();
            app_public
                .verify(&string_to_sign(borrowed(&params)), sign)
                .unwrap();
            assert_eq!(get(&params, "method"), Some(method));
            assert_eq!(get(&params, "app_id"), Some(APP_ID));
            assert_eq!(get(&params, "format"), Some("JSON"));
            assert_eq!(get(&params, "sign_type"), Some("RSA2"));
            let notify_url = get(&params, "notify_url").unwrap();
            assert_eq!(notify_url, "https://shop.example/pay/alipay/notify");
            let biz: Value = serde_json::from_str(get(&params, "biz_content").unwrap()).unwrap();
            assert_eq!(biz["out_trade_no"], "7142835012345678901");
            assert_eq!(biz["total_amount"], "5999.00");
            assert_eq!(biz["time_expire"], "2026-11-24 08:15:00");
            assert_eq!(biz["product_code"], product_code);
            assert_eq!(biz["subject"], SUBJECT);
        }
    }

    #[test]
    fn a_gateway_with_a_query_keeps_it_and_a_long_subject_is_cut_to_alipays_limit() {
        let gateway = "http://127.0.0.1:8080/sandbox/gateway.do?env=demo";
        let client = client_with(APP_ID, None, gateway);
        let subject = "秒".repeat(MAX_SUBJECT_CHARS + 10);
        let request = PayRequest {
            subject: &subject,
            ..request(Channel::Page)
        };
        let url = client.pay_url(&request).unwrap();
        let query = url.strip_prefix(&format!("{gateway}&")).unwrap();
        let params = decode_form(query);
        let biz: Value = serde_json::from_str(get(&params, "biz_content").unwrap()).unwrap();
        let sent = biz["subject"].as_str().unwrap();
        assert_eq!(sent.chars().count(), MAX_SUBJECT_CHARS);
        assert!(subject.starts_with(sent));
    }

    #[test]
    fn the_notification_the_sdk_signed_verifies_into_its_trade() {
        for seller in [Some(SELLER_ID), None] {
            let client = client_with(APP_ID, seller, PRODUCTION_GATEWAY);
            let notification = client.verify_notification(&notification()).unwrap();
            assert_eq!(notification.trade, paid_trade());
            assert_eq!(notification.notify_id, "2026112400222080007084680510527799");
        }
    }

    #[test]
    fn a_forged_or_altered_notification_is_refused() {
        let client = client();
        let mut cheaper = notification();
        set(&mut cheaper, "total_amount", "0.01");
        let mut forged = notification();
        forged.retain(|(k, _)| k != "sign");
        let message = string_to_verify(borrowed(&forged));
        let app_sign = AppKey::parse(APP_KEY).unwrap().sign(&message).unwrap();
        forged.push(("sign".to_owned(), app_sign));
        for params in [cheaper, forged] {
            let result = client.verify_notification(&params);
            assert!(matches!(result, Err(Rejected::Signature(_))), "{result:?}");
        }

        let mut unsigned = notification();
        unsigned.retain(|(k, _)| k != "sign");
        let mut twice = notification();
        twice.push(("sign".to_owned(), "AAAA".to_owned()));
        for params in [unsigned, twice] {
            let result = client.verify_notification(&params);
            assert!(matches!(result, Err(Rejected::Malformed(_))), "{result:?}");
        }
    }

    #[test]
    fn alipays_word_for_another_app_or_seller_is_refused() {
        let client = client();
        let mut other_app = notification();
        set(&mut other_app, "app_id", "2021000000000002");
        let result = client.verify_notification(&signed_by_alipay(other_app));
        assert!(matches!(result, Err(Rejected::AppId)), "{result:?}");

        let mut other_seller = notification();
        set(&mut other_seller, "seller_id", "2088000000000000");
        let mut no_seller = notification();
        no_seller.retain(|(k, _)| k != "seller_id");
        for params in [other_seller, no_seller] {
            let params = signed_by_alipay(params);
            let result = client.verify_notification(&params);
            assert!(matches!(result, Err(Rejected::SellerId)), "{result:?}");
            let unconfigured = client_with(APP_ID, None, PRODUCTION_GATEWAY);
            assert!(unconfigured.verify_notification(&params).is_ok());
        }

        let ours_configured_elsewhere = client_with("2021000000000002", None, PRODUCTION_GATEWAY);
        let result = ours_configured_elsewhere.verify_notification(&notification());
        assert!(matches!(result, Err(Rejected::AppId)), "{result:?}");
    }

    #[test]
    fn signed_fields_out_of_alipays_format_are_refused() {
        let client = client();
        let long_id = "9".repeat(MAX_ID_BYTES + 1);
        for (key, value) in [
            ("out_trade_no", "-1"),
            ("out_trade_no", "+7142835012345678901"),
            ("out_trade_no", "99999999999999999999"),
            ("out_trade_no", ""),
            ("total_amount", "5999"),
            ("total_amount", "-5999.00"),
            ("trade_status", "PAID"),
            ("gmt_payment", "2026-11-24T08:00:08"),
            ("trade_no", &long_id),
            ("notify_id", &long_id),
            ("notify_id", ""),
        ] {
            let mut params = notification();
            set(&mut params, key, value);
            let result = client.verify_notification(&signed_by_alipay(params));
            assert!(
                matches!(result, Err(Rejected::Malformed(_))),
                "{key}={value:?}: {result:?}"
            );
        }
    }

    #[test]
    fn unpaid_statuses_are_reported_as_they_are() {
        let client = client();
        for status in [TradeStatus::WaitBuyerPay, TradeStatus::Closed] {
            let mut params = notification();
            set(&mut params, "trade_status", status.as_str());
            params.retain(|(k, _)| k != "gmt_payment");
            let trade = client
                .verify_notification(&signed_by_alipay(params))
                .unwrap()
                .trade;
            assert_eq!(trade.status, status);
            assert_eq!(trade.paid_at, None);
        }
    }

    #[test]
    fn a_return_names_its_order_once_verified() {
        let client = client();
        let mut params: Vec<(String, String)> = [
            ("charset", "utf-8"),
            ("out_trade_no", "7142835012345678901"),
            ("method", "alipay.trade.page.pay.return"),
            ("total_amount", "5999.00"),
            ("trade_no", "2026112422001446880501234567"),
            ("auth_app_id", APP_ID),
            ("version", "1.0"),
            ("app_id", APP_ID),
            ("sign_type", "RSA2"),
            ("timestamp", "2026-11-24 08:00:09"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let without_seller = signed_by_alipay(params.clone());
        assert_eq!(client.verify_return(&without_seller).unwrap(), ORDER);
        set(&mut params, "seller_id", SELLER_ID);
        assert_eq!(
            client
                .verify_return(&signed_by_alipay(params.clone()))
                .unwrap(),
            ORDER
        );

        let mut other_seller = params.clone();
        set(&mut other_seller, "seller_id", "2088000000000000");
        let result = client.verify_return(&signed_by_alipay(other_seller));
        assert!(matches!(result, Err(Rejected::SellerId)), "{result:?}");
        let mut other_app = params.clone();
        set(&mut other_app, "app_id", "2021000000000002");
        let result = client.verify_return(&signed_by_alipay(other_app));
        assert!(matches!(result, Err(Rejected::AppId)), "{result:?}");
        let mut altered = signed_by_alipay(params);
        set(&mut altered, "out_trade_no", "7142835012345678902");
        let result = client.verify_return(&altered);
        assert!(matches!(result, Err(Rejected::Signature(_))), "{result:?}");
    }

    #[test]
    fn the_sdks_synchronous_answer_verifies_and_reads_as_the_paid_trade() {
        let text = answer_text("paid");
        let response = verified_response(&text, QUERY_KEY, &alipay_public_key()).unwrap();
        let signed: Value =
            serde_json::from_str(vectors()["answers"]["paid"]["response"].as_str().unwrap())
                .unwrap();
        assert_eq!(Value::Object(response), signed);

        let response =
            read_answer(&text, "alipay.trade.query", ORDER, &alipay_public_key()).unwrap();
        let trade = read_trade(
            |key| response.get(key).and_then(Value::as_str),
            "send_pay_date",
        );
        assert_eq!(trade.unwrap(), paid_trade());
    }

    #[test]
    fn a_one_byte_change_inside_the_response_object_is_refused() {
        let text = answer_text("paid");
        let key = alipay_public_key();
        let response = vectors()["answers"]["paid"]["response"]
            .as_str()
            .unwrap()
            .to_owned();
        let start = text.find(&response).unwrap();
        let mut changed = 0;
        for at in start..start + response.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[at] = match bytes[at] {
                b'0'..=b'8' | b'a'..=b'y' | b'A'..=b'Y' => bytes[at] + 1,
                b'9' | b'z' | b'Z' => bytes[at] - 1,
                _ => continue,
            };
            let altered = String::from_utf8(bytes).unwrap();
            let result = verified_response(&altered, QUERY_KEY, &key);
            assert!(
                matches!(result, Err(GatewayError::Untrusted(Rejected::Signature(_)))),
                "a change at byte {at} was not refused: {result:?}"
            );
            changed += 1;
        }
        assert!(changed > 300, "only {changed} bytes were changed");

        let spaced_inside = text.replacen(r#""code":"#, r#""code": "#, 1);
        let result = verified_response(&spaced_inside, QUERY_KEY, &key);
        assert!(matches!(
            result,
            Err(GatewayError::Untrusted(Rejected::Signature(_)))
        ));
        let spaced_outside = text.replacen(r#","sign":"#, r#" , "sign" : "#, 1);
        assert!(verified_response(&spaced_outside, QUERY_KEY, &key).is_ok());
    }

    #[test]
    fn unsigned_and_foreign_answers_are_not_trusted_and_non_protocol_ones_unreachable() {
        let key = alipay_public_key();
        for text in ["<html>502</html>", "[1]", r#"{"sign":"AAAA"}"#, ""] {
            let result = verified_response(text, QUERY_KEY, &key);
            assert!(
                matches!(result, Err(GatewayError::Unreachable(_))),
                "{text}: {result:?}"
            );
        }

        let paid = answer_text("paid");
        let unsigned = &paid[..paid.find(r#","sign":"#).unwrap()];
        let result = verified_response(&format!("{unsigned}}}"), QUERY_KEY, &key);
        assert!(matches!(
            result,
            Err(GatewayError::Untrusted(Rejected::Malformed(_)))
        ));

        let error = r#"{"error_response":{"code":"40002","msg":"Invalid Arguments","sub_code":"isv.invalid-app-id","sub_msg":"无效的AppID参数"},"sign":""}"#;
        match verified_response(error, QUERY_KEY, &key) {
            Err(GatewayError::Untrusted(Rejected::Malformed(why))) => {
                assert!(why.contains("isv.invalid-app-id"), "{why}");
            }
            other => panic!("an unsigned error answer: {other:?}"),
        }

        let response = vectors()["answers"]["paid"]["response"]
            .as_str()
            .unwrap()
            .to_owned();
        let app_sign = AppKey::parse(APP_KEY).unwrap().sign(&response).unwrap();
        let self_signed = format!(r#"{{"{QUERY_KEY}":{response},"sign":"{app_sign}"}}"#);
        let result = verified_response(&self_signed, QUERY_KEY, &key);
        assert!(matches!(
            result,
            Err(GatewayError::Untrusted(Rejected::Signature(_)))
        ));

        let close_answer = verified_response(&paid, "alipay_trade_close_response", &key);
        assert!(matches!(close_answer, Err(GatewayError::Unreachable(_))));
    }

    #[test]
    fn an_answer_about_another_order_is_not_trusted() {
        let key = alipay_public_key();
        let paid = answer_text("paid");
        let result = read_answer(&paid, "alipay.trade.query", OrderId(1), &key);
        assert!(matches!(
            result,
            Err(GatewayError::Untrusted(Rejected::Malformed(_)))
        ));

        let nameless = answer(
            "alipay.trade.close",
            &json!({"code": "10000", "msg": "Success"}),
        );
        let result = read_answer(&nameless, "alipay.trade.close", ORDER, &key);
        assert!(matches!(
            result,
            Err(GatewayError::Untrusted(Rejected::Malformed(_)))
        ));

        let other_order = answer(
            "alipay.trade.query",
            &json!({"code": "40004", "sub_code": TRADE_NOT_EXIST, "out_trade_no": "1"}),
        );
        let result = read_answer(&other_order, "alipay.trade.query", ORDER, &key);
        assert!(matches!(
            result,
            Err(GatewayError::Untrusted(Rejected::Malformed(_)))
        ));
    }

    #[test]
    fn the_sdks_trade_not_exist_answer_is_the_gateways_refusal() {
        let text = answer_text("trade_not_exist");
        let result = read_answer(&text, "alipay.trade.query", ORDER, &alipay_public_key());
        match result {
            Err(GatewayError::Refused { code, message }) => {
                assert_eq!(code, TRADE_NOT_EXIST);
                assert_eq!(message, "交易不存在");
            }
            other => panic!("{other:?}"),
        }
    }

    /// What the fake gateway last received: the `biz_content` of a verified request.
    type Received = Arc<Mutex<Option<Value>>>;

    /// A gateway on a local port that checks each request's signature with the app's public
    /// key and answers each method with the given status and text.
    async fn gateway(answers: Vec<(&'static str, StatusCode, String)>) -> (String, Received) {
        let received = Received::default();
        let app_public = AlipayPublicKey::parse(APP_PUBLIC_KEY).unwrap();
        let seen = received.clone();
        let handler = move |body: String| async move {
            let params = decode_form(&body);
            let message = string_to_sign(borrowed(&params));
            let signed = app_public.verify(&message, get(&params, "sign").unwrap_or(""));
            let callback = get(&params, "notify_url").or(get(&params, "return_url"));
            if signed.is_err() || callback.is_some() {
                return (StatusCode::BAD_REQUEST, String::new());
            }
            let biz = get(&params, "biz_content").and_then(|b| serde_json::from_str(b).ok());
            *seen.lock().unwrap() = biz;
            let method = get(&params, "method").unwrap_or("");
            let known = answers.iter().find(|(m, _, _)| *m == method);
            known.map_or(
                (StatusCode::NOT_FOUND, String::new()),
                |(_, status, text)| (*status, text.clone()),
            )
        };
        let router = Router::new().route("/gateway.do", post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        (format!("http://{address}/gateway.do"), received)
    }

    #[tokio::test]
    async fn query_close_and_refund_go_to_the_gateway_signed_and_read_its_signed_answers() {
        let close = answer(
            "alipay.trade.close",
            &json!({"code": "10000", "msg": "Success", "out_trade_no": "7142835012345678901",
                    "trade_no": "2026112422001446880501234567"}),
        );
        let refund = answer(
            "alipay.trade.refund",
            &json!({"code": "10000", "msg": "Success", "fund_change": "Y",
                    "out_trade_no": "7142835012345678901", "refund_fee": "5999.00",
                    "trade_no": "2026112422001446880501234567"}),
        );
        let (url, received) = gateway(vec![
            ("alipay.trade.query", StatusCode::OK, answer_text("paid")),
            ("alipay.trade.close", StatusCode::OK, close),
            ("alipay.trade.refund", StatusCode::OK, refund),
        ])
        .await;
        let client = client_with(APP_ID, None, &url);

        assert_eq!(client.query(ORDER).await.unwrap(), Some(paid_trade()));
        let asked = received.lock().unwrap().take().unwrap();
        assert_eq!(asked, json!({"out_trade_no": "7142835012345678901"}));
        client.close(ORDER).await.unwrap();
        let amount = Money::from_cents(599_900).unwrap();
        client.refund(ORDER, amount).await.unwrap();
        let asked = received.lock().unwrap().take().unwrap();
        assert_eq!(asked["out_request_no"], "refund-7142835012345678901");
        assert_eq!(asked["refund_amount"], "5999.00");
        assert_eq!(asked["out_trade_no"], "7142835012345678901");
    }

    #[tokio::test]
    async fn a_trade_alipay_does_not_know_is_none_closed_and_not_refunded() {
        let not_exist = |method| {
            answer(
                method,
                &json!({"code": "40004", "msg": "Business Failed",
                        "sub_code": TRADE_NOT_EXIST, "sub_msg": "交易不存在"}),
            )
        };
        let (url, _) = gateway(vec![
            (
                "alipay.trade.query",
                StatusCode::OK,
                answer_text("trade_not_exist"),
            ),
            (
                "alipay.trade.close",
                StatusCode::OK,
                not_exist("alipay.trade.close"),
            ),
            (
                "alipay.trade.refund",
                StatusCode::OK,
                not_exist("alipay.trade.refund"),
            ),
        ])
        .await;
        let client = client_with(APP_ID, None, &url);
        assert_eq!(client.query(ORDER).await.unwrap(), None);
        client.close(ORDER).await.unwrap();
        let amount = Money::from_cents(599_900).unwrap();
        match client.refund(ORDER, amount).await {
            Err(GatewayError::Refused { code, .. }) => assert_eq!(code, TRADE_NOT_EXIST),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_gateway_that_is_down_or_off_protocol_is_unreachable() {
        let (url, _) = gateway(vec![
            (
                "alipay.trade.query",
                StatusCode::BAD_GATEWAY,
                answer_text("paid"),
            ),
            (
                "alipay.trade.close",
                StatusCode::OK,
                "<html>busy</html>".to_owned(),
            ),
            (
                "alipay.trade.refund",
                StatusCode::OK,
                " ".repeat(MAX_ANSWER_BYTES + 1),
            ),
        ])
        .await;
        let client = client_with(APP_ID, None, &url);
        let amount = Money::from_cents(599_900).unwrap();
        let results = [
            client.query(ORDER).await.map(drop),
            client.close(ORDER).await,
            client.refund(ORDER, amount).await,
        ];
        for result in results {
            assert!(
                matches!(result, Err(GatewayError::Unreachable(_))),
                "{result:?}"
            );
        }

        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = closed.local_addr().unwrap();
        drop(closed);
        let nobody = client_with(APP_ID, None, &format!("http://{address}/gateway.do"));
        let result = nobody.query(ORDER).await;
        assert!(
            matches!(result, Err(GatewayError::Unreachable(_))),
            "{result:?}"
        );
    }

    #[test]
    fn a_gateway_url_that_is_not_a_url_is_refused_at_start() {
        let result = AlipayClient::new(settings(APP_ID, None, "openapi.alipay.com/gateway.do"));
        assert!(result.is_err());
    }

    mod properties {
        use super::*;
        use crate::domain::edits::edit;
        use proptest::prelude::*;

        /// A form body as Alipay posts it.
        fn encoded(params: &[(String, String)]) -> Vec<u8> {
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(params)
                .finish()
                .into_bytes()
        }

        /// A form body's pairs, as the notification route reads them.
        fn decoded(body: &[u8]) -> Vec<(String, String)> {
            form_urlencoded::parse(body).into_owned().collect()
        }

        /// Keys a notification has, and a few more, to make forms that look like one.
        const KEYS: [&str; 10] = [
            "app_id",
            "sign",
            "sign_type",
            "out_trade_no",
            "total_amount",
            "trade_status",
            "notify_id",
            "seller_id",
            "gmt_payment",
            "trade_no",
        ];

        fn form() -> impl Strategy<Value = Vec<(String, String)>> {
            let key = prop_oneof![
                prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
                ".{0,12}"
            ];
            prop::collection::vec((key, ".{0,40}"), 0..12)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// A form made up from nothing never pays an order, nor does one with the known
            /// notification's signature pasted in.
            #[test]
            fn a_made_up_form_never_verifies(mut params in form(), borrow_sign in any::<bool>()) {
                if borrow_sign {
                    params.retain(|(k, _)| k != "sign");
                    let sign = get(&notification(), "sign").unwrap().to_owned();
                    params.push(("sign".to_owned(), sign));
                }
                prop_assert!(client().verify_notification(&params).is_err());
                prop_assert!(client().verify_return(&params).is_err());
            }

            /// The notification Alipay signed, changed in any character of any key or value,
            /// `sign` and `sign_type` included, is refused.
            #[test]
            fn a_signed_notification_changed_anywhere_is_refused(
                pair in any::<prop::sample::Index>(),
                in_key in any::<bool>(),
                edit in edit(),
            ) {
                let mut params = notification();
                let at = pair.index(params.len());
                let (key, value) = &mut params[at];
                let target = if in_key { key } else { value };
                if let Some(changed) = edit.apply(target) {
                    *target = changed;
                    let result = client().verify_notification(&params);
                    prop_assert!(result.is_err(), "{:?} verified", params);
                }
            }

            /// The body Alipay posts, changed in any byte, is read into other pairs, which are
            /// refused, or into the same pairs (`+` for `%20`, `%2f` for `%2F`), which pay.
            #[test]
            fn a_signed_body_changed_in_any_byte_pays_only_if_it_reads_the_same(
                at in any::<prop::sample::Index>(),
                byte in any::<u8>(),
            ) {
                let original = notification();
                let mut body = encoded(&original);
                let i = at.index(body.len());
                prop_assume!(body[i] != byte);
                body[i] = byte;
                let params = decoded(&body);
                let result = client().verify_notification(&params);
                prop_assert_eq!(result.is_ok(), params == original, "{:?}", params);
            }
        }

        #[test]
        fn the_signed_body_itself_pays() {
            let body = encoded(&notification());
            assert!(client().verify_notification(&decoded(&body)).is_ok());
        }

        #[test]
        fn a_sign_type_other_than_rsa2_is_refused_though_the_signature_holds() {
            let mut params = notification();
            set(&mut params, "sign_type", "RSA");
            let result = client().verify_notification(&params);
            assert!(matches!(result, Err(Rejected::Malformed(_))), "{result:?}");
        }
    }
}
