//! A payment gateway built into the binary that speaks Alipay's protocol, so anyone can try the
//! whole payment flow offline and the demo runs the very client that talks to Alipay.
//!
//! It takes the shop's signed page-pay or wap-pay request and shows a checkout page marked as
//! the sandbox (pay, or abandon); on payment it posts the signed asynchronous notification to
//! the request's `notify_url` (retried like Alipay's until the answer is `success`) and sends
//! the buyer back to `return_url` with signed parameters; it answers `alipay.trade.query`,
//! `.close` and `.refund` with signed JSON. It checks the shop's signatures with the app's
//! public key and signs as "Alipay" with a key of its own.
//!
//! Its trades live in memory, in the process serving the gateway: a deployment's sandbox
//! trades are those of the one process its `gateway_url` reaches, and end with it. Anyone who
//! can reach the checkout page can pay any open trade with no money: it is for trying the
//! flow, never for a shop that sells.
//!
//! `trades` is the trades' life, `protocol` the signatures both ways, `notify` the deliveries,
//! `checkout` the buyer's pages and `api` the synchronous calls. Its two handlers, [`gateway`]
//! at [`GATEWAY_PATH`] and [`decide`] at [`CHECKOUT_PATH`], are routed with the server's other
//! routes, the sandbox as their state; the gateway knows nothing of the server.

mod api;
mod checkout;
mod notify;
mod protocol;
#[cfg(test)]
mod tests;
mod trades;

pub use checkout::decide;

use crate::clock::SharedClock;
use crate::domain::{Millis, OrderId};
use crate::payment::alipay::sign::{AlipayPublicKey, AppKey};
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use trades::{SandboxTrade, TradeBook};

/// The sandbox app's id: any fixed value works, as the sandbox serves one app.
pub const SANDBOX_APP_ID: &str = "9021000000000001";

/// The sandbox's seller (`seller_id`), in the shape of an Alipay partner id.
pub const SANDBOX_SELLER_ID: &str = "2088000000000001";

/// Where the gateway listens, the sandbox's `gateway.do`: the `gateway_url` of the Alipay
/// client in sandbox mode is the server's public URL followed by this.
pub const GATEWAY_PATH: &str = "/sandbox/alipay/gateway.do";

/// The checkout page's form posts the buyer's choice to this prefix and the `out_trade_no`.
const CHECKOUT_PREFIX: &str = "/sandbox/alipay/checkout/";

/// The route of the checkout form's target: [`CHECKOUT_PREFIX`] and the `out_trade_no`.
pub const CHECKOUT_PATH: &str = "/sandbox/alipay/checkout/{out_trade_no}";

/// How many trades the sandbox holds: each is a few hundred bytes of memory that nobody else
/// bounds. When full, trades closed without payment are let go first; beyond that, a new
/// trade is refused with a 400 page.
const MAX_TRADES: usize = 100_000;

/// A fresh 2048-bit RSA private key as PKCS#8 PEM, for the sandbox's two ends (the app's key
/// and the gateway's own) when none is kept yet. Made with the `rsa` crate because `ring`
/// cannot generate RSA keys; the key is only generated here, and every signature with it is
/// made by [`AppKey`] (ring, constant-time), as `rsa`'s private-key operations are not
/// (RUSTSEC-2023-0071).
///
/// # Panics
///
/// When the operating system's random source fails, which leaves nothing safe to do.
pub fn generate_key_pem() -> String {
    use argon2::password_hash::rand_core::OsRng;
    use rsa::pkcs8::{EncodePrivateKey, LineEnding};
    let key = rsa::RsaPrivateKey::new(&mut OsRng, 2048)
        .expect("the operating system's random source failed");
    key.to_pkcs8_pem(LineEnding::LF)
        .expect("a generated RSA key encodes as PKCS#8")
        .to_string()
}

/// Who the sandbox is and whom it trusts.
#[derive(Debug)]
pub struct SandboxSettings {
    /// The one app it serves; requests for any other are refused.
    pub app_id: String,
    /// Its seller, written into every notification and return.
    pub seller_id: String,
    /// The app's public key: verifies the shop's requests.
    pub app_public_key: AlipayPublicKey,
    /// The gateway's own key: signs notifications, returns and answers as "Alipay".
    pub gateway_key: AppKey,
}

/// The sandbox gateway: its trades, its clock and its notifier.
pub struct Sandbox {
    /// Whom it serves and the keys it verifies and signs with, fixed at start.
    settings: SandboxSettings,
    /// Every "now" of the gateway (trade times, deadlines, signed timestamps): a test's manual
    /// clock moves a trade past its deadline without waiting.
    clock: SharedClock,
    /// The trades, bounded by [`MAX_TRADES`]; one lock, as each request touches one trade
    /// briefly and the sandbox takes no real load.
    book: Mutex<TradeBook>,
    /// Sends the signed notifications of paid trades to the shop in the background, with
    /// retries, as Alipay does.
    notifier: notify::Notifier,
}

/// Shows who the gateway is, not its trades.
impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// A gateway with no trades. `clock` decides every "now": trade times, deadlines and
    /// signed timestamps.
    pub fn new(settings: SandboxSettings, clock: SharedClock) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            settings,
            clock,
            book: Mutex::new(TradeBook::new(MAX_TRADES)),
            notifier: notify::Notifier::new()?,
        }))
    }

    /// The signed parameters of the notification that reports the trade's current state,
    /// exactly as they are (or would be) posted to the shop; `None` for an unknown trade.
    pub fn notification(&self, out_trade_no: OrderId) -> Option<Vec<(String, String)>> {
        let trade = self.book().get(out_trade_no, self.now())?.clone();
        protocol::notification(&self.settings, out_trade_no, &trade)
            .inspect_err(|e| tracing::error!("sandbox gateway: cannot sign: {e}"))
            .ok()
    }

    fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// The trades, locked. No change to a trade can panic halfway, so a lock poisoned by a
    /// panic elsewhere still guards whole trades and is used as it is.
    fn book(&self) -> MutexGuard<'_, TradeBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the shop about the trade's new state, when it gave a `notify_url`.
    fn notify(&self, out_trade_no: OrderId, trade: &SandboxTrade) {
        let Some(url) = &trade.opening.notify_url else {
            return;
        };
        match protocol::notification(&self.settings, out_trade_no, trade) {
            Ok(params) => self.notifier.send(url.clone(), params),
            Err(e) => tracing::error!("sandbox gateway: cannot sign a notification: {e}"),
        }
    }
}

/// [`GATEWAY_PATH`], GET and POST (pay pages and the synchronous API, told apart by `method`):
/// the parameters of the query and of a form body together, as Alipay's SDKs send some in
/// each; a pay method opens the checkout page, any other is an API call.
pub async fn gateway(
    State(sandbox): State<Arc<Sandbox>>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let mut params = protocol::parse_params(query.unwrap_or_default().as_bytes());
    params.extend(protocol::parse_params(&body));
    match protocol::param(&params, "method") {
        Some(checkout::PAGE_PAY | checkout::WAP_PAY) => checkout::open(&sandbox, &params),
        _ => api::answer(&sandbox, &params),
    }
}
