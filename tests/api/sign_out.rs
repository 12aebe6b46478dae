//! Signing out ends the session on every server, not just in the browser that signed out: a
//! copied token or console cookie stops working on the server that took the sign-out at once,
//! on a second server over the same database within its next reading, and on a server started
//! later from the first request.

use crate::support::operator::{browser_builder, csrf_of, operator_with};
use crate::support::{
    TestApp, TextOfAnswer, client_builder, orders_status, register, sign_in, within_spread,
};
use reqwest::StatusCode;
use reqwest::redirect::Policy;
use seckill::clock::SystemClock;
use std::sync::Arc;

#[tokio::test]
async fn a_signed_out_token_stops_working_here_at_once_and_on_every_server_soon() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    register(&first, "fay").await;
    let (phone, laptop) = (sign_in(&first, "fay").await, sign_in(&first, "fay").await);
    for app in [&first, &second] {
        assert_eq!(orders_status(app, &phone).await, StatusCode::OK);
    }

    let response = first
        .client
        .delete(first.url("/api/v1/sessions"))
        .bearer_auth(&phone)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        orders_status(&first, &phone).await,
        StatusCode::UNAUTHORIZED,
        "ended at once where it was signed out"
    );
    assert!(
        within_spread(async || orders_status(&second, &phone).await == StatusCode::UNAUTHORIZED)
            .await,
        "the other server still takes the ended session"
    );
    for app in [&first, &second] {
        assert_eq!(
            orders_status(app, &laptop).await,
            StatusCode::OK,
            "the other session of the same shopper goes on"
        );
    }

    // The page's sign-out, with the cookie and the form's token, ends the session too; without
    // the token it is refused.
    let sign_out = |csrf: &str| {
        first
            .client
            .post(first.url("/logout"))
            .header("cookie", format!("seckill_session={laptop}"))
            .header("origin", &first.base)
            .form(&[("csrf", csrf)])
            .send()
    };
    let refused = sign_out("forged").await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(orders_status(&first, &laptop).await, StatusCode::OK);
    let page = first
        .client
        .get(first.url("/orders"))
        .header("cookie", format!("seckill_session={laptop}"))
        .text_of_answer()
        .await;
    let csrf = csrf_of(&page);
    let response = sign_out(&csrf).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        orders_status(&first, &laptop).await,
        StatusCode::UNAUTHORIZED
    );

    // A server started after the sign-outs knows them from its first request.
    let third = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    for token in [&phone, &laptop] {
        assert_eq!(orders_status(&third, token).await, StatusCode::UNAUTHORIZED);
    }
    third.stop().await;
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn a_copied_console_cookie_stops_working_once_the_operator_signs_out() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    let no_redirects = browser_builder(&first).redirect(Policy::none());
    let operator = operator_with(&first, no_redirects).await;
    // A copy of the cookie, in a client of its own: the operator's browser forgets it on
    // signing out.
    let cookie = operator.cookie(&first);
    let client = client_builder().redirect(Policy::none()).build().unwrap();
    let console = async |app: &TestApp| {
        client
            .get(app.url("/admin/audit"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(console(&first).await, StatusCode::OK);
    assert_eq!(console(&second).await, StatusCode::OK);

    let signed_out = operator
        .browser
        .post(first.url("/admin/logout"))
        .form(&[("csrf", &operator.csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        console(&first).await,
        StatusCode::SEE_OTHER,
        "sent to the sign-in form"
    );
    assert!(
        within_spread(async || console(&second).await == StatusCode::SEE_OTHER).await,
        "the other server still takes the ended console session"
    );
    second.stop().await;
    first.stop().await;
}
