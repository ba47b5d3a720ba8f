//! Application reconciler (Argo CD-shaped). Each reconcile compares: the Application's own
//! source (shared with every Application on the same repository and revision) is rendered
//! offline and each object is compared with what the last sync applied, and with the drift
//! self-heal recorded. It syncs when asked (`skewer sync`, `skewer.dev/sync-requested-at`) or,
//! with `syncPolicy.automated`, when the source changed; a failed sync is retried as
//! `syncPolicy.retry` says ([`phase`]). Status reads as Argo CD's (`sync`, `health`,
//! `resources`, `operationState`, `reconciledAt`) beside skewer's conditions. The reconcile
//! around this is the one deploy path ([`super::deploy`]).

pub mod compare;
mod operation;
pub mod phase;
pub mod request;

use std::sync::Arc;
use std::time::Duration;

use kube::api::PropagationPolicy;
use kube::{Resource, ResourceExt};
use skewer_appliers::compare::{Differs, compare};
use skewer_appliers::kustomize::KUSTOMIZATION_FILES;
use skewer_appliers::load::SourceFile;
use skewer_appliers::message::summarize;
use skewer_appliers::sync::preview;
use skewer_appliers::transform::Transform;
use skewer_appliers::wait::{self, deadline_after};

use self::compare::Desired;
use self::phase::{Decision, Facts, Last, Phase};
use self::request::Spec;
use super::dependencies::Dependency;
use super::deploy::{self, Deploy, Outcome, Place, SourceOf, Work, labels_owner};
use crate::api::application::{HealthStatus, SyncStatus};
use crate::api::conditions::now;
use crate::api::history::Deployment;
use crate::api::kustomization::ResourceInventory;
use crate::api::{Application, ApplicationStatus, SYNC_REQUESTED_AT};
use crate::artifacts;
use crate::runtime::context::Context;
use crate::runtime::{Done, Failure, Reason, Schedule, Settings};

/// How soon an Application whose objects are not healthy yet is looked at again (doubling up
/// to its interval while it stays so).
const PROGRESS_CHECK: Duration = Duration::from_secs(2);

impl Deploy for Application {
    type Spec = Spec;

    fn spec(&self, settings: &Settings) -> Result<Spec, Failure> {
        request::spec(self, settings)
    }

    fn place(&self, settings: &Settings) -> Result<Place, Failure> {
        Ok(Place {
            destination: request::destination(self)?,
            identity: deploy::identity(
                &self.namespace().unwrap_or_default(),
                self.spec.service_account_name.as_ref(),
                settings,
            ),
        })
    }

    fn schedule(spec: &Spec) -> (Schedule, Duration) {
        let schedule = Schedule {
            interval: spec.interval,
            retry: PROGRESS_CHECK,
        };
        (schedule, spec.timeout)
    }

    fn source<'a>(&'a self, spec: &'a Spec) -> SourceOf<'a> {
        SourceOf::Own {
            wanted: &spec.wanted,
            interval: spec.interval,
        }
    }

    fn path(spec: &Spec) -> &str {
        &spec.path
    }

    fn dependencies(&self) -> Vec<Dependency<'_>> {
        Dependency::all(&self.spec.depends_on, "Application")
    }

    /// With automated prune (as Argo CD's resources finalizer would), what it applied goes;
    /// otherwise it stays. Foreground deletion waits for dependents, which an Application's
    /// deletion must not.
    fn on_delete(&self, settings: &Settings) -> Option<PropagationPolicy> {
        if self
            .annotations()
            .contains_key(crate::api::PRESERVE_RESOURCES)
        {
            return None;
        }
        let spec = request::spec(self, settings).ok()?;
        request::prune(&spec).map(|p| match p {
            PropagationPolicy::Orphan => PropagationPolicy::Orphan,
            _ => PropagationPolicy::Background,
        })
    }

    fn inventory(status: &ApplicationStatus) -> Option<&ResourceInventory> {
        status.inventory.as_ref()
    }

    fn inventory_mut(status: &mut ApplicationStatus) -> &mut Option<ResourceInventory> {
        &mut status.inventory
    }

    fn heals(spec: &Spec) -> bool {
        spec.automated.is_some_and(|a| a.self_heal)
    }

    fn history_mut(status: &mut ApplicationStatus) -> &mut Vec<Deployment> {
        &mut status.history
    }

    fn history_limit(spec: &Spec) -> usize {
        spec.history
    }

    /// As its sync operation ended: a sync still retrying failed this time.
    fn deployed(status: &ApplicationStatus, _: &Result<Done, Failure>) -> Result<(), String> {
        match status.operation_state.as_ref() {
            Some(op) if Phase::parse(&op.phase) == Some(Phase::Succeeded) => Ok(()),
            Some(op) => Err(op.message.clone()),
            None => Err("no sync operation recorded".into()),
        }
    }

    fn take_sync_request(&self, status: &mut ApplicationStatus) -> bool {
        let requested = self.annotations().get(SYNC_REQUESTED_AT).cloned();
        let new = requested.is_some() && requested != status.last_handled_sync_at;
        status.last_handled_sync_at = requested;
        new
    }

    /// Synced and healthy: nothing to look at unless something moved.
    fn settled(status: &ApplicationStatus) -> bool {
        let healthy = status
            .health
            .as_ref()
            .is_some_and(|h| h.status == "Healthy");
        let synced = status
            .sync
            .as_ref()
            .is_some_and(|s| s.status == compare::SYNCED);
        healthy && synced
    }

    /// A source that cannot be had leaves the sync status unknown.
    fn fetched(status: &mut ApplicationStatus, revision: Option<&str>) {
        if revision.is_none() {
            status.sync = Some(SyncStatus {
                status: "Unknown".into(),
                revision: status.sync.as_ref().and_then(|s| s.revision.clone()),
            });
        }
    }

    fn done(spec: &Spec, revision: &str, noop: bool) -> Done {
        let pinned = spec.pinned.as_ref().map(|pin| {
            format!(
                "; rolled back to deployment {}, pinned until spec.source or spec.syncPolicy changes",
                pin.id
            )
        });
        Done {
            reason: Reason::ReconciliationSucceeded,
            message: format!(
                "Synced to {revision}, healthy{}",
                pinned.unwrap_or_default()
            ),
            event: Reason::ReconciliationSucceeded,
            noop,
        }
    }

    async fn work(work: Work<'_, Self>, status: &mut ApplicationStatus) -> Outcome {
        compare_and_sync(work, status).await
    }
}

/// How the objects of `app` named in `only` (display names, like `ConfigMap/ns/x`; `None`:
/// every one) differ between its source and its cluster, field by field, by a server-side dry
/// run on its target as its identity: nothing is written. `pruned`: with what a sync would
/// prune. For the dashboard's Out of Sync view, `skewer diff app/NAME` and `sync --dry-run`.
pub async fn diff(
    ctx: &Arc<Context>,
    app: &Application,
    only: Option<&[String]>,
    pruned: bool,
) -> Result<Vec<Differs>, String> {
    let (spec, manifests) = render(ctx, app).await?;
    let ns = app.namespace().unwrap_or_default();
    let place = app.place(&ctx.settings).map_err(|f| f.message)?;
    let target = deploy::target(ctx, &place, &ns)
        .await
        .map_err(|f| f.message)?;
    let opts = deploy::apply_options(
        labels_owner(app),
        transform(&spec),
        false,
        &ctx.settings,
        deadline_after(spec.timeout),
    );
    let previous =
        crate::api::inventory::from_status(app.status.as_ref().and_then(|s| s.inventory.as_ref()));
    let prune = (pruned && request::prune(&spec).is_some()).then_some(&previous);
    let all = compare(&target.applier, manifests, &opts, prune)
        .await
        .map_err(|e| e.to_string())?;
    Ok(all
        .into_iter()
        .filter(|d| only.is_none_or(|o| o.contains(&d.object)))
        .collect())
}

/// What `app` renders from its source (fetched at its revision, or its rollback's): its
/// checked spec and the manifests as a sync would apply them ([`manifests`]).
pub async fn render(
    ctx: &Arc<Context>,
    app: &Application,
) -> Result<(Spec, Vec<skewer_appliers::Manifest>), String> {
    let spec = request::spec(app, &ctx.settings).map_err(|f| f.message)?;
    let ns = app.namespace().unwrap_or_default();
    let artifact = deploy::own_source::artifact(ctx, &ns, &spec.wanted, spec.interval, None)
        .await
        .map_err(|f| f.message)?;
    let files = artifacts::files_under(&ctx.store, &artifact, &spec.path, false)
        .await
        .map_err(|f| f.message)?;
    let (files, _) = select(files, &spec);
    let manifests = manifests(app, &spec, &files)?;
    Ok((spec, manifests))
}

/// What `files` (selected by [`select`]) render as a sync of `app` applies them: built, with
/// the owner labels and the destination's namespace where none is set; resource hooks refused.
fn manifests(
    app: &Application,
    spec: &Spec,
    files: &[SourceFile],
) -> Result<Vec<skewer_appliers::Manifest>, String> {
    let owner = labels_owner(app);
    let ms = preview(files, &spec.path, &[], None, &transform(spec), Some(&owner))
        .map_err(|e| e.to_string())?;
    match request::hook(&ms) {
        Some(refused) => Err(refused),
        None => Ok(ms),
    }
}

/// What an Application adds to every object: the destination's namespace where none is set.
fn transform(spec: &Spec) -> Transform {
    Transform {
        default_namespace: spec.namespace.clone(),
        ..Default::default()
    }
}

/// The comparison, perhaps a sync, health.
async fn compare_and_sync(
    mut work: Work<'_, Application>,
    status: &mut ApplicationStatus,
) -> Outcome {
    let (app, spec, revision) = (work.obj, work.spec, work.revision);
    let generation = app.meta().generation;
    let (files, source_type) = select(std::mem::take(&mut work.files), spec);
    let desired: Vec<Desired> = match manifests(app, spec, &files) {
        Ok(ms) => ms.iter().map(Desired::of).collect(),
        Err(e) => {
            status.sync = Some(SyncStatus {
                status: "Unknown".into(),
                revision: Some(revision.into()),
            });
            return Err(Failure::new(Reason::BuildFailed, e)).into();
        }
    };
    status.source_type = Some(source_type.into());
    status.reconciled_at = Some(now());
    let owner = deploy::owner_of(app);
    let drifted = work.ctx.drift.lock().drifted(&owner);
    let mut resources = compare::resources(&desired, &status.resources, &drifted);
    // What the source changed, drift aside: what automation syncs.
    let changed = !compare::all_synced(&compare::resources(&desired, &status.resources, &[]));
    let facts = Facts {
        asked: work.asked,
        automated: spec.automated,
        changed,
        last: Last::of(status.operation_state.as_ref(), revision, generation),
        renders_nothing: desired.is_empty(),
        has_resources: !resources.is_empty(),
        held: work
            .obj
            .annotations()
            .contains_key(crate::api::ROLLOUT_HOLD),
    };
    let mut retry_in = None;
    match phase::decide(facts) {
        Decision::Leave => {}
        Decision::RefuseEmpty => {
            status.resources = resources;
            status.sync = Some(SyncStatus {
                status: compare::OUT_OF_SYNC.into(),
                revision: Some(revision.into()),
            });
            return Err(Failure::new(
                Reason::OutOfSync,
                format!(
                    "automated sync refused: {revision} renders no objects, and syncing would prune every one (spec.syncPolicy.automated.allowEmpty)"
                ),
            ))
            .into();
        }
        Decision::Sync { retries } => {
            let op =
                operation::sync_once(&work, status, files, &desired, &mut resources, retries).await;
            if Phase::parse(&op.phase) == Some(Phase::Running) {
                let attempt = u32::try_from(op.retry_count).unwrap_or(u32::MAX);
                retry_in = Some(spec.retry.delay(attempt));
            }
            status.operation_state = Some(op);
        }
    }
    let report = {
        let applied = compare::applied(&resources);
        wait::healthy(work.target().applier.resources(), &applied, Duration::ZERO).await
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
        revision: Some(revision.into()),
    });
    let result = judge(app, spec, status, &health, in_sync, revision);
    status.health = Some(health);
    Outcome { result, retry_in }
}

/// The `Ready` condition an Application's state gives: synced and healthy, or why not.
fn judge(
    app: &Application,
    spec: &Spec,
    status: &ApplicationStatus,
    health: &HealthStatus,
    in_sync: bool,
    revision: &str,
) -> Result<Done, Failure> {
    if let Some(op) = &status.operation_state
        && Phase::parse(&op.phase) != Some(Phase::Succeeded)
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
        "Healthy" => Ok(Application::done(spec, revision, false)),
        "Degraded" => Err(Failure::new(Reason::Degraded, format!("Degraded: {why}"))),
        other => Err(Failure::new(Reason::Progressing, format!("{other}: {why}"))),
    }
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

/// Runs the Application controller until shutdown.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let _credentials = ctx
        .app_sources
        .follow_credentials(&ctx.client, namespace.as_deref());
    deploy::run::<Application>(ctx, namespace).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::ApplicationSpec;
    use crate::reconcilers::deploy::Destination;
    use crate::targets::ClusterRef;

    fn app(yaml: &str) -> Application {
        let spec: ApplicationSpec = serde_saphyr::from_str(yaml).unwrap();
        let mut app = Application::new("web", spec);
        app.metadata.namespace = Some("argocd".into());
        app
    }

    const SOURCE: &str = "source: {repoURL: 'https://git.example/apps.git', path: web}\n";

    #[test]
    fn it_applies_where_its_destination_says_as_its_account() {
        let settings = Settings::for_tests();
        let a = app(&format!(
            "{SOURCE}destination: {{name: spoke-a}}\nserviceAccountName: deployer\n"
        ));
        assert_eq!(
            a.place(&settings).unwrap(),
            Place {
                destination: Destination::Cluster(ClusterRef::Registered("spoke-a".into())),
                identity: Some("system:serviceaccount:argocd:deployer".into()),
            }
        );
        let a = app(&format!(
            "{SOURCE}destination: {{server: 'https://10.0.0.1:6443'}}\n"
        ));
        assert_eq!(
            a.place(&settings).unwrap().destination,
            Destination::Server("https://10.0.0.1:6443".into())
        );
        let spec = a.spec(&settings).unwrap();
        assert_eq!(Application::path(&spec), "web");
        assert!(matches!(a.source(&spec), SourceOf::Own { .. }));
        assert!(
            !a.reads("GitRepository", "argocd", "web"),
            "it names no source object"
        );
    }

    #[test]
    fn deletion_prunes_only_with_automated_prune_and_never_in_the_foreground() {
        let settings = Settings::for_tests();
        let with = |policy: &str| {
            app(&format!(
                "{SOURCE}destination: {{name: in-cluster}}\nsyncPolicy: {policy}\n"
            ))
            .on_delete(&settings)
        };
        assert_eq!(with("{}"), None);
        assert_eq!(with("{automated: {prune: false}}"), None);
        assert_eq!(
            with("{automated: {prune: true}}"),
            Some(PropagationPolicy::Background)
        );
        assert_eq!(
            with("{automated: {prune: true}, syncOptions: [PrunePropagationPolicy=orphan]}"),
            Some(PropagationPolicy::Orphan)
        );
        assert_eq!(
            with("{automated: {prune: true}, syncOptions: [PrunePropagationPolicy=foreground]}"),
            Some(PropagationPolicy::Background)
        );
    }

    #[test]
    fn sync_requests_self_heal_and_what_settled_means() {
        let settings = Settings::for_tests();
        let mut a = app(&format!(
            "{SOURCE}destination: {{name: in-cluster}}\nsyncPolicy: {{automated: {{selfHeal: true}}}}\n"
        ));
        assert!(Application::heals(&a.spec(&settings).unwrap()));
        let mut status = ApplicationStatus::default();
        assert!(!a.take_sync_request(&mut status), "none asked");
        a.metadata.annotations = Some([(SYNC_REQUESTED_AT.to_string(), "t1".to_string())].into());
        assert!(a.take_sync_request(&mut status));
        assert!(!a.take_sync_request(&mut status), "handled once");

        assert!(!Application::settled(&status));
        status.sync = Some(SyncStatus {
            status: compare::SYNCED.into(),
            revision: Some("main@sha1:1".into()),
        });
        status.health = Some(HealthStatus {
            status: "Healthy".into(),
            message: None,
        });
        assert!(Application::settled(&status));
        Application::fetched(&mut status, None);
        let sync = status.sync.clone().unwrap();
        assert_eq!(
            (sync.status.as_str(), sync.revision.as_deref()),
            ("Unknown", Some("main@sha1:1"))
        );
        assert!(!Application::settled(&status));
    }
}
