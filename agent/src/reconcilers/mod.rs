//! The reconcilers, one per kind. Each turns its objects into calls to the libraries (a fetch
//! for sources, the sync pipeline for deploy kinds) and hands the outcome to
//! [`crate::runtime::Session::finish`], which reports it the same way for every kind.

pub mod application;
pub mod dependencies;
pub mod gitrepository;
pub mod kustomization;
pub mod ocirepository;
pub mod source;
pub mod source_url;

use std::sync::Arc;

use crate::runtime::Context;

/// The field manager of every server-side apply skewer makes.
pub const FIELD_MANAGER: &str = "skewer";
/// The finalizer deploy kinds carry, so that deleting them can prune.
pub const FINALIZER: &str = "finalizers.skewer.dev";

/// Runs every kind's controller until shutdown.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    tokio::join!(
        gitrepository::run(ctx.clone(), namespace.clone()),
        ocirepository::run(ctx.clone(), namespace.clone()),
        kustomization::run(ctx.clone(), namespace.clone()),
        application::run(ctx, namespace),
    );
}
