//! The reconcilers: each turns one kind of skewer object into calls to the `sources` and
//! `appliers` libraries, and their results back into status, events and requeues.

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
}

impl Context {
    pub async fn new(
        client: Client,
        data_dir: &std::path::Path,
        concurrency: usize,
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
