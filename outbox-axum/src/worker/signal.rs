//! [`shutdown_signal`]: what a service stops on.

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM (what a container
/// runtime or systemd sends): give it to
/// [`WorkerHandle::stop_on`](super::WorkerHandle::stop_on). A signal that
/// cannot be listened for is logged once and never completes, so that the
/// other one still stops the service.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C; the service stops on SIGTERM only");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; the service stops on Ctrl-C only");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C: stopping"),
        () = terminate => tracing::info!("SIGTERM: stopping"),
    }
}
