//! Application reconciler (Argo CD-shaped). Each reconcile compares: the Application's own
//! source (shared with every Application on the same repository and revision) is rendered
//! offline and each object is compared with what the last sync applied, and with the drift
//! self-heal recorded. It syncs when asked (`skewer sync`, `skewer.dev/sync-requested-at`) or,
//! with `syncPolicy.automated`, when the source changed; a failed sync is retried as
//! `syncPolicy.retry` says. Status reads as Argo CD's (`sync`, `health`, `resources`,
//! `operationState`, `reconciledAt`) beside skewer's conditions.

pub mod compare;
pub mod request;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use skewer_appliers::apply::ApplyOptions;
use skewer_appliers::kustomize::KUSTOMIZATION_FILES;
use skewer_appliers::load::SourceFile;
use skewer_appliers::message::summarize;
use skewer_appliers::prune::prune;
use skewer_appliers::sync::{HealthChecks, SyncError, SyncRequest, preview};
use skewer_appliers::transform::{Owner, Transform};
use skewer_appliers::wait::{self, deadline_after};
use skewer_appliers::{Inventory, ObjectId};
use tracing::{info, warn};

use self::compare::Desired;
use self::request::{Destination, Spec};
use super::FIELD_MANAGER;
use super::dependencies::Dependency;
use crate::api::application::{
    HealthStatus, OperationState, ResourceResult, ResourceStatus, SyncResult, SyncStatus,
};
use crate::api::{Application, ApplicationStatus, SYNC_REQUESTED_AT};
use crate::appsource;
use crate::artifacts;
use crate::drift::owner_key;
use crate::ownership::Recorded;
use crate::runtime::{self, Context, Done, Error, Failure, Reason, Reconciled, Schedule, Session};
use crate::sync::{Sync, from_status, to_status};
use crate::targets::{ClusterRef, Target, TargetKey};

crate::reconciled!(Application, ApplicationStatus);

/// How soon an Application whose objects are not healthy yet is looked at again (doubling up
/// to its interval while it stays so).
const PROGRESS_CHECK: Duration = Duration::from_secs(2);

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<Application> = runtime::scoped(&ctx.client, namespace.as_deref());
    // Repository credentials, Argo CD's way: labeled Secrets, cached.
    let mut followers = Vec::new();
    for label in skewer_sources::repocreds::LABELS {
        let secrets: Api<Secret> = runtime::scoped(&ctx.client, namespace.as_deref());
        let (store, writer) = reflector::store();
        let config =
            runtime::watch::config().labels(&format!("{label} in (repository,repo-creds)"));
        let follow = reflector(writer, runtime::watch::stream(secrets, config))
            .applied_objects()
            .for_each(|_| async {});
        // Stopped with the controller (leadership lost), not left to run beside the next.
        followers.push(runtime::AbortOnDrop(tokio::spawn(follow)));
        ctx.app_sources.credentials_from(store);
    }
    let controller = runtime::controller(api.clone());
    ctx.ownership.watch(
        "Application",
        Arc::new(Inventories {
            apps: controller.store(),
            ctx: ctx.clone(),
        }),
    );
    // Drift left alone (no self-heal) reconciles its Application, to show it OutOfSync.
    let store = controller.store();
    let drifted = futures::stream::unfold(ctx.drift.subscribe(), |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(owner) => return Some((owner, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .filter_map(move |owner| {
        let found = store
            .state()
            .iter()
            .find(|app| owner_of(app) == owner)
            .map(|app| ObjectRef::from_obj(app.as_ref()));
        async move { found }
    });
    // A dependency of either kind changing (becoming Ready) reconciles its dependents.
    let dependents = controller.store();
    let kustomizations = runtime::scoped(&ctx.client, namespace.as_deref());
    let controller = controller.reconcile_on(drifted).watches_stream(
        watcher(api, runtime::watch::own_kinds()).touched_objects(),
        move |dep: Application| {
            artifacts::referring(&dependents, &dep, |app, ns, name| {
                depends_on(app, Application::KIND, ns, name)
            })
        },
    );
    let dependents = controller.store();
    let controller = controller.watches_stream(
        watcher(kustomizations, runtime::watch::own_kinds()).touched_objects(),
        move |dep: crate::api::Kustomization| {
            artifacts::referring(&dependents, &dep, |app, ns, name| {
                depends_on(app, crate::api::Kustomization::KIND, ns, name)
            })
        },
    );
    runtime::run(ctx, controller, reconcile).await;
}

fn dependencies(app: &Application) -> impl Iterator<Item = Dependency<'_>> {
    app.spec.depends_on.iter().map(|d| Dependency {
        kind: d.kind.as_deref().unwrap_or(Application::KIND),
        name: &d.name,
        namespace: d.namespace.as_deref(),
    })
}

fn depends_on(app: &Application, kind: &str, ns: &str, name: &str) -> bool {
    let own = app.namespace().unwrap_or_default();
    dependencies(app).any(|d| d.kind == kind && d.name == name && d.namespace.unwrap_or(&own) == ns)
}

fn owner_of(app: &Application) -> String {
    owner_key(
        Application::KIND,
        &app.namespace().unwrap_or_default(),
        &app.name_any(),
    )
}

fn labels_owner(app: &Application) -> Owner {
    Owner {
        name: app.name_any(),
        namespace: app.namespace().unwrap_or_default(),
    }
}

/// The inventories Applications recorded, from the controller's cache.
struct Inventories {
    apps: Store<Application>,
    ctx: Arc<Context>,
}

impl Recorded for Inventories {
    fn held(
        &self,
        cluster: &ClusterRef,
        wanted: &std::collections::HashSet<String>,
        except: &str,
    ) -> Vec<(String, String)> {
        let mut held = Vec::new();
        for app in self.apps.state() {
            let owner = owner_of(&app);
            let on = request::destination(&app)
                .ok()
                .and_then(|d| cluster_now(&self.ctx, &d));
            if owner == except || on.as_ref() != Some(cluster) {
                continue;
            }
            let inventory = app.status.as_ref().and_then(|s| s.inventory.as_ref());
            crate::sync::held_in(inventory, wanted, &owner, &mut held);
        }
        held
    }
}

/// The cluster of a destination, from the registrations listed so far.
fn cluster_now(ctx: &Context, d: &Destination) -> Option<ClusterRef> {
    match d {
        Destination::Hub => Some(ClusterRef::Hub),
        Destination::Named(n) => Some(ClusterRef::Registered(n.clone())),
        Destination::Server(s) => ctx
            .targets
            .registry
            .find_server(s)
            .ok()
            .map(ClusterRef::Registered),
    }
}

/// The target of `spec`: its destination's cluster, as its identity.
async fn target_key(ctx: &Context, spec: &Spec) -> Result<TargetKey, Failure> {
    let unavailable = |m: String| Failure::new(Reason::ClusterUnavailable, m);
    let cluster = match &spec.destination {
        Destination::Hub => ClusterRef::Hub,
        Destination::Named(n) => ClusterRef::Registered(n.clone()),
        Destination::Server(s) => ClusterRef::Registered(
            ctx.targets
                .registry
                .name_of_server(s)
                .await
                .map_err(|e| unavailable(format!("spec.destination.server: {e}")))?,
        ),
    };
    Ok(TargetKey {
        cluster,
        identity: spec.identity.clone(),
    })
}

crate::finalized_reconcile!(Application, apply, cleanup);

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Records the Application's sync request (`skewer.dev/sync-requested-at`) as handled; true
/// when it is one not handled before.
fn take_sync_request(app: &Application, status: &mut ApplicationStatus) -> bool {
    let requested = app.annotations().get(SYNC_REQUESTED_AT).cloned();
    let new = requested.is_some() && requested != status.last_handled_sync_at;
    status.last_handled_sync_at = requested;
    new
}

/// What a reconcile ended with, beyond the status it built.
struct Outcome {
    result: Result<Done, Failure>,
    /// A retry of a failed sync is due after this long (`syncPolicy.retry`).
    retry_in: Option<Duration>,
}

async fn apply(app: Arc<Application>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut session = Session::begin(&ctx, app.as_ref());
    let asked = take_sync_request(&app, &mut session.status);
    let spec = match request::spec(&app, &ctx.settings) {
        Ok(s) => s,
        Err(f) => return session.finish(Err(f), None).await,
    };
    let schedule = Schedule {
        interval: spec.interval,
        retry: PROGRESS_CHECK,
    };
    let refresh = session.requested;
    // A new Application starts from a revision resolved after it was created (a shared entry
    // may be minutes old); Applications created together share one resolution. A refresh
    // asks the remote now.
    let new = app
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .is_none();
    let resolved_after = if refresh {
        Some(jiff::Timestamp::now())
    } else if new {
        app.metadata.creation_timestamp.as_ref().map(|t| t.0)
    } else {
        None
    };
    let status = &mut session.status;
    let outcome = reconcile_app(&app, &ctx, &spec, status, asked, refresh, resolved_after).await;
    let action = session.finish(outcome.result, Some(schedule)).await?;
    Ok(match outcome.retry_in {
        Some(delay) => Action::requeue(delay),
        None => action,
    })
}

/// How the objects of `app` named in `only` (display names, like `ConfigMap/ns/x`) differ
/// between its source (the artifact it last fetched) and its cluster, field by field, by a
/// server-side dry run on its target: nothing is written. For the dashboard's Out of Sync view.
pub async fn diff(
    ctx: &Arc<Context>,
    app: &Application,
    only: &[String],
) -> Result<Vec<crate::cli::diff::Differs>, String> {
    let spec = request::spec(app, &ctx.settings).map_err(|f| f.message)?;
    let key = target_key(ctx, &spec).await.map_err(|f| f.message)?;
    let ns = app.namespace().unwrap_or_default();
    let target = ctx
        .targets
        .get(&key, &ns)
        .await
        .map_err(|e| e.to_string())?;
    let artifact = appsource::artifact(ctx, &ns, &spec.wanted, spec.interval, None)
        .await
        .map_err(|f| f.message)?;
    let files = artifacts::files_under(&ctx.store, &artifact, &spec.path)
        .await
        .map_err(|f| f.message)?;
    let (files, _) = select(files, &spec);
    let manifests = skewer_appliers::sync::build(&files, &spec.path, &[])?;
    let transform = Transform {
        default_namespace: spec.namespace.clone(),
        ..Default::default()
    };
    let opts = crate::cli::diff::options(labels_owner(app), transform);
    let all = crate::cli::diff::compare(&target.applier, manifests, &opts, None)
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok(all
        .into_iter()
        .filter(|d| only.contains(&d.object))
        .collect())
}

/// One reconcile: dependencies, target, source, comparison, perhaps a sync, health.
async fn reconcile_app(
    app: &Application,
    ctx: &Arc<Context>,
    spec: &Spec,
    status: &mut ApplicationStatus,
    asked: bool,
    refresh: bool,
    resolved_after: Option<jiff::Timestamp>,
) -> Outcome {
    let done = |result| Outcome {
        result,
        retry_in: None,
    };
    let ns = app.namespace().unwrap_or_default();
    let deps: Vec<Dependency<'_>> = dependencies(app).collect();
    if let Err(f) = super::dependencies::ready(ctx, &ns, &deps).await {
        return done(Err(f));
    }
    let target = match target_key(ctx, spec).await {
        Ok(key) => match ctx.targets.get(&key, &ns).await {
            Ok(t) => t,
            Err(e) => return done(Err(e.into())),
        },
        Err(f) => return done(Err(f)),
    };
    let artifact =
        match appsource::artifact(ctx, &ns, &spec.wanted, spec.interval, resolved_after).await {
            Ok(a) => a,
            Err(f) => {
                status.sync = Some(SyncStatus {
                    status: "Unknown".into(),
                    revision: status.sync.as_ref().and_then(|s| s.revision.clone()),
                });
                return done(Err(f));
            }
        };
    let revision = artifact.revision.clone();
    tracing::Span::current().record("revision", revision.as_str());
    let owner = owner_of(app);
    let generation = app.meta().generation;
    let epoch = target.epoch;

    // Nothing moved since this process synced it, nothing drifted, it was healthy: no reads.
    let healthy = status
        .health
        .as_ref()
        .is_some_and(|h| h.status == "Healthy");
    let unchanged = !asked
        && !refresh
        && healthy
        && status
            .sync
            .as_ref()
            .is_some_and(|s| s.status == compare::SYNCED)
        && ctx.drift.lock().drifted(&owner).is_empty()
        && ctx.drift.lock().is_applied(
            &owner,
            (&revision, generation, epoch),
            ctx.settings.full_sync,
        );
    if unchanged {
        return done(Ok(synced_and_healthy(&revision, true)));
    }

    let files = match artifacts::files_under(&ctx.store, &artifact, &spec.path).await {
        Ok(f) => f,
        Err(f) => return done(Err(f)),
    };
    let (files, source_type) = select(files, spec);
    let transform = Transform {
        default_namespace: spec.namespace.clone(),
        ..Default::default()
    };
    let owner_labels = labels_owner(app);
    let desired: Vec<Desired> =
        match preview(&files, &spec.path, &[], &transform, Some(&owner_labels))
            .map_err(|e| e.to_string())
            .and_then(|ms| match request::hook(&ms) {
                Some(refused) => Err(refused),
                None => Ok(ms),
            }) {
            Ok(ms) => ms.iter().map(Desired::of).collect(),
            Err(e) => {
                status.sync = Some(SyncStatus {
                    status: "Unknown".into(),
                    revision: Some(revision.clone()),
                });
                return done(Err(Failure::new(Reason::BuildFailed, e)));
            }
        };
    status.source_type = Some(source_type.into());
    status.reconciled_at = Some(now());
    let drifted = ctx.drift.lock().drifted(&owner);
    let mut resources = compare::resources(&desired, &status.resources, &drifted);
    // What the source changed, drift aside: what automation syncs.
    let changed = !compare::all_synced(&compare::resources(&desired, &status.resources, &[]));
    let last = status.operation_state.clone();
    let same_attempt = last.as_ref().is_some_and(|o| {
        o.sync_result.as_ref().map(|r| r.revision.as_str()) == Some(revision.as_str())
            && o.synced_generation == generation
    });
    let exhausted = same_attempt && last.as_ref().is_some_and(|o| o.phase == "Failed");
    let retrying = same_attempt && last.as_ref().is_some_and(|o| o.phase == "Running");
    let automated = spec.automated.is_some() && (changed || retrying) && !exhausted;
    let mut retry_in = None;
    if asked || automated {
        if let Some(a) = spec.automated
            && !asked
            && desired.is_empty()
            && !a.allow_empty
            && !resources.is_empty()
        {
            status.resources = resources;
            status.sync = out_of_sync(&revision);
            return done(Err(Failure::new(
                Reason::OutOfSync,
                format!(
                    "automated sync refused: {revision} renders no objects, and syncing would prune every one (spec.syncPolicy.automated.allowEmpty)"
                ),
            )));
        }
        let retries = match &last {
            Some(o) if same_attempt && !asked && o.phase == "Running" => o.retry_count,
            _ => 0,
        };
        let op = sync_once(
            app,
            ctx,
            spec,
            &target,
            status,
            files,
            &desired,
            &mut resources,
            &revision,
            retries,
            asked || refresh,
        )
        .await;
        if op.phase == "Running" {
            let attempt = u32::try_from(op.retry_count).unwrap_or(u32::MAX);
            retry_in = Some(spec.retry.delay(attempt));
        }
        status.operation_state = Some(op);
    }
    let report = {
        let applied = compare::applied(&resources);
        wait::healthy(target.applier.resources(), &applied, Duration::ZERO).await
    };
    let health = compare::health(&report, &mut resources);
    let in_sync = compare::all_synced(&resources);
    status.resources = resources;
    status.sync = Some(SyncStatus {
        status: if in_sync {
            compare::SYNCED
        } else {
            compare::OUT_OF_SYNC
        }
        .into(),
        revision: Some(revision.clone()),
    });
    let result = judge(app, status, &health, in_sync, &revision);
    status.health = Some(health);
    if in_sync && result.is_ok() {
        ctx.drift
            .lock()
            .completed(&owner, &revision, generation, epoch);
    }
    Outcome { result, retry_in }
}

/// The `Ready` condition an Application's state gives: synced and healthy, or why not.
fn judge(
    app: &Application,
    status: &ApplicationStatus,
    health: &HealthStatus,
    in_sync: bool,
    revision: &str,
) -> Result<Done, Failure> {
    if let Some(op) = &status.operation_state
        && op.phase != "Succeeded"
        && op
            .sync_result
            .as_ref()
            .is_some_and(|r| r.revision == revision)
    {
        return Err(Failure::new(
            Reason::ReconciliationFailed,
            op.message.clone(),
        ));
    }
    if !in_sync {
        let differ: Vec<String> = status
            .resources
            .iter()
            .filter(|r| r.status == compare::OUT_OF_SYNC)
            .map(|r| skewer_appliers::object::display_name(&r.kind, &r.namespace, &r.name))
            .collect();
        return Err(Failure::new(
            Reason::OutOfSync,
            format!(
                "OutOfSync with {revision}: {}; sync with `skewer sync app/{}`",
                summarize(&differ),
                app.name_any()
            ),
        ));
    }
    let why = health.message.clone().unwrap_or_default();
    match health.status.as_str() {
        "Healthy" => Ok(synced_and_healthy(revision, false)),
        "Degraded" => Err(Failure::new(Reason::Degraded, format!("Degraded: {why}"))),
        other => Err(Failure::new(Reason::Progressing, format!("{other}: {why}"))),
    }
}

fn synced_and_healthy(revision: &str, noop: bool) -> Done {
    Done {
        reason: Reason::ReconciliationSucceeded,
        message: format!("Synced to {revision}, healthy"),
        event: Reason::ReconciliationSucceeded,
        noop,
    }
}

fn out_of_sync(revision: &str) -> Option<SyncStatus> {
    Some(SyncStatus {
        status: compare::OUT_OF_SYNC.into(),
        revision: Some(revision.into()),
    })
}

/// The files an Application reads, and its source type in Argo CD's words: the directory's
/// files as `directory` says; without it, a `kustomization.yaml` at the path is built
/// (Kustomize), else the path's own manifests (Directory).
fn select(files: Vec<SourceFile>, spec: &Spec) -> (Vec<SourceFile>, &'static str) {
    if let Some(d) = &spec.directory {
        return (d.filter(files, &spec.path), "Directory");
    }
    let at_path = |f: &SourceFile| {
        let name = f.path.rsplit('/').next().unwrap_or_default();
        let dir = f.path.len().saturating_sub(name.len() + 1);
        KUSTOMIZATION_FILES.contains(&name) && f.path.get(..dir).unwrap_or_default() == spec.path
    };
    if files.iter().any(at_path) {
        return (files, "Kustomize");
    }
    (
        skewer_appliers::directory::Directory::default().filter(files, &spec.path),
        "Directory",
    )
}

/// Creates `namespace` on the target unless it exists (`CreateNamespace=true`); it is not
/// managed afterwards, as in Argo CD.
async fn create_namespace(target: &Target, namespace: &str) -> Result<(), Failure> {
    let api: Api<Namespace> = Api::all(target.client.clone());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {
            info!(namespace, "created namespace (CreateNamespace=true)");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Failure::new(
            Reason::ReconciliationFailed,
            format!("CreateNamespace=true: namespace '{namespace}': {e}"),
        )),
    }
}

/// One sync: apply everything the source renders, prune when the policy says, record the
/// inventory; returns the operation's state (`Running` while a retry is due).
#[allow(clippy::too_many_arguments)]
async fn sync_once(
    app: &Application,
    ctx: &Arc<Context>,
    spec: &Spec,
    target: &Arc<Target>,
    status: &mut ApplicationStatus,
    files: Vec<SourceFile>,
    desired: &[Desired],
    resources: &mut Vec<ResourceStatus>,
    revision: &str,
    retries: i64,
    full: bool,
) -> OperationState {
    let started_at = now();
    let generation = app.meta().generation;
    let op = |phase: &str, message: String, retry_count: i64, results: Vec<ResourceResult>| {
        OperationState {
            phase: phase.into(),
            message,
            started_at: started_at.clone(),
            finished_at: Some(now()),
            retry_count,
            sync_result: Some(SyncResult {
                revision: revision.into(),
                resources: results,
            }),
            synced_generation: generation,
        }
    };
    if spec.options.create_namespace
        && let Some(ns) = &spec.namespace
        && let Err(f) = create_namespace(target, ns).await
    {
        return op("Failed", f.message, retries + 1, Vec::new());
    }
    let owner = owner_of(app);
    let deadline = deadline_after(spec.timeout);
    let apply = ApplyOptions {
        field_manager: FIELD_MANAGER.into(),
        owner: labels_owner(app),
        transform: Transform {
            default_namespace: spec.namespace.clone(),
            ..Default::default()
        },
        force: false,
        concurrency: ctx.settings.concurrency,
        wait_timeout: deadline.saturating_duration_since(tokio::time::Instant::now()),
    };
    let request = SyncRequest {
        files,
        path: spec.path.clone(),
        patches: Vec::new(),
        apply: Arc::new(apply),
        prune: request::prune(spec),
        health: HealthChecks::None,
        deadline,
        previous: from_status(status.inventory.as_ref()),
        scope: target.scope.clone(),
    };
    let heals = spec.automated.is_some_and(|a| a.self_heal);
    let sync = Sync::new(ctx, target, app, &owner).in_full(full);
    let sync = if heals { sync } else { sync.leaving_drift() };
    let before = from_status(status.inventory.as_ref());
    let report = sync.run(request).await;
    status.inventory = Some(to_status(&report.inventory));
    let result_of = |id: &ObjectId, version: &str, status: &str, message: String| ResourceResult {
        group: id.group.clone(),
        version: version.rsplit('/').next().unwrap_or(version).into(),
        kind: id.kind.clone(),
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        status: status.into(),
        message,
    };
    let versions: std::collections::BTreeMap<&ObjectId, &str> = desired
        .iter()
        .map(|d| (&d.id, d.version.as_str()))
        .collect();
    let mut results: Vec<ResourceResult> = report
        .applied
        .iter()
        .map(|o| {
            let v = versions.get(&o.id).copied().unwrap_or_default();
            result_of(&o.id, v, "Synced", String::new())
        })
        .collect();
    results.extend(report.pruned.iter().map(|id| {
        let version = before.entries.get(id).map_or("v1", String::as_str);
        result_of(id, version, "Pruned", "pruned".into())
    }));
    compare::without(resources, &report.pruned);
    match report.result() {
        Ok(()) => {
            compare::synced(desired, resources);
            info!(
                objects = report.planned,
                pruned = report.pruned.len(),
                "synced {revision}"
            );
            let message = format!("successfully synced (all tasks run) to {revision}");
            op("Succeeded", message, 0, results)
        }
        Err(e) => {
            for line in e.details() {
                warn!(revision, "{line}");
            }
            if let SyncError::Apply(errors) = e {
                for err in errors {
                    if let Some(d) = desired.iter().find(|d| d.id.display() == err.object) {
                        results.push(result_of(
                            &d.id,
                            &d.version,
                            "SyncFailed",
                            err.message.clone(),
                        ));
                    }
                }
            }
            let attempt = retries + 1;
            let more = spec.automated.is_some()
                && spec
                    .retry
                    .allows(u32::try_from(retries).unwrap_or(u32::MAX));
            let (phase, message) = if more {
                let delay = spec.retry.delay(u32::try_from(attempt).unwrap_or(u32::MAX));
                (
                    "Running",
                    format!("retrying in {delay:?} (attempt {attempt} failed): {e}"),
                )
            } else {
                (
                    "Failed",
                    format!("sync failed after {attempt} attempt(s): {e}"),
                )
            };
            op(phase, message, attempt, results)
        }
    }
}

/// On deletion: with automated prune (as Argo CD's resources finalizer would), delete what the
/// Application applied; otherwise leave it.
async fn cleanup(app: Arc<Application>, ctx: Arc<Context>) -> Result<Action, Error> {
    let owner = owner_of(&app);
    ctx.drift.lock().forget_owner(&owner);
    ctx.ownership.forget(&owner);
    let Ok(spec) = request::spec(&app, &ctx.settings) else {
        return Ok(Action::await_change());
    };
    let Some(propagation) = request::prune(&spec) else {
        return Ok(Action::await_change());
    };
    let target = match target_key(&ctx, &spec).await {
        Ok(key) => ctx
            .targets
            .get(&key, &app.namespace().unwrap_or_default())
            .await
            .map_err(|e| e.to_string()),
        Err(f) => Err(f.message),
    };
    let inventory = from_status(app.status.as_ref().and_then(|s| s.inventory.as_ref()));
    let note = match target {
        Ok(target) => {
            let report = prune(
                target.applier.resources(),
                inventory.stale(&Inventory::default()),
                &labels_owner(&app),
                propagation_or_background(propagation),
                ctx.settings.concurrency,
            )
            .await;
            let failed: Vec<String> = report
                .failed
                .iter()
                .map(|(id, _, e)| format!("{}: {e}", id.display()))
                .collect();
            (!failed.is_empty()).then(|| {
                format!(
                    "deleted; {} objects could not be pruned: {}",
                    failed.len(),
                    summarize(&failed)
                )
            })
        }
        Err(e) => Some(format!(
            "deleted without pruning: nothing was pruned on its cluster ({e})"
        )),
    };
    if let Some(note) = note {
        warn!("{note}");
        ctx.event(app.as_ref(), true, Reason::PruneFailed, note)
            .await;
    }
    Ok(Action::await_change())
}

/// Foreground deletion waits for dependents, which an Application's deletion must not.
fn propagation_or_background(p: PropagationPolicy) -> PropagationPolicy {
    match p {
        PropagationPolicy::Orphan => PropagationPolicy::Orphan,
        _ => PropagationPolicy::Background,
    }
}
