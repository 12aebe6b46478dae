//! `POST /api/v1/admin/images`: an operator uploads a product image as the raw body, behind the
//! admin token, and gets back the URL this server serves it at, for a product's `image_url`.
//! The route takes bodies up to `max_image_bytes` instead of the app-wide `max_body_bytes`.

use super::ErrorBody;
use super::admin::token_operator;
use crate::error::{ApiError, AppJson};
use crate::http::AppState;
use crate::http::extract::AdminAuth;
use crate::http::images::url;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use serde::Serialize;
use utoipa::ToSchema;

/// The image file's bytes as they are: not base64, not a form.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ImageFile(pub Vec<u8>);

/// An image kept by the server.
#[derive(Serialize, ToSchema)]
pub(crate) struct ImageView {
    /// The SHA-256 of its bytes, as 64 lowercase hex digits: the same bytes always get the
    /// same id.
    id: String,
    /// Where this server serves it, e.g. `/images/{id}`: a value for a product's `image_url`.
    url: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    content_type: String,
    /// Its size in bytes.
    bytes: usize,
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/images",
    tag = "admin",
    summary = "Upload a product image: PNG, JPEG, GIF or WebP, the raw bytes as the body",
    request_body(
        description = "The image's bytes, with its type as the Content-Type; the type must \
            agree with the file's own first bytes. At most `max_image_bytes`.",
        content(
            (inline(ImageFile) = "image/png"),
            (inline(ImageFile) = "image/jpeg"),
            (inline(ImageFile) = "image/gif"),
            (inline(ImageFile) = "image/webp")
        )
    ),
    security(("admin_bearer" = [])),
    responses(
        (status = 201, description = "The image, kept", body = ImageView),
        (status = 200, description = "The same bytes were kept already: the same image, nothing changed", body = ImageView),
        (status = 400, description = "`empty_image`: the body is empty; `bad_request`: the body could not be read", body = ErrorBody),
        (status = 413, description = "`body_too_large`: the image is over `max_image_bytes`", body = ErrorBody),
        (status = 415, description = "`unsupported_image`: not a PNG, JPEG, GIF or WebP image, or not the type its Content-Type declares", body = ErrorBody),
    )
)]
pub(crate) async fn upload(
    _: AdminAuth,
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, AppJson<ImageView>), ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let image = state.images.check(content_type, body?)?;
    let new = state
        .sale
        .upload_image(&token_operator(&state), &image)
        .await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let view = ImageView {
        id: image.id.to_string(),
        url: url(image.id),
        content_type: image.format.content_type().to_owned(),
        bytes: image.len(),
    };
    state.images.kept(image);
    Ok((status, AppJson(view)))
}
