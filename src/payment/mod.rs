//! The payment provider layer: how an order's money is asked for and how the provider's word
//! that it arrived is trusted. Only Alipay's signed protocol lives here so far; the provider
//! trait, the client and the built-in sandbox gateway that speaks the same protocol build on it.
//!
//! Invariant: nothing here knows about orders, stores or HTTP routes; it turns parameters into
//! signed requests and signed notifications into "verified" or an error.

pub mod alipay;
