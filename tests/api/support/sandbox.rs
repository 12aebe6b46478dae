//! Paying in tests the way a shopper does: the pay URL, the built-in sandbox gateway's
//! checkout page, its notification. Also the tools of a hostile client: notifications signed
//! with the gateway's own key but saying something else, or signed with another key. And a
//! server whose gateway a test can cut off.

use super::app::TestApp;
use super::http::status_and_json;
use super::proxies::Switch;
use reqwest::StatusCode;
use seckill::clock::SharedClock;
use seckill::config::ProviderKind;
use seckill::payment::alipay::sign::{AppKey, string_to_verify};
use serde_json::{Value, json};
use std::time::Duration;

/// Form pairs, as the protocol passes them.
pub type Params = Vec<(String, String)>;

impl TestApp {
    /// A server on `clock` that takes payments through the built-in sandbox gateway.
    pub async fn spawn_paying(clock: SharedClock) -> Self {
        Self::spawn_with(clock, |c| c.payment.provider = Some(ProviderKind::Sandbox)).await
    }

    /// `POST /api/v1/orders/{id}/pay` with `body` (none when `Value::Null`).
    pub async fn ask_to_pay(&self, token: &str, order: &str, body: Value) -> (StatusCode, Value) {
        self.settle().await;
        let mut request = self
            .client
            .post(self.url(&format!("/api/v1/orders/{order}/pay")))
            .bearer_auth(token);
        if !body.is_null() {
            request = request.json(&body);
        }
        status_and_json(request.send().await.unwrap()).await
    }

    /// The pay URL of an order, asserting the answer's shape.
    pub async fn pay_url(&self, token: &str, order: &str) -> String {
        let (status, body) = self.ask_to_pay(token, order, Value::Null).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["order_id"], order);
        assert_eq!(body["provider"], "sandbox");
        body["pay_url"].as_str().unwrap().to_owned()
    }

    /// Opens the order's checkout page at the sandbox gateway, as the buyer's browser does.
    pub async fn open_checkout(&self, token: &str, order: &str) -> String {
        let pay_url = self.pay_url(token, order).await;
        let response = self.client.get(&pay_url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let page = response.text().await.unwrap();
        assert!(
            page.contains(&format!("/sandbox/alipay/checkout/{order}")),
            "{page}"
        );
        page
    }

    /// Clicks a button (`pay`, `abandon`) of the order's sandbox checkout page; returns the
    /// status and text of the page the browser ends on.
    pub async fn checkout(&self, order: &str, action: &str) -> (StatusCode, String) {
        let response = self
            .client
            .post(self.url(&format!("/sandbox/alipay/checkout/{order}")))
            .form(&[("action", action)])
            .send()
            .await
            .unwrap();
        (response.status(), response.text().await.unwrap())
    }

    /// Pays an order at the sandbox as a shopper does, and waits for the notification to pay
    /// it.
    pub async fn pay_at_sandbox(&self, token: &str, order: &str) {
        self.open_checkout(token, order).await;
        let (status, page) = self.checkout(order, "pay").await;
        assert_eq!(status, StatusCode::OK, "{page}");
        self.wait_for_status(token, order, "paid").await;
    }

    /// The status of an order, as its buyer sees it ("" when they see none).
    pub async fn order_status(&self, token: &str, order: &str) -> String {
        let (_, body) = self
            .get_json_as(token, &format!("/api/v1/orders/{order}"))
            .await;
        body["status"].as_str().unwrap_or_default().to_owned()
    }

    /// Waits (up to 15 s) until the buyer sees their order in `status`.
    pub async fn wait_for_status(&self, token: &str, order: &str, status: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let seen = self.order_status(token, order).await;
            if seen == status {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the order never became {status}: it is {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The signed notification the sandbox would send now for an order's trade.
    pub fn sandbox_notification(&self, order: &str) -> Params {
        let sandbox = self
            .sandbox
            .as_ref()
            .expect("a server paying through the sandbox");
        sandbox
            .notification(seckill::domain::OrderId(order.parse().unwrap()))
            .expect("the sandbox has this trade")
    }

    /// `params` with `changes` made and signed again with the sandbox gateway's own key: a
    /// notification whose signature holds but whose content may not.
    pub async fn signed_by_gateway(&self, params: &Params, changes: &[(&str, &str)]) -> Params {
        let pem = self
            .state
            .store
            .setting("sandbox_gateway_key")
            .await
            .unwrap()
            .expect("the sandbox keeps its key");
        resign(&AppKey::parse(&pem).unwrap(), params, changes)
    }

    /// POSTs a notification to the shop, as the gateway does; the shop's answer text.
    pub async fn notify(&self, params: &Params) -> String {
        let response = self
            .client
            .post(self.url("/pay/alipay/notify"))
            .form(params)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    }

    /// The payment records kept for an order: (key, trade status) pairs.
    pub async fn payment_records(&self, order: &str) -> Vec<(String, String)> {
        let pool = self.pool().await;
        let rows: Vec<(String, String)> = sqlx::query_as(self.db.sql(
            "SELECT record_key, trade_status FROM payment_records WHERE order_id = ? \
             ORDER BY received_at",
        ))
        .bind(order.parse::<i64>().unwrap())
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows
    }
}

/// `params` with `changes` made (a new key is added) and signed with `key`.
pub fn resign(key: &AppKey, params: &Params, changes: &[(&str, &str)]) -> Params {
    let mut params: Params = params
        .iter()
        .filter(|(k, _)| k != "sign")
        .cloned()
        .collect();
    for (key, value) in changes {
        match params.iter_mut().find(|(k, _)| k == key) {
            Some(pair) => pair.1 = (*value).to_owned(),
            None => params.push(((*key).to_owned(), (*value).to_owned())),
        }
    }
    let signature = key
        .sign(&string_to_verify(
            params.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ))
        .unwrap();
    params.push(("sign".to_owned(), signature));
    params
}

/// A value of a form's pairs.
pub fn param<'a>(params: &'a Params, key: &str) -> &'a str {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// The body of a pay request with the mobile channel.
pub fn wap() -> Value {
    json!({ "channel": "wap" })
}

/// The payment window of a test server (the default): an unpaid order is cancelled after it.
pub const WINDOW_MS: i64 = 15 * 60 * 1000;

/// A live product of `stock` units (one per buyer) and one order of one unit for each of `n`
/// new buyers: (product, [(token, order id)]).
pub async fn sold(app: &TestApp, stock: i64, n: usize) -> (i64, Vec<(String, String)>) {
    let product = app.live_product(stock, 1).await;
    let tokens = app.users(n).await;
    (product, app.buy_each(&tokens, product).await)
}

/// The sandbox gateway's trade for an order: (status, amount refunded).
pub fn trade(app: &TestApp, order: &str) -> (String, String) {
    let notification = app.sandbox_notification(order);
    (
        param(&notification, "trade_status").to_owned(),
        param(&notification, "refund_fee").to_owned(),
    )
}

/// A server on `clock` paying through its sandbox gateway, which it reaches (and which
/// reaches it) only through the returned switch.
pub async fn spawn_paying_behind_a_switch(clock: SharedClock) -> (Switch, TestApp) {
    let switch = Switch::start().await;
    let app = TestApp::spawn_with(clock, |c| {
        c.payment.provider = Some(seckill::config::ProviderKind::Sandbox);
        c.public_url = Some(switch.url.clone());
    })
    .await;
    switch.forward_to(&app);
    (switch, app)
}
