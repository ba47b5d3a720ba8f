//! Kustomization reconciler: wait for dependencies, find the source's artifact, turn the spec
//! into a [`skewer_appliers::SyncRequest`] ([`request`]), run the pipeline on the target, and
//! report what it did in status. Deletion prunes according to `deletionPolicy`.

pub mod request;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::reflector::{ObjectRef, Store};
use skewer_appliers::message::summarize;
use skewer_appliers::prune::prune;
use skewer_appliers::sync::SyncError;
use skewer_appliers::wait::deadline_after;
use skewer_appliers::{Inventory, ObjectId};
use tracing::{info, warn};

use super::dependencies::Dependency;
use crate::api::conditions::{self, HEALTHY};
use crate::api::{Application, Kustomization, KustomizationStatus};
use crate::artifacts;
use crate::drift::{owner_key, parse_owner_key};
use crate::metrics::InFlight;
use crate::ownership::Recorded;
use crate::runtime::{self, Context, Done, Error, Failure, Reason, Reconciled, Session};
use crate::sync::{Sync, from_status, to_status};
use crate::targets::{ClusterRef, Target};

crate::reconciled!(Kustomization, KustomizationStatus);

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<Kustomization> = runtime::scoped(&ctx.client, namespace.as_deref());
    let controller = runtime::controller(api.clone());
    let dependents = controller.store();
    ctx.ownership
        .watch("Kustomization", Arc::new(Inventories(controller.store())));
    // A new artifact reconciles the Kustomizations that use it.
    let controller = artifacts::watch_sources(
        controller,
        &ctx.client,
        namespace.as_deref(),
        |ks: &Kustomization, kind, ns, name| {
            let s = &ks.spec.source_ref;
            s.kind == kind && s.name == name && in_namespace(ks, &s.namespace, ns)
        },
    )
    // A dependency changing (becoming Ready) reconciles its dependents.
    .watches_stream(
        watcher(api, runtime::watch::own_kinds()).touched_objects(),
        move |dep: Kustomization| {
            artifacts::referring(&dependents, &dep, |ks, ns, name| {
                depends_on(ks, Kustomization::KIND, ns, name)
            })
        },
    );
    let dependents = controller.store();
    let apps: Api<Application> = runtime::scoped(&ctx.client, namespace.as_deref());
    let controller = controller.watches_stream(
        watcher(apps, runtime::watch::own_kinds()).touched_objects(),
        move |dep: Application| {
            artifacts::referring(&dependents, &dep, |ks, ns, name| {
                depends_on(ks, Application::KIND, ns, name)
            })
        },
    );
    // A cluster Secret added, changed or deleted: its clients are dropped (rebuilt on next
    // use, with the new credentials), and the Kustomizations that target it reconcile.
    let targeting = controller.store();
    let registry_ctx = ctx.clone();
    let changes = futures::stream::unfold(ctx.targets.registry.subscribe(), |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(name) => return Some((name, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .flat_map(move |name| {
        let cluster = ClusterRef::Registered(name);
        registry_ctx.targets.retire(&cluster);
        let refs: Vec<ObjectRef<Kustomization>> = targeting
            .state()
            .iter()
            .filter(|ks| request::cluster(ks).as_ref() == Ok(&cluster))
            .map(|ks| ObjectRef::from_obj(ks.as_ref()))
            .collect();
        futures::stream::iter(refs)
    });
    let controller = controller.reconcile_on(changes);
    runtime::run(ctx, controller, reconcile).await;
}

/// The inventories Kustomizations recorded, from the controller's cache.
struct Inventories(Store<Kustomization>);

impl Recorded for Inventories {
    fn held(
        &self,
        cluster: &ClusterRef,
        wanted: &HashSet<String>,
        except: &str,
    ) -> Vec<(String, String)> {
        let mut held = Vec::new();
        for ks in self.0.state() {
            let owner = owner_of(&ks);
            if owner == except || request::cluster(&ks).as_ref() != Ok(cluster) {
                continue;
            }
            let inventory = ks.status.as_ref().and_then(|s| s.inventory.as_ref());
            crate::sync::held_in(inventory, wanted, &owner, &mut held);
        }
        held
    }
}

/// Whether `ks` depends on `kind` `ns/name`.
fn depends_on(ks: &Kustomization, kind: &str, ns: &str, name: &str) -> bool {
    ks.spec.depends_on.iter().any(|d| {
        d.kind.as_deref().unwrap_or(Kustomization::KIND) == kind
            && d.name == name
            && in_namespace(ks, &d.namespace, ns)
    })
}

/// Whether a reference's namespace (defaulting to the Kustomization's own) is `ns`.
fn in_namespace(ks: &Kustomization, reference: &Option<String>, ns: &str) -> bool {
    reference.clone().or_else(|| ks.namespace()).as_deref() == Some(ns)
}

crate::finalized_reconcile!(Kustomization, apply, cleanup);

fn owner_of(ks: &Kustomization) -> String {
    owner_key(
        Kustomization::KIND,
        &ks.namespace().unwrap_or_default(),
        &ks.name_any(),
    )
}

async fn apply(ks: Arc<Kustomization>, ctx: Arc<Context>) -> Result<Action, Error> {
    let owner = owner_of(&ks);
    if ks.spec.suspend {
        // Suspended means hands off: drift is not corrected either.
        ctx.drift.lock().forget_owner(&owner);
        return Ok(Action::await_change());
    }
    let mut session = Session::begin(&ctx, ks.as_ref());
    let spec_ready = request::schedule(&ks).and_then(|(schedule, timeout)| {
        request::references(&ks, &ctx.settings)?;
        request::path(&ks)?;
        Ok((schedule, timeout, request::target(&ks, &ctx.settings)?))
    });
    let (schedule, timeout, key) = match spec_ready {
        Ok(v) => v,
        Err(f) => return session.finish(Err(f), None).await,
    };
    // A cluster that is missing or unreachable: retried with backoff; nothing is pruned.
    let from = ks.namespace().unwrap_or_default();
    let target = match ctx.targets.get(&key, &from).await {
        Ok(t) => t,
        Err(e) => return session.finish(Err(e.into()), Some(schedule)).await,
    };
    let _in_flight = InFlight::start(&ctx.metrics.reconciles_in_flight);
    let deadline = deadline_after(timeout);
    // A reconcile request applies every object, even those applied exactly so before.
    let sync = Sync::new(&ctx, &target, ks.as_ref(), &owner).in_full(session.requested);
    // Health checks end at the deadline with a message naming what is unhealthy; this bound,
    // a little later, only catches a stuck API call.
    let bound = timeout.saturating_add(Duration::from_secs(5));
    let requested = session.requested;
    let status = &mut session.status;
    let result = match tokio::time::timeout(
        bound,
        reconcile_sync(&ks, &ctx, &sync, status, deadline, requested),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => {
            if let Some(recorded) = sync.recorded() {
                status.inventory = Some(to_status(&recorded));
            }
            Err(Failure::new(
                Reason::ReconciliationFailed,
                format!("reconcile timed out after {timeout:?} (spec.timeout)"),
            ))
        }
    };
    let generation = ks.meta().generation;
    match &result {
        Ok(_) => conditions::set(
            &mut status.conditions,
            HEALTHY,
            true,
            Reason::Succeeded.as_str(),
            "health checks passed",
            generation,
        ),
        Err(f) if f.reason == Reason::HealthCheckFailed => conditions::set(
            &mut status.conditions,
            HEALTHY,
            false,
            f.reason.as_str(),
            &f.message,
            generation,
        ),
        Err(_) => {}
    }
    if sync.recorded().is_some() {
        session.wrote_status();
    }
    session.finish(result, Some(schedule)).await
}

/// One reconcile's work, down the layers: dependencies, the source's artifact, the request,
/// the pipeline. Records in `status` what it attempted, applied and holds.
async fn reconcile_sync(
    ks: &Kustomization,
    ctx: &Arc<Context>,
    sync: &Sync<'_, Kustomization>,
    status: &mut KustomizationStatus,
    deadline: tokio::time::Instant,
    requested: bool,
) -> Result<Done, Failure> {
    let ns = ks.namespace().unwrap_or_default();
    let owner = owner_of(ks);
    dependencies_ready(ks, ctx).await?;

    let src = &ks.spec.source_ref;
    let src_ns = src.namespace.clone().unwrap_or_else(|| ns.clone());
    let artifact = artifacts::lookup(&ctx.client, &src.kind, &src_ns, &src.name).await?;
    let revision = artifact.revision.clone();
    tracing::Span::current().record("revision", revision.as_str());
    status.last_attempted_revision = Some(revision.clone());
    let applied = |noop| Done {
        reason: Reason::ReconciliationSucceeded,
        message: format!("Applied revision: {revision}"),
        event: Reason::ReconciliationSucceeded,
        noop,
    };

    // Nothing changed since this process applied it in full, and drift is corrected from
    // watches: no writes, no per-object reads.
    let generation = ks.meta().generation;
    let full_sync = ctx.settings.full_sync;
    let epoch = sync.target().epoch;
    if !requested
        && ctx
            .drift
            .lock()
            .is_applied(&owner, (&revision, generation, epoch), full_sync)
    {
        return Ok(applied(true));
    }

    let read = Instant::now();
    let dir = request::path(ks)?;
    let files = artifacts::files_under(&ctx.store, &artifact, &dir).await?;
    let artifact_ms = read.elapsed().as_millis() as u64;
    let previous = from_status(status.inventory.as_ref());
    let scope = sync.target().scope.clone();
    let request = request::build(ks, files, previous, scope, &ctx.settings, deadline);
    let report = sync.run(request).await;
    status.inventory = Some(to_status(&report.inventory));
    for id in &report.pruned {
        info!(object = %id.display(), "pruned");
    }
    if let Err(e) = report.result() {
        if let SyncError::Conflict(held) = e {
            tell_holders(ctx, &owner, held).await;
        }
        let details = e.details();
        // Status names the first few; the log has every one.
        if details.len() > skewer_appliers::message::NAMED {
            for line in &details {
                warn!(revision = %revision, "{line}");
            }
        }
        let mut failure = request::failure(ks, e);
        let cluster = &sync.target().key.cluster;
        if *cluster != ClusterRef::Hub {
            // Which cluster refused, or could not be reached.
            failure.message = format!("{cluster}: {}", failure.message);
        }
        return Err(failure);
    }
    info!(objects = report.planned, unchanged = report.unchanged, artifact_ms, phases = %report.phases, "synced {revision}");
    status.last_applied_revision = Some(revision.clone());
    ctx.drift
        .lock()
        .completed(&owner, &revision, generation, epoch);
    Ok(applied(false))
}

/// A Warning Event on each owner holding objects `claimant` was refused, so the conflict shows
/// on both sides.
async fn tell_holders(ctx: &Context, claimant: &str, held: &[(ObjectId, String)]) {
    let mut by_holder: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, holder) in held {
        by_holder.entry(holder).or_default().push(id.display());
    }
    for (holder, objects) in by_holder {
        let Some((kind, namespace, name)) = parse_owner_key(holder) else {
            continue;
        };
        let regarding = ObjectReference {
            api_version: Some(format!("{}/{}", crate::api::GROUP, crate::api::VERSION)),
            kind: Some(kind.into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
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

/// Dependencies (Kustomizations by default, or Applications) must be Ready at their current
/// generation.
async fn dependencies_ready(ks: &Kustomization, ctx: &Context) -> Result<(), Failure> {
    let ns = ks.namespace().unwrap_or_default();
    let deps: Vec<Dependency<'_>> = ks
        .spec
        .depends_on
        .iter()
        .map(|d| Dependency {
            kind: d.kind.as_deref().unwrap_or(Kustomization::KIND),
            name: &d.name,
            namespace: d.namespace.as_deref(),
        })
        .collect();
    super::dependencies::ready(ctx, &ns, &deps).await
}

/// On deletion: prune the inventory when `deletionPolicy` says so (`MirrorPrune` follows
/// `prune`), then let the object go.
async fn cleanup(ks: Arc<Kustomization>, ctx: Arc<Context>) -> Result<Action, Error> {
    let policy = ks.spec.deletion_policy.as_deref().unwrap_or("MirrorPrune");
    let delete = match policy {
        "Delete" => true,
        "Orphan" => false,
        _ => ks.spec.prune,
    };
    ctx.drift.lock().forget_owner(&owner_of(&ks));
    ctx.ownership.forget(&owner_of(&ks));
    if delete && !ks.spec.suspend {
        let target = match request::target(&ks, &ctx.settings) {
            Ok(key) => ctx
                .targets
                .get(&key, &ks.namespace().unwrap_or_default())
                .await
                .map_err(|e| e.to_string()),
            Err(f) => Err(f.message),
        };
        match target {
            Ok(target) => delete_inventory(&ks, &ctx, &target).await,
            // The cluster is gone or unreachable: the finalizer ends anyway, and says so.
            Err(e) => {
                let note =
                    format!("deleted without pruning: nothing was pruned on its cluster ({e})");
                warn!("{note}");
                ctx.event(ks.as_ref(), true, Reason::PruneFailed, note)
                    .await;
            }
        }
    }
    Ok(Action::await_change())
}

async fn delete_inventory(ks: &Kustomization, ctx: &Context, target: &Target) {
    let inventory = from_status(ks.status.as_ref().and_then(|s| s.inventory.as_ref()));
    let stale = inventory.stale(&Inventory::default());
    let report = prune(
        target.applier.resources(),
        stale,
        &request::owner(ks),
        PropagationPolicy::Background,
        ctx.settings.concurrency,
    )
    .await;
    if !report.failed.is_empty() {
        let failed: Vec<String> = report
            .failed
            .iter()
            .map(|(id, _, e)| format!("{}: {e}", id.display()))
            .collect();
        for line in &failed {
            warn!("left behind on deletion: {line}");
        }
        let note = format!(
            "deleted; {} objects could not be pruned on {}: {}",
            failed.len(),
            target.key.cluster,
            summarize(&failed)
        );
        ctx.event(ks, true, Reason::PruneFailed, note).await;
    }
}
