//! skewer's own HTTP endpoints on `--metrics-addr`: `/metrics` (Prometheus text), `/healthz`
//! and `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::warn;

use crate::metrics::Metrics;

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

/// What one server holds open at most, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; past it, new ones wait in the kernel's accept queue.
    pub connections: usize,
    /// A request's headers (and an idle keep-alive connection's next request) must arrive
    /// within this, or the connection is closed: a client trickling headers holds a
    /// connection this long at most.
    pub header_read: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 1024,
            header_read: Duration::from_secs(5),
        }
    }
}

/// Bytes of request head (start line and headers) read at most.
const MAX_HEAD: usize = 64 << 10;

/// Serves `app` on `listener` (HTTP/1.1) within `limits`: at most `limits.connections` open
/// at once, each closed when its headers take longer than `limits.header_read`, heads over
/// 64 KiB refused. Every connection has TCP_NODELAY: a response written as headers then body
/// must not wait for the client's delayed ACK (40 ms on Linux) before its second segment. The
/// client's address is in each request's extensions as axum's `ConnectInfo<SocketAddr>`.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.connections.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(MAX_HEAD);
    loop {
        let Ok(permit) = open.clone().acquire_owned().await else {
            return Ok(());
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait a little rather than spin.
                warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        // The router as it is (a clone is a reference count), the client's address added to
        // each request on the way in.
        let router = TowerToHyperService::new(app.clone());
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            hyper::service::Service::call(&router, request)
        });
        let connection = http.serve_connection(TokioIo::new(tcp), service);
        tokio::spawn(async move {
            let _open = permit;
            // Closed by the client, a deadline, or a protocol error: nothing to tell anyone.
            let _ = connection.await;
        });
    }
}

/// Serves `/metrics`, `/healthz` (the process is up) and `/readyz` (it reached the API server
/// and, when electing, holds or is waiting for the lease: followers are ready too, so that
/// rolling updates proceed).
pub async fn serve_health(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Shared { metrics, ready });
    serve(listener, app, Limits::default()).await
}

async fn metrics_text(State(s): State<Shared>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.encode(),
    )
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not connected to the API server yet",
        )
    }
}
