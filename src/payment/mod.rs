//! The payment provider layer: how an order's money is asked for and how the provider's word
//! that it arrived is trusted. [`PaymentProvider`] is what the sale rules see; [`alipay`] is
//! its one implementation (Alipay's signed protocol), and [`sandbox`] a gateway built into the
//! binary that speaks the same protocol, so the demo runs the very client that talks to Alipay.
//!
//! Invariant: nothing here knows about stores or the sale's rules; it turns orders into signed
//! requests and signed answers and notifications into verified [`Trade`]s or an error.

pub mod alipay;
pub mod amount;
pub mod sandbox;

use crate::domain::{Millis, Money, OrderId};
use async_trait::async_trait;

/// Installs ring as the process's TLS crypto provider. reqwest is built without one, so every
/// `reqwest::Client` of the process (the Alipay client's, the load generator's) panics at
/// `build` until one is installed; ring is the one this crate already signs with. Calling it
/// again, or after another caller, is harmless.
pub fn install_crypto_provider() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}

/// Where the buyer pays: the provider's desktop page or its mobile-web flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// `alipay.trade.page.pay` with `FAST_INSTANT_TRADE_PAY`.
    #[default]
    Page,
    /// `alipay.trade.wap.pay` with `QUICK_WAP_WAY`.
    Wap,
}

impl Channel {
    /// The channel as a client names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Page => "page",
            Self::Wap => "wap",
        }
    }
}

/// What a pay URL asks the buyer to pay.
#[derive(Debug, Clone)]
pub struct PayRequest<'a> {
    /// Our order: the trade's `out_trade_no`.
    pub order: OrderId,
    /// What the buyer sees on the provider's page.
    pub subject: &'a str,
    pub total: Money,
    /// The order's payment deadline: the provider refuses payment after it (`time_expire`).
    pub expires_at: Millis,
    pub channel: Channel,
    /// The address of this server the buyer's connection came in on, when known: the pay
    /// URL's links back to the shop may name it (see `AlipaySettings::reached_base`).
    pub reached_at: Option<std::net::SocketAddr>,
}

/// Where a trade stands at the provider. Only [`TradeStatus::Success`] and
/// [`TradeStatus::Finished`] mean the money arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TradeStatus {
    /// Opened, not paid (`WAIT_BUYER_PAY`).
    WaitBuyerPay,
    /// Paid (`TRADE_SUCCESS`).
    Success,
    /// Paid and past its refund period (`TRADE_FINISHED`).
    Finished,
    /// Closed unpaid, or fully refunded (`TRADE_CLOSED`).
    Closed,
}

impl TradeStatus {
    /// Alipay's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaitBuyerPay => "WAIT_BUYER_PAY",
            Self::Success => "TRADE_SUCCESS",
            Self::Finished => "TRADE_FINISHED",
            Self::Closed => "TRADE_CLOSED",
        }
    }

    /// Reads Alipay's spelling; `None` for a status we do not know.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "WAIT_BUYER_PAY" => Self::WaitBuyerPay,
            "TRADE_SUCCESS" => Self::Success,
            "TRADE_FINISHED" => Self::Finished,
            "TRADE_CLOSED" => Self::Closed,
            _ => return None,
        })
    }

    /// Whether the buyer's money arrived.
    pub fn is_paid(self) -> bool {
        matches!(self, Self::Success | Self::Finished)
    }
}

/// A trade as the provider reported it, signature (and app id, seller id) already verified.
/// The caller still checks the order and the amount against its own records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trade {
    /// Our order (`out_trade_no`).
    pub order: OrderId,
    /// The provider's own trade number (`trade_no`).
    pub trade_no: String,
    /// What the provider says was asked for (`total_amount`), parsed exactly into cents.
    pub total: Money,
    pub status: TradeStatus,
    /// When the buyer paid (`gmt_payment`, Beijing time), when the provider says.
    pub paid_at: Option<Millis>,
}

/// A verified asynchronous notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub trade: Trade,
    /// The same for every retry of one notification (`notify_id`): the audit key.
    pub notify_id: String,
}

/// Why a notification, a return or an answer was not trusted. Each is logged and changes
/// nothing.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    /// Forged, altered, or signed with another key.
    #[error("signature: {0}")]
    Signature(#[from] alipay::sign::SignError),
    /// Signed by the provider, but for another merchant app.
    #[error("the app id is not ours")]
    AppId,
    /// Signed by the provider, but paid to another seller.
    #[error("the seller id is not ours")]
    SellerId,
    /// A field is missing or not in the provider's format.
    #[error("malformed: {0}")]
    Malformed(String),
}

/// Why a call to the provider's gateway failed. The caller tries again later; nothing is
/// assumed about the trade.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The gateway could not be reached or answered with something that is not its protocol.
    #[error("payment gateway unreachable: {0}")]
    Unreachable(String),
    /// The answer's signature did not verify: it is not the provider's word.
    #[error("payment gateway answer not trusted: {0}")]
    Untrusted(#[from] Rejected),
    /// The gateway refused the call (its `sub_code` and `sub_msg`).
    #[error("payment gateway refused: {code}: {message}")]
    Refused { code: String, message: String },
}

/// A payment provider: the sale rules ask it for pay URLs, trust its notifications only
/// through it, and ask it about, close and refund trades.
#[async_trait]
pub trait PaymentProvider: Send + Sync + 'static {
    /// The provider's name in the API (`sandbox` or `alipay`).
    fn name(&self) -> &'static str;

    /// A signed URL at which the buyer pays `request`.
    fn pay_url(&self, request: &PayRequest<'_>) -> anyhow::Result<String>;

    /// Verifies an asynchronous notification's form parameters: the signature, our app id and
    /// (when configured) our seller id. Any trade status is returned; the caller acts only on
    /// paid ones.
    fn verify_notification(&self, params: &[(String, String)]) -> Result<Notification, Rejected>;

    /// Verifies the parameters the buyer's browser brings back from the provider, and names
    /// the order. Never proof of payment: the notification is.
    fn verify_return(&self, params: &[(String, String)]) -> Result<OrderId, Rejected>;

    /// `alipay.trade.query`: the trade of `order`, or `None` when the buyer never opened one
    /// (`TRADE_NOT_EXIST`).
    async fn query(&self, order: OrderId) -> Result<Option<Trade>, GatewayError>;

    /// `alipay.trade.close`: no payment is taken for `order` after this. A trade that does not
    /// exist is already as good as closed, so that is success too.
    async fn close(&self, order: OrderId) -> Result<(), GatewayError>;

    /// `alipay.trade.refund` of the whole `amount` paid for `order`, with one fixed
    /// `out_request_no` per order, so retrying never refunds twice.
    async fn refund(&self, order: OrderId, amount: Money) -> Result<(), GatewayError>;
}
