//! Static files (CSS, script, images) compiled into the binary, so nothing is fetched from a
//! CDN and a single file is the whole deployment. Responses carry an ETag and are cacheable.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "static/"]
struct Static;

/// `GET /static/{*path}`.
pub async fn serve(
    crate::error::AppPath(path): crate::error::AppPath<String>,
    request: HeaderMap,
) -> Response {
    let Some(file) = Static::get(&path) else {
        return crate::error::ApiError::not_found("not_found", "no such file").into_response();
    };
    let mime = match path.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    };
    cached(
        &request,
        file.data,
        &file.metadata.sha256_hash(),
        mime,
        "public, max-age=3600",
    )
}

/// A response with an ETag made of the body's SHA-256 `digest`; `304 Not Modified` when the
/// client already has it.
pub fn cached(
    request: &HeaderMap,
    body: impl Into<Body>,
    digest: &[u8; 32],
    content_type: &'static str,
    cache_control: &'static str,
) -> Response {
    let etag = format!("\"{}\"", hex(&digest[..12]));
    let mut response = if not_modified(request, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = Response::new(body.into());
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    response
}

/// Whether the client's `If-None-Match` names `etag` (compared weakly, as RFC 9110 says for
/// this header) or is `*`: it holds the current content already.
pub fn not_modified(request: &HeaderMap, etag: &str) -> bool {
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
