//! Metadata a Kustomization adds to every object before applying: `targetNamespace` (on
//! namespaced objects), `commonMetadata` labels and annotations, and the owner labels that
//! mark an object as skewer's, which prune checks before deleting anything.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::object::Manifest;

pub const OWNER_NAME: &str = "skewer.dev/name";
pub const OWNER_NAMESPACE: &str = "skewer.dev/namespace";
/// Where an applied object came from in its source: `path/in/source.yaml#<document>`. Set
/// with the owner labels; it changes only when the object moves within the source, so it
/// costs no write per revision.
pub const ORIGIN: &str = "skewer.dev/origin";

/// Who owns the applied objects: the Kustomization's (or Application's) name and namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub namespace: String,
}

impl Owner {
    pub fn labels(&self) -> [(&'static str, &str); 2] {
        [(OWNER_NAME, &self.name), (OWNER_NAMESPACE, &self.namespace)]
    }

    /// Whether an object's labels say it belongs to this owner.
    pub fn owns(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        labels.is_some_and(|l| {
            self.labels()
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transform {
    /// Every namespaced object's namespace (Flux's `targetNamespace`).
    pub target_namespace: Option<String>,
    /// The namespace of namespaced objects that name none (Argo CD's
    /// `destination.namespace`).
    pub default_namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

fn insert_all(
    meta: &mut Map<String, Value>,
    field: &str,
    kv: impl IntoIterator<Item = (String, String)>,
) {
    let entry = meta
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    if let Some(map) = entry.as_object_mut() {
        for (k, v) in kv {
            map.insert(k, Value::String(v));
        }
    }
}

impl Transform {
    /// Applies the transform and owner labels (when there is an owner). `namespaced` says
    /// whether the object's kind is namespaced on the target cluster.
    pub fn apply(&self, m: &mut Manifest, namespaced: bool, owner: Option<&Owner>) {
        let Some(obj) = m.object.as_object_mut() else {
            return;
        };
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(meta) = meta.as_object_mut() else {
            return;
        };
        if namespaced {
            if let Some(ns) = &self.target_namespace {
                meta.insert("namespace".into(), Value::String(ns.clone()));
            } else if let Some(ns) = &self.default_namespace {
                let named = meta
                    .get("namespace")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                if !named {
                    meta.insert("namespace".into(), Value::String(ns.clone()));
                }
            }
        } else {
            // A namespace on a cluster-scoped object is an error on some servers; drop it.
            meta.remove("namespace");
        }
        let owner_labels = owner
            .into_iter()
            .flat_map(|o| o.labels())
            .map(|(k, v)| (k.to_string(), v.to_string()));
        let labels: Vec<(String, String)> = self
            .labels
            .clone()
            .into_iter()
            .chain(owner_labels)
            .collect();
        if !labels.is_empty() {
            insert_all(meta, "labels", labels);
        }
        let origin = owner
            .filter(|_| !m.origin.is_empty())
            .map(|_| (ORIGIN.to_string(), m.origin.clone()));
        if !self.annotations.is_empty() || origin.is_some() {
            let annotations = self.annotations.clone().into_iter().chain(origin);
            insert_all(meta, "annotations", annotations);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owned_objects_record_their_origin_and_others_do_not() {
        let owner = Owner {
            name: "apps".into(),
            namespace: "flux".into(),
        };
        let mut cm = Manifest {
            origin: "apps/web.yaml#2".into(),
            object: json!({"kind": "ConfigMap", "metadata": {"name": "c"}}),
        };
        let mut preview = cm.clone();
        Transform::default().apply(&mut cm, true, Some(&owner));
        assert_eq!(
            cm.object["metadata"]["annotations"][ORIGIN],
            "apps/web.yaml#2"
        );
        Transform::default().apply(&mut preview, true, None);
        assert!(preview.object["metadata"].get("annotations").is_none());
    }

    #[test]
    fn sets_namespace_labels_and_owner() {
        let t = Transform {
            target_namespace: Some("prod".into()),
            default_namespace: None,
            labels: [("team".to_string(), "a".to_string())].into(),
            annotations: [("note".to_string(), "x".to_string())].into(),
        };
        let owner = Owner {
            name: "apps".into(),
            namespace: "flux".into(),
        };
        let mut cm = Manifest {
            origin: String::new(),
            object: json!({"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "dev"}}),
        };
        t.apply(&mut cm, true, Some(&owner));
        assert_eq!(cm.object["metadata"]["namespace"], "prod");
        assert_eq!(
            cm.object["metadata"]["labels"],
            json!({"team": "a", OWNER_NAME: "apps", OWNER_NAMESPACE: "flux"})
        );
        assert_eq!(cm.object["metadata"]["annotations"]["note"], "x");
        let mut ns = Manifest {
            origin: String::new(),
            object: json!({"kind": "Namespace", "metadata": {"name": "n", "namespace": "bogus"}}),
        };
        t.apply(&mut ns, false, Some(&owner));
        assert!(ns.object["metadata"].get("namespace").is_none());
    }

    #[test]
    fn a_default_namespace_fills_only_objects_that_name_none() {
        let t = Transform {
            default_namespace: Some("team".into()),
            ..Default::default()
        };
        let mut named = Manifest {
            origin: String::new(),
            object: json!({"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "dev"}}),
        };
        let mut bare = Manifest {
            origin: String::new(),
            object: json!({"kind": "ConfigMap", "metadata": {"name": "c"}}),
        };
        t.apply(&mut named, true, None);
        t.apply(&mut bare, true, None);
        assert_eq!(named.object["metadata"]["namespace"], "dev");
        assert_eq!(bare.object["metadata"]["namespace"], "team");
    }

    #[test]
    fn owns_needs_both_labels() {
        let owner = Owner {
            name: "a".into(),
            namespace: "b".into(),
        };
        let mut l: BTreeMap<String, String> = [(OWNER_NAME.to_string(), "a".to_string())].into();
        assert!(!owner.owns(Some(&l)));
        l.insert(OWNER_NAMESPACE.into(), "b".into());
        assert!(owner.owns(Some(&l)));
        assert!(!owner.owns(None));
    }
}
