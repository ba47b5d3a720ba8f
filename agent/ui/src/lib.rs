//! The read-only dashboard, served by `skewer run --ui-addr`: [`router`] is its routes, which
//! the daemon serves; what only the controller knows (diffs, clusters) it asks through
//! [`Differ`] and [`Clusters`].
//!
//! Lists come from reflectors (skewer's own in-memory copies of its Kustomizations,
//! Applications, ApplicationSets, sources and Providers, kept by watches), filtered and paginated here ([`list`]), so a
//! page view costs no API request whatever the number of objects. A page of one object reads
//! its inventory's objects live (their health, their origin) and its Events. Pages learn of
//! changes through server-sent events (`/api/stream`: one `changed` message, coalesced over
//! 100 ms, whenever a watched object changes) and fetch again; nothing polls.
//!
//! With `--ui-auth kubernetes` ([`auth`]) every request needs a bearer token (the
//! `Authorization` header, or the `skewer-token` cookie the login form sets, since browsers'
//! EventSource cannot send headers); the lists and trees show only what that user may `get`.
//! Nothing here writes to a cluster, and no Secret value is read: trees show health and origin,
//! and Events and conditions are already free of values.

pub mod auth;
mod detail;
pub mod list;
mod server;

pub use server::router;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt as _};
use kube::runtime::reflector::{self, Store};
use kube::{Api, Client, Resource};
use serde::Serialize;
use tokio::sync::broadcast;

use auth::{Authorizer, Viewer};
use skewer_api::{
    Application, ApplicationSet, GitRepository, Kustomization, OCIRepository, Provider,
};
use skewer_view::clusters::ClusterRow;

pub(crate) const INDEX: &str = include_str!("assets/index.html");
pub(crate) const SCRIPT: &str = include_str!("assets/app.js");
pub(crate) const STYLE: &str = include_str!("assets/app.css");

/// How the objects of an Application named in `only` (display names) differ between its
/// source and its cluster, field by field, with nothing written. The daemon provides it (the
/// deploy path knows an Application's source and target); the dashboard only asks.
pub trait Differ: Send + Sync {
    fn diff<'a>(
        &'a self,
        app: &'a Application,
        only: &'a [String],
    ) -> futures::future::BoxFuture<'a, Result<Vec<skewer_appliers::compare::Differs>, String>>;
}

/// What the dashboard serves from.
pub struct Ui {
    client: Client,
    /// How an Application's objects differ from its source, field by field.
    differ: Arc<dyn Differ>,
    /// Discovery, for the resource names of objects in authorization checks.
    resources: skewer_appliers::resources::Resources,
    ks: Store<Kustomization>,
    apps: Store<Application>,
    sets: Store<ApplicationSet>,
    git: Store<GitRepository>,
    oci: Store<OCIRepository>,
    providers: Store<Provider>,
    changed: broadcast::Sender<()>,
    auth: Option<Authorizer>,
    /// Where cluster registrations are read for the clusters page.
    clusters: Arc<dyn Clusters>,
}

/// The hub and the registered clusters, probed live, for the clusters page. The daemon provides
/// it (the controller knows how cluster Secrets are read and probed); the dashboard only asks.
pub trait Clusters: Send + Sync {
    /// The namespace the cluster Secrets live in (`None`: every namespace). Only who may read
    /// Secrets there sees the clusters.
    fn secrets_namespace(&self) -> Option<&str>;
    /// The rows, the hub first.
    fn list(&self) -> futures::future::BoxFuture<'_, Result<Vec<ClusterRow>, String>>;
}

/// Keeps a reflector of `api` and announces every change on `changed`. `lighten` drops from
/// each object what the lists never show (managed fields, inventories, per-object results),
/// so the copies cost little memory; an object's page reads what it needs live.
fn reflect<K>(api: Api<K>, changed: broadcast::Sender<()>, lighten: fn(&mut K)) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use kube::runtime::WatchStreamExt as _;
    let (reader, writer) = reflector::store();
    // Small pages: the first list of a thousand objects is read a hundred at a time.
    let config = skewer_api::watch::own_kinds().page_size(100);
    let watched = skewer_api::watch::stream(api, config).modify(move |o: &mut K| {
        o.meta_mut().managed_fields = None;
        lighten(o);
    });
    let stream = reflector::reflector(writer, watched);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::debug!(error = %e, "dashboard watch");
                continue;
            }
            let _ = changed.send(());
        }
    });
    reader
}

fn light_kustomization(k: &mut Kustomization) {
    if let Some(s) = k.status.as_mut() {
        s.inventory = None;
        s.history = Vec::new();
    }
}

fn light_application(a: &mut Application) {
    if let Some(s) = a.status.as_mut() {
        s.inventory = None;
        s.history = Vec::new();
        s.resources.clear();
        if let Some(op) = s.operation_state.as_mut() {
            op.sync_result = None;
        }
    }
}

/// The list counts an ApplicationSet's Applications; the rollout's entries are on its page.
fn light_set(s: &mut ApplicationSet) {
    if let Some(st) = s.status.as_mut() {
        st.application_status.clear();
    }
}

fn unchanged<K>(_: &mut K) {}

impl Ui {
    /// Starts the reflectors (of `namespace`, or every namespace).
    pub fn start(
        client: Client,
        differ: Arc<dyn Differ>,
        namespace: Option<&str>,
        kubernetes_auth: bool,
        clusters: Arc<dyn Clusters>,
    ) -> Arc<Self> {
        let (changed, _) = broadcast::channel(1024);
        let (c, ns) = (&client, namespace);
        Arc::new(Self {
            ks: reflect(
                skewer_api::scoped(c, ns),
                changed.clone(),
                light_kustomization,
            ),
            apps: reflect(
                skewer_api::scoped(c, ns),
                changed.clone(),
                light_application,
            ),
            sets: reflect(skewer_api::scoped(c, ns), changed.clone(), light_set),
            git: reflect(skewer_api::scoped(c, ns), changed.clone(), unchanged),
            oci: reflect(skewer_api::scoped(c, ns), changed.clone(), unchanged),
            providers: reflect(skewer_api::scoped(c, ns), changed.clone(), unchanged),
            auth: kubernetes_auth.then(|| Authorizer::new(client.clone())),
            changed,
            resources: skewer_appliers::resources::Resources::new(client.clone()),
            client,
            clusters,
            differ,
        })
    }
}

pub(crate) fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

pub(crate) fn json<T: Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

pub(crate) fn refuse(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_string(),
    )
        .into_response()
}

/// The token of a request: `Authorization: Bearer …`, else the `skewer-token` cookie.
fn token(headers: &HeaderMap) -> Option<String> {
    if let Some(t) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(t.trim().to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix("skewer-token="))
        .map(|t| t.trim().to_string())
        .find(|t| !t.is_empty())
}

/// Who is asking; a response to send instead when nobody (or nobody known) is.
pub(crate) async fn viewer(
    ui: &Ui,
    headers: &HeaderMap,
    client: IpAddr,
) -> Result<Viewer, Response> {
    let Some(authorizer) = &ui.auth else {
        return Ok(Viewer::Anyone);
    };
    let Some(token) = token(headers) else {
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "a bearer token is required",
        ));
    };
    match authorizer.who(&token, client).await {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(refuse(StatusCode::UNAUTHORIZED, "the token is not valid")),
        Err(e @ auth::Unanswered::TooMany) => {
            Err(refuse(StatusCode::TOO_MANY_REQUESTS, &e.to_string()))
        }
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: TokenReview failed");
            Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the API server did not answer a TokenReview",
            ))
        }
    }
}

pub(crate) async fn may_get(
    ui: &Ui,
    viewer: &Viewer,
    group: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    match &ui.auth {
        None => true,
        Some(a) => a
            .may_get(viewer, group, resource, namespace)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "dashboard: SubjectAccessReview failed");
                false
            }),
    }
}

pub(crate) fn plural(kind: &str) -> &'static str {
    match kind {
        "Kustomization" => "kustomizations",
        "Application" => "applications",
        "ApplicationSet" => "applicationsets",
        "GitRepository" => "gitrepositories",
        "Provider" => "providers",
        _ => "ocirepositories",
    }
}

pub(crate) async fn list_page(
    State(ui): State<Arc<Ui>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<list::Query>,
) -> Response {
    let who = match viewer(&ui, &headers, peer.ip()).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let now = jiff::Timestamp::now();
    let mut items: Vec<list::Item> = Vec::new();
    items.extend(ui.ks.state().iter().map(|k| list::kustomization(k, now)));
    items.extend(ui.apps.state().iter().map(|a| list::application(a, now)));
    items.extend(
        ui.sets
            .state()
            .iter()
            .map(|s| list::application_set(s, now)),
    );
    items.extend(ui.git.state().iter().map(|g| list::git(g, now)));
    items.extend(ui.oci.state().iter().map(|o| list::oci(o, now)));
    items.extend(ui.providers.state().iter().map(|p| list::provider(p, now)));
    if ui.auth.is_some() {
        let mut allowed = std::collections::BTreeMap::new();
        let mut kept = Vec::with_capacity(items.len());
        for i in items {
            let key = (i.kind.clone(), i.namespace.clone());
            let ok = match allowed.get(&key) {
                Some(ok) => *ok,
                None => {
                    let ok =
                        may_get(&ui, &who, skewer_api::GROUP, plural(&i.kind), &i.namespace).await;
                    allowed.insert(key, ok);
                    ok
                }
            };
            if ok {
                kept.push(i);
            }
        }
        items = kept;
    }
    json(&list::page(items, &q))
}

/// The hub and every registered cluster: server, version and reachability probed live.
pub(crate) async fn clusters_page(
    State(ui): State<Arc<Ui>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let who = match viewer(&ui, &headers, peer.ip()).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let ns = ui.clusters.secrets_namespace().unwrap_or_default();
    // Registrations are Secrets: only those who may read them see the clusters.
    if !may_get(&ui, &who, "", "secrets", ns).await {
        return json(&Vec::<ClusterRow>::new());
    }
    match ui.clusters.list().await {
        Ok(rows) => json(&rows),
        Err(e) => refuse(StatusCode::BAD_GATEWAY, &e),
    }
}

/// `changed` whenever a watched object changes, coalesced over 100 ms.
pub(crate) async fn stream(
    State(ui): State<Arc<Ui>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = viewer(&ui, &headers, peer.ip()).await {
        return r;
    }
    Sse::new(changes(ui.changed.subscribe()))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn changes(
    rx: broadcast::Receiver<()>,
) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return None,
        }
        let settle = tokio::time::sleep(Duration::from_millis(100));
        tokio::pin!(settle);
        loop {
            tokio::select! {
                () = &mut settle => break,
                r = rx.recv() => if matches!(r, Err(broadcast::error::RecvError::Closed)) { break },
            }
        }
        // EventSource drops events whose data is empty.
        Some((Ok(Event::default().event("changed").data("1")), rx))
    })
}
