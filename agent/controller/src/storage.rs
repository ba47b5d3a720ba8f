//! Artifacts served over HTTP on `--storage-addr`, as Flux's source-controller serves them,
//! so that controllers which consume Flux sources can consume skewer's:
//! `GET /<kind>/<namespace>/<name>/<sha256 hex>.tar.gz`, the URL a source reports in
//! `status.artifact.url`. Only a source's current artifact is served (its status is read for
//! each request); any other path, `..` included, is a 404.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::Client;
use skewer_sources::Store;

use crate::artifacts;

/// A request for an artifact, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The source kind, as a deploy kind names it (`GitRepository`).
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// `sha256:<hex>`.
    pub digest: String,
}

/// `<kind>/<namespace>/<name>/<hex>.tar.gz` with a known kind, names that are DNS labels or
/// subdomains (so never `.` or `..`), and a sha256 hex digest; anything else is `None`.
pub fn parse(path: &str) -> Option<Wanted> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let [kind, namespace, name, file] = parts.as_slice() else {
        return None;
    };
    let kind = artifacts::KINDS
        .iter()
        .find(|k| k.to_ascii_lowercase() == *kind)?;
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && s.split('.').all(|label| !label.is_empty())
    };
    let hex = file.strip_suffix(".tar.gz")?;
    let hex_ok = hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    (dns(namespace) && dns(name) && hex_ok).then(|| Wanted {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
        digest: format!("sha256:{hex}"),
    })
}

/// The URL of an artifact stored under `key` with `digest`, served from `base`.
pub fn url(base: &str, key: &str, digest: &str) -> String {
    format!(
        "{}/{key}/{}.tar.gz",
        base.trim_end_matches('/'),
        digest.trim_start_matches("sha256:")
    )
}

#[derive(Clone)]
struct Shared {
    client: Client,
    store: Store,
}

/// Serves the current artifacts of every source in `store`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    client: Client,
    store: Store,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/{*path}", get(artifact))
        .with_state(Shared { client, store });
    crate::http::serve(listener, app, crate::http::Limits::default()).await
}

async fn artifact(State(s): State<Shared>, Path(path): Path<String>) -> Response {
    let not_found = || (StatusCode::NOT_FOUND, "no such artifact\n").into_response();
    let Some(w) = parse(&path) else {
        return not_found();
    };
    let current = match artifacts::lookup(&s.client, w.kind, &w.namespace, &w.name).await {
        Ok(a) if a.digest == w.digest => a,
        _ => return not_found(),
    };
    match tokio::fs::read(s.store.path_of(&current.key, &current.digest)).await {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, "application/gzip".to_string()),
                (header::CONTENT_LENGTH, bytes.len().to_string()),
            ],
            Body::from(bytes),
        )
            .into_response(),
        Err(_) => not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn only_artifact_paths_of_known_kinds_parse() {
        let w = parse(&format!("/gitrepository/flux-system/platform/{HEX}.tar.gz")).unwrap();
        assert_eq!(w.kind, "GitRepository");
        assert_eq!(
            (w.namespace.as_str(), w.name.as_str()),
            ("flux-system", "platform")
        );
        assert_eq!(w.digest, format!("sha256:{HEX}"));
        assert_eq!(
            parse(&format!("ocirepository/a/b.c/{HEX}.tar.gz")).map(|w| w.kind),
            Some("OCIRepository")
        );
        for bad in [
            format!("gitrepository/../b/{HEX}.tar.gz"),
            format!("gitrepository/a/../{HEX}.tar.gz"),
            format!("gitrepository/a/./{HEX}.tar.gz"),
            format!("gitrepository/a/b/../../{HEX}.tar.gz"),
            format!("gitrepository/a/b/{HEX}.tar"),
            format!("gitrepository/a/b/{}.tar.gz", &HEX[1..]),
            format!("gitrepository/a/b/{}.tar.gz", HEX.to_uppercase()),
            format!("helmrepository/a/b/{HEX}.tar.gz"),
            format!("gitrepository/A/b/{HEX}.tar.gz"),
            format!("gitrepository/a/b/c/{HEX}.tar.gz"),
            "etc/passwd".to_string(),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn urls_are_the_store_key_and_the_digest() {
        assert_eq!(
            url(
                "http://skewer.skewer-system.svc/",
                "gitrepository/a/b",
                &format!("sha256:{HEX}")
            ),
            format!("http://skewer.skewer-system.svc/gitrepository/a/b/{HEX}.tar.gz")
        );
    }
}
