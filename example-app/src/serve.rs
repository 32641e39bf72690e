//! Serving a silo's router on its listener, so that slow clients cannot
//! starve it.
//!
//! `axum::serve` sets no timer on hyper's connections, so hyper's
//! header-read timeout never applies, and it accepts every connection it
//! can: a client that sends its request head a byte at a time holds a task,
//! a socket and a file descriptor for as long as it likes (slowloris). This
//! loop is `axum::serve` with what it lacks, built on hyper-util's server
//! pieces rather than tower layers, because both limits act *below* HTTP
//! requests, where no tower layer runs (a layer sees a request only once
//! its head has been read):
//!
//! - **A header-read timeout**: hyper's HTTP/1 server with a Tokio timer and
//!   `header_read_timeout` ([`Limits::header_timeout`]): a connection whose
//!   request head is not complete within it is closed. It also bounds how
//!   long a kept-alive connection may sit idle between requests.
//! - **A connection limit**: a semaphore of [`Limits::max_connections`]
//!   permits, one taken before each `accept` and held until the connection
//!   ends: beyond the limit, new connections wait in the kernel's backlog
//!   instead of taking file descriptors.
//! - HTTP/1.1 only: hyper's HTTP/2 server has no header-read timeout, and
//!   the silos and their clients speak HTTP/1.1 over plain TCP.
//!
//! Each request gets the client's address as `ConnectInfo<SocketAddr>` (the
//! per-client rate limit, [`crate::limits`], keys on it). The request
//! timeout and the rate limit are tower layers: they act on requests.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

pub use crate::limits::Limits;

/// Serves `app` on `listener` within `limits` until `shutdown` completes,
/// then lets the requests in flight finish (connections idle or still
/// sending their head are closed).
///
/// # Errors
///
/// None today: an `accept` that fails is logged and retried (after a second
/// when the process is out of file descriptors, as `axum::serve` does).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        // A permit first: beyond the limit, connections wait unaccepted.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = app
            .clone()
            .map_request(move |mut request: axum::http::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(remote));
                request
            });
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                // A header-read timeout, a client gone: not the server's fault.
                tracing::debug!(%remote, %error, "connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// What to do after `accept` failed: out of file descriptors (or memory), wait
/// a second for some to be released; otherwise (a connection reset before
/// it was accepted) go on at once.
async fn accept_failed(error: &std::io::Error) {
    tracing::warn!(%error, "accept failed");
    let resources = matches!(error.raw_os_error(), Some(23 | 24 | 12 | 105));
    if resources {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The client's address, as the server saw it.
pub type ClientAddr = ConnectInfo<SocketAddr>;
