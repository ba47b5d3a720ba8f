//! skewer's own HTTP endpoints on `--metrics-addr`: `/metrics` (Prometheus text), `/healthz`
//! and `/readyz`.

use std::net::SocketAddr;
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
use tokio::net::{TcpListener, TcpSocket};
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

/// Connections one server holds open at once, and how many more may wait in the kernel.
const CONNECTIONS: usize = 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: CONNECTIONS,
            header_read: Duration::from_secs(5),
        }
    }
}

/// Listens on `addr` with room in the kernel's accept queue for a burst as large as the
/// connection cap (the kernel caps it at `net.core.somaxconn`). tokio's `TcpListener::bind`
/// asks for std's 128: a burst past that overflows the queue, and the kernel drops those
/// connections' handshakes, so their requests are retried late or reset before skewer sees
/// them (1,000 concurrent webhook requests overflowed it 369 times, and a valid push among
/// them was reset).
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(u32::try_from(CONNECTIONS).unwrap_or(u32::MAX))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections the kernel completes while nobody accepts: as many as the backlog holds.
    /// With tokio's default (128) the handshakes past it are dropped and these connects hang.
    #[tokio::test]
    async fn a_burst_larger_than_stds_backlog_waits_in_the_kernel() {
        let listener = listen("127.0.0.1:0".parse().expect("an address")).expect("listening");
        let addr = listener.local_addr().expect("its address");
        let connects = (0..400).map(|_| {
            tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
        });
        let results = futures::future::join_all(connects).await;
        let done = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
        assert_eq!(done, 400, "connections completed with none accepted yet");
        drop(listener);
    }
}
