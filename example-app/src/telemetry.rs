//! Metrics: the process's Prometheus recorder, which every silo serves at
//! `GET /metrics` (the names of `outbox_core::metrics`, dots written as
//! underscores: `outbox_processed`, `outbox_backlog_depth`, …).

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

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
