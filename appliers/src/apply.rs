//! Server-side apply of a set of manifests, in stages (see [`crate::order`]), many requests in
//! flight within a stage. Plans first (resolve kinds, add metadata, normalise for old servers,
//! compute the inventory) so nothing is sent when anything in the set is wrong.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use serde_json::Value;
use thiserror::Error;

use crate::drift::Seen;
use crate::health::{Health, health};
use crate::inventory::Inventory;
use crate::object::{Manifest, ObjectId};
use crate::order::stages;
use crate::policy::{self, Ssa};
use crate::resources::{Resolved, Resources};
use crate::transform::{Owner, Transform};
use crate::{normalize, secrets, wait};

pub use crate::policy::{FORCE, SSA_POLICY};

#[derive(Debug, Clone)]
pub struct ApplyOptions {
    pub field_manager: String,
    pub owner: Owner,
    pub transform: Transform,
    /// Recreate any object whose immutable fields changed (the Kustomization's `force`).
    pub force: bool,
    /// Requests in flight within a stage.
    pub concurrency: usize,
    /// Bound on waits inside an apply (CRDs becoming established, recreated objects gone).
    pub wait_timeout: Duration,
}

/// Requests in flight within a stage unless said otherwise (`skewer run --concurrency`).
pub const DEFAULT_CONCURRENCY: usize = 16;

impl ApplyOptions {
    /// Applying `owner`'s objects as `field_manager`, with `transform`: no force,
    /// [`DEFAULT_CONCURRENCY`] requests in flight, waits of at most a minute.
    pub fn new(field_manager: &str, owner: Owner, transform: Transform) -> Self {
        Self {
            field_manager: field_manager.into(),
            owner,
            transform,
            force: false,
            concurrency: DEFAULT_CONCURRENCY,
            wait_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{object} ({origin}): {message}")]
pub struct ApplyError {
    /// The object, when the error is about one (not, say, a sync wave); boxed, as errors
    /// travel in `Result`s and should stay small.
    pub id: Option<Box<ObjectId>>,
    pub object: String,
    pub origin: String,
    pub message: String,
    /// The API server refused the request as Forbidden (403): the identity applying lacks the
    /// right. Other objects of the same stage may still be applied.
    pub forbidden: bool,
    /// The API server could not be reached (no answer at all, as opposed to a refusal).
    pub unreachable: bool,
    /// The API server refused the request (a 4xx status): nothing was written, so the object
    /// carries none of this sync's labels.
    pub refused: bool,
}

impl ApplyError {
    /// An error about `m`. A Secret's values are removed from the message, whatever quoted them.
    pub fn new(m: &Manifest, message: impl Into<String>) -> Self {
        Self {
            id: Some(Box::new(m.id())),
            object: m.display(),
            origin: m.origin.clone(),
            message: secrets::redact(m, &message.into()),
            forbidden: false,
            unreachable: false,
            refused: false,
        }
    }

    /// The API server's error `e` about `m`, with its message.
    fn api(m: &Manifest, e: &kube::Error) -> Self {
        Self {
            forbidden: matches!(e, kube::Error::Api(s) if s.code == 403),
            unreachable: matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_)),
            refused: matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code)),
            ..Self::new(m, api_message(e))
        }
    }
}

/// What an apply that did not apply everything left: the objects applied before (or beside)
/// the failures, and every failure.
#[derive(Debug, Clone, Default)]
pub struct Partial {
    pub applied: Vec<Outcome>,
    pub errors: Vec<ApplyError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Applied,
    Recreated,
    /// `skewer.dev/ssa: IfNotPresent` and the object exists, or `Ignore`.
    Skipped,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub id: ObjectId,
    pub action: Action,
    /// What the apply left, for drift detection; `None` when nothing was applied.
    pub seen: Option<Seen>,
}

/// What a server-side dry run of one object found (see [`Applier::dry_run`]).
#[derive(Debug, Clone)]
pub struct DryRun {
    pub live: Option<Value>,
    pub after: Option<Value>,
}

/// A planned object: the manifest ready to send and where to send it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub manifest: Manifest,
    pub resource: Resolved,
}

/// What will be applied, in order, and the inventory it makes.
#[derive(Debug)]
pub struct Plan {
    pub stages: Vec<Vec<Planned>>,
    pub inventory: Inventory,
}

impl Plan {
    pub fn len(&self) -> usize {
        self.stages.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct Applier {
    resources: Arc<Resources>,
    normalize: bool,
}

impl Applier {
    /// Builds an applier; asks the server its version to decide on old-server workarounds.
    pub async fn new(client: Client) -> Result<Self, kube::Error> {
        let info = client.apiserver_version().await?;
        let num = |s: &str| s.trim_end_matches('+').parse::<u32>().unwrap_or(u32::MAX);
        let old = normalize::needed(num(&info.major), num(&info.minor));
        Ok(Self {
            resources: Arc::new(Resources::new(client)),
            normalize: old,
        })
    }

    pub fn resources(&self) -> &Arc<Resources> {
        &self.resources
    }

    pub fn client(&self) -> &Client {
        self.resources.client()
    }

    /// Resolves, transforms and orders the manifests. Fails on the first object whose kind the
    /// server does not know.
    pub async fn plan(
        &self,
        manifests: Vec<Manifest>,
        opts: &ApplyOptions,
    ) -> Result<Plan, ApplyError> {
        let crds: Vec<Manifest> = manifests
            .iter()
            .filter(|m| m.kind() == "CustomResourceDefinition")
            .cloned()
            .collect();
        let crd_refs: Vec<&Manifest> = crds.iter().collect();
        let mut out = Vec::with_capacity(manifests.len());
        let mut seen = std::collections::HashSet::new();
        for stage in stages(manifests) {
            let mut planned = Vec::with_capacity(stage.manifests.len());
            for mut m in stage.manifests {
                let resource = self
                    .resources
                    .resolve(m.api_version(), m.kind(), &crd_refs)
                    .await
                    .map_err(|e| ApplyError::new(&m, e.to_string()))?;
                opts.transform
                    .apply(&mut m, resource.namespaced, Some(&opts.owner));
                if resource.namespaced && m.namespace().is_empty() {
                    m.object["metadata"]["namespace"] = Value::String("default".into());
                }
                if self.normalize {
                    normalize::normalize(&mut m.object);
                }
                if !seen.insert(m.id()) {
                    return Err(ApplyError::new(&m, "the source defines this object twice"));
                }
                planned.push(Planned {
                    manifest: m,
                    resource,
                });
            }
            out.push((stage.definitions, planned));
        }
        let inventory =
            Inventory::from_manifests(out.iter().flat_map(|(_, s)| s.iter().map(|p| &p.manifest)));
        Ok(Plan {
            stages: out.into_iter().map(|(_, s)| s).collect(),
            inventory,
        })
    }

    /// Applies a plan stage by stage. A stage with an error stops the stages after it, unless
    /// every error of the stage is Forbidden (the identity lacks that right; waiting would not
    /// give it): then the later stages are applied and the refusals reported at the end.
    pub async fn apply(
        &self,
        plan: &Plan,
        opts: &ApplyOptions,
        skip: &std::collections::BTreeSet<ObjectId>,
    ) -> Result<Vec<Outcome>, Partial> {
        let mut outcomes = Vec::with_capacity(plan.len());
        let mut refused = Vec::new();
        for (i, stage) in plan.stages.iter().enumerate() {
            let todo: Vec<usize> = (0..stage.len())
                .filter(|&j| skip.is_empty() || !skip.contains(&stage[j].manifest.id()))
                .collect();
            // Indices, not `&Planned`: a closure over borrowed items makes the future not
            // provably Send for every lifetime (rust-lang/rust#102211).
            let results: Vec<Result<Outcome, ApplyError>> = stream::iter(todo)
                .map(|i| self.apply_one(&stage[i], opts))
                .buffer_unordered(opts.concurrency.max(1))
                .collect()
                .await;
            let (ok, errs): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
            let errs: Vec<ApplyError> = errs.into_iter().filter_map(Result::err).collect();
            outcomes.extend(ok.into_iter().filter_map(Result::ok));
            let stop = errs.iter().any(|e| !e.forbidden);
            refused.extend(errs);
            if stop {
                break;
            }
            if let Err(e) = self.wait_for_crds(stage, &outcomes, opts).await {
                refused.push(e);
                break;
            }
            if let Err(e) = self.wait_for_wave(plan, i, opts).await {
                refused.push(e);
                break;
            }
        }
        if refused.is_empty() {
            Ok(outcomes)
        } else {
            Err(Partial {
                applied: outcomes,
                errors: refused,
            })
        }
    }

    /// After stage `i`, when the next stage is of a later sync wave: waits until every object
    /// of stage `i`'s wave is healthy, or fails at the apply deadline naming what is not.
    async fn wait_for_wave(
        &self,
        plan: &Plan,
        i: usize,
        opts: &ApplyOptions,
    ) -> Result<(), ApplyError> {
        let wave_of = |s: &[Planned]| s.first().map(|p| crate::order::wave(&p.manifest));
        let Some(this) = plan.stages.get(i).and_then(|s| wave_of(s)) else {
            return Ok(());
        };
        match plan.stages.get(i + 1).and_then(|s| wave_of(s)) {
            Some(next) if next != this => {}
            _ => return Ok(()),
        }
        let objects: Vec<(ObjectId, String)> = plan.stages[..=i]
            .iter()
            .flatten()
            .filter(|p| crate::order::wave(&p.manifest) == this)
            .map(|p| (p.manifest.id(), p.manifest.api_version().to_string()))
            .collect();
        let report = crate::wait::healthy(&self.resources, &objects, opts.wait_timeout).await;
        if report.is_healthy() {
            return Ok(());
        }
        Err(ApplyError {
            id: None,
            object: format!("sync wave {this}"),
            origin: String::new(),
            message: format!(
                "not healthy after {:?}, so later waves were not applied: {}",
                opts.wait_timeout,
                crate::message::summarize(&report.problems())
            ),
            forbidden: false,
            unreachable: false,
            refused: false,
        })
    }

    fn api(&self, p: &Planned) -> Api<DynamicObject> {
        p.resource
            .api(self.client().clone(), p.manifest.namespace())
    }

    /// Applies one planned object (also used to heal drift).
    pub async fn apply_one(&self, p: &Planned, opts: &ApplyOptions) -> Result<Outcome, ApplyError> {
        let m = &p.manifest;
        let api = self.api(p);
        let outcome = |action, obj: Option<&DynamicObject>| Outcome {
            id: m.id(),
            action,
            seen: obj.map(|o| Seen::of(&o.metadata, &opts.field_manager)),
        };
        match policy::ssa(|k| m.annotation(k)).map_err(|e| ApplyError::new(m, e))? {
            Ssa::Ignore => return Ok(outcome(Action::Skipped, None)),
            Ssa::IfNotPresent => {
                let exists = api
                    .get_metadata_opt(m.name())
                    .await
                    .map_err(|e| ApplyError::api(m, &e))?
                    .is_some();
                if exists {
                    return Ok(outcome(Action::Skipped, None));
                }
            }
            Ssa::Override => {}
        }
        let params = PatchParams::apply(&opts.field_manager).force();
        match api.patch(m.name(), &params, &Patch::Apply(&m.object)).await {
            Ok(obj) => Ok(outcome(Action::Applied, Some(&obj))),
            Err(e) if is_immutable(&e) => {
                let forced = opts.force || policy::forced(|k| m.annotation(k));
                if !forced {
                    return Err(ApplyError::new(
                        m,
                        format!(
                            "{} (annotate the object with {FORCE}: enabled to recreate it)",
                            api_message(&e)
                        ),
                    ));
                }
                let obj = self.recreate(&api, m, &params, opts.wait_timeout).await?;
                Ok(outcome(Action::Recreated, Some(&obj)))
            }
            Err(e) => Err(ApplyError::api(m, &e)),
        }
    }

    /// What applying `p` would do, asked of the server without changing anything (a
    /// server-side dry run with the same field manager): the live object, if any, and the
    /// object the apply would leave. `after` is `None` for a new object the server cannot judge
    /// yet (its namespace or its kind's CRD is only in the same source).
    pub async fn dry_run(&self, p: &Planned, opts: &ApplyOptions) -> Result<DryRun, ApplyError> {
        let m = &p.manifest;
        let api = self.api(p);
        // A 404 for the whole resource: its CRD is only in the same source.
        let live = match api.get_opt(m.name()).await {
            Ok(live) => live,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(ApplyError::api(m, &e)),
        };
        let mut params = PatchParams::apply(&opts.field_manager).force();
        params.dry_run = true;
        let after = match api.patch(m.name(), &params, &Patch::Apply(&m.object)).await {
            Ok(obj) => Some(obj),
            Err(kube::Error::Api(s)) if s.code == 404 && live.is_none() => None,
            Err(e) => return Err(ApplyError::api(m, &e)),
        };
        let value = |o: DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
        Ok(DryRun {
            live: live.map(value),
            after: after.map(value),
        })
    }

    async fn recreate(
        &self,
        api: &Api<DynamicObject>,
        m: &Manifest,
        params: &PatchParams,
        timeout: Duration,
    ) -> Result<DynamicObject, ApplyError> {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match api.delete(m.name(), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(ApplyError::new(
                    m,
                    format!("deleting to recreate: {}", api_message(&e)),
                ));
            }
        }
        wait::until_gone(api, m.name(), timeout)
            .await
            .map_err(|e| {
                ApplyError::new(m, format!("waiting for deletion before recreate: {e}"))
            })?;
        api.patch(m.name(), params, &Patch::Apply(&m.object))
            .await
            .map_err(|e| ApplyError::new(m, format!("recreating: {}", api_message(&e))))
    }

    /// Waits until the CRDs of `stage` that were applied (are in `applied`) are established.
    async fn wait_for_crds(
        &self,
        stage: &[Planned],
        applied: &[Outcome],
        opts: &ApplyOptions,
    ) -> Result<(), ApplyError> {
        let crds = stage
            .iter()
            .filter(|p| p.manifest.kind() == "CustomResourceDefinition");
        let crds: Vec<&Planned> = crds
            .filter(|p| {
                let id = p.manifest.id();
                applied.iter().rev().any(|o| o.id == id)
            })
            .collect();
        stream::iter(crds)
            .map(Ok)
            .try_for_each_concurrent(8, |p| async move {
                let api = self.api(p);
                wait::until(
                    &api,
                    p.manifest.name(),
                    opts.wait_timeout,
                    |obj| match health(obj) {
                        Health::Current => Ok(true),
                        Health::Failed(msg) => Err(msg),
                        Health::InProgress(_) => Ok(false),
                    },
                )
                .await
                .map_err(|e| ApplyError::new(&p.manifest, format!("CRD not established: {e}")))
            })
            .await
    }
}

/// The API server's message for an error (it names the object and the field).
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Whether the server refused a change to an immutable field.
pub fn is_immutable(e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else { return false };
    if s.code != 422 {
        return false;
    }
    let m = s.message.as_str();
    m.contains("field is immutable")
        || m.contains("may not change once set")
        || m.contains("Forbidden: updates to")
        || m.contains("cannot change")
        || m.contains("immutable")
}
