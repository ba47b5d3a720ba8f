//! ApplicationSet reconciler (Argo CD-shaped). Each reconcile reads the spec ([`spec`]), runs
//! the generators ([`generate`]) over the registered clusters and the Git repositories they
//! name (fetched through the same shared sources as Applications), renders one Application per
//! parameter set ([`template`], [`gotemplate`]), and makes the generated Applications match:
//! created, updated and deleted as `syncPolicy.applicationsSync` allows, each carrying this
//! ApplicationSet as its controller owner. A namespace never gets an Application on a cluster
//! whose Secret does not allow it, and an Application it did not generate is never taken
//! over. With a RollingSync ([`rollout`]) it then asks the Applications of each step to sync in
//! turn. Status reads as Argo CD's (`conditions`, `resources`, `applicationStatus`) beside
//! skewer's `Ready`.
//!
//! It reconciles when the ApplicationSet changes, when an Application it owns changes (sync,
//! health, deletion), when a cluster Secret changes, and on the git generators' interval.

pub mod generate;
pub mod gotemplate;
pub mod params;
pub mod rollout;
pub mod spec;
pub mod template;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use self::generate::{Cluster, GenError, Inputs};
use self::spec::Checked;
use super::deploy::Destination;
use crate::api::applicationset::{ApplicationStatusEntry, ResourceStatus};
use crate::api::conditions;
use crate::api::{
    APPSET_FIELD_MANAGER, APPSET_LABEL, Application, ApplicationSet, ApplicationSetStatus,
    PRESERVE_RESOURCES, RECONCILE_REQUESTED_AT, ROLLOUT_FIELD_MANAGER, SYNC_REQUESTED_AT,
};
use crate::appsource::Wanted;
use crate::runtime::context::Context;
use crate::runtime::report::Session;
use crate::runtime::{self, Done, Error, Failure, Reason, Schedule};
use crate::targets::ClusterRef;

/// Argo CD's condition types.
pub const ERROR_OCCURRED: &str = "ErrorOccurred";
pub const PARAMETERS_GENERATED: &str = "ParametersGenerated";
pub const RESOURCES_UP_TO_DATE: &str = "ResourcesUpToDate";
pub const ROLLOUT_PROGRESSING: &str = "RolloutProgressing";

/// On a generated Application: the digest of what the ApplicationSet last applied, so that an
/// unchanged Application costs no write.
pub const DIGEST: &str = "skewer.dev/applicationset-digest";

/// How often an ApplicationSet that reads no Git generates again anyway (its clusters and
/// Applications are watched; this is a safety net).
const RESYNC: Duration = Duration::from_secs(600);
/// How soon a failed generation is tried again, at first.
const RETRY: Duration = Duration::from_secs(2);
/// Repositories one generation may fetch (a matrix may template the second's `repoURL`).
const MAX_REPOSITORIES: usize = 16;

/// Runs the ApplicationSet controller until shutdown.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<ApplicationSet> = crate::api::scoped(&ctx.client, namespace.as_deref());
    let controller = runtime::controller::of(api);
    // The generated Applications (labeled so, so that no other is cached here), each change
    // reconciling the ApplicationSet that owns it.
    let apps_api: Api<Application> = crate::api::scoped(&ctx.client, namespace.as_deref());
    let (apps, writer) = reflector::store();
    let owned = watcher(apps_api, crate::api::watch::own_kinds_with(APPSET_LABEL))
        .modify(lighten)
        .reflect(writer)
        .touched_objects();
    let controller = controller.watches_stream(owned, |app: Application| {
        let ns = app.namespace()?;
        app.owner_references()
            .iter()
            .find(|o| o.kind == "ApplicationSet" && o.controller == Some(true))
            .map(|o| ObjectRef::<ApplicationSet>::new(&o.name).within(&ns))
    });
    // A cluster Secret added, changed or deleted: every ApplicationSet with a clusters
    // generator generates again.
    let sets = controller.store();
    let clusters = crate::shards::announced(ctx.targets.registry.subscribe()).flat_map(move |_| {
        let refs: Vec<ObjectRef<ApplicationSet>> = sets
            .state()
            .iter()
            .filter(|s| reads_clusters(s))
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect();
        futures::stream::iter(refs)
    });
    let controller = controller.reconcile_on(clusters);
    runtime::controller::run(ctx, controller, move |set, ctx| {
        let apps = apps.clone();
        async move {
            let span = tracing::info_span!("reconcile", kind = "ApplicationSet", namespace = %set.namespace().unwrap_or_default(), object = %set.name_any());
            tracing::Instrument::instrument(reconcile(set, ctx, apps), span).await
        }
    })
    .await;
}

/// What the cache of Applications keeps: what the rollout and `status.resources` read (spec,
/// labels, annotations, owners, sync, health, the last operation's phase and message), not the
/// per-object lists, which grow with what each Application applied, nor its history.
fn lighten(app: &mut Application) {
    app.metadata.managed_fields = None;
    if let Some(st) = app.status.as_mut() {
        st.resources = Vec::new();
        st.inventory = None;
        st.history = Vec::new();
        st.conditions = Vec::new();
        if let Some(op) = st.operation_state.as_mut() {
            op.sync_result = None;
        }
    }
}

/// Whether any generator of `set` (nested or not) is a clusters generator.
fn reads_clusters(set: &ApplicationSet) -> bool {
    serde_json::to_string(&set.spec.generators).is_ok_and(|s| s.contains("\"clusters\""))
}

/// One reconcile of an ApplicationSet.
pub async fn reconcile(
    set: Arc<ApplicationSet>,
    ctx: Arc<Context>,
    apps: Store<Application>,
) -> Result<Action, Error> {
    let mut session = Session::begin(&ctx, set.as_ref());
    let generation = set.meta().generation;
    let checked = match spec::check(&set) {
        Ok(c) => c,
        Err(e) => {
            let cs = &mut session.status.conditions;
            not_generated(cs, "ApplicationValidationError", &e, generation);
            return session.finish(Err(Failure::invalid(e)), None).await;
        }
    };
    let schedule = Schedule {
        interval: checked.interval.unwrap_or(RESYNC),
        retry: RETRY,
    };
    // The cache of Applications answers once it has listed; until then nothing is judged.
    if tokio::time::timeout(Duration::from_secs(30), apps.wait_until_ready())
        .await
        .is_err()
    {
        let f = Failure::new(
            Reason::ReconciliationFailed,
            "the Applications have not been listed yet (can skewer list them? see its log)",
        );
        return session.finish(Err(f), Some(schedule)).await;
    }
    let requested = session.requested;
    let outcome = work(&ctx, &set, &checked, &apps, requested, &mut session.status).await;
    session.finish(outcome, Some(schedule)).await
}

/// Argo CD's conditions when no parameters could be generated (`reason` says at which step).
fn not_generated(
    cs: &mut Vec<crate::api::Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    conditions::set(cs, ERROR_OCCURRED, true, reason, message, generation);
    conditions::set(
        cs,
        PARAMETERS_GENERATED,
        false,
        "ErrorOccurred",
        message,
        generation,
    );
}

/// Generate, render, make the Applications match, roll out, report.
async fn work(
    ctx: &Arc<Context>,
    set: &ApplicationSet,
    checked: &Checked,
    apps: &Store<Application>,
    requested: bool,
    status: &mut ApplicationSetStatus,
) -> Result<Done, Failure> {
    let generation = set.meta().generation;
    let ns = set.namespace().unwrap_or_default();
    let mut notes = BTreeSet::new();
    let clusters = registered(ctx, &ns).await;
    let generated = generate_all(ctx, &ns, checked, &clusters, requested, &mut notes).await;
    let sets = match generated {
        Ok(sets) => sets,
        Err(f) => {
            let cs = &mut status.conditions;
            not_generated(
                cs,
                "ApplicationParamsGenerationError",
                &f.message,
                generation,
            );
            conditions::set(
                cs,
                RESOURCES_UP_TO_DATE,
                false,
                "ErrorOccurred",
                "parameters were not generated: nothing was changed",
                generation,
            );
            return Err(f);
        }
    };
    conditions::set(
        &mut status.conditions,
        PARAMETERS_GENERATED,
        true,
        "ParametersGenerated",
        "Successfully generated parameters for all Applications",
        generation,
    );

    // Render every set; a set that does not render, or two that render one name, generate
    // nothing, and nothing is deleted while any does not.
    let mut errors: Vec<String> = Vec::new();
    let mut desired: Vec<Application> = Vec::new();
    for (base, params) in &sets {
        match spec::application(set, checked, base, params) {
            Ok(app) => desired.push(app),
            Err(e) => errors.push(e),
        }
    }
    let names: Vec<String> = desired.iter().map(|a| a.name_any()).collect();
    let twice = spec::duplicates(&names);
    if !twice.is_empty() {
        for (name, n) in &twice {
            errors.push(format!(
                "{n} parameter sets generate Application '{name}' (make the template's name unique, e.g. with {{{{name}}}} or {{{{path.basename}}}}); none of them is applied"
            ));
        }
        desired.retain(|a| !twice.contains_key(a.name_any().as_str()));
    }
    // Destinations this namespace may not deploy to.
    desired.retain(|app| match refused(app, &clusters) {
        Some(why) => {
            notes.insert(format!(
                "Application {} not generated: {why}",
                app.name_any()
            ));
            false
        }
        None => true,
    });

    let existing: BTreeMap<String, Arc<Application>> = apps
        .state()
        .into_iter()
        .filter(|a| a.namespace().as_deref() == Some(ns.as_str()))
        .map(|a| (a.name_any(), a))
        .collect();
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &ns);
    let (mut created, mut updated, mut deleted) = (0, 0, 0);
    let mut desired_names = BTreeSet::new();
    for app in &desired {
        let name = app.name_any();
        desired_names.insert(name.clone());
        let digest = digest_of(app);
        // The cache holds generated Applications only: one it lacks may still exist, made by
        // hand (or before the label), and is read before anything is written.
        let found = match existing.get(&name) {
            Some(e) => Some(e.clone()),
            None => match api.get_opt(&name).await {
                Ok(found) => found.map(Arc::new),
                Err(e) => {
                    errors.push(format!("reading Application '{name}': {e}"));
                    continue;
                }
            },
        };
        let write = match &found {
            Some(e) if !spec::owned_by(e, set) => {
                errors.push(format!(
                    "Application '{name}' exists and was not generated by this ApplicationSet; it is left alone"
                ));
                continue;
            }
            Some(e) => {
                checked.policy.update
                    && (e.annotations().get(DIGEST) != Some(&digest) || e.spec != app.spec)
            }
            None => true,
        };
        if !write {
            continue;
        }
        let mut app = app.clone();
        app.annotations_mut().insert(DIGEST.into(), digest);
        let params = PatchParams::apply(APPSET_FIELD_MANAGER).force();
        match api.patch(&name, &params, &Patch::Apply(&app)).await {
            Ok(_) if found.is_some() => {
                info!(application = %name, "updated");
                updated += 1;
            }
            Ok(_) => {
                info!(application = %name, "created");
                created += 1;
            }
            Err(e) => errors.push(format!("Application '{name}': {e}")),
        }
    }
    let incomplete = !errors.is_empty();
    for (name, app) in &existing {
        if desired_names.contains(name) || !spec::owned_by(app, set) {
            continue;
        }
        if !checked.policy.delete {
            notes.insert(format!(
                "Application {name} is no longer generated and is kept (applicationsSync: {})",
                if checked.policy.update {
                    "create-update"
                } else {
                    "create-only"
                }
            ));
            continue;
        }
        if incomplete {
            notes.insert(format!(
                "Application {name} is no longer generated; not deleted while other parameter sets fail"
            ));
            continue;
        }
        match delete(&api, app, checked.preserve).await {
            Ok(()) => {
                info!(application = %name, "deleted: no longer generated");
                deleted += 1;
            }
            Err(e) => errors.push(format!("deleting Application '{name}': {e}")),
        }
    }
    if created + updated + deleted > 0 {
        let note = format!("{created} Applications created, {updated} updated, {deleted} deleted");
        ctx.event(set, false, Reason::ReconciliationSucceeded, note)
            .await;
    }

    // What the owned Applications say now.
    let owned: Vec<Arc<Application>> = existing
        .values()
        .filter(|a| spec::owned_by(a, set) && desired_names.contains(&a.name_any()))
        .cloned()
        .collect();
    status.resources = owned.iter().map(|a| resource(a)).collect();
    let mut failure = None;
    match &checked.steps {
        Some(steps) => {
            let states: Vec<rollout::App> = owned.iter().map(|a| rollout_state(a)).collect();
            let plan = rollout::plan(steps, &states);
            for action in &plan.actions {
                if let Err(e) = ask(&api, action).await {
                    errors.push(e);
                }
            }
            status.application_status = entries(&plan, &status.application_status);
            let cs = &mut status.conditions;
            match (&plan.failed, &plan.progressing) {
                (Some(failed), _) => {
                    conditions::set(
                        cs,
                        ROLLOUT_PROGRESSING,
                        false,
                        "SyncApplicationError",
                        failed,
                        generation,
                    );
                    failure = Some(Failure::new(Reason::Degraded, failed.clone()));
                }
                (None, Some(why)) => conditions::set(
                    cs,
                    ROLLOUT_PROGRESSING,
                    true,
                    "ApplicationSetModified",
                    &format!("RollingSync in progress: {why}"),
                    generation,
                ),
                (None, None) => conditions::set(
                    cs,
                    ROLLOUT_PROGRESSING,
                    false,
                    "ApplicationSetRolloutComplete",
                    "every step is Synced and Healthy",
                    generation,
                ),
            }
        }
        None => {
            status.application_status.clear();
            conditions::remove(&mut status.conditions, ROLLOUT_PROGRESSING);
        }
    }

    let mut said: Vec<String> = errors.clone();
    said.extend(notes.iter().cloned());
    let cs = &mut status.conditions;
    if errors.is_empty() {
        conditions::set(
            cs,
            ERROR_OCCURRED,
            false,
            "ApplicationSetUpToDate",
            "Successfully generated parameters for all Applications",
            generation,
        );
        conditions::set(
            cs,
            RESOURCES_UP_TO_DATE,
            true,
            "ApplicationSetUpToDate",
            "ApplicationSet up to date",
            generation,
        );
    } else {
        let message = said.join("; ");
        conditions::set(
            cs,
            ERROR_OCCURRED,
            true,
            "ApplicationGenerationFromParamsError",
            &message,
            generation,
        );
        conditions::set(
            cs,
            RESOURCES_UP_TO_DATE,
            false,
            "ErrorOccurred",
            &message,
            generation,
        );
        return Err(Failure::new(Reason::ReconciliationFailed, message));
    }
    if let Some(f) = failure {
        return Err(f);
    }
    let mut message = format!("{} Applications generated", desired.len());
    for note in &notes {
        message.push_str("; ");
        message.push_str(note);
    }
    Ok(Done {
        reason: Reason::ReconciliationSucceeded,
        message,
        event: Reason::ReconciliationSucceeded,
        noop: created + updated + deleted == 0,
    })
}

/// Every generator's parameter sets, each with the template it renders (the ApplicationSet's,
/// with the generator's override), fetching the repositories git generators ask for.
async fn generate_all(
    ctx: &Arc<Context>,
    ns: &str,
    checked: &Checked,
    clusters: &[Cluster],
    requested: bool,
    notes: &mut BTreeSet<String>,
) -> Result<Vec<(Value, params::Params)>, Failure> {
    let mut inputs = Inputs {
        clusters: clusters.to_vec(),
        ..Inputs::default()
    };
    let invalid = |e: String| Failure::new(Reason::ReconciliationFailed, e);
    loop {
        notes.clear();
        inputs.parsed.set(0);
        let mut all = Vec::new();
        let mut need = None;
        for (i, g) in checked.generators.iter().enumerate() {
            match generate::generate(g, &inputs, &checked.renderer, notes) {
                Ok(sets) => {
                    let base = spec::overridden(&checked.template, g.template.as_ref());
                    all.extend(sets.into_iter().map(|p| (base.clone(), p)));
                }
                Err(GenError::Need(url, revision)) => {
                    need = Some((url, revision));
                    break;
                }
                Err(GenError::Invalid(e)) => {
                    return Err(invalid(format!("spec.generators[{i}]: {e}")));
                }
            }
            if all.len() > generate::MAX_SETS {
                return Err(invalid(format!(
                    "the generators make more than {} parameter sets",
                    generate::MAX_SETS
                )));
            }
        }
        let Some((url, revision)) = need else {
            return Ok(all);
        };
        if inputs.repos.len() >= MAX_REPOSITORIES {
            return Err(invalid(format!(
                "the generators read more than {MAX_REPOSITORIES} repositories"
            )));
        }
        let files = repository(ctx, ns, &url, &revision, checked, requested).await;
        inputs.repos.insert((url, revision), files);
    }
}

/// The files of `url` at `revision`, through the sources Applications share (one fetch for
/// every ApplicationSet and Application naming them, credentials from the namespace's
/// repository Secrets).
async fn repository(
    ctx: &Arc<Context>,
    ns: &str,
    url: &str,
    revision: &str,
    checked: &Checked,
    requested: bool,
) -> generate::Files {
    let wanted = Wanted {
        url: url.to_string(),
        target_revision: revision.to_string(),
    };
    let max_age = checked.interval.unwrap_or(spec::GIT_INTERVAL);
    let after = requested.then(jiff::Timestamp::now);
    let artifact = super::deploy::own_source::artifact(ctx, ns, &wanted, max_age, after)
        .await
        .map_err(|f| f.message)?;
    let files = crate::artifacts::files_under(&ctx.store, &artifact, "", true)
        .await
        .map_err(|f| f.message)?;
    Ok(Arc::new(files))
}

/// The clusters as the `clusters` generator sees them from namespace `ns`: the hub as
/// `in-cluster`, then each registered cluster, with why `ns` may not use it where it may not.
async fn registered(ctx: &Context, ns: &str) -> Vec<Cluster> {
    let mut out = vec![Cluster {
        name: generate::IN_CLUSTER_NAME.into(),
        server: generate::IN_CLUSTER_SERVER.into(),
        hub: true,
        ..Cluster::default()
    }];
    let all = match ctx.targets.registry.all().await {
        Ok(all) => all,
        Err(e) => {
            warn!(error = %e, "cluster Secrets not listed; generating without them");
            return out;
        }
    };
    for entry in all {
        match entry {
            Ok(r) => out.push(Cluster {
                name: r.name.clone(),
                server: r.server.clone(),
                project: r.project.clone(),
                labels: r.labels.clone(),
                annotations: r.annotations.clone(),
                hub: false,
                refused: (!r.allowed.allows(ns)).then(|| {
                    format!(
                        "cluster '{}' (Secret {}) does not allow namespace {ns} ({} is {})",
                        r.name,
                        r.secret,
                        crate::clusters::allowed::ANNOTATION,
                        r.allowed
                    )
                }),
            }),
            Err(e) => warn!(error = %e, "cluster Secret left out of clusters generators"),
        }
    }
    out
}

/// Why `app`'s namespace may not deploy where it points, if the cluster is registered and says
/// so (an unknown cluster is the Application's own error to report).
fn refused(app: &Application, clusters: &[Cluster]) -> Option<String> {
    let found = match super::application::request::destination(app).ok()? {
        Destination::Cluster(ClusterRef::Registered(name)) => {
            clusters.iter().find(|c| !c.hub && c.name == name)
        }
        Destination::Server(server) => {
            let wanted = server.trim_end_matches('/');
            clusters
                .iter()
                .find(|c| !c.hub && c.server.trim_end_matches('/') == wanted)
        }
        Destination::Cluster(_) => None,
    };
    found.and_then(|c| c.refused.clone())
}

/// A digest of what the ApplicationSet applies of `app`.
fn digest_of(app: &Application) -> String {
    let mut h = Sha256::new();
    h.update(
        serde_json::to_vec(&(
            &app.metadata.labels,
            &app.metadata.annotations,
            &app.metadata.finalizers,
            &app.spec,
        ))
        .unwrap_or_default(),
    );
    hex::encode(&h.finalize()[..16])
}

/// Deletes a generated Application; with `preserve`, marked first so that it prunes nothing.
async fn delete(api: &Api<Application>, app: &Application, preserve: bool) -> Result<(), String> {
    let name = app.name_any();
    if preserve && !app.annotations().contains_key(PRESERVE_RESOURCES) {
        let patch = json!({"metadata": {"annotations": {PRESERVE_RESOURCES: "true"}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| e.to_string())?;
    }
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Carries out one of the rollout's requests.
async fn ask(api: &Api<Application>, action: &rollout::Action) -> Result<(), String> {
    let (name, key, value) = match action {
        rollout::Action::Sync { app, value } => (app, SYNC_REQUESTED_AT, value),
        rollout::Action::Refresh { app, value } => (app, RECONCILE_REQUESTED_AT, value),
    };
    info!(application = %name, annotation = key, value = %value, "RollingSync");
    let patch = json!({"metadata": {"annotations": {key: value}}});
    api.patch(
        name,
        &PatchParams {
            field_manager: Some(ROLLOUT_FIELD_MANAGER.into()),
            ..PatchParams::default()
        },
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("asking Application '{name}' to sync: {e}"))
}

fn resource(app: &Application) -> ResourceStatus {
    let status = app.status.as_ref();
    ResourceStatus {
        group: Application::group(&()).into(),
        version: Application::version(&()).into(),
        kind: Application::kind(&()).into(),
        namespace: app.namespace().unwrap_or_default(),
        name: app.name_any(),
        status: status
            .and_then(|s| s.sync.as_ref())
            .map(|s| s.status.clone())
            .unwrap_or_default(),
        health: status.and_then(|s| s.health.clone()),
    }
}

fn rollout_state(app: &Application) -> rollout::App {
    let status = app.status.clone().unwrap_or_default();
    let source = app.spec.source.as_ref();
    let op = status.operation_state.as_ref();
    rollout::App {
        name: app.name_any(),
        labels: app.labels().clone(),
        sync: status
            .sync
            .as_ref()
            .map(|s| s.status.clone())
            .unwrap_or_default(),
        revision: status.sync.as_ref().and_then(|s| s.revision.clone()),
        health: status
            .health
            .as_ref()
            .map(|h| h.status.clone())
            .unwrap_or_default(),
        health_message: status
            .health
            .as_ref()
            .and_then(|h| h.message.clone())
            .unwrap_or_default(),
        source: (
            source.map(|s| s.repo_url.clone()).unwrap_or_default(),
            source
                .and_then(|s| s.target_revision.clone())
                .unwrap_or_default(),
        ),
        sync_requested: app.annotations().get(SYNC_REQUESTED_AT).cloned(),
        sync_handled: status.last_handled_sync_at.clone(),
        refresh_requested: app.annotations().get(RECONCILE_REQUESTED_AT).cloned(),
        phase: op.map(|o| o.phase.clone()).unwrap_or_default(),
        phase_message: op.map(|o| o.message.clone()).unwrap_or_default(),
    }
}

/// The plan's entries as status, keeping each one's transition time while its status holds.
fn entries(plan: &rollout::Plan, old: &[ApplicationStatusEntry]) -> Vec<ApplicationStatusEntry> {
    plan.entries
        .iter()
        .map(|e| {
            let before = old.iter().find(|o| o.application == e.application);
            let since = match before {
                Some(b) if b.status == e.status => b.last_transition_time.clone(),
                _ => Some(crate::api::conditions::now()),
            };
            ApplicationStatusEntry {
                application: e.application.clone(),
                status: e.status.into(),
                message: e.message.clone(),
                step: if e.step == 0 {
                    String::new()
                } else {
                    e.step.to_string()
                },
                last_transition_time: since,
                target_revisions: e.revision.iter().cloned().collect(),
            }
        })
        .collect()
}
