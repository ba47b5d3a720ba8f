//! How every kind's controller runs: which watch events trigger a reconcile ([`of`]), how many
//! run at once, panics contained, and the retry of a reconcile whose status write failed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt as _, StreamExt};
use kube::ResourceExt;
use kube::runtime::finalizer::{Event, finalizer};
use tracing::Instrument;

use crate::api::FINALIZER;
use kube::runtime::controller::Action;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use tracing::warn;

use super::context::Context;
use super::{Error, Reconciled, backoff, panics, report};
use crate::api::watch;

/// A controller whose own watch triggers a reconcile only when the spec (generation), the
/// reconcile-request annotation, finalizers or deletion change: never on our own status
/// writes, which would otherwise echo back as a second full reconcile. Periodic work comes
/// from requeues, not from the watch.
pub fn of<K: Reconciled>(api: kube::Api<K>) -> Controller<K> {
    let (reader, writer) = reflector::store();
    // The controller backs off its trigger streams itself (`run` sets `watch::Retry`).
    // Managed fields are read from no cached object (self-heal reads the applied objects'
    // own, from their metadata watches): dropped, they cost nothing per object kept.
    let trigger = watcher(api, watch::own_kinds())
        .modify(|obj: &mut K| obj.meta_mut().managed_fields = None)
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

/// Which shard an object is reconciled in (see [`crate::shards`]).
pub trait Sharded: Reconciled {
    /// Every replica reconciles every object of the kind: what it registers is needed wherever
    /// a request or an event arrives.
    const EVERY_REPLICA: bool = false;

    /// The key hashed into its shard: `namespace/name` unless the kind says otherwise;
    /// `None`: every replica reconciles it.
    fn shard_key(&self, _ctx: &Context) -> Option<String> {
        (!Self::EVERY_REPLICA).then(|| {
            format!(
                "{}/{}",
                self.namespace().unwrap_or_default(),
                self.name_any()
            )
        })
    }
}

impl Sharded for crate::api::GitRepository {}
impl Sharded for crate::api::OCIRepository {}
impl Sharded for crate::api::ApplicationSet {}

/// A push may reach any replica: each registers every Receiver.
impl Sharded for crate::api::Receiver {
    const EVERY_REPLICA: bool = true;
}
/// An event may happen in any shard: each replica registers every Provider and Alert.
impl Sharded for crate::api::Provider {
    const EVERY_REPLICA: bool = true;
}
impl Sharded for crate::api::Alert {
    const EVERY_REPLICA: bool = true;
}

/// Runs `controller` until shutdown: at most `max_concurrent_reconciles` at once, only the
/// objects of the shards this replica holds (all of them when another shard is acquired),
/// panics contained to their object, a failed status write retried after a few seconds.
pub async fn run<K, F, Fut>(ctx: Arc<Context>, controller: Controller<K>, reconcile: F)
where
    K: Sharded,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let config = kube::runtime::controller::Config::default()
        .concurrency(ctx.settings.max_concurrent_reconciles);
    let acquired = crate::shards::announced(ctx.shards.subscribe());
    let cache = controller.store();
    let running = controller
        .graceful_shutdown_on(super::shutdown::trigger())
        .with_config(config)
        .trigger_backoff(watch::Retry::default())
        .reconcile_all_on(acquired)
        .run(panics::guarded(in_shard(reconcile)), error_policy::<K>, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                warn!(kind = K::KIND, error = %e, "reconcile");
            }
        });
    tokio::select! {
        () = running => {}
        () = unstarted(cache) => {}
    }
}

/// Ends when a stop is asked for before `cache` was first filled. kube starts reconciling only
/// once it is, so nothing is running; and its graceful stop, which ends the watch that fills
/// it, would wait for it forever.
async fn unstarted<K: kube::Resource + Clone + 'static>(cache: reflector::Store<K>)
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    super::shutdown::requested().await;
    if cache.wait_until_ready().now_or_never().is_none() {
        return;
    }
    std::future::pending::<()>().await;
}

/// `reconcile`, only while this replica holds the object's shard: a [`crate::shards::Turn`]
/// is held until it ends. An object of another shard is left alone until something changes,
/// and what this replica knew of it for self-heal is forgotten (its shard key moved).
fn in_shard<K, F, Fut>(
    reconcile: F,
) -> impl Fn(Arc<K>, Arc<Context>) -> BoxFuture<'static, Result<Action, Error>>
+ Clone
+ Send
+ Sync
+ 'static
where
    K: Sharded,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    move |obj: Arc<K>, ctx: Arc<Context>| {
        let owner = crate::api::OwnerKey::new(
            K::KIND,
            &obj.namespace().unwrap_or_default(),
            &obj.name_any(),
        )
        .to_string();
        let turn = match obj.shard_key(&ctx) {
            None => None,
            Some(key) => match ctx.shards.enter(&key, &owner) {
                Some(turn) => Some(turn),
                None => {
                    ctx.drift.lock().forget_owner(&owner);
                    return Box::pin(std::future::ready(Ok(Action::await_change())));
                }
            },
        };
        let work = reconcile(obj, ctx);
        Box::pin(async move {
            let result = work.await;
            drop(turn);
            result
        })
    }
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

/// One reconcile of `obj` behind [`FINALIZER`] (added first; on deletion `cleanup` runs, then
/// it is removed), in a span naming the object. Boxed as `dyn Future + Send`: rustc cannot
/// otherwise prove the finalizer's nested futures Send for every lifetime
/// (rust-lang/rust#102211).
pub fn finalized<K, A, C, FA, FC>(
    obj: Arc<K>,
    ctx: Arc<Context>,
    apply: A,
    cleanup: C,
) -> BoxFuture<'static, Result<Action, Error>>
where
    K: Reconciled,
    A: FnOnce(Arc<K>, Arc<Context>) -> FA + Send + 'static,
    C: FnOnce(Arc<K>, Arc<Context>) -> FC + Send + 'static,
    FA: Future<Output = Result<Action, Error>> + Send + 'static,
    FC: Future<Output = Result<Action, Error>> + Send + 'static,
{
    Box::pin(async move {
        let ns = obj.namespace().ok_or(Error::NoNamespace)?;
        let api: kube::Api<K> = kube::Api::namespaced(ctx.client.clone(), &ns);
        let span = tracing::info_span!("reconcile", kind = K::KIND, namespace = %ns, object = %obj.name_any(), revision = tracing::field::Empty);
        finalizer(&api, FINALIZER, obj, move |event| async move {
            match event {
                Event::Apply(obj) => apply(obj, ctx).await,
                Event::Cleanup(obj) => cleanup(obj, ctx).await,
            }
        })
        .instrument(span)
        .await
        .map_err(|e| Error::Finalizer(e.to_string()))
    })
}
