//! One sync of an Application: its namespace created when asked, everything the source renders
//! applied through the pipeline, pruned as its policy says, and the operation's state in Argo
//! CD's words (`Running` while a retry is due).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use skewer_appliers::ObjectId;
use skewer_appliers::load::SourceFile;
use skewer_appliers::sync::{HealthChecks, SyncError, SyncRequest};
use tracing::{info, warn};

use super::compare::{self, Desired};
use super::phase::Phase;
use super::{now, request, transform};
use crate::api::application::{OperationState, ResourceResult, ResourceStatus, SyncResult};
use crate::api::inventory::{from_status, to_status};
use crate::api::{Application, ApplicationStatus};
use crate::reconcilers::deploy::{Work, apply_options, labels_owner};
use crate::runtime::{Failure, Reason};
use crate::targets::Target;

/// One sync of `files`, this being retry number `retries`; records the inventory in `status`
/// and what changed in `resources`, and returns the operation's state.
pub async fn sync_once(
    work: &Work<'_, Application>,
    status: &mut ApplicationStatus,
    files: Vec<SourceFile>,
    desired: &[Desired],
    resources: &mut Vec<ResourceStatus>,
    retries: i64,
) -> OperationState {
    let (app, spec, revision) = (work.obj, work.spec, work.revision);
    let started_at = now();
    let generation = app.metadata.generation;
    let op = |phase: Phase, message: String, retry_count: i64, results: Vec<ResourceResult>| {
        OperationState {
            phase: phase.as_str().into(),
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
        && let Err(f) = create_namespace(work.target(), ns).await
    {
        return op(Phase::Failed, f.message, retries + 1, Vec::new());
    }
    let apply = apply_options(
        labels_owner(app),
        transform(spec),
        false,
        &work.ctx.settings,
        work.deadline,
    );
    let before = from_status(status.inventory.as_ref());
    let request = SyncRequest {
        files,
        path: spec.path.clone(),
        patches: Vec::new(),
        apply: Arc::new(apply),
        prune: request::prune(spec),
        health: HealthChecks::None,
        deadline: work.deadline,
        previous: before.clone(),
        scope: work.target().scope.clone(),
        // `phase::decide` already refuses an automated sync that would empty it without
        // `allowEmpty`; a sync a person asked for may empty it, as in Argo CD.
        allow_empty: true,
        substitute: None,
        decrypt: None,
        overlay: Default::default(),
    };
    let report = work.sync.run(request).await;
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
    let versions: BTreeMap<&ObjectId, &str> = desired
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
    let e = match report.result() {
        Ok(()) => {
            compare::synced(desired, resources);
            info!(
                objects = report.planned,
                pruned = report.pruned.len(),
                "synced {revision}"
            );
            let message = format!("successfully synced (all tasks run) to {revision}");
            return op(Phase::Succeeded, message, 0, results);
        }
        Err(e) => e,
    };
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
    let attempt = retries.saturating_add(1);
    let more = spec.automated.is_some()
        && spec
            .retry
            .allows(u32::try_from(retries).unwrap_or(u32::MAX));
    if more {
        let delay = spec.retry.delay(u32::try_from(attempt).unwrap_or(u32::MAX));
        let message = format!("retrying in {delay:?} (attempt {attempt} failed): {e}");
        op(Phase::Running, message, attempt, results)
    } else {
        let message = format!("sync failed after {attempt} attempt(s): {e}");
        op(Phase::Failed, message, attempt, results)
    }
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
