//! The API described: `/api/openapi.json` documents exactly the routes the router serves under
//! `/api/v1` and `/readyz`, and `/api/docs` lists every one of them.
//!
//! axum cannot list a router's routes, so the routes are read from the source, as
//! `tests/layers.rs` reads it: every `.route("/api/v1/…", method(…)…)` call under `src/http`.

use crate::support::TestApp;
use reqwest::StatusCode;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The methods axum's routing functions are named after.
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `(METHOD, path)` of every `.route(…)` call in `source` whose path starts with `/api/v1`, or
/// is `/readyz` (documented for load balancers).
fn routes_in(source: &str) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    let calls: Vec<&str> = source.split(".route(").skip(1).collect();
    for call in calls {
        // The call runs to the next route or to the line that closes the function.
        let call: String = call
            .lines()
            .enumerate()
            .take_while(|(at, line)| *at == 0 || !line.trim_start().starts_with('}'))
            .map(|(_, line)| format!("{line}\n"))
            .collect();
        let Some(path) = call
            .trim_start()
            .strip_prefix('"')
            .and_then(|s| s.split('"').next())
        else {
            continue;
        };
        if !(path.starts_with("/api/v1") || path == "/readyz") {
            continue;
        }
        let handlers = &call[call.find(path).unwrap() + path.len()..];
        for method in METHODS {
            let mut rest = handlers;
            while let Some(at) = rest.find(&format!("{method}(")) {
                let before = rest[..at].chars().next_back();
                if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    routes.insert((method.to_uppercase(), path.to_owned()));
                }
                rest = &rest[at + method.len()..];
            }
        }
    }
    routes
}

fn routed() -> BTreeSet<(String, String)> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http"),
        &mut files,
    );
    files
        .iter()
        .flat_map(|file| routes_in(&fs::read_to_string(file).unwrap()))
        .collect()
}

#[test]
fn the_source_reader_finds_chained_and_wrapped_methods() {
    let source = r#"
        Router::new()
            .route("/api/v1/orders", post(place_order).get(my_orders))
            .route(
                "/api/v1/admin/products/{id}",
                patch(update_product),
            )
            .route("/static/{*path}", get(assets::serve))
            .route("/api/v1/x", get(budget_post))
    }
    "#;
    let found: Vec<(String, String)> = routes_in(source).into_iter().collect();
    let expected = [
        ("GET", "/api/v1/orders"),
        ("GET", "/api/v1/x"),
        ("PATCH", "/api/v1/admin/products/{id}"),
        ("POST", "/api/v1/orders"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(found, expected);
}

#[tokio::test]
async fn every_api_route_is_documented_and_every_documented_route_is_served() {
    let app = TestApp::spawn().await;
    let (status, doc) = app.get_json("/api/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if item.get(method).is_some() {
                documented.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let routed = routed();
    assert!(routed.len() >= 15, "{routed:?}");
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routed but not documented: {undocumented:?}; documented but not routed: {unrouted:?}"
    );

    // Every documented operation is served: not the router's 404 or 405.
    for (method, path) in &documented {
        let url = app.url(&path.replace("{id}", "1"));
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let answer = app.client.request(method, url).send().await.unwrap();
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        assert_ne!(body["error"]["code"], "method_not_allowed", "{path}");
        assert_ne!(body["error"]["code"], "not_found", "{path}");
    }

    let page = app.client.get(app.url("/api/docs")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = page.text().await.unwrap();
    for (method, path) in &documented {
        assert!(
            page.contains(&format!("{method} {path}")),
            "{method} {path}"
        );
    }
    for code in [
        "sold_out",
        "unknown_product",
        "order_pending",
        "rate_limited",
    ] {
        assert!(page.contains(code), "{code}");
    }
    app.stop().await;
}
