//! Drives the appliers' sync pipeline for any deploy kind: at its turning points the planned
//! objects are claimed for their owner (none may belong to another), the widened inventory is
//! written to the object's `status.inventory` (before anything is applied), and drift tracking
//! starts on the target. The deploy kind's reconciler builds the request and
//! reads the report; it is not called back in between.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::ApiResource;
use serde_json::json;
use skewer_appliers::apply::{ApplyOptions, Outcome, Plan};
use skewer_appliers::message::summarize;
use skewer_appliers::sync::{self as pipeline, SyncError, SyncHooks, SyncReport, SyncRequest};
use skewer_appliers::{Inventory, ObjectId};

use crate::api::OwnerKey;
use crate::api::inventory::to_status;
use crate::drift;
use crate::runtime::context::Context;
use crate::runtime::{Reason, Reconciled, status};
use crate::targets::{Target, WatchKey};

/// One sync of `obj` (tracked for drift as `owner`) on `target`.
pub struct Hooks<'a, K> {
    ctx: &'a Arc<Context>,
    target: &'a Arc<Target>,
    obj: &'a K,
    owner: &'a str,
    recorded: Mutex<Option<Inventory>>,
    /// Whether the pipeline came to its applies (past the build, the plan and the claims).
    applying: AtomicBool,
    /// Objects claimed with the takeover annotation: taken only once applied.
    takeover: Mutex<BTreeSet<ObjectId>>,
    heal: bool,
    /// Apply every object, even those applied as planned before (a reconcile request).
    full: bool,
    /// The drift watches this sync's objects need, started once its applies are done (or
    /// when it is dropped before that).
    watches: Mutex<HashMap<WatchKey, ApiResource>>,
}

impl<'a, K: Reconciled> Hooks<'a, K> {
    pub fn new(ctx: &'a Arc<Context>, target: &'a Arc<Target>, obj: &'a K, owner: &'a str) -> Self {
        Self {
            ctx,
            target,
            obj,
            owner,
            recorded: Mutex::new(None),
            applying: AtomicBool::new(false),
            takeover: Mutex::new(BTreeSet::new()),
            heal: true,
            full: false,
            watches: Mutex::new(HashMap::new()),
        }
    }

    /// Every planned object is applied, even those applied exactly so before.
    pub fn in_full(mut self, full: bool) -> Self {
        self.full = full;
        self
    }

    /// Drift of what this sync applies is recorded and announced, not repaired.
    pub fn leaving_drift(mut self) -> Self {
        self.heal = false;
        self
    }

    pub async fn run(&self, request: SyncRequest) -> SyncReport {
        let report = pipeline::run(&self.target.applier, self, request).await;
        // It holds what its inventory holds (what it pruned, or was refused, is free for
        // others), and what it took over only where its apply wrote it.
        let takeover =
            std::mem::take(&mut *self.takeover.lock().unwrap_or_else(|e| e.into_inner()));
        let taken = report
            .applied
            .iter()
            .map(|o| &o.id)
            .filter(|id| takeover.contains(*id));
        self.ctx.ownership.settle(
            &self.target.key.cluster,
            self.owner,
            &report.inventory,
            taken,
        );
        self.ctx
            .metrics
            .objects_pruned
            .inc_by(report.pruned.len() as u64);
        if let Err(SyncError::Conflict(held)) = report.result() {
            tell_holders(self.ctx, self.owner, held).await;
        }
        report
    }

    pub fn target(&self) -> &Arc<Target> {
        self.target
    }

    /// The widened inventory this sync wrote to status, if it wrote one. A reconcile cut short
    /// (its deadline passed mid-apply) must keep it, not write back an older one.
    pub fn recorded(&self) -> Option<Inventory> {
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether this sync came to applying anything: a deployment, whatever its outcome.
    pub fn deployed(&self) -> bool {
        self.applying.load(Ordering::Relaxed)
    }
}

impl<K: Reconciled> SyncHooks for Hooks<'_, K> {
    async fn claim(
        &self,
        planned: &Inventory,
        takeover: &BTreeSet<ObjectId>,
    ) -> Result<(), Vec<(ObjectId, String)>> {
        self.ctx
            .ownership
            .claim(&self.target.key.cluster, self.owner, planned, takeover)?;
        *self.takeover.lock().unwrap_or_else(|e| e.into_inner()) = takeover.clone();
        Ok(())
    }

    async fn record(&self, widened: &Inventory) -> Result<(), String> {
        let inventory = to_status(widened);
        status::patch(
            &self.ctx.client,
            self.obj,
            json!({ "status": { "inventory": inventory } }),
        )
        .await
        .map_err(|e| e.to_string())?;
        *self.recorded.lock().unwrap_or_else(|e| e.into_inner()) = Some(widened.clone());
        Ok(())
    }

    fn applying(&self, plan: &Plan, opts: &Arc<ApplyOptions>) -> BTreeSet<ObjectId> {
        self.applying.store(true, Ordering::Relaxed);
        let planned = || plan.stages.iter().flatten();
        let unchanged = {
            let mut index = self.ctx.drift.lock();
            let key = &self.target.key;
            let unchanged = if self.full {
                BTreeSet::new()
            } else {
                index.unchanged(self.owner, key, planned(), self.ctx.settings.full_sync)
            };
            index.begin(self.owner, key, opts.clone(), planned());
            if !self.heal {
                index.leave_drift(self.owner);
            }
            unchanged
        };
        *self.watches.lock().unwrap_or_else(|e| e.into_inner()) =
            drift::watch::needed(self.target, planned());
        self.ctx
            .metrics
            .objects_applied
            .inc_by(plan.len().saturating_sub(unchanged.len()) as u64);
        unchanged
    }

    fn applied(&self, outcomes: &[Outcome]) {
        {
            let mut index = self.ctx.drift.lock();
            for o in outcomes {
                index.applied(&self.target.key, &o.id, o.seen);
            }
        }
        self.watch();
    }
}

impl<K> Hooks<'_, K> {
    /// Starts the drift watches this sync needs and no running watch covers.
    fn watch(&self) {
        let needed = std::mem::take(&mut *self.watches.lock().unwrap_or_else(|e| e.into_inner()));
        if !needed.is_empty() {
            drift::watch::ensure(self.ctx, self.target, needed);
        }
    }
}

/// A sync cut short mid-apply (its deadline passed) still leaves what it applied watched.
impl<K> Drop for Hooks<'_, K> {
    fn drop(&mut self) {
        self.watch();
    }
}

/// A Warning Event on each owner holding objects `claimant` was refused, so the conflict shows
/// on both sides.
async fn tell_holders(ctx: &Context, claimant: &str, held: &[(ObjectId, String)]) {
    let mut by_holder: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, holder) in held {
        by_holder.entry(holder).or_default().push(id.display());
    }
    for (holder, objects) in by_holder {
        let Some(OwnerKey {
            kind,
            namespace,
            name,
        }) = OwnerKey::parse(holder)
        else {
            continue;
        };
        let regarding = ObjectReference {
            api_version: Some(format!("{}/{}", crate::api::GROUP, crate::api::VERSION)),
            kind: Some(kind),
            namespace: Some(namespace),
            name: Some(name),
            ..Default::default()
        };
        let note = format!(
            "{claimant} also applies {}; refused there while this one holds them",
            summarize(&objects)
        );
        ctx.event_about(&regarding, true, Reason::OwnershipConflict, note)
            .await;
    }
}
