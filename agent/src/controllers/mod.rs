//! The reconcilers: each turns one kind of skewer object into calls to the `sources` and
//! `appliers` libraries, and their results back into status, events and requeues.

pub mod drift;
pub mod gitrepository;
pub mod kustomization;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use skewer_appliers::apply::Applier;
use skewer_sources::{GitFetcher, Store};
use tracing::warn;

/// What every reconciler shares.
pub struct Context {
    pub client: Client,
    pub applier: Applier,
    pub store: Store,
    pub git: GitFetcher,
    pub recorder: Recorder,
    /// Server-side apply requests in flight per Kustomization.
    pub concurrency: usize,
    pub failures: Failures,
    pub drift: drift::Drift,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Re-apply everything this often even when nothing changed (`None`: never).
    pub full_sync: Option<Duration>,
    /// Reconciles of one kind running at once.
    pub max_concurrent_reconciles: u16,
}

impl Context {
    pub async fn new(
        client: Client,
        data_dir: &std::path::Path,
        concurrency: usize,
        full_sync: Option<Duration>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Arc<Self>, kube::Error> {
        let applier = Applier::new(client.clone()).await?;
        let reporter = Reporter {
            controller: "skewer".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            applier,
            store: Store::new(data_dir.join("artifacts")),
            git: GitFetcher::new(data_dir.join("git")),
            concurrency,
            failures: Failures::default(),
            drift: drift::Drift::default(),
            metrics,
            max_concurrent_reconciles: 4,
            full_sync,
        }))
    }

    /// Publishes a Kubernetes Event about `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(truncate(note, 1024)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            warn!(error = %e, "cannot publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_interval() {
        let s = Duration::from_secs;
        let got: Vec<u64> = (1..=7).map(|n| backoff(s(2), s(60), n).as_secs()).collect();
        assert_eq!(got, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(
            backoff(s(30), s(10), 5),
            s(30),
            "retry longer than interval stays retry"
        );
        assert_eq!(backoff(s(2), s(60), u32::MAX), s(60));
    }

    #[test]
    fn failures_count_until_cleared() {
        let f = Failures::default();
        assert_eq!(f.record("a"), 1);
        assert_eq!(f.record("a"), 2);
        f.clear("a");
        assert_eq!(f.record("a"), 1);
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
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

/// Logs a reconcile that ended without status (the status write itself failed).
pub async fn log_outcome<T, E: std::fmt::Display>(kind: &'static str, result: Result<T, E>) {
    if let Err(e) = result {
        warn!(kind, error = %e, "reconcile");
    }
}

/// A controller whose own watch triggers a reconcile only when the spec (generation), the
/// reconcile-request annotation, finalizers or deletion change: never on our own status
/// writes, which would otherwise echo back as a second full reconcile. Periodic work comes
/// from requeues, not from the watch.
pub fn controller<K>(api: kube::Api<K>) -> kube::runtime::Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let (reader, writer) = reflector::store();
    let trigger = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(reconcile_inputs::<K>, Default::default());
    kube::runtime::Controller::for_stream(trigger, reader)
}

/// The controller settings every kind uses: a bound on reconciles at once (each holds a
/// source's files and its own requests in flight).
pub fn controller_config(ctx: &Context) -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(ctx.max_concurrent_reconciles)
}

fn reconcile_inputs<K: kube::Resource>(obj: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = obj.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(crate::api::RECONCILE_REQUESTED_AT))
        .hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// Delay before retrying after `failures` consecutive failures: `retry`, doubling with each
/// failure, never more than the larger of `interval` and `retry`.
pub fn backoff(retry: Duration, interval: Duration, failures: u32) -> Duration {
    let cap = interval.max(retry);
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    retry.saturating_mul(factor).min(cap)
}

/// Consecutive failures per object, for [`backoff`]. In memory: a restart starts afresh.
#[derive(Default)]
pub struct Failures(std::sync::Mutex<std::collections::HashMap<String, u32>>);

impl Failures {
    /// Records a failure of `key` and returns how many in a row.
    pub fn record(&self, key: &str) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(key.to_string()).or_insert(0);
        *n += 1;
        *n
    }

    pub fn clear(&self, key: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// Parses a Go duration from a spec field; the error names the field.
pub fn duration(field: &str, value: &str) -> Result<Duration, String> {
    skewer_sources::duration::parse(value).map_err(|e| format!("spec.{field}: {e}"))
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
