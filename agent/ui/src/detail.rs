//! One object's page on the dashboard: its status, tree of objects (only those the viewer may
//! see), Events, source and, for an Application out of sync, what differs field by field.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use kube::runtime::reflector;
use kube::{Api, Resource};
use serde::Serialize;

use super::auth::Viewer;
use super::list;
use super::{Ui, json, may_get, plural, refuse, viewer};
use skewer_api::{Application, COMMIT_AUTHOR, COMMIT_MESSAGE};
use skewer_view::named::{Kind, Named};

/// One object's page: its row, conditions, tree (Kustomizations, Applications, the
/// Applications of an ApplicationSet), Events.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    item: list::Item,
    conditions: Vec<skewer_api::Condition>,
    /// Sources: the artifact (revision, digest, metadata such as the commit's author).
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact: Option<skewer_api::ArtifactStatus>,
    /// Kustomizations: `spec.sourceRef`; Applications: the repository URL.
    source: String,
    /// The applied commit's author and message, when its source recorded them.
    #[serde(skip_serializing_if = "Option::is_none")]
    commit: Option<String>,
    /// Applications: the last sync operation (phase, message, when it finished).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_sync: Option<String>,
    /// Providers: the last delivery (its result, when, the event it carried, the answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_delivery: Option<String>,
    last_applied_revision: String,
    last_attempted_revision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tree: Option<skewer_view::tree::Node>,
    /// Applications: the objects Out of Sync, each with how it differs (a dry run on its
    /// cluster, field by field, Secret values masked).
    out_of_sync: Vec<OutOfSync>,
    /// Kustomizations and Applications: what they deployed, newest last.
    history: Vec<skewer_api::history::Deployment>,
    events: Vec<skewer_view::events::EventRow>,
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
        "ApplicationSet" => Some(Kind::ApplicationSet),
        "GitRepository" => Some(Kind::GitRepository),
        "OCIRepository" => Some(Kind::OCIRepository),
        "Provider" => Some(Kind::Provider),
        _ => None,
    }
}

pub(super) async fn object_page(
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
    if !may_get(&ui, &who, skewer_api::GROUP, plural(&kind), &namespace).await {
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
                last_delivery: None,
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
                history: Vec::new(),
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
                last_delivery: None,
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
                history: st.history.clone(),
                events: Vec::new(),
            }
        }),
        Kind::ApplicationSet => ui.sets.get(&key(&name, &namespace)).map(|o| {
            let st = o.status.clone().unwrap_or_default();
            Detail {
                commit: None,
                last_sync: None,
                last_delivery: None,
                item: list::application_set(&o, now),
                conditions: st.conditions,
                artifact: None,
                source: format!("{} generators", o.spec.generators.len()),
                last_applied_revision: String::new(),
                last_attempted_revision: String::new(),
                tree: None,
                out_of_sync: Vec::new(),
                history: Vec::new(),
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
        // Its address is not shown: a webhook's path is often its secret.
        Kind::Provider => ui.providers.get(&key(&name, &namespace)).map(|o| {
            let st = o.status.clone().unwrap_or_default();
            let last_delivery = st
                .last_delivery
                .as_ref()
                .map(|d| format!("{} at {}: {}: {}", d.result, d.time, d.event, d.message));
            Detail {
                commit: None,
                last_sync: None,
                last_delivery,
                item: list::provider(&o, now),
                conditions: st.conditions,
                artifact: None,
                source: format!("{} Provider", o.spec.kind),
                last_applied_revision: String::new(),
                last_attempted_revision: String::new(),
                tree: None,
                out_of_sync: Vec::new(),
                history: Vec::new(),
                events: Vec::new(),
            }
        }),
        Kind::Receiver | Kind::Alert => None,
    };
    let Some(mut detail) = found else {
        return refuse(StatusCode::NOT_FOUND, "no such object");
    };
    let named = Named {
        kind: k,
        name: name.clone(),
    };
    if matches!(
        k,
        Kind::Kustomization | Kind::Application | Kind::ApplicationSet
    ) {
        match skewer_view::tree::tree(&ui.client, &namespace, &named).await {
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
    // The reflector's copy keeps no history: read it live, as the Application is.
    if k == Kind::Kustomization {
        let api: Api<skewer_api::Kustomization> = Api::namespaced(ui.client.clone(), &namespace);
        if let Ok(Some(live)) = api.get_opt(&name).await {
            detail.history = live.status.map(|s| s.history).unwrap_or_default();
        }
    }
    if may_get(&ui, &who, "events.k8s.io", "events", &namespace).await {
        detail.events = skewer_view::events::list(&ui.client, Some(&namespace), Some(&named))
            .await
            .unwrap_or_default();
    }
    json(&detail)
}

fn source_detail(
    item: list::Item,
    url: String,
    status: Option<skewer_api::SourceStatus>,
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
        last_delivery: None,
        last_attempted_revision: String::new(),
        tree: None,
        out_of_sync: Vec::new(),
        history: Vec::new(),
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
    match ui.differ.diff(&app, &visible).await {
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
async fn prune_unseen(ui: &Ui, who: &Viewer, nodes: &mut Vec<skewer_view::tree::Node>) {
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
