//! The router's own layers as typed tower services: [`Answers`] around every request (errors in
//! the API's JSON shape, the security headers) and [`Routed`] around each route of the app (the
//! origin check, the route's metrics). Each calls the service inside it at once and wraps its
//! future: no clone of the inner service and no boxed future per request, as `from_fn` would
//! make (see `BENCHMARKS.md`).

use super::metrics::{RouteMetrics, method_label};
use super::origin::{self, Site};
use crate::error::ApiError;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;
use tower::{Layer, Service};

/// The headers every answer carries, unless its handler set its own.
pub const SECURITY_HEADERS: [(HeaderName, HeaderValue); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data: https:; frame-ancestors 'none'; \
             form-action 'self'; base-uri 'none'; object-src 'none'",
        ),
    ),
    // Links to other sites (the payment provider) learn nothing of the page's path.
    (
        header::REFERRER_POLICY,
        HeaderValue::from_static("strict-origin-when-cross-origin"),
    ),
    (
        HeaderName::from_static("permissions-policy"),
        HeaderValue::from_static(
            "camera=(), microphone=(), geolocation=(), payment=(), usb=(), interest-cohort=()",
        ),
    ),
    (
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    ),
];

/// Every answer in the API's shape and with the [`SECURITY_HEADERS`]: a panic of the service
/// inside (a handler's) becomes `500 internal` in the API's shape; an error without a body,
/// or with axum's plain text (an extractor's rejection, such as a body over the size limit or a
/// malformed query, or a route's 405 from a router of its own), becomes
/// `{"error": {"code", "message"}}` with the same status and headers, the code named after the
/// status. Answers already in JSON, and the HTML pages for people (the console's forms, the
/// sandbox gateway), pass as they are.
#[derive(Clone, Copy, Default)]
pub struct Answers;

impl<S> Layer<S> for Answers {
    type Service = AnswersService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AnswersService { inner }
    }
}

/// The service of [`Answers`].
#[derive(Clone)]
pub struct AnswersService<S> {
    inner: S,
}

impl<S> Service<Request> for AnswersService<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = AnswersFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match panic::catch_unwind(AssertUnwindSafe(|| self.inner.call(request))) {
            Ok(inner) => AnswersFuture::Inner { inner },
            Err(_) => AnswersFuture::Panicked {
                answer: Some(panicked()),
            },
        }
    }
}

pin_project! {
    /// The future of [`AnswersService`]: the inner answer (or the 500 of a panic in the inner
    /// service's `call`), then, for a plain-text error only, the reading of its body (boxed:
    /// errors are rare and their rewrite may wait on the body).
    #[project = AnswersProj]
    pub enum AnswersFuture<F> {
        Inner { #[pin] inner: F },
        Panicked { answer: Option<Response> },
        Rewriting { rewrite: Pin<Box<dyn Future<Output = Response> + Send>> },
    }
}

impl<F> Future for AnswersFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                AnswersProj::Inner { .. } | AnswersProj::Panicked { .. } => {
                    let mut response = match self.as_mut().project() {
                        AnswersProj::Inner { inner } => {
                            match panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
                                Ok(polled) => {
                                    let Ok(response) = ready!(polled);
                                    response
                                }
                                Err(_) => panicked(),
                            }
                        }
                        AnswersProj::Panicked { answer } => answer.take().unwrap_or_else(panicked),
                        AnswersProj::Rewriting { .. } => unreachable!("matched above"),
                    };
                    let headers = response.headers_mut();
                    for (name, value) in &SECURITY_HEADERS {
                        if !headers.contains_key(name) {
                            headers.insert(name.clone(), value.clone());
                        }
                    }
                    if !needs_rewrite(&response) {
                        return Poll::Ready(Ok(response));
                    }
                    let rewrite = Box::pin(rewrite(response));
                    self.set(AnswersFuture::Rewriting { rewrite });
                }
                AnswersProj::Rewriting { rewrite } => return rewrite.as_mut().poll(cx).map(Ok),
            }
        }
    }
}

/// The answer to a request whose handler panicked (the panic hook has reported the panic).
fn panicked() -> Response {
    ApiError::Internal(anyhow::anyhow!("a request handler panicked")).into_response()
}

/// Whether an answer is an error without a body or with a plain-text one.
fn needs_rewrite(response: &Response) -> bool {
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE);
    let plain = content_type.is_none_or(|value| value.as_bytes().starts_with(b"text/plain"));
    (status.is_client_error() || status.is_server_error()) && plain
}

/// The longest error body of axum's own that is kept as the message; axum's rejections are one
/// sentence.
const MAX_REJECTION_TEXT: usize = 1024;

/// A plain-text error as `{"error": {"code", "message"}}`, its status and headers kept.
async fn rewrite(response: Response) -> Response {
    let status = response.status();
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT).await;
    let message = match text.as_deref().map(String::from_utf8_lossy) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => status
            .canonical_reason()
            .unwrap_or("the request was refused")
            .to_owned(),
    };
    let error = if status.is_server_error() {
        ApiError::Internal(anyhow::anyhow!("{status}: {message}"))
    } else {
        ApiError::client(status, code_of(status), message)
    };
    let mut answer = error.into_response();
    let own: Vec<HeaderName> = answer.headers().keys().cloned().collect();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH && !own.contains(name) {
            answer.headers_mut().append(name.clone(), value.clone());
        }
    }
    answer
}

/// The error code of a client error that carried no code of its own.
fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::LENGTH_REQUIRED => "length_required",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_input",
        StatusCode::TOO_MANY_REQUESTS => "rate_limited",
        _ => "bad_request",
    }
}

/// What runs before each route of the app, outermost first: its metrics (counted and timed by
/// method, its route pattern and status), then the origin check of a cookie-authenticated
/// change (see [`origin`]). Built for one route, so it knows its pattern without reading it
/// from the request.
#[derive(Clone)]
pub struct Routed {
    metrics: Arc<RouteMetrics>,
    site: Site,
}

impl Routed {
    /// The layer of the route `path` of a site `site`.
    pub fn new(path: &'static str, site: Site) -> Self {
        Self {
            metrics: Arc::new(RouteMetrics::new(path)),
            site,
        }
    }
}

impl<S> Layer<S> for Routed {
    type Service = RoutedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RoutedService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`Routed`].
#[derive(Clone)]
pub struct RoutedService<S> {
    inner: S,
    layer: Routed,
}

impl<S> Service<Request> for RoutedService<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = RoutedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let method = method_label(request.method());
        let started = Instant::now();
        let answer = match origin::refusal(&self.layer.site, &request) {
            Some(refused) => Answer::Refused {
                refused: Some(refused),
            },
            None => Answer::Inner {
                inner: self.inner.call(request),
            },
        };
        RoutedFuture {
            answer,
            metrics: Arc::clone(&self.layer.metrics),
            method,
            started,
        }
    }
}

pin_project! {
    /// The future of [`RoutedService`]: the route's answer, or the origin check's refusal.
    #[project = AnswerProj]
    enum Answer<F> {
        Inner { #[pin] inner: F },
        Refused { refused: Option<Response> },
    }
}

pin_project! {
    /// The future of [`RoutedService`]: the answer, measured when it is ready.
    pub struct RoutedFuture<F> {
        #[pin]
        answer: Answer<F>,
        metrics: Arc<RouteMetrics>,
        method: &'static str,
        started: Instant,
    }
}

impl<F> Future for RoutedFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.answer.project() {
            AnswerProj::Inner { inner } => {
                let Ok(response) = ready!(inner.poll(cx));
                response
            }
            AnswerProj::Refused { refused } => refused
                .take()
                .expect("a refusal's future is polled once it is ready"),
        };
        let took = this.started.elapsed().as_secs_f64();
        this.metrics
            .record(this.method, response.status().as_u16(), took);
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    /// The status, the content type and the JSON body of `app`'s answer to `GET /`.
    async fn answer<S>(app: S) -> (StatusCode, String, serde_json::Value, Response)
    where
        S: Service<Request, Response = Response, Error = Infallible>,
    {
        let request = Request::get("/").body(Body::empty()).unwrap();
        let Ok(response) = app.oneshot(request).await;
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, 64 * 1024).await.unwrap();
        let content_type = parts.headers[header::CONTENT_TYPE].to_str().unwrap();
        let json = serde_json::from_slice(&bytes).unwrap();
        let (status, content_type) = (parts.status, content_type.to_owned());
        (
            status,
            content_type,
            json,
            Response::from_parts(parts, Body::empty()),
        )
    }

    fn assert_internal(status: StatusCode, content_type: &str, json: &serde_json::Value) {
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        assert_eq!(json["error"]["code"], "internal", "{json}");
        assert!(json["error"]["message"].is_string(), "{json}");
    }

    #[tokio::test]
    async fn a_handler_that_panics_is_answered_500_in_the_api_shape() {
        async fn boom() -> &'static str {
            panic!("a handler's bug")
        }
        let app = Answers.layer(Router::new().route("/", get(boom)));
        let (status, content_type, json, response) = answer(app).await;
        assert_internal(status, &content_type, &json);
        for (name, _) in &SECURITY_HEADERS {
            assert!(response.headers().contains_key(name), "{name}");
        }
    }

    #[tokio::test]
    async fn a_service_that_panics_when_called_is_answered_500_in_the_api_shape() {
        #[derive(Clone)]
        struct PanicsWhenCalled;
        impl Service<Request> for PanicsWhenCalled {
            type Response = Response;
            type Error = Infallible;
            type Future = std::future::Ready<Result<Response, Infallible>>;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, _: Request) -> Self::Future {
                panic!("a service's bug")
            }
        }
        let (status, content_type, json, _) = answer(Answers.layer(PanicsWhenCalled)).await;
        assert_internal(status, &content_type, &json);
    }
}
