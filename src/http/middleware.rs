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

/// Every answer in the API's shape and with the [`SECURITY_HEADERS`]: an error without a body,
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
        AnswersFuture::Inner {
            inner: self.inner.call(request),
        }
    }
}

pin_project! {
    /// The future of [`AnswersService`]: the inner answer, then, for a plain-text error only,
    /// the reading of its body (boxed: errors are rare and their rewrite may wait on the body).
    #[project = AnswersProj]
    pub enum AnswersFuture<F> {
        Inner { #[pin] inner: F },
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
                AnswersProj::Inner { inner } => {
                    let Ok(mut response) = ready!(inner.poll(cx));
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
