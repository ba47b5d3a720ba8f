//! The read-only dashboard, served by `skewer run --ui-addr`.
//!
//! Lists come from reflectors (skewer's own in-memory copies of its Kustomizations,
//! Applications and sources, kept by watches), filtered and paginated here ([`list`]), so a
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
pub mod list;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{Stream, StreamExt as _};
use kube::runtime::reflector::{self, Store};
use kube::{Api, Client, Resource};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::api::{Application, GitRepository, Kustomization, OCIRepository};
use crate::api::{COMMIT_AUTHOR, COMMIT_MESSAGE};
use crate::view::named::{Kind, Named};
use auth::{Authorizer, Viewer};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// What the dashboard serves from.
pub struct Ui {
    ctx: Arc<crate::runtime::context::Context>,
    client: Client,
    /// Discovery, for the resource names of objects in authorization checks.
    resources: skewer_appliers::resources::Resources,
    ks: Store<Kustomization>,
    apps: Store<Application>,
    git: Store<GitRepository>,
    oci: Store<OCIRepository>,
    changed: broadcast::Sender<()>,
    auth: Option<Authorizer>,
    /// Where cluster registrations are read for the clusters page.
    clusters: Clusters,
}

/// The hub's server URL and the namespace of cluster Secrets (`None`: every namespace).
#[derive(Debug, Clone, Default)]
pub struct Clusters {
    pub hub_server: String,
    pub secrets_namespace: Option<String>,
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
    let config = crate::runtime::watch::own_kinds().page_size(100);
    let watched = crate::runtime::watch::stream(api, config).modify(move |o: &mut K| {
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
    }
}

fn light_application(a: &mut Application) {
    if let Some(s) = a.status.as_mut() {
        s.inventory = None;
        s.resources.clear();
        if let Some(op) = s.operation_state.as_mut() {
            op.sync_result = None;
        }
    }
}

fn unchanged<K>(_: &mut K) {}

impl Ui {
    /// Starts the reflectors (of `namespace`, or every namespace).
    pub fn start(
        ctx: Arc<crate::runtime::context::Context>,
        namespace: Option<&str>,
        kubernetes_auth: bool,
        clusters: Clusters,
    ) -> Arc<Self> {
        let client = ctx.client.clone();
        let (changed, _) = broadcast::channel(1024);
        let (c, ns) = (&client, namespace);
        Arc::new(Self {
            ks: reflect(
                crate::runtime::scoped(c, ns),
                changed.clone(),
                light_kustomization,
            ),
            apps: reflect(
                crate::runtime::scoped(c, ns),
                changed.clone(),
                light_application,
            ),
            git: reflect(crate::runtime::scoped(c, ns), changed.clone(), unchanged),
            oci: reflect(crate::runtime::scoped(c, ns), changed.clone(), unchanged),
            auth: kubernetes_auth.then(|| Authorizer::new(client.clone())),
            changed,
            resources: skewer_appliers::resources::Resources::new(client.clone()),
            client,
            clusters,
            ctx,
        })
    }
}

/// Serves the dashboard on `listener`.
pub async fn serve(listener: tokio::net::TcpListener, ui: Arc<Ui>) -> std::io::Result<()> {
    let app = Router::new()
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
        .with_state(ui);
    crate::http::serve(listener, app, crate::http::Limits::default()).await
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
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

fn json<T: Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
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
async fn viewer(ui: &Ui, headers: &HeaderMap, client: IpAddr) -> Result<Viewer, Response> {
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

async fn may_get(ui: &Ui, viewer: &Viewer, group: &str, resource: &str, namespace: &str) -> bool {
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

fn plural(kind: &str) -> &'static str {
    match kind {
        "Kustomization" => "kustomizations",
        "Application" => "applications",
        "GitRepository" => "gitrepositories",
        _ => "ocirepositories",
    }
}

async fn list_page(
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
    items.extend(ui.git.state().iter().map(|g| list::git(g, now)));
    items.extend(ui.oci.state().iter().map(|o| list::oci(o, now)));
    if ui.auth.is_some() {
        let mut allowed = std::collections::BTreeMap::new();
        let mut kept = Vec::with_capacity(items.len());
        for i in items {
            let key = (i.kind.clone(), i.namespace.clone());
            let ok = match allowed.get(&key) {
                Some(ok) => *ok,
                None => {
                    let ok =
                        may_get(&ui, &who, crate::api::GROUP, plural(&i.kind), &i.namespace).await;
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
async fn clusters_page(
    State(ui): State<Arc<Ui>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let who = match viewer(&ui, &headers, peer.ip()).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let ns = ui.clusters.secrets_namespace.clone();
    // Registrations are Secrets: only those who may read them see the clusters.
    if !may_get(&ui, &who, "", "secrets", ns.as_deref().unwrap_or_default()).await {
        return json(&Vec::<crate::clusters::list::ClusterRow>::new());
    }
    match crate::clusters::list::list(&ui.client, &ui.clusters.hub_server, ns.as_deref()).await {
        Ok(rows) => json(&rows),
        Err(e) => refuse(
            StatusCode::BAD_GATEWAY,
            &skewer_appliers::apply::api_message(&e),
        ),
    }
}

/// One object's page: its row, conditions, tree (Kustomizations, Applications), Events.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    item: list::Item,
    conditions: Vec<crate::api::Condition>,
    /// Sources: the artifact (revision, digest, metadata such as the commit's author).
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact: Option<crate::api::ArtifactStatus>,
    /// Kustomizations: `spec.sourceRef`; Applications: the repository URL.
    source: String,
    /// The applied commit's author and message, when its source recorded them.
    #[serde(skip_serializing_if = "Option::is_none")]
    commit: Option<String>,
    /// Applications: the last sync operation (phase, message, when it finished).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_sync: Option<String>,
    last_applied_revision: String,
    last_attempted_revision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tree: Option<crate::view::tree::Node>,
    /// Applications: the objects Out of Sync, each with how it differs (a dry run on its
    /// cluster, field by field, Secret values masked).
    out_of_sync: Vec<OutOfSync>,
    events: Vec<crate::view::events::EventRow>,
}

#[derive(Serialize)]
struct OutOfSync {
    object: String,
    /// `None` when it could not be worked out (the message says why) or may not be shown.
    diff: Option<String>,
}

fn kind_of(word: &str) -> Option<Kind> {
    match word {
        "Kustomization" => Some(Kind::Kustomization),
        "Application" => Some(Kind::Application),
        "GitRepository" => Some(Kind::GitRepository),
        "OCIRepository" => Some(Kind::OCIRepository),
        _ => None,
    }
}

async fn object_page(
    State(ui): State<Arc<Ui>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((kind, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let who = match viewer(&ui, &headers, peer.ip()).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(k) = kind_of(&kind) else {
        return refuse(StatusCode::NOT_FOUND, "no such kind");
    };
    if !may_get(&ui, &who, crate::api::GROUP, plural(&kind), &namespace).await {
        return refuse(StatusCode::NOT_FOUND, "no such object");
    }
    let now = jiff::Timestamp::now();
    fn key<K: Resource<DynamicType = ()>>(name: &str, ns: &str) -> reflector::ObjectRef<K> {
        reflector::ObjectRef::new(name).within(ns)
    }
    let found = match k {
        Kind::Kustomization => ui.ks.get(&key(&name, &namespace)).map(|o| {
            let st = o.status.clone().unwrap_or_default();
            let src = &o.spec.source_ref;
            let src_ns = src.namespace.clone().unwrap_or(namespace.clone());
            // The applied commit's author and message, recorded by its GitRepository.
            let commit = (src.kind == "GitRepository")
                .then(|| ui.git.get(&key(&src.name, &src_ns)))
                .flatten()
                .and_then(|g| g.status.clone())
                .and_then(|s| s.artifact)
                .filter(|a| Some(&a.revision) == st.last_applied_revision.as_ref())
                .and_then(|a| {
                    let author = a.metadata.get(COMMIT_AUTHOR)?.clone();
                    let message = a.metadata.get(COMMIT_MESSAGE).cloned().unwrap_or_default();
                    Some(format!(
                        "{author}: {}",
                        message.lines().next().unwrap_or_default()
                    ))
                });
            Detail {
                commit,
                last_sync: None,
                item: list::kustomization(&o, now),
                conditions: st.conditions,
                artifact: None,
                source: format!(
                    "{}/{}/{}",
                    src.kind,
                    src.namespace.clone().unwrap_or(namespace.clone()),
                    src.name
                ),
                last_applied_revision: st.last_applied_revision.unwrap_or_default(),
                last_attempted_revision: st.last_attempted_revision.unwrap_or_default(),
                tree: None,
                out_of_sync: Vec::new(),
                events: Vec::new(),
            }
        }),
        // The reflector's copy is lightened: its page reads the Application live.
        Kind::Application => live_application(&ui, &namespace, &name).await.map(|o| {
            let st = o.status.clone().unwrap_or_default();
            let out_of_sync = st
                .resources
                .iter()
                .filter(|r| r.status == "OutOfSync")
                .map(|r| OutOfSync {
                    object: skewer_appliers::object::display_name(&r.kind, &r.namespace, &r.name),
                    diff: None,
                })
                .collect();
            let last_sync = st.operation_state.as_ref().map(|op| {
                let when = op.finished_at.as_deref().unwrap_or(op.started_at.as_str());
                format!("{} at {when}: {}", op.phase, op.message)
            });
            Detail {
                commit: None,
                last_sync,
                item: list::application(&o, now),
                conditions: st.conditions.clone(),
                artifact: None,
                source: o
                    .spec
                    .source
                    .as_ref()
                    .map(|s| s.repo_url.clone())
                    .unwrap_or_default(),
                last_applied_revision: st
                    .sync
                    .as_ref()
                    .and_then(|s| s.revision.clone())
                    .unwrap_or_default(),
                last_attempted_revision: String::new(),
                tree: None,
                out_of_sync,
                events: Vec::new(),
            }
        }),
        Kind::GitRepository => ui
            .git
            .get(&key(&name, &namespace))
            .map(|o| source_detail(list::git(&o, now), o.spec.url.clone(), o.status.clone())),
        Kind::OCIRepository => ui
            .oci
            .get(&key(&name, &namespace))
            .map(|o| source_detail(list::oci(&o, now), o.spec.url.clone(), o.status.clone())),
        Kind::Receiver => None,
    };
    let Some(mut detail) = found else {
        return refuse(StatusCode::NOT_FOUND, "no such object");
    };
    let named = Named {
        kind: k,
        name: name.clone(),
    };
    if matches!(k, Kind::Kustomization | Kind::Application) {
        match crate::view::tree::tree(&ui.client, &namespace, &named).await {
            Ok(mut tree) => {
                if ui.auth.is_some() {
                    prune_unseen(&ui, &who, &mut tree.children).await;
                }
                detail.tree = Some(tree);
            }
            Err(e) => tracing::debug!(error = %e, "dashboard: tree"),
        }
    }
    if k == Kind::Application && !detail.out_of_sync.is_empty() {
        out_of_sync_diffs(&ui, &who, &namespace, &name, &mut detail.out_of_sync).await;
    }
    if may_get(&ui, &who, "events.k8s.io", "events", &namespace).await {
        detail.events = crate::view::events::list(&ui.client, Some(&namespace), Some(&named))
            .await
            .unwrap_or_default();
    }
    json(&detail)
}

fn source_detail(
    item: list::Item,
    url: String,
    status: Option<crate::api::SourceStatus>,
) -> Detail {
    let st = status.unwrap_or_default();
    Detail {
        item,
        conditions: st.conditions,
        last_applied_revision: st
            .artifact
            .as_ref()
            .map(|a| a.revision.clone())
            .unwrap_or_default(),
        artifact: st.artifact,
        source: url,
        commit: None,
        last_sync: None,
        last_attempted_revision: String::new(),
        tree: None,
        out_of_sync: Vec::new(),
        events: Vec::new(),
    }
}

/// An Application as the API server has it now (the reflector's copy is lightened).
async fn live_application(ui: &Ui, namespace: &str, name: &str) -> Option<Arc<Application>> {
    let api: Api<Application> = Api::namespaced(ui.client.clone(), namespace);
    api.get_opt(name).await.ok().flatten().map(Arc::new)
}

/// Fills in how each Out of Sync object differs, for objects the viewer may `get`.
async fn out_of_sync_diffs(
    ui: &Ui,
    who: &Viewer,
    namespace: &str,
    name: &str,
    items: &mut [OutOfSync],
) {
    let Some(app) = live_application(ui, namespace, name).await else {
        return;
    };
    let statuses = app.status.clone().unwrap_or_default().resources;
    let mut visible = Vec::new();
    for r in &statuses {
        let display = skewer_appliers::object::display_name(&r.kind, &r.namespace, &r.name);
        if !items.iter().any(|i| i.object == display) {
            continue;
        }
        let api_version = if r.group.is_empty() {
            r.version.clone()
        } else {
            format!("{}/{}", r.group, r.version)
        };
        let resource = match ui.resources.resolve(&api_version, &r.kind, &[]).await {
            Ok(res) => res.resource.plural,
            Err(_) => continue,
        };
        if may_get(ui, who, &r.group, &resource, &r.namespace).await {
            visible.push(display);
        }
    }
    match crate::reconcilers::application::diff(&ui.ctx, &app, &visible).await {
        Ok(diffs) => {
            for d in diffs {
                if let Some(i) = items.iter_mut().find(|i| i.object == d.object) {
                    i.diff = Some(skewer_appliers::diff::render(&d.object, &d.diff));
                }
            }
        }
        Err(e) => tracing::debug!(error = %e, "dashboard: Out of Sync diff"),
    }
}

/// Removes from a tree the objects the viewer may not `get` (and what hangs under them).
async fn prune_unseen(ui: &Ui, who: &Viewer, nodes: &mut Vec<crate::view::tree::Node>) {
    let mut kept = Vec::with_capacity(nodes.len());
    for mut n in std::mem::take(nodes) {
        if n.resource.is_empty() || !may_get(ui, who, &n.group, &n.resource, &n.namespace).await {
            continue;
        }
        Box::pin(prune_unseen(ui, who, &mut n.children)).await;
        kept.push(n);
    }
    *nodes = kept;
}

/// `changed` whenever a watched object changes, coalesced over 100 ms.
async fn stream(
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
