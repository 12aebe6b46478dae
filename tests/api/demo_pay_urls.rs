//! `serve --demo` listening on every address, without `public_url`: a shopper who reached the
//! server at one of its addresses is sent to pay, and back, at that address, never at
//! `127.0.0.1` (which on the shopper's machine is the shopper's own) and never at whatever
//! `Host` header the shopper sent.

use crate::support::processes::launch;
use crate::support::{client_builder, status_and_json};
use serde_json::{Value, json};
use std::process::Stdio;
use tokio::process::Command;

#[tokio::test]
async fn a_demo_on_every_address_sends_shoppers_to_pay_at_the_address_they_reached() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_seckill"));
    command
        .args(["serve", "--demo", "--addr", "0.0.0.0:0"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let (_server, first) = launch(command, "serve --demo").await;
    let port = first
        .split("http://0.0.0.0:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address on every interface in {first:?}"));
    // Any 127.0.0.0/8 address reaches the loopback: this one stands for the server's address
    // on the shop's network.
    let reached = format!("http://127.0.0.2:{port}");
    let client = client_builder().build().unwrap();

    let (status, session) = status_and_json(
        client
            .post(format!("{reached}/api/v1/sessions"))
            .json(&json!({"username": "alice", "password": "alice-password"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{session}");
    let token = session["token"].as_str().unwrap().to_owned();
    let order = first_accepted_order(&client, &reached, &token).await;

    let pay = client
        .post(format!("{reached}/api/v1/orders/{order}/pay"))
        .bearer_auth(&token)
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    let (status, link) = status_and_json(pay).await;
    assert_eq!(status, 200, "{link}");
    let url = reqwest::Url::parse(link["pay_url"].as_str().unwrap()).unwrap();
    assert_eq!(url.origin().ascii_serialization(), reached, "{url}");
    for back in ["notify_url", "return_url"] {
        let value = url
            .query_pairs()
            .find(|(key, _)| key == back)
            .unwrap_or_else(|| panic!("no {back} in {url}"))
            .1;
        assert!(
            value.starts_with(&format!("{reached}/pay/alipay/")),
            "{back} = {value}"
        );
    }
    let page = client.get(url).send().await.unwrap();
    assert_eq!(page.status(), 200, "the sandbox's pay page answers there");
}

/// An order of the demo's live sale, bought by `token`: the first product that sells.
async fn first_accepted_order(client: &reqwest::Client, base: &str, token: &str) -> String {
    let (_, events) = status_and_json(
        client
            .get(format!("{base}/api/v1/events"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    for event in events.as_array().expect("a list of events") {
        let (_, shown) = status_and_json(
            client
                .get(format!("{base}/api/v1/events/{}", event["id"]))
                .send()
                .await
                .unwrap(),
        )
        .await;
        for product in shown["products"].as_array().into_iter().flatten() {
            let buy = json!({"product_id": product["id"], "quantity": 1});
            let answer = client
                .post(format!("{base}/api/v1/orders"))
                .bearer_auth(token)
                .json(&buy)
                .send()
                .await
                .unwrap();
            let (status, order) = status_and_json(answer).await;
            if status == 202 {
                return order_id(&order);
            }
        }
    }
    panic!("no product of the demo sold: {events}");
}

/// An order's id as the API writes it.
fn order_id(order: &Value) -> String {
    match &order["order_id"] {
        Value::String(id) => id.clone(),
        other => other.to_string(),
    }
}
