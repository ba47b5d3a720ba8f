//! Status of skewer's objects: the fields every kind shares (conditions, observed generation,
//! the handled reconcile request), reached through [`Reconciled`], and the writes.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::RECONCILE_REQUESTED_AT;

pub use skewer_api::Reconciled;

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
