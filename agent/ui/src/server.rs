//! The dashboard's routes, served on one listener by the daemon: the page and its assets, the lists, one
//! object's page, the clusters and the stream of changes.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use super::detail::object_page;
use super::{INDEX, SCRIPT, STYLE, Ui, asset, clusters_page, list_page, stream};

/// The dashboard's routes, for the daemon to serve.
pub fn router(ui: Arc<Ui>) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/api/list", get(list_page))
        .route("/api/object/{kind}/{namespace}/{name}", get(object_page))
        .route("/api/clusters", get(clusters_page))
        .route("/api/stream", get(stream))
        .with_state(ui)
}
