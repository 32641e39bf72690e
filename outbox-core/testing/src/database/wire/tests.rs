#![allow(clippy::unwrap_used)]

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
    TransactionTrait,
};

use super::protocol::FrontendParser;
use super::*;
use crate::database::TestDatabase;

/// A pool of one connection through `counter`; `ping`: sqlx's
/// `test_before_acquire`.
async fn pool(counter: &StatementCounter, db: &TestDatabase, ping: bool) -> DatabaseConnection {
    let mut options = ConnectOptions::new(counter.url_for(&db.url));
    options
        .max_connections(1)
        .min_connections(0)
        .test_before_acquire(ping)
        .idle_timeout(None::<std::time::Duration>)
        .max_lifetime(None::<std::time::Duration>)
        .sqlx_logging(false);
    Database::connect(options).await.unwrap()
}

/// What `counter` saw once `pool` is idle (its release pings answered).
async fn seen(counter: &StatementCounter, pool: &DatabaseConnection) -> WireSnapshot {
    pool_idle(pool).await.unwrap();
    counter.snapshot()
}

/// Forgets what `counter` saw once `pool` is idle.
async fn reset(counter: &StatementCounter, pool: &DatabaseConnection) {
    pool_idle(pool).await.unwrap();
    counter.reset();
}

fn select(n: i32) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, "SELECT $1::int AS n", [n.into()])
}

async fn one(db: &impl ConnectionTrait, statement: Statement) -> i32 {
    let row = db.query_one_raw(statement).await.unwrap().unwrap();
    row.try_get("", "n").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_and_extended_statements_and_their_round_trips() {
    let db = TestDatabase::postgres("wire_counts").await.unwrap();
    let counter = StatementCounter::start(&db.url).await.unwrap();
    assert_eq!(counter.url(), counter.url_for(&db.url));
    let through = pool(&counter, &db, false).await;

    // Without `test_before_acquire`, each use of the pool costs its
    // statements' round trips and the ping when the pool takes the
    // connection back.
    reset(&counter, &through).await;
    through.execute_unprepared("SELECT 1").await.unwrap();
    let snapshot = seen(&counter, &through).await;
    assert_eq!(snapshot.labels(), ["SELECT 1"]);
    assert_eq!(snapshot.statements[0].protocol, Protocol::Simple);
    assert_eq!(snapshot.round_trips(), 2, "{snapshot:?}");
    assert_eq!(snapshot.round_trips_without_statement(), 1);

    // The first run prepares (Parse, Describe, Sync), then executes (Bind,
    // Execute, Close, Sync); the second finds it in sqlx's cache.
    reset(&counter, &through).await;
    assert_eq!(one(&through, select(7)).await, 7);
    let snapshot = seen(&counter, &through).await;
    assert_eq!(snapshot.labels(), ["SELECT $1::int AS n"]);
    assert_eq!(snapshot.statements[0].protocol, Protocol::Extended);
    assert_eq!(snapshot.statements[0].sql.as_ref(), "SELECT $1::int AS n");
    assert_eq!(snapshot.round_trips(), 3, "{snapshot:?}");
    assert_eq!(snapshot.round_trips_without_statement(), 2);
    assert_eq!(snapshot.prepared(), 1);
    assert_eq!(snapshot.connections_opened, 0);

    // Named after the Parse seen before the reset.
    reset(&counter, &through).await;
    assert_eq!(one(&through, select(8)).await, 8);
    let snapshot = seen(&counter, &through).await;
    assert_eq!(snapshot.labels(), ["SELECT $1::int AS n"]);
    assert_eq!(snapshot.round_trips(), 2, "{snapshot:?}");
    assert_eq!(snapshot.prepared(), 0);

    reset(&counter, &through).await;
    let txn = through.begin().await.unwrap();
    txn.execute_unprepared("CREATE TABLE t (id bigserial, name text)")
        .await
        .unwrap();
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO t (name) VALUES ($1)",
        ["a".into()],
    ))
    .await
    .unwrap();
    txn.commit().await.unwrap();
    let snapshot = seen(&counter, &through).await;
    assert_eq!(
        snapshot.labels(),
        [
            "BEGIN",
            "CREATE TABLE t (id bigserial, name text)",
            "INSERT INTO t",
            "COMMIT"
        ]
    );
    // Four statements, the insert's preparation, the release ping.
    assert_eq!(snapshot.round_trips(), 6, "{snapshot:?}");
    assert_eq!(snapshot.connections.len(), 1);
    through.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pools_pings_are_round_trips_without_a_statement() {
    let db = TestDatabase::postgres("wire_ping").await.unwrap();
    let counter = StatementCounter::start(&db.url).await.unwrap();
    let through = pool(&counter, &db, true).await;
    through.execute_unprepared("SELECT 1").await.unwrap();
    reset(&counter, &through).await;
    through.execute_unprepared("SELECT 1").await.unwrap();
    let snapshot = seen(&counter, &through).await;
    assert_eq!(snapshot.labels(), ["SELECT 1"]);
    // Handed out, the query, taken back.
    assert_eq!(snapshot.round_trips(), 3, "{snapshot:?}");
    assert_eq!(snapshot.round_trips_without_statement(), 2);
    through.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unnamed_statement_and_large_messages_pass_unchanged() {
    use sea_orm::sqlx::{self, Row};

    let db = TestDatabase::postgres("wire_unnamed").await.unwrap();
    let counter = StatementCounter::start(&db.url).await.unwrap();
    let through = pool(&counter, &db, false).await;
    let sqlx_pool = through.get_postgres_connection_pool();

    reset(&counter, &through).await;
    let big = "x".repeat(1 << 20);
    for sql in [
        "SELECT length($1::text) AS n",
        "SELECT octet_length($1::text) AS n",
    ] {
        let row = sqlx::query(sql)
            .bind(&big)
            .persistent(false) // the unnamed statement ""
            .fetch_one(sqlx_pool)
            .await
            .unwrap();
        assert_eq!(row.get::<i32, _>("n"), 1 << 20);
    }
    let row = sqlx::query("SELECT repeat('y', $1) AS s")
        .bind(1i32 << 20)
        .fetch_one(sqlx_pool)
        .await
        .unwrap();
    assert_eq!(row.get::<String, _>("s"), "y".repeat(1 << 20));
    let snapshot = seen(&counter, &through).await;
    assert_eq!(
        snapshot.labels(),
        [
            "SELECT length($1::text) AS n",
            "SELECT octet_length($1::text) AS n",
            "SELECT repeat('y', $1) AS s"
        ]
    );
    assert!(snapshot.unreadable_connections.is_empty());
    through.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_is_counted_on_its_own() {
    let db = TestDatabase::postgres("wire_connections").await.unwrap();
    let counter = StatementCounter::start(&db.url).await.unwrap();
    let first = pool(&counter, &db, false).await;
    let second = pool(&counter, &db, false).await;
    assert_eq!(counter.snapshot().connections_opened, 2);
    pool_idle(&first).await.unwrap();
    reset(&counter, &second).await;
    first.execute_unprepared("SELECT 'first'").await.unwrap();
    pool_idle(&first).await.unwrap();
    second.execute_unprepared("SELECT 'second'").await.unwrap();
    second.execute_unprepared("SELECT 'second'").await.unwrap();
    let snapshot = seen(&counter, &second).await;
    assert_eq!(
        snapshot.labels(),
        ["SELECT 'first'", "SELECT 'second'", "SELECT 'second'"]
    );
    let counts: Vec<(u64, u64)> = snapshot
        .connections
        .values()
        .map(|c| (c.statements, c.round_trips))
        .collect();
    assert_eq!(counts, [(1, 2), (2, 4)], "{snapshot:?}");
    assert_ne!(
        snapshot.statements[0].connection,
        snapshot.statements[1].connection
    );
    first.close().await.unwrap();
    second.close().await.unwrap();
}

/// Frontend messages, to feed the parser without a server.
fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn fields(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        out.extend_from_slice(part);
        out.push(0);
    }
    out
}

#[test]
fn the_parser_reads_messages_split_anywhere() {
    let mut stream = Vec::new();
    let mut parse = fields(&[b"s1", b"UPDATE t SET a = $1"]);
    parse.extend_from_slice(&0u16.to_be_bytes());
    stream.extend(message(b'P', &parse));
    stream.extend(message(b'D', b"Ss1\0"));
    stream.extend(message(b'S', b""));
    let mut bind = fields(&[b"", b"s1"]);
    bind.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    stream.extend(message(b'B', &bind));
    let mut execute = fields(&[b""]);
    execute.extend_from_slice(&0u32.to_be_bytes());
    stream.extend(message(b'E', &execute));
    stream.extend(message(b'C', b"P\0"));
    stream.extend(message(b'S', b""));
    stream.extend(message(b'Q', b"COMMIT\0"));
    stream.extend(message(b'S', b""));
    stream.extend(message(b'X', b""));

    let recorder = Recorder::default();
    let mut parser = FrontendParser::default();
    for byte in &stream {
        parser
            .feed(std::slice::from_ref(byte), 3, &recorder)
            .unwrap();
    }
    let seen = recorder.lock().snapshot.clone();
    assert_eq!(seen.labels(), ["UPDATE t", "COMMIT"]);
    assert_eq!(
        seen.connections[&3],
        ConnectionCounts {
            statements: 2,
            round_trips: 4,
            round_trips_without_statement: 2,
            prepared: 1,
        }
    );
    assert!(FrontendParser::default()
        .feed(&[b'Q', 0, 0, 0, 2], 1, &recorder)
        .is_err());
}
