//! The reconcilers, one per kind. Each turns its objects into calls to the libraries (a fetch
//! for sources, the sync pipeline for deploy kinds) and hands the outcome to
//! [`crate::runtime::Session::finish`], which reports it the same way for every kind.

pub mod application;
pub mod dependencies;
pub mod deploy;
pub mod gitrepository;
pub mod kustomization;
pub mod ocirepository;
pub mod source;
pub mod source_url;

use std::sync::Arc;

use crate::runtime::context::Context;

pub use crate::api::{FIELD_MANAGER, FINALIZER};

/// Defines `fn reconcile(obj, ctx)` for a deploy kind: `$apply` or `$cleanup` (each
/// `async fn(Arc<K>, Arc<Context>) -> Result<Action, Error>`) run behind [`FINALIZER`], in a
/// span naming the object. Boxed as `dyn Future + Send`: rustc cannot otherwise prove the
/// finalizer's nested futures Send for every lifetime (rust-lang/rust#102211).
#[macro_export]
macro_rules! finalized_reconcile {
    ($kind:ty, $apply:ident, $cleanup:ident) => {
        fn reconcile(
            obj: std::sync::Arc<$kind>,
            ctx: std::sync::Arc<$crate::runtime::context::Context>,
        ) -> futures::future::BoxFuture<
            'static,
            Result<kube::runtime::controller::Action, $crate::runtime::Error>,
        > {
            use kube::ResourceExt as _;
            use tracing::Instrument as _;
            Box::pin(async move {
                let ns = obj.namespace().ok_or($crate::runtime::Error::NoNamespace)?;
                let api: kube::Api<$kind> = kube::Api::namespaced(ctx.client.clone(), &ns);
                let span = tracing::info_span!("reconcile", kind = <$kind as $crate::runtime::Reconciled>::KIND, namespace = %ns, object = %obj.name_any(), revision = tracing::field::Empty);
                kube::runtime::finalizer::finalizer(
                    &api,
                    $crate::reconcilers::FINALIZER,
                    obj,
                    move |event| async move {
                        match event {
                            kube::runtime::finalizer::Event::Apply(obj) => $apply(obj, ctx).await,
                            kube::runtime::finalizer::Event::Cleanup(obj) => {
                                $cleanup(obj, ctx).await
                            }
                        }
                    },
                )
                .instrument(span)
                .await
                .map_err(|e| $crate::runtime::Error::Finalizer(e.to_string()))
            })
        }
    };
}

/// Runs every kind's controller until shutdown.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    tokio::join!(
        gitrepository::run(ctx.clone(), namespace.clone()),
        ocirepository::run(ctx.clone(), namespace.clone()),
        kustomization::run(ctx.clone(), namespace.clone()),
        application::run(ctx.clone(), namespace.clone()),
        crate::webhook::run(ctx.clone(), namespace),
        ctx.targets.follow_registry(),
    );
}
