//! The one buy request every test sends, to an in-process server or to a server process, and
//! the buy that waits while a gate that lost its data is closed. Tests read the answer as they
//! need; the request itself is built here only.

use reqwest::StatusCode;
use serde_json::{Value, json};

/// `POST /api/v1/orders` of `quantity` units of `product` as `token`, to the server at `base`.
pub fn request(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    product: i64,
    quantity: i64,
) -> reqwest::RequestBuilder {
    client
        .post(format!("{base}/api/v1/orders"))
        .bearer_auth(token)
        .json(&json!({ "product_id": product, "quantity": quantity }))
}

/// The answer to `buy`, sent again while it is `503`: a gate that lost its data stays closed
/// for a few seconds, until every server has shared again what it accepted.
pub async fn once_the_gate_reopens<F, Fut>(mut buy: F) -> (StatusCode, Value)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (StatusCode, Value)>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let answer = buy().await;
        if answer.0 != StatusCode::SERVICE_UNAVAILABLE || tokio::time::Instant::now() > deadline {
            return answer;
        }
        // Slower than a buyer's default limit of five tries a second.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}
