//! The API described: an OpenAPI 3.1 document assembled from the handlers' `#[utoipa::path]`
//! annotations and their types' `ToSchema`, served at `/api/openapi.json`, and a reference page
//! rendered from that same document at `/api/docs`. Both are built once, when the router is.

use super::api::{admin, admin_orders, admin_users, catalog, guard, images, orders, sessions};
use super::readiness;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::Value;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// Every operation under `/api/v1`, and `/readyz`; a handler left out here is missing from the
/// document, which the `openapi` API test catches.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "seckill",
        description = "The flash-sale JSON API. Every error answers \
            `{\"error\": {\"code\", \"message\"}}` with a stable `code`; each operation lists \
            the codes it can answer. Any route also answers `405 method_not_allowed` to a \
            method it does not take, and an unknown path is `404 not_found`."
    ),
    paths(
        sessions::register,
        sessions::sign_in,
        sessions::sign_out,
        guard::registration_challenge,
        catalog::list_events,
        catalog::show_event,
        catalog::show_product,
        orders::place_order,
        guard::buy_challenge,
        guard::buy_token,
        orders::my_orders,
        orders::my_order,
        orders::pay,
        orders::cancel,
        admin::list_events,
        admin::create_event,
        admin::update_event,
        admin::list_products,
        admin::audit_log,
        admin::create_product,
        admin::update_product,
        admin::add_stock,
        admin::pause_product,
        admin::resume_product,
        admin::end_product,
        admin::end_event,
        images::upload,
        admin_orders::search_orders,
        admin_orders::show_order,
        admin_orders::refund_order,
        admin_users::search_users,
        admin_users::disable_user,
        admin_users::enable_user,
        readiness::readyz,
    ),
    modifiers(&SecuritySchemes),
    tags(
        (name = "sessions", description = "Accounts, signing in and out"),
        (name = "catalog", description = "Sale events and products, open to everybody"),
        (name = "orders", description = "Buying and the buyer's own orders"),
        (name = "admin", description = "The operator's changes, behind the admin token"),
        (name = "operations", description = "For load balancers and orchestrators"),
    )
)]
struct ApiDoc;

/// The three ways a request proves who sends it: a shopper's session token as a bearer header
/// or as the pages' cookie, and the operator's admin token.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "session_bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The token `POST /api/v1/sessions` answers"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session_cookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                super::extract::SESSION_COOKIE,
                "The same token, as the cookie signing in sets",
            ))),
        );
        components.add_security_scheme(
            "admin_bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The admin token the server is configured with"))
                    .build(),
            ),
        );
    }
}

/// The API's OpenAPI document, as JSON.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("an OpenAPI document serializes");
    add_extractor_errors(&mut doc);
    doc
}

/// The errors an operation can get before its handler runs, written once here for every
/// operation they apply to instead of on each handler: the panic guard's `500 internal`, the
/// sign-in extractors' `401 unauthorized`, the operator routes' `429 rate_limited`, `AppJson`'s
/// rejections of a required JSON body and `AppPath`'s `404 not_found`. Each code joins the operation's answer for its status, or
/// makes that answer.
fn add_extractor_errors(doc: &mut Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for item in paths.values_mut() {
        for method in METHODS {
            let Some(op) = item.get_mut(method) else {
                continue;
            };
            let mut errors = vec![(
                "500",
                "`internal`: something failed on the server's side; the request may be retried",
            )];
            let security = op["security"].to_string();
            if security.contains("admin_bearer") {
                errors.push(("401", "`unauthorized`: no valid admin token"));
                errors.push((
                    "429",
                    "`rate_limited`: too many operator requests from this address (counted \
                     before the token is checked); retry after the `Retry-After` seconds",
                ));
            } else if security.contains("session_bearer") {
                errors.push(("401", "`unauthorized`: no valid session token"));
            }
            // Any body meets the body limit; an operation that says so itself keeps its words.
            if op.get("requestBody").is_some() && op["responses"].get("413").is_none() {
                errors.push(("413", "`body_too_large`: the body is over the size limit"));
            }
            let json_body = &op["requestBody"]["content"]["application/json"];
            if op["requestBody"]["required"] == true && !json_body.is_null() {
                errors.extend([
                    (
                        "400",
                        "`malformed_json`: the body is not JSON; `bad_request`: the body could \
                         not be read",
                    ),
                    (
                        "415",
                        "`unsupported_media_type`: the body is not sent as `application/json`",
                    ),
                    (
                        "422",
                        "`invalid_body`: a field is missing, unknown or of the wrong type",
                    ),
                ]);
            }
            let params = op["parameters"].as_array().into_iter().flatten();
            if params.into_iter().any(|p| p["in"] == "path") {
                errors.push(("404", "`not_found`: the id is not a number"));
            }
            for (status, text) in errors {
                add_error(op, status, text);
            }
        }
    }
}

/// Puts the error `text` first in `op`'s answer for `status`, making the answer if it has none.
fn add_error(op: &mut Value, status: &str, text: &str) {
    let answer = &mut op["responses"][status];
    match answer["description"].as_str() {
        Some(theirs) => answer["description"] = Value::from(format!("{text}; {theirs}")),
        None => {
            *answer = serde_json::json!({
                "description": text,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            });
        }
    }
}

/// The document as JSON and as its reference page, built once, when the router is.
#[derive(Clone)]
pub struct Docs {
    /// The body of `/api/openapi.json`.
    json: Bytes,
    /// The body of `/api/docs`.
    html: Bytes,
}

impl Docs {
    /// Assembles the document and renders its page.
    pub fn build() -> Self {
        let value = document();
        let html = reference_page(&value)
            .render()
            .expect("the reference page renders into a String");
        Self {
            json: Bytes::from(value.to_string()),
            html: Bytes::from(html),
        }
    }
}

/// `GET /api/openapi.json`.
pub(crate) async fn json(State(docs): State<Docs>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], docs.json)
}

/// `GET /api/docs`.
pub(crate) async fn page(State(docs): State<Docs>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        docs.html,
    )
}

/// The reference page: one section per operation, in path order.
#[derive(Template)]
#[template(
    ext = "html",
    source = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }} API reference</title>
<link rel="stylesheet" href="/static/app.css">
</head>
<body>
<main>
<h1>{{ title }} API reference</h1>
<p>{{ description }}</p>
<p>The machine-readable document: <a href="/api/openapi.json">/api/openapi.json</a> (OpenAPI {{ version }}).</p>
{% for op in operations %}
<section>
<h2><code>{{ op.method }} {{ op.path }}</code></h2>
<p>{{ op.summary }}</p>
<p>Sign-in: {{ op.security }}</p>
<p>Request body: {{ op.request }}</p>
<table>
<thead><tr><th scope="col">Status</th><th scope="col">Answer</th><th scope="col">Meaning and error codes</th></tr></thead>
<tbody>
{% for answer in op.answers %}<tr><td>{{ answer.status }}</td><td>{{ answer.schema }}</td><td>{{ answer.description }}</td></tr>
{% endfor %}</tbody>
</table>
</section>
{% endfor %}
</main>
</body>
</html>
"#
)]
struct ReferencePage {
    title: String,
    description: String,
    version: String,
    operations: Vec<OperationView>,
}

/// One operation as the page lists it.
struct OperationView {
    method: String,
    path: String,
    summary: String,
    security: String,
    request: String,
    answers: Vec<AnswerView>,
}

/// One possible answer of an operation.
struct AnswerView {
    status: String,
    schema: String,
    description: String,
}

/// The methods an operation may sit under, in the order the page lists them.
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

fn reference_page(doc: &Value) -> ReferencePage {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            let Some(op) = item.get(method) else {
                continue;
            };
            let request = match &op["requestBody"] {
                Value::Null => "none".to_owned(),
                body => {
                    let json = &body["content"]["application/json"];
                    let name = if json.is_null() {
                        // Not JSON (an image): the types it may be sent as.
                        let types = body["content"].as_object().into_iter().flatten();
                        types
                            .map(|(t, _)| t.as_str())
                            .collect::<Vec<_>>()
                            .join(" | ")
                    } else {
                        schema_name(&json["schema"])
                    };
                    if body["required"] == Value::Bool(true) {
                        name
                    } else {
                        format!("{name} (optional)")
                    }
                }
            };
            let mut answers: Vec<AnswerView> = op["responses"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(status, answer)| AnswerView {
                    status: status.clone(),
                    schema: schema_name(&answer["content"]["application/json"]["schema"]),
                    description: text(&answer["description"]),
                })
                .collect();
            answers.sort_by(|a, b| a.status.cmp(&b.status));
            operations.push(OperationView {
                method: method.to_uppercase(),
                path: path.clone(),
                summary: text(&op["summary"]),
                security: security_names(&op["security"]),
                request,
                answers,
            });
        }
    }
    ReferencePage {
        title: text(&doc["info"]["title"]),
        description: text(&doc["info"]["description"]),
        version: text(&doc["openapi"]),
        operations,
    }
}

/// The name of the schema `schema` refers to, `Name[]` for an array of them, `-` for none.
fn schema_name(schema: &Value) -> String {
    if let Some(location) = schema["$ref"].as_str() {
        return location.rsplit('/').next().unwrap_or(location).to_owned();
    }
    if schema["type"] == "array" {
        return format!("{}[]", schema_name(&schema["items"]));
    }
    if let Some(choices) = schema["oneOf"].as_array() {
        let names: Vec<String> = choices
            .iter()
            .filter(|choice| choice["type"] != "null")
            .map(schema_name)
            .collect();
        return names.join(" | ");
    }
    schema["type"].as_str().unwrap_or("-").to_owned()
}

/// The security schemes an operation accepts, any one of them enough.
fn security_names(security: &Value) -> String {
    let names: Vec<&str> = security
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|requirement| requirement.as_object()?.keys().next())
        .map(String::as_str)
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(" or ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1_with_the_security_schemes() {
        let doc = document();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
        for name in ["session_bearer", "session_cookie", "admin_bearer"] {
            assert!(schemes.contains_key(name), "{name}");
        }
        assert_eq!(schemes["session_cookie"]["name"], "seckill_session");
        assert_eq!(schemes["session_cookie"]["in"], "cookie");
    }

    #[test]
    fn every_operation_names_its_error_codes_and_every_referenced_schema_exists() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let page = reference_page(&doc);
        assert!(!page.operations.is_empty());
        for op in &page.operations {
            assert!(op.answers.iter().any(|a| a.status == "500"), "{}", op.path);
            for answer in &op.answers {
                // `/readyz` tells a load balancer why in its own shape, 503 as 200.
                let own_shape = op.path == "/readyz" && answer.status == "503";
                if answer.status.starts_with(['4', '5']) && !own_shape {
                    assert_eq!(answer.schema, "Error", "{} {}", op.path, answer.status);
                    assert!(answer.description.starts_with('`'), "{}", op.path);
                }
                if answer.schema != "-" {
                    let name = answer.schema.trim_end_matches("[]");
                    assert!(schemas.contains_key(name), "{name}");
                }
            }
        }
    }

    #[test]
    fn what_runs_before_a_handler_adds_its_codes_to_the_operations_it_guards() {
        let doc = document();
        let answer = |path: &str, method: &str, status: &str| {
            doc["paths"][path][method]["responses"][status]["description"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        let buy = |status| answer("/api/v1/orders", "post", status);
        assert!(buy("401").contains("`unauthorized`: no valid session token"));
        for (status, code) in [
            ("400", "malformed_json"),
            ("413", "body_too_large"),
            ("415", "unsupported_media_type"),
            ("500", "internal"),
        ] {
            assert!(buy(status).contains(code), "{status}");
        }
        let invalid = buy("422");
        assert!(invalid.contains("`invalid_body`") && invalid.contains("`invalid_quantity`"));
        let stock = |status| answer("/api/v1/admin/products/{id}/stock", "post", status);
        assert!(stock("401").contains("no valid admin token"));
        assert!(stock("429").contains("`rate_limited`"));
        assert!(stock("404").contains("`not_found`") && stock("404").contains("`unknown_product`"));
        // Open to everybody and without a body: neither 401 nor the body's errors.
        let events = &doc["paths"]["/api/v1/events"]["get"]["responses"];
        for status in ["400", "401", "404", "413", "415", "422", "429"] {
            assert!(events.get(status).is_none(), "{status}");
        }
        // The pay body is optional and read without `AppJson`: no 415, but a limit all the same.
        assert!(answer("/api/v1/orders/{id}/pay", "post", "415").is_empty());
        assert!(answer("/api/v1/orders/{id}/pay", "post", "413").contains("body_too_large"));
        // An image is not JSON: none of `AppJson`'s codes, the upload's own instead.
        let upload = |status| answer("/api/v1/admin/images", "post", status);
        assert!(upload("401").contains("no valid admin token"));
        assert!(upload("413").contains("`body_too_large`"));
        assert!(upload("415").contains("`unsupported_image`"));
        assert!(!upload("415").contains("unsupported_media_type"));
        assert!(upload("422").is_empty() && !upload("400").contains("malformed_json"));
    }

    #[test]
    fn schema_names_read_references_arrays_and_optional_references() {
        let one = serde_json::json!({"$ref": "#/components/schemas/OrderView"});
        assert_eq!(schema_name(&one), "OrderView");
        let many = serde_json::json!({"type": "array", "items": one});
        assert_eq!(schema_name(&many), "OrderView[]");
        let maybe = serde_json::json!({"oneOf": [{"type": "null"}, one]});
        assert_eq!(schema_name(&maybe), "OrderView");
        assert_eq!(schema_name(&Value::Null), "-");
    }

    #[test]
    fn the_buy_says_a_product_sold_out_here_is_answered_before_the_session_is_checked() {
        let doc = document();
        let buy = &doc["paths"]["/api/v1/orders"]["post"];
        let said = buy["description"].as_str().unwrap_or_default();
        assert!(
            said.contains("`409 sold_out` before its session is checked"),
            "{said}"
        );
        let conflict = buy["responses"]["409"]["description"].as_str().unwrap();
        assert!(
            conflict.contains("answered before the session is checked"),
            "{conflict}"
        );
    }

    #[test]
    fn the_page_escapes_what_it_shows() {
        let doc = serde_json::json!({
            "openapi": "3.1.0",
            "info": {"title": "<t>", "description": "d"},
            "paths": {"/x": {"get": {"summary": "<script>", "responses": {}}}}
        });
        let html = reference_page(&doc).render().unwrap();
        assert!(html.contains("&#60;script&#62;") || html.contains("&lt;script&gt;"));
        assert!(!html.contains("<script>"));
    }
}
