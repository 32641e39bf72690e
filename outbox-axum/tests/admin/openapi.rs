//! `GET /openapi.json`: every route of the admin module's table is in the
//! document with its method, and every schema the document names exists.

use axum::http::{Method, StatusCode};
use serde_json::Value;

use super::{call, setup, DbBackend, TOKEN};

/// The `| \`METHOD /path…\` |` rows of the admin module's route table.
fn documented_routes() -> Vec<(String, String)> {
    let source = include_str!("../../src/admin/mod.rs");
    let mut routes = Vec::new();
    for line in source.lines() {
        let Some(cell) = line.strip_prefix("//! | `") else {
            continue;
        };
        let Some((route, _)) = cell.split_once('`') else {
            continue;
        };
        let Some((method, path)) = route.split_once(' ') else {
            continue;
        };
        let path = path.split(['?', ' ']).next().unwrap_or(path);
        if path == "/dashboard" {
            continue; // HTML, not the JSON API.
        }
        routes.push((method.to_lowercase(), path.to_owned()));
    }
    routes
}

fn refs(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "$ref" {
                    found.push(value.as_str().unwrap().to_owned());
                } else {
                    refs(value, found);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, found)),
        _ => {}
    }
}

pub(super) async fn the_openapi_document_covers_every_route(backend: DbBackend) {
    let setup = setup(backend, "admin_openapi", &[]).await;
    let (status, doc) = call(
        &setup.router,
        Method::GET,
        "/openapi.json",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    let routes = documented_routes();
    assert!(routes.len() >= 15, "the table was read: {routes:?}");
    for (method, path) in &routes {
        let operation = &doc["paths"][path][method];
        assert!(
            operation.is_object(),
            "{method} {path} is not in the document"
        );
        assert!(
            operation["responses"]
                .as_object()
                .is_some_and(|r| !r.is_empty()),
            "{method} {path} has no responses"
        );
    }
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(
        found.iter().any(|r| r.ends_with("/ShardsView")),
        "{found:?}"
    );
    for reference in found {
        let name = reference.trim_start_matches("#/components/schemas/");
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{reference} names no schema"
        );
    }
    // Scopes and categories by number and name; `kind` is the table only.
    let schemas = &doc["components"]["schemas"];
    for (schema, field) in [
        ("ShardRef", "scope_name"),
        ("TargetRef", "scope_name"),
        ("ScopeBacklogView", "scope_name"),
        ("DeadLetterView", "category_name"),
        ("HeadView", "category_name"),
        ("HorizonHolderView", "holder"),
    ] {
        assert!(
            schemas[schema]["properties"][field].is_object(),
            "{schema}.{field}: {}",
            schemas[schema]
        );
    }
    assert!(
        schemas["HorizonHolderView"]["properties"]["kind"].is_null(),
        "{}",
        schemas["HorizonHolderView"]
    );
    assert!(
        schemas["ScopeBacklogView"]["properties"]["scope"]["type"]
            .to_string()
            .contains("integer"),
        "{}",
        schemas["ScopeBacklogView"]
    );
    let required = |schema: &str| schemas[schema]["required"].to_string();
    assert!(
        !required("ShardRef").contains("scope_name"),
        "optional on input"
    );
    let (status, _) = call(&setup.router, Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// `GET /asyncapi.json`: the registry's messages, behind the same
/// credentials as every route.
pub(super) async fn the_asyncapi_document_is_served(backend: DbBackend) {
    let setup = setup(backend, "admin_asyncapi", &[]).await;
    let (status, _) = call(&setup.router, Method::GET, "/asyncapi.json", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, doc) = call(
        &setup.router,
        Method::GET,
        "/asyncapi.json",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["asyncapi"], "3.0.0");
    assert_eq!(
        doc["channels"]["OrganizationScope.OrganizationUpdate"]["address"],
        "outbox/{kind}/OrganizationScope/{shard}/OrganizationUpdate"
    );
}
