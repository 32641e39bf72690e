//! `OutboxLayer` through a real router, on PostgreSQL and SQLite.

#![allow(clippy::unwrap_used, missing_docs)]

mod support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::FutureExt;
use outbox_axum::{OutboxWorker, RespondWith};
use outbox_core::OutboxKind;
use sea_orm::{ConnectionTrait, DbBackend};
use support::{send, OutboxCategory, TestApp};
use tower::ServiceExt;

async fn success_commits_and_flushes_before_the_response(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_success").await;
    let (status, body, flush) = send(app.app(), "/widgets/7/a").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(flush, None);
    // The receiver ran before the response was returned.
    let deliveries = app.recorder.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert!(deliveries[0].synchronous);
    assert_eq!(deliveries[0].object.to_string(), body);
    assert_eq!(app.widgets().await, 1);
    assert_eq!(app.pending().await, 0);
}

async fn client_and_server_errors_roll_back_everything(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_errors").await;
    for code in [400, 404, 409, 500, 503] {
        let (status, _, _) = send(app.app(), &format!("/status/{code}/7/w{code}")).await;
        assert_eq!(status.as_u16(), code);
    }
    assert_eq!(app.widgets().await, 0);
    assert_eq!(app.pending().await, 0);
    assert!(app.recorder.deliveries().is_empty());
    // A 3xx is not an error: it commits.
    let (status, _, _) = send(app.app(), "/status/303/7/redirect").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(app.widgets().await, 1);
}

/// Waits until the transaction of a request that wrote a widget has rolled
/// back. Nothing to await: the pool rolls a returned connection's
/// transaction back in a task of its own, so the row count is polled, up to
/// the test pools' acquire timeout (30 s), past which a connection not back
/// in the pool would fail its next caller anyway.
async fn rolled_back(app: &TestApp) {
    let bound = Duration::from_secs(30);
    let started = std::time::Instant::now();
    loop {
        let widgets = app.widgets().await;
        if widgets == 0 {
            return;
        }
        assert!(
            started.elapsed() < bound,
            "{widgets} widgets still there {:.1?} after the request ended (bound {bound:?}): \
             its transaction did not roll back",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await; // poll interval
    }
}

async fn a_panicking_handler_commits_nothing(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_panic").await;
    let request = Request::post("/panic/7/p").body(Body::empty()).unwrap();
    let outcome = std::panic::AssertUnwindSafe(app.app().oneshot(request))
        .catch_unwind()
        .await;
    assert!(outcome.is_err(), "the panic resumes after the rollback");
    assert_eq!(app.widgets().await, 0);
    assert_eq!(app.pending().await, 0);
    assert!(app.recorder.deliveries().is_empty());
}

async fn a_dropped_request_commits_nothing(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_drop").await;
    let request = Request::post("/hang/7/h").body(Body::empty()).unwrap();
    let call = tokio::spawn(app.app().oneshot(request));
    app.signals.entered.notified().await; // the handler has written
    call.abort(); // the client went away
    let _ = call.await;
    // The dropped transaction rolls back when its connection returns to the pool.
    rolled_back(&app).await;
    assert_eq!(app.pending().await, 0);
    assert!(app.recorder.deliveries().is_empty());
}

async fn flush_false_leaves_rows_for_the_background_drain(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_flush_false").await;
    let worker = OutboxWorker::builder(app.db.db.clone(), app.recorder.receivers())
        .poll_interval(Duration::from_secs(3600))
        .spawn()
        .await
        .unwrap();
    let router = app.routes().layer(worker.layer());
    let (status, _, flush) = send(router.clone(), "/bulk/7/b1").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(flush.as_deref(), Some("deferred"), "the client is told");
    let (status, _, flush) = send(router, "/ctx-deferred/8/b2").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(flush.as_deref(), Some("deferred"));
    assert_eq!(app.widgets().await, 2);
    // Not flushed synchronously; the worker, woken by the commit (its poll
    // interval is an hour), delivers them.
    assert!(app.recorder.deliveries().iter().all(|d| !d.synchronous));
    assert!(
        app.recorder.wait_for(2, Duration::from_secs(20)).await,
        "background drain delivered"
    );
    assert!(app.recorder.deliveries().iter().all(|d| !d.synchronous));
    worker.shutdown().await; // lets the round in flight commit its deletes
    assert_eq!(app.pending().await, 0);
}

async fn nested_deferral_defers_only_the_inner_rows(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_nested").await;
    let (status, _, flush) = send(app.app(), "/nested/7/n").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        flush.as_deref(),
        Some("deferred"),
        "one row was not delivered"
    );
    let deliveries = app.recorder.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].category, OutboxCategory::OrganizationUpdate);
    assert_eq!(
        app.pending().await,
        1,
        "the audit row waits for the background drain"
    );
    let report = app.drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1);
    assert_eq!(
        app.recorder.deliveries()[1].category,
        OutboxCategory::OrganizationAudit
    );
}

async fn a_transaction_still_held_is_an_error_not_a_silent_rollback(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_leak").await;
    let (status, body, _) = send(app.app(), "/leak/7/l").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("still in use"), "{body}");
    // The task that kept `Tx` drops it; its connection goes back to the
    // pool, which rolls the transaction back.
    app.signals.proceed.notify_one();
    app.signals.entered.notified().await;
    rolled_back(&app).await;
    assert!(app.recorder.deliveries().is_empty());
}

async fn a_failed_flush_keeps_the_commit_and_says_so(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_flush_failure").await;
    app.recorder.fail_when(|_| true);
    let (status, _, flush) = send(app.app(), "/widgets/7/f1").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "default: the handler's response"
    );
    assert_eq!(flush.as_deref(), Some("failed"), "a receiver failed");
    let router = app.routes().layer(
        app.layer()
            .on_flush_error(RespondWith(StatusCode::ACCEPTED)),
    );
    let (status, body, flush) = send(router, "/widgets/8/f2").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(body.contains("saved"), "{body}");
    assert_eq!(flush.as_deref(), Some("failed"));
    // A closure sees the errors, which name the category.
    let router = app.routes().layer(app.layer().on_flush_error(
        |errors: &[outbox_core::FlushError], _response: axum::response::Response| {
            use axum::response::IntoResponse;
            (StatusCode::MULTI_STATUS, errors[0].to_string()).into_response()
        },
    ));
    let (status, body, flush) = send(router, "/widgets/9/f3").await;
    assert_eq!(status, StatusCode::MULTI_STATUS);
    assert!(body.contains("OrganizationUpdate"), "{body}");
    assert_eq!(flush, None);
    assert_eq!(app.widgets().await, 3, "every change committed");
    assert_eq!(app.pending().await, 3, "their rows wait for the drain");
}

/// A shard an operator paused is not flushed, and the client hears it
/// (`paused`: the rows wait for the resume); a culled shard's rows are
/// dropped and the client hears `culled`; a shard without control, nothing.
async fn a_paused_or_culled_shard_is_not_flushed_and_the_client_is_told(backend: DbBackend) {
    use outbox_core::{ControlTarget, ShardKey};
    let app = TestApp::new(backend, "layer_paused").await;
    let paused = ControlTarget::Shard(ShardKey::region(support::OutboxScope::OrganizationScope, 7));
    let culled = ControlTarget::Shard(ShardKey::region(support::OutboxScope::OrganizationScope, 8));
    app.drainer
        .operator()
        .pause(paused.clone(), Some("look".into()))
        .await
        .unwrap();
    app.drainer
        .operator()
        .cull(culled.clone(), None)
        .await
        .unwrap();

    for name in ["p1", "p2"] {
        let (status, _, flush) = send(app.app(), &format!("/widgets/7/{name}")).await;
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(flush.as_deref(), Some("paused"), "{name}");
    }
    let (status, _, flush) = send(app.app(), "/widgets/8/c1").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(flush.as_deref(), Some("culled"));
    let (_, _, flush) = send(app.app(), "/widgets/9/free").await;
    assert_eq!(flush, None, "a shard without control is flushed");
    let delivered: Vec<i64> = app
        .recorder
        .deliveries()
        .iter()
        .map(|d| d.shard.identifier())
        .collect();
    assert_eq!(delivered, vec![9]);
    assert_eq!(
        app.pending().await,
        2,
        "the paused rows wait; the culled one is gone"
    );

    app.drainer.operator().resume(&paused).await.unwrap();
    let (_, _, flush) = send(app.app(), "/widgets/7/p3").await;
    assert_eq!(flush, None, "resumed: flushed again");
    assert_eq!(app.pending().await, 0);
    let objects: usize = app
        .recorder
        .deliveries()
        .iter()
        .filter(|d| d.shard.identifier() == 7)
        .count();
    assert!(
        objects >= 1,
        "the kept rows were delivered after the resume"
    );
}

async fn the_commit_predicate_is_configurable(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_predicate").await;
    let router = app.routes().layer(
        app.layer()
            .commit_when(|response| response.status() == StatusCode::CREATED),
    );
    let (status, _, _) = send(router.clone(), "/status/200/7/ok").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(app.widgets().await, 0, "200 is not CREATED: rolled back");
    send(router, "/widgets/7/created").await;
    assert_eq!(app.widgets().await, 1);
}

async fn tx_without_the_layer_is_a_typed_rejection(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_missing").await;
    let (status, body, _) = send(app.routes(), "/widgets/7/x").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("add `.layer(worker.layer())`"), "{body}");
    assert_eq!(app.widgets().await, 0);
}

async fn a_conflict_answered_by_the_handler_rolls_back_the_outbox_too(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_conflict").await;
    send(app.app(), "/widgets/7/same").await;
    let (status, _, _) = send(app.app(), "/widgets/7/same").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(app.widgets().await, 1);
    assert_eq!(app.recorder.deliveries().len(), 1);
    assert_eq!(app.pending().await, 0);
}

/// A handler reads, another connection commits a write (as the drain does
/// all the time), then the handler writes. On SQLite a deferred transaction
/// fails here with `SQLITE_BUSY` (its snapshot is stale); the layer's
/// transaction takes the write lock up front, so the other writer waits.
async fn a_write_committed_between_a_read_and_a_write_does_not_fail_the_request(
    backend: DbBackend,
) {
    let app = TestApp::new(backend, "layer_read_then_write").await;
    let request = tokio::spawn(send(app.app(), "/read-then-write/7/late"));
    app.signals.entered.notified().await; // the handler has read
    let db = app.db.db.clone();
    let other = tokio::spawn(async move {
        db.execute_unprepared("INSERT INTO widgets (organization_id, name) VALUES (8, 'other')")
            .await
    });
    let other = if backend == DbBackend::Sqlite {
        // The other write cannot commit in between: the request's
        // transaction took SQLite's write lock with its first statement (a
        // writer that does not wait is refused now).
        let probe = app.db.connect_again(1).await.unwrap();
        probe
            .execute_unprepared("PRAGMA busy_timeout = 0")
            .await
            .unwrap();
        let refused = probe.execute_unprepared("BEGIN IMMEDIATE").await;
        if refused.is_ok() {
            probe.execute_unprepared("ROLLBACK").await.unwrap();
        }
        assert!(
            refused.is_err(),
            "the request's transaction does not hold the write lock after its read"
        );
        probe.close().await.unwrap();
        Some(other)
    } else {
        // PostgreSQL: the other write commits between the read and the write.
        other.await.unwrap().unwrap();
        None
    };
    app.signals.proceed.notify_one();
    let (status, body, flush) = request.await.unwrap();
    assert_eq!((status, flush), (StatusCode::CREATED, None), "{body}");
    if let Some(other) = other {
        other.await.unwrap().unwrap();
    }
    assert_eq!(app.widgets().await, 2);
    assert_eq!(app.recorder.deliveries().len(), 1);
    assert_eq!(app.pending().await, 0);
}

/// A client that sends its headers and half a JSON body, then stalls, must
/// hold no connection: `Tx` is extracted before the body, and the
/// transaction begins only with its first statement. On a pool of one
/// connection, another request goes through while the first one stalls.
async fn a_stalled_request_body_holds_no_connection(backend: DbBackend) {
    let app = TestApp::new(backend, "layer_stalled_body").await;
    let pool = app.db.connect_again(1).await.unwrap();
    let drainer = outbox_core::Drainer::new(
        outbox_seaorm::SeaOrmStore::new(pool.clone()).unwrap(),
        app.recorder.receivers(),
    );
    let router = app
        .routes()
        .layer(outbox_axum::OutboxLayer::from_parts(pool, drainer.clone()));

    let body_polled = std::sync::Arc::new(tokio::sync::Notify::new());
    let mut sent = false;
    let stalled_body = futures::stream::poll_fn({
        let body_polled = body_polled.clone();
        move |_cx| {
            if sent {
                // Never ready again, never woken: the client stalls.
                return std::task::Poll::Pending;
            }
            sent = true;
            body_polled.notify_one();
            std::task::Poll::Ready(Some(Ok::<_, std::io::Error>(
                axum::body::Bytes::from_static(b"{\"name\": \"sta"),
            )))
        }
    });
    let stalled = tokio::spawn(
        router.clone().oneshot(
            Request::post("/json/7")
                .header("content-type", "application/json")
                .body(Body::from_stream(stalled_body))
                .unwrap(),
        ),
    );
    // The body is being read: every other extractor, `Tx` included, has run.
    body_polled.notified().await;

    let other = tokio::time::timeout(Duration::from_secs(20), send(router, "/widgets/7/other"));
    let (status, body, _) = other
        .await
        .expect("the other request waited for the connection held by the stalled one");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        !stalled.is_finished(),
        "the stalled request still waits for its body"
    );
    stalled.abort();
    assert_eq!(app.widgets().await, 1);
    drainer.settled().await;
    assert_eq!(app.pending().await, 0);
    assert_eq!(app.recorder.deliveries().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_commit_answers_500_and_delivers_nothing() {
    let app = TestApp::new(DbBackend::Postgres, "layer_commit_fails").await;
    app.db
        .db
        .execute_unprepared(
            "CREATE TABLE checked_at_commit (v int, CONSTRAINT one_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)",
        )
        .await
        .unwrap();
    let (status, body, _) = send(app.app(), "/commit-fails/7/c").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("could not be saved"), "{body}");
    assert!(
        !body.contains("one_v"),
        "no database detail leaks into the body: {body}"
    );
    assert_eq!(app.widgets().await, 0);
    assert_eq!(app.pending().await, 0);
    assert!(app.recorder.deliveries().is_empty());
}

outbox_testing::on_both_backends!(
    a_paused_or_culled_shard_is_not_flushed_and_the_client_is_told,
    success_commits_and_flushes_before_the_response,
    client_and_server_errors_roll_back_everything,
    a_panicking_handler_commits_nothing,
    a_dropped_request_commits_nothing,
    flush_false_leaves_rows_for_the_background_drain,
    nested_deferral_defers_only_the_inner_rows,
    a_transaction_still_held_is_an_error_not_a_silent_rollback,
    a_failed_flush_keeps_the_commit_and_says_so,
    the_commit_predicate_is_configurable,
    tx_without_the_layer_is_a_typed_rejection,
    a_conflict_answered_by_the_handler_rolls_back_the_outbox_too,
    a_write_committed_between_a_read_and_a_write_does_not_fail_the_request,
    a_stalled_request_body_holds_no_connection,
);
