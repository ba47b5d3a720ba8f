//! Which events reconcile a deploy object, the same for every kind: its own changes
//! (`runtime::controller`), a new artifact of the source it names, a dependency of either kind
//! changing, drift it leaves alone, and its cluster's Secret changing. Also the inventories the
//! ownership table reads, from the controller's cache.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use super::{Deploy, Destination, cleanup, cluster_now, owner_of, reconcile};
use crate::api::{Application, Kustomization};
use crate::artifacts;
use crate::ownership::Recorded;
use crate::runtime::context::Context;
use crate::runtime::controller::Sharded;
use crate::runtime::{self, Error};
use crate::targets::ClusterRef;

/// Runs the controller of deploy kind `D` until shutdown.
pub async fn run<D: Deploy + Sharded>(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<D> = crate::api::scoped(&ctx.client, namespace.as_deref());
    let controller = runtime::controller::of(api);
    ctx.ownership.watch(
        D::KIND,
        Arc::new(Inventories {
            objects: controller.store(),
            ctx: ctx.clone(),
        }),
    );
    let mut controller = controller;
    if D::NAMES_SOURCES {
        // A new artifact reconciles the objects that read it.
        controller = artifacts::watch_sources(
            controller,
            &ctx.client,
            namespace.as_deref(),
            |obj: &D, kind, ns, name| obj.reads(kind, ns, name),
        );
    }
    let controller = dependency::<D, Kustomization>(controller, &ctx, namespace.as_deref());
    let controller = dependency::<D, Application>(controller, &ctx, namespace.as_deref());
    // Drift left alone (no self-heal) reconciles its owner, to show it out of sync.
    let store = controller.store();
    let drifted = crate::shards::announced(ctx.drift.subscribe()).filter_map(move |owner| {
        let found = store
            .state()
            .iter()
            .find(|obj| owner_of(obj.as_ref()) == owner)
            .map(|obj| ObjectRef::from_obj(obj.as_ref()));
        async move { found }
    });
    // A cluster Secret added, changed or deleted: the objects on that cluster reconcile (their
    // clients are rebuilt, with the new credentials, by `Targets`).
    let store = controller.store();
    let cluster_ctx = ctx.clone();
    let clusters =
        crate::shards::announced(ctx.targets.registry.subscribe()).flat_map(move |name| {
            let cluster = Some(ClusterRef::Registered(name));
            let on: Vec<ObjectRef<D>> = store
                .state()
                .iter()
                .filter(|obj| cluster_of(&cluster_ctx, obj.as_ref()) == cluster)
                .map(|obj| ObjectRef::from_obj(obj.as_ref()))
                .collect();
            futures::stream::iter(on)
        });
    let controller = controller.reconcile_on(drifted).reconcile_on(clusters);
    runtime::controller::run(ctx, controller, finalized::<D>).await;
}

/// A `T` changing (becoming Ready, say) reconciles the `D`s depending on it.
fn dependency<D: Deploy, T: Deploy>(
    controller: Controller<D>,
    ctx: &Context,
    namespace: Option<&str>,
) -> Controller<D> {
    let dependents = controller.store();
    let api: Api<T> = crate::api::scoped(&ctx.client, namespace);
    controller.watches_stream(
        watcher(api, crate::api::watch::own_kinds()).touched_objects(),
        move |dep: T| {
            artifacts::referring(&dependents, &dep, |obj: &D, ns, name| {
                depends_on(obj, T::KIND, ns, name)
            })
        },
    )
}

/// Whether `obj` depends on `kind` `ns/name`.
pub fn depends_on<D: Deploy>(obj: &D, kind: &str, ns: &str, name: &str) -> bool {
    let own = obj.namespace().unwrap_or_default();
    obj.dependencies()
        .iter()
        .any(|d| d.kind == kind && d.name == name && d.namespace.unwrap_or(&own) == ns)
}

/// The cluster `obj` applies to, from the registrations listed so far.
fn cluster_of<D: Deploy>(ctx: &Context, obj: &D) -> Option<ClusterRef> {
    let place = obj.place(&ctx.settings).ok()?;
    cluster_now(ctx, &place.destination)
}

/// The shard key of a deploy object: the registered cluster it applies to, so that one replica
/// holds a spoke's client, discovery and drift watches; on the hub (or a kubeconfig's
/// cluster), the object itself. Read from the spec alone, so every replica computes the same.
pub fn shard_key<D: Deploy>(obj: &D, ctx: &Context) -> Option<String> {
    let own = || format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    Some(match obj.place(&ctx.settings).map(|p| p.destination) {
        Ok(Destination::Cluster(ClusterRef::Registered(name))) => format!("cluster/{name}"),
        Ok(Destination::Server(server)) => format!("server/{server}"),
        _ => own(),
    })
}

impl Sharded for Kustomization {
    fn shard_key(&self, ctx: &Context) -> Option<String> {
        shard_key(self, ctx)
    }
}

impl Sharded for Application {
    fn shard_key(&self, ctx: &Context) -> Option<String> {
        shard_key(self, ctx)
    }
}

/// The reconcile of `D` behind the finalizer: [`reconcile`], or [`cleanup`] on deletion.
fn finalized<D: Deploy>(
    obj: Arc<D>,
    ctx: Arc<Context>,
) -> BoxFuture<'static, Result<Action, Error>> {
    runtime::controller::finalized(obj, ctx, reconcile::<D>, cleanup::<D>)
}

/// The inventories objects of one deploy kind recorded, from its controller's cache.
struct Inventories<D: Deploy> {
    objects: Store<D>,
    ctx: Arc<Context>,
}

impl<D: Deploy> Recorded for Inventories<D> {
    fn held(
        &self,
        cluster: &ClusterRef,
        wanted: &HashSet<String>,
        except: &str,
    ) -> Vec<(String, String)> {
        let mut held = Vec::new();
        for obj in self.objects.state() {
            let owner = owner_of(obj.as_ref());
            if owner == except || cluster_of(&self.ctx, obj.as_ref()).as_ref() != Some(cluster) {
                continue;
            }
            let inventory = obj.status().and_then(D::inventory);
            crate::api::inventory::held_in(inventory, wanted, &owner, &mut held);
        }
        held
    }
}
