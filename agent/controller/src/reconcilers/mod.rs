//! The reconcilers, one per kind. Each turns its objects into calls to the libraries (a fetch
//! for sources, the sync pipeline for deploy kinds) and hands the outcome to
//! [`crate::runtime::report::Session::finish`], which reports it the same way for every kind.

pub mod application;
pub mod applicationset;
pub mod dependencies;
pub mod deploy;
pub mod fetch;
pub mod gitrepository;
pub mod kustomization;
pub mod notification;
pub mod ocirepository;
pub mod source;
pub mod source_url;
pub mod verdict;

use std::sync::Arc;

use crate::runtime::context::Context;

/// Runs every kind's controller until shutdown: SIGTERM or SIGINT stops each once its
/// running reconciles are over, and then this returns.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let controllers = async {
        tokio::join!(
            gitrepository::run(ctx.clone(), namespace.clone()),
            ocirepository::run(ctx.clone(), namespace.clone()),
            kustomization::run(ctx.clone(), namespace.clone()),
            application::run(ctx.clone(), namespace.clone()),
            applicationset::run(ctx.clone(), namespace.clone()),
            notification::run_providers(ctx.clone(), namespace.clone()),
            notification::run_alerts(ctx.clone(), namespace.clone()),
            crate::webhook::run(ctx.clone(), namespace),
        )
    };
    tokio::select! {
        _ = controllers => {}
        () = ctx.targets.follow_registry() => {}
    }
}
