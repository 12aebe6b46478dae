//! Reading answers the way every test does: the HTTP client, a JSON answer's status and body
//! (declared as JSON), an error body's code, times as the API writes them. It knows no server
//! and no backend.

use reqwest::StatusCode;
use serde_json::Value;

/// The status and JSON body of a response (`Value::Null` when the body is not JSON). A JSON
/// body must be declared as such, or clients would not read it as JSON.
pub async fn status_and_json(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let declared_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .is_some_and(|value| value == "application/json");
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    assert!(
        body.is_null() || declared_json,
        "a JSON answer ({status}) must say Content-Type: application/json"
    );
    (status, body)
}

/// An HTTP client for the tests, once the TLS provider every client of the process needs is
/// installed.
pub fn client_builder() -> reqwest::ClientBuilder {
    seckill::payment::install_crypto_provider();
    reqwest::Client::builder()
}

/// RFC 3339 for a Unix-millisecond time.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339()
}

/// The error code of an error body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}

/// A request sent and its answer read as text, for the tests that read pages and bodies whole.
pub trait TextOfAnswer {
    /// Sends the request and reads the answer's body, failing the test if either fails.
    fn text_of_answer(self) -> impl std::future::Future<Output = String>;
}

impl TextOfAnswer for reqwest::RequestBuilder {
    async fn text_of_answer(self) -> String {
        self.send().await.unwrap().text().await.unwrap()
    }
}

/// Asserts that a console form was refused: `422`, its page giving `reason`.
pub async fn assert_form_refused(response: reqwest::Response, reason: &str) {
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let page = response.text().await.unwrap();
    assert!(page.contains(reason), "{reason:?} not in {page}");
}
