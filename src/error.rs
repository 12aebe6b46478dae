//! The API error type and the rule for which error goes where.
//!
//! - On the request path, handlers return [`ApiError`]: a client error carries a status, a
//!   stable machine-readable `code` and a human message, and renders as
//!   `{"error": {"code": "...", "message": "..."}}`. Throttling is 429 with `Retry-After`.
//! - Anything unexpected (database down, a bug) becomes [`ApiError::Internal`]: it is logged
//!   with its full chain and the client sees only a generic 500.
//! - Start-up, the CLI and background tasks use `anyhow` with `.context(..)`.

use axum::Json;
use axum::RequestExt;
use axum::body::{Bytes, HttpBody};
use axum::extract::FromRequestParts;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::borrow::Cow;
use std::pin::Pin;

/// An error answered to an API client.
#[derive(Debug)]
pub enum ApiError {
    /// The client's fault, or a business rule said no.
    Client {
        status: StatusCode,
        code: &'static str,
        message: Cow<'static, str>,
        /// Seconds after which trying again may succeed (`Retry-After`).
        retry_after: Option<u64>,
    },
    /// Too many requests; try again after this many seconds.
    RateLimited { retry_after_secs: u64 },
    /// Our fault. Logged, never shown.
    Internal(anyhow::Error),
}

impl ApiError {
    /// A client error with its status, code and message.
    pub fn client(
        status: StatusCode,
        code: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::Client {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, telling the client to try again after `secs` seconds.
    pub fn retry_after(mut self, secs: u64) -> Self {
        if let Self::Client { retry_after, .. } = &mut self {
            *retry_after = Some(secs);
        }
        self
    }

    /// 401: no valid credentials.
    pub fn unauthorized() -> Self {
        Self::client(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "sign in first: a valid session token is required",
        )
    }

    /// 404 with a specific code.
    pub fn not_found(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::client(StatusCode::NOT_FOUND, code, message)
    }

    /// 404 `unknown_product`: every route's answer for a product id that names none.
    pub fn unknown_product() -> Self {
        Self::not_found("unknown_product", "no such product")
    }

    /// 409 with a specific code.
    pub fn conflict(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::client(StatusCode::CONFLICT, code, message)
    }

    /// A body that could not be read: over the size limit (413 `body_too_large`), or broken
    /// in transit (its status, `bad_request`).
    pub fn unreadable_body(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            Self::client(status, "body_too_large", "the request body is too large")
        } else {
            Self::client(status, "bad_request", message)
        }
    }

    /// 422: well-formed JSON whose values break a rule.
    pub fn invalid(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::client(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        Self::Internal(e)
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Internal(e.into())
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    code: &'a str,
    message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = match &self {
            Self::Client {
                status,
                code,
                message,
                ..
            } => (*status, *code, message.as_ref()),
            Self::RateLimited { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many requests: slow down and retry after the Retry-After seconds",
            ),
            Self::Internal(e) => {
                tracing::error!(error = ?e, "internal error");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "something went wrong on our side; the request may be retried",
                )
            }
        };
        let mut response = (
            status,
            AppJson(Body {
                error: Detail { code, message },
            }),
        )
            .into_response();
        let retry_after = match self {
            Self::RateLimited { retry_after_secs } => Some(retry_after_secs),
            Self::Client { retry_after, .. } => retry_after,
            Self::Internal(_) => None,
        };
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Maps axum's JSON rejections onto the API's own error shape and codes.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let message = rejection.body_text();
        match rejection {
            JsonRejection::JsonSyntaxError(_) => {
                Self::client(StatusCode::BAD_REQUEST, "malformed_json", message)
            }
            JsonRejection::JsonDataError(_) => Self::invalid("invalid_body", message),
            JsonRejection::MissingJsonContentType(_) => Self::client(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with Content-Type: application/json",
            ),
            other => Self::unreadable_body(other.status(), message),
        }
    }
}

/// An operator's value refused by its `domain` type: 422 with the type's code and message.
impl From<crate::domain::Refusal> for ApiError {
    fn from(e: crate::domain::Refusal) -> Self {
        Self::invalid(e.code, e.message)
    }
}

/// A raw body (an uploaded image) that could not be read.
impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        Self::unreadable_body(rejection.status(), rejection.body_text())
    }
}

/// An upload that is not an image the shop keeps.
impl From<crate::domain::ImageError> for ApiError {
    fn from(e: crate::domain::ImageError) -> Self {
        use crate::domain::ImageError;
        let (status, code) = match e {
            ImageError::Empty => (StatusCode::BAD_REQUEST, "empty_image"),
            ImageError::Unsupported | ImageError::Mismatch(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_image")
            }
        };
        Self::client(status, code, e.to_string())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::client(StatusCode::NOT_FOUND, "not_found", rejection.body_text())
    }
}

/// A JSON body in, a JSON answer out: `axum::Json` in what it accepts and how it words its
/// rejections, which become [`ApiError`]s so bad JSON gets the app's error shape, but cheaper
/// on the buy path (see the two impls).
pub struct AppJson<T>(pub T);

/// A body sent as plain `application/json` is parsed straight with `serde_json`; anything
/// else, and any body that fails to parse, goes through `axum::Json`, whose rejections name
/// the offending field. The buy path pays only for the parse, not for tracking field paths.
impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for AppJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let plain_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|value| value == "application/json");
        if !plain_json {
            let Json(value) = Json::<T>::from_request(req, state).await?;
            return Ok(Self(value));
        }
        let bytes = read_body(req).await?;
        if let Ok(value) = serde_json::from_slice(&bytes) {
            return Ok(Self(value));
        }
        let Json(value) = Json::<T>::from_bytes(&bytes)?;
        Ok(Self(value))
    }
}

/// The whole body of `req`, within the router's body limit, as axum's `Bytes` extractor reads
/// it and refuses it (413 `body_too_large` past the limit), but a body that arrives as one
/// frame, as a buy's does, is taken as it is: axum's extractor gathers even that one through a
/// queue it allocates and grows.
async fn read_body(req: Request) -> Result<Bytes, ApiError> {
    let mut body = req.into_limited_body();
    let Some(first) = next_data(&mut body).await? else {
        return Ok(Bytes::new());
    };
    if body.is_end_stream() {
        return Ok(first);
    }
    let mut whole = bytes::BytesMut::from(&first[..]);
    while let Some(more) = next_data(&mut body).await? {
        whole.extend_from_slice(&more);
    }
    Ok(whole.freeze())
}

/// The next data of `body`; `None` at its end, or at its trailers, which end its data.
async fn next_data(body: &mut axum::body::Body) -> Result<Option<Bytes>, ApiError> {
    match std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
        None => Ok(None),
        Some(Ok(frame)) => Ok(frame.into_data().ok()),
        Some(Err(e)) => {
            let over_limit =
                std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |e| {
                    e.source()
                })
                .any(|e| e.is::<http_body_util::LengthLimitError>());
            let status = if over_limit {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            };
            Err(ApiError::unreadable_body(
                status,
                "Failed to buffer the request body",
            ))
        }
    }
}

/// Serialized into a `Vec` sized for a typical answer: `axum::Json` grows a 128-byte `BytesMut`
/// through many small writes, which cost more than the serialization itself.
impl<T: Serialize> IntoResponse for AppJson<T> {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(512);
        match serde_json::to_writer(&mut body, &self.0) {
            Ok(()) => JsonBody(body).into_response(),
            // An error body is two strings and always serializes, so this cannot recurse.
            Err(e) => ApiError::Internal(e.into()).into_response(),
        }
    }
}

/// A JSON answer already written (as [`AppJson`] writes one, or by hand where a test holds it to
/// serde's), sent as `application/json`.
pub struct JsonBody(pub Vec<u8>);

impl IntoResponse for JsonBody {
    fn into_response(self) -> Response {
        let mut response = Response::new(axum::body::Body::from(self.0));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// `axum::extract::Path` whose rejections use [`ApiError`]: a malformed id is a 404.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct AppPath<T>(pub T);

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::invalid("invalid_query", rejection.body_text())
    }
}

/// `axum::extract::Query` whose rejections use [`ApiError`]: a malformed or unknown parameter
/// is a 422 `invalid_query`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct AppQuery<T>(pub T);

/// Too many password hashes under way: 503, since the server, not the client, is short.
impl From<crate::auth::password::Busy> for ApiError {
    fn from(_: crate::auth::password::Busy) -> Self {
        Self::client(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "too many sign-ins are being checked right now; nothing changed, try again shortly",
        )
        .retry_after(1)
    }
}

/// Which business refusal is which HTTP answer, in one table.
impl From<crate::sale::BuyError> for ApiError {
    fn from(e: crate::sale::BuyError) -> Self {
        use crate::gate::Rejection;
        use crate::sale::BuyError;
        match e {
            BuyError::UnknownProduct => Self::unknown_product(),
            BuyError::Rejected(Rejection::NotLoaded | Rejection::NotStarted) => Self::client(
                StatusCode::FORBIDDEN,
                "not_started",
                "the sale has not started yet",
            ),
            BuyError::Rejected(Rejection::Ended) => {
                Self::client(StatusCode::FORBIDDEN, "ended", "the sale has ended")
            }
            BuyError::Rejected(Rejection::Paused) => Self::client(
                StatusCode::FORBIDDEN,
                "sale_paused",
                "buying this product is paused for now; nothing was bought, try again later",
            ),
            BuyError::Rejected(Rejection::LimitReached) => Self::conflict(
                "limit_reached",
                "you already bought as many of this product as one buyer may",
            ),
            BuyError::Rejected(Rejection::SoldOut { remaining: 0 }) => {
                Self::conflict("sold_out", "sold out")
            }
            BuyError::Rejected(Rejection::SoldOut { remaining }) => {
                Self::conflict("sold_out", format!("only {remaining} left: ask for fewer"))
            }
            BuyError::Rejected(Rejection::KeyReused) => key_reused(),
            BuyError::Rejected(Rejection::BacklogFull) => Self::client(
                StatusCode::SERVICE_UNAVAILABLE,
                "backlog_full",
                "orders are arriving faster than they can be stored; nothing was bought, try again \
                 shortly",
            )
            .retry_after(1),
            BuyError::Rejected(Rejection::Refilling) => Self::client(
                StatusCode::SERVICE_UNAVAILABLE,
                "refilling",
                "the units left are being moved to where this buy is decided; nothing was bought, \
                 try again shortly",
            )
            .retry_after(1),
            BuyError::Unconfirmed => Self::client(
                StatusCode::SERVICE_UNAVAILABLE,
                "unconfirmed",
                "the order was taken but could not be confirmed in time: it may or may not stand; \
                 retry with the same Idempotency-Key, or look at your orders",
            )
            .retry_after(1),
            BuyError::Unavailable(e) => {
                if BUY_FAILURES_LOGGED.due() {
                    tracing::error!(error = ?e, "buy failed (more within 10 s are not logged)");
                }
                Self::client(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the order could not be taken right now; nothing was bought, try again",
                )
                .retry_after(1)
            }
        }
    }
}

/// When a failed buy was last logged: during an outage every buy of a crowd fails alike, and
/// one line in ten seconds tells as much as thousands (`seckill_buys_total` counts them all).
static BUY_FAILURES_LOGGED: crate::clock::LogEvery =
    crate::clock::LogEvery::new(std::time::Duration::from_secs(10));

/// 409: an `Idempotency-Key` sent again with another request, as the IETF draft on the header
/// answers it.
fn key_reused() -> ApiError {
    ApiError::conflict(
        "idempotency_key_reused",
        "this Idempotency-Key was used for another request; send a new key for a new request",
    )
}

/// A malformed `Idempotency-Key` header: 400, as it is no part of the body.
impl From<crate::domain::InvalidIdempotencyKey> for ApiError {
    fn from(e: crate::domain::InvalidIdempotencyKey) -> Self {
        Self::client(
            StatusCode::BAD_REQUEST,
            "invalid_idempotency_key",
            e.to_string(),
        )
    }
}

impl From<crate::sale::OrderError> for ApiError {
    fn from(e: crate::sale::OrderError) -> Self {
        use crate::sale::OrderError;
        match e {
            OrderError::NotFound => Self::not_found("order_not_found", "no such order"),
            OrderError::AlreadyPaid => Self::conflict("already_paid", "the order is already paid"),
            OrderError::Cancelled => Self::conflict("order_cancelled", "the order was cancelled"),
            OrderError::NotPaid => Self::conflict(
                "not_paid",
                "the order is not paid: there is nothing to refund",
            ),
            OrderError::AlreadyRefunded => {
                Self::conflict("already_refunded", "the order is already refunded")
            }
            OrderError::WindowClosed => Self::conflict(
                "payment_window_closed",
                "the payment window has closed; the order is cancelled",
            ),
            OrderError::Pending => Self::conflict(
                "order_pending",
                "the order is still being recorded; try again in a moment",
            )
            .retry_after(1),
            OrderError::NotConfigured => Self::client(
                StatusCode::SERVICE_UNAVAILABLE,
                "payments_not_configured",
                "this server takes no payments: no payment provider is configured",
            ),
            // Logged by the payment routes, within their budget of lines.
            OrderError::Untrusted(e) => {
                Self::client(StatusCode::BAD_REQUEST, "untrusted_payment", e.to_string())
            }
            OrderError::Mismatch(field) => {
                tracing::warn!(field, "refused a payment that does not match its order");
                Self::client(
                    StatusCode::BAD_REQUEST,
                    "payment_mismatch",
                    format!("the payment's {field} does not match the order"),
                )
            }
            OrderError::KeyReused => key_reused(),
            OrderError::Store(e) => e.into(),
            OrderError::Unavailable(e) => {
                tracing::error!(error = ?e, "the payment provider or the paid queue failed");
                Self::client(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "payments_unavailable",
                    "payments cannot be handled right now; nothing changed, try again",
                )
                .retry_after(1)
            }
        }
    }
}

impl From<crate::sale::AdminError> for ApiError {
    fn from(e: crate::sale::AdminError) -> Self {
        use crate::sale::AdminError;
        match e {
            AdminError::Invalid(refusal) => refusal.into(),
            AdminError::UnknownProduct => Self::unknown_product(),
            AdminError::UnknownEvent => Self::not_found("unknown_event", "no such sale event"),
            AdminError::UnknownUser => Self::not_found("unknown_user", "no such user"),
            AdminError::ProductLoaded => Self::conflict("product_loaded", e.to_string()),
            AdminError::Store(e) => e.into(),
            AdminError::Backend(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: axum::body::Body) -> Request {
        Request::builder().uri("/").body(body).unwrap()
    }

    #[tokio::test]
    async fn a_body_in_several_frames_is_read_whole_and_one_frame_as_it_came() {
        let chunks = ["{\"product_id\"", ": 7, ", "\"quantity\": 1}"];
        let stream = futures_util::stream::iter(
            chunks.map(|chunk| Ok::<_, std::io::Error>(Bytes::from_static(chunk.as_bytes()))),
        );
        let whole = read_body(request(axum::body::Body::from_stream(stream)))
            .await
            .unwrap();
        assert_eq!(&whole[..], chunks.concat().as_bytes());
        let one = read_body(request(axum::body::Body::from("{}")))
            .await
            .unwrap();
        assert_eq!(&one[..], b"{}");
        let none = read_body(request(axum::body::Body::empty())).await.unwrap();
        assert!(none.is_empty());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_as_too_large_and_a_broken_one_as_bad() {
        // Past axum's default limit (2 MiB), which a router's `DefaultBodyLimit` replaces.
        let over = request(axum::body::Body::from(vec![b'x'; 2 * 1024 * 1024 + 1]));
        let refused = read_body(over).await.unwrap_err().into_response();
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let broken = futures_util::stream::iter([
            Ok(Bytes::from_static(b"{")),
            Err(std::io::Error::other("connection reset")),
        ]);
        let refused = read_body(request(axum::body::Body::from_stream(broken)))
            .await
            .unwrap_err()
            .into_response();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }
}
