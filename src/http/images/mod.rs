//! Product images, served by this binary at `/images/{id}`: operators upload them (through the
//! admin API or the console), the database keeps them so every server of a cluster serves the
//! same ones, and each process keeps the recent ones in memory ([`cache`]) and the ids of all
//! of them ([`known`]), so neither a sale page's crowd nor a flood of made-up ids reads the
//! database for each request.
//!
//! An image never changes (its id is the hash of its bytes), so it is cacheable forever. It is
//! served so that one opened on its own can run nothing: its declared type only, never
//! sniffed, under a policy that allows nothing.

mod cache;
mod known;

use super::AppState;
use super::assets::not_modified;
use crate::domain::{Image, ImageId};
use crate::error::{ApiError, AppPath};
use crate::store::{Store, StoreResult};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cache::ImageCache;
use known::{Known, KnownIds};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes of images each process keeps in memory.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// What every image answer carries, the `304` too.
const CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// An image opened on its own, or a file that only looks like one, may load and run nothing.
const POLICY: &str = "default-src 'none'; sandbox";

/// The shop's images: kept in the store, known and cached in this process.
pub struct Images {
    store: Arc<dyn Store>,
    /// Largest upload taken, in bytes.
    max_bytes: usize,
    cache: Mutex<ImageCache>,
    known: KnownIds,
    /// Reads of images under way, by id: a crowd's first views of an image wait for one read
    /// instead of each making its own.
    reading: Mutex<HashMap<ImageId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Images {
    /// Images kept in `store`, uploads of at most `max_bytes` each.
    pub fn new(store: Arc<dyn Store>, max_bytes: usize) -> Self {
        Self {
            store,
            max_bytes,
            cache: Mutex::new(ImageCache::new(CACHE_BYTES)),
            known: KnownIds::default(),
            reading: Mutex::default(),
        }
    }

    /// Largest upload taken, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Checks an upload: its size, its declared type and that its bytes are of that type.
    /// The sale service keeps it (and records who uploaded it); then [`Self::kept`].
    pub fn check(&self, content_type: Option<&str>, bytes: Bytes) -> Result<Image, ApiError> {
        if bytes.len() > self.max_bytes {
            return Err(ApiError::client(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the image is over the limit of {} bytes", self.max_bytes),
            ));
        }
        Ok(Image::parse(content_type, bytes)?)
    }

    /// Takes note of an image the store keeps now, so it is served without a query.
    pub fn kept(&self, image: Image) {
        self.known.add(image.id);
        self.cache().insert(image);
    }

    /// The image `id`, from memory when it can be; `None` when there is none.
    async fn get(&self, id: ImageId) -> StoreResult<Option<Image>> {
        if let Some(image) = self.cache().get(id) {
            return Ok(Some(image));
        }
        if self.known.check(id, &*self.store).await? == Known::No {
            return Ok(None);
        }
        let turn = lock(&self.reading).entry(id).or_default().clone();
        let _turn = turn.lock().await;
        // Read already, maybe, while this request waited its turn.
        let cached = self.cache().get(id);
        let image = match cached {
            Some(image) => Ok(Some(image)),
            None => self.store.image(id).await,
        };
        if let Ok(Some(image)) = &image {
            self.known.add(id);
            self.cache().insert(image.clone());
        }
        // Once cached: whoever comes next finds it there.
        lock(&self.reading).remove(&id);
        image
    }

    fn cache(&self) -> MutexGuard<'_, ImageCache> {
        lock(&self.cache)
    }
}

/// A mutex's value, even if a panic left it poisoned: every change to these maps and the
/// cache is complete before any call that could panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the image `id` is served: what a product's `image_url` names.
pub fn url(id: ImageId) -> String {
    format!("/images/{id}")
}

/// `GET /images/{id}`: the image with its type, cacheable forever; `304` when the client holds
/// it already; `404 unknown_image` for an id that is malformed (answered without a lookup) or
/// names no image.
pub(crate) async fn serve(
    State(state): State<AppState>,
    AppPath(id): AppPath<String>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let image = match ImageId::parse(&id) {
        Some(id) => state.images.get(id).await?,
        None => None,
    };
    let image = image.ok_or_else(|| ApiError::not_found("unknown_image", "no such image"))?;
    let etag = format!("\"{}\"", image.id);
    let mut response = if not_modified(&request, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut response = Response::new(Body::from(image.bytes));
        let content_type = HeaderValue::from_static(image.format.content_type());
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
        response
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    headers.insert(
        header::ETAG,
        HeaderValue::try_from(etag).map_err(anyhow::Error::from)?,
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    Ok(response)
}
