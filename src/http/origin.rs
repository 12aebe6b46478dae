//! Forged requests: a page of another site can make the shopper's browser post to this one, and
//! the browser sends the session cookie along (a `SameSite=Lax` cookie goes with top-level
//! form posts, and older browsers send it always). So every state-changing request that is
//! authenticated by a cookie must say where it comes from: its `Origin` (or, without one, its
//! `Referer`) must name this site — the `Host` it was sent to, or the configured public URL. A
//! request with neither is refused too: browsers send `Origin` with every POST. A client that
//! authenticates with an `Authorization` header is not a browser acting for someone else, and
//! is not affected.

use crate::error::ApiError;
use crate::http::admin::ADMIN_COOKIE;
use crate::http::extract::{SESSION_COOKIE, cookie};
use axum::extract::Request;
use axum::http::header::{AUTHORIZATION, HOST, ORIGIN, REFERER};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// This site as the public URL names it: its scheme and `host[:port]`. When it is set, a
/// request's `Origin` must have its scheme as well as this site's name or the request's `Host`.
#[derive(Clone, Default)]
pub struct Site(Option<(bool, Arc<str>)>);

/// The scheme and `host[:port]` of an `http` or `https` URL.
struct Origin<'a> {
    https: bool,
    authority: &'a str,
}

impl Site {
    /// The site of `public_url` (`scheme://host[:port][/...]`), if one is configured.
    pub fn new(public_url: Option<&str>) -> Self {
        Self(
            public_url
                .and_then(origin)
                .map(|o| (o.https, Arc::from(o.authority))),
        )
    }
}

/// The refusal of a cookie-authenticated, state-changing request from another site, 403
/// `cross_origin_request`; `None` for any other request. Checked before each route of the app
/// by the router's `Routed` layer.
pub fn refusal(site: &Site, request: &Request) -> Option<Response> {
    if !needs_check(request.method(), request.headers()) || from_site(site, request.headers()) {
        return None;
    }
    let refused = ApiError::client(
        StatusCode::FORBIDDEN,
        "cross_origin_request",
        "this request does not come from this site's pages (its Origin or Referer names \
         another site, or neither is sent); sign-in cookies only work from the site itself",
    );
    Some(refused.into_response())
}

/// A request that changes something and would be authenticated by a cookie of ours.
fn needs_check(method: &Method, headers: &HeaderMap) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        && !headers.contains_key(AUTHORIZATION)
        && (cookie(headers, SESSION_COOKIE).is_some() || cookie(headers, ADMIN_COOKIE).is_some())
}

/// Whether the request's `Origin` (else `Referer`) is this site: the `Host` it was sent to or
/// the public URL's name, with the public URL's scheme when one is configured.
fn from_site(site: &Site, headers: &HeaderMap) -> bool {
    let Some(source) = headers
        .get(ORIGIN)
        .or_else(|| headers.get(REFERER))
        .and_then(|v| v.to_str().ok())
        .and_then(origin)
    else {
        return false;
    };
    let host = headers.get(HOST).and_then(|v| v.to_str().ok());
    let named = |authority: &str| authority.eq_ignore_ascii_case(source.authority);
    match &site.0 {
        Some((https, ours)) => source.https == *https && (host.is_some_and(named) || named(ours)),
        None => host.is_some_and(named),
    }
}

/// The scheme and `host[:port]` of an `http` or `https` URL; `None` for anything else (`null`,
/// a path).
fn origin(url: &str) -> Option<Origin<'_>> {
    let (https, rest) = match url.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (false, url.strip_prefix("http://")?),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    (!authority.is_empty() && !authority.contains('@')).then_some(Origin { https, authority })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn only_cookie_authenticated_changes_are_checked() {
        let cookie = ("cookie", "seckill_session=abc");
        assert!(needs_check(&Method::POST, &headers(&[cookie])));
        assert!(needs_check(
            &Method::DELETE,
            &headers(&[("cookie", "x=1; seckill_admin=z")])
        ));
        assert!(!needs_check(&Method::GET, &headers(&[cookie])));
        assert!(!needs_check(
            &Method::POST,
            &headers(&[cookie, ("authorization", "Bearer t")])
        ));
        assert!(!needs_check(
            &Method::POST,
            &headers(&[("cookie", "seckill_lang=en")])
        ));
        assert!(!needs_check(&Method::POST, &headers(&[])));
    }

    #[test]
    fn the_origin_or_else_the_referer_must_name_the_host_or_the_public_site() {
        let site = Site::new(Some("https://shop.example/"));
        let host = ("host", "10.0.0.5:8080");
        for ok in [
            headers(&[host, ("origin", "https://10.0.0.5:8080")]),
            headers(&[host, ("origin", "https://SHOP.example")]),
            headers(&[host, ("referer", "https://shop.example/orders?x=1")]),
        ] {
            assert!(from_site(&site, &ok), "{ok:?}");
        }
        for refused in [
            headers(&[host]),
            headers(&[host, ("origin", "null")]),
            headers(&[host, ("origin", "https://evil.example")]),
            headers(&[host, ("origin", "https://shop.example.evil.example")]),
            headers(&[
                host,
                ("origin", "https://evil.example"),
                ("referer", "https://shop.example/"),
            ]),
            headers(&[host, ("referer", "https://shop.example@evil.example/")]),
            headers(&[host, ("origin", "https://10.0.0.5:8081")]),
            // The public URL's scheme, not another.
            headers(&[host, ("origin", "http://10.0.0.5:8080")]),
            headers(&[host, ("origin", "http://shop.example")]),
            headers(&[host, ("referer", "http://shop.example/orders")]),
        ] {
            assert!(!from_site(&site, &refused), "{refused:?}");
        }
        // An http site refuses an https origin of its own name, and the other way round;
        // without a public URL any scheme of the request's Host is the site.
        let plain = Site::new(Some("http://shop.example"));
        let host = ("host", "shop.example");
        assert!(from_site(
            &plain,
            &headers(&[host, ("origin", "http://shop.example")])
        ));
        assert!(!from_site(
            &plain,
            &headers(&[host, ("origin", "https://shop.example")])
        ));
        let unset = Site::default();
        assert!(from_site(
            &unset,
            &headers(&[host, ("origin", "https://shop.example")])
        ));
        assert!(from_site(
            &unset,
            &headers(&[host, ("origin", "http://shop.example")])
        ));
        assert!(
            !from_site(&Site::default(), &headers(&[("origin", "http://a")])),
            "no Host"
        );
    }
}
