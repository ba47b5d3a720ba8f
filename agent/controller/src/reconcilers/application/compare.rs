//! What an Application's status says of its objects, worked out without a cluster: each object
//! the source renders is compared with what the last sync applied (by the digest of the
//! object as applied) and with the drift self-heal recorded; objects the last sync applied and
//! the source no longer renders require pruning. Health is mapped onto Argo CD's words.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};
use skewer_appliers::health::{Health, HealthReport, Observed, Overall};
use skewer_appliers::{Manifest, ObjectId, policy};

use crate::api::application::{HealthStatus, ResourceStatus};

pub const SYNCED: &str = "Synced";
pub const OUT_OF_SYNC: &str = "OutOfSync";

/// An object as the source renders it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub id: ObjectId,
    pub version: String,
    pub digest: String,
    /// Annotated `argocd.argoproj.io/compare-options: IgnoreExtraneous`.
    pub ignore_extraneous: bool,
}

impl Desired {
    pub fn of(m: &Manifest) -> Self {
        let bytes = serde_json::to_vec(&m.object).unwrap_or_default();
        Self {
            id: m.id(),
            version: m.api_version().to_string(),
            digest: format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
            ignore_extraneous: policy::ignore_extraneous(|k| m.annotation(k)),
        }
    }
}

fn id_of(r: &ResourceStatus) -> ObjectId {
    ObjectId {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        group: r.group.clone(),
        kind: r.kind.clone(),
    }
}

fn version_only(api_version: &str) -> String {
    api_version
        .rsplit_once('/')
        .map_or(api_version, |(_, v)| v)
        .to_string()
}

/// The resources as status lists them: every desired object, `Synced` when the last sync
/// applied it as it is now and it did not drift since, else `OutOfSync`; then the objects the
/// last sync applied that the source dropped, `OutOfSync` and requiring pruning. `previous`
/// is the status's list; health is carried over until it is observed again.
pub fn resources(
    desired: &[Desired],
    previous: &[ResourceStatus],
    drifted: &[ObjectId],
) -> Vec<ResourceStatus> {
    let before: BTreeMap<ObjectId, &ResourceStatus> =
        previous.iter().map(|r| (id_of(r), r)).collect();
    let drifted: BTreeSet<&ObjectId> = drifted.iter().collect();
    let wanted: BTreeSet<&ObjectId> = desired.iter().map(|d| &d.id).collect();
    let mut out: Vec<ResourceStatus> = desired
        .iter()
        .map(|d| {
            let was = before.get(&d.id);
            let synced_digest = was.and_then(|r| r.synced_digest.clone());
            let in_sync =
                synced_digest.as_deref() == Some(d.digest.as_str()) && !drifted.contains(&d.id);
            ResourceStatus {
                group: d.id.group.clone(),
                version: version_only(&d.version),
                kind: d.id.kind.clone(),
                namespace: d.id.namespace.clone(),
                name: d.id.name.clone(),
                status: if in_sync { SYNCED } else { OUT_OF_SYNC }.into(),
                health: was.and_then(|r| r.health.clone()),
                requires_pruning: false,
                synced_digest,
                ignore_extraneous: d.ignore_extraneous,
            }
        })
        .collect();
    out.extend(
        previous
            .iter()
            .filter(|r| !wanted.contains(&id_of(r)) && r.synced_digest.is_some())
            .map(|r| ResourceStatus {
                status: OUT_OF_SYNC.into(),
                requires_pruning: true,
                ..r.clone()
            }),
    );
    out
}

/// After a sync that applied every desired object: all of them as synced now.
pub fn synced(desired: &[Desired], resources: &mut [ResourceStatus]) {
    let digests: BTreeMap<&ObjectId, &str> =
        desired.iter().map(|d| (&d.id, d.digest.as_str())).collect();
    for r in resources.iter_mut() {
        if let Some(digest) = digests.get(&id_of(r)) {
            r.status = SYNCED.into();
            r.synced_digest = Some(digest.to_string());
        }
    }
}

/// Drops the resources a sync pruned (or that were never applied and left the source).
pub fn without(resources: &mut Vec<ResourceStatus>, gone: &[ObjectId]) {
    let gone: BTreeSet<&ObjectId> = gone.iter().collect();
    resources.retain(|r| !gone.contains(&id_of(r)));
}

/// Whether every resource is synced (one that only requires pruning and was annotated
/// `IgnoreExtraneous` does not count, as in Argo CD).
pub fn all_synced(resources: &[ResourceStatus]) -> bool {
    resources
        .iter()
        .all(|r| r.status == SYNCED || (r.requires_pruning && r.ignore_extraneous))
}

/// The objects whose health is read: the ones a sync applied (they have a digest).
pub fn applied(resources: &[ResourceStatus]) -> Vec<(ObjectId, String)> {
    resources
        .iter()
        .filter(|r| r.synced_digest.is_some() && !r.requires_pruning)
        .map(|r| {
            let version = if r.group.is_empty() {
                r.version.clone()
            } else {
                format!("{}/{}", r.group, r.version)
            };
            (id_of(r), version)
        })
        .collect()
}

fn words(o: &Observed) -> HealthStatus {
    let (status, message) = match o {
        Observed::Judged(Health::Current) => ("Healthy", None),
        Observed::Judged(Health::InProgress(m)) => ("Progressing", Some(m.clone())),
        Observed::Judged(Health::Failed(m)) => ("Degraded", Some(m.clone())),
        Observed::Missing => ("Missing", None),
        Observed::Unreadable(m) => ("Unknown", Some(m.clone())),
    };
    HealthStatus {
        status: status.into(),
        message: message.filter(|m| !m.is_empty()),
    }
}

/// Records each observed object's health in `resources`, and returns the Application's: the
/// worst, with the first problems named.
pub fn health(report: &HealthReport, resources: &mut [ResourceStatus]) -> HealthStatus {
    let observed: BTreeMap<&ObjectId, &Observed> =
        report.objects.iter().map(|(id, o)| (id, o)).collect();
    for r in resources.iter_mut() {
        if let Some(o) = observed.get(&id_of(r)) {
            r.health = Some(words(o));
        }
    }
    let status = match report.overall() {
        Overall::Healthy => "Healthy",
        Overall::Progressing => "Progressing",
        Overall::Missing => "Missing",
        Overall::Degraded => "Degraded",
        Overall::Unknown => "Unknown",
    };
    let problems = report.problems();
    HealthStatus {
        status: status.into(),
        message: (!problems.is_empty()).then(|| skewer_appliers::message::summarize(&problems)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(name: &str, value: &str) -> Manifest {
        Manifest {
            origin: String::new(),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "team"}, "data": {"v": value}}),
        }
    }

    #[test]
    fn only_what_the_source_changed_or_drift_touched_is_out_of_sync() {
        let v1: Vec<Desired> = [
            manifest("a", "1"),
            manifest("b", "1"),
            manifest("gone", "1"),
        ]
        .iter()
        .map(Desired::of)
        .collect();
        let mut after_sync = resources(&v1, &[], &[]);
        assert!(
            after_sync.iter().all(|r| r.status == OUT_OF_SYNC),
            "never synced"
        );
        synced(&v1, &mut after_sync);
        assert!(all_synced(&after_sync));
        assert_eq!(after_sync[0].version, "v1");

        let v2: Vec<Desired> = [manifest("a", "1"), manifest("b", "2"), manifest("new", "1")]
            .iter()
            .map(Desired::of)
            .collect();
        let drifted = [v2[0].id.clone()];
        let now = resources(&v2, &after_sync, &drifted);
        let status: Vec<(&str, &str, bool)> = now
            .iter()
            .map(|r| (r.name.as_str(), r.status.as_str(), r.requires_pruning))
            .collect();
        assert_eq!(
            status,
            [
                ("a", OUT_OF_SYNC, false),
                ("b", OUT_OF_SYNC, false),
                ("new", OUT_OF_SYNC, false),
                ("gone", OUT_OF_SYNC, true),
            ]
        );
        let now = resources(&v2, &after_sync, &[]);
        assert_eq!(now[0].status, SYNCED, "a is unchanged and did not drift");
        assert_eq!(applied(&now).len(), 2, "a and b were applied; new was not");
    }

    #[test]
    fn an_extraneous_object_annotated_ignore_extraneous_leaves_it_synced() {
        let mut ignored = manifest("generated", "1");
        ignored.object["metadata"]["annotations"] =
            json!({"argocd.argoproj.io/compare-options": "IgnoreExtraneous"});
        for (extra, synced_after) in [(ignored, true), (manifest("plain", "1"), false)] {
            let v1: Vec<Desired> = [manifest("a", "1"), extra]
                .iter()
                .map(Desired::of)
                .collect();
            let mut applied = resources(&v1, &[], &[]);
            synced(&v1, &mut applied);
            let v2 = vec![Desired::of(&manifest("a", "1"))];
            let now = resources(&v2, &applied, &[]);
            assert!(now[1].requires_pruning, "{now:?}");
            assert_eq!(all_synced(&now), synced_after, "{now:?}");
        }
    }

    #[test]
    fn health_is_the_worst_in_argo_cds_words() {
        let v: Vec<Desired> = [manifest("a", "1"), manifest("b", "1")]
            .iter()
            .map(Desired::of)
            .collect();
        let mut rs = resources(&v, &[], &[]);
        let report = HealthReport {
            objects: vec![
                (v[0].id.clone(), Observed::Judged(Health::Current)),
                (
                    v[1].id.clone(),
                    Observed::Judged(Health::InProgress("0/1 ready".into())),
                ),
            ],
        };
        let h = health(&report, &mut rs);
        assert_eq!(h.status, "Progressing");
        assert!(h.message.unwrap().contains("0/1 ready"));
        assert_eq!(rs[0].health.as_ref().unwrap().status, "Healthy");
    }
}
