//! Kustomization reconciler: wait for dependencies, read the source's artifact, load and
//! patch the manifests, record the planned inventory, server-side apply, prune what left the
//! source, check health, and report it all in status.
//!
//! Safety rules: nothing is pruned unless loading, patching, planning and applying all
//! succeeded; the inventory in status always covers every object that may exist with this
//! Kustomization's owner labels (it is widened before applying, narrowed only after pruning).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use skewer_appliers::apply::{ApplyOptions, Plan};
use skewer_appliers::load::{SourceFile, load};
use skewer_appliers::patch::{PatchSpec, Selector, apply_patches};
use skewer_appliers::prune::prune;
use skewer_appliers::transform::{Owner, Transform};
use skewer_appliers::{Inventory, ObjectId, wait};
use tracing::{Instrument, info, info_span, warn};

use super::drift;
use super::gitrepository::artifact_key;
use super::{Context, Error, duration};
use crate::api::conditions::{self, READY};
use crate::api::kustomization::ResourceInventory;
use crate::api::{GitRepository, Kustomization, KustomizationStatus, RECONCILE_REQUESTED_AT};

pub const FINALIZER: &str = "finalizers.skewer.dev";
pub const FIELD_MANAGER: &str = "skewer";

/// A failed reconcile: the reason for the Ready condition, and a message naming what failed.
#[derive(Debug)]
struct Failure {
    reason: &'static str,
    message: String,
    /// True when only a spec change can fix it (Stalled rather than retrying).
    stalled: bool,
}

fn fail(reason: &'static str, message: impl Into<String>) -> Failure {
    Failure {
        reason,
        message: message.into(),
        stalled: false,
    }
}

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let ks_api: Api<Kustomization> = super::scoped(&ctx.client, namespace.as_deref());
    let git_api: Api<GitRepository> = super::scoped(&ctx.client, namespace.as_deref());
    let controller = super::controller(ks_api.clone());
    let (by_source, by_dependency) = (controller.store(), controller.store());
    controller
        // A new artifact reconciles the Kustomizations that use it.
        .watches(
            git_api,
            watcher::Config::default(),
            move |repo: GitRepository| {
                matching(&by_source, &repo, |ks, ns, name| {
                    let s = &ks.spec.source_ref;
                    s.kind == "GitRepository"
                        && s.name == name
                        && in_namespace(ks, &s.namespace, ns)
                })
            },
        )
        // A dependency changing (becoming Ready) reconciles its dependents.
        .watches(
            ks_api,
            watcher::Config::default(),
            move |dep: Kustomization| {
                matching(&by_dependency, &dep, |ks, ns, name| {
                    ks.spec
                        .depends_on
                        .iter()
                        .any(|d| d.name == name && in_namespace(ks, &d.namespace, ns))
                })
            },
        )
        .shutdown_on_signal()
        .with_config(super::controller_config(&ctx))
        .run(reconcile, error_policy, ctx)
        .for_each(|r| super::log_outcome("Kustomization", r))
        .await;
}

/// The Kustomizations in `store` for which `refers(ks, namespace, name)` of `target` holds.
fn matching<K: kube::Resource>(
    store: &Store<Kustomization>,
    target: &K,
    refers: impl Fn(&Kustomization, &str, &str) -> bool,
) -> Vec<ObjectRef<Kustomization>> {
    let (ns, name) = (
        target.meta().namespace.clone().unwrap_or_default(),
        target.meta().name.clone().unwrap_or_default(),
    );
    store
        .state()
        .iter()
        .filter(|ks| refers(ks, &ns, &name))
        .map(|ks| ObjectRef::from_obj(ks.as_ref()))
        .collect()
}

/// Whether a reference's namespace (defaulting to the Kustomization's own) is `ns`.
fn in_namespace(ks: &Kustomization, reference: &Option<String>, ns: &str) -> bool {
    reference.clone().or_else(|| ks.namespace()).as_deref() == Some(ns)
}

fn error_policy(_: Arc<Kustomization>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

// Boxed as `dyn Future + Send`: rustc cannot otherwise prove the finalizer's nested futures
// Send for every lifetime (rust-lang/rust#102211).
fn reconcile(
    ks: Arc<Kustomization>,
    ctx: Arc<Context>,
) -> futures::future::BoxFuture<'static, Result<Action, Error>> {
    Box::pin(reconcile_inner(ks, ctx))
}

async fn reconcile_inner(ks: Arc<Kustomization>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = ks.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &ns);
    let span = info_span!("reconcile", kind = "Kustomization", namespace = %ns, object = %ks.name_any(), revision = tracing::field::Empty);
    finalizer(&api, FINALIZER, ks, move |event| async move {
        match event {
            Finalizer::Apply(ks) => reconcile_apply(ks, ctx).await,
            Finalizer::Cleanup(ks) => cleanup(ks, ctx).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| Error::Finalizer(e.to_string()))
}

fn owner_of(ks: &Kustomization) -> Owner {
    Owner {
        name: ks.name_any(),
        namespace: ks.namespace().unwrap_or_default(),
    }
}

async fn reconcile_apply(ks: Arc<Kustomization>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = ks.namespace().ok_or(Error::NoNamespace)?;
    let name = ks.name_any();
    let generation = ks.metadata.generation;
    let old = ks.status.clone().unwrap_or_default();
    if ks.spec.suspend {
        // Suspended means hands off: drift is not corrected either.
        ctx.drift.lock().forget_owner(&format!("{ns}/{name}"));
        return Ok(Action::await_change());
    }
    let mut status = old.clone();
    let requested = ks.annotations().get(RECONCILE_REQUESTED_AT).cloned();
    // A new reconcile request always applies in full, even when nothing changed.
    let requested_now = requested.is_some() && requested != old.last_handled_reconcile_at;
    status.last_handled_reconcile_at = requested;
    let intervals = (|| {
        let interval = duration("interval", &ks.spec.interval)?;
        let retry = ks
            .spec
            .retry_interval
            .as_deref()
            .map(|r| duration("retryInterval", r))
            .transpose()?
            .unwrap_or(interval);
        let timeout = ks
            .spec
            .timeout
            .as_deref()
            .map(|t| duration("timeout", t))
            .transpose()?
            .unwrap_or(interval);
        Ok::<_, String>((interval, retry, timeout))
    })();
    let (interval, retry, timeout) = match intervals {
        Ok(v) => v,
        Err(msg) => {
            conditions::mark_stalled(&mut status.conditions, "InvalidSpec", &msg, generation);
            status.observed_generation = generation;
            write_status(&ctx.client, &ns, &name, &status).await?;
            return Ok(Action::await_change());
        }
    };

    let started = std::time::Instant::now();
    let _in_flight = crate::metrics::InFlight::start(&ctx.metrics.reconciles_in_flight);
    let deadline = tokio::time::Instant::now() + timeout;
    // Health checks end at the deadline with a message naming what is unhealthy; the outer
    // bound (a little later) only catches a stuck API call.
    let result = match tokio::time::timeout(
        timeout + Duration::from_secs(5),
        sync(&ks, &ctx, &mut status, deadline, requested_now),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(fail(
            "ReconciliationFailed",
            format!("reconcile timed out after {timeout:?} (spec.timeout)"),
        )),
    };
    let was =
        conditions::find(&old.conditions, READY).map(|c| (c.status.clone(), c.message.clone()));
    let key = format!("{ns}/{name}");
    let mut event: Option<(bool, &'static str, String)> = None;
    let label = match &result {
        Ok((_, true)) => "noop".to_string(),
        Ok(_) => "success".to_string(),
        Err(f) => f.reason.to_string(),
    };
    ctx.metrics
        .observe_reconcile("Kustomization", label, started.elapsed());
    let action = match result {
        Ok((message, _)) => {
            conditions::mark_ready(
                &mut status.conditions,
                "ReconciliationSucceeded",
                &message,
                generation,
            );
            conditions::set(
                &mut status.conditions,
                conditions::HEALTHY,
                true,
                "Succeeded",
                "health checks passed",
                generation,
            );
            ctx.failures.clear(&key);
            if was != Some(("True".into(), message.clone())) {
                info!(namespace = %ns, name = %name, "{message}");
                event = Some((false, "ReconciliationSucceeded", message));
            }
            Action::requeue(interval)
        }
        Err(f) => {
            warn!(namespace = %ns, name = %name, reason = f.reason, error = %f.message, "reconcile failed");
            if f.stalled {
                conditions::mark_stalled(&mut status.conditions, f.reason, &f.message, generation);
            } else {
                conditions::mark_failed(&mut status.conditions, f.reason, &f.message, generation);
            }
            if f.reason == "HealthCheckFailed" {
                conditions::set(
                    &mut status.conditions,
                    conditions::HEALTHY,
                    false,
                    f.reason,
                    &f.message,
                    generation,
                );
            }
            let action = if f.stalled {
                Action::await_change()
            } else {
                Action::requeue(super::backoff(retry, interval, ctx.failures.record(&key)))
            };
            if was != Some(("False".into(), f.message.clone())) {
                event = Some((true, f.reason, f.message));
            }
            action
        }
    };
    status.observed_generation = generation;
    if status != old {
        write_status(&ctx.client, &ns, &name, &status).await?;
    }
    // After the status write, so that an event's round trip never delays Ready.
    if let Some((warning, reason, note)) = event {
        ctx.event(ks.as_ref(), warning, reason, note).await;
    }
    Ok(action)
}

/// One reconcile's work. Returns the Ready message on success, and whether it was a no-op.
async fn sync(
    ks: &Kustomization,
    ctx: &Arc<Context>,
    status: &mut KustomizationStatus,
    deadline: tokio::time::Instant,
    requested: bool,
) -> Result<(String, bool), Failure> {
    let ns = ks.namespace().unwrap_or_default();
    let name = ks.name_any();
    let owner_key = format!("{ns}/{name}");
    let spec = &ks.spec;
    if spec.service_account_name.is_some() {
        return Err(Failure {
            reason: "InvalidSpec",
            message: "spec.serviceAccountName: impersonation is not supported yet".into(),
            stalled: true,
        });
    }

    // Dependencies must be Ready at their current generation.
    for dep in &spec.depends_on {
        let dep_ns = dep.namespace.clone().unwrap_or_else(|| ns.clone());
        let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &dep_ns);
        let ready = match api.get_opt(&dep.name).await {
            Ok(Some(d)) => {
                let st = d.status.unwrap_or_default();
                conditions::is_true(&st.conditions, READY)
                    && st.observed_generation == d.metadata.generation
            }
            Ok(None) => false,
            Err(e) => {
                return Err(fail(
                    "DependencyNotReady",
                    format!("dependency {dep_ns}/{}: {e}", dep.name),
                ));
            }
        };
        if !ready {
            return Err(fail(
                "DependencyNotReady",
                format!("dependency '{dep_ns}/{}' is not ready", dep.name),
            ));
        }
    }

    // The source's artifact.
    let src = &spec.source_ref;
    if src.kind != "GitRepository" {
        return Err(Failure {
            reason: "InvalidSpec",
            message: format!(
                "spec.sourceRef.kind: '{}' is not supported (GitRepository)",
                src.kind
            ),
            stalled: true,
        });
    }
    let src_ns = src.namespace.clone().unwrap_or_else(|| ns.clone());
    let repos: Api<GitRepository> = Api::namespaced(ctx.client.clone(), &src_ns);
    let repo = repos
        .get_opt(&src.name)
        .await
        .map_err(|e| {
            fail(
                "ArtifactFailed",
                format!("source GitRepository/{src_ns}/{}: {e}", src.name),
            )
        })?
        .ok_or_else(|| {
            fail(
                "ArtifactFailed",
                format!("source GitRepository/{src_ns}/{} not found", src.name),
            )
        })?;
    let artifact = repo.status.and_then(|s| s.artifact).ok_or_else(|| {
        fail(
            "ArtifactFailed",
            format!(
                "source GitRepository/{src_ns}/{} has no artifact yet",
                src.name
            ),
        )
    })?;
    let revision = artifact.revision.clone();
    tracing::Span::current().record("revision", revision.as_str());
    status.last_attempted_revision = Some(revision.clone());

    // Nothing changed since this process applied it in full, and drift is corrected from
    // watches: no writes, no per-object reads.
    let generation = ks.metadata.generation;
    if !requested
        && ctx
            .drift
            .lock()
            .is_applied(&owner_key, &revision, generation, ctx.full_sync)
    {
        return Ok((format!("Applied revision: {revision}"), true));
    }

    let store = ctx.store.clone();
    let (key, digest) = (artifact_key(&src_ns, &src.name), artifact.digest.clone());
    let mut phases = Phases::start();
    // Only the files under `path` are unpacked: a Kustomization of one directory of a big
    // repository holds no more than that directory in memory.
    let dir = skewer_appliers::load::normalize_path(spec.path.as_deref().unwrap_or_default());
    let files = tokio::task::spawn_blocking(move || store.get_under(&key, &digest, &dir))
        .await
        .map_err(|e| fail("ArtifactFailed", e.to_string()))?
        .map_err(|e| fail("ArtifactFailed", e.to_string()))?;

    // Build: load and patch. Any error here stops before touching the cluster.
    let sources: Vec<SourceFile<'_>> = files
        .iter()
        .map(|f| SourceFile {
            path: &f.path,
            data: &f.data,
        })
        .collect();
    let path = spec.path.clone().unwrap_or_default();
    phases.mark("artifact");
    let mut manifests = load(&sources, &path).map_err(|e| fail("BuildFailed", e.to_string()))?;
    apply_patches(&mut manifests, &patch_specs(ks))
        .map_err(|e| fail("BuildFailed", e.to_string()))?;

    let opts = Arc::new(ApplyOptions {
        field_manager: FIELD_MANAGER.into(),
        owner: owner_of(ks),
        transform: Transform {
            target_namespace: spec.target_namespace.clone(),
            labels: spec
                .common_metadata
                .as_ref()
                .map(|m| m.labels.clone())
                .unwrap_or_default(),
            annotations: spec
                .common_metadata
                .as_ref()
                .map(|m| m.annotations.clone())
                .unwrap_or_default(),
        },
        force: spec.force,
        concurrency: ctx.concurrency,
        wait_timeout: deadline.saturating_duration_since(tokio::time::Instant::now()),
    });
    phases.mark("build");
    let plan: Plan = ctx
        .applier
        .plan(manifests, &opts)
        .await
        .map_err(|e| fail("ReconciliationFailed", e.to_string()))?;

    // Widen the recorded inventory before applying, so a crash mid-apply orphans nothing.
    let previous = status
        .inventory
        .as_ref()
        .map(|i| i.to_inventory())
        .unwrap_or_default();
    let mut widened = previous.clone();
    widened.extend(plan.inventory.entries.clone());
    phases.mark("plan");
    if widened != previous {
        status.inventory = Some(ResourceInventory::from_inventory(&widened));
        write_status(&ctx.client, &ns, &name, status)
            .await
            .map_err(|e| fail("ReconciliationFailed", format!("recording inventory: {e}")))?;
    }

    phases.mark("inventory");
    ctx.drift
        .lock()
        .begin(&owner_key, opts.clone(), plan.stages.iter().flatten());
    drift::ensure_watches(
        ctx,
        plan.stages.iter().flatten().map(|p| &p.resource.resource),
    );
    ctx.metrics.objects_applied.inc_by(plan.len() as u64);
    let outcomes = ctx.applier.apply(&plan, &opts).await.map_err(|errs| {
        let lines: Vec<String> = errs.iter().map(ToString::to_string).collect();
        fail("ReconciliationFailed", lines.join("; "))
    })?;
    {
        let mut index = ctx.drift.lock();
        for o in &outcomes {
            index.applied(&o.id, o.seen);
        }
    }

    phases.mark("apply");
    // Prune what left the source; keep in the inventory whatever could not be deleted.
    let mut next = plan.inventory.clone();
    let mut prune_errors = Vec::new();
    if spec.prune {
        let stale = widened.stale(&plan.inventory);
        if !stale.is_empty() {
            let report = prune(
                ctx.applier.resources(),
                stale,
                &opts.owner,
                PropagationPolicy::Background,
                ctx.concurrency,
            )
            .await;
            ctx.metrics
                .objects_pruned
                .inc_by(report.deleted.len() as u64);
            for id in &report.deleted {
                info!(object = %id.display(), "pruned");
            }
            for (id, v, e) in report.failed {
                prune_errors.push(format!("{}: {e}", id.display()));
                next.entries.insert(id, v);
            }
        }
    }
    status.inventory = Some(ResourceInventory::from_inventory(&next));
    if !prune_errors.is_empty() {
        return Err(fail(
            "PruneFailed",
            format!("prune failed: {}", prune_errors.join("; ")),
        ));
    }

    phases.mark("prune");
    // Health.
    let checks = health_targets(ks, &plan);
    if !checks.is_empty() {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        wait::all_healthy(ctx.applier.resources(), &checks, remaining)
            .await
            .map_err(|bad| {
                fail(
                    "HealthCheckFailed",
                    format!(
                        "health check failed after {:?} (spec.timeout): {}",
                        timeout_of(ks),
                        bad.join("; ")
                    ),
                )
            })?;
    }
    phases.mark("health");
    info!(objects = plan.len(), phases = %phases, "synced {revision}");
    status.last_applied_revision = Some(revision.clone());
    ctx.drift
        .lock()
        .completed(&owner_key, &revision, generation);
    Ok((format!("Applied revision: {revision}"), false))
}

/// Milliseconds spent in each phase of a reconcile, for the log line that ends it.
struct Phases {
    last: std::time::Instant,
    spent: Vec<(&'static str, u128)>,
}

impl Phases {
    fn start() -> Self {
        Self {
            last: std::time::Instant::now(),
            spent: Vec::new(),
        }
    }

    fn mark(&mut self, phase: &'static str) {
        let now = std::time::Instant::now();
        self.spent.push((phase, (now - self.last).as_millis()));
        self.last = now;
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .spent
            .iter()
            .map(|(p, ms)| format!("{p}={ms}ms"))
            .collect();
        f.write_str(&parts.join(" "))
    }
}

fn timeout_of(ks: &Kustomization) -> String {
    ks.spec
        .timeout
        .clone()
        .unwrap_or_else(|| ks.spec.interval.clone())
}

fn patch_specs(ks: &Kustomization) -> Vec<PatchSpec> {
    ks.spec
        .patches
        .iter()
        .map(|p| PatchSpec {
            patch: p.patch.clone(),
            target: p.target.as_ref().map(|t| Selector {
                group: t.group.clone(),
                version: t.version.clone(),
                kind: t.kind.clone(),
                name: t.name.clone(),
                namespace: t.namespace.clone(),
                label_selector: t.label_selector.clone(),
            }),
        })
        .collect()
}

/// The objects to health-check: all applied objects with `wait`, else `healthChecks`.
fn health_targets(ks: &Kustomization, plan: &Plan) -> Vec<(ObjectId, String)> {
    if ks.spec.wait {
        return plan
            .inventory
            .entries
            .iter()
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect();
    }
    ks.spec
        .health_checks
        .iter()
        .map(|h| {
            let version = h.api_version.clone().unwrap_or_else(|| "v1".into());
            let (group, _) = skewer_appliers::object::split_api_version(&version);
            let id = ObjectId {
                namespace: h
                    .namespace
                    .clone()
                    .or_else(|| ks.namespace())
                    .unwrap_or_default(),
                name: h.name.clone(),
                group: group.to_string(),
                kind: h.kind.clone(),
            };
            (id, version)
        })
        .collect()
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
    let owner = owner_of(&ks);
    ctx.drift
        .lock()
        .forget_owner(&format!("{}/{}", owner.namespace, owner.name));
    if delete && !ks.spec.suspend {
        let inventory: Inventory = ks
            .status
            .as_ref()
            .and_then(|s| s.inventory.as_ref())
            .map(|i| i.to_inventory())
            .unwrap_or_default();
        let stale = inventory.stale(&Inventory::default());
        let report = prune(
            ctx.applier.resources(),
            stale,
            &owner_of(&ks),
            PropagationPolicy::Background,
            ctx.concurrency,
        )
        .await;
        if !report.failed.is_empty() {
            warn!(
                failed = report.failed.len(),
                "objects left behind on deletion"
            );
        }
    }
    Ok(Action::await_change())
}

async fn write_status(
    client: &Client,
    ns: &str,
    name: &str,
    status: &KustomizationStatus,
) -> Result<(), kube::Error> {
    let api: Api<Kustomization> = Api::namespaced(client.clone(), ns);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map(|_| ())
}
