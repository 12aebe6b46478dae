//! The client's address for throttling: the TCP peer, or, behind a reverse proxy that the
//! operator names in `client_ip_header`, the last address that proxy appended. Only the last
//! one: everything before it was written by the client and proves nothing.

use crate::error::ApiError;
use crate::http::AppState;
use crate::server::Ends;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::net::IpAddr;

/// The address a request is throttled by.
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let peer = parts
            .extensions
            .get::<Ends>()
            .map(|ends| ends.peer.ip())
            .ok_or_else(|| anyhow::anyhow!("the server was started without peer addresses"))?;
        let forwarded = state.client_ip_header.as_ref().and_then(|name| {
            let value = parts.headers.get_all(name).iter().next_back()?;
            value.to_str().ok()?.rsplit(',').next()?.trim().parse().ok()
        });
        Ok(ClientIp(forwarded.unwrap_or(peer)))
    }
}
