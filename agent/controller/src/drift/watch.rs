//! The watches of self-heal: one metadata-only watch per kind on each target, limited to
//! objects with skewer's owner label, feeding [`super::Index::observe`]; a drifted object is
//! re-applied through its target's applier. A watch that broke (an API server restart, a
//! network cut) re-lists; what the re-list lacks was deleted meanwhile
//! ([`super::Index::missing`]) and is re-applied as soon as the list is in.
//!
//! A target that may not list across its cluster (a tenant's identity, a cluster registered
//! for some namespaces) watches each namespaced kind in each namespace it applied to; a watch
//! the server forbids ends, and is tried again with the next full apply.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use skewer_appliers::ObjectId;
use skewer_appliers::apply::Planned;
use skewer_appliers::drift::Seen;
use skewer_appliers::transform::OWNER_NAME;
use tracing::{info, warn};

use super::Heal;
use crate::runtime::context::Context;
use crate::targets::{Target, WatchKey};

/// The watches `planned` needs on `target`: one per kind, and per namespace when the target
/// watches per namespace.
pub fn needed<'a>(
    target: &Target,
    planned: impl IntoIterator<Item = &'a Planned>,
) -> HashMap<WatchKey, ApiResource> {
    let per_namespace = target.per_namespace();
    let mut needed = HashMap::new();
    for p in planned {
        let ar = &p.resource.resource;
        let namespace =
            (per_namespace && p.resource.namespaced).then(|| p.manifest.namespace().to_string());
        let key = (
            ar.group.clone(),
            ar.version.clone(),
            ar.kind.clone(),
            namespace,
        );
        needed.entry(key).or_insert_with(|| ar.clone());
    }
    needed
}

/// Starts each of the `needed` watches not running on `target` yet.
///
/// Called once a sync's applies are done, not before: a watch started before would hear every
/// object the sync creates as an event (as many events as objects, which the API server must
/// filter, convert and send while it serves the applies), where one started after lists them
/// at once. Nothing is missed: its list compares what is there with what was applied, so a
/// change or a deletion since the apply is healed as soon as the list is in.
pub fn ensure(ctx: &Arc<Context>, target: &Arc<Target>, needed: HashMap<WatchKey, ApiResource>) {
    let mut watched = target.watched.lock().unwrap_or_else(|e| e.into_inner());
    for (key, ar) in needed {
        if watched.insert(key.clone()) {
            let namespace = key.3.clone();
            let task = watch_kind(ctx.clone(), target.clone(), ar, namespace);
            let target = target.clone();
            target.clone().spawn(async move {
                task.await;
                // Ended (forbidden): the next full apply may start it again.
                target
                    .watched
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
            });
        }
    }
}

fn id_of(meta: &PartialObjectMeta<DynamicObject>, ar: &ApiResource) -> ObjectId {
    ObjectId {
        namespace: meta.metadata.namespace.clone().unwrap_or_default(),
        name: meta.metadata.name.clone().unwrap_or_default(),
        group: ar.group.clone(),
        kind: ar.kind.clone(),
    }
}

/// One metadata watch of one kind across a target's cluster, or in one namespace of it. Ends
/// when the server forbids it.
async fn watch_kind(
    ctx: Arc<Context>,
    target: Arc<Target>,
    ar: ApiResource,
    namespace: Option<String>,
) {
    // Metadata only: managedFields and generation are all drift needs. Lists are quorum
    // reads, so that a re-list after an outage shows what is really there now.
    let api: Api<PartialObjectMeta<DynamicObject>> = match &namespace {
        Some(ns) => Api::namespaced_with(target.client.clone(), ns, &ar),
        None => Api::all_with(target.client.clone(), &ar),
    };
    let config = crate::api::watch::config().labels(OWNER_NAME);
    let mut events = crate::api::watch::stream(api, config).boxed();
    let scope = namespace.as_deref().unwrap_or("<all>");
    info!(kind = %ar.kind, group = %ar.group, namespace = scope, target = %target.key, "watching for drift");
    // While a (re-)list is under way: when it began, and what it returned so far.
    let mut relist: Option<(Instant, HashSet<ObjectId>)> = None;
    while let Some(event) = events.next().await {
        let (meta, live) = match event {
            Ok(watcher::Event::Init) => {
                relist = Some((Instant::now(), HashSet::new()));
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                if let Some((since, listed)) = relist.take() {
                    let gone = ctx.drift.lock().missing(
                        &target.key,
                        &ar.group,
                        &ar.kind,
                        namespace.as_deref(),
                        &listed,
                        since,
                    );
                    ctx.drift.announce();
                    for (id, heal) in gone {
                        let (ctx, target) = (ctx.clone(), target.clone());
                        tokio::spawn(async move { repair(ctx, target, id, heal, true).await });
                    }
                }
                continue;
            }
            Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => {
                if let Some((_, listed)) = &mut relist {
                    listed.insert(id_of(&m, &ar));
                }
                let seen = Seen::of(&m.metadata, crate::api::FIELD_MANAGER);
                (m, Some(seen))
            }
            Ok(watcher::Event::Delete(m)) => (m, None),
            Err(e) => {
                warn!(kind = %ar.kind, namespace = scope, target = %target.key, error = %e, "drift watch");
                if forbidden(&e) {
                    return;
                }
                continue;
            }
        };
        let id = id_of(&meta, &ar);
        let heal = ctx.drift.lock().observe(&target.key, &id, live);
        ctx.drift.announce();
        if let Some(heal) = heal {
            let (ctx, target) = (ctx.clone(), target.clone());
            let deleted = live.is_none();
            tokio::spawn(async move { repair(ctx, target, id, heal, deleted).await });
        }
    }
}

fn forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

async fn repair(ctx: Arc<Context>, target: Arc<Target>, id: ObjectId, heal: Heal, deleted: bool) {
    let started = Instant::now();
    match target.applier.apply_one(&heal.planned, &heal.opts).await {
        Ok(outcome) => {
            ctx.drift.lock().applied(&target.key, &id, outcome.seen);
            let change = if deleted { "deleted" } else { "changed" };
            ctx.metrics
                .drift_corrected
                .get_or_create(&crate::metrics::DriftLabels {
                    kind: id.kind.clone(),
                    change,
                })
                .inc();
            let what = if deleted {
                "recreated deleted object"
            } else {
                "reverted drift"
            };
            info!(object = %id.display(), target = %target.key, why = %heal.why, elapsed_ms = started.elapsed().as_millis() as u64, "{what}");
        }
        Err(e) => {
            // Left pending: the next full reconcile reports the error in status.
            warn!(object = %id.display(), target = %target.key, error = %e, "cannot correct drift");
        }
    }
}
