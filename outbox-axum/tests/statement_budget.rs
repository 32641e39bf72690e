//! The statement budget of each request path (PostgreSQL): the statements
//! and round trips a request sends to the server, counted on the wire by
//! `outbox_testing::database::wire::StatementCounter` (a proxy the app's pool
//! connects through), held to the budget declared below, and what the
//! server did for them (rows, WAL bytes) from `pg_stat_statements`.
//!
//! Run it with `-- --nocapture` to see the table (`docs/benchmarks.md`
//! quotes its statement counts under Targets and Design choices):
//!
//! ```sh
//! cargo test -p outbox-axum --test statement_budget -- --nocapture
//! ```
//!
//! It starts a private throwaway cluster (`start_cluster_at`, whatever
//! `DATABASE_URL` says), which preloads `pg_stat_statements`: the figures do
//! not depend on another server's settings, and the shared test cluster may
//! have been started without it by an older harness. Without the extension
//! installed (PostgreSQL's contrib modules), it fails and says so.
//!
//! Each path runs a warm-up first (sqlx prepares a statement on its first
//! use on a connection, which costs a round trip of its own), then
//! `REQUESTS` requests one at a time. Each request is measured on its own:
//! the counter is reset before it and read after it, once the drainer's
//! completer has finished (`Drainer::settled`: the delete and release that
//! follow a flush's deliveries run in the background, after the response)
//! and the pools are idle again (sqlx pings a connection the pool takes
//! back, in a task of its own).
//!
//! The request's transaction runs on the app's pool, the drainer's
//! statements (the completer's, and a claim made after the commit) on a pool
//! of its own, as with `OutboxWorker`'s layer; both connect through the
//! counter and have one connection each (`POOL_CONNECTIONS`). The counts are
//! those of larger pools whose connections are warm; but a larger pool,
//! depending on timing, opens a connection when the others are still being
//! taken back, and a new connection prepares its statements again: noise,
//! not the path's cost.
//!
//! A path's statements are split: those the request sends before its
//! response (its critical path), and the completions (`complete.sql`) that
//! its flush leaves to the completer, in the background.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use axum::{middleware, Router};
use outbox_axum::{OutboxLayer, Tx, FLUSH_DEFERRED, FLUSH_HEADER};
use outbox_core::store::{ClaimRequest, DrainStore, ShardClaim};
use outbox_core::worker::Waker;
use outbox_core::{DrainConfig, Drainer, OutboxKind, Receivers, ShardKey};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use outbox_testing::database::wire::{label, pool_idle, StatementCounter, WireSnapshot};
use outbox_testing::database::{connect, start_cluster_at, stop_cluster_at, TestDatabase};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
    TransactionTrait, Value,
};
use tower::ServiceExt;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id") {
        WidgetCreated = 1,
    }
}

// ---------------------------------------------------------------------------
// The budget. One entry per path: the statements of one request, in order,
// and its round trips. Edit these when a path changes on purpose; a failing
// run prints the entries that match what it measured.
//
// Round trips count every exchange the client waits on, the pool's own
// included: sqlx (0.9) pings a connection when the pool hands it out
// (`test_before_acquire`, on by default in SeaORM) and again when the pool
// takes it back (always; in a task of its own, after the work), so each use
// of the pool costs 2 round trips on top of its statements. The request's
// transaction is one use; each statement of the synchronous flush is one.
// ---------------------------------------------------------------------------

/// A hand-written transaction (begin, insert a widget, commit): no outbox,
/// no layer.
const PLAIN: Budget = Budget {
    path: "plain transaction, no outbox",
    statements: &["BEGIN", "INSERT INTO widgets", "COMMIT"],
    after_commit: 0,
    background: &[],
    round_trips: 5,
};

/// `OutboxLayer` with `flush = false` (`defer_flush` on the route).
const FLUSH_FALSE: Budget = Budget {
    path: "`OutboxLayer`, `flush = false`",
    statements: &[
        "BEGIN",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "COMMIT",
    ],
    after_commit: 0,
    background: &[],
    round_trips: 6,
};

/// `OutboxLayer` with its synchronous flush (the default): the claim is
/// the transaction's last statement; after the commit the request sends
/// nothing; the completer deletes and releases in the background.
const SYNCHRONOUS_FLUSH: Budget = Budget {
    path: "`OutboxLayer`, synchronous flush",
    statements: &[
        "BEGIN",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "region/claim_one_before_commit.sql",
        "COMMIT",
    ],
    after_commit: 0,
    background: &["region/complete.sql"],
    round_trips: 10,
};

/// The synchronous flush claimed after the commit
/// (`OutboxLayer::claim_before_commit(false)`): one statement after the
/// `COMMIT`, on the drainer's pool.
const CLAIMED_AFTER_COMMIT: Budget = Budget {
    path: "synchronous flush, claimed after the commit",
    statements: &[
        "BEGIN",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "COMMIT",
        "region/claim_one_before_commit.sql",
    ],
    after_commit: 1,
    background: &["region/complete.sql"],
    round_trips: 12,
};

/// The flush of `Drainer::drain_shard` (the first design, still the
/// fallback): claim and read after the commit, deliver, then delete and
/// release before the response.
const DRAIN_SHARD: Budget = Budget {
    path: "flush by `drain_shard` after the commit (the first design)",
    statements: &[
        "BEGIN",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "COMMIT",
        "region/claim_shard.sql",
        "region/commit_finished.sql",
    ],
    after_commit: 2,
    background: &[],
    round_trips: 12,
};

/// The synchronous flush over a pool that does not ping the connections
/// it hands out (`ConnectOptions::test_before_acquire(false)`): only the
/// ping when the pool takes a connection back is left.
const SYNCHRONOUS_FLUSH_NO_ACQUIRE_PING: Budget = Budget {
    path: "synchronous flush, pools without `test_before_acquire`",
    statements: SYNCHRONOUS_FLUSH.statements,
    after_commit: 0,
    background: SYNCHRONOUS_FLUSH.background,
    round_trips: 8,
};

/// One request writes to three shards (three organizations), synchronous
/// flush.
const THREE_SHARDS: Budget = Budget {
    path: "synchronous flush, three shards",
    statements: &[
        "BEGIN",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "region/claim_before_commit.sql",
        "COMMIT",
    ],
    after_commit: 0,
    background: &["region/complete.sql"],
    round_trips: 14,
};

/// The shard's bucket is held by another claim, and a background drain
/// runs (the layer has its waker): the flush leaves the rows to it at once
/// (`outbox-flush: deferred`), sending nothing after the commit.
const HELD_SHARD: Budget = Budget {
    path: "synchronous flush, shard held elsewhere",
    statements: &[
        "BEGIN",
        "INSERT INTO widgets",
        "INSERT INTO region_outbox",
        "region/claim_one_before_commit.sql",
        "COMMIT",
    ],
    after_commit: 0,
    background: &[],
    round_trips: 7,
};

/// A request through the layer that never touches the database.
const NO_DATABASE: Budget = Budget {
    path: "`OutboxLayer`, no database use",
    statements: &[],
    after_commit: 0,
    background: &[],
    round_trips: 0,
};

/// Connections of the app's pool, and of the drainer's.
const POOL_CONNECTIONS: u32 = 1;
/// How long a request waits for a connection of the pool.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Requests measured per path, after the warm-up.
const REQUESTS: usize = 20;
/// Requests per path before the measurement: enough for every connection
/// the path uses to have prepared its statements.
const WARM_UP: usize = 5;

/// Organizations (shards) of the paths.
const PLAIN_ORG: i64 = 1;
const DEFERRED_ORG: i64 = 2;
const FLUSHED_ORG: i64 = 3;
const THREE_ORGS: i64 = 10; // 10, 11 and 12: three buckets
const HELD_ORG: i64 = 900;

/// The statements and round trips one request of a path may cost.
struct Budget {
    path: &'static str,
    /// Sent before the response, in order.
    statements: &'static [&'static str],
    /// Of those, sent after the `COMMIT`.
    after_commit: usize,
    /// Sent by the drainer's completer, after the response.
    background: &'static [&'static str],
    /// Every round trip, the pools' pings and the background included.
    round_trips: u64,
}

/// The completer's statements.
fn is_background(label: &str) -> bool {
    label.ends_with("/complete.sql")
}

/// What one request sent: before its response, and in the background.
fn split(seen: &WireSnapshot) -> (Vec<&str>, Vec<&str>) {
    seen.labels()
        .into_iter()
        .partition(|label| !is_background(label))
}

/// Statements of the critical path after its `COMMIT`.
fn after_commit(path: &[&str]) -> usize {
    path.iter()
        .rposition(|label| *label == "COMMIT")
        .map_or(0, |commit| path.len() - commit - 1)
}

/// What one path measured.
struct Measured {
    budget: &'static Budget,
    /// Each request's counts.
    requests: Vec<WireSnapshot>,
    /// `pg_stat_statements` over all of them.
    server: ServerFigures,
}

impl Measured {
    /// The requests whose statements or round trips differ from the budget.
    fn over_budget(&self) -> Vec<(usize, &WireSnapshot)> {
        self.requests
            .iter()
            .enumerate()
            .filter(|(_, seen)| {
                let (path, background) = split(seen);
                path != self.budget.statements
                    || after_commit(&path) != self.budget.after_commit
                    || background != self.budget.background
                    || seen.round_trips() != self.budget.round_trips
            })
            .collect()
    }

    /// `total` over the requests, to a tenth.
    fn per_request(&self, total: i64) -> String {
        per_call(total, self.requests.len() as i64)
    }
}

// ---------------------------------------------------------------------------
// The app.
// ---------------------------------------------------------------------------

async fn insert_widget(db: &impl ConnectionTrait, org: i64) -> Result<i64, StatusCode> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO widgets (organization_id, name) VALUES ($1, $2) RETURNING id",
            [org.into(), "widget".into()],
        ))
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?
        .ok_or(StatusCode::INTERNAL_SERVER_ERROR)?;
    row.try_get("", "id")
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
}

async fn insert_widget_with_outbox_row(
    db: &impl ConnectionTrait,
    org: i64,
) -> Result<(), StatusCode> {
    let id = insert_widget(db, org).await?;
    write_region(
        db,
        OutboxMessage::new(OutboxCategory::WidgetCreated, ShardId(org), ObjectId(id)),
    )
    .await
    .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(())
}

/// Through the layer: a widget and its outbox row on the request's `Tx`.
async fn create(tx: Tx, Path(org): Path<i64>) -> Result<StatusCode, StatusCode> {
    insert_widget_with_outbox_row(&tx, org).await?;
    Ok(StatusCode::CREATED)
}

/// Through the layer: widgets and outbox rows of organizations `org`,
/// `org + 1` and `org + 2`.
async fn create_in_three(tx: Tx, Path(org): Path<i64>) -> Result<StatusCode, StatusCode> {
    for org in org..org + 3 {
        insert_widget_with_outbox_row(&tx, org).await?;
    }
    Ok(StatusCode::CREATED)
}

/// Without the layer or the outbox: a transaction by hand.
async fn create_plain(
    State(db): State<DatabaseConnection>,
    Path(org): Path<i64>,
) -> Result<StatusCode, StatusCode> {
    let txn = db
        .begin()
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    insert_widget(&txn, org).await?;
    txn.commit()
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(StatusCode::CREATED)
}

async fn health() -> &'static str {
    "ok"
}

/// Through a flush of the first design: the transaction by hand, then
/// `Drainer::drain_shard` (claim, read, deliver, delete, release).
async fn create_then_drain_shard(
    State((db, drainer)): State<(DatabaseConnection, Drainer<OutboxCategory>)>,
    Path(org): Path<i64>,
) -> Result<StatusCode, StatusCode> {
    let txn = db
        .begin()
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    let id = insert_widget(&txn, org).await?;
    let row = write_region(
        &txn,
        OutboxMessage::new(OutboxCategory::WidgetCreated, ShardId(org), ObjectId(id)),
    )
    .await
    .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    txn.commit()
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    drainer
        .drain_shard(&row.shard, Some(row.id))
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(StatusCode::CREATED)
}

fn app(db: &DatabaseConnection, drainer: Drainer<OutboxCategory>) -> Router {
    // As `OutboxWorker::layer` builds it: a background drain runs, so a
    // held shard is left to it.
    let layer = OutboxLayer::from_parts(db.clone(), drainer.clone()).waker(Waker::new());
    Router::new()
        .route("/widgets/{org}", post(create))
        .route("/three/{org}", post(create_in_three))
        .route("/health", get(health))
        .merge(
            Router::new()
                .route("/deferred/{org}", post(create))
                .route_layer(middleware::from_fn(outbox_axum::defer_flush)),
        )
        .layer(layer.clone())
        .merge(
            Router::new()
                .route("/after-commit/{org}", post(create))
                .layer(layer.claim_before_commit(false)),
        )
        // After `.layer`: not wrapped by it.
        .merge(
            Router::new()
                .route("/plain/{org}", post(create_plain))
                .with_state(db.clone()),
        )
        .merge(
            Router::new()
                .route("/drain-shard/{org}", post(create_then_drain_shard))
                .with_state((db.clone(), drainer)),
        )
}

// ---------------------------------------------------------------------------
// pg_stat_statements.
// ---------------------------------------------------------------------------

/// The server's figures for the statements of the test database.
#[derive(Clone, Debug, Default)]
struct ServerFigures {
    calls: i64,
    rows: i64,
    wal_bytes: i64,
    /// All the WAL the server wrote meanwhile (`pg_current_wal_insert_lsn`),
    /// commit records included, which `pg_stat_statements` leaves out.
    wal_bytes_all: i64,
    /// Per statement label: calls, rows, WAL bytes.
    statements: BTreeMap<String, (i64, i64, i64)>,
}

/// `pg_stat_statements`, read from the cluster's `postgres` database (so
/// that these reads are not counted in the test database's figures).
struct ServerStatements {
    admin: DatabaseConnection,
    dbid: i64,
    /// The WAL insert position at the last reset.
    wal_at_reset: std::sync::Mutex<String>,
}

impl ServerStatements {
    async fn new(admin_url: &str, test_db: &DatabaseConnection) -> Self {
        let admin = connect(admin_url, 1).await.unwrap();
        let available = async {
            admin
                .execute_unprepared("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                .await?;
            admin
                .execute_unprepared("SELECT count(*) FROM pg_stat_statements")
                .await
        }
        .await;
        if let Err(error) = available {
            panic!(
                "pg_stat_statements is not available on the private test cluster ({error}). \
                 The harness preloads it (shared_preload_libraries) when the server's library \
                 folder has pg_stat_statements.so, and this one does not: install PostgreSQL's \
                 contrib modules (on Debian, the `postgresql-15` package has them; elsewhere, \
                 e.g. `postgresql-contrib`), then run the test again."
            );
        }
        let row = test_db
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT oid::bigint AS dbid FROM pg_database WHERE datname = current_database()",
            ))
            .await
            .unwrap()
            .unwrap();
        Self {
            admin,
            dbid: row.try_get("", "dbid").unwrap(),
            wal_at_reset: std::sync::Mutex::new(String::new()),
        }
    }

    async fn reset(&self) {
        let row = self
            .admin
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_stat_statements_reset(0, $1::oid, 0)::text AS reset, \
                        pg_current_wal_insert_lsn()::text AS lsn",
                [Value::from(self.dbid)],
            ))
            .await
            .unwrap()
            .unwrap();
        *self.wal_at_reset.lock().unwrap() = row.try_get("", "lsn").unwrap();
    }

    async fn read(&self) -> ServerFigures {
        let rows = self
            .admin
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT query, calls, rows, wal_bytes::bigint AS wal_bytes \
                 FROM pg_stat_statements WHERE dbid = $1::oid",
                [Value::from(self.dbid)],
            ))
            .await
            .unwrap();
        let since = self.wal_at_reset.lock().unwrap().clone();
        let wal = self
            .admin
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::bigint \
                 AS bytes",
                [Value::from(since)],
            ))
            .await
            .unwrap()
            .unwrap();
        let mut figures = ServerFigures {
            wal_bytes_all: wal.try_get("", "bytes").unwrap(),
            ..ServerFigures::default()
        };
        for row in rows {
            let query: String = row.try_get("", "query").unwrap();
            let calls: i64 = row.try_get("", "calls").unwrap();
            let rows: i64 = row.try_get("", "rows").unwrap();
            let wal_bytes: i64 = row.try_get("", "wal_bytes").unwrap();
            figures.calls += calls;
            figures.rows += rows;
            figures.wal_bytes += wal_bytes;
            let entry = figures.statements.entry(label(&query)).or_default();
            entry.0 += calls;
            entry.1 += rows;
            entry.2 += wal_bytes;
        }
        figures
    }
}

// ---------------------------------------------------------------------------
// Measuring.
// ---------------------------------------------------------------------------

/// A pool of `POOL_CONNECTIONS` through `counter` to the database of `url`.
async fn pool_through(
    counter: &StatementCounter,
    url: &str,
    test_before_acquire: bool,
) -> DatabaseConnection {
    let mut options = ConnectOptions::new(counter.url_for(url));
    options
        .max_connections(POOL_CONNECTIONS)
        .min_connections(0)
        .test_before_acquire(test_before_acquire)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // No reaping (see `outbox_testing::database::connect`).
        .idle_timeout(None::<Duration>)
        .max_lifetime(None::<Duration>)
        .sqlx_logging(false);
    Database::connect(options).await.unwrap()
}

/// The app over pools through the counter.
struct Bench<'a> {
    app: Router,
    through: DatabaseConnection,
    drainer_pool: DatabaseConnection,
    drainer: Drainer<OutboxCategory>,
    counter: &'a StatementCounter,
    server: &'a ServerStatements,
}

impl<'a> Bench<'a> {
    /// The app over `through`, its drainer over `drainer_pool`.
    fn new(
        through: DatabaseConnection,
        drainer_pool: DatabaseConnection,
        counter: &'a StatementCounter,
        server: &'a ServerStatements,
    ) -> Self {
        let drainer = Drainer::builder(
            SeaOrmStore::new(drainer_pool.clone()).unwrap(),
            Receivers::new().discard(OutboxCategory::WidgetCreated),
        )
        .config(
            DrainConfig::default()
                // Operators' runtime controls are read once (in the
                // warm-up), not now and then in the middle of a
                // measurement.
                .controls_refresh(Duration::from_secs(24 * 3600))
                // A held shard: give up at once, deferred.
                .sync_wait(Duration::ZERO),
        )
        .build();
        Self {
            app: app(&through, drainer.clone()),
            through,
            drainer_pool,
            drainer,
            counter,
            server,
        }
    }

    /// Once the completer is done and both pools are idle.
    async fn settled(&self) {
        self.drainer.settled().await;
        pool_idle(&self.through).await.unwrap();
        pool_idle(&self.drainer_pool).await.unwrap();
    }

    async fn send(&self, method: &str, uri: &str) -> (StatusCode, Option<String>) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let flush = response
            .headers()
            .get(FLUSH_HEADER)
            .map(|v| v.to_str().unwrap().to_owned());
        (response.status(), flush)
    }

    /// Warms the path up, then measures `REQUESTS` requests one at a time,
    /// each answered `status` with `flush` in its `outbox-flush` header.
    async fn measure(
        &self,
        budget: &'static Budget,
        method: &str,
        uri: &str,
        status: StatusCode,
        flush: Option<&str>,
    ) -> Measured {
        let expected = (status, flush.map(str::to_owned));
        let unexpected = "(an answer after ACQUIRE_TIMEOUT with a 500 or `outbox-flush: \
             deferred` may be the pool's: a path that needs two connections at once needs \
             POOL_CONNECTIONS = 2)";
        for _ in 0..WARM_UP {
            let answer = self.send(method, uri).await;
            assert_eq!(answer, expected, "{method} {uri} {unexpected}");
        }
        self.settled().await;
        self.server.reset().await;
        let mut requests = Vec::with_capacity(REQUESTS);
        for _ in 0..REQUESTS {
            self.counter.reset();
            let answer = self.send(method, uri).await;
            assert_eq!(answer, expected, "{method} {uri} {unexpected}");
            self.settled().await;
            requests.push(self.counter.snapshot());
        }
        Measured {
            budget,
            requests,
            server: self.server.read().await,
        }
    }
}

fn table(measured: &[Measured]) -> String {
    let mut out = String::new();
    out.push_str(
        "| path | statements before the response (after the `COMMIT`) | in the background \
         | round trips (of which pool pings) | rows | WAL bytes of the statements | WAL \
         bytes, all |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for m in measured {
        let first = &m.requests[0];
        let (path, background) = split(first);
        let _ = writeln!(
            out,
            "| {} | {} ({}) | {} | {} ({}) | {} | {} | {} |",
            m.budget.path,
            path.len(),
            after_commit(&path),
            background.len(),
            first.round_trips(),
            first.round_trips_without_statement(),
            m.per_request(m.server.rows),
            m.per_request(m.server.wal_bytes),
            m.per_request(m.server.wal_bytes_all),
        );
    }
    out
}

/// Each path's statements, with the server's rows and WAL bytes per call.
fn sequences(measured: &[Measured]) -> String {
    let mut out = String::new();
    for m in measured {
        let statements: Vec<String> = m.requests[0]
            .labels()
            .into_iter()
            .map(|label| match m.server.statements.get(label) {
                Some(&(calls, rows, wal)) if calls > 0 => format!(
                    "{label} ({} rows, {} B WAL)",
                    per_call(rows, calls),
                    per_call(wal, calls)
                ),
                _ => format!("{label} (not in pg_stat_statements)"),
            })
            .collect();
        let _ = writeln!(
            out,
            "- {}: {}",
            m.budget.path,
            if statements.is_empty() {
                "(none)".to_owned()
            } else {
                statements.join(", ")
            }
        );
    }
    out
}

/// `total / calls` to a tenth.
fn per_call(total: i64, calls: i64) -> String {
    let tenths = (total * 10 + calls / 2) / calls;
    if tenths % 10 == 0 {
        format!("{}", tenths / 10)
    } else {
        format!("{}.{}", tenths / 10, tenths % 10)
    }
}

/// What to write in the budget to accept what `m` measured (its first
/// request over budget).
fn report_over_budget(m: &Measured) -> Option<String> {
    let over = m.over_budget();
    let (index, seen) = over.first()?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "path \"{}\": {} of {REQUESTS} requests differ from the budget",
        m.budget.path,
        over.len()
    );
    let _ = writeln!(
        out,
        "  budget:      {} statements ({} after the COMMIT), {} round trips: {:?}, in the \
         background {:?}",
        m.budget.statements.len(),
        m.budget.after_commit,
        m.budget.round_trips,
        m.budget.statements,
        m.budget.background
    );
    let (path, background) = split(seen);
    let _ = writeln!(
        out,
        "  request {index}: {} statements ({} after the COMMIT), {} round trips ({} without \
         a statement; {} statements prepared, {} connections opened): {:?}, in the background \
         {:?}",
        path.len(),
        after_commit(&path),
        seen.round_trips(),
        seen.round_trips_without_statement(),
        seen.prepared(),
        seen.connections_opened,
        path,
        background
    );
    for (connection, counts) in &seen.connections {
        let _ = writeln!(out, "    connection {connection}: {counts:?}");
    }
    let _ = writeln!(
        out,
        "  to accept it, in outbox-axum/tests/statement_budget.rs:\n    statements: &{:?},\n    after_commit: {},\n    background: &{:?},\n    round_trips: {},",
        path,
        after_commit(&path),
        background,
        seen.round_trips()
    );
    Some(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_path_stays_within_its_statement_budget() {
    // A private cluster with pg_stat_statements preloaded.
    let dir = std::env::temp_dir().join(format!("outbox-budget-{}", std::process::id()));
    let cluster = dir.clone();
    let admin_url = tokio::task::spawn_blocking(move || start_cluster_at(&cluster, false))
        .await
        .unwrap()
        .unwrap();
    let db = TestDatabase::postgres_on(&admin_url, "statement_budget")
        .await
        .unwrap();
    db.db
        .execute_unprepared(
            "CREATE TABLE widgets (id bigserial PRIMARY KEY, organization_id bigint NOT NULL, \
             name text NOT NULL)",
        )
        .await
        .unwrap();
    let server = ServerStatements::new(&admin_url, &db.db).await;

    // The app's pool connects through the counter; so does its drainer.
    let counter = StatementCounter::start(&db.url).await.unwrap();
    let bench = Bench::new(
        pool_through(&counter, &db.url, true).await,
        pool_through(&counter, &db.url, true).await,
        &counter,
        &server,
    );
    let no_acquire_ping = Bench::new(
        pool_through(&counter, &db.url, false).await,
        pool_through(&counter, &db.url, false).await,
        &counter,
        &server,
    );

    // Another worker holds the bucket of HELD_ORG's shard, for an hour
    // (outside the counter: its own pool).
    let held = ShardKey::region(OutboxScope::OrganizationScope, HELD_ORG);
    let now = chrono::Utc::now();
    let claim = ClaimRequest {
        kind: OutboxKind::Region,
        now,
        lease_until: now + chrono::Duration::hours(1),
        token: 4242,
        owner: "statement_budget: another worker".to_owned(),
        rows: 1,
        up_to_id: None,
        order: outbox_core::store::ClaimOrder::Oldest,
        beyond: 0,
        shard_rows: usize::MAX,
        held_rows: 0,
    };
    let holder = db.store().claim_shard(&claim, &held).await.unwrap();
    assert!(matches!(holder, ShardClaim::Claimed(_)), "{holder:?}");

    let created = StatusCode::CREATED;
    let measured = vec![
        bench
            .measure(
                &PLAIN,
                "POST",
                &format!("/plain/{PLAIN_ORG}"),
                created,
                None,
            )
            .await,
        bench
            .measure(
                &FLUSH_FALSE,
                "POST",
                &format!("/deferred/{DEFERRED_ORG}"),
                created,
                Some(FLUSH_DEFERRED),
            )
            .await,
        bench
            .measure(
                &SYNCHRONOUS_FLUSH,
                "POST",
                &format!("/widgets/{FLUSHED_ORG}"),
                created,
                None,
            )
            .await,
        bench
            .measure(
                &CLAIMED_AFTER_COMMIT,
                "POST",
                &format!("/after-commit/{FLUSHED_ORG}"),
                created,
                None,
            )
            .await,
        bench
            .measure(
                &DRAIN_SHARD,
                "POST",
                &format!("/drain-shard/{FLUSHED_ORG}"),
                created,
                None,
            )
            .await,
        no_acquire_ping
            .measure(
                &SYNCHRONOUS_FLUSH_NO_ACQUIRE_PING,
                "POST",
                &format!("/widgets/{FLUSHED_ORG}"),
                created,
                None,
            )
            .await,
        bench
            .measure(
                &THREE_SHARDS,
                "POST",
                &format!("/three/{THREE_ORGS}"),
                created,
                None,
            )
            .await,
        bench
            .measure(
                &HELD_SHARD,
                "POST",
                &format!("/widgets/{HELD_ORG}"),
                created,
                Some(FLUSH_DEFERRED),
            )
            .await,
        bench
            .measure(&NO_DATABASE, "GET", "/health", StatusCode::OK, None)
            .await,
    ];

    println!(
        "\nPer request, after a warm-up, {REQUESTS} requests one at a time. Rows and WAL \
         bytes of the statements: pg_stat_statements, which counts no commit record; WAL \
         bytes, all: the server's WAL position before and after (commit records included). \
         The test cluster runs with fsync, synchronous_commit and full_page_writes off; \
         outbox_claim_bucket is unlogged.\n\n{}\nStatements (per call: rows, WAL \
         bytes):\n\n{}",
        table(&measured),
        sequences(&measured)
    );

    // The server executed what the wire carried: one call per statement.
    for m in &measured {
        let statements: usize = m.requests.iter().map(|r| r.statements.len()).sum();
        assert_eq!(
            m.server.calls, statements as i64,
            "path \"{}\": pg_stat_statements counted {} calls, the wire {statements} statements",
            m.budget.path, m.server.calls
        );
    }
    let failures: Vec<String> = measured.iter().filter_map(report_over_budget).collect();
    assert!(
        failures.is_empty(),
        "over (or under) the statement budget:\n\n{}",
        failures.join("\n")
    );

    // Nothing left behind: pools closed, the database dropped, the cluster
    // stopped and removed.
    for bench in [bench, no_acquire_ping] {
        drop(bench.app);
        drop(bench.drainer);
        bench.through.close().await.unwrap();
        bench.drainer_pool.close().await.unwrap();
    }
    server.admin.close().await.unwrap();
    drop(counter);
    db.db.clone().close().await.unwrap();
    drop(db);
    tokio::task::spawn_blocking(move || stop_cluster_at(&dir))
        .await
        .unwrap()
        .unwrap();
}
