//! The operator's two doors, the console and the admin API, over the same sale service: the
//! same input gets the same verdict through either, and the same change is recorded alike in
//! the audit log, named by who made it.

use crate::support::operator::operator;
use crate::support::{ADMIN_TOKEN, TestApp, code, rfc3339};
use reqwest::StatusCode;
use seckill::domain::Operator;
use seckill::store::AuditEntry;
use serde_json::json;

/// The audit log, newest first.
async fn audit_log(app: &TestApp) -> Vec<AuditEntry> {
    app.state.sale.audit_log().await.unwrap()
}

#[tokio::test]
async fn a_change_through_the_console_is_recorded_as_the_same_change_through_the_api() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let console = operator(&app).await;
    let press = |control: &'static str| {
        let path = format!("/admin/products/{product}/{control}");
        console
            .browser
            .post(app.url(&path))
            .form(&[("csrf", console.csrf.as_str())])
            .send()
    };

    assert_eq!(press("pause").await.unwrap().status(), StatusCode::OK);
    assert_eq!(press("resume").await.unwrap().status(), StatusCode::OK);
    let (status, body) = app
        .admin_post(
            &format!("/api/v1/admin/products/{product}/pause"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let log = audit_log(&app).await;
    let paused = format!("paused product {product}");
    let [through_api, resumed, through_console] = &log[..3] else {
        panic!("three changes: {log:?}");
    };
    assert_eq!(resumed.action, format!("resumed product {product}"));
    assert_eq!(through_api.action, paused);
    assert_eq!(through_console.action, through_api.action);
    assert_eq!(through_console.actor, Operator::Console.to_string());
    assert_eq!(
        through_api.actor,
        Operator::with_token(ADMIN_TOKEN).to_string()
    );
}

#[tokio::test]
async fn the_same_input_gets_the_same_verdict_through_either_door() {
    let app = TestApp::spawn().await;
    let console = operator(&app).await;
    let now = app.state.sale.now();
    let form_time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M")
            .to_string()
    };
    let bidi = "Phone\u{202E}gnp.exe";
    let long = "x".repeat(201);
    // (what is wrong, the API body's change, the form's change, the code)
    let mistakes = [
        (
            "a hidden mark in the name",
            ("name", json!(bidi)),
            ("name", bidi),
            "invalid_text",
        ),
        (
            "a name too long",
            ("name", json!(long)),
            ("name", long.as_str()),
            "invalid_text",
        ),
        (
            "an image URL of another scheme",
            ("image_url", json!("javascript:alert(1)")),
            ("image_url", "javascript:alert(1)"),
            "invalid_image_url",
        ),
        (
            "no stock",
            ("stock", json!(-1)),
            ("stock", "-1"),
            "invalid_stock",
        ),
        (
            "a limit of none",
            ("per_user_limit", json!(0)),
            ("per_user_limit", "0"),
            "invalid_limit",
        ),
        (
            "a sale in 1970",
            ("starts_at", json!(rfc3339(0))),
            ("starts_at", "1970-01-01T00:00"),
            "invalid_window",
        ),
    ];
    for (what, (json_field, json_value), (form_field, form_value), expected) in mistakes {
        let mut body = json!({
            "name": "Kettle",
            "original_price_cents": 10_000,
            "sale_price_cents": 5_000,
            "stock": 5,
            "per_user_limit": 1,
            "starts_at": rfc3339(now - 60_000),
            "ends_at": rfc3339(now + 3_600_000),
        });
        body[json_field] = json_value;
        let (status, answer) = app.admin_post("/api/v1/admin/products", body).await;
        assert_eq!(
            (status, code(&answer)),
            (StatusCode::UNPROCESSABLE_ENTITY, expected),
            "{what}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();

        let mut form = vec![
            ("name", "Kettle".to_owned()),
            ("original_price", "100".to_owned()),
            ("sale_price", "50".to_owned()),
            ("stock", "5".to_owned()),
            ("per_user_limit", "1".to_owned()),
            ("starts_at", form_time(now - 60_000)),
            ("ends_at", form_time(now + 3_600_000)),
            ("csrf", console.csrf.clone()),
        ];
        form.retain(|(name, _)| *name != form_field);
        form.push((form_field, form_value.to_owned()));
        let page = console
            .browser
            .post(app.url("/admin/products"))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), StatusCode::UNPROCESSABLE_ENTITY, "{what}");
        let page = page.text().await.unwrap();
        assert!(page.contains(message), "{what}: {message} not in the page");
    }
    let (_, products) = app.get_json_as(ADMIN_TOKEN, "/api/v1/admin/products").await;
    assert_eq!(products, json!([]), "nothing was made");
    assert!(audit_log(&app).await.is_empty(), "nothing was recorded");
}
