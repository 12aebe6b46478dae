//! The connection server alone, over a few routes of its own: what the tests of the connection
//! layer run against, configured as each needs.

use axum::Router;
use axum::routing::{get, post};
use seckill::server::{Serve, listen, serve};
use std::future::IntoFuture;
use std::time::Duration;

/// A server as `configure` sets it up, answering `GET /healthz`, `POST /echo` of `hello world`
/// and `GET /slow` (after a second and a half) as the real `/healthz` does. Its address; it
/// stops with the test's runtime.
pub fn bare_server(configure: impl FnOnce(Serve<Router>) -> Serve<Router>) -> String {
    const OK: &str = "{\"status\":\"ok\"}";
    let router = Router::new()
        .route("/healthz", get(|| async { OK }))
        .route(
            "/echo",
            post(|body: String| async move { if body == "hello world" { OK } else { "wrong" } }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                OK
            }),
        );
    let listener = listen(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(configure(serve(listener, router)).into_future());
    addr.to_string()
}
