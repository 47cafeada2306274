//! The HTTP listener: `/healthz`, `/readyz`, Prometheus `/metrics`, plus any routes a
//! service adds (enrich serves `POST /v1/context` here).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use npcmem_core::wire::ErrorReply;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::health::{Health, Status};

#[derive(Clone)]
struct AppState {
    health: Health,
    registry: Arc<Registry>,
}

/// Binds `addr` and serves until `shutdown` flips. Returns the bound address (useful when
/// the port was 0) and the server task.
pub async fn serve(
    addr: SocketAddr,
    health: Health,
    registry: Arc<Registry>,
    extra_routes: Option<Router>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let state = AppState { health, registry };
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    if let Some(extra) = extra_routes {
        router = router.merge(extra);
    }
    // Every answer is JSON, the unknown path and the wrong method included.
    let router = router.fallback(not_found).method_not_allowed_fallback(method_not_allowed);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.wait_for(|stopped| *stopped).await;
        };
        if let Err(error) = axum::serve(listener, router).with_graceful_shutdown(stop).await {
            tracing::error!(%error, "http server failed");
        }
    });
    tracing::info!(addr = %bound, "http listening");
    Ok((bound, task))
}

async fn not_found(method: Method, uri: Uri) -> Response {
    let reply = ErrorReply::new("not_found", format!("no endpoint {method} {}", uri.path()));
    (StatusCode::NOT_FOUND, axum::Json(reply)).into_response()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let reply = ErrorReply::new("method_not_allowed", format!("{} does not take {method}", uri.path()));
    (StatusCode::METHOD_NOT_ALLOWED, axum::Json(reply)).into_response()
}

async fn healthz(State(state): State<AppState>) -> Response {
    let report = state.health.report().await;
    let code = if report.status == Status::Unhealthy { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (code, axum::Json(report)).into_response()
}

async fn readyz(State(state): State<AppState>) -> Response {
    let report = state.health.report().await;
    let ready = report.ready && report.checks.store_available;
    let code = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, axum::Json(report)).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}
