//! `GET /health` on PostgreSQL names what holds vacuum back (a
//! `holder`: a session here) and the statement that ends it; so does the
//! dashboard.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::{call, setup, DbBackend, TOKEN};

/// PostgreSQL: while another session sits idle in a transaction that holds
/// a snapshot, `/health` and the dashboard name it (pid, application name,
/// state) and the statement that ends it; once it ends, nothing is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_names_the_session_that_holds_vacuum_back() {
    use sea_orm::ConnectionTrait;
    let setup = setup(DbBackend::Postgres, "admin_horizon", &[1]).await;
    let (status, health) = call(&setup.router, Method::GET, "/health", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{health}");
    assert_eq!(health["backlogs"][0]["horizon"], Value::Null, "{health}");

    let report = setup.db.connect_again(1).await.unwrap();
    report
        .execute_unprepared("SET application_name = 'nightly-report'")
        .await
        .unwrap();
    report
        .execute_unprepared("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    let pid: i32 = report
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT pg_backend_pid() AS pid, (SELECT count(*) FROM region_outbox) AS n",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "pid")
        .unwrap();
    let (status, health) = call(&setup.router, Method::GET, "/health", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{health}");
    let holder = &health["backlogs"][0]["horizon"];
    assert_eq!(holder["holder"], "session", "{health}");
    assert_eq!(holder["pid"], pid, "{health}");
    assert_eq!(holder["name"], "nightly-report", "{health}");
    assert_eq!(holder["state"], "idle in transaction", "{health}");
    assert_eq!(
        holder["remedy"],
        format!("SELECT pg_terminate_backend({pid})"),
        "{health}"
    );
    let page = setup
        .router
        .clone()
        .oneshot(
            Request::get("/dashboard")
                .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.into_body().collect().await.unwrap().to_bytes();
    let page = String::from_utf8_lossy(&page);
    assert!(
        page.contains(&format!(
            "Vacuum is held back by session {pid} (nightly-report"
        )) && page.contains(&format!("SELECT pg_terminate_backend({pid})")),
        "{page}"
    );

    report.execute_unprepared("ROLLBACK").await.unwrap();
    let (_, health) = call(&setup.router, Method::GET, "/health", Some(TOKEN), None).await;
    assert_eq!(health["backlogs"][0]["horizon"], Value::Null, "{health}");
    report.close().await.unwrap();
}
