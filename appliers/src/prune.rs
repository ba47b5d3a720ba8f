//! Prune: delete what left the source. Only objects that were in the previous inventory, are
//! absent from the new one, still exist, and still carry this owner's labels are deleted;
//! `skewer.dev/prune: disabled` keeps an object. Deletion runs in reverse apply order.

use std::collections::BTreeMap;

use futures::{StreamExt, stream};
use kube::api::{DeleteParams, PropagationPolicy};

use crate::apply::api_message;
use crate::object::ObjectId;
use crate::order::kind_rank;
use crate::resources::{ResourceError, Resources};
use crate::transform::Owner;

pub const PRUNE: &str = "skewer.dev/prune";

#[derive(Debug, Default)]
pub struct PruneReport {
    pub deleted: Vec<ObjectId>,
    /// Not deleted on purpose (annotation, foreign owner, already gone), with the reason.
    pub skipped: Vec<(ObjectId, String)>,
    /// Deletion failed; these stay in the inventory so a later reconcile retries them.
    pub failed: Vec<(ObjectId, String, String)>,
}

/// Deletes stale objects. `stale` holds ids with the API version they were applied with.
pub async fn prune(
    resources: &Resources,
    stale: Vec<(ObjectId, String)>,
    owner: &Owner,
    propagation: PropagationPolicy,
    concurrency: usize,
) -> PruneReport {
    // Reverse order: ordinary objects first, then definitions, namespaces last.
    let mut by_rank: BTreeMap<std::cmp::Reverse<u8>, Vec<(ObjectId, String)>> = BTreeMap::new();
    for (id, v) in stale {
        by_rank
            .entry(std::cmp::Reverse(kind_rank(&id.kind)))
            .or_default()
            .push((id, v));
    }
    let mut report = PruneReport::default();
    for (_, batch) in by_rank {
        let results: Vec<(ObjectId, String, Result<Option<String>, String>)> = stream::iter(batch)
            .map(|(id, v)| {
                let propagation = propagation.clone();
                async move {
                    let r = prune_one(resources, &id, &v, owner, propagation).await;
                    (id, v, r)
                }
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        for (id, v, r) in results {
            match r {
                Ok(None) => report.deleted.push(id),
                Ok(Some(reason)) => report.skipped.push((id, reason)),
                Err(e) => report.failed.push((id, v, e)),
            }
        }
    }
    report
}

/// `Ok(None)`: deleted. `Ok(Some(reason))`: deliberately left alone.
async fn prune_one(
    resources: &Resources,
    id: &ObjectId,
    version: &str,
    owner: &Owner,
    propagation: PropagationPolicy,
) -> Result<Option<String>, String> {
    let resolved = match resources.resolve(version, &id.kind, &[]).await {
        Ok(r) => r,
        // The kind itself is gone (its CRD was deleted): so is the object.
        Err(ResourceError::Unknown { .. }) => return Ok(Some("its kind no longer exists".into())),
        Err(e) => return Err(e.to_string()),
    };
    let api = resolved.api(resources.client().clone(), &id.namespace);
    let Some(live) = api
        .get_metadata_opt(&id.name)
        .await
        .map_err(|e| api_message(&e))?
    else {
        return Ok(Some("already gone".into()));
    };
    let meta = &live.metadata;
    if meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(PRUNE))
        .map(String::as_str)
        == Some("disabled")
    {
        return Ok(Some(format!("annotated {PRUNE}: disabled")));
    }
    if !owner.owns(meta.labels.as_ref()) {
        return Ok(Some("no longer carries this owner's labels".into()));
    }
    if meta.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let dp = DeleteParams {
        propagation_policy: Some(propagation),
        ..Default::default()
    };
    match api.delete(&id.name, &dp).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Some("already gone".into())),
        Err(e) => Err(api_message(&e)),
    }
}
