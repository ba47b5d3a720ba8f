//! Drift: has someone else changed a field skewer owns, or deleted the object?
//!
//! Server-side apply records, per manager, the set of fields it owns (`managedFields`). When
//! another manager's update changes a field skewer applied (`kubectl edit`, `kubectl scale`,
//! `kubectl label --overwrite`, another controller), that field's ownership moves away from
//! skewer, so skewer's set changes. Fields skewer never applied (an annotation another tool
//! added, a controller's status) leave skewer's set alone. So: remember a fingerprint of
//! skewer's set after each apply, and compare it with what a watch event shows.
//!
//! Servers before 1.21 do not move ownership for updates through the `/scale` subresource
//! (`kubectl scale`), so the object's `generation` is remembered too: a spec change by anyone
//! bumps it, while status and metadata updates do not.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

/// What skewer remembers of an object it applied, or sees of it in a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// [`fingerprint`] of the fields skewer owns.
    pub fields: Option<u64>,
    pub generation: Option<i64>,
}

impl Seen {
    pub fn of(meta: &ObjectMeta, manager: &str) -> Self {
        Self {
            fields: fingerprint(meta.managed_fields.as_deref(), manager),
            generation: meta.generation,
        }
    }
}

/// A fingerprint of the fields `manager` owns through Apply, or `None` if it owns none.
pub fn fingerprint(managed_fields: Option<&[ManagedFieldsEntry]>, manager: &str) -> Option<u64> {
    let entry = managed_fields?.iter().find(|e| {
        e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply")
    })?;
    let mut h = DefaultHasher::new();
    // FieldsV1 is JSON; its serialisation is stable (the server writes keys sorted).
    serde_json::to_string(&entry.fields_v1)
        .unwrap_or_default()
        .hash(&mut h);
    entry.api_version.hash(&mut h);
    Some(h.finish())
}

/// What a watch event says about an object skewer applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    InSync,
    /// Someone else took over fields skewer owns.
    Changed,
    Deleted,
}

/// Judges an object as a watch shows it (`None`: deleted) against what skewer's last apply
/// left. `applied` is `None` while an apply is in flight: nothing is judged then.
pub fn judge(applied: Option<Seen>, live: Option<Seen>) -> Verdict {
    match (applied, live) {
        (None, _) => Verdict::InSync,
        (Some(_), None) => Verdict::Deleted,
        (Some(want), Some(have)) if have == want => Verdict::InSync,
        (Some(_), Some(_)) => Verdict::Changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    fn entry(manager: &str, op: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(op.into()),
            api_version: Some("apps/v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn another_managers_takeover_changes_the_fingerprint() {
        let ours = json!({"f:spec": {"f:replicas": {}, "f:template": {}}});
        let before = vec![entry("skewer", "Apply", ours.clone())];
        let fp = fingerprint(Some(&before), "skewer");
        assert!(fp.is_some());
        let seen = |fields: &[ManagedFieldsEntry], generation| {
            Some(Seen {
                fields: fingerprint(Some(fields), "skewer"),
                generation: Some(generation),
            })
        };
        let applied = seen(&before, 1);
        // kubectl edit: replicas moves to another manager.
        let after_edit = vec![
            entry("skewer", "Apply", json!({"f:spec": {"f:template": {}}})),
            entry(
                "kubectl-edit",
                "Update",
                json!({"f:spec": {"f:replicas": {}}}),
            ),
        ];
        assert_eq!(judge(applied, seen(&after_edit, 2)), Verdict::Changed);
        // kubectl scale on a 1.20 server: ownership stays, generation moves.
        assert_eq!(judge(applied, seen(&before, 2)), Verdict::Changed);
        // A controller's status update, or someone's new annotation: ours is untouched.
        let after_status = vec![
            entry("skewer", "Apply", ours),
            entry("kube-controller-manager", "Update", json!({"f:status": {}})),
            entry(
                "kubectl-annotate",
                "Update",
                json!({"f:metadata": {"f:annotations": {"f:note": {}}}}),
            ),
        ];
        assert_eq!(judge(applied, seen(&after_status, 1)), Verdict::InSync);
    }

    #[test]
    fn deletion_and_lost_ownership() {
        let applied = Seen {
            fields: Some(1),
            generation: Some(1),
        };
        assert_eq!(judge(Some(applied), None), Verdict::Deleted);
        let disowned = Seen {
            fields: None,
            generation: Some(1),
        };
        assert_eq!(
            judge(Some(applied), Some(disowned)),
            Verdict::Changed,
            "skewer owns nothing any more"
        );
        assert_eq!(judge(None, None), Verdict::InSync, "apply in flight");
        let other = vec![entry("someone", "Apply", json!({}))];
        assert_eq!(fingerprint(Some(&other), "skewer"), None);
    }
}
