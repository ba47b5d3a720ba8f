//! How every kind's controller runs: which watch events trigger a reconcile ([`of`]), how many
//! run at once, panics contained, and the retry of a reconcile whose status write failed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::controller::Action;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use tracing::warn;

use super::context::Context;
use super::{Error, Reconciled, backoff, panics, report, watch};

/// A controller whose own watch triggers a reconcile only when the spec (generation), the
/// reconcile-request annotation, finalizers or deletion change: never on our own status
/// writes, which would otherwise echo back as a second full reconcile. Periodic work comes
/// from requeues, not from the watch.
pub fn of<K: Reconciled>(api: kube::Api<K>) -> Controller<K> {
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
