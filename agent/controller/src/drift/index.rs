//! What skewer last applied, per object on each target and per owner: the pure half of
//! self-heal. Watch events go in ([`Index::observe`]), the object to re-apply comes out. An
//! object is known by its target *and* its id, so the same object on two clusters (or applied
//! as two identities) is two objects. Tested without a cluster.
//!
//! Every object applied has an entry, so entries are kept small: a key of one string, the
//! owner shared, the object as JSON text.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use skewer_appliers::apply::{ApplyOptions, Planned};
use skewer_appliers::drift::{Seen, Verdict, judge};
use skewer_appliers::resources::Resolved;
use skewer_appliers::{Manifest, ObjectId};

use crate::targets::TargetKey;

/// An object on a target as the index keys it: the target's number in [`Index::targets`] and
/// the object's inventory id (`target␀namespace_name_group_kind`), in one string. One
/// allocation where a `(TargetKey, ObjectId)` took six, shared by the object's entry and its
/// owner's set.
type Slot = Arc<str>;

/// The [`Slot`] text of object `id` on target number `target`.
fn slot(target: u32, id: &ObjectId) -> String {
    format!("{target}\0{id}")
}

/// The target number and the id of a [`Slot`].
fn unslot(slot: &str) -> Option<(u32, ObjectId)> {
    let (target, id) = slot.split_once('\0')?;
    Some((target.parse().ok()?, ObjectId::parse(id)?))
}

/// A planned object as the index keeps it: its JSON text rather than a `serde_json::Value`
/// (a tenth of the memory: 10,000 ConfigMaps took 30 MiB as values), its kind's resolution
/// shared with the other objects of its kind. Parsed back only to re-apply it.
struct Kept {
    origin: Box<str>,
    json: Box<[u8]>,
    resource: Arc<Resolved>,
}

impl Kept {
    fn planned(&self) -> Option<Planned> {
        Some(Planned {
            manifest: Manifest {
                origin: self.origin.to_string(),
                object: serde_json::from_slice(&self.json).ok()?,
            },
            resource: (*self.resource).clone(),
        })
    }
}

/// An object's JSON text: equal objects have equal texts (maps are sorted).
fn text(object: &serde_json::Value) -> Box<[u8]> {
    serde_json::to_vec(object)
        .unwrap_or_default()
        .into_boxed_slice()
}

struct Desired {
    planned: Kept,
    owner: Arc<str>,
    /// `None` while an apply of this object is in flight.
    seen: Option<Seen>,
    /// When the last apply of it finished.
    applied_at: Option<Instant>,
}

struct OwnerState {
    name: Arc<str>,
    opts: Arc<ApplyOptions>,
    slots: HashSet<Slot>,
    /// The revision and generation last applied in full, through which client of its target
    /// (its epoch), and when.
    applied: Option<(String, Option<i64>, u64, Instant)>,
    /// Drift is repaired (self-heal); else it is only recorded in `drifted`.
    heal: bool,
    drifted: HashSet<Slot>,
}

/// What skewer last applied, per object and per owner (`Kind/namespace/name` of a
/// Kustomization or Application).
#[derive(Default)]
pub struct Index {
    /// Ordered, so that one target's objects are one range, and growing it never holds two
    /// tables at once (a hash map doubling past 8,192 entries did, 2 MiB at 10,000 objects).
    objects: BTreeMap<Slot, Desired>,
    owners: HashMap<String, OwnerState>,
    /// Owners that leave drift alone and saw some since [`Index::take_fresh`].
    fresh: Vec<String>,
    /// Each kind's resolution, shared by the entries of that kind.
    kinds: HashMap<String, Arc<Resolved>>,
    /// Every target applied to, numbered in order of first use (a handful: clusters ×
    /// identities).
    targets: Vec<TargetKey>,
}

/// An object to re-apply, and how.
pub struct Heal {
    pub planned: Planned,
    pub opts: Arc<ApplyOptions>,
    /// What changed, for the log.
    pub why: String,
}

impl Index {
    /// The number of `target`, if anything was applied to it.
    fn target_no(&self, target: &TargetKey) -> Option<u32> {
        let i = self.targets.iter().position(|t| t == target)?;
        u32::try_from(i).ok()
    }

    /// The number of `target`, numbering it when it is new.
    fn number(&mut self, target: &TargetKey) -> u32 {
        if let Some(n) = self.target_no(target) {
            return n;
        }
        self.targets.push(target.clone());
        u32::try_from(self.targets.len() - 1).unwrap_or(u32::MAX)
    }

    /// The slot text of `id` on `target`, if anything was applied to that target.
    fn slot_of(&self, target: &TargetKey, id: &ObjectId) -> Option<String> {
        Some(slot(self.target_no(target)?, id))
    }

    /// `kind` of `p`, shared with every entry of that kind.
    fn kind_of(&mut self, p: &Planned) -> Arc<Resolved> {
        let r = &p.resource.resource;
        let key = format!("{}/{}", r.api_version, r.plural);
        if let Some(k) = self.kinds.get(&key) {
            return k.clone();
        }
        let k = Arc::new(p.resource.clone());
        self.kinds.insert(key, k.clone());
        k
    }

    /// Records that `owner` is about to apply `planned` on `target`: entries are pending (not
    /// judged) until [`Index::applied`]; the owner's objects that are not in `planned` (or
    /// were on another target) leave the index, so that pruning them is not mistaken for drift.
    pub fn begin<'a>(
        &mut self,
        owner: &str,
        target: &TargetKey,
        opts: Arc<ApplyOptions>,
        planned: impl IntoIterator<Item = &'a Planned>,
    ) {
        let t = self.number(target);
        let name: Arc<str> = match self.owners.get(owner) {
            Some(o) => o.name.clone(),
            None => owner.into(),
        };
        let mut slots = HashSet::new();
        for p in planned {
            let key: Slot = slot(t, &p.manifest.id()).into();
            // An object applied before exactly as planned, and not drifted since, keeps what
            // its apply left: it may not be applied again (see [`Index::unchanged`]).
            let json = text(&p.manifest.object);
            let kept = match self.objects.get(&key) {
                Some(d) if self.settled(owner, &key, d, &json) => (d.seen, d.applied_at),
                _ => (None, None),
            };
            let planned = Kept {
                origin: p.manifest.origin.as_str().into(),
                json,
                resource: self.kind_of(p),
            };
            slots.insert(key.clone());
            self.objects.insert(
                key,
                Desired {
                    planned,
                    owner: name.clone(),
                    seen: kept.0,
                    applied_at: kept.1,
                },
            );
        }
        let stale: Vec<Slot> = match self.owners.get(owner) {
            Some(old) => old.slots.difference(&slots).cloned().collect(),
            None => Vec::new(),
        };
        for key in stale {
            self.remove_if_owned(&key, owner);
        }
        let state = OwnerState {
            name,
            opts,
            slots,
            applied: None,
            heal: true,
            drifted: HashSet::new(),
        };
        self.owners.insert(owner.into(), state);
    }

    /// Whether `d` (the entry of `key`) was applied by `owner` exactly as planned (`json`, its
    /// [`text`]), and has not drifted since.
    fn settled(&self, owner: &str, key: &str, d: &Desired, json: &[u8]) -> bool {
        *d.owner == *owner
            && d.seen.is_some()
            && *d.planned.json == *json
            && !self
                .owners
                .get(owner)
                .is_some_and(|o| o.drifted.contains(key))
    }

    /// Of `planned`, the objects `owner` applied before exactly as planned, through the same
    /// target, within `max_age` (when given), that have not drifted since: applying them again
    /// would change nothing. Call before [`Index::begin`].
    pub fn unchanged<'a>(
        &self,
        owner: &str,
        target: &TargetKey,
        planned: impl IntoIterator<Item = &'a Planned>,
        max_age: Option<Duration>,
    ) -> std::collections::BTreeSet<ObjectId> {
        let Some(t) = self.target_no(target) else {
            return Default::default();
        };
        planned
            .into_iter()
            .filter_map(|p| {
                let id = p.manifest.id();
                let key = slot(t, &id);
                let d = self.objects.get(key.as_str())?;
                let fresh = d
                    .applied_at
                    .is_some_and(|at| max_age.is_none_or(|m| at.elapsed() < m));
                (fresh && self.settled(owner, &key, d, &text(&p.manifest.object))).then_some(id)
            })
            .collect()
    }

    /// Records what an apply on `target` left.
    pub fn applied(&mut self, target: &TargetKey, id: &ObjectId, seen: Option<Seen>) {
        let Some(key) = self.slot_of(target, id) else {
            return;
        };
        if let Some(d) = self.objects.get_mut(key.as_str()) {
            d.seen = seen;
            d.applied_at = Some(Instant::now());
        }
    }

    /// Records that `owner` applied `revision` at `generation` in full.
    /// `epoch` names the target's client: one rebuilt since (new credentials, a cluster that
    /// came back) has another, and its drift watches start with the next full apply.
    pub fn completed(&mut self, owner: &str, revision: &str, generation: Option<i64>, epoch: u64) {
        if let Some(o) = self.owners.get_mut(owner) {
            o.applied = Some((revision.into(), generation, epoch, Instant::now()));
        }
    }

    /// Whether `owner`'s last full apply in this process was `revision` at `generation`,
    /// through the target client of `epoch`, less than `max_age` ago (when given).
    pub fn is_applied(
        &self,
        owner: &str,
        (revision, generation, epoch): (&str, Option<i64>, u64),
        max_age: Option<Duration>,
    ) -> bool {
        self.owners
            .get(owner)
            .and_then(|o| o.applied.as_ref())
            .is_some_and(|(r, g, e, at)| {
                r == revision
                    && *g == generation
                    && *e == epoch
                    && max_age.is_none_or(|m| at.elapsed() < m)
            })
    }

    /// Leaves drift of `owner`'s objects alone, recording it (until its next [`Index::begin`]).
    pub fn leave_drift(&mut self, owner: &str) {
        if let Some(o) = self.owners.get_mut(owner) {
            o.heal = false;
        }
    }

    /// The objects of `owner` that drifted and were left alone since its last apply.
    pub fn drifted(&self, owner: &str) -> Vec<ObjectId> {
        let mut ids: Vec<ObjectId> = self
            .owners
            .get(owner)
            .map(|o| {
                o.drifted
                    .iter()
                    .filter_map(|s| Some(unslot(s)?.1))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// The owners that saw drift left alone since the last call.
    pub fn take_fresh(&mut self) -> Vec<String> {
        std::mem::take(&mut self.fresh)
    }

    /// Stops healing `owner`'s objects (suspended, deleted, or failing).
    pub fn forget_owner(&mut self, owner: &str) {
        if let Some(o) = self.owners.remove(owner) {
            for key in &o.slots {
                self.remove_if_owned(key, owner);
            }
        }
    }

    fn remove_if_owned(&mut self, key: &str, owner: &str) {
        if self.objects.get(key).is_some_and(|d| *d.owner == *owner) {
            self.objects.remove(key);
        }
    }

    /// Judges a watch event on `target` (`live`: `None` when deleted). On drift the entry turns
    /// pending and the object to re-apply is returned.
    pub fn observe(
        &mut self,
        target: &TargetKey,
        id: &ObjectId,
        live: Option<Seen>,
    ) -> Option<Heal> {
        let key = self.slot_of(target, id)?;
        let d = self.objects.get(key.as_str())?;
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
        self.drift(&key, why)
    }

    /// Drift of the object of `key`: its entry turns pending and the object to re-apply is
    /// returned, or, when its owner leaves drift alone, the drift is recorded.
    fn drift(&mut self, key: &str, why: String) -> Option<Heal> {
        let d = self.objects.get_mut(key)?;
        let owner = self.owners.get_mut(&*d.owner)?;
        if !owner.heal {
            let slot = owner.slots.get(key).cloned().unwrap_or_else(|| key.into());
            if owner.drifted.insert(slot) {
                self.fresh.push(d.owner.to_string());
            }
            return None;
        }
        d.seen = None;
        Some(Heal {
            planned: d.planned.planned()?,
            opts: owner.opts.clone(),
            why,
        })
    }

    /// After a watch of `group`/`kind` on `target` re-listed (it was broken, and events may
    /// have been lost): every object of that kind that skewer applied before the list began
    /// (`listed_since`) and that the list did not return was deleted meanwhile. They turn
    /// pending and come back as objects to re-apply. Objects applied after the list began may
    /// be missing from it for no fault of theirs, and are left alone. A watch of one
    /// `namespace` judges only that namespace's objects.
    #[allow(clippy::too_many_arguments)]
    pub fn missing(
        &mut self,
        target: &TargetKey,
        group: &str,
        kind: &str,
        namespace: Option<&str>,
        listed: &HashSet<ObjectId>,
        listed_since: Instant,
    ) -> Vec<(ObjectId, Heal)> {
        let Some(t) = self.target_no(target) else {
            return Vec::new();
        };
        // Only keys of this target and kind are parsed back into ids.
        let (on_target, of_kind) = (format!("{t}\0"), format!("_{group}_{kind}"));
        let gone: Vec<(Slot, ObjectId)> = self
            .objects
            .range::<str, _>((Bound::Included(on_target.as_str()), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(&on_target))
            .filter(|(key, d)| {
                key.ends_with(&of_kind)
                    && d.seen.is_some()
                    && d.applied_at.is_some_and(|at| at < listed_since)
            })
            .filter_map(|(key, _)| {
                let (on, id) = unslot(key)?;
                let judged = on == t
                    && id.group == group
                    && id.kind == kind
                    && namespace.is_none_or(|ns| id.namespace == ns);
                (judged && !listed.contains(&id)).then(|| (key.clone(), id))
            })
            .collect();
        gone.into_iter()
            .filter_map(|(key, id)| {
                let why = "deleted while the watch was down (not in its re-list)".to_string();
                Some((id, self.drift(&key, why)?))
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::ClusterRef;
    use kube::api::{ApiResource, GroupVersionKind};
    use serde_json::json;
    use skewer_appliers::Manifest;
    use skewer_appliers::resources::Resolved;
    use skewer_appliers::transform::{Owner, Transform};

    #[test]
    fn objects_applied_as_planned_and_not_drifted_need_no_apply() {
        let mut idx = Index::default();
        let (a, b) = (planned("a"), planned("b"));
        assert!(
            idx.unchanged(OWNER, &HUB, [&a, &b], None).is_empty(),
            "never applied"
        );
        idx.begin(OWNER, &HUB, opts(), [&a, &b]);
        idx.applied(&HUB, &a.manifest.id(), Some(S1));
        // b's apply failed: it stays pending.
        let unchanged = idx.unchanged(OWNER, &HUB, [&a, &b], None);
        assert_eq!(unchanged.into_iter().collect::<Vec<_>>(), [a.manifest.id()]);
        // Beginning again keeps a as applied, so it is still judged against what was applied.
        idx.begin(OWNER, &HUB, opts(), [&a, &b]);
        assert_eq!(idx.unchanged(OWNER, &HUB, [&a], None).len(), 1);
        assert!(
            idx.unchanged(OWNER, &HUB, [&a], Some(Duration::ZERO))
                .is_empty(),
            "too old"
        );
        assert!(
            idx.unchanged(OWNER, &spoke(), [&a], None).is_empty(),
            "another target"
        );
        assert!(
            idx.unchanged("Kustomization/ns/other", &HUB, [&a], None)
                .is_empty()
        );
        // A changed manifest is applied.
        let mut changed = a.clone();
        changed.manifest.object["data"] = serde_json::json!({"k": "v"});
        assert!(idx.unchanged(OWNER, &HUB, [&changed], None).is_empty());
        // Drift makes it pending (healed), or recorded (left): either way applied again.
        assert!(idx.observe(&HUB, &a.manifest.id(), None).is_some());
        assert!(idx.unchanged(OWNER, &HUB, [&a], None).is_empty());
        idx.applied(&HUB, &a.manifest.id(), Some(S1));
        idx.leave_drift(OWNER);
        assert!(idx.observe(&HUB, &a.manifest.id(), None).is_none());
        assert!(
            idx.unchanged(OWNER, &HUB, [&a], None).is_empty(),
            "drift left is re-applied on sync"
        );
    }

    #[test]
    fn drift_of_an_owner_that_leaves_it_is_recorded_not_healed() {
        let mut idx = Index::default();
        let a = planned("a");
        let id = a.manifest.id();
        idx.begin(OWNER, &HUB, opts(), [&a]);
        idx.leave_drift(OWNER);
        idx.applied(&HUB, &id, Some(S1));
        assert!(idx.observe(&HUB, &id, None).is_none(), "not healed");
        assert_eq!(idx.drifted(OWNER), std::slice::from_ref(&id));
        assert_eq!(idx.take_fresh(), [OWNER.to_string()]);
        assert!(idx.observe(&HUB, &id, None).is_none());
        assert!(idx.take_fresh().is_empty(), "reported once");
        // The next apply heals by default and starts with nothing drifted.
        idx.begin(OWNER, &HUB, opts(), [&a]);
        assert!(idx.drifted(OWNER).is_empty());
        idx.applied(&HUB, &id, Some(S1));
        assert!(idx.observe(&HUB, &id, None).is_some());
    }

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
            wait_timeout: Duration::from_secs(1),
        })
    }

    fn spoke() -> TargetKey {
        TargetKey {
            cluster: ClusterRef::Registered("spoke".into()),
            identity: None,
        }
    }

    const S1: Seen = Seen {
        fields: Some(1),
        generation: Some(1),
    };
    const HUB: TargetKey = TargetKey::HUB;
    const OWNER: &str = "Kustomization/ns/a";

    #[test]
    fn a_slot_holds_the_target_and_the_whole_id() {
        let ids = [
            ObjectId::parse("ns_a__ConfigMap").expect("id"),
            ObjectId::parse("_ns__Namespace").expect("id"),
            ObjectId::parse("ns_b.c_apps_Deployment").expect("id"),
        ];
        for id in ids {
            assert_eq!(unslot(&slot(7, &id)), Some((7, id.clone())), "{id:?}");
        }
        assert_eq!(unslot("7\0only"), None);
    }

    #[test]
    fn drift_is_judged_only_after_the_apply_is_recorded() {
        let mut idx = Index::default();
        let (a, b) = (planned("a"), planned("b"));
        idx.begin(OWNER, &HUB, opts(), [&a, &b]);
        let id = a.manifest.id();
        assert!(
            idx.observe(&HUB, &id, None).is_none(),
            "pending entries are not judged"
        );
        idx.applied(&HUB, &id, Some(S1));
        assert!(idx.observe(&HUB, &id, Some(S1)).is_none());
        let heal = idx.observe(&HUB, &id, None).expect("deletion is drift");
        assert_eq!(heal.planned.manifest.name(), "a");
        assert!(
            idx.observe(&HUB, &id, None).is_none(),
            "one repair at a time"
        );
    }

    #[test]
    fn objects_leaving_the_source_and_forgotten_owners_are_not_healed() {
        let mut idx = Index::default();
        let (a, b) = (planned("a"), planned("b"));
        idx.begin(OWNER, &HUB, opts(), [&a, &b]);
        idx.applied(&HUB, &b.manifest.id(), Some(S1));
        idx.begin(OWNER, &HUB, opts(), [&a]);
        assert!(
            idx.observe(&HUB, &b.manifest.id(), None).is_none(),
            "pruned, not drift"
        );
        assert_eq!(idx.len(), 1);
        idx.forget_owner(OWNER);
        assert!(idx.is_empty());
    }

    #[test]
    fn the_same_object_on_two_targets_is_two_objects() {
        let mut idx = Index::default();
        let a = planned("a");
        let id = a.manifest.id();
        idx.begin(OWNER, &HUB, opts(), [&a]);
        idx.begin("Kustomization/ns/other", &spoke(), opts(), [&a]);
        idx.applied(&HUB, &id, Some(S1));
        assert_eq!(idx.len(), 2);
        assert!(
            idx.observe(&spoke(), &id, None).is_none(),
            "the spoke's copy is still being applied"
        );
        assert!(
            idx.observe(&HUB, &id, None).is_some(),
            "the hub's copy drifted"
        );

        // An owner that moves to another target stops healing where it was.
        idx.begin(OWNER, &spoke(), opts(), [&a]);
        idx.applied(&HUB, &id, Some(S1));
        assert!(
            idx.observe(&HUB, &id, None).is_none(),
            "no longer the hub's"
        );
    }

    #[test]
    fn a_relist_finds_what_was_deleted_while_the_watch_was_down() {
        let mut idx = Index::default();
        let (a, b, c) = (planned("a"), planned("b"), planned("c"));
        idx.begin(OWNER, &HUB, opts(), [&a, &b, &c]);
        idx.applied(&HUB, &a.manifest.id(), Some(S1));
        idx.applied(&HUB, &b.manifest.id(), Some(S1));
        // Another target's object of the same kind, applied before the list too.
        let d = planned("d");
        idx.begin("Kustomization/apps/on-spoke", &spoke(), opts(), [&d]);
        idx.applied(&spoke(), &d.manifest.id(), Some(S1));
        // `c` is still being applied when the re-list starts.
        let listed_since = Instant::now();
        let listed: HashSet<ObjectId> = [a.manifest.id()].into();
        let other_kind = idx.missing(&HUB, "apps", "ConfigMap", None, &listed, listed_since);
        assert!(other_kind.is_empty(), "only the watched kind");
        let other_ns = idx.missing(
            &HUB,
            "",
            "ConfigMap",
            Some("elsewhere"),
            &listed,
            listed_since,
        );
        assert!(
            other_ns.is_empty(),
            "a namespace's watch judges only that namespace"
        );
        let gone = idx.missing(&HUB, "", "ConfigMap", None, &listed, listed_since);
        let names: Vec<&str> = gone.iter().map(|(id, _)| id.name.as_str()).collect();
        assert_eq!(names, ["b"], "a was listed, c is in flight");
        assert!(gone[0].1.why.contains("watch was down"));
        assert!(
            idx.missing(&HUB, "", "ConfigMap", None, &listed, listed_since)
                .is_empty(),
            "pending until its repair is recorded"
        );
        // Applied after the list began: not in it, and not missing either.
        idx.applied(&HUB, &c.manifest.id(), Some(S1));
        assert!(
            idx.missing(&HUB, "", "ConfigMap", None, &listed, listed_since)
                .is_empty()
        );
        let on_spoke = idx.missing(&spoke(), "", "ConfigMap", None, &listed, Instant::now());
        let names: Vec<&str> = on_spoke.iter().map(|(id, _)| id.name.as_str()).collect();
        assert_eq!(names, ["d"], "each target's re-list judges its own objects");
    }

    #[test]
    fn applied_revision_is_tracked_per_owner_and_client() {
        let mut idx = Index::default();
        let at = |generation| ("main@sha1:1", Some(generation), 7);
        idx.begin(OWNER, &HUB, opts(), [&planned("a")]);
        assert!(!idx.is_applied(OWNER, at(1), None));
        idx.completed(OWNER, "main@sha1:1", Some(1), 7);
        assert!(idx.is_applied(OWNER, at(1), None));
        assert!(!idx.is_applied(OWNER, at(2), None));
        assert!(
            !idx.is_applied(OWNER, ("main@sha1:1", Some(1), 8), None),
            "the target's client was rebuilt: apply in full, watch again"
        );
        assert!(
            !idx.is_applied(OWNER, at(1), Some(Duration::ZERO)),
            "full sync due"
        );
        idx.begin(OWNER, &HUB, opts(), [&planned("a")]);
        assert!(
            !idx.is_applied(OWNER, at(1), None),
            "a new apply starts afresh"
        );
    }
}
