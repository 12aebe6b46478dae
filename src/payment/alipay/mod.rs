//! Alipay's open-platform protocol with RSA2 signatures (SHA256withRSA, PKCS#1 v1.5).
//!
//! `sign` holds the rules both ends share: how a request is signed, how a notification is
//! verified and how a signed pay URL is encoded. They are pinned by vectors made with the
//! Alipay SDK on PyPI (`testdata/`), an implementation independent of ours. `beijing` writes
//! and reads the protocol's timestamps. `client` is the [`crate::payment::PaymentProvider`]
//! built on them: it signs pay URLs and calls, and trusts notifications, returns and answers
//! only once they verify.

pub mod beijing;
pub mod client;
pub mod sign;
