//! Requests forged by another site's page: the shopper's browser sends its cookie along, so a
//! cookie-authenticated change must come from this site's own pages (`Origin`, else `Referer`).
//! A bearer-token client is not a browser and is not affected.

use crate::support::operator::{Operator, operator};
use crate::support::{ADMIN_TOKEN, TestApp, TextOfAnswer, code, status_and_json};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_buy_posted_from_another_site_with_the_shoppers_cookie_is_refused_and_sells_nothing() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 5).await;
    let token = app.users(1).await.remove(0);
    let cookie = format!("seckill_session={token}");
    let buy = |origin: Option<(&'static str, String)>| {
        let mut request = app
            .client
            .post(app.url("/api/v1/orders"))
            .header("cookie", &cookie)
            .json(&json!({ "product_id": product, "quantity": 1 }));
        if let Some((name, value)) = origin {
            request = request.header(name, value);
        }
        request.send()
    };
    for forged in [
        Some(("origin", "https://evil.example".to_owned())),
        Some(("origin", "null".to_owned())),
        Some(("referer", "https://evil.example/page".to_owned())),
        None,
    ] {
        let (status, body) = status_and_json(buy(forged.clone()).await.unwrap()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{forged:?}: {body}");
        assert_eq!(code(&body), "cross_origin_request");
    }
    assert_eq!(app.product(product).await["remaining"], 5, "nothing sold");

    // From the site's own page, and with the bearer token from anywhere, the buy goes through.
    let (status, body) =
        status_and_json(buy(Some(("origin", app.base.clone()))).await.unwrap()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = status_and_json(buy(Some(("referer", app.url("/")))).await.unwrap()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let response = app
        .client
        .post(app.url("/api/v1/orders"))
        .bearer_auth(&token)
        .header("origin", "https://evil.example")
        .json(&json!({ "product_id": product, "quantity": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    app.settle().await;
    assert_eq!(app.product(product).await["remaining"], 2);
}

#[tokio::test]
async fn a_foreign_form_cannot_sign_the_shopper_or_the_operator_out_or_change_the_catalog() {
    let app = TestApp::spawn().await;
    let token = app.users(1).await.remove(0);
    let response = app
        .client
        .post(app.url("/logout"))
        .header("cookie", format!("seckill_session={token}"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        app.get_json_as(&token, "/api/v1/orders").await.0,
        StatusCode::OK,
        "the session was not ended"
    );

    let Operator {
        browser: operator,
        csrf,
        ..
    } = operator(&app).await;
    // Even with the right CSRF token (leaked, say), a post from another site is refused.
    let forged = operator
        .post(app.url("/admin/events"))
        .header("origin", "https://evil.example")
        .form(&[
            ("csrf", csrf.as_str()),
            ("title", "Forged"),
            ("starts_at", "2030-01-01T00:00"),
            ("ends_at", "2030-01-02T00:00"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let events = app
        .client
        .get(app.url("/api/v1/admin/events"))
        .bearer_auth(ADMIN_TOKEN)
        .text_of_answer()
        .await;
    assert!(!events.contains("Forged"), "no event was made: {events}");
}
