//! What every reconciler shares, bottom first: outcomes ([`Reason`], [`Failure`], [`Done`]),
//! settings, status writes and retry backoff here (watches are `skewer_api::watch`); above them the [`context::Context`],
//! the controller wiring ([`controller`]: which watch events trigger a reconcile, how many run at
//! once, panics contained) and the one way a reconcile's outcome is reported
//! ([`report::Session`]). Nothing here imports what the context holds but `context.rs`.

pub mod backoff;
pub mod context;
pub mod controller;
pub mod events;
pub mod outcome;
pub mod panics;
pub mod report;
pub mod shutdown;
pub mod status;

use std::time::Duration;

pub use outcome::{Done, Failure, Reason, Schedule};
pub use status::Reconciled;

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
    /// Settings for judging specs alone ([`crate::reconcilers::verdict`]): those of a daemon
    /// run with `--default-service-account` and `--no-cross-namespace-refs` as given; what
    /// no spec check reads is left at its default.
    pub fn judging(default_service_account: Option<String>, cross_namespace_refs: bool) -> Self {
        Settings {
            concurrency: 16,
            full_sync: None,
            max_concurrent_reconciles: 4,
            data_dir: "/data".into(),
            local_sources: true,
            default_service_account,
            cross_namespace_refs,
            cross_namespace_receivers: false,
            storage_url: None,
        }
    }

    /// Settings for unit tests: a hub, no tenants, every reference allowed.
    #[cfg(test)]
    pub fn for_tests() -> Self {
        Self::judging(None, true)
    }
}

/// A spawned task that ends when this is dropped.
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
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
