//! `skewer export`: skewer's objects as one would write them, to apply again elsewhere or keep
//! in Git: `apiVersion`, `kind`, `metadata` (name, namespace, labels, annotations) and `spec`;
//! no status, nothing the server set, no one-off request annotations.

use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Map, Value};

use crate::named::{ControlError, Kind, Named};

/// Annotations that ask for something once (a reconcile, a sync) or that kubectl keeps: not
/// part of what one writes.
const DROPPED_ANNOTATIONS: [&str; 3] = [
    skewer_api::RECONCILE_REQUESTED_AT,
    skewer_api::SYNC_REQUESTED_AT,
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// What is asked for: one object, or every object of a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exported {
    One(Named),
    All(Kind),
}

impl std::str::FromStr for Exported {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains('/') {
            s.parse().map(Exported::One)
        } else {
            Kind::parse(s).map(Exported::All)
        }
    }
}

/// `obj` as one would write it (see the module's text).
pub fn clean(obj: &Value) -> Value {
    let mut out = Map::new();
    for key in ["apiVersion", "kind"] {
        if let Some(v) = obj.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    let meta = &obj["metadata"];
    let mut metadata = Map::new();
    for key in ["name", "namespace", "labels"] {
        if let Some(v) = meta.get(key).filter(|v| !is_empty(v)) {
            metadata.insert(key.into(), v.clone());
        }
    }
    if let Some(Value::Object(annotations)) = meta.get("annotations") {
        let kept: Map<String, Value> = annotations
            .iter()
            .filter(|(k, _)| !DROPPED_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            metadata.insert("annotations".into(), Value::Object(kept));
        }
    }
    out.insert("metadata".into(), Value::Object(metadata));
    if let Some(spec) = obj.get("spec") {
        out.insert("spec".into(), spec.clone());
    }
    Value::Object(out)
}

fn is_empty(v: &Value) -> bool {
    v.is_null() || v.as_object().is_some_and(Map::is_empty)
}

/// The objects asked for in `namespace` (every namespace: `None`), cleaned, in the order asked
/// and by name within a kind.
pub async fn export(
    client: &kube::Client,
    namespace: Option<&str>,
    asked: &[Exported],
) -> Result<Vec<Value>, ControlError> {
    let api = |kind: Kind| -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &kind.resource()),
            None => Api::all_with(client.clone(), &kind.resource()),
        }
    };
    let mut out = Vec::new();
    for what in asked {
        match what {
            Exported::One(named) => {
                let obj = api(named.kind).get_opt(&named.name).await?.ok_or_else(|| {
                    ControlError::Missing(named.clone(), namespace.unwrap_or("<all>").to_string())
                })?;
                out.push(clean(&serde_json::to_value(obj).unwrap_or(Value::Null)));
            }
            Exported::All(kind) => {
                let mut items = api(*kind).list(&ListParams::default()).await?.items;
                items.sort_by(|a, b| {
                    (&a.metadata.namespace, &a.metadata.name)
                        .cmp(&(&b.metadata.namespace, &b.metadata.name))
                });
                out.extend(
                    items
                        .iter()
                        .map(|o| clean(&serde_json::to_value(o).unwrap_or(Value::Null))),
                );
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_export_keeps_what_one_writes_and_nothing_the_server_set() {
        let live = json!({
            "apiVersion": "skewer.dev/v1alpha1", "kind": "Kustomization",
            "metadata": {
                "name": "web", "namespace": "apps", "uid": "1234", "resourceVersion": "99",
                "generation": 3, "creationTimestamp": "2026-11-26T00:00:00Z",
                "finalizers": ["skewer.dev/finalizer"], "managedFields": [{"manager": "kubectl"}],
                "labels": {"team": "a"},
                "annotations": {
                    "skewer.dev/reconcile-requested-at": "now",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "note": "kept"
                }
            },
            "spec": {"path": "./apps", "interval": "5m"},
            "status": {"conditions": []}
        });
        assert_eq!(
            clean(&live),
            json!({
                "apiVersion": "skewer.dev/v1alpha1", "kind": "Kustomization",
                "metadata": {"name": "web", "namespace": "apps", "labels": {"team": "a"}, "annotations": {"note": "kept"}},
                "spec": {"path": "./apps", "interval": "5m"}
            })
        );
        let bare = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n", "labels": {}, "annotations": {"skewer.dev/sync-requested-at": "t"}}});
        assert_eq!(
            clean(&bare),
            json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}})
        );
    }

    #[test]
    fn a_kind_alone_asks_for_all_of_it() {
        assert_eq!("ks".parse(), Ok(Exported::All(Kind::Kustomization)));
        assert!(matches!("app/guestbook".parse(), Ok(Exported::One(_))));
        assert!("deploy".parse::<Exported>().is_err());
    }
}
