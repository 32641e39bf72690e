//! What a client may take of a silo: the header-read timeout, the
//! connection limit and the rate of public writes.

use std::time::{Duration, Instant};

use example_app::limits::WriteRate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

async fn organizations_in(app: &Deployment, region: &str) -> i64 {
    let db = &app.regions[region].db;
    db.query_one_raw(sea_orm::Statement::from_string(
        db.get_database_backend(),
        "SELECT count(*) AS n FROM organization",
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get::<i64>("", "n")
    .unwrap()
}

/// Reads until the server closes the connection: what it sent, and whether
/// it closed (end of stream or reset) rather than `bound` running out.
async fn read_until_closed(socket: &mut TcpStream, bound: Duration) -> (Vec<u8>, bool) {
    let mut received = Vec::new();
    let closed = tokio::time::timeout(bound, async {
        let mut buffer = [0u8; 1024];
        loop {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await
    .is_ok();
    (received, closed)
}

/// Beyond its burst, a client's public writes get 429 with `retry-after`
/// and a JSON error, and write nothing; reads and the silos' RPC (the
/// replication of what was created) are not limited.
async fn public_writes_beyond_the_rate_get_429_and_write_nothing(backend: DbBackend) {
    let app = Deployment::start_with(backend, |config| {
        config.limits.write_rate = Some(WriteRate {
            per_second: 1,
            burst: 3,
        });
    })
    .await;
    let mut created = Vec::new();
    let mut refused = 0;
    // The burst passes; one a second after it: a refusal comes within a few
    // more, however slow the machine.
    for i in 0..30 {
        let (status, body, headers) = app
            .send(
                reqwest::Method::POST,
                app.region_url("us", "/api/0/organizations"),
                Some(json!({ "slug": format!("rated-{i}"), "name": "Rated" })),
            )
            .await;
        match status {
            StatusCode::CREATED => created.push(body["id"].as_i64().unwrap()),
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(body["error"].as_str().unwrap().contains("too many writes"));
                assert!(headers.contains_key("retry-after"), "{headers:?}");
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(created.len() >= 3, "the burst passed: {created:?}");
    assert_eq!(refused, 3);
    assert_eq!(organizations_in(&app, "us").await, created.len() as i64);
    // Reads are not limited, and what was created reached Control by RPC.
    for id in &created {
        let (status, mapping) = app
            .get(app.control_url(&format!("/api/0/organization-mappings/{id}")))
            .await;
        assert_eq!(status, StatusCode::OK, "{mapping}");
    }
    app.shutdown().await;
}

/// A client that does not finish its request head within the header
/// timeout has its connection closed: seen on the socket. A client that
/// sends its head at once is served meanwhile.
async fn a_request_head_sent_too_slowly_gets_its_connection_closed(backend: DbBackend) {
    let timeout = Duration::from_millis(500);
    let app = Deployment::start_with(backend, |config| {
        config.limits.header_timeout = timeout;
    })
    .await;
    // Before the connection exists: the server's timer starts after this.
    let started = Instant::now();
    let mut slow = TcpStream::connect(app.regions["us"].addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: us\r\nx-slow: ")
        .await
        .unwrap();
    let (health, _) = app.get(app.region_url("us", "/healthz")).await;
    assert_eq!(health, StatusCode::OK);
    let (received, closed) = read_until_closed(&mut slow, Duration::from_secs(30)).await;
    assert!(closed, "the slow connection is closed");
    assert!(
        started.elapsed() >= timeout,
        "closed after {:?}, before the timeout: {:?}",
        started.elapsed(),
        String::from_utf8_lossy(&received)
    );
    // hyper answers nothing, or a 408, before it closes.
    let answer = String::from_utf8_lossy(&received);
    assert!(answer.is_empty() || answer.contains("408"), "{answer}");
    app.shutdown().await;
}

/// Beyond the connection limit, a connection waits to be accepted: its
/// request is answered once a connection that held a slot ends.
async fn a_connection_beyond_the_limit_is_served_once_a_slot_frees(backend: DbBackend) {
    let app = Deployment::start_with(backend, |config| {
        config.limits.max_connections = 2;
        config.limits.header_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = app.regions["us"].addr;
    // Two connections that send nothing hold both slots.
    let first = TcpStream::connect(addr).await.unwrap();
    let _second = TcpStream::connect(addr).await.unwrap();
    let mut third = TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: us\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    // Not answered while the slots are held (a bounded look: nothing is
    // expected to happen in it).
    let mut buffer = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buffer)).await;
    assert!(early.is_err(), "answered beyond the limit: {early:?}");
    drop(first);
    let (received, closed) = read_until_closed(&mut third, Duration::from_secs(30)).await;
    assert!(closed);
    let answer = String::from_utf8_lossy(&received);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    app.shutdown().await;
}

/// A request that runs past the request timeout is answered 503 and writes
/// nothing (here a body that stalls, with a longer body timeout).
async fn a_request_past_the_request_timeout_gets_503_and_writes_nothing(backend: DbBackend) {
    let app = Deployment::start_with(backend, |config| {
        config.limits.request_timeout = Duration::from_millis(500);
        config.body_timeout = Duration::from_secs(60);
    })
    .await;
    let before = organizations_in(&app, "us").await;
    let mut stalled = TcpStream::connect(app.regions["us"].addr).await.unwrap();
    stalled
        .write_all(
            format!(
                "POST /api/0/organizations HTTP/1.1\r\nhost: us\r\n\
                 authorization: Bearer {}\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\n\r\n{{\"slug\": \"sta",
                deployment::SECRET
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let (received, _) = read_until_closed(&mut stalled, Duration::from_secs(30)).await;
    let answer = String::from_utf8_lossy(&received);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert_eq!(organizations_in(&app, "us").await, before);
    app.shutdown().await;
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn public_writes_beyond_the_rate_get_429_and_write_nothing() {
        super::public_writes_beyond_the_rate_get_429_and_write_nothing(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_request_head_sent_too_slowly_gets_its_connection_closed() {
        super::a_request_head_sent_too_slowly_gets_its_connection_closed(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_connection_beyond_the_limit_is_served_once_a_slot_frees() {
        super::a_connection_beyond_the_limit_is_served_once_a_slot_frees(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_request_past_the_request_timeout_gets_503_and_writes_nothing() {
        super::a_request_past_the_request_timeout_gets_503_and_writes_nothing(DbBackend::Sqlite)
            .await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn public_writes_beyond_the_rate_get_429_and_write_nothing() {
        super::public_writes_beyond_the_rate_get_429_and_write_nothing(DbBackend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_request_head_sent_too_slowly_gets_its_connection_closed() {
        super::a_request_head_sent_too_slowly_gets_its_connection_closed(DbBackend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_connection_beyond_the_limit_is_served_once_a_slot_frees() {
        super::a_connection_beyond_the_limit_is_served_once_a_slot_frees(DbBackend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_request_past_the_request_timeout_gets_503_and_writes_nothing() {
        super::a_request_past_the_request_timeout_gets_503_and_writes_nothing(DbBackend::Postgres)
            .await;
    }
}
