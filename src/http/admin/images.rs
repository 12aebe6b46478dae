//! A product's image in the console: the product page's file form uploads it (multipart, with
//! the session's CSRF token) and makes it the product's `image_url`, through the same checks
//! and store as the admin API's upload.

use super::catalog::product_page;
use super::{AdminSession, MAX_FORM_FIELDS, see_other};
use crate::domain::{ImageUrl, Operator, ProductId};
use crate::error::{ApiError, AppPath};
use crate::http::AppState;
use crate::http::images::url;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::multipart::{Multipart, MultipartError, MultipartRejection};
use axum::response::Response;

/// Room in an upload's body for what is not the image: the CSRF token, the parts' headers and
/// boundaries. The route's body limit is the largest image and this.
pub const FORM_ROOM: usize = 16 * 1024;

/// What the form sends.
#[derive(Default)]
struct Upload {
    csrf: String,
    /// The type the browser declares for the file.
    content_type: Option<String>,
    bytes: Bytes,
}

/// Reads the form's fields, at most [`MAX_FORM_FIELDS`]; others are skipped unread.
async fn read(mut form: Multipart) -> Result<Upload, MultipartError> {
    let mut upload = Upload::default();
    for _ in 0..MAX_FORM_FIELDS {
        let Some(field) = form.next_field().await? else {
            break;
        };
        match field.name() {
            Some("csrf") => upload.csrf = field.text().await?,
            Some("image") => {
                upload.content_type = field.content_type().map(str::to_owned);
                upload.bytes = field.bytes().await?;
            }
            _ => {}
        }
    }
    Ok(upload)
}

/// `POST /admin/products/{id}/image`: keeps the image and shows it on the product, or shows
/// the product page again with what is wrong with the file.
pub(crate) async fn upload(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    session: AdminSession,
    form: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let id = ProductId(id);
    let form = form.map_err(|e| ApiError::unreadable_body(e.status(), e.body_text()))?;
    let upload = match read(form).await {
        Ok(upload) => upload,
        Err(e) => {
            let error = ApiError::unreadable_body(e.status(), e.body_text());
            return shown_on_page(&state, &session, id, error).await;
        }
    };
    session.check_csrf(&upload.csrf)?;
    if state.sale.product(id).await?.is_none() {
        return Err(ApiError::unknown_product());
    }
    let checked = state
        .images
        .check(upload.content_type.as_deref(), upload.bytes);
    let image = match checked {
        Ok(image) => image,
        Err(e) => return shown_on_page(&state, &session, id, e).await,
    };
    let served_at = ImageUrl::parse(&url(image.id))?;
    state
        .sale
        .set_product_image(&Operator::Console, id, &image, served_at)
        .await?;
    state.images.kept(image);
    Ok(see_other(&format!("/admin/products/{}", id.0)))
}

/// The product page again, with the operator's mistake shown under the status it answers; a
/// server failure stays an error.
async fn shown_on_page(
    state: &AppState,
    session: &AdminSession,
    id: ProductId,
    error: ApiError,
) -> Result<Response, ApiError> {
    let ApiError::Client {
        status, message, ..
    } = error
    else {
        return Err(error);
    };
    product_page(state, session, id, status, Some(message.into_owned())).await
}
