//! Logs and metrics: the process's log lines (text, coloured only on a
//! terminal, or JSON) and its Prometheus recorder, which every silo serves
//! at `GET /metrics` (the names of `outbox_core::metrics`, dots written as
//! underscores: `outbox_processed`, `outbox_backlog_depth`, …).

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; ANSI colours only when the output is a
    /// terminal (a file, a pipe or a log collector gets plain text).
    #[default]
    Text,
    /// One JSON object a line (`timestamp`, `level`, `target`, `fields`,
    /// the spans), for log shippers.
    Json,
}

/// Where log lines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogTo {
    /// The servers' logs.
    Stdout,
    /// A command whose standard output is its answer (`outbox … --json`).
    Stderr,
}

/// Installs the process's log subscriber: `RUST_LOG` if set, else
/// `default_filter`. Does nothing if one is installed already (tests).
pub fn init_logging(format: LogFormat, to: LogTo, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    let ansi = match to {
        LogTo::Stdout => std::io::stdout().is_terminal(),
        LogTo::Stderr => std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let installed = match (format, to) {
        (LogFormat::Text, LogTo::Stdout) => builder.try_init(),
        (LogFormat::Text, LogTo::Stderr) => builder.with_writer(std::io::stderr).try_init(),
        (LogFormat::Json, LogTo::Stdout) => builder.json().try_init(),
        (LogFormat::Json, LogTo::Stderr) => builder.json().with_writer(std::io::stderr).try_init(),
    };
    // Err: a subscriber is installed already; it stays.
    drop(installed);
}

/// How often histograms are compacted.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder, installed on first use; `None` when
/// another recorder was installed first. The `metrics` facade has one
/// recorder per process: silos of one process share it.
pub fn prometheus() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => {
                let upkeep = handle.clone();
                let spawned = std::thread::Builder::new()
                    .name("metrics-upkeep".to_owned())
                    .spawn(move || loop {
                        std::thread::sleep(UPKEEP_INTERVAL);
                        upkeep.run_upkeep();
                    });
                if let Err(error) = spawned {
                    tracing::warn!(%error, "no metrics upkeep thread: histograms grow until scraped");
                }
                Some(handle)
            }
            Err(error) => {
                tracing::warn!(%error, "another metrics recorder is installed: /metrics answers 503");
                None
            }
        })
        .clone()
}

/// `GET /metrics`: the Prometheus text format.
pub async fn metrics() -> Response {
    match prometheus() {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => crate::error::ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "another metrics recorder is installed in this process",
        )
        .into_response(),
    }
}
