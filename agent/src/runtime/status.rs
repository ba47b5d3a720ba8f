//! Status of skewer's objects: the fields every kind shares (conditions, observed generation,
//! the handled reconcile request), reached through [`Reconciled`], and the writes.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::{Condition, RECONCILE_REQUESTED_AT};

/// A kind of skewer object, as the shared runtime sees it.
pub trait Reconciled:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    type Status: Clone + Default + PartialEq + Debug + Serialize + Send + Sync;
    /// The kind, as in metrics and logs.
    const KIND: &'static str;

    fn status(&self) -> Option<&Self::Status>;
    fn conditions(status: &Self::Status) -> &[Condition];
    fn conditions_mut(status: &mut Self::Status) -> &mut Vec<Condition>;
    fn observed_generation(status: &mut Self::Status) -> &mut Option<i64>;
    fn last_handled_reconcile_at(status: &mut Self::Status) -> &mut Option<String>;
}

/// Records the object's reconcile request (`skewer.dev/reconcile-requested-at`) as handled;
/// true when it is one not handled before, which always gets a full reconcile.
pub fn take_request<K: Reconciled>(obj: &K, status: &mut K::Status) -> bool {
    let requested = obj.annotations().get(RECONCILE_REQUESTED_AT).cloned();
    let handled = K::last_handled_reconcile_at(status);
    let new = requested.is_some() && requested != *handled;
    *handled = requested;
    new
}

/// Writes the whole status (a merge patch of `status`).
pub async fn write<K: Reconciled>(
    client: &Client,
    obj: &K,
    status: &K::Status,
) -> Result<(), kube::Error> {
    patch(client, obj, json!({ "status": status })).await
}

/// Merges `patch` (like `{"status": {"inventory": …}}`) into the object's status.
pub async fn patch<K: Reconciled>(
    client: &Client,
    obj: &K,
    patch: serde_json::Value,
) -> Result<(), kube::Error> {
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map(|_| ())
}

/// Implements [`Reconciled`] for a kind whose status has the shared fields (`conditions`,
/// `observed_generation`, `last_handled_reconcile_at`).
#[macro_export]
macro_rules! reconciled {
    ($kind:ident, $status:ty) => {
        impl $crate::runtime::Reconciled for $kind {
            type Status = $status;
            const KIND: &'static str = stringify!($kind);

            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn conditions(status: &$status) -> &[$crate::api::Condition] {
                &status.conditions
            }
            fn conditions_mut(status: &mut $status) -> &mut Vec<$crate::api::Condition> {
                &mut status.conditions
            }
            fn observed_generation(status: &mut $status) -> &mut Option<i64> {
                &mut status.observed_generation
            }
            fn last_handled_reconcile_at(status: &mut $status) -> &mut Option<String> {
                &mut status.last_handled_reconcile_at
            }
        }
    };
}
