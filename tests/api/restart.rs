//! An accepted order survives a restart, and the gate is rebuilt from the database.

use crate::backend::TestDatabase;
use crate::helpers::{TestApp, code};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use std::sync::Arc;

#[tokio::test]
async fn after_a_restart_the_gate_knows_the_stock_and_the_buyers_from_the_database() {
    let db = Arc::new(TestDatabase::fresh().await);
    let app = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), |_| {}).await;
    let product = app.live_product(3, 1).await;
    let tokens = app.users(4).await;
    for token in &tokens[..2] {
        assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
    }
    app.stop().await;

    let app = TestApp::spawn_on(db, Arc::new(SystemClock), |_| {}).await;
    assert_eq!(app.product(product).await["remaining"], 1);
    let (status, body) = app.buy(&tokens[0], product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );
    assert_eq!(
        app.buy(&tokens[2], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    let (status, body) = app.buy(&tokens[3], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    assert_eq!(app.stored(product).await, (3, 3, 0));
}
