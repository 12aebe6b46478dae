//! A product's stock buckets (`buckets`, 1 to 64, default 1): set when it is created and
//! changed until it is preheated, through the admin API and the console, shown in the
//! operator's answers and pages and in the OpenAPI document; out of range refused and nothing
//! made; once the product is in the gate, a change refused with `409 product_loaded` and
//! nothing changed.

use crate::support::operator::{Operator, operator};
use crate::support::{TestApp, TextOfAnswer, assert_form_refused, code, rfc3339};
use reqwest::StatusCode;
use seckill::domain::{ProductId, StockBuckets};
use seckill::store::ProductPatch;
use serde_json::{Value, json};

/// A product's body, starting `start_ms` from now, for two hours.
fn product_body(app: &TestApp, start_ms: i64) -> Value {
    let start = app.state.sale.now() + start_ms;
    json!({
        "name": "Hot phone", "original_price_cents": 10_000, "sale_price_cents": 4_999,
        "stock": 100, "starts_at": rfc3339(start), "ends_at": rfc3339(start + 7_200_000),
    })
}

/// An hour from now: well outside the preheat lead, so the product is not loaded yet.
const LATER: i64 = 3_600_000;

/// Every product as the admin API lists it.
async fn admin_products(app: &TestApp) -> Vec<Value> {
    let (status, products) = app.admin_get("/api/v1/admin/products").await;
    assert_eq!(status, StatusCode::OK);
    products.as_array().unwrap().clone()
}

/// The product `id` as the admin API lists it.
async fn admin_product(app: &TestApp, id: i64) -> Value {
    admin_products(app)
        .await
        .into_iter()
        .find(|p| p["id"] == id)
        .expect("the product is listed")
}

/// How many entries the audit log holds.
async fn audit_entries(app: &TestApp) -> usize {
    let (_, entries) = app.admin_get("/api/v1/admin/audit").await;
    entries.as_array().unwrap().len()
}

/// Whether the database marks the product as loaded into the gate.
async fn loaded(app: &TestApp, id: i64) -> bool {
    let pool = app.pool().await;
    let at: Option<i64> = sqlx::query_scalar(
        app.db
            .sql("SELECT gate_loaded_at FROM products WHERE id = ?"),
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    at.is_some()
}

#[tokio::test]
async fn a_product_is_created_with_the_buckets_given_and_one_without() {
    let app = TestApp::spawn().await;
    let mut body = product_body(&app, LATER);
    body["buckets"] = json!(12);
    let (status, created) = app.admin_post("/api/v1/admin/products", body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["buckets"], 12);
    let id = created["id"].as_i64().unwrap();
    assert_eq!(admin_product(&app, id).await["buckets"], 12, "read back");

    let (status, plain) = app
        .admin_post("/api/v1/admin/products", product_body(&app, LATER))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plain}");
    assert_eq!(plain["buckets"], 1);
    let plain = plain["id"].as_i64().unwrap();
    assert_eq!(admin_product(&app, plain).await["buckets"], 1, "read back");

    // Shoppers see the product as before: the buckets are the operator's.
    let shown = app.product(id).await;
    assert!(shown.get("buckets").is_none(), "{shown}");
    assert_eq!(shown["per_user_limit"], 1);
}

#[tokio::test]
async fn buckets_out_of_one_to_sixty_four_are_refused_and_nothing_is_made() {
    let app = TestApp::spawn().await;
    let entries = audit_entries(&app).await;
    for (buckets, expected) in [
        (json!(0), "invalid_buckets"),
        (json!(65), "invalid_buckets"),
        (json!(-1), "invalid_buckets"),
        (json!(256), "invalid_buckets"),
        (json!("x"), "invalid_body"),
        (json!(1.5), "invalid_body"),
    ] {
        let mut body = product_body(&app, LATER);
        body["buckets"] = buckets.clone();
        let (status, answer) = app.admin_post("/api/v1/admin/products", body).await;
        assert_eq!(
            (status, code(&answer)),
            (StatusCode::UNPROCESSABLE_ENTITY, expected),
            "{buckets}: {answer}"
        );
        if expected == "invalid_buckets" {
            assert_eq!(answer["error"]["message"], "buckets must be 1 to 64");
        }
    }
    assert_eq!(admin_products(&app).await, Vec::<Value>::new());
    assert_eq!(audit_entries(&app).await, entries, "nothing recorded");

    // A change out of range is refused the same way and changes nothing either.
    let (_, created) = app
        .admin_post("/api/v1/admin/products", product_body(&app, LATER))
        .await;
    let id = created["id"].as_i64().unwrap();
    let (status, answer) = app
        .admin_patch(
            &format!("/api/v1/admin/products/{id}"),
            json!({ "buckets": 65, "name": "Renamed" }),
        )
        .await;
    assert_eq!(
        (status, code(&answer)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_buckets")
    );
    let stored = admin_product(&app, id).await;
    assert_eq!(
        (&stored["buckets"], &stored["name"]),
        (&json!(1), &json!("Hot phone"))
    );
}

#[tokio::test]
async fn buckets_change_until_the_product_is_preheated_and_then_never() {
    let app = TestApp::spawn().await;
    let (_, created) = app
        .admin_post("/api/v1/admin/products", product_body(&app, LATER))
        .await;
    let id = created["id"].as_i64().unwrap();
    let path = format!("/api/v1/admin/products/{id}");
    assert!(!loaded(&app, id).await);

    // Before the preheat: stored, and recorded as other changes are.
    let entries = audit_entries(&app).await;
    let (status, changed) = app.admin_patch(&path, json!({ "buckets": 12 })).await;
    assert_eq!(
        (status, &changed["buckets"]),
        (StatusCode::OK, &json!(12)),
        "{changed}"
    );
    assert_eq!(admin_product(&app, id).await["buckets"], 12);
    assert_eq!(audit_entries(&app).await, entries + 1);

    // The sale moved to now: the product is preheated at once, with its buckets.
    let now = app.state.sale.now();
    let (status, live) = app
        .admin_patch(&path, json!({ "starts_at": rfc3339(now - 1_000) }))
        .await;
    assert_eq!(
        (status, &live["status"]),
        (StatusCode::OK, &json!("live")),
        "{live}"
    );
    assert!(loaded(&app, id).await, "preheated");

    // Now the buckets hold the stock: a change is refused, and nothing of its patch is made.
    let entries = audit_entries(&app).await;
    let (status, refused) = app
        .admin_patch(&path, json!({ "buckets": 4, "name": "Renamed" }))
        .await;
    assert_eq!(
        (status, code(&refused)),
        (StatusCode::CONFLICT, "product_loaded"),
        "{refused}"
    );
    assert_eq!(
        refused["error"]["message"],
        "the stock buckets can be changed only before the product is preheated"
    );
    let stored = admin_product(&app, id).await;
    assert_eq!(
        (&stored["buckets"], &stored["name"]),
        (&json!(12), &json!("Hot phone"))
    );
    assert_eq!(audit_entries(&app).await, entries, "nothing recorded");

    // Any other change works as before, also one that names the buckets the product has.
    let (status, renamed) = app
        .admin_patch(
            &path,
            json!({ "buckets": 12, "name": "Renamed", "per_user_limit": 2 }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{renamed}");
    assert_eq!(
        (
            &renamed["name"],
            &renamed["per_user_limit"],
            &renamed["buckets"]
        ),
        (&json!("Renamed"), &json!(2), &json!(12))
    );
    let token = app.users(1).await.remove(0);
    assert_eq!(app.buy(&token, id, 1).await.0, StatusCode::ACCEPTED);
    assert_eq!(admin_product(&app, id).await["remaining"], 99);
}

#[tokio::test]
async fn the_console_shows_and_takes_the_buckets_until_the_product_is_preheated() {
    let app = TestApp::spawn().await;
    let Operator { browser, csrf, .. } = operator(&app).await;
    let catalog = browser
        .get(app.url("/admin/products"))
        .text_of_answer()
        .await;
    assert!(
        catalog.contains(r#"<input name="buckets" type="number" min="1" max="64""#),
        "{catalog}"
    );
    assert!(catalog.contains("Stock buckets, 1 to 64 (spread a hot product over Redis shards"));

    let start = app.state.sale.now() + LATER;
    let time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M")
            .to_string()
    };
    let create = |buckets: &'static str| {
        browser
            .post(app.url("/admin/products"))
            .form(&[
                ("csrf", csrf.as_str()),
                ("name", "Console kettle"),
                ("original_price", "199"),
                ("sale_price", "99"),
                ("stock", "50"),
                ("per_user_limit", ""),
                ("buckets", buckets),
                ("starts_at", &time(start)),
                ("ends_at", &time(start + 7_200_000)),
            ])
            .send()
    };
    let refused = create("65").await.unwrap();
    assert_form_refused(refused, "buckets must be 1 to 64").await;
    assert_eq!(admin_products(&app).await, Vec::<Value>::new());

    let created = create("12").await.unwrap();
    assert_eq!(created.status(), StatusCode::OK);
    let id: i64 = created
        .url()
        .path()
        .strip_prefix("/admin/products/")
        .and_then(|id| id.parse().ok())
        .expect("the new product's page");
    let page = created.text().await.unwrap();
    assert!(
        page.contains("<b data-buckets>12</b> stock buckets"),
        "{page}"
    );
    assert!(page.contains(r#"min="1" max="64" step="1" inputmode="numeric" value="12""#));
    assert_eq!(admin_product(&app, id).await["buckets"], 12);
    let catalog = browser
        .get(app.url("/admin/products"))
        .text_of_answer()
        .await;
    assert!(catalog.contains("<td data-buckets>12</td>"), "{catalog}");

    // The product's form, as the browser sends it: every field.
    let change = |buckets: &'static str, starts_at: String| {
        browser
            .post(app.url(&format!("/admin/products/{id}")))
            .form(&[
                ("csrf", csrf.as_str()),
                ("name", "Console kettle"),
                ("image_url", "/static/img/gift.svg"),
                ("original_price", "199.00"),
                ("sale_price", "99.00"),
                ("per_user_limit", "1"),
                ("buckets", buckets),
                ("starts_at", &starts_at),
                ("ends_at", &time(start + 7_200_000)),
            ])
            .send()
    };
    let changed = change("5", time(start)).await.unwrap();
    assert_eq!(changed.status(), StatusCode::OK);
    assert_eq!(admin_product(&app, id).await["buckets"], 5);

    // Moved to now, it is preheated: the form shows the buckets fixed, and takes them as they
    // are, while another count is refused with the reason.
    let now = app.state.sale.now();
    let live = change("5", time(now - 60_000)).await.unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    assert!(loaded(&app, id).await, "preheated");
    let page = live.text().await.unwrap();
    assert!(
        page.contains(r#"<input name="buckets" type="number" value="5" readonly>"#),
        "{page}"
    );
    let refused = change("6", time(now - 60_000)).await.unwrap();
    assert_form_refused(
        refused,
        "the stock buckets can be changed only before the product is preheated",
    )
    .await;
    assert_eq!(admin_product(&app, id).await["buckets"], 5);
}

#[tokio::test]
async fn the_openapi_document_describes_the_buckets() {
    let app = TestApp::spawn().await;
    let (status, doc) = app.get_json("/api/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let schemas = &doc["components"]["schemas"];
    for body in ["NewProduct", "ProductUpdate"] {
        let buckets = &schemas[body]["properties"]["buckets"];
        assert_eq!(
            (&buckets["minimum"], &buckets["maximum"]),
            (&json!(1), &json!(64)),
            "{body}: {buckets}"
        );
        assert!(buckets["description"].as_str().unwrap().contains("bucket"));
    }
    assert_eq!(schemas["NewProduct"]["properties"]["buckets"]["default"], 1);
    let view = schemas["AdminProductView"].to_string();
    assert!(
        view.contains(r#""buckets":{"#)
            && view.contains(r##""$ref":"#/components/schemas/ProductView""##),
        "{view}"
    );
    let patch = &doc["paths"]["/api/v1/admin/products/{id}"]["patch"]["responses"];
    assert!(
        patch["409"]["description"]
            .as_str()
            .unwrap()
            .contains("`product_loaded`")
    );
    let create = &doc["paths"]["/api/v1/admin/products"]["post"]["responses"];
    assert!(
        create["422"]["description"]
            .as_str()
            .unwrap()
            .contains("`invalid_buckets`")
    );
}

#[tokio::test]
async fn the_store_changes_nothing_of_a_patch_that_would_rebucket_a_loaded_product() {
    // The service refuses such a patch before it reaches the store; the store refuses it too,
    // for a preheat that marks the product between the service's read and its write.
    let app = TestApp::spawn().await;
    let store = &app.state.store;
    let now = app.state.sale.now();
    let (_, created) = app
        .admin_post("/api/v1/admin/products", product_body(&app, LATER))
        .await;
    let id = ProductId(created["id"].as_i64().unwrap());
    let patch = |buckets: u8, name: &str| ProductPatch {
        buckets: Some(StockBuckets::parse(buckets.into()).unwrap()),
        name: Some(name.to_owned()),
        ..ProductPatch::default()
    };
    let before = store.update_product(id, &patch(3, "First"), now).await;
    let before = before.unwrap().unwrap();
    assert_eq!((before.buckets.get(), before.name.as_str()), (3, "First"));

    store.mark_gate_loaded(id, now).await.unwrap();
    let after = store.update_product(id, &patch(7, "Second"), now).await;
    let after = after.unwrap().unwrap();
    assert_eq!((after.buckets.get(), after.name.as_str()), (3, "First"));
    let same = store.update_product(id, &patch(3, "Third"), now).await;
    let same = same.unwrap().unwrap();
    assert_eq!((same.buckets.get(), same.name.as_str()), (3, "Third"));
}

#[tokio::test]
async fn a_product_written_without_buckets_has_one_and_the_database_refuses_others() {
    // As a server of the version before buckets writes it during a rolling upgrade.
    let app = TestApp::spawn().await;
    let pool = app.pool().await;
    let insert = |buckets: &str| {
        format!(
            "INSERT INTO products (name, image_url, original_price_cents, sale_price_cents, \
             stock_total, stock, per_user_limit, sale_starts_at, sale_ends_at, created_at, \
             updated_at{}) VALUES ('Old', '/static/img/gift.svg', 100, 50, 5, 5, 1, \
             4000000000000, 4000000360000, 1, 1{})",
            if buckets.is_empty() { "" } else { ", buckets" },
            if buckets.is_empty() {
                String::new()
            } else {
                format!(", {buckets}")
            },
        )
    };
    sqlx::query(app.db.sql(&insert("")))
        .execute(&pool)
        .await
        .unwrap();
    for refused in ["0", "65"] {
        let written = sqlx::query(app.db.sql(&insert(refused)))
            .execute(&pool)
            .await;
        assert!(written.is_err(), "{refused} buckets stored");
    }
    pool.close().await;
    let products = app.state.store.products().await.unwrap();
    let buckets: Vec<u8> = products.iter().map(|p| p.buckets.get()).collect();
    assert_eq!(buckets, [1]);
}
