//! Wiring of the payment provider: Alipay with the shop's keys, or the same client against the
//! sandbox gateway this binary serves, with key pairs generated on first start and kept in the
//! database.

use crate::clock::SharedClock;
use crate::config::{AlipayConfig, Config, ProviderKind};
use crate::payment::PaymentProvider;
use crate::payment::alipay::client::{AlipayClient, AlipaySettings, PRODUCTION_GATEWAY};
use crate::payment::alipay::sign::{AlipayPublicKey, AppKey};
use crate::payment::sandbox::{self, Sandbox, SandboxSettings};
use crate::store::Store;
use anyhow::Context;
use std::sync::Arc;

/// Where the sandbox keeps the key pair it signs requests with as the shop.
pub(crate) const SANDBOX_APP_KEY: &str = "sandbox_app_key";
/// Where the sandbox keeps the key pair it signs with as the gateway.
pub(crate) const SANDBOX_GATEWAY_KEY: &str = "sandbox_gateway_key";

/// The configured provider, and the sandbox gateway when it is the one that takes the money.
pub(super) struct Payments {
    /// What the sale service asks for pay URLs and trusts notifications through; `None`
    /// refuses payments.
    pub provider: Option<Arc<dyn PaymentProvider>>,
    /// The built-in gateway, when it takes the money: the server serves its routes.
    pub sandbox: Option<Arc<Sandbox>>,
}

/// Reads and parses the keys the configuration only locates, as a start would, without
/// starting anything: for `seckill config check`.
pub fn check_payment_keys(config: &Config) -> anyhow::Result<()> {
    match config.payment.provider {
        Some(ProviderKind::Alipay) => shop_keys(&config.alipay).map(drop),
        None | Some(ProviderKind::Sandbox) => Ok(()),
    }
}

/// The shop's keys, each read (from the configuration or its file) and parsed once.
fn shop_keys(alipay: &AlipayConfig) -> anyhow::Result<(AppKey, AlipayPublicKey)> {
    let app_key =
        AppKey::parse(&alipay.private_key_source()?.read()?).context("alipay.private_key")?;
    let alipay_public_key = AlipayPublicKey::parse(&alipay.alipay_public_key_source()?.read()?)
        .context("alipay.alipay_public_key")?;
    Ok((app_key, alipay_public_key))
}

impl Payments {
    /// Builds the provider `config` names; without one, payments are refused, and the log
    /// says so.
    pub async fn build(
        config: &Config,
        store: &dyn Store,
        clock: SharedClock,
    ) -> anyhow::Result<Self> {
        let public_url = public_url(config);
        let reached_base = config.public_url.is_none().then(|| public_url.clone());
        match config.payment.provider {
            None => {
                tracing::warn!(
                    "payments are not configured: paying answers 503 payments_not_configured \
                     (set payment.provider = \"alipay\" with the shop's keys, or \"sandbox\")"
                );
                Ok(Self {
                    provider: None,
                    sandbox: None,
                })
            }
            Some(ProviderKind::Alipay) => {
                let alipay = &config.alipay;
                let (app_key, alipay_public_key) = shop_keys(alipay)?;
                let client = AlipayClient::new(AlipaySettings {
                    provider_name: "alipay",
                    app_id: alipay.app_id.clone().unwrap_or_default(),
                    app_key,
                    alipay_public_key,
                    gateway_url: alipay
                        .gateway_url
                        .clone()
                        .unwrap_or_else(|| PRODUCTION_GATEWAY.to_owned()),
                    seller_id: alipay.seller_id.clone(),
                    notify_url: format!("{public_url}/pay/alipay/notify"),
                    return_url: format!("{public_url}/pay/alipay/return"),
                    reached_base,
                })?;
                Ok(Self {
                    provider: Some(Arc::new(client)),
                    sandbox: None,
                })
            }
            Some(ProviderKind::Sandbox) => {
                let shop_key = AppKey::parse(&kept_key(store, SANDBOX_APP_KEY).await?)?;
                let shop_public_key = shop_key.public_key();
                let gateway_key = AppKey::parse(&kept_key(store, SANDBOX_GATEWAY_KEY).await?)?;
                let client = AlipayClient::new(AlipaySettings {
                    provider_name: "sandbox",
                    app_id: sandbox::SANDBOX_APP_ID.to_owned(),
                    alipay_public_key: gateway_key.public_key(),
                    app_key: shop_key,
                    gateway_url: format!("{public_url}{}", sandbox::GATEWAY_PATH),
                    seller_id: Some(sandbox::SANDBOX_SELLER_ID.to_owned()),
                    notify_url: format!("{public_url}/pay/alipay/notify"),
                    return_url: format!("{public_url}/pay/alipay/return"),
                    reached_base,
                })?;
                let gateway = Sandbox::new(
                    SandboxSettings {
                        app_id: sandbox::SANDBOX_APP_ID.to_owned(),
                        seller_id: sandbox::SANDBOX_SELLER_ID.to_owned(),
                        app_public_key: shop_public_key,
                        gateway_key,
                    },
                    clock,
                )?;
                tracing::info!(
                    gateway = %format!("{public_url}{}", sandbox::GATEWAY_PATH),
                    "payments go through the built-in sandbox gateway: no real money"
                );
                Ok(Self {
                    provider: Some(Arc::new(client)),
                    sandbox: Some(gateway),
                })
            }
        }
    }
}

/// The base of the URLs the provider and the buyer's browser come back to. Without a
/// configured public URL it names this server's listening address (`127.0.0.1` for every
/// address), and each pay URL names the address its buyer reached instead (`reached_base`).
fn public_url(config: &Config) -> String {
    match &config.public_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if config.http_addr.ip().is_unspecified() => {
            format!("http://127.0.0.1:{}", config.http_addr.port())
        }
        None => format!("http://{}", config.http_addr),
    }
}

/// A sandbox key pair kept in the database, generated the first time.
async fn kept_key(store: &dyn Store, name: &str) -> anyhow::Result<String> {
    if let Some(pem) = store.setting(name).await? {
        return Ok(pem);
    }
    let generated = tokio::task::spawn_blocking(sandbox::generate_key_pem).await?;
    Ok(store.setting_or_insert(name, &generated).await?)
}
