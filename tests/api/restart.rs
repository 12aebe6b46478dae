//! An accepted order survives a restart, and the gate is rebuilt from the database.

use crate::support::TestApp;
use crate::support::TestDatabase;
use seckill::clock::SystemClock;
use std::sync::Arc;

#[tokio::test]
async fn after_a_restart_the_gate_knows_the_stock_and_the_buyers_from_the_database() {
    let db = Arc::new(TestDatabase::fresh().await);
    let app = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), |_| {}).await;
    let product = app.live_product(3, 1).await;
    let tokens = app.users(4).await;
    app.buy_each(&tokens[..2], product).await;
    app.stop().await;

    let app = TestApp::spawn_on(db, Arc::new(SystemClock), |_| {}).await;
    app.assert_gate_rebuilt_after_two_of_three_sold(product, &tokens)
        .await;
}
