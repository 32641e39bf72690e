//! The admin surface of a silo over HTTP: `/metrics` behind the admin's
//! tokens and throttle, and moving with a delivery; request ids; the admin
//! API's backfills and the dashboard.

use example_app::silo;
use reqwest::StatusCode;
use sea_orm::DbBackend;

use super::deployment::{fresh_client, Deployment, SECRET, VIEWER_TOKEN};

/// `token=<token>` as a form body (the token's characters percent-encoded).
fn form_token(token: &str) -> String {
    let encoded: String = token
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("token={encoded}")
}

/// The sum of the samples of `name` whose labels include `labels`, in a
/// Prometheus text exposition.
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| {
            labels
                .iter()
                .all(|(key, value)| line.contains(&format!("{key}=\"{value}\"")))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `/metrics` needs the admin or the viewer token: 401 without one or with
/// a wrong one; wrong tokens there count against the client with the admin
/// router's, so guessing at `/metrics` locks the guesser out of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_an_admin_token() {
    let app = Deployment::start(DbBackend::Sqlite).await;
    let scrape = |token: Option<&'static str>| {
        let mut request = fresh_client().get(app.region_url("us", "/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(scrape(None).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        scrape(Some("not-the-token-0123456789abcdef0123")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(scrape(Some(VIEWER_TOKEN)).await, StatusCode::OK);
    assert_eq!(scrape(Some(SECRET)).await, StatusCode::OK);
    // Nine more wrong tokens (ten in all) use up this client's allowance.
    for _ in 0..9 {
        assert_eq!(
            scrape(Some("not-the-token-0123456789abcdef0123")).await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(scrape(Some(SECRET)).await, StatusCode::TOO_MANY_REQUESTS);
    let health = fresh_client()
        .get(app.region_url("us", "/admin/outbox/health"))
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::TOO_MANY_REQUESTS);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_and_move_with_a_delivery() {
    let app = Deployment::start(DbBackend::Sqlite).await;
    let scrape = || async {
        let response = fresh_client()
            .get(app.region_url("us", "/metrics"))
            .bearer_auth(VIEWER_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        response.text().await.unwrap()
    };
    let delivered = [
        ("category", "OrganizationUpdate"),
        ("kind", "region"),
        ("synchronous", "true"),
    ];
    let before = scrape().await;
    app.create_org("us", "metered", "Metered").await;
    let after = scrape().await;
    // The recorder is the process's: other tests of this binary add to it,
    // never take away.
    assert!(
        metric_sum(&after, "outbox_processed", &delivered)
            >= metric_sum(&before, "outbox_processed", &delivered) + 1.0,
        "the synchronous flush's delivery is counted:\n{after}"
    );
    assert!(
        metric_sum(
            &after,
            "outbox_saved",
            &[("category", "OrganizationUpdate")]
        ) >= 1.0,
        "{after}"
    );
    // Published by every worker as it starts (alongside serving), then
    // every 15 s.
    app.eventually("the backlog gauges", || async {
        let text = scrape().await;
        [
            "outbox_backlog_depth",
            "outbox_backlog_oldest_age",
            "outbox_failing_shards",
            "outbox_quarantined_shards",
        ]
        .iter()
        .all(|gauge| {
            text.lines()
                .any(|line| line.starts_with(&format!("{gauge}{{kind=\"region\"}}")))
        })
    })
    .await;
    app.shutdown().await;
}

/// Every answer carries an `x-request-id` (a new UUID, or the client's own),
/// and the admin API mounted on each silo reports its backfills and serves
/// the dashboard behind its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_get_ids_and_the_admin_api_reports_backfills_and_a_dashboard() {
    let app = Deployment::start(DbBackend::Sqlite).await;
    let client = fresh_client();
    let response = client
        .get(app.region_url("us", "/healthz"))
        .send()
        .await
        .unwrap();
    let id = response.headers()[silo::REQUEST_ID].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    assert_eq!(id.split('-').count(), 5, "a UUID: {id}");
    let response = client
        .get(app.region_url("us", "/healthz"))
        .header(silo::REQUEST_ID, "mine-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()[silo::REQUEST_ID], "mine-42");

    let (status, backfills) = app
        .get(app.region_url("us", "/admin/outbox/backfills"))
        .await;
    assert_eq!(status, StatusCode::OK, "{backfills}");
    let tables: Vec<&str> = backfills
        .as_array()
        .unwrap()
        .iter()
        .map(|status| status["table"].as_str().unwrap())
        .collect();
    assert_eq!(tables, ["organization", "organization_member"]);
    let (status, _) = app.get(app.control_url("/admin/outbox/backfills")).await;
    assert_eq!(status, StatusCode::OK);

    // The dashboard: a browser without the cookie goes to the login form.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = no_redirects
        .get(app.control_url("/admin/outbox/dashboard"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    let login = no_redirects
        .post(app.control_url("/admin/outbox/login"))
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(form_token(SECRET))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let session = login.headers()[reqwest::header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(!session.contains(SECRET), "the cookie holds the token");
    let page = no_redirects
        .get(app.control_url("/admin/outbox/dashboard"))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("Failing shards (0)"));
    app.shutdown().await;
}
