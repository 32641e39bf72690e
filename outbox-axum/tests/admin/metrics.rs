//! `GET /metrics` (`Admin::metrics`): what the exporter renders, as
//! Prometheus's text format, behind the router's tokens and throttle; a
//! viewer scrapes it. The route reads no store: a `MemoryStore` drainer.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use outbox_axum::admin::Admin;
use outbox_core::{Drainer, MemoryStore, Receivers};
use tower::ServiceExt;

use super::{call, served, tokens, OutboxCategory, TOKEN, VIEWER_TOKEN};

/// What the test's exporter renders.
const SCRAPE: &str = "# TYPE outbox_processed counter\noutbox_processed 3\n";

fn admin() -> Admin<OutboxCategory> {
    let drainer = Drainer::new(
        MemoryStore::new(),
        Receivers::new().discard(OutboxCategory::OrganizationUpdate),
    );
    Admin::new(drainer).login_throttle(10, std::time::Duration::from_secs(60))
}

/// `GET /metrics` with `token`: status, content type and body.
async fn scrape(router: &Router, token: Option<&str>) -> (StatusCode, String, String) {
    let mut request = Request::get("/metrics");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

/// A viewer and an operator scrape the exporter's text; no token is 401;
/// wrong tokens at `/metrics` count against the client with the other
/// routes' until it is refused with 429 everywhere, the right token too.
#[tokio::test]
async fn a_viewer_scrapes_the_metrics_behind_the_tokens_and_the_throttle() {
    let router = served(admin().metrics(|| SCRAPE.to_owned()).router(tokens()));
    for token in [VIEWER_TOKEN, TOKEN] {
        let (status, content_type, body) = scrape(&router, Some(token)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(content_type, "text/plain; version=0.0.4");
        assert_eq!(body, SCRAPE);
    }

    let (status, _, body) = scrape(&router, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("\"unauthorized\""), "{body}");

    for attempt in 0..10 {
        let (status, _, _) = scrape(&router, Some("wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    let (status, _, body) = scrape(&router, Some(VIEWER_TOKEN)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("too_many_attempts"), "{body}");
    let (status, _) = call(&router, Method::GET, "/health", Some(TOKEN), None).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "one count per client"
    );
}

/// Without `Admin::metrics` the route says what is missing.
#[tokio::test]
async fn without_a_renderer_the_metrics_route_says_so() {
    let router = served(admin().router(tokens()));
    let (status, _, body) = scrape(&router, Some(VIEWER_TOKEN)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body.contains("no_metrics") && body.contains("Admin::metrics"),
        "{body}"
    );
}
