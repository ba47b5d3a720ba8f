//! skewer's API, group `skewer.dev`, version `v1alpha1`. Field names follow Flux where Flux
//! has one, so a Flux manifest moves over by changing its `apiVersion`. The bottom layer of the
//! agent: the types and the names every layer shares, what a Kustomization's spec and
//! inventory mean in the appliers' terms (`spec`, `inventory`), skewer's install manifests
//! (`manifests`), and how skewer lists and watches (`watch`, [`scoped`]). Of skewer's crates
//! it depends on `appliers` only.

#[cfg(test)]
mod anchors;
pub mod application;
pub mod applicationset;
pub mod conditions;
pub mod duration;
pub mod gitrepository;
pub mod history;
pub mod inventory;
pub mod kustomization;
pub mod manifests;
pub mod names;
pub mod notification;
pub mod ocirepository;
pub mod pin;
pub mod receiver;
mod reconciled;
pub mod source;
pub mod spec;
pub mod watch;

pub use application::{Application, ApplicationSpec, ApplicationStatus};
pub use applicationset::{ApplicationSet, ApplicationSetSpec, ApplicationSetStatus};
pub use conditions::Condition;
pub use gitrepository::{GitRepository, GitRepositorySpec, GitRepositoryStatus};
pub use kustomization::{Kustomization, KustomizationSpec, KustomizationStatus};
pub use names::{
    APPSET_FIELD_MANAGER, APPSET_LABEL, COMMIT_AUTHOR, COMMIT_MESSAGE, FIELD_MANAGER, FINALIZER,
    OwnerKey, PRESERVE_RESOURCES, ROLLOUT_FIELD_MANAGER, ROLLOUT_HOLD,
};
pub use notification::{Alert, AlertSpec, Provider, ProviderSpec};
pub use ocirepository::{OCIRepository, OCIRepositorySpec};
pub use receiver::{Receiver, ReceiverSpec};
pub use reconciled::Reconciled;
pub use source::{ArtifactStatus, SourceStatus};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "skewer.dev";
pub const VERSION: &str = "v1alpha1";

/// Annotation that asks for an immediate reconcile; its value is recorded in
/// `status.lastHandledReconcileAt` once handled.
pub const RECONCILE_REQUESTED_AT: &str = "skewer.dev/reconcile-requested-at";

/// Annotation that asks an Application to sync now (what `skewer sync` sets); its value is
/// recorded in `status.lastHandledSyncAt` once acted on.
pub const SYNC_REQUESTED_AT: &str = "skewer.dev/sync-requested-at";

/// A reference to a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalObjectReference {
    pub name: String,
}

/// Any JSON object, kept as written (the fields skewer refuses by name, so that the API server
/// does not drop them silently).
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A list of any JSON objects, kept as written.
fn any_objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    })
}

/// An `Api` over one namespace, or all of them.
pub fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> kube::Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    }
}
