//! What operator text may hold: every character a shopper sees as it is stored, nothing that
//! shows as nothing or reads otherwise, and text stored before the check keeps working until
//! the operator edits it.

use crate::support::operator::operator;
use crate::support::{TestApp, code, rfc3339};
use reqwest::StatusCode;
use serde_json::json;

/// Characters that show nothing (or a blank) yet pass for text: a soft hyphen, the grapheme
/// joiner, the Hangul fillers, a line and a paragraph separator, an interlinear annotation, a
/// tag character, a private-use and an unassigned code point.
const INVISIBLE: [&str; 10] = [
    "Phone\u{00AD}",
    "Ph\u{034F}one",
    "\u{115F}",
    "Phone\u{2028}x",
    "Phone\u{2029}x",
    "\u{3164}",
    "Phone\u{FFF9}x\u{FFFB}",
    "Phone\u{E0041}",
    "Phone\u{E000}",
    "Phone\u{0378}",
];

#[tokio::test]
async fn invisible_characters_in_names_and_titles_are_refused() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let window = json!({
        "starts_at": rfc3339(now + 3_600_000),
        "ends_at": rfc3339(now + 7_200_000),
    });
    // The product's fields but its name, and the event's but its title: each door's text.
    let mut product = json!({
        "original_price_cents": 10_000,
        "sale_price_cents": 5_000,
        "stock": 5,
        "per_user_limit": 1,
    });
    product
        .as_object_mut()
        .unwrap()
        .extend(window.as_object().unwrap().clone());
    let doors = [
        ("/api/v1/admin/products", "name", product),
        ("/api/v1/admin/events", "title", window.clone()),
    ];
    for text in INVISIBLE {
        for (path, field, fields) in &doors {
            let mut body = fields.clone();
            body[*field] = json!(text);
            let (status, answer) = app.admin_post(path, body).await;
            assert_eq!(
                (status, code(&answer)),
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_text"),
                "{field} {text:?}: {answer}"
            );
        }
    }
    let mut event = window;
    event["title"] = json!("限时\u{3000}秒杀 \u{1F469}\u{200D}\u{1F4BB} \u{2764}\u{FE0F}");
    let (status, body) = app.admin_post("/api/v1/admin/events", event).await;
    assert_eq!(status, StatusCode::CREATED, "spaces and emoji pass: {body}");
}

#[tokio::test]
async fn a_name_stored_before_the_check_keeps_working_until_it_is_edited() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let old_name = "Old\u{00AD}phone";
    let pool = app.pool().await;
    sqlx::query(app.db.sql("UPDATE products SET name = ? WHERE id = ?"))
        .bind(old_name)
        .bind(product)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let console = operator(&app).await;
    let edit = |name: &str| {
        let form = [
            ("name", name.to_owned()),
            ("image_url", stored_image_url(&app, product)),
            ("original_price", "100".to_owned()),
            ("sale_price", "40".to_owned()),
            ("per_user_limit", "1".to_owned()),
            ("csrf", console.csrf.clone()),
        ];
        console
            .browser
            .post(app.url(&format!("/admin/products/{product}")))
            .form(&form)
            .send()
    };
    // The edit form sends the stored name back with a new price: the price changes.
    let changed = edit(old_name).await.unwrap();
    assert!(changed.status().is_success(), "{}", changed.status());
    let shown = app.product(product).await;
    assert_eq!(shown["sale_price_cents"], 4_000, "{shown}");
    assert_eq!(shown["name"], old_name, "{shown}");
    // A new name is checked.
    let refused = edit("New\u{00AD}phone").await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let renamed = edit("New phone").await.unwrap();
    assert!(renamed.status().is_success(), "{}", renamed.status());
    assert_eq!(app.product(product).await["name"], "New phone");
}

/// The image URL the product's edit form shows, sent back unchanged.
fn stored_image_url(app: &TestApp, product: i64) -> String {
    let product = app
        .state
        .sale
        .shown_product(seckill::domain::ProductId(product))
        .expect("a known product");
    product.image_url.clone()
}
