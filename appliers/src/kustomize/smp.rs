//! Strategic merge patches, as kustomize applies them: maps merge key by key (`null` deletes),
//! lists of built-in kinds merge by their merge key where Kubernetes declares one (containers
//! by `name`, volume mounts by `mountPath`, …) and are replaced where it does not; the
//! directives `$patch: delete|replace|merge`, `$deleteFromPrimitiveList/<field>` and
//! `$setElementOrder/<field>` are honoured. As kustomize orders them, a merged list holds the
//! patch's elements first (each merged with its match), then the elements the patch did not
//! mention. Merge keys come from `data/merge-keys.json`, generated from the Kubernetes
//! OpenAPI, so no cluster is needed. Kinds it does not know (custom resources) merge maps and
//! replace lists.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

/// The merge schema of built-in kinds.
#[derive(Deserialize)]
struct Schema {
    /// `apiVersion/kind` → type name.
    kinds: HashMap<String, String>,
    /// type → field → `[type, strategy, merge key]` (the last two may be absent).
    types: HashMap<String, HashMap<String, Vec<Option<String>>>>,
    /// Kinds that are not namespaced (`apiVersion/kind`).
    #[serde(default)]
    cluster: Vec<String>,
}

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        serde_json::from_str(include_str!("../../data/merge-keys.json")).unwrap_or(Schema {
            kinds: HashMap::new(),
            types: HashMap::new(),
            cluster: Vec::new(),
        })
    })
}

/// Whether a kind is known to be cluster-scoped. Unknown kinds are taken as namespaced, as
/// kustomize takes them.
pub fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    let key = format!("{api_version}/{kind}");
    schema().cluster.contains(&key)
}

/// The type of a built-in kind's objects. A version the schema lacks (the schema is
/// Kubernetes 1.20's: `batch/v1` CronJob came later) takes the same kind's other version in the
/// same group, whose shape it kept.
fn root(api_version: &str, kind: &str) -> Option<&'static str> {
    let kinds = &schema().kinds;
    if let Some(t) = kinds.get(&format!("{api_version}/{kind}")) {
        return Some(t.as_str());
    }
    let (group, _) = crate::object::split_api_version(api_version);
    let mut others: Vec<(&String, &String)> = kinds
        .iter()
        .filter(|(k, _)| {
            let (gv, k_kind) = k.rsplit_once('/').unwrap_or_default();
            k_kind == kind && crate::object::split_api_version(gv).0 == group
        })
        .collect();
    others.sort();
    others.last().map(|(_, t)| t.as_str())
}

/// What the schema says of one field.
#[derive(Clone, Copy, Default)]
struct Field {
    ty: Option<&'static str>,
    merge: bool,
    key: Option<&'static str>,
}

fn field(ty: Option<&'static str>, name: &str) -> Option<Field> {
    let entry = schema().types.get(ty?)?.get(name)?;
    let part = |i: usize| {
        entry
            .get(i)
            .and_then(|v| v.as_deref())
            .filter(|s| !s.is_empty())
    };
    Some(Field {
        ty: part(0),
        merge: part(1).is_some_and(|s| s.split(',').any(|p| p == "merge")),
        key: part(2),
    })
}

/// Applies `patch` to `obj` (an object of `api_version`/`kind`). Returns `false` when the
/// patch says `$patch: delete` for the whole object.
pub fn apply(obj: &mut Value, patch: &Value, api_version: &str, kind: &str) -> bool {
    if patch.get("$patch").and_then(Value::as_str) == Some("delete") {
        return false;
    }
    merge(obj, patch, root(api_version, kind));
    true
}

/// Merges map `patch` into `dst`, whose schema type is `ty` (`None`: not known).
fn merge(dst: &mut Value, patch: &Value, ty: Option<&'static str>) {
    let Value::Object(p) = patch else {
        *dst = clean(patch);
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *dst = clean(patch);
            return;
        }
        Some("delete") => {
            *dst = Value::Null;
            return;
        }
        _ => {}
    }
    if !dst.is_object() {
        *dst = Value::Object(Map::new());
    }
    let Value::Object(d) = dst else { return };
    for (key, value) in p {
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(gone)) = (d.get_mut(list), value) {
                items.retain(|i| !gone.contains(i));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            d.remove(key);
            continue;
        }
        let info = field(ty, key);
        match (d.get_mut(key), value) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => {
                merge(existing, value, info.and_then(|f| f.ty));
                if existing.is_null() {
                    d.remove(key);
                }
            }
            (Some(Value::Array(existing)), Value::Array(items)) => {
                merge_list(existing, items, info);
            }
            (_, v) => {
                let v = clean(v);
                if !v.is_null() {
                    d.insert(key.clone(), v);
                }
            }
        }
        if let Some(Value::Array(order)) = p.get(&format!("$setElementOrder/{key}"))
            && let Some(Value::Array(items)) = d.get_mut(key)
        {
            reorder(items, order, info.and_then(|f| f.key));
        }
    }
}

/// Merges list `patch` into `dst` as the field's schema says: by merge key, as a union of
/// scalars, or (no strategy, or no schema) replaced.
fn merge_list(dst: &mut Vec<Value>, patch: &[Value], info: Option<Field>) {
    let replace = patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let Some(Field {
        merge: true,
        key,
        ty,
    }) = info.filter(|_| !replace)
    else {
        *dst = patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(clean)
            .collect();
        return;
    };
    let old = std::mem::take(dst);
    let Some(key) = key else {
        // Scalars: the patch's first, then the others not already there.
        for item in patch.iter().chain(&old) {
            if !dst.contains(item) {
                dst.push(clean(item));
            }
        }
        return;
    };
    let mut rest: Vec<Option<Value>> = old.into_iter().map(Some).collect();
    for item in patch {
        let id = &item[key];
        let matched = rest
            .iter()
            .position(|d| d.as_ref().is_some_and(|d| !id.is_null() && d[key] == *id));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(at) = matched {
                rest[at] = None;
            }
            continue;
        }
        let mut merged = matched
            .and_then(|at| rest[at].take())
            .unwrap_or(Value::Null);
        merge(&mut merged, item, ty);
        dst.push(merged);
    }
    dst.extend(rest.into_iter().flatten());
}

/// Puts `items` in the order `order` gives (by `key`), the unordered ones last.
fn reorder(items: &mut [Value], order: &[Value], key: Option<&str>) {
    let rank = |v: &Value| {
        let id = key.map_or(v, |k| &v[k]);
        order
            .iter()
            .position(|o| key.map_or(o, |k| &o[k]) == id)
            .unwrap_or(usize::MAX)
    };
    items.sort_by_key(rank);
}

/// A patch value without its directives (what ends up in the object).
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), clean(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                .map(clean)
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"a": "1"}},
            "spec": {"replicas": 1, "template": {"spec": {
                "containers": [
                    {"name": "app", "image": "app:1", "args": ["--a"], "env": [{"name": "X", "value": "1"}]},
                    {"name": "sidecar", "image": "proxy:1"}],
                "volumes": [{"name": "data", "emptyDir": {}}]}}}})
    }

    fn patched(patch: Value) -> Value {
        let mut d = deployment();
        assert!(apply(&mut d, &patch, "apps/v1", "Deployment"));
        d
    }

    #[test]
    fn containers_merge_by_name_and_args_are_replaced() {
        let d = patched(json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:2", "args": ["--b"], "env": [{"name": "Y", "value": "2"}]},
            {"name": "new", "image": "new:1"}]}}}}));
        let c = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!(c.as_array().unwrap().len(), 3);
        // As kustomize orders them: the patch's elements first, then the others.
        let names: Vec<&str> = c
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["app", "new", "sidecar"]);
        assert_eq!(c[0]["image"], "app:2");
        assert_eq!(c[0]["args"], json!(["--b"]), "args have no merge strategy");
        assert_eq!(
            c[0]["env"],
            json!([{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}])
        );
    }

    #[test]
    fn nulls_and_directives() {
        let d = patched(json!({"metadata": {"labels": {"a": null, "b": "2"}},
            "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}}));
        assert_eq!(d["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        let d = patched(
            json!({"spec": {"template": {"spec": {"volumes": [{"name": "cfg", "configMap": {"name": "c"}}, {"$patch": "replace"}]}}}}),
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["volumes"],
            json!([{"name": "cfg", "configMap": {"name": "c"}}])
        );
        let mut whole = deployment();
        assert!(!apply(
            &mut whole,
            &json!({"$patch": "delete"}),
            "apps/v1",
            "Deployment"
        ));
        let mut cm = json!({"metadata": {"finalizers": ["a"]}});
        apply(
            &mut cm,
            &json!({"metadata": {"finalizers": ["b", "a"]}}),
            "v1",
            "ConfigMap",
        );
        assert_eq!(
            cm["metadata"]["finalizers"],
            json!(["b", "a"]),
            "a union, the patch's first"
        );
    }

    #[test]
    fn unknown_kinds_merge_maps_and_replace_lists() {
        let mut obj = json!({"spec": {"items": [{"name": "a", "v": 1}, {"name": "c"}], "tags": ["x"], "nested": {"k": 1}}});
        let patch = json!({"spec": {"items": [{"name": "a", "v": 2}, {"name": "b"}], "tags": ["y"], "nested": {"j": 2}}});
        assert!(apply(&mut obj, &patch, "example.com/v1", "Widget"));
        assert_eq!(
            obj["spec"]["items"],
            json!([{"name": "a", "v": 2}, {"name": "b"}])
        );
        assert_eq!(obj["spec"]["tags"], json!(["y"]));
        assert_eq!(obj["spec"]["nested"], json!({"k": 1, "j": 2}));
    }

    #[test]
    fn kinds_newer_than_the_schema_use_their_older_version() {
        let mut cj = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b"}]}}}}}});
        let patch = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}}}});
        apply(&mut cj, &patch, "batch/v1", "CronJob");
        let c = &cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            c.as_array().unwrap().len(),
            2,
            "merged by name, not replaced"
        );
    }

    #[test]
    fn scopes_come_from_the_schema() {
        assert!(is_cluster_scoped("v1", "Namespace"));
        assert!(is_cluster_scoped(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole"
        ));
        assert!(!is_cluster_scoped("apps/v1", "Deployment"));
        assert!(!is_cluster_scoped("example.com/v1", "Widget"));
    }
}
