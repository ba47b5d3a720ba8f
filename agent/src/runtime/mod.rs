//! What every reconciler shares: the [`Context`], the controller wiring (which watch events
//! trigger a reconcile, how many run at once, panics contained), the one way a reconcile's
//! outcome is reported ([`Session`]), status writes, Events and retry backoff.

pub mod backoff;
pub mod outcome;
pub mod panics;
pub mod report;
pub mod status;
pub mod watch;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use skewer_appliers::message::bounded;
use skewer_sources::{GitFetcher, Store};
use tracing::warn;

pub use outcome::{Done, Failure, Reason};
pub use report::{Schedule, Session};
pub use status::Reconciled;

use crate::drift::Drift;
use crate::metrics::Metrics;
use crate::ownership::Ownership;
use crate::targets::Targets;

/// The API server refuses an Event whose note is longer than this (bytes).
pub const MAX_EVENT_NOTE: usize = 1024;
/// Condition messages are cut at this many bytes (the whole message is in the log).
pub const MAX_CONDITION_MESSAGE: usize = 4096;

/// Settings from the command line that reconcilers read.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Server-side apply requests in flight per reconcile.
    pub concurrency: usize,
    /// Re-apply everything this often even when nothing changed (`None`: never).
    pub full_sync: Option<Duration>,
    /// Reconciles of one kind running at once.
    pub max_concurrent_reconciles: u16,
    /// Where fetched sources and artifacts are kept (no source may read from it).
    pub data_dir: std::path::PathBuf,
    /// Whether GitRepositories may name local paths (`file://`).
    pub local_sources: bool,
    /// The ServiceAccount (of its own namespace) a Kustomization without
    /// `serviceAccountName` impersonates; `None`: skewer's own identity.
    pub default_service_account: Option<String>,
    /// Whether a Kustomization may name a source (or dependency) in another namespace.
    pub cross_namespace_refs: bool,
    /// Whether a Receiver may ask objects in another namespace than its own to reconcile.
    pub cross_namespace_receivers: bool,
    /// Where other controllers download artifacts (`http://<--storage-adv-addr>`), when
    /// skewer serves them.
    pub storage_url: Option<String>,
}

impl Settings {
    /// Settings for unit tests: a hub, no tenants, every reference allowed.
    #[cfg(test)]
    pub fn for_tests() -> Self {
        Settings {
            concurrency: 16,
            full_sync: None,
            max_concurrent_reconciles: 4,
            data_dir: "/data".into(),
            local_sources: true,
            default_service_account: None,
            cross_namespace_refs: true,
            cross_namespace_receivers: false,
            storage_url: None,
        }
    }
}

/// A spawned task that ends when this is dropped.
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What every reconciler shares.
pub struct Context {
    /// The hub, as skewer itself: reads and writes skewer's own objects.
    pub client: Client,
    /// Where objects are applied: (cluster, identity) → client, applier, drift watches.
    pub targets: Targets,
    pub store: Store,
    pub git: GitFetcher,
    recorder: Recorder,
    pub failures: backoff::Failures,
    pub drift: Drift,
    /// The sources Applications own, shared by those naming the same repository and revision.
    pub app_sources: crate::appsource::AppSources,
    /// Receivers by webhook path, for the webhook server.
    pub receivers: crate::webhook::Receivers,
    /// Which owner holds which object.
    pub ownership: Ownership,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
}

impl Context {
    /// A context on the hub: `client` is made from `hub` (skewer's own configuration, from
    /// which impersonating clients are derived); other clusters come from `registry`.
    pub async fn new(
        hub: kube::Config,
        client: Client,
        registry: Arc<crate::clusters::Registry>,
        data_dir: &std::path::Path,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, kube::Error> {
        let reporter = Reporter {
            controller: "skewer".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            targets: Targets::new(hub, client.clone(), registry).await?,
            client,
            store: Store::new(data_dir.join("artifacts")),
            git: GitFetcher::new(data_dir.join("git")),
            failures: backoff::Failures::default(),
            drift: Drift::default(),
            app_sources: Default::default(),
            receivers: Default::default(),
            ownership: Ownership::default(),
            metrics,
            settings,
        }))
    }

    /// Publishes a Kubernetes Event about `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: Reason,
        note: String,
    ) {
        self.event_about(&obj.object_ref(&()), warning, reason, note)
            .await;
    }

    /// Publishes a Kubernetes Event about the object `regarding` refers to.
    pub async fn event_about(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: Reason,
        note: String,
    ) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.as_str().into(),
            note: Some(bounded(&note, MAX_EVENT_NOTE)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, regarding).await {
            warn!(error = %e, "cannot publish event");
        }
    }
}

/// Errors that end a reconcile without a status (the status write itself failed).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("object has no namespace")]
    NoNamespace,
    #[error("finalizer: {0}")]
    Finalizer(String),
}

/// An `Api` over one namespace, or all of them.
pub fn scoped<K>(client: &Client, namespace: Option<&str>) -> kube::Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    }
}

/// A controller whose own watch triggers a reconcile only when the spec (generation), the
/// reconcile-request annotation, finalizers or deletion change: never on our own status
/// writes, which would otherwise echo back as a second full reconcile. Periodic work comes
/// from requeues, not from the watch.
pub fn controller<K: Reconciled>(api: kube::Api<K>) -> Controller<K> {
    let (reader, writer) = reflector::store();
    // The controller backs off its trigger streams itself (`run` sets `watch::Retry`).
    let trigger = watcher(api, watch::own_kinds())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(reconcile_inputs::<K>, Default::default());
    Controller::for_stream(trigger, reader)
}

fn reconcile_inputs<K: kube::Resource>(obj: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = obj.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut h);
    for key in [
        crate::api::RECONCILE_REQUESTED_AT,
        crate::api::SYNC_REQUESTED_AT,
    ] {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .hash(&mut h);
    }
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// Runs `controller` until shutdown: at most `max_concurrent_reconciles` at once, panics
/// contained to their object, a failed status write retried after a few seconds.
pub async fn run<K, F, Fut>(ctx: Arc<Context>, controller: Controller<K>, reconcile: F)
where
    K: Reconciled,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let config = kube::runtime::controller::Config::default()
        .concurrency(ctx.settings.max_concurrent_reconciles);
    controller
        .shutdown_on_signal()
        .with_config(config)
        .trigger_backoff(watch::Retry::default())
        .run(panics::guarded(reconcile), error_policy::<K>, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                warn!(kind = K::KIND, error = %e, "reconcile");
            }
        })
        .await;
}

/// A reconcile that ended without a status (its status write failed) is retried, backing off
/// from 5 s to 5 minutes while it keeps failing.
fn error_policy<K: Reconciled>(obj: Arc<K>, _: &Error, ctx: Arc<Context>) -> Action {
    let key = report::failure_key(obj.as_ref());
    let failures = ctx.failures.record(&key);
    Action::requeue(backoff::delay(
        Duration::from_secs(5),
        Duration::from_secs(300),
        failures,
    ))
}
