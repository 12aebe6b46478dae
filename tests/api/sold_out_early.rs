//! A buy of a product this server has seen sell out is answered `409 sold_out` before the
//! session is checked: the sale page shows any visitor that it is sold out, so the answer tells
//! nobody anything, and after a sell-out the crowd's buys cost the server no token check. Any
//! other buy still needs a valid session first.

use crate::support::{TestApp, code, status_and_json};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A buy of one unit of `product` with `token` as its bearer token, if any, and `key` as its
/// `Idempotency-Key`, if any.
async fn buy(
    app: &TestApp,
    product: i64,
    token: Option<&str>,
    key: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = app
        .client
        .post(app.url("/api/v1/orders"))
        .json(&json!({ "product_id": product, "quantity": 1 }));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    status_and_json(request.send().await.unwrap()).await
}

/// A product whose one unit is sold, and whose next buyer was told it is sold out, so this
/// server has flagged it.
async fn sold_out(app: &TestApp) -> i64 {
    let product = app.live_product(1, 1).await;
    let tokens = app.users(2).await;
    assert_eq!(
        app.buy(&tokens[0], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    let (status, body) = app.buy(&tokens[1], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    product
}

#[tokio::test]
async fn a_buy_of_a_product_sold_out_here_is_refused_before_its_session_is_checked() {
    let app = TestApp::spawn().await;
    let product = sold_out(&app).await;
    for token in [None, Some("not-a-session-token")] {
        let (status, body) = buy(&app, product, token, None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "sold_out"),
            "{token:?}: {body}"
        );
    }
}

#[tokio::test]
async fn any_other_buy_without_a_session_is_unauthorized_as_before() {
    let app = TestApp::spawn().await;
    let sold = sold_out(&app).await;
    let on_sale = app.live_product(10, 1).await;
    // An unknown product is not answered `404` to a stranger (nor `sold_out`), a product on
    // sale needs its buyer, and a keyed buy of a sold-out product may be a retry whose order
    // only its buyer may see.
    for (product, key) in [
        (987_654_321, None),
        (on_sale, None),
        (sold, Some("retry-1")),
    ] {
        let (status, body) = buy(&app, product, None, key).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{product} {key:?}: {body}"
        );
    }
}
