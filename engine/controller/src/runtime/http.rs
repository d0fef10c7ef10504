//! `/healthz` (the process runs), `/readyz` (policies and TrainJobs listed, evaluation running, not
//! stopping) and `/metrics` (OpenMetrics text) on one port. The server is the last thing a graceful stop
//! ends (see [`crate::runtime::shutdown`]): `/readyz` answers 503 from the stop's first step, so probes see
//! the replica go not-ready, and `/metrics` stays readable until the end.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    ready: watch::Receiver<bool>,
    stopping: watch::Receiver<bool>,
}

/// The router, separate from [`serve`] so tests can call it without a socket. `ready`: the initial sync is
/// done; `stopping`: a graceful stop has begun (not ready again, whatever `ready` says).
pub fn router(
    metrics: Arc<Metrics>,
    ready: watch::Receiver<bool>,
    stopping: watch::Receiver<bool>,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, ready, stopping })
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if *state.stopping.borrow() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else if *state.ready.borrow() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "initial sync of policies and TrainJobs not finished")
    }
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        state.metrics.encode(),
    )
}

/// Serves until `stop` fires (or its sender is dropped): the graceful stop's last step, not the signal
/// itself. Connections under way are finished. `Err`: the server failed while it was meant to run.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: watch::Receiver<bool>,
    stopping: watch::Receiver<bool>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let app = router(metrics, ready, stopping);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.await;
        })
        .await
}
