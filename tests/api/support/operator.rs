//! The operator: the admin token, and the console as a browser uses it (signed in with the
//! token, a session cookie, the CSRF token every form carries).

use super::app::{ADMIN_TOKEN, TestApp};
use super::http::client_builder;
use reqwest::cookie::{CookieStore, Jar};
use reqwest::{Client, StatusCode};
use std::sync::Arc;

/// A browser on `app`'s pages: keeps cookies, follows redirects, and says where its requests
/// come from, as a browser does (`Origin`).
pub fn browser(app: &TestApp) -> Client {
    browser_builder(app).build().unwrap()
}

/// The builder of [`browser`], to change more.
pub fn browser_builder(app: &TestApp) -> reqwest::ClientBuilder {
    let mut origin = reqwest::header::HeaderMap::new();
    origin.insert("origin", app.base.parse().unwrap());
    client_builder().cookie_store(true).default_headers(origin)
}

/// The CSRF token of the first form on a page.
pub fn csrf_of(page: &str) -> String {
    let start = page
        .find(r#"name="csrf" value=""#)
        .expect("a form with a CSRF token")
        + 19;
    page[start..].split('"').next().unwrap().to_owned()
}

/// Posts the console's sign-in form with `token` from `browser`.
pub async fn sign_in(app: &TestApp, browser: &Client, token: &str) -> reqwest::Response {
    browser
        .post(app.url("/admin/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

/// An operator signed in to a console: a browser holding the session cookie, and the CSRF
/// token every form of the session carries.
pub struct Operator {
    /// The browser, holding the session cookie.
    pub browser: Client,
    /// The session's CSRF token, for every form it posts.
    pub csrf: String,
    /// The browser's cookies, to copy the session cookie elsewhere.
    jar: Arc<Jar>,
}

impl Operator {
    /// The session cookie as a `Cookie` header value, to copy into another client.
    pub fn cookie(&self, app: &TestApp) -> String {
        let cookies = self.jar.cookies(&app.url("/admin/").parse().unwrap());
        cookies
            .expect("a session cookie")
            .to_str()
            .unwrap()
            .to_owned()
    }
}

/// Signs in to `app`'s console with the admin token, in a browser of [`browser_builder`].
pub async fn operator(app: &TestApp) -> Operator {
    operator_with(app, browser_builder(app)).await
}

/// Signs in to `app`'s console with the admin token, in a browser built by `builder` (its
/// cookies kept in the operator's jar); reads the session's CSRF token off a console page.
pub async fn operator_with(app: &TestApp, builder: reqwest::ClientBuilder) -> Operator {
    let jar = Arc::new(Jar::default());
    let browser = builder.cookie_provider(jar.clone()).build().unwrap();
    let signed_in = sign_in(app, &browser, ADMIN_TOKEN).await.status();
    assert!(
        signed_in == StatusCode::OK || signed_in == StatusCode::SEE_OTHER,
        "{signed_in}"
    );
    let page = browser.get(app.url("/admin/audit")).send().await.unwrap();
    let csrf = csrf_of(&page.text().await.unwrap());
    Operator { browser, csrf, jar }
}
