//! The one deploy path. What differs between a Kustomization and an Application is the
//! [`Deploy`] trait: how its spec reads, where it applies, what it depends on, how a source's
//! files become a sync (or only a comparison) and how the outcome shows in its status. The
//! generic [`reconcile`] owns what they share: suspension, the session, the target, the outer
//! timeout and the in-flight metric, dependencies, the artifact, the "already applied" fast
//! path, the drift bookkeeping after a success, and prune on delete ([`cleanup`]). Which watch
//! events reconcile an object is in [`triggers`].

pub mod hooks;
pub mod own_source;
#[cfg(test)]
mod tests;
pub(crate) mod triggers;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::PropagationPolicy;
use kube::runtime::controller::Action;
use skewer_appliers::apply::ApplyOptions;
use skewer_appliers::load::SourceFile;
use skewer_appliers::message::summarize;
use skewer_appliers::prune::{Removal, prune};
use skewer_appliers::transform::{Owner, Transform};
use skewer_appliers::wait::deadline_after;
use skewer_appliers::{Inventory, ObjectId};
use tokio::time::Instant;
use tracing::warn;

use self::hooks::Hooks;
pub use self::triggers::run;
use super::dependencies::{self, Dependency};
use crate::api::conditions::now;
use crate::api::history;
use crate::api::inventory::{from_status, to_status};
use crate::api::kustomization::ResourceInventory;
use crate::api::{FIELD_MANAGER, OwnerKey};
use crate::appsource::Wanted;
use crate::artifacts::{self, ArtifactRef};
use crate::metrics::InFlight;
use crate::notify::event::Phase;
use crate::runtime::Settings;
use crate::runtime::context::Context;
use crate::runtime::report::Session;
use crate::runtime::{Done, Error, Failure, Reason, Reconciled, Schedule};
use crate::targets::{ClusterRef, Target, TargetKey};

/// Where a deploy object applies, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A cluster known by name (or the hub, or a kubeconfig Secret's).
    Cluster(ClusterRef),
    /// A registered cluster, by its API server URL (Argo CD's `destination.server`).
    Server(String),
}

/// Where, and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub destination: Destination,
    /// `system:serviceaccount:<ns>:<name>` to impersonate; `None`: skewer itself.
    pub identity: Option<String>,
}

/// The identity an object of namespace `namespace` applies as: its own ServiceAccount, else
/// `--default-service-account`, impersonated; else skewer itself.
pub fn identity(namespace: &str, account: Option<&String>, settings: &Settings) -> Option<String> {
    account
        .or(settings.default_service_account.as_ref())
        .map(|sa| format!("system:serviceaccount:{namespace}:{sa}"))
}

/// How every deploy kind applies: skewer's field manager, `owner`'s labels, `transform`, the
/// configured concurrency, and waits that end by `deadline`.
pub fn apply_options(
    owner: Owner,
    transform: Transform,
    force: bool,
    settings: &Settings,
    deadline: Instant,
) -> ApplyOptions {
    ApplyOptions {
        force,
        concurrency: settings.concurrency,
        wait_timeout: deadline.saturating_duration_since(Instant::now()),
        ..ApplyOptions::new(FIELD_MANAGER, owner, transform)
    }
}

/// Where the files come from.
pub enum SourceOf<'a> {
    /// A source object's current artifact (`sourceRef`).
    Ref {
        kind: &'a str,
        namespace: String,
        name: &'a str,
    },
    /// The object's own repository and revision, resolved within `interval`.
    Own {
        wanted: &'a Wanted,
        interval: Duration,
    },
}

/// What one reconcile's kind-specific work ended with.
pub struct Outcome {
    pub result: Result<Done, Failure>,
    /// Look again after this long, whatever the schedule says (a retry that is due).
    pub retry_in: Option<Duration>,
}

impl From<Result<Done, Failure>> for Outcome {
    fn from(result: Result<Done, Failure>) -> Self {
        Outcome {
            result,
            retry_in: None,
        }
    }
}

/// One reconcile's inputs to a kind's [`Deploy::work`]: everything the shared path found.
pub struct Work<'a, D: Deploy> {
    pub ctx: &'a Arc<Context>,
    pub obj: &'a D,
    pub spec: &'a D::Spec,
    /// The pipeline, already told whether to apply in full and whether drift heals.
    pub sync: &'a Hooks<'a, D>,
    pub revision: &'a str,
    /// The files of the object's path.
    pub files: Vec<SourceFile>,
    pub deadline: Instant,
    /// A reconcile request not handled before (`skewer reconcile`).
    pub requested: bool,
    /// A sync request not handled before (`skewer sync`).
    pub asked: bool,
}

impl<D: Deploy> Work<'_, D> {
    pub fn target(&self) -> &Arc<Target> {
        self.sync.target()
    }
}

/// A deploy kind. Every method but [`Deploy::work`] is pure, and tested without a cluster.
pub trait Deploy: Reconciled {
    /// The spec, checked.
    type Spec: Send + std::marker::Sync + 'static;
    /// Whether it may name source objects ([`Deploy::reads`]), whose new artifacts then
    /// reconcile it.
    const NAMES_SOURCES: bool = false;

    /// The spec checked: every field skewer cannot honour refused by name.
    fn spec(&self, settings: &Settings) -> Result<Self::Spec, Failure>;
    /// Where it applies and as whom, read without the rest of the spec (deletion needs it
    /// when the rest is broken).
    fn place(&self, settings: &Settings) -> Result<Place, Failure>;
    /// When to look again, and the bound on one reconcile.
    fn schedule(spec: &Self::Spec) -> (Schedule, Duration);
    fn source<'a>(&'a self, spec: &'a Self::Spec) -> SourceOf<'a>;
    /// The directory of the source it reads.
    fn path(spec: &Self::Spec) -> &str;
    /// `dependsOn`, the kind defaulting to its own.
    fn dependencies(&self) -> Vec<Dependency<'_>>;
    /// What deleting it prunes with; `None`: nothing.
    fn on_delete(&self, settings: &Settings) -> Option<PropagationPolicy>;
    fn inventory(status: &Self::Status) -> Option<&ResourceInventory>;
    fn inventory_mut(status: &mut Self::Status) -> &mut Option<ResourceInventory>;

    /// Whether it reads the artifact of source `kind` `namespace/name`.
    fn reads(&self, _kind: &str, _namespace: &str, _name: &str) -> bool {
        false
    }
    /// Whether its build may read files outside its path, so the whole artifact is read (a
    /// kustomization under the path does the same by itself).
    fn reads_outside_path(&self) -> bool {
        false
    }
    /// Hands off: no reconcile, no drift repaired, nothing pruned on deletion.
    fn suspended(&self) -> bool {
        false
    }
    /// Whether drift of what it applies is repaired (else recorded and shown).
    fn heals(_spec: &Self::Spec) -> bool {
        true
    }
    /// Records a sync request as handled; true when it is one not handled before.
    fn take_sync_request(&self, _status: &mut Self::Status) -> bool {
        false
    }
    /// Whether its status says nothing is left to do, so that the fast path may skip it.
    fn settled(_status: &Self::Status) -> bool {
        true
    }
    /// Whether its work reads objects that change without its revision or generation (a
    /// Kustomization's `substituteFrom`): then every reconcile works (sending only what
    /// changed), as the fast path could not see them change.
    fn reads_objects(&self) -> bool {
        false
    }
    /// The source's revision is `Some(revision)`, or could not be had (`None`).
    fn fetched(_status: &mut Self::Status, _revision: Option<&str>) {}
    /// The Ready message of an applied revision.
    fn done(_spec: &Self::Spec, revision: &str, noop: bool) -> Done {
        Done {
            reason: Reason::ReconciliationSucceeded,
            message: format!("Applied revision: {revision}"),
            event: Reason::ReconciliationSucceeded,
            noop,
        }
    }
    /// Anything else a finished reconcile's result sets in status.
    fn concluded(&self, _status: &mut Self::Status, _result: &Result<Done, Failure>) {}
    /// `status.history`: what it deployed.
    fn history_mut(status: &mut Self::Status) -> &mut Vec<history::Deployment>;
    /// How many deployments `status.history` keeps.
    fn history_limit(_spec: &Self::Spec) -> usize {
        history::DEFAULT_LIMIT
    }
    /// How a reconcile that applied ended, as its history entry says: `Ok(())` or why not.
    fn deployed(_status: &Self::Status, result: &Result<Done, Failure>) -> Result<(), String> {
        result.as_ref().map(|_| ()).map_err(|f| f.message.clone())
    }

    /// The kind's own work on the files: a sync, or a comparison that may sync.
    fn work(
        work: Work<'_, Self>,
        status: &mut Self::Status,
    ) -> impl Future<Output = Outcome> + Send;
}

/// The owner key of `obj` in the drift and ownership tables.
pub fn owner_of<D: Deploy>(obj: &D) -> String {
    OwnerKey::new(
        D::KIND,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
    )
    .to_string()
}

pub use crate::api::spec::owner as labels_owner;

/// The cluster of a destination, from the registrations listed so far; `None` for a server
/// no registration names yet.
pub fn cluster_now(ctx: &Context, d: &Destination) -> Option<ClusterRef> {
    match d {
        Destination::Cluster(c) => Some(c.clone()),
        Destination::Server(s) => ctx
            .targets
            .registry
            .find_server(s)
            .ok()
            .map(ClusterRef::Registered),
    }
}

/// The target of `place`, handed to an object of namespace `from`.
pub async fn target(ctx: &Context, place: &Place, from: &str) -> Result<Arc<Target>, Failure> {
    let cluster = match &place.destination {
        Destination::Cluster(c) => c.clone(),
        Destination::Server(s) => {
            ClusterRef::Registered(ctx.targets.registry.name_of_server(s).await.map_err(|e| {
                Failure::new(
                    Reason::ClusterUnavailable,
                    format!("spec.destination.server: {e}"),
                )
            })?)
        }
    };
    let key = TargetKey {
        cluster,
        identity: place.identity.clone(),
    };
    Ok(ctx.targets.get(&key, from).await?)
}

/// One reconcile of a deploy object that is not being deleted.
pub async fn reconcile<D: Deploy>(obj: Arc<D>, ctx: Arc<Context>) -> Result<Action, Error> {
    let owner = owner_of(obj.as_ref());
    if obj.suspended() {
        // Suspended means hands off: drift is not corrected either.
        ctx.drift.lock().forget_owner(&owner);
        return Ok(Action::await_change());
    }
    let mut session = Session::begin(&ctx, obj.as_ref());
    let asked = obj.take_sync_request(&mut session.status);
    let checked = obj
        .spec(&ctx.settings)
        .and_then(|spec| Ok((obj.place(&ctx.settings)?, spec)));
    let (place, spec) = match checked {
        Ok(v) => v,
        Err(f) => return session.finish(Err(f), None).await,
    };
    let (schedule, timeout) = D::schedule(&spec);
    // A cluster that is missing, unreachable or not this namespace's: retried with backoff;
    // nothing is read or pruned.
    let from = obj.namespace().unwrap_or_default();
    let target = match target(&ctx, &place, &from).await {
        Ok(t) => t,
        Err(f) => return session.finish(Err(f), Some(schedule)).await,
    };
    let _in_flight = InFlight::start(&ctx.metrics.reconciles_in_flight);
    let requested = session.requested;
    let sync = Hooks::new(&ctx, &target, obj.as_ref(), &owner).in_full(requested || asked);
    let sync = if D::heals(&spec) {
        sync
    } else {
        sync.leaving_drift()
    };
    let shared = Shared {
        ctx: &ctx,
        obj: obj.as_ref(),
        spec: &spec,
        sync: &sync,
        timeout,
        requested,
        asked,
    };
    // Health checks end at the deadline with a message naming what is unhealthy; this bound,
    // a little later, only catches a stuck API call.
    let bound = timeout.saturating_add(Duration::from_secs(5));
    let status = &mut session.status;
    let outcome = match tokio::time::timeout(bound, shared.run(status)).await {
        Ok(outcome) => outcome,
        Err(_) => {
            if let Some(recorded) = sync.recorded() {
                *D::inventory_mut(status) = Some(to_status(&recorded));
            }
            Outcome::from(Err(Failure::new(
                Reason::ReconciliationFailed,
                format!("reconcile timed out after {timeout:?} (spec.timeout)"),
            )))
        }
    };
    obj.concluded(status, &outcome.result);
    if sync.recorded().is_some() {
        session.wrote_status();
    }
    let action = session.finish(outcome.result, Some(schedule)).await?;
    Ok(match outcome.retry_in {
        Some(delay) => Action::requeue(delay),
        None => action,
    })
}

/// What one reconcile shares with its kind's work.
struct Shared<'a, D: Deploy> {
    ctx: &'a Arc<Context>,
    obj: &'a D,
    spec: &'a D::Spec,
    sync: &'a Hooks<'a, D>,
    timeout: Duration,
    requested: bool,
    asked: bool,
}

impl<D: Deploy> Shared<'_, D> {
    /// Dependencies, the artifact, the fast path, the files, the kind's work.
    async fn run(&self, status: &mut D::Status) -> Outcome {
        let (ctx, obj) = (self.ctx, self.obj);
        let ns = obj.namespace().unwrap_or_default();
        if let Err(f) = dependencies::ready(ctx, &ns, &obj.dependencies()).await {
            return Err(f).into();
        }
        let artifact = match self.artifact(status).await {
            Ok(a) => a,
            Err(f) => {
                D::fetched(status, None);
                return Err(f).into();
            }
        };
        let revision = artifact.revision.as_str();
        tracing::Span::current().record("revision", revision);
        let new_revision = D::revision(status) != Some(revision);
        D::fetched(status, Some(revision));

        // Nothing changed since this process applied it in full, and drift is corrected from
        // watches (or, left alone, none was seen): no writes, no per-object reads.
        let owner = owner_of(obj);
        let applied = (revision, obj.meta().generation, self.sync.target().epoch);
        let full = self.requested || self.asked;
        let unchanged = !full && !obj.reads_objects() && D::settled(status) && {
            let drift = ctx.drift.lock();
            drift.drifted(&owner).is_empty()
                && drift.is_applied(&owner, applied, ctx.settings.full_sync)
        };
        if unchanged {
            return Ok(D::done(self.spec, revision, true)).into();
        }
        if new_revision {
            let message = format!("Syncing revision {revision}");
            ctx.notify(
                obj,
                Some(revision),
                Reason::Progressing,
                &message,
                Phase::Started,
            );
        }
        let whole = obj.reads_outside_path();
        let files =
            match artifacts::files_under(&ctx.store, &artifact, D::path(self.spec), whole).await {
                Ok(f) => f,
                Err(f) => return Err(f).into(),
            };
        let work = Work {
            ctx,
            obj,
            spec: self.spec,
            sync: self.sync,
            revision,
            files,
            deadline: deadline_after(self.timeout),
            requested: self.requested,
            asked: self.asked,
        };
        let started = now();
        let outcome = D::work(work, status).await;
        if self.sync.deployed() {
            let ended = D::deployed(status, &outcome.result);
            let entry = history::Deployment {
                id: 0,
                revision: revision.into(),
                digest: artifact.digest.clone(),
                deploy_started_at: started,
                deployed_at: now(),
                outcome: if ended.is_ok() {
                    history::SUCCEEDED
                } else {
                    history::FAILED
                }
                .into(),
                message: ended.err().unwrap_or_default(),
            };
            history::record(D::history_mut(status), entry, D::history_limit(self.spec));
        }
        if outcome.result.as_ref().is_ok_and(|d| !d.noop) {
            let (revision, generation, epoch) = applied;
            ctx.drift
                .lock()
                .completed(&owner, revision, generation, epoch);
        }
        outcome
    }

    /// The artifact the object reads: its source object's, or its own repository's.
    async fn artifact(&self, status: &D::Status) -> Result<ArtifactRef, Failure> {
        let ctx = self.ctx;
        match self.obj.source(self.spec) {
            SourceOf::Ref {
                kind,
                namespace,
                name,
            } => artifacts::lookup(&ctx.client, kind, &namespace, name).await,
            SourceOf::Own { wanted, interval } => {
                // A new object starts from a revision resolved after it was created (a shared
                // entry may be minutes old); objects created together share one resolution.
                // A reconcile request asks the remote now.
                let new = status_is_new::<D>(status);
                let after = if self.requested {
                    Some(jiff::Timestamp::now())
                } else if new {
                    self.obj.meta().creation_timestamp.as_ref().map(|t| t.0)
                } else {
                    None
                };
                let ns = self.obj.namespace().unwrap_or_default();
                own_source::artifact(ctx, &ns, wanted, interval, after).await
            }
        }
    }
}

/// Whether no reconcile has written a status yet.
fn status_is_new<D: Deploy>(status: &D::Status) -> bool {
    let mut status = status.clone();
    D::observed_generation(&mut status).is_none()
}

/// On deletion: prune what it applied when its policy says so, then let it go. A cluster that
/// cannot be had prunes nothing, and the Warning Event says so.
pub async fn cleanup<D: Deploy>(obj: Arc<D>, ctx: Arc<Context>) -> Result<Action, Error> {
    let owner = owner_of(obj.as_ref());
    ctx.drift.lock().forget_owner(&owner);
    ctx.ownership.forget(&owner);
    let propagation = match obj.on_delete(&ctx.settings) {
        Some(p) if !obj.suspended() => p,
        _ => return Ok(Action::await_change()),
    };
    let from = obj.namespace().unwrap_or_default();
    let target = match obj.place(&ctx.settings) {
        Ok(place) => target(&ctx, &place, &from).await,
        Err(f) => Err(f),
    };
    let note = match target {
        Ok(target) => {
            let inventory = from_status(obj.status().and_then(D::inventory));
            let failed =
                delete_inventory(&ctx, &target, &inventory, obj.as_ref(), propagation).await;
            (!failed.is_empty()).then(|| {
                format!(
                    "deleted; {} objects could not be pruned on {}: {}",
                    failed.len(),
                    target.key.cluster,
                    summarize(&failed)
                )
            })
        }
        Err(f) => Some(format!(
            "deleted without pruning: nothing was pruned on its cluster ({})",
            f.message
        )),
    };
    if let Some(note) = note {
        warn!("{note}");
        ctx.event(obj.as_ref(), true, Reason::PruneFailed, note)
            .await;
    }
    Ok(Action::await_change())
}

/// Prunes all of `inventory`; what could not be, one line each (all of them logged).
async fn delete_inventory<D: Deploy>(
    ctx: &Context,
    target: &Target,
    inventory: &Inventory,
    obj: &D,
    propagation: PropagationPolicy,
) -> Vec<String> {
    let stale: Vec<(ObjectId, String)> = inventory.stale(&Inventory::default());
    let report = prune(
        target.applier.resources(),
        stale,
        Removal::OwnerDeleted,
        &labels_owner(obj),
        propagation,
        ctx.settings.concurrency,
    )
    .await;
    let failed: Vec<String> = report
        .failed
        .iter()
        .map(|(id, _, e)| format!("{}: {e}", id.display()))
        .collect();
    for line in &failed {
        warn!("left behind on deletion: {line}");
    }
    failed
}
