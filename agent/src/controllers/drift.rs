//! Self-heal. Every applied object is recorded in an [`Index`] with what skewer's apply left
//! ([`Seen`]); one metadata-only watch per kind, selecting skewer's owner label, compares
//! each event with the index and re-applies just the object that drifted. No timers, no
//! full re-applies, no per-object reads.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use skewer_appliers::ObjectId;
use skewer_appliers::apply::{ApplyOptions, Planned};
use skewer_appliers::drift::{Seen, Verdict, judge};
use skewer_appliers::transform::OWNER_NAME;
use tracing::{info, warn};

use super::Context;

struct Desired {
    planned: Arc<Planned>,
    owner: String,
    /// `None` while an apply of this object is in flight.
    seen: Option<Seen>,
}

struct OwnerState {
    opts: Arc<ApplyOptions>,
    ids: HashSet<ObjectId>,
    /// The revision and generation last applied in full, and when.
    applied: Option<(String, Option<i64>, Instant)>,
}

/// What skewer last applied, per object and per owner (`namespace/name` of a Kustomization).
#[derive(Default)]
pub struct Index {
    objects: HashMap<ObjectId, Desired>,
    owners: HashMap<String, OwnerState>,
}

/// An object to re-apply, and how.
pub struct Heal {
    pub planned: Arc<Planned>,
    pub opts: Arc<ApplyOptions>,
    /// What changed, for the log.
    pub why: String,
}

impl Index {
    /// Records that `owner` is about to apply `planned`: entries are pending (not judged) until
    /// [`Index::applied`]; the owner's objects that are not in `planned` leave the index, so
    /// that pruning them is not mistaken for drift.
    pub fn begin<'a>(
        &mut self,
        owner: &str,
        opts: Arc<ApplyOptions>,
        planned: impl IntoIterator<Item = &'a Planned>,
    ) {
        let mut ids = HashSet::new();
        for p in planned {
            let id = p.manifest.id();
            ids.insert(id.clone());
            self.objects.insert(
                id,
                Desired {
                    planned: Arc::new(p.clone()),
                    owner: owner.into(),
                    seen: None,
                },
            );
        }
        if let Some(old) = self.owners.insert(
            owner.into(),
            OwnerState {
                opts,
                ids: ids.clone(),
                applied: None,
            },
        ) {
            for id in old.ids.difference(&ids) {
                self.remove_if_owned(id, owner);
            }
        }
    }

    /// Records what an apply left.
    pub fn applied(&mut self, id: &ObjectId, seen: Option<Seen>) {
        if let Some(d) = self.objects.get_mut(id) {
            d.seen = seen;
        }
    }

    /// Records that `owner` applied `revision` at `generation` in full.
    pub fn completed(&mut self, owner: &str, revision: &str, generation: Option<i64>) {
        if let Some(o) = self.owners.get_mut(owner) {
            o.applied = Some((revision.into(), generation, Instant::now()));
        }
    }

    /// Whether `owner`'s last full apply in this process was `revision` at `generation`,
    /// less than `max_age` ago (when given).
    pub fn is_applied(
        &self,
        owner: &str,
        revision: &str,
        generation: Option<i64>,
        max_age: Option<std::time::Duration>,
    ) -> bool {
        self.owners
            .get(owner)
            .and_then(|o| o.applied.as_ref())
            .is_some_and(|(r, g, at)| {
                r == revision && *g == generation && max_age.is_none_or(|m| at.elapsed() < m)
            })
    }

    /// Stops healing `owner`'s objects (suspended, deleted, or failing).
    pub fn forget_owner(&mut self, owner: &str) {
        if let Some(o) = self.owners.remove(owner) {
            for id in &o.ids {
                self.remove_if_owned(id, owner);
            }
        }
    }

    fn remove_if_owned(&mut self, id: &ObjectId, owner: &str) {
        if self.objects.get(id).is_some_and(|d| d.owner == owner) {
            self.objects.remove(id);
        }
    }

    /// Judges a watch event (`live`: `None` when deleted). On drift the entry turns pending
    /// and the object to re-apply is returned.
    pub fn observe(&mut self, id: &ObjectId, live: Option<Seen>) -> Option<Heal> {
        let d = self.objects.get_mut(id)?;
        let why = match (judge(d.seen, live), d.seen, live) {
            (Verdict::InSync, ..) => return None,
            (_, Some(was), Some(now)) if was.generation != now.generation => {
                format!("generation {:?} -> {:?}", was.generation, now.generation)
            }
            (Verdict::Changed, ..) => {
                "fields skewer applied were changed by another manager".to_string()
            }
            (Verdict::Deleted, ..) => "deleted".to_string(),
        };
        d.seen = None;
        let opts = self.owners.get(&d.owner)?.opts.clone();
        Some(Heal {
            planned: d.planned.clone(),
            opts,
            why,
        })
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// The index and the kinds already watched.
#[derive(Default)]
pub struct Drift {
    pub index: Mutex<Index>,
    watched: Mutex<HashSet<(String, String, String)>>,
}

impl Drift {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Starts a watch for each kind in `resources` not watched yet.
pub fn ensure_watches<'a>(
    ctx: &Arc<Context>,
    resources: impl IntoIterator<Item = &'a ApiResource>,
) {
    let mut watched = ctx.drift.watched.lock().unwrap_or_else(|e| e.into_inner());
    for ar in resources {
        let key = (ar.group.clone(), ar.version.clone(), ar.kind.clone());
        if watched.insert(key) {
            tokio::spawn(watch_kind(ctx.clone(), ar.clone()));
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

/// One metadata watch of one kind across the cluster, limited to objects with skewer's
/// owner label.
async fn watch_kind(ctx: Arc<Context>, ar: ApiResource) {
    // Metadata only: managedFields and generation are all drift needs.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(ctx.client.clone(), &ar);
    let config = watcher::Config::default().labels(OWNER_NAME);
    let mut events = watcher(api, config).default_backoff().boxed();
    info!(kind = %ar.kind, group = %ar.group, "watching for drift");
    while let Some(event) = events.next().await {
        let (meta, live) = match event {
            Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => {
                let seen = Seen::of(&m.metadata, super::kustomization::FIELD_MANAGER);
                (m, Some(seen))
            }
            Ok(watcher::Event::Delete(m)) => (m, None),
            Ok(_) => continue,
            Err(e) => {
                warn!(kind = %ar.kind, error = %e, "drift watch");
                continue;
            }
        };
        let id = id_of(&meta, &ar);
        let heal = ctx.drift.lock().observe(&id, live);
        if let Some(heal) = heal {
            let ctx = ctx.clone();
            let deleted = live.is_none();
            tokio::spawn(async move { repair(ctx, id, heal, deleted).await });
        }
    }
}

async fn repair(ctx: Arc<Context>, id: ObjectId, heal: Heal, deleted: bool) {
    let started = Instant::now();
    match ctx.applier.apply_one(&heal.planned, &heal.opts).await {
        Ok(outcome) => {
            ctx.drift.lock().applied(&id, outcome.seen);
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
            info!(object = %id.display(), why = %heal.why, elapsed_ms = started.elapsed().as_millis() as u64, "{what}");
        }
        Err(e) => {
            // Left pending: the next full reconcile reports the error in status.
            warn!(object = %id.display(), error = %e, "cannot correct drift");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;
    use serde_json::json;
    use skewer_appliers::Manifest;
    use skewer_appliers::resources::Resolved;
    use skewer_appliers::transform::{Owner, Transform};

    fn planned(name: &str) -> Planned {
        let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
        Planned {
            manifest: Manifest {
                origin: String::new(),
                object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}}),
            },
            resource: Resolved {
                resource: ApiResource::from_gvk(&gvk),
                namespaced: true,
            },
        }
    }

    fn opts() -> Arc<ApplyOptions> {
        Arc::new(ApplyOptions {
            field_manager: "skewer".into(),
            owner: Owner {
                name: "a".into(),
                namespace: "ns".into(),
            },
            transform: Transform::default(),
            force: false,
            concurrency: 1,
            wait_timeout: std::time::Duration::from_secs(1),
        })
    }

    const S1: Seen = Seen {
        fields: Some(1),
        generation: Some(1),
    };

    #[test]
    fn drift_is_judged_only_after_the_apply_is_recorded() {
        let mut idx = Index::default();
        let (a, b) = (planned("a"), planned("b"));
        idx.begin("ns/a", opts(), [&a, &b]);
        let id = a.manifest.id();
        assert!(
            idx.observe(&id, None).is_none(),
            "pending entries are not judged"
        );
        idx.applied(&id, Some(S1));
        assert!(idx.observe(&id, Some(S1)).is_none());
        let heal = idx.observe(&id, None).expect("deletion is drift");
        assert_eq!(heal.planned.manifest.name(), "a");
        assert!(idx.observe(&id, None).is_none(), "one repair at a time");
    }

    #[test]
    fn objects_leaving_the_source_and_forgotten_owners_are_not_healed() {
        let mut idx = Index::default();
        let (a, b) = (planned("a"), planned("b"));
        idx.begin("ns/a", opts(), [&a, &b]);
        idx.applied(&b.manifest.id(), Some(S1));
        idx.begin("ns/a", opts(), [&a]);
        assert!(
            idx.observe(&b.manifest.id(), None).is_none(),
            "pruned, not drift"
        );
        assert_eq!(idx.len(), 1);
        idx.forget_owner("ns/a");
        assert!(idx.is_empty());
    }

    #[test]
    fn applied_revision_is_tracked_per_owner() {
        let mut idx = Index::default();
        idx.begin("ns/a", opts(), [&planned("a")]);
        assert!(!idx.is_applied("ns/a", "main@sha1:1", Some(1), None));
        idx.completed("ns/a", "main@sha1:1", Some(1));
        assert!(idx.is_applied("ns/a", "main@sha1:1", Some(1), None));
        assert!(!idx.is_applied("ns/a", "main@sha1:1", Some(2), None));
        assert!(
            !idx.is_applied(
                "ns/a",
                "main@sha1:1",
                Some(1),
                Some(std::time::Duration::ZERO)
            ),
            "full sync due"
        );
        idx.begin("ns/a", opts(), [&planned("a")]);
        assert!(
            !idx.is_applied("ns/a", "main@sha1:1", Some(1), None),
            "a new apply starts afresh"
        );
    }
}
