//! Prune: delete what left the source. Only objects that were in the previous inventory, are
//! absent from the new one, still exist, and still carry this owner's labels are deleted;
//! what the live object's annotations ask to keep (`policy::kept`: skewer's, Flux's and Argo
//! CD's names) is kept. Deletion runs in reverse apply order: the highest sync wave first.

use std::collections::BTreeMap;

use futures::{StreamExt, stream};
use kube::api::{DeleteParams, PropagationPolicy};

use crate::apply::api_message;
use crate::object::ObjectId;
use crate::order::{ARGO_SYNC_WAVE, SYNC_WAVE, kind_rank};
use crate::resources::{ResourceError, Resources};
use crate::transform::Owner;

pub use crate::policy::{PRUNE, Removal};

#[derive(Debug, Default)]
pub struct PruneReport {
    pub deleted: Vec<ObjectId>,
    /// Not deleted on purpose (annotation, foreign owner, already gone), with the reason.
    pub skipped: Vec<(ObjectId, String)>,
    /// Deletion failed; these stay in the inventory so a later reconcile retries them.
    pub failed: Vec<(ObjectId, String, String)>,
}

/// Deletes stale objects. `stale` holds ids with the API version they were applied with.
/// Each is looked up first; then they are deleted in reverse apply order: the highest sync wave
/// first (its wave read from the live object), and within a wave ordinary objects before
/// definitions, namespaces last; objects annotated with Argo CD's `PruneLast=true` after all
/// the others, in the same order among themselves. `removal` says why they go: what an object's annotations keep
/// depends on it.
pub async fn prune(
    resources: &Resources,
    stale: Vec<(ObjectId, String)>,
    removal: Removal,
    owner: &Owner,
    propagation: PropagationPolicy,
    concurrency: usize,
) -> PruneReport {
    let mut report = PruneReport::default();
    let looked: Vec<(ObjectId, String, Result<Verdict, String>)> = stream::iter(stale)
        .map(|(id, v)| async move {
            let r = inspect(resources, &id, &v, removal, owner).await;
            (id, v, r)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    type Order = (bool, std::cmp::Reverse<i64>, std::cmp::Reverse<u8>);
    let mut batches: BTreeMap<Order, Vec<(ObjectId, String)>> = BTreeMap::new();
    for (id, v, r) in looked {
        match r {
            Ok(Verdict::Delete { last, wave }) => batches
                .entry((
                    last,
                    std::cmp::Reverse(wave),
                    std::cmp::Reverse(kind_rank(&id.kind)),
                ))
                .or_default()
                .push((id, v)),
            Ok(Verdict::Deleting) => report.deleted.push(id),
            Ok(Verdict::Keep(reason)) => report.skipped.push((id, reason)),
            Err(e) => report.failed.push((id, v, e)),
        }
    }
    for (_, batch) in batches {
        let results: Vec<(ObjectId, String, Result<Option<String>, String>)> = stream::iter(batch)
            .map(|(id, v)| {
                let propagation = propagation.clone();
                async move {
                    let r = delete(resources, &id, &v, propagation).await;
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

/// What to do with one stale object.
enum Verdict {
    /// Delete it, in its sync wave's turn; `last`: after every object not marked so (Argo
    /// CD's `PruneLast=true`).
    Delete { last: bool, wave: i64 },
    /// It is being deleted already.
    Deleting,
    /// Deliberately left alone, with why.
    Keep(String),
}

async fn inspect(
    resources: &Resources,
    id: &ObjectId,
    version: &str,
    removal: Removal,
    owner: &Owner,
) -> Result<Verdict, String> {
    let resolved = match resources.resolve(version, &id.kind, &[]).await {
        Ok(r) => r,
        // The kind itself is gone (its CRD was deleted): so is the object.
        Err(ResourceError::Unknown { .. }) => {
            return Ok(Verdict::Keep("its kind no longer exists".into()));
        }
        Err(e) => return Err(e.to_string()),
    };
    let api = resolved.api(resources.client().clone(), &id.namespace);
    let Some(live) = api
        .get_metadata_opt(&id.name)
        .await
        .map_err(|e| api_message(&e))?
    else {
        return Ok(Verdict::Keep("already gone".into()));
    };
    let meta = &live.metadata;
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key));
    if let Some(why) = crate::policy::kept(|k| annotation(k).map(String::as_str), removal) {
        return Ok(Verdict::Keep(why));
    }
    if !owner.owns(meta.labels.as_ref()) {
        return Ok(Verdict::Keep(
            "no longer carries this owner's labels".into(),
        ));
    }
    if meta.deletion_timestamp.is_some() {
        return Ok(Verdict::Deleting);
    }
    let wave = annotation(SYNC_WAVE)
        .or_else(|| annotation(ARGO_SYNC_WAVE))
        .and_then(|w| w.trim().parse().ok())
        .unwrap_or(0);
    let last = crate::policy::prune_last(|k| annotation(k).map(String::as_str));
    Ok(Verdict::Delete { last, wave })
}

/// `Ok(None)`: deleted. `Ok(Some(reason))`: gone meanwhile.
async fn delete(
    resources: &Resources,
    id: &ObjectId,
    version: &str,
    propagation: PropagationPolicy,
) -> Result<Option<String>, String> {
    let resolved = resources
        .resolve(version, &id.kind, &[])
        .await
        .map_err(|e| e.to_string())?;
    let api = resolved.api(resources.client().clone(), &id.namespace);
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
