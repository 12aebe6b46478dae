//! The client's address for throttling: the TCP peer, or, behind a reverse proxy that the
//! operator names in `client_ip_header`, the last address that proxy appended. Only the last
//! one: everything before it was written by the client and proves nothing.

use crate::error::ApiError;
use crate::http::AppState;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use std::net::{IpAddr, SocketAddr};

/// The address a request is throttled by.
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())
            .ok_or_else(|| anyhow::anyhow!("the server was started without peer addresses"))?;
        let forwarded = state.client_ip_header.as_ref().and_then(|name| {
            let value = parts.headers.get_all(name).iter().next_back()?;
            value.to_str().ok()?.rsplit(',').next()?.trim().parse().ok()
        });
        Ok(ClientIp(forwarded.unwrap_or(peer)))
    }
}
