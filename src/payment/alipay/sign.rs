//! RSA2 signing and verification as Alipay defines them, and the encoding of a signed pay URL.
//!
//! Signing uses `ring`, whose RSA private-key operations are constant-time: every pay URL is a
//! signature a shopper can trigger, and the `rsa` crate's are not (RUSTSEC-2023-0071). Keys
//! come as PEM or as the bare base64 body Alipay's key tool and console hand out; the public
//! key's SubjectPublicKeyInfo is unwrapped with `spki`, because ring verifies an RSA signature
//! against the PKCS#1 `RSAPublicKey` inside it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use ring::rand::SystemRandom;
use ring::rsa::KeyPair;
use ring::signature::{RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256, UnparsedPublicKey};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};
use spki::{ObjectIdentifier, SubjectPublicKeyInfoRef};

/// Why a key could not be loaded or a signature was not accepted. None of them carries key
/// material, so each may be logged as it is.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The key text is neither PEM nor a base64 body.
    #[error("the key is neither PEM nor base64: {0}")]
    KeyEncoding(String),
    /// The private key parsed as text but is not an RSA key ring accepts (at least 2048 bits).
    #[error("the private key was rejected: {0}")]
    PrivateKey(String),
    /// The public key is not the SubjectPublicKeyInfo of an RSA key.
    #[error("the public key is not an RSA SubjectPublicKeyInfo")]
    PublicKey,
    /// The signing operation itself failed; ring gives no reason.
    #[error("signing failed")]
    Signing,
    /// The signature is not standard base64, so it cannot even be checked.
    #[error("the signature is not base64")]
    SignatureEncoding,
    /// The signature does not match the message under this key: forged, altered or signed
    /// with another key.
    #[error("the signature does not match")]
    BadSignature,
}

/// The string an app signs for a request: every non-empty parameter except `sign`, sorted by
/// key, as raw `k=v` pairs joined by `&`. Alipay drops empty parameters before it checks a
/// request, so signing them would make the signature fail; `sign_type` stays in.
pub fn string_to_sign<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    canonical(params, |key, value| key != "sign" && !value.is_empty())
}

/// The string Alipay signed for an async notification: every parameter except `sign` and
/// `sign_type`, empty ones included (Alipay signs them, unlike a request's), sorted and joined
/// as in [`string_to_sign`].
pub fn string_to_verify<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    canonical(params, |key, _| key != "sign" && key != "sign_type")
}

/// The query of a pay URL (what follows the gateway's `?`): the signed parameters sorted,
/// keys and values encoded like Python's `quote_plus` (as Alipay's SDKs do), then `sign` last.
/// It carries exactly the pairs [`string_to_sign`] covers, so the gateway checks what we
/// signed.
pub fn signed_query<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    sign: &str,
) -> String {
    let pairs = sorted(params, |key, value| key != "sign" && !value.is_empty());
    let mut query = String::new();
    for (key, value) in pairs.into_iter().chain([("sign", sign)]) {
        if !query.is_empty() {
            query.push('&');
        }
        quote_plus(key, &mut query);
        query.push('=');
        quote_plus(value, &mut query);
    }
    query
}

/// The app's RSA private key, which signs every request sent to Alipay.
#[derive(Debug)]
pub struct AppKey {
    /// ring's `Debug` shows only the public half, so this struct can be logged.
    key_pair: KeyPair,
    /// PKCS#1 v1.5 padding draws no randomness, but ring's signing API asks for a source.
    rng: SystemRandom,
}

impl AppKey {
    /// Loads the key from PKCS#8 PEM (`BEGIN PRIVATE KEY`), PKCS#1 PEM (`BEGIN RSA PRIVATE
    /// KEY`) or a bare base64 body of either, the forms Alipay's key tool writes.
    pub fn parse(text: &str) -> Result<Self, SignError> {
        let text = text.trim();
        let key_pair = if is_pem(text) {
            match PrivateKeyDer::from_pem_slice(text.as_bytes())
                .map_err(|e| SignError::KeyEncoding(e.to_string()))?
            {
                PrivateKeyDer::Pkcs8(der) => KeyPair::from_pkcs8(der.secret_pkcs8_der()),
                PrivateKeyDer::Pkcs1(der) => KeyPair::from_der(der.secret_pkcs1_der()),
                _ => return Err(SignError::PrivateKey("not an RSA key".to_owned())),
            }
        } else {
            let der = bare_base64(text)?;
            KeyPair::from_pkcs8(&der).or_else(|_| KeyPair::from_der(&der))
        };
        let key_pair = key_pair.map_err(|e| SignError::PrivateKey(e.to_string()))?;
        Ok(Self {
            key_pair,
            rng: SystemRandom::new(),
        })
    }

    /// Signs `message` (a [`string_to_sign`]) with SHA256withRSA and returns the signature in
    /// standard base64, the form the `sign` parameter carries.
    pub fn sign(&self, message: &str) -> Result<String, SignError> {
        let mut signature = vec![0; self.key_pair.public().modulus_len()];
        self.key_pair
            .sign(
                &RSA_PKCS1_SHA256,
                &self.rng,
                message.as_bytes(),
                &mut signature,
            )
            .map_err(|_| SignError::Signing)?;
        Ok(BASE64.encode(signature))
    }

    /// The public half, as Alipay holds it to check this app's requests: the built-in sandbox
    /// gateway plays Alipay and checks requests with it.
    pub fn public_key(&self) -> AlipayPublicKey {
        AlipayPublicKey {
            rsa_public_key: self.key_pair.public().as_ref().to_vec(),
        }
    }
}

/// Alipay's RSA public key, which verifies its notifications and answers.
#[derive(Clone, Debug)]
pub struct AlipayPublicKey {
    /// The PKCS#1 `RSAPublicKey` DER from inside the SubjectPublicKeyInfo, what ring verifies
    /// with.
    rsa_public_key: Vec<u8>,
}

impl AlipayPublicKey {
    /// Loads the key from PEM (`BEGIN PUBLIC KEY`) or from the bare base64 SubjectPublicKeyInfo
    /// Alipay's console shows.
    pub fn parse(text: &str) -> Result<Self, SignError> {
        /// rsaEncryption (RFC 8017): anything else cannot check an RSA2 signature.
        const RSA_ENCRYPTION: ObjectIdentifier =
            ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
        let text = text.trim();
        let der = if is_pem(text) {
            SubjectPublicKeyInfoDer::from_pem_slice(text.as_bytes())
                .map_err(|e| SignError::KeyEncoding(e.to_string()))?
                .as_ref()
                .to_vec()
        } else {
            bare_base64(text)?
        };
        let info =
            SubjectPublicKeyInfoRef::try_from(der.as_slice()).map_err(|_| SignError::PublicKey)?;
        if info.algorithm.oid != RSA_ENCRYPTION {
            return Err(SignError::PublicKey);
        }
        let rsa_public_key = info
            .subject_public_key
            .as_bytes()
            .ok_or(SignError::PublicKey)?;
        Ok(Self {
            rsa_public_key: rsa_public_key.to_vec(),
        })
    }

    /// Checks a base64 SHA256withRSA `signature` over `message` (a [`string_to_verify`], or the
    /// raw `*_response` JSON of a synchronous answer). Keys under 2048 bits are refused, as
    /// Alipay issues none.
    pub fn verify(&self, message: &str, signature: &str) -> Result<(), SignError> {
        let signature = BASE64
            .decode(signature)
            .map_err(|_| SignError::SignatureEncoding)?;
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &self.rsa_public_key)
            .verify(message.as_bytes(), &signature)
            .map_err(|_| SignError::BadSignature)
    }
}

/// Sorts the kept pairs by key in byte order (`str`'s order), as Alipay's servers do; the sort
/// is stable, so a repeated key keeps its order and still changes the signed string.
fn sorted<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    keep: impl Fn(&str, &str) -> bool,
) -> Vec<(&'a str, &'a str)> {
    let mut pairs: Vec<_> = params.into_iter().filter(|(k, v)| keep(k, v)).collect();
    pairs.sort_by_key(|&(key, _)| key);
    pairs
}

fn canonical<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    keep: impl Fn(&str, &str) -> bool,
) -> String {
    let pairs: Vec<String> = sorted(params, keep)
        .into_iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    pairs.join("&")
}

/// Python's `quote_plus`: everything but ASCII letters, digits and `-._~` is percent-encoded.
/// (`form_urlencoded` differs: it keeps `*` and encodes `~`.)
const QUOTE_PLUS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Appends `text` encoded like `quote_plus`: a space becomes `+`. The encoder yields each
/// encoded byte as its own `%XX` chunk, so a space is exactly the chunk `%20`.
fn quote_plus(text: &str, out: &mut String) {
    for chunk in utf8_percent_encode(text, QUOTE_PLUS) {
        out.push_str(if chunk == "%20" { "+" } else { chunk });
    }
}

fn is_pem(text: &str) -> bool {
    text.starts_with("-----BEGIN ")
}

/// A key body without PEM armour, as Alipay hands keys out; line breaks are tolerated.
fn bare_base64(text: &str) -> Result<Vec<u8>, SignError> {
    let body: String = text.split_whitespace().collect();
    BASE64
        .decode(body)
        .map_err(|e| SignError::KeyEncoding(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const APP_KEY_PKCS1: &str = include_str!("testdata/app_key_pkcs1.pem");
    const APP_KEY_PKCS8: &str = include_str!("testdata/app_key_pkcs8.pem");
    const APP_PUBLIC_KEY: &str = include_str!("testdata/app_public_key.pem");
    const ALIPAY_PUBLIC_KEY: &str = include_str!("testdata/alipay_public_key.pem");
    const VECTORS: &str = include_str!("testdata/vectors.json");

    fn vectors() -> Value {
        serde_json::from_str(VECTORS).unwrap()
    }

    /// The parameters of a vector, in the (unsorted) order the SDK built them.
    fn params(vector: &Value) -> Vec<(String, String)> {
        let pairs = vector["params"].as_array().unwrap();
        let pair = |p: &Value| {
            (
                p[0].as_str().unwrap().to_owned(),
                p[1].as_str().unwrap().to_owned(),
            )
        };
        pairs.iter().map(pair).collect()
    }

    fn borrowed(params: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
        params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn get<'a>(params: &'a [(String, String)], key: &str) -> &'a str {
        &params.iter().find(|(k, _)| k == key).unwrap().1
    }

    /// The key's base64 body without the PEM armour, as Alipay's tools print keys.
    fn bare(pem: &str) -> String {
        pem.lines()
            .filter(|line| !line.starts_with("-----"))
            .collect()
    }

    #[test]
    fn the_request_string_to_sign_is_the_sdks_and_skips_empty_parameters() {
        let request = &vectors()["request"];
        let mut params = params(request);
        assert_eq!(string_to_sign(borrowed(&params)), request["string_to_sign"]);
        params.push(("app_auth_token".into(), String::new()));
        params.push(("sign".into(), "ignored".into()));
        assert_eq!(string_to_sign(borrowed(&params)), request["string_to_sign"]);
    }

    #[test]
    fn pkcs1_pkcs8_and_bare_keys_sign_exactly_as_the_sdk() {
        let request = &vectors()["request"];
        let message = string_to_sign(borrowed(&params(request)));
        for text in [
            APP_KEY_PKCS1,
            APP_KEY_PKCS8,
            &bare(APP_KEY_PKCS1),
            &bare(APP_KEY_PKCS8),
        ] {
            let signature = AppKey::parse(text).unwrap().sign(&message).unwrap();
            assert_eq!(signature, request["sign"]);
        }
    }

    #[test]
    fn the_pay_url_query_is_the_sdks() {
        let request = &vectors()["request"];
        let params = params(request);
        let sign = AppKey::parse(APP_KEY_PKCS8)
            .unwrap()
            .sign(&string_to_sign(borrowed(&params)))
            .unwrap();
        assert_eq!(signed_query(borrowed(&params), &sign), request["query"]);
    }

    #[test]
    fn our_signature_verifies_with_the_apps_public_key() {
        let message = string_to_sign(borrowed(&params(&vectors()["request"])));
        let sign = AppKey::parse(APP_KEY_PKCS1)
            .unwrap()
            .sign(&message)
            .unwrap();
        let app_public = AlipayPublicKey::parse(APP_PUBLIC_KEY).unwrap();
        app_public.verify(&message, &sign).unwrap();
    }

    #[test]
    fn the_app_keys_public_half_is_the_published_public_key() {
        let app_key = AppKey::parse(APP_KEY_PKCS8).unwrap();
        let published = AlipayPublicKey::parse(APP_PUBLIC_KEY).unwrap();
        assert_eq!(
            app_key.public_key().rsa_public_key,
            published.rsa_public_key
        );
        let alipay = AlipayPublicKey::parse(ALIPAY_PUBLIC_KEY).unwrap();
        assert_ne!(app_key.public_key().rsa_public_key, alipay.rsa_public_key);
        let sign = app_key.sign("a message").unwrap();
        app_key.public_key().verify("a message", &sign).unwrap();
    }

    #[test]
    fn a_notification_the_sdk_signed_verifies_with_pem_and_bare_keys() {
        let notification = &vectors()["notification"];
        let params = params(notification);
        let message = string_to_verify(borrowed(&params));
        assert_eq!(message, notification["string_to_verify"]);
        assert!(
            message.contains("&passback_params=&"),
            "empty parameters are signed"
        );
        for text in [ALIPAY_PUBLIC_KEY, &bare(ALIPAY_PUBLIC_KEY)] {
            let key = AlipayPublicKey::parse(text).unwrap();
            key.verify(&message, get(&params, "sign")).unwrap();
        }
    }

    #[test]
    fn a_changed_amount_a_forged_or_garbled_signature_and_the_wrong_key_are_refused() {
        let params = params(&vectors()["notification"]);
        let sign = get(&params, "sign");
        let alipay = AlipayPublicKey::parse(ALIPAY_PUBLIC_KEY).unwrap();
        let message = string_to_verify(borrowed(&params));

        let cheaper = message.replace("total_amount=5999.00", "total_amount=0.01");
        assert_ne!(cheaper, message);
        assert!(matches!(
            alipay.verify(&cheaper, sign),
            Err(SignError::BadSignature)
        ));

        let forged = AppKey::parse(APP_KEY_PKCS1)
            .unwrap()
            .sign(&message)
            .unwrap();
        assert!(matches!(
            alipay.verify(&message, &forged),
            Err(SignError::BadSignature)
        ));
        let truncated = BASE64.encode(&BASE64.decode(sign).unwrap()[1..]);
        assert!(matches!(
            alipay.verify(&message, &truncated),
            Err(SignError::BadSignature)
        ));
        let result = alipay.verify(&message, "not base64!");
        assert!(matches!(result, Err(SignError::SignatureEncoding)));

        let wrong_key = AlipayPublicKey::parse(APP_PUBLIC_KEY).unwrap();
        assert!(matches!(
            wrong_key.verify(&message, sign),
            Err(SignError::BadSignature)
        ));
    }

    #[test]
    fn malformed_keys_are_errors_not_panics() {
        for text in ["", "not a key", "QUJD", APP_PUBLIC_KEY] {
            assert!(
                AppKey::parse(text).is_err(),
                "{text:?} loaded as a private key"
            );
        }
        let garbled_pem = APP_KEY_PKCS8.replacen('M', "*", 1);
        assert!(AppKey::parse(&garbled_pem).is_err());
        for text in ["", "not a key", "QUJD", APP_KEY_PKCS8, &bare(APP_KEY_PKCS8)] {
            assert!(
                AlipayPublicKey::parse(text).is_err(),
                "{text:?} loaded as a public key"
            );
        }
    }

    #[test]
    fn the_query_encodes_like_python_quote_plus() {
        let mut out = String::new();
        quote_plus("a b*~-._+&=/%秒", &mut out);
        assert_eq!(out, "a+b%2A~-._%2B%26%3D%2F%25%E7%A7%92");
    }
}
