//! Webhook receivers. A Receiver's reconcile reads its Secret and registers its path
//! (`/hook/<hex sha256(token + name + namespace)>`, as Flux computes it); the server
//! (`--webhook-addr`) looks a request's path up before reading anything else, reads the body
//! within a limit, has [`verify`] judge it as its host signs, and makes the Receiver's
//! resources reconcile now by setting their reconcile-request annotation.
//!
//! Status codes: 404 unknown path (body unread), 413 body over the limit, 401 missing or bad
//! signature (and a Warning Event on the Receiver), 400 malformed header, 503 suspended, 200
//! done. Responses never carry the secret or the names of what was reconciled.

pub mod push;
pub mod receivers;
pub mod verify;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::routing::post;
use futures::StreamExt;
use futures::future::BoxFuture;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

pub use self::receivers::Receivers;
use self::receivers::{PER_RECEIVER, Registered};
use self::verify::{Host, Refusal, Verdict};
use crate::api::receiver::Receiver;
use crate::api::{
    Application, ApplicationSet, GitRepository, Kustomization, OCIRepository,
    RECONCILE_REQUESTED_AT,
};
use crate::reconcilers::applicationset::generate;
use crate::runtime::context::Context;
use crate::runtime::report::Session;
use crate::runtime::{self, Done, Error, Failure, Reason, Reconciled};

/// Flux's default limit on a request body.
pub const BODY_LIMIT: usize = 3 << 20;

/// The path of a Receiver whose secret is `token`.
pub fn path_of(token: &[u8], name: &str, namespace: &str) -> String {
    let mut h = Sha256::new();
    h.update(token);
    h.update(name.as_bytes());
    h.update(namespace.as_bytes());
    format!("/hook/{}", hex::encode(h.finalize()))
}

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<Receiver> = crate::api::scoped(&ctx.client, namespace.as_deref());
    runtime::controller::run(ctx, runtime::controller::of(api), reconcile).await;
}

fn reconcile(rcv: Arc<Receiver>, ctx: Arc<Context>) -> BoxFuture<'static, Result<Action, Error>> {
    runtime::controller::finalized(rcv, ctx, apply, cleanup)
}

async fn apply(rcv: Arc<Receiver>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut session = Session::begin(&ctx, rcv.as_ref());
    let result = register(&rcv, &ctx).await;
    if let Ok((path, _)) = &result {
        session.status.webhook_path = Some(path.clone());
    } else {
        ctx.receivers
            .remove(&rcv.namespace().unwrap_or_default(), &rcv.name_any());
    }
    let schedule = runtime::Schedule {
        interval: Duration::from_secs(600),
        retry: Duration::from_secs(10),
    };
    session
        .finish(result.map(|(_, done)| done), Some(schedule))
        .await
}

async fn register(rcv: &Arc<Receiver>, ctx: &Context) -> Result<(String, Done), Failure> {
    let ns = rcv.namespace().unwrap_or_default();
    let name = rcv.name_any();
    let spec = &rcv.spec;
    let host = Host::parse(&spec.kind).ok_or_else(|| {
        Failure::invalid(format!(
            "spec.type: '{}' is not supported ({})",
            spec.kind,
            Host::NAMES
        ))
    })?;
    for (i, r) in spec.resources.iter().enumerate() {
        if !KINDS.contains(&r.kind.as_str()) {
            return Err(Failure::invalid(format!(
                "spec.resources[{i}].kind: '{}' is not supported ({})",
                r.kind,
                KINDS.join(", ")
            )));
        }
        if r.name == "*" && r.match_labels.is_empty() {
            return Err(Failure::invalid(format!(
                "spec.resources[{i}]: name '*' needs matchLabels"
            )));
        }
        if let Some(other) = r.namespace.as_deref().filter(|n| *n != ns)
            && !ctx.settings.cross_namespace_receivers
        {
            return Err(Failure::new(
                Reason::AccessDenied,
                format!(
                    "spec.resources[{i}].namespace: '{other}' is another namespace than this Receiver's ('{ns}'); a Receiver reaches only its own namespace unless skewer runs with --cross-namespace-receivers"
                ),
            ));
        }
    }
    let token = super::reconcilers::source::read_secret(
        ctx,
        &ns,
        &spec.secret_ref.name,
        "spec.secretRef",
        |data| {
            data.get("token")
                .filter(|t| !t.is_empty())
                .cloned()
                .ok_or("no 'token' key")
        },
    )
    .await
    .map_err(|m| Failure::new(Reason::AuthenticationFailed, m))?;
    let path = path_of(&token, &name, &ns);
    let turns = ctx.receivers.turns_of(&ns, &name);
    ctx.receivers.set(
        path.clone(),
        Registered {
            namespace: ns,
            name,
            host,
            token,
            receiver: rcv.clone(),
            turns,
        },
    );
    let done = Done {
        reason: Reason::Succeeded,
        message: format!("Receiver initialized for path: {path}"),
        event: Reason::Succeeded,
        noop: false,
    };
    Ok((path, done))
}

async fn cleanup(rcv: Arc<Receiver>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.receivers
        .remove(&rcv.namespace().unwrap_or_default(), &rcv.name_any());
    Ok(Action::await_change())
}

/// The kinds a Receiver may reconcile.
pub const KINDS: &[&str] = &[
    "GitRepository",
    "OCIRepository",
    "Kustomization",
    "Application",
];

/// Where Argo CD's endpoint finds its secrets, and which namespace skewer watches.
#[derive(Clone, Default)]
pub struct ArgoEndpoint {
    /// `namespace/name` of the Secret with `webhook.github.secret`, … (Argo CD's `argocd-secret`).
    pub secret: Option<(String, String)>,
    /// The namespace skewer watches (`None`: all).
    pub scope: Option<String>,
}

#[derive(Clone)]
struct Server {
    ctx: Arc<Context>,
    argo: ArgoEndpoint,
    /// Requests judged at once, whichever their Receiver.
    busy: Arc<Semaphore>,
    /// Requests to Argo CD's endpoint judged at once (its share, as a Receiver's).
    argo_turns: Arc<Semaphore>,
    /// Bytes of bodies held at once, across all requests.
    budget: Arc<Semaphore>,
}

/// Requests judged (signature checked, objects asked to reconcile) at once.
const IN_FLIGHT: usize = 64;
/// How long a request may wait for its turn to be judged.
const PATIENCE: Duration = Duration::from_secs(10);
/// How long a body may take to arrive once its headers have. No turn is held meanwhile, so a
/// client trickling its body delays only itself.
const BODY_DEADLINE: Duration = Duration::from_secs(10);
/// Bytes of request bodies held in memory at once, across every request: a request that would
/// go past it is answered 503 at once. Bytes are counted as they arrive, not as declared, so
/// slow clients cost what they sent.
const BODY_BUDGET: usize = 64 << 20;

/// A body read in full, and its share of [`BODY_BUDGET`] (given back when dropped).
type Read = (Bytes, Option<OwnedSemaphorePermit>);

impl Server {
    fn count(&self, receiver: String, result: &'static str) {
        self.ctx
            .metrics
            .webhook_requests
            .get_or_create(&crate::metrics::WebhookLabels { receiver, result })
            .inc();
    }

    /// Reads the body within [`BODY_LIMIT`], [`BODY_DEADLINE`] and [`BODY_BUDGET`]; the status
    /// code to answer when it cannot.
    async fn body(&self, body: Body) -> Result<Read, (StatusCode, &'static str)> {
        let read = async {
            let mut stream = body.into_data_stream();
            let mut bytes = Vec::new();
            let mut held: Option<OwnedSemaphorePermit> = None;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|_| (StatusCode::BAD_REQUEST, "bad_request"))?;
                if bytes.len().saturating_add(chunk.len()) > BODY_LIMIT {
                    return Err((StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
                }
                let n = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
                let share = self
                    .budget
                    .clone()
                    .try_acquire_many_owned(n)
                    .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "busy"))?;
                match &mut held {
                    Some(h) => h.merge(share),
                    None => held = Some(share),
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok((Bytes::from(bytes), held))
        };
        tokio::time::timeout(BODY_DEADLINE, read)
            .await
            .unwrap_or(Err((StatusCode::REQUEST_TIMEOUT, "bad_request")))
    }

    /// Waits (within [`PATIENCE`]) for a turn among `mine` (one Receiver's) and among all.
    async fn turn(
        &self,
        mine: &Arc<Semaphore>,
    ) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), (StatusCode, &'static str)> {
        let both = async {
            let own = mine.clone().acquire_owned().await.ok()?;
            let all = self.busy.clone().acquire_owned().await.ok()?;
            Some((own, all))
        };
        tokio::time::timeout(PATIENCE, both)
            .await
            .ok()
            .flatten()
            .ok_or((StatusCode::SERVICE_UNAVAILABLE, "busy"))
    }
}

/// The webhook server's routes: Receivers' paths, and Argo CD's `/api/webhook`.
pub fn router(ctx: Arc<Context>, argo: ArgoEndpoint) -> Router {
    Router::new()
        .route("/hook/{digest}", post(receive))
        .route("/api/webhook", post(argo_cd))
        .with_state(Server {
            ctx,
            argo,
            busy: Arc::new(Semaphore::new(IN_FLIGHT)),
            argo_turns: Arc::new(Semaphore::new(PER_RECEIVER)),
            budget: Arc::new(Semaphore::new(BODY_BUDGET)),
        })
}

/// Serves webhooks on `listener` until shutdown.
pub async fn serve(listener: tokio::net::TcpListener, ctx: Arc<Context>, argo: ArgoEndpoint) {
    if let Err(e) =
        crate::http::serve(listener, router(ctx, argo), crate::http::Limits::default()).await
    {
        warn!(error = %e, "webhook server stopped");
    }
}

/// The host of a request to Argo CD's endpoint, from its headers, and the key of its secret.
fn argo_host(header: &dyn Fn(&str) -> Option<String>) -> Option<(Host, &'static str)> {
    if header("x-github-event").is_some() {
        Some((Host::Github, "webhook.github.secret"))
    } else if header("x-gitlab-event").is_some() {
        Some((Host::Gitlab, "webhook.gitlab.secret"))
    } else if header("x-gogs-event").is_some() {
        Some((Host::Gogs, "webhook.gogs.secret"))
    } else if header("x-event-key").is_some() && header("x-hub-signature").is_some() {
        Some((Host::Bitbucket, "webhook.bitbucketserver.secret"))
    } else {
        None
    }
}

/// Looks a request's header up by its lower-case name.
fn header_of(parts: &axum::http::request::Parts) -> impl Fn(&str) -> Option<String> + '_ {
    |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// Argo CD's endpoint: the host told by its headers, its secret from Argo CD's Secret, and the
/// Applications and GitRepositories of the pushed repository and ref refreshed. A host without
/// a secret is refused (Argo CD would take its requests unverified).
async fn argo_cd(State(server): State<Server>, request: Request) -> StatusCode {
    let Some((ns, name)) = server.argo.secret.clone() else {
        return StatusCode::NOT_FOUND;
    };
    let (code, result) = argo_cd_judged(&server, &ns, &name, request).await;
    server.count("argocd".into(), result);
    code
}

async fn argo_cd_judged(
    server: &Server,
    ns: &str,
    name: &str,
    request: Request,
) -> (StatusCode, &'static str) {
    let ctx = &server.ctx;
    let (parts, body) = request.into_parts();
    let header = header_of(&parts);
    let Some((host, key)) = argo_host(&header) else {
        return (StatusCode::BAD_REQUEST, "bad_request");
    };
    let (body, _held) = match server.body(Body::new(body)).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let _turn = match server.turn(&server.argo_turns).await {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let secret =
        super::reconcilers::source::read_secret(ctx, ns, name, "--argocd-webhook-secret", |data| {
            data.get(key)
                .filter(|s| !s.is_empty())
                .cloned()
                .ok_or("no such key")
        })
        .await;
    let Ok(token) = secret else {
        warn!(
            key,
            "Argo CD webhook refused: no secret configured for this host"
        );
        return (StatusCode::UNAUTHORIZED, "unauthorized");
    };
    match verify::verify(host, &token, header, &body, &[]) {
        Ok(Verdict::Accept(_)) => {}
        Ok(Verdict::Ping | Verdict::Ignored(_)) => return (StatusCode::OK, "ignored"),
        Err(Refusal::Unauthorized(why)) => {
            warn!(why, "Argo CD webhook refused");
            return (StatusCode::UNAUTHORIZED, "unauthorized");
        }
        Err(Refusal::BadRequest(_)) => return (StatusCode::BAD_REQUEST, "bad_request"),
    }
    let Ok(pushed) = push::parse(&body) else {
        return (StatusCode::BAD_REQUEST, "bad_request");
    };
    let requested = jiff::Timestamp::now().to_string();
    let nobody = |_: &str, _: &str, _: &str, _: &BTreeMap<String, String>| false;
    let n = refresh(
        ctx,
        server.argo.scope.as_deref(),
        &pushed,
        &nobody,
        &requested,
    )
    .await;
    info!(objects = n, "Argo CD webhook accepted");
    (StatusCode::OK, "accepted")
}

async fn receive(
    State(server): State<Server>,
    Path(digest): Path<String>,
    request: Request,
) -> StatusCode {
    // The path first: an unknown one costs nothing more (and is not counted: its label
    // would be the caller's to choose).
    let Some(r) = server.ctx.receivers.get(&format!("/hook/{digest}")) else {
        return StatusCode::NOT_FOUND;
    };
    let (code, result) = judged(&server, &r, request).await;
    server.count(r.id(), result);
    code
}

async fn judged(server: &Server, r: &Registered, request: Request) -> (StatusCode, &'static str) {
    let ctx = &server.ctx;
    if r.receiver.spec.suspend {
        return (StatusCode::SERVICE_UNAVAILABLE, "suspended");
    }
    let (parts, body) = request.into_parts();
    let (body, _held) = match server.body(Body::new(body)).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let _turn = match server.turn(&r.turns).await {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let header = header_of(&parts);
    match verify::verify(r.host, &r.token, header, &body, &r.receiver.spec.events) {
        Ok(Verdict::Accept(event)) => {
            let pushed = match r.host {
                Host::Github | Host::Gitlab | Host::Gitea | Host::Gogs | Host::Bitbucket => {
                    match push::parse(&body) {
                        Ok(p) => p,
                        Err(_) => return (StatusCode::BAD_REQUEST, "bad_request"),
                    }
                }
                _ => push::Push::default(),
            };
            let requested = jiff::Timestamp::now().to_string();
            let n = trigger(ctx, r, &pushed, &requested).await;
            info!(receiver = %r.id(), event = ?event, objects = n, "webhook accepted");
            (StatusCode::OK, "accepted")
        }
        Ok(Verdict::Ping | Verdict::Ignored(_)) => (StatusCode::OK, "ignored"),
        Err(refusal) => {
            let (code, result, why) = match refusal {
                Refusal::Unauthorized(why) => (StatusCode::UNAUTHORIZED, "unauthorized", why),
                Refusal::BadRequest(why) => (StatusCode::BAD_REQUEST, "bad_request", why),
            };
            warn!(receiver = %r.id(), why, "webhook refused");
            if code == StatusCode::UNAUTHORIZED && ctx.receivers.event_due(r) {
                ctx.event(
                    r.receiver.as_ref(),
                    true,
                    Reason::AuthenticationFailed,
                    format!("refused a request: {why}"),
                )
                .await;
            }
            (code, result)
        }
    }
}

/// Sets the reconcile-request annotation on every object `r` names, and on the GitRepositories
/// and Applications of its namespace that track the pushed repository; objects whose branch
/// the push did not move are left alone. Returns how many were asked.
async fn trigger(ctx: &Context, r: &Registered, pushed: &push::Push, requested: &str) -> usize {
    let listed = |kind: &str, name: &str, ns: &str, labels: &BTreeMap<String, String>| {
        r.resources().iter().any(|res| {
            res.kind == kind
                && res.namespace.as_deref().unwrap_or(&r.namespace) == ns
                && (res.name == name
                    || (res.name == "*"
                        && res
                            .match_labels
                            .iter()
                            .all(|(k, v)| labels.get(k) == Some(v))))
        })
    };
    let namespaces: BTreeSet<&str> = r
        .resources()
        .iter()
        .map(|res| res.namespace.as_deref().unwrap_or(&r.namespace))
        .chain([r.namespace.as_str()])
        .collect();
    let mut n = 0;
    for ns in namespaces {
        n += refresh(ctx, Some(ns), pushed, &listed, requested).await;
        n += ask_listed::<OCIRepository>(ctx, r, ns, &listed, requested).await;
        n += ask_listed::<Kustomization>(ctx, r, ns, &listed, requested).await;
    }
    n
}

/// Asks the objects of kind `K` in `ns` that `r` lists to reconcile; lists nothing when `r`
/// names no object of that kind.
async fn ask_listed<K: Reconciled>(
    ctx: &Context,
    r: &Registered,
    ns: &str,
    listed: &Listed<'_>,
    requested: &str,
) -> usize {
    if !r.resources().iter().any(|res| res.kind == K::KIND) {
        return 0;
    }
    let mut n = 0;
    for o in &list::<K>(ctx, Some(ns)).await {
        if listed(K::KIND, &o.name_any(), ns, o.labels()) {
            n += annotate(o, ctx, requested).await;
        }
    }
    n
}

/// Who a Receiver names: `(kind, name, namespace, labels)` → listed.
type Listed<'a> = dyn Fn(&str, &str, &str, &BTreeMap<String, String>) -> bool + Sync + 'a;

/// Asks the GitRepositories and Applications of `scope` (a namespace; `None`: all) that are
/// `listed`, or that track the pushed repository, to reconcile; a source of the pushed
/// repository whose ref the push did not move is left alone, listed or not.
async fn refresh(
    ctx: &Context,
    scope: Option<&str>,
    pushed: &push::Push,
    listed: &Listed<'_>,
    requested: &str,
) -> usize {
    let wanted = |listed: bool, url: &str, branch: Option<&str>, tags: bool| {
        if pushed.is_of(url) {
            pushed.moves(branch, tags)
        } else {
            listed
        }
    };
    let mut n = 0;
    for g in &list::<GitRepository>(ctx, scope).await {
        let ns = g.namespace().unwrap_or_default();
        let rf = g.spec.reference.clone().unwrap_or_default();
        let tags = rf.tag.is_some() || rf.semver.is_some();
        let pinned = (rf.commit.is_some() && rf.branch.is_none()) || rf.name.is_some();
        let is_listed = listed(GitRepository::KIND, &g.name_any(), &ns, g.labels());
        // A pinned source moves only when its spec does: asked only when listed.
        let ask = if pinned {
            is_listed
        } else {
            wanted(is_listed, &g.spec.url, rf.branch.as_deref(), tags)
        };
        if ask {
            n += annotate(g, ctx, requested).await;
        }
    }
    // ApplicationSets whose git generators read the pushed repository generate again (they
    // are named by no Receiver: Argo CD refreshes them by repository too).
    // A target revision that names a tag is known only to the remote: a tag push may move it.
    let tag_pushed = pushed
        .git_ref
        .as_deref()
        .is_some_and(|r| r.starts_with("refs/tags/"));
    for set in &list::<ApplicationSet>(ctx, scope).await {
        let reads = set.spec.generators.iter().any(|g| {
            let Ok(g) = serde_json::to_value(g) else {
                return false;
            };
            let Ok(g) = generate::read(&g, "", 0) else {
                return false;
            };
            generate::repositories(&g).iter().any(|(url, revision)| {
                pushed.is_of(url) && pushed.moves(branch_of(revision), tag_pushed)
            })
        });
        if reads {
            n += annotate(set, ctx, requested).await;
        }
    }
    for a in &list::<Application>(ctx, scope).await {
        let Some(src) = &a.spec.source else { continue };
        let ns = a.namespace().unwrap_or_default();
        let branch = branch_of(src.target_revision.as_deref().unwrap_or("HEAD"));
        let is_listed = listed(Application::KIND, &a.name_any(), &ns, a.labels());
        if wanted(is_listed, &src.repo_url, branch, tag_pushed) {
            n += annotate(a, ctx, requested).await;
        }
    }
    n
}

/// The branch an Argo CD target revision may name: none for `HEAD` (the default branch).
fn branch_of(target: &str) -> Option<&str> {
    (target != "HEAD" && !target.is_empty()).then_some(target)
}

/// The objects of kind `K` in `scope` (`None`: every namespace); none, logged, when they
/// cannot be listed.
async fn list<K: Reconciled>(ctx: &Context, scope: Option<&str>) -> Vec<K> {
    let api: Api<K> = crate::api::scoped(&ctx.client, scope);
    match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            warn!(kind = K::KIND, error = %e, "webhook: listing");
            Vec::new()
        }
    }
}

/// Asks `obj` to reconcile now; 1 when it could be asked.
async fn annotate<K: Reconciled>(obj: &K, ctx: &Context, requested: &str) -> usize {
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({"metadata": {"annotations": {RECONCILE_REQUESTED_AT: requested}}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => 1,
        Err(e) => {
            warn!(kind = K::KIND, namespace = %ns, name, error = %e, "webhook: cannot request a reconcile");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_fluxs() {
        // sha256("token" + "name" + "namespace"), as Flux's receiver computes it.
        let p = path_of(b"token", "name", "namespace");
        let want = hex::encode(Sha256::digest(b"tokennamenamespace"));
        assert_eq!(p, format!("/hook/{want}"));
    }
}
