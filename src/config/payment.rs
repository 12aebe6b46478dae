//! Who takes the money: the provider, and the shop's Alipay app with its keys. The keys are
//! located here (inline or in a file, exactly one) but read and parsed where the provider is
//! built, once, by the payment layer's own key types, which this module may not name.

use super::Secret;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Who takes the money.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaymentConfig {
    /// `sandbox` (the gateway built into this binary: no real money) or `alipay`
    /// (`SECKILL_PAYMENT__PROVIDER`). Unset, `serve --demo` uses the sandbox and anything
    /// else refuses to take payments.
    pub provider: Option<ProviderKind>,
}

/// A payment provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Alipay's protocol against the gateway this binary serves itself.
    Sandbox,
    /// Alipay itself (or Alipay's own sandbox, through `alipay.gateway_url`).
    Alipay,
}

/// The shop's Alipay app, as Alipay's open platform console shows it. Each key is given
/// inline or as a file; a PEM file (PKCS#1 or PKCS#8) or the bare base64 the console shows.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlipayConfig {
    /// The app's id (`SECKILL_ALIPAY__APP_ID`).
    pub app_id: Option<String>,
    /// The app's private key, which signs every request (`SECKILL_ALIPAY__PRIVATE_KEY`).
    pub private_key: Option<Secret>,
    /// The same, from a file (`SECKILL_ALIPAY__PRIVATE_KEY_FILE`).
    pub private_key_file: Option<PathBuf>,
    /// Alipay's public key, which verifies notifications and answers
    /// (`SECKILL_ALIPAY__ALIPAY_PUBLIC_KEY`).
    pub alipay_public_key: Option<String>,
    /// The same, from a file (`SECKILL_ALIPAY__ALIPAY_PUBLIC_KEY_FILE`).
    pub alipay_public_key_file: Option<PathBuf>,
    /// Alipay's gateway (`SECKILL_ALIPAY__GATEWAY_URL`). Unset, production's
    /// (`https://openapi.alipay.com/gateway.do`); Alipay's own sandbox is
    /// `https://openapi-sandbox.dl.alipaydev.com/gateway.do`.
    pub gateway_url: Option<String>,
    /// The merchant's seller id (`SECKILL_ALIPAY__SELLER_ID`): when set, a notification paid
    /// to another seller is refused.
    pub seller_id: Option<String>,
}

/// Where a key is given: in the configuration itself, or in a file it names.
#[derive(Debug, Clone, Copy)]
pub enum KeySource<'a> {
    /// The key's text, inline.
    Inline(&'a str),
    /// A file holding the key, and the setting that names it (for messages).
    File(&'a Path, &'static str),
}

impl KeySource<'_> {
    /// The key's text: the inline value, or the file's contents, read now.
    pub fn read(self) -> anyhow::Result<String> {
        match self {
            Self::Inline(text) => Ok(text.to_owned()),
            Self::File(file, key) => std::fs::read_to_string(file)
                .with_context(|| format!("{key}: reading {}", file.display())),
        }
    }
}

impl AlipayConfig {
    /// Where the app's private key is given. Reads nothing: checking the configuration costs
    /// no I/O, and the key is read once, where the provider is built.
    pub fn private_key_source(&self) -> anyhow::Result<KeySource<'_>> {
        let inline = self.private_key.as_ref().map(Secret::expose);
        match (inline, &self.private_key_file) {
            (Some(key), None) => Ok(KeySource::Inline(key)),
            (None, Some(file)) => Ok(KeySource::File(file, "alipay.private_key_file")),
            _ => bail!("set exactly one of alipay.private_key and alipay.private_key_file"),
        }
    }

    /// Where Alipay's public key is given. Reads nothing, like
    /// [`private_key_source`](Self::private_key_source).
    pub fn alipay_public_key_source(&self) -> anyhow::Result<KeySource<'_>> {
        match (&self.alipay_public_key, &self.alipay_public_key_file) {
            (Some(key), None) => Ok(KeySource::Inline(key)),
            (None, Some(file)) => Ok(KeySource::File(file, "alipay.alipay_public_key_file")),
            _ => bail!(
                "set exactly one of alipay.alipay_public_key and alipay.alipay_public_key_file"
            ),
        }
    }
}
