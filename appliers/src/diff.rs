//! What a server-side dry run says would change, field by field (pure). The live object and
//! the object the dry run returns are compared leaf by leaf; fields the server keeps for itself
//! (managed fields, resource version, timestamps, status) are left out, and a Secret's values
//! are masked before anything is compared or printed, so a diff never shows them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// One field that differs: its path (`spec.template.spec.containers[name=web].image`), and
/// its value before and after (`None`: absent on that side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// How one object would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectDiff {
    /// Not on the cluster: it would be created.
    Created,
    /// On the cluster and owned, but gone from the source: it would be pruned.
    Deleted,
    /// These fields would change.
    Changed(Vec<Change>),
}

/// What a masked Secret value reads as, and what a changed one reads as.
pub const MASKED: &str = "*** (masked)";
pub const MASKED_BEFORE: &str = "*** (masked, before)";
pub const MASKED_AFTER: &str = "*** (masked, after)";

/// Metadata the server writes for itself; a diff of them is noise.
const SERVER_METADATA: [&str; 6] = [
    "managedFields",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "uid",
    "selfLink",
];

/// The fields in which `live` and `desired` (the dry run's answer) differ, a Secret's values
/// masked. Empty when the apply would change nothing.
pub fn changes(live: &Value, desired: &Value) -> Vec<Change> {
    let (mut live, mut desired) = (live.clone(), desired.clone());
    mask_secret_pair(&mut live, &mut desired);
    for v in [&mut live, &mut desired] {
        strip_server_fields(v);
    }
    let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
    leaves(&live, String::new(), &mut before);
    leaves(&desired, String::new(), &mut after);
    let mut out = Vec::new();
    for (path, b) in &before {
        match after.get(path) {
            Some(a) if a == b => {}
            a => out.push(Change {
                path: path.clone(),
                before: Some(b.clone()),
                after: a.cloned(),
            }),
        }
    }
    for (path, a) in &after {
        if !before.contains_key(path) {
            out.push(Change {
                path: path.clone(),
                before: None,
                after: Some(a.clone()),
            });
        }
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    out
}

/// `obj` with a Secret's values masked, for printing an object that would be created.
pub fn masked(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if is_secret(&obj) {
        for key in ["data", "stringData"] {
            if let Some(Value::Object(m)) = obj.get_mut(key) {
                m.values_mut()
                    .for_each(|v| *v = Value::String(MASKED.into()));
            }
        }
    }
    strip_server_fields(&mut obj);
    obj
}

fn is_secret(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str) == Some("Secret")
        && v.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// Masks a Secret's values on both sides, keeping only whether each changed.
fn mask_secret_pair(live: &mut Value, desired: &mut Value) {
    if !is_secret(live) && !is_secret(desired) {
        return;
    }
    for key in ["data", "stringData"] {
        let before = live.get(key).cloned().unwrap_or(Value::Null);
        let after = desired.get(key).cloned().unwrap_or(Value::Null);
        let mask = |side: &mut Value, other: &Value, changed: &str| {
            if let Some(Value::Object(m)) = side.get_mut(key) {
                for (k, v) in m.iter_mut() {
                    let same = other.get(k) == Some(v);
                    *v = Value::String(if same { MASKED } else { changed }.into());
                }
            }
        };
        mask(live, &after, MASKED_BEFORE);
        mask(desired, &before, MASKED_AFTER);
    }
}

fn strip_server_fields(v: &mut Value) {
    if let Some(Value::Object(meta)) = v.get_mut("metadata") {
        for k in SERVER_METADATA {
            meta.remove(k);
        }
        if let Some(Value::Object(a)) = meta.get_mut("annotations") {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
            a.remove("deployment.kubernetes.io/revision");
        }
        if meta.get("annotations").is_some_and(is_empty_object) {
            meta.remove("annotations");
        }
    }
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
}

fn is_empty_object(v: &Value) -> bool {
    v.as_object().is_some_and(serde_json::Map::is_empty)
}

/// Every leaf of `v` by its path. Lists of objects that all carry a `name` are keyed by it
/// (`containers[name=web]`), so that inserting an element does not show every later one as
/// changed; other lists by index.
fn leaves(v: &Value, path: String, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    format!("{path}.{k}")
                } else {
                    format!("{path}[{k:?}]")
                };
                leaves(child, p, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let named: Option<Vec<&str>> = items
                .iter()
                .map(|i| i.get("name").and_then(Value::as_str))
                .collect();
            for (i, child) in items.iter().enumerate() {
                let key = match &named {
                    Some(names) => format!("name={}", names[i]),
                    None => i.to_string(),
                };
                leaves(child, format!("{path}[{key}]"), out);
            }
        }
        other => {
            out.insert(path, scalar(other));
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => other.to_string(),
    }
}

/// A readable report of one object's diff: a heading (`~ Deployment/apps/web`), then a line
/// per changed field (`  spec.replicas: 1 → 3`). Multi-line values are shown on lines of
/// their own.
pub fn render(object: &str, diff: &ObjectDiff) -> String {
    let mut out = String::new();
    match diff {
        ObjectDiff::Created => {
            let _ = writeln!(out, "+ {object} (created)");
        }
        ObjectDiff::Deleted => {
            let _ = writeln!(out, "- {object} (pruned)");
        }
        ObjectDiff::Changed(changes) => {
            let _ = writeln!(out, "~ {object}");
            for c in changes {
                let show = |v: &Option<String>| match v {
                    None => "(absent)".to_string(),
                    Some(s) if s.contains('\n') => {
                        format!("|\n{}", indent(s, "      "))
                    }
                    Some(s) => s.clone(),
                };
                let (b, a) = (show(&c.before), show(&c.after));
                if b.contains('\n') || a.contains('\n') {
                    let _ = writeln!(out, "  {}:\n    - {b}\n    + {a}", c.path);
                } else {
                    let _ = writeln!(out, "  {}: {b} → {a}", c.path);
                }
            }
        }
    }
    out
}

fn indent(s: &str, by: &str) -> String {
    s.lines()
        .map(|l| format!("{by}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: u32, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps", "resourceVersion": "7",
                "managedFields": [{"manager": "skewer"}], "uid": "u"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "sidecar", "image": "envoy:1"},
                {"name": "web", "image": image}]}}},
            "status": {"readyReplicas": 1}})
    }

    #[test]
    fn only_the_changed_fields_are_named() {
        let mut after = deployment(3, "web:2");
        after["metadata"]["resourceVersion"] = json!("8");
        let got = changes(&deployment(1, "web:1"), &after);
        assert_eq!(
            got,
            vec![
                Change {
                    path: "spec.replicas".into(),
                    before: Some("1".into()),
                    after: Some("3".into()),
                },
                Change {
                    path: "spec.template.spec.containers[name=web].image".into(),
                    before: Some("web:1".into()),
                    after: Some("web:2".into()),
                },
            ]
        );
        assert!(changes(&deployment(1, "web:1"), &deployment(1, "web:1")).is_empty());
    }

    #[test]
    fn added_and_removed_fields_show_as_absent() {
        let before = json!({"kind": "ConfigMap", "apiVersion": "v1", "data": {"a": "1"}});
        let after = json!({"kind": "ConfigMap", "apiVersion": "v1", "data": {"b": "2"}});
        let got = render(
            "ConfigMap/x",
            &ObjectDiff::Changed(changes(&before, &after)),
        );
        assert_eq!(
            got,
            "~ ConfigMap/x\n  data.a: 1 → (absent)\n  data.b: (absent) → 2\n"
        );
    }

    #[test]
    fn secret_values_never_appear_and_changes_still_show() {
        let before = json!({"kind": "Secret", "apiVersion": "v1",
            "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="}});
        let after = json!({"kind": "Secret", "apiVersion": "v1",
            "data": {"password": "czNjcjN0", "user": "YWRtaW4="}});
        let diff = changes(&before, &after);
        let text = render("Secret/x", &ObjectDiff::Changed(diff.clone()));
        assert_eq!(diff.len(), 1, "{text}");
        assert!(text.contains("data.password: *** (masked, before) → *** (masked, after)"));
        for secret in ["aHVudGVyMg", "czNjcjN0", "YWRtaW4"] {
            assert!(!text.contains(secret), "{text}");
        }
        let created = serde_json::to_string(&masked(&after)).unwrap();
        assert!(!created.contains("czNjcjN0") && created.contains(MASKED));
    }

    #[test]
    fn multiline_values_are_shown_on_lines_of_their_own() {
        let before = json!({"data": {"conf": "a: 1\nb: 2\n"}});
        let after = json!({"data": {"conf": "a: 1\nb: 3\n"}});
        let got = render(
            "ConfigMap/x",
            &ObjectDiff::Changed(changes(&before, &after)),
        );
        assert!(
            got.contains(
                "  data.conf:\n    - |\n      a: 1\n      b: 2\n    + |\n      a: 1\n      b: 3"
            ),
            "{got}"
        );
    }
}
