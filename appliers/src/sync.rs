//! The sync pipeline: one [`SyncRequest`] in, one [`SyncReport`] out. Every deploy kind
//! (Kustomization today, Application next), the CLI, tests and benchmarks drive it the same way.
//!
//! build (load + patch) → plan (resolve kinds, transform, order) → claim the objects (none may
//! belong to another owner) → widen the recorded inventory → apply stage by stage → prune →
//! health.
//!
//! The rules it keeps: nothing touches the cluster unless build and plan succeeded; nothing is
//! pruned unless every stage applied; the inventory is widened (and durably recorded by the
//! caller's [`SyncHooks::record`]) *before* anything is applied, and narrowed only after
//! pruning, or after a failed apply by what the server refused or never saw, so the inventory
//! a report hands back always covers every object that may carry the owner's labels, and no
//! more. The pipeline is generic over [`Cluster`], so these decisions are tested
//! against an in-memory cluster; [`Applier`] is the real one.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant as Clock;

use kube::api::PropagationPolicy;
use tokio::time::Instant;

use crate::apply::{Applier, ApplyError, ApplyOptions, Outcome, Partial, Plan};
use crate::health::HealthReport;
use crate::inventory::Inventory;
use crate::kustomize;
use crate::load::SourceFile;
use crate::message::summarize;
use crate::object::{Manifest, ObjectId};
use crate::order::stages;
use crate::patch::{PatchSpec, apply_patches};
use crate::prune::{PruneReport, Removal, prune};
use crate::scope::Scope;
use crate::secrets;
use crate::substitute::Vars;
use crate::transform::{Owner, Transform};
use crate::wait;

/// Everything one sync needs, decided by the caller before it starts.
#[derive(Debug)]
pub struct SyncRequest {
    /// The artifact's files (at least those under `path`).
    pub files: Vec<SourceFile>,
    /// The directory within the artifact to apply (`./apps`, `` for the root).
    pub path: String,
    pub patches: Vec<PatchSpec>,
    /// Field manager, owner labels, transforms, force, concurrency, waits; kept by the caller
    /// to heal drift with the same options.
    pub apply: Arc<ApplyOptions>,
    /// Delete objects that left the source, with this propagation; `None`: never prune.
    pub prune: Option<PropagationPolicy>,
    pub health: HealthChecks,
    /// When health checks give up.
    pub deadline: Instant,
    /// The inventory recorded by the last sync (what may exist with the owner's labels).
    pub previous: Inventory,
    /// Where on the cluster this sync may act; objects outside are refused before anything
    /// is sent, and never pruned.
    pub scope: Scope,
    /// Whether a build of no objects may prune everything applied before. Without it such a
    /// sync stops before anything is sent ([`SyncError::Empty`]): a commit that empties a
    /// path by mistake deletes nothing.
    pub allow_empty: bool,
    /// Flux's post-build substitution: these variables are substituted into the built objects
    /// before anything else reads them; `None`: no substitution.
    pub substitute: Option<Vars>,
    /// Flux's `namePrefix`, `nameSuffix`, `components` and `images`, written into the
    /// kustomization at `path` before the build.
    pub overlay: crate::kustomize::overlay::Overlay,
    /// Flux's SOPS decryption: files encrypted for these keys are decrypted before the build
    /// (objects and generator sources alike); `None`: an encrypted object is refused.
    pub decrypt: Option<Arc<crate::sops::Keys>>,
}

/// Which objects must be healthy for a sync to succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthChecks {
    None,
    /// Every object this sync applied.
    Applied,
    /// These objects (id and API version), applied by this sync or not.
    Objects(Vec<(ObjectId, String)>),
}

/// Where and why a sync stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncError {
    /// Loading or patching the manifests failed: nothing was sent.
    Build(String),
    /// The path renders no objects while the previous inventory holds `held`, and emptying
    /// was not allowed: nothing was sent or pruned.
    Empty { path: String, held: usize },
    /// An object could not be planned (unknown kind, defined twice): nothing was sent.
    Plan(ApplyError),
    /// The widened inventory could not be recorded: nothing was applied.
    Record(String),
    /// Objects failed to apply (the report's `applied` has what did); pruning did not run.
    Apply(Vec<ApplyError>),
    /// Objects outside the cluster's allowed namespaces (with why): nothing was applied.
    Scope(Vec<String>),
    /// Some stale objects could not be deleted (they stay in the inventory).
    Prune(Vec<(ObjectId, String)>),
    /// Not every checked object was healthy by the deadline.
    Unhealthy(HealthReport),
    /// Objects another owner applies (with who): nothing was applied.
    Conflict(Vec<(ObjectId, String)>),
}

impl SyncError {
    /// One line per object the error is about (every one: for logs). Its `Display` is bounded:
    /// it names the first few and counts the rest.
    pub fn details(&self) -> Vec<String> {
        match self {
            SyncError::Build(m) | SyncError::Record(m) => vec![m.clone()],
            SyncError::Empty { path, held } => vec![format!(
                "'{}' renders no objects, and pruning would delete all {held} applied before: nothing was pruned",
                if path.is_empty() { "." } else { path }
            )],
            SyncError::Scope(lines) => lines.clone(),
            SyncError::Plan(e) => vec![e.to_string()],
            SyncError::Apply(errs) => errs.iter().map(ToString::to_string).collect(),
            SyncError::Prune(failed) => failed
                .iter()
                .map(|(id, e)| format!("{}: {e}", id.display()))
                .collect(),
            SyncError::Unhealthy(report) => report.problems(),
            SyncError::Conflict(held) => held
                .iter()
                .map(|(id, holder)| {
                    format!(
                        "{} is applied by {holder} (annotate it {TAKEOVER}: enabled to take it over)",
                        id.display()
                    )
                })
                .collect(),
        }
    }
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let summary = summarize(&self.details());
        match self {
            SyncError::Record(_) => write!(f, "recording inventory: {summary}"),
            SyncError::Prune(_) => write!(f, "prune failed: {summary}"),
            _ => f.write_str(&summary),
        }
    }
}

/// What a sync did. `inventory` is what the caller must record whatever the outcome.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Covers every object that may carry the owner's labels after this sync.
    pub inventory: Inventory,
    /// Whether [`SyncHooks::record`] wrote a widened inventory during the sync.
    pub recorded: bool,
    /// Objects the plan held (the number sent to the server, skipped ones included).
    pub planned: usize,
    pub applied: Vec<Outcome>,
    pub pruned: Vec<ObjectId>,
    /// Stale objects deliberately left alone, with why.
    pub prune_skipped: Vec<(ObjectId, String)>,
    /// Planned objects not sent: applied before exactly so, and unchanged since.
    pub unchanged: usize,
    pub health: Option<HealthReport>,
    pub error: Option<SyncError>,
    /// Milliseconds spent in each step, for the log.
    pub phases: Phases,
}

impl SyncReport {
    pub fn result(&self) -> Result<(), &SyncError> {
        match &self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// What the pipeline asks of a cluster. [`Applier`] talks to a real one.
pub trait Cluster: Sync {
    fn plan(
        &self,
        manifests: Vec<Manifest>,
        opts: &ApplyOptions,
    ) -> impl Future<Output = Result<Plan, ApplyError>> + Send;
    /// Applies the plan, but for the objects in `skip` (applied before exactly so).
    fn apply(
        &self,
        plan: &Plan,
        opts: &ApplyOptions,
        skip: &BTreeSet<ObjectId>,
    ) -> impl Future<Output = Result<Vec<Outcome>, Partial>> + Send;
    fn prune(
        &self,
        stale: Vec<(ObjectId, String)>,
        opts: &ApplyOptions,
        propagation: PropagationPolicy,
    ) -> impl Future<Output = PruneReport> + Send;
    fn health(
        &self,
        objects: &[(ObjectId, String)],
        deadline: Instant,
    ) -> impl Future<Output = HealthReport> + Send;
}

impl Cluster for Applier {
    async fn plan(
        &self,
        manifests: Vec<Manifest>,
        opts: &ApplyOptions,
    ) -> Result<Plan, ApplyError> {
        Applier::plan(self, manifests, opts).await
    }

    async fn apply(
        &self,
        plan: &Plan,
        opts: &ApplyOptions,
        skip: &BTreeSet<ObjectId>,
    ) -> Result<Vec<Outcome>, Partial> {
        Applier::apply(self, plan, opts, skip).await
    }

    async fn prune(
        &self,
        stale: Vec<(ObjectId, String)>,
        opts: &ApplyOptions,
        propagation: PropagationPolicy,
    ) -> PruneReport {
        prune(
            self.resources(),
            stale,
            Removal::LeftSource,
            &opts.owner,
            propagation,
            opts.concurrency,
        )
        .await
    }

    async fn health(&self, objects: &[(ObjectId, String)], deadline: Instant) -> HealthReport {
        let remaining = deadline.saturating_duration_since(Instant::now());
        wait::healthy(self.resources(), objects, remaining).await
    }
}

/// Per-object annotation allowing a sync to take over an object another owner applies.
pub const TAKEOVER: &str = "skewer.dev/takeover";

/// What the caller does at the pipeline's turning points.
pub trait SyncHooks: Sync {
    /// Claims the planned objects for this owner, before anything is recorded or applied.
    /// Objects in `takeover` may be taken from another owner; any other object another owner
    /// holds is refused, with who holds it, and nothing is claimed.
    fn claim(
        &self,
        planned: &Inventory,
        takeover: &BTreeSet<ObjectId>,
    ) -> impl Future<Output = Result<(), Vec<(ObjectId, String)>>> + Send;
    /// Durably records `widened` (the previous inventory plus everything about to be applied)
    /// before anything is applied. An error stops the sync with nothing applied.
    fn record(&self, widened: &Inventory) -> impl Future<Output = Result<(), String>> + Send;
    /// The plan is about to be applied with `opts` (drift detection starts tracking it).
    /// Returns the planned objects that need no apply: applied before exactly as planned and
    /// unchanged since.
    fn applying(&self, plan: &Plan, opts: &Arc<ApplyOptions>) -> BTreeSet<ObjectId>;
    /// What each apply left (every object applied, or those applied before or beside a
    /// failure).
    fn applied(&self, outcomes: &[Outcome]);
}

/// Hooks for callers that keep no status and track no drift: benchmarks, one-shot applies.
pub struct Untracked;

impl SyncHooks for Untracked {
    async fn claim(
        &self,
        _: &Inventory,
        _: &BTreeSet<ObjectId>,
    ) -> Result<(), Vec<(ObjectId, String)>> {
        Ok(())
    }

    async fn record(&self, _: &Inventory) -> Result<(), String> {
        Ok(())
    }

    fn applying(&self, _: &Plan, _: &Arc<ApplyOptions>) -> BTreeSet<ObjectId> {
        BTreeSet::new()
    }

    fn applied(&self, _: &[Outcome]) {}
}

/// Runs one sync. Never panics on bad input: every failure is in the report.
pub async fn run(
    cluster: &impl Cluster,
    hooks: &impl SyncHooks,
    request: SyncRequest,
) -> SyncReport {
    let SyncRequest {
        files,
        path,
        patches,
        apply: opts,
        prune: propagation,
        health,
        deadline,
        previous,
        scope,
        allow_empty,
        substitute,
        decrypt,
        overlay,
    } = request;
    let mut report = SyncReport {
        inventory: previous.clone(),
        ..Default::default()
    };
    let mut phases = Phases::start();
    let fail = |mut report: SyncReport, phases: Phases, e: SyncError| {
        report.error = Some(e);
        report.phases = phases;
        report
    };

    let mut files = files;
    if let Err(e) = crate::kustomize::overlay::apply(&mut files, &path, &overlay) {
        return fail(report, phases, SyncError::Build(e.to_string()));
    }
    if let Some(keys) = &decrypt
        && let Err(e) = crate::sops::decrypt_files(&mut files, keys)
    {
        return fail(report, phases, SyncError::Build(e.to_string()));
    }
    let manifests = match build(&files, &path, &patches, substitute.as_ref()) {
        Ok(m) => m,
        Err(e) => return fail(report, phases, SyncError::Build(e)),
    };
    drop(files);
    phases.mark("build");
    if manifests.is_empty() && !allow_empty && propagation.is_some() && !previous.entries.is_empty()
    {
        let held = previous.entries.len();
        return fail(report, phases, SyncError::Empty { path, held });
    }

    let plan = match cluster.plan(manifests, &opts).await {
        Ok(p) => p,
        Err(e) => return fail(report, phases, SyncError::Plan(e)),
    };
    report.planned = plan.len();
    phases.mark("plan");
    let outside: Vec<String> = plan
        .inventory
        .entries
        .keys()
        .filter_map(|id| Some(format!("{}: {}", id.display(), scope.refuses(id)?)))
        .collect();
    if !outside.is_empty() {
        return fail(report, phases, SyncError::Scope(outside));
    }

    let takeover: BTreeSet<ObjectId> = plan
        .stages
        .iter()
        .flatten()
        .filter(|p| p.manifest.annotation(TAKEOVER) == Some("enabled"))
        .map(|p| p.manifest.id())
        .collect();
    if let Err(held) = hooks.claim(&plan.inventory, &takeover).await {
        return fail(report, phases, SyncError::Conflict(held));
    }

    let mut widened = previous.clone();
    widened.extend(plan.inventory.entries.clone());
    if widened != previous {
        if let Err(e) = hooks.record(&widened).await {
            return fail(report, phases, SyncError::Record(e));
        }
        report.recorded = true;
    }
    report.inventory = widened.clone();
    phases.mark("inventory");

    let unchanged = hooks.applying(&plan, &opts);
    report.unchanged = unchanged.len();
    match cluster.apply(&plan, &opts, &unchanged).await {
        Ok(outcomes) => {
            hooks.applied(&outcomes);
            report.applied = outcomes;
        }
        Err(partial) => {
            hooks.applied(&partial.applied);
            report.inventory = written(&previous, &plan.inventory, &partial);
            report.applied = partial.applied;
            return fail(report, phases, SyncError::Apply(partial.errors));
        }
    }
    phases.mark("apply");

    // Prune what left the source; whatever could not be deleted stays in the inventory.
    report.inventory = plan.inventory.clone();
    if let Some(propagation) = propagation {
        let (stale, outside): (Vec<_>, Vec<_>) = widened
            .stale(&plan.inventory)
            .into_iter()
            .partition(|(id, _)| scope.refuses(id).is_none());
        for (id, version) in outside {
            // Not ours to delete any more: kept, and said why.
            let why = scope.refuses(&id).unwrap_or_default();
            report.inventory.entries.insert(id.clone(), version);
            report.prune_skipped.push((id, why));
        }
        if !stale.is_empty() {
            let pruned = cluster.prune(stale, &opts, propagation).await;
            report.pruned = pruned.deleted;
            report.prune_skipped = pruned.skipped;
            let mut failed = Vec::new();
            for (id, version, error) in pruned.failed {
                report.inventory.entries.insert(id.clone(), version);
                failed.push((id, error));
            }
            phases.mark("prune");
            if !failed.is_empty() {
                return fail(report, phases, SyncError::Prune(failed));
            }
        }
    }

    let checks = match health {
        HealthChecks::None => Vec::new(),
        HealthChecks::Applied => plan
            .inventory
            .entries
            .iter()
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect(),
        HealthChecks::Objects(objects) => objects,
    };
    if !checks.is_empty() {
        let observed = cluster.health(&checks, deadline).await;
        phases.mark("health");
        let healthy = observed.is_healthy();
        report.health = Some(observed.clone());
        if !healthy {
            return fail(report, phases, SyncError::Unhealthy(observed));
        }
    }
    report.phases = phases;
    report
}

/// After an apply that failed part-way: what may carry the owner's labels now. That is the
/// previous inventory, what applied, and what failed in a way that may have written (no
/// answer, a server error); not what the server refused, nor what was never sent. A claim
/// follows the inventory, so an object a tenant may not write (Forbidden) is not held by it
/// afterwards, and never blocks the owner who may.
fn written(previous: &Inventory, planned: &Inventory, partial: &Partial) -> Inventory {
    let maybe = partial.applied.iter().map(|o| &o.id).chain(
        partial
            .errors
            .iter()
            .filter(|e| !e.refused)
            .filter_map(|e| e.id.as_deref()),
    );
    let mut kept = previous.clone();
    for id in maybe {
        if let Some(version) = planned.entries.get(id) {
            kept.entries.insert(id.clone(), version.clone());
        }
    }
    kept
}

/// Renders the manifests of `path` (a kustomization built, or the files under it), applies the
/// patches, and prepares Secrets (values checked,
/// `stringData` moved into `data`): pure, nothing is sent.
pub fn build(
    files: &[SourceFile],
    path: &str,
    patches: &[PatchSpec],
    substitute: Option<&Vars>,
) -> Result<Vec<Manifest>, String> {
    let mut manifests = kustomize::render(files, path).map_err(|e| e.to_string())?;
    apply_patches(&mut manifests, patches).map_err(|e| e.to_string())?;
    if let Some(vars) = substitute {
        crate::substitute::apply(&mut manifests, vars)?;
    }
    for m in &mut manifests {
        if crate::sops::is_encrypted(&m.object) {
            return Err(format!(
                "{} ({}): encrypted with SOPS; decrypt it with spec.decryption (provider: sops, secretRef: a Secret of *.agekey or *.asc keys)",
                m.display(),
                m.origin
            ));
        }
        secrets::prepare(m).map_err(|e| format!("{} ({}): {e}", m.display(), m.origin))?;
    }
    Ok(manifests)
}

/// What a sync would apply, worked out offline: built, patched, with `transform` and the
/// owner's labels, defaulted to the `default` namespace, in apply order. Whether a kind is
/// namespaced comes from Kubernetes' schema and the CRDs in the set (unknown kinds are taken as
/// namespaced), not from a cluster; old-server work-arounds are not applied.
pub fn preview(
    files: &[SourceFile],
    path: &str,
    patches: &[PatchSpec],
    substitute: Option<&Vars>,
    transform: &Transform,
    owner: Option<&Owner>,
) -> Result<Vec<Manifest>, SyncError> {
    let mut manifests = build(files, path, patches, substitute).map_err(SyncError::Build)?;
    let crds: Vec<Manifest> = manifests
        .iter()
        .filter(|m| m.kind() == "CustomResourceDefinition")
        .cloned()
        .collect();
    for m in &mut manifests {
        let (group, _) = m.group_version();
        let defined = crds.iter().find(|c| {
            c.object["spec"]["group"] == group && c.object["spec"]["names"]["kind"] == m.kind()
        });
        let namespaced = match defined {
            Some(crd) => crd.object["spec"]["scope"] != "Cluster",
            None => !kustomize::smp::is_cluster_scoped(m.api_version(), m.kind()),
        };
        transform.apply(m, namespaced, owner);
        if namespaced && m.namespace().is_empty() {
            m.object["metadata"]["namespace"] = serde_json::Value::String("default".into());
        }
    }
    Ok(stages(manifests)
        .into_iter()
        .flat_map(|s| s.manifests)
        .collect())
}

/// Milliseconds spent in each step of a sync.
#[derive(Debug)]
pub struct Phases {
    last: Clock,
    spent: Vec<(&'static str, u128)>,
}

impl Default for Phases {
    fn default() -> Self {
        Self::start()
    }
}

impl Phases {
    pub fn start() -> Self {
        Self {
            last: Clock::now(),
            spent: Vec::new(),
        }
    }

    pub fn mark(&mut self, phase: &'static str) {
        let now = Clock::now();
        self.spent
            .push((phase, now.saturating_duration_since(self.last).as_millis()));
        self.last = now;
    }
}

impl fmt::Display for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .spent
            .iter()
            .map(|(p, ms)| format!("{p}={ms}ms"))
            .collect();
        f.write_str(&parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Mutex;
    use std::time::Duration;

    use kube::api::{ApiResource, GroupVersionKind};

    use super::*;
    use crate::apply::{Action, Planned};
    use crate::drift::Seen;
    use crate::health::{Health, Observed};
    use crate::object::configmap_id as id;
    use crate::resources::Resolved;

    /// An in-memory cluster: objects by id, and the failures a test wants.
    #[derive(Default)]
    struct Fake {
        objects: Mutex<BTreeSet<ObjectId>>,
        /// Objects whose apply fails, with no word on whether anything was written.
        refuse: BTreeSet<String>,
        /// Objects whose apply the server refuses as Forbidden (nothing written).
        forbid: BTreeSet<String>,
        /// Objects whose deletion fails.
        undeletable: BTreeSet<String>,
        unhealthy: BTreeMap<String, Observed>,
        /// What happened, in order.
        log: Mutex<Vec<String>>,
    }

    impl Fake {
        fn log(&self, line: String) {
            self.log.lock().unwrap().push(line);
        }

        fn lines(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }

        fn has(&self, name: &str) -> bool {
            self.objects
                .lock()
                .unwrap()
                .iter()
                .any(|id| id.name == name)
        }
    }

    impl Cluster for Fake {
        async fn plan(
            &self,
            manifests: Vec<Manifest>,
            opts: &ApplyOptions,
        ) -> Result<Plan, ApplyError> {
            let mut out = Vec::new();
            for stage in stages(manifests) {
                let mut planned = Vec::new();
                for mut m in stage.manifests {
                    if m.kind() == "Unknown" {
                        return Err(ApplyError::new(&m, "no such kind"));
                    }
                    let (group, version) = m.group_version();
                    let gvk = GroupVersionKind::gvk(group, version, m.kind());
                    let namespaced = m.kind() != "Namespace";
                    opts.transform.apply(&mut m, namespaced, Some(&opts.owner));
                    planned.push(Planned {
                        manifest: m,
                        resource: Resolved {
                            resource: ApiResource::from_gvk(&gvk),
                            namespaced,
                        },
                    });
                }
                out.push(planned);
            }
            let inventory = Inventory::from_manifests(out.iter().flatten().map(|p| &p.manifest));
            Ok(Plan {
                stages: out,
                inventory,
            })
        }

        async fn apply(
            &self,
            plan: &Plan,
            _: &ApplyOptions,
            _: &BTreeSet<ObjectId>,
        ) -> Result<Vec<Outcome>, Partial> {
            let mut outcomes = Vec::new();
            for stage in &plan.stages {
                let mut errors = Vec::new();
                for p in stage {
                    let m = &p.manifest;
                    if self.refuse.contains(m.name()) {
                        errors.push(ApplyError::new(m, "refused"));
                        continue;
                    }
                    if self.forbid.contains(m.name()) {
                        errors.push(ApplyError {
                            forbidden: true,
                            refused: true,
                            ..ApplyError::new(m, "forbidden")
                        });
                        continue;
                    }
                    self.log(format!("apply {}", m.name()));
                    self.objects.lock().unwrap().insert(m.id());
                    outcomes.push(Outcome {
                        id: m.id(),
                        action: Action::Applied,
                        seen: Some(Seen {
                            fields: Some(1),
                            generation: Some(1),
                        }),
                    });
                }
                if !errors.is_empty() {
                    return Err(Partial {
                        applied: outcomes,
                        errors,
                    });
                }
            }
            Ok(outcomes)
        }

        async fn prune(
            &self,
            stale: Vec<(ObjectId, String)>,
            _: &ApplyOptions,
            _: PropagationPolicy,
        ) -> PruneReport {
            let mut report = PruneReport::default();
            for (id, v) in stale {
                if self.undeletable.contains(&id.name) {
                    report.failed.push((id, v, "forbidden".into()));
                } else {
                    self.log(format!("delete {}", id.name));
                    self.objects.lock().unwrap().remove(&id);
                    report.deleted.push(id);
                }
            }
            report
        }

        async fn health(&self, objects: &[(ObjectId, String)], _: Instant) -> HealthReport {
            HealthReport {
                objects: objects
                    .iter()
                    .map(|(id, _)| {
                        let o = self
                            .unhealthy
                            .get(&id.name)
                            .cloned()
                            .unwrap_or(Observed::Judged(Health::Current));
                        (id.clone(), o)
                    })
                    .collect(),
            }
        }
    }

    /// Hooks that log what they were told, and can refuse to record.
    #[derive(Default)]
    struct Hooks {
        /// Objects another owner holds.
        held: BTreeMap<ObjectId, String>,
        fail_record: bool,
        recorded: Mutex<Vec<Inventory>>,
        /// Names of the objects `applied` was told of.
        applied: Mutex<Vec<String>>,
        fake: Option<Arc<Fake>>,
    }

    impl SyncHooks for Hooks {
        async fn claim(
            &self,
            planned: &Inventory,
            takeover: &BTreeSet<ObjectId>,
        ) -> Result<(), Vec<(ObjectId, String)>> {
            let held: Vec<(ObjectId, String)> = planned
                .entries
                .keys()
                .filter(|id| !takeover.contains(*id))
                .filter_map(|id| Some((id.clone(), self.held.get(id)?.clone())))
                .collect();
            if held.is_empty() { Ok(()) } else { Err(held) }
        }

        async fn record(&self, widened: &Inventory) -> Result<(), String> {
            if let Some(f) = &self.fake {
                f.log(format!("record {}", names(widened).join(",")));
            }
            if self.fail_record {
                return Err("the API server is unavailable".into());
            }
            self.recorded.lock().unwrap().push(widened.clone());
            Ok(())
        }

        fn applying(&self, _: &Plan, _: &Arc<ApplyOptions>) -> BTreeSet<ObjectId> {
            BTreeSet::new()
        }

        fn applied(&self, outcomes: &[Outcome]) {
            let mut applied = self.applied.lock().unwrap();
            applied.extend(outcomes.iter().map(|o| o.id.name.clone()));
        }
    }

    fn names(inv: &Inventory) -> Vec<String> {
        inv.entries.keys().map(|id| id.name.clone()).collect()
    }

    fn cm(name: &str) -> String {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: ns}}\n")
    }

    fn inventory(names: &[&str]) -> Inventory {
        Inventory {
            entries: names.iter().map(|n| (id(n), "v1".to_string())).collect(),
        }
    }

    fn request(files: &[(&str, String)], previous: &[&str]) -> SyncRequest {
        SyncRequest {
            files: files
                .iter()
                .map(|(p, d)| SourceFile {
                    path: p.to_string(),
                    data: d.clone().into_bytes(),
                })
                .collect(),
            path: String::new(),
            patches: Vec::new(),
            apply: Arc::new(ApplyOptions {
                field_manager: "skewer".into(),
                owner: Owner {
                    name: "app".into(),
                    namespace: "ns".into(),
                },
                transform: Transform::default(),
                force: false,
                concurrency: 4,
                wait_timeout: Duration::from_secs(1),
            }),
            prune: Some(PropagationPolicy::Background),
            health: HealthChecks::None,
            deadline: Instant::now() + Duration::from_secs(1),
            previous: inventory(previous),
            scope: Scope::default(),
            allow_empty: false,
            substitute: None,
            decrypt: None,
            overlay: Default::default(),
        }
    }

    fn configmaps() -> crate::patch::Selector {
        crate::patch::Selector {
            kind: Some("ConfigMap".into()),
            ..Default::default()
        }
    }

    fn fake() -> Arc<Fake> {
        Arc::new(Fake::default())
    }

    fn hooks(fake: &Arc<Fake>) -> Hooks {
        Hooks {
            fake: Some(fake.clone()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_inventory_is_widened_and_recorded_before_anything_is_applied() {
        let f = fake();
        let req = request(&[("b.yaml", cm("b"))], &["a"]);
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert_eq!(report.result(), Ok(()));
        assert_eq!(f.lines(), ["record a,b", "apply b", "delete a"]);
        assert!(report.recorded);
        assert_eq!(names(&report.inventory), ["b"]);
        assert_eq!(report.pruned, [id("a")]);
    }

    #[tokio::test]
    async fn an_inventory_that_does_not_grow_is_not_written() {
        let f = fake();
        let req = request(&[("a.yaml", cm("a"))], &["a", "b"]);
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert_eq!(f.lines(), ["apply a", "delete b"]);
        assert!(!report.recorded);
        assert_eq!(names(&report.inventory), ["a"]);
    }

    #[tokio::test]
    async fn a_broken_source_touches_nothing_and_keeps_the_inventory() {
        for files in [
            vec![("a.yaml", "kind: [unclosed".to_string())],
            vec![(
                "a.yaml",
                "apiVersion: x/v1\nkind: Unknown\nmetadata: {name: u}\n".to_string(),
            )],
        ] {
            let f = fake();
            let report = run(f.as_ref(), &hooks(&f), request(&files, &["a", "b"])).await;
            assert!(
                matches!(report.error, Some(SyncError::Build(_) | SyncError::Plan(_))),
                "{:?}",
                report.error
            );
            assert!(f.lines().is_empty(), "nothing recorded, applied or pruned");
            assert_eq!(names(&report.inventory), ["a", "b"]);
        }
    }

    #[tokio::test]
    async fn an_emptied_path_prunes_nothing_unless_allowed() {
        let empty = [("README.md", "no manifests here".to_string())];
        let f = fake();
        let report = run(f.as_ref(), &hooks(&f), request(&empty, &["a", "b", "c"])).await;
        assert_eq!(
            report.error.as_ref().map(ToString::to_string),
            Some("'.' renders no objects, and pruning would delete all 3 applied before: nothing was pruned".into())
        );
        assert!(f.lines().is_empty(), "nothing recorded, applied or pruned");
        assert_eq!(names(&report.inventory), ["a", "b", "c"]);

        // Nothing held before, or no pruning: an empty path is just empty.
        for (previous, prune) in [(&[][..], true), (&["a"][..], false)] {
            let f = fake();
            let mut r = request(&empty, previous);
            if !prune {
                r.prune = None;
            }
            let report = run(f.as_ref(), &hooks(&f), r).await;
            assert!(report.error.is_none(), "{:?}", report.error);
        }

        // Allowed: everything goes.
        let f = fake();
        let mut r = request(&empty, &["a", "b", "c"]);
        r.allow_empty = true;
        let report = run(f.as_ref(), &hooks(&f), r).await;
        assert!(report.error.is_none(), "{:?}", report.error);
        assert_eq!(report.pruned.len(), 3);
        assert!(report.inventory.entries.is_empty());
    }

    #[tokio::test]
    async fn an_unrecorded_inventory_applies_nothing() {
        let f = fake();
        let h = Hooks {
            fail_record: true,
            ..hooks(&f)
        };
        let report = run(f.as_ref(), &h, request(&[("b.yaml", cm("b"))], &["a"])).await;
        assert_eq!(f.lines(), ["record a,b"]);
        assert_eq!(
            report.error.map(|e| e.to_string()),
            Some("recording inventory: the API server is unavailable".into())
        );
        assert_eq!(names(&report.inventory), ["a"], "what the server still has");
    }

    #[tokio::test]
    async fn a_failed_stage_prunes_nothing_and_keeps_the_widened_inventory() {
        let mut f = Fake::default();
        f.refuse.insert("web".into());
        let f = Arc::new(f);
        let files = [
            (
                "ns.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n".to_string(),
            ),
            ("web.yaml", cm("web")),
        ];
        let report = run(f.as_ref(), &hooks(&f), request(&files, &["old"])).await;
        assert_eq!(f.lines(), ["record ns,old,web", "apply ns"]);
        assert!(f.has("ns") && !f.has("web"));
        match &report.error {
            Some(SyncError::Apply(errs)) => assert_eq!(errs[0].object, "ConfigMap/ns/web"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            names(&report.inventory),
            ["ns", "old", "web"],
            "old was not pruned, web may exist"
        );
    }

    #[tokio::test]
    async fn what_the_server_refused_or_never_saw_leaves_the_inventory() {
        let mut f = Fake::default();
        f.forbid
            .extend(["squat".into(), "other".into(), "ns".into()]);
        let f = Arc::new(f);
        let files = [(
            "a.yaml",
            format!("{}---\n{}---\n{}", cm("squat"), cm("other"), cm("ok")),
        )];
        // `other` was applied by an earlier sync: it may still carry the labels.
        let report = run(f.as_ref(), &hooks(&f), request(&files, &["old", "other"])).await;
        assert_eq!(f.lines(), ["record ok,old,other,squat", "apply ok"]);
        assert!(matches!(report.error, Some(SyncError::Apply(_))));
        assert_eq!(
            names(&report.inventory),
            ["ok", "old", "other"],
            "squat was refused: it carries no labels of ours"
        );

        let f2 = Arc::new(Fake {
            forbid: f.forbid.clone(),
            ..Fake::default()
        });
        let files = [
            (
                "ns.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n".to_string(),
            ),
            ("later.yaml", cm("later")),
        ];
        let report = run(f2.as_ref(), &hooks(&f2), request(&files, &["old"])).await;
        assert_eq!(f2.lines(), ["record ns,later,old"]);
        assert_eq!(
            names(&report.inventory),
            ["old"],
            "ns was refused and later never sent"
        );
    }

    #[tokio::test]
    async fn objects_that_cannot_be_pruned_stay_in_the_inventory() {
        let mut f = Fake::default();
        f.undeletable.insert("stuck".into());
        let f = Arc::new(f);
        let req = request(&[("a.yaml", cm("a"))], &["a", "gone", "stuck"]);
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert_eq!(names(&report.inventory), ["a", "stuck"]);
        assert_eq!(report.pruned, [id("gone")]);
        assert_eq!(
            report.error.map(|e| e.to_string()),
            Some("prune failed: ConfigMap/ns/stuck: forbidden".into())
        );
    }

    #[tokio::test]
    async fn without_prune_stale_objects_are_left_and_forgotten() {
        let f = fake();
        let mut req = request(&[("a.yaml", cm("a"))], &["a", "b"]);
        req.prune = None;
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert_eq!(f.lines(), ["apply a"]);
        assert_eq!(names(&report.inventory), ["a"]);
    }

    #[tokio::test]
    async fn health_checks_every_applied_object_or_the_named_ones() {
        let mut f = Fake::default();
        f.unhealthy.insert(
            "web".into(),
            Observed::Judged(Health::InProgress("available replicas: 0/1".into())),
        );
        let f = Arc::new(f);
        let files = [("a.yaml", cm("a")), ("web.yaml", cm("web"))];

        let mut req = request(&files, &[]);
        req.health = HealthChecks::Applied;
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert_eq!(
            report.error.map(|e| e.to_string()),
            Some("ConfigMap/ns/web: in progress: available replicas: 0/1".into())
        );
        assert_eq!(
            names(&report.inventory),
            ["a", "web"],
            "applied all the same"
        );

        let mut req = request(&files, &["a", "web"]);
        req.health = HealthChecks::Objects(vec![(id("a"), "v1".into())]);
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert_eq!(report.result(), Ok(()));
        assert_eq!(report.health.map(|h| h.objects.len()), Some(1));

        let report = run(f.as_ref(), &hooks(&f), request(&files, &["a", "web"])).await;
        assert!(report.health.is_none(), "no checks asked for");
    }

    #[tokio::test]
    async fn an_object_another_owner_holds_is_refused_unless_taken_over() {
        let f = fake();
        let mut h = hooks(&f);
        h.held.insert(id("shared"), "Kustomization/ns/other".into());
        let files = [("a.yaml", cm("a")), ("shared.yaml", cm("shared"))];
        let report = run(f.as_ref(), &h, request(&files, &["old"])).await;
        assert_eq!(
            report.error.map(|e| e.to_string()),
            Some("ConfigMap/ns/shared is applied by Kustomization/ns/other (annotate it skewer.dev/takeover: enabled to take it over)".into())
        );
        assert!(f.lines().is_empty(), "nothing recorded, applied or pruned");
        assert_eq!(names(&report.inventory), ["old"]);

        let taken = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: ns\n  annotations: {skewer.dev/takeover: enabled}\n".to_string();
        let report = run(f.as_ref(), &h, request(&[("shared.yaml", taken)], &[])).await;
        assert_eq!(report.result(), Ok(()), "{:?}", report.error);
        assert!(f.has("shared"));
    }

    #[test]
    fn a_preview_is_what_would_be_applied() {
        let files: Vec<SourceFile> = [
            ("kustomization.yaml", "namePrefix: p-\nresources: [cm.yaml, ns.yaml, crd.yaml, w.yaml]\n".to_string()),
            ("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n".to_string()),
            ("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n".to_string()),
            ("crd.yaml", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: ws.example.com}\nspec: {group: example.com, scope: Cluster, names: {kind: W, plural: ws}}\n".to_string()),
            ("w.yaml", "apiVersion: example.com/v1\nkind: W\nmetadata: {name: w, namespace: x}\n".to_string()),
        ]
        .into_iter()
        .map(|(p, d)| SourceFile { path: p.into(), data: d.into_bytes() })
        .collect();
        let owner = Owner {
            name: "apps".into(),
            namespace: "flux".into(),
        };
        let transform = Transform {
            target_namespace: Some("team".into()),
            ..Default::default()
        };
        let got = preview(&files, "", &[], None, &transform, Some(&owner)).unwrap();
        let order: Vec<String> = got.iter().map(|m| m.display()).collect();
        assert_eq!(
            order,
            [
                "Namespace/team",
                "CustomResourceDefinition/ws.example.com",
                "ConfigMap/team/p-c",
                "W/p-w"
            ]
        );
        assert_eq!(
            got[2].object["metadata"]["labels"]["skewer.dev/name"],
            "apps"
        );
        let bare = preview(&files, "", &[], None, &Transform::default(), None).unwrap();
        assert_eq!(bare[2].object["metadata"]["namespace"], "default");
        assert!(bare[2].object["metadata"].get("labels").is_none());
    }

    #[tokio::test]
    async fn ten_thousand_failures_make_a_short_message() {
        let mut f = Fake::default();
        let files: Vec<(String, String)> = (0..10_000)
            .map(|i| {
                let name = format!("c{i:05}");
                f.refuse.insert(name.clone());
                (format!("{name}.yaml"), cm(&name))
            })
            .collect();
        let f = Arc::new(f);
        let files: Vec<(&str, String)> =
            files.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
        let report = run(f.as_ref(), &hooks(&f), request(&files, &[])).await;
        let error = report.error.expect("every apply refused");
        assert_eq!(error.details().len(), 10_000, "all of them for the log");
        let message = error.to_string();
        assert!(message.len() < 4096, "{} bytes", message.len());
        assert!(
            message.starts_with("10000 objects: ConfigMap/ns/c00000 (c00000.yaml#1): refused"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn objects_outside_the_scope_are_refused_before_anything_is_sent() {
        let f = fake();
        let mut req = request(
            &[
                ("a.yaml", cm("a")),
                (
                    "b.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: other}\n"
                        .to_string(),
                ),
            ],
            &["old"],
        );
        req.scope = Scope::new(["ns".to_string()].into(), false);
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert!(
            f.lines().is_empty(),
            "nothing recorded or applied: {:?}",
            f.lines()
        );
        assert_eq!(
            report.error.map(|e| e.to_string()).as_deref(),
            Some(
                "ConfigMap/other/b: namespace other is not allowed on this cluster (namespaces: ns)"
            )
        );
        assert_eq!(names(&report.inventory), ["old"]);
    }

    #[tokio::test]
    async fn stale_objects_outside_the_scope_are_kept_not_pruned() {
        let f = fake();
        let mut req = request(&[("a.yaml", cm("a"))], &[]);
        let outside = ObjectId {
            namespace: "other".into(),
            ..id("gone")
        };
        req.previous.entries.insert(outside.clone(), "v1".into());
        req.scope = Scope::new(["ns".to_string()].into(), false);
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert!(report.error.is_none(), "{:?}", report.error);
        assert!(!f.lines().iter().any(|l| l.starts_with("delete")));
        assert!(report.inventory.entries.contains_key(&outside));
        assert_eq!(report.prune_skipped.len(), 1);
    }

    #[tokio::test]
    async fn what_applied_beside_a_failure_is_reported_and_tracked() {
        let mut f = Fake::default();
        f.refuse.insert("bad".into());
        let f = Arc::new(f);
        let h = hooks(&f);
        let report = run(
            f.as_ref(),
            &h,
            request(&[("a.yaml", cm("good")), ("b.yaml", cm("bad"))], &["old"]),
        )
        .await;
        assert!(matches!(report.error, Some(SyncError::Apply(_))));
        let applied: Vec<&str> = report.applied.iter().map(|o| o.id.name.as_str()).collect();
        assert_eq!(applied, ["good"]);
        assert_eq!(
            *h.applied.lock().unwrap(),
            ["good"],
            "drift tracks what applied"
        );
        assert_eq!(
            names(&report.inventory),
            ["bad", "good", "old"],
            "nothing pruned"
        );
    }

    #[tokio::test]
    async fn patches_are_applied_before_planning() {
        let f = fake();
        let mut req = request(&[("a.yaml", cm("a"))], &[]);
        req.patches = vec![PatchSpec {
            patch: "[{op: add, path: /metadata/labels, value: {tier: web}}]".into(),
            target: Some(configmaps()),
            ..Default::default()
        }];
        let report = run(f.as_ref(), &hooks(&f), req).await;
        assert_eq!(report.result(), Ok(()));
        let mut bad = request(&[("a.yaml", cm("a"))], &["a"]);
        bad.patches = vec![PatchSpec {
            patch: "[{op: replace, path: /spec/nothing, value: 1}]".into(),
            target: Some(configmaps()),
            ..Default::default()
        }];
        let report = run(f.as_ref(), &hooks(&f), bad).await;
        assert!(matches!(report.error, Some(SyncError::Build(_))));
        assert_eq!(
            f.lines(),
            ["record a", "apply a"],
            "the bad patch sent nothing"
        );
    }
}
