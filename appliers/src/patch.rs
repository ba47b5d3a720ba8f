//! Patches as kustomize applies them: a JSON patch (RFC 6902, a list of operations) or one or
//! more strategic merge patches (see [`crate::kustomize::smp`]), applied to the objects a
//! target selects. Both a kustomization's `patches`, `patchesStrategicMerge` and
//! `patchesJson6902`, and a Kustomization's own `spec.patches` (which Flux hands to kustomize)
//! come through here.
//!
//! A target selects by group, version and kind, by name and namespace (regular expressions,
//! matched whole), and by label and annotation selectors. A strategic merge patch without a
//! target selects the one object its own apiVersion, kind and name name, and it is an error if
//! there is none; a target that selects nothing is not.

use regex::Regex;
use serde_json::Value;
use thiserror::Error;

use crate::kustomize::smp;
use crate::object::{Manifest, display_name, split_api_version};
use crate::selector::LabelSelector;

/// Which objects a patch applies to (kustomize's `target`). Empty fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: Option<String>,
    /// A regular expression the whole name must match.
    pub name: Option<String>,
    /// A regular expression the whole namespace must match.
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub annotation_selector: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchSpec {
    /// The patch, as YAML or JSON.
    pub patch: String,
    pub target: Option<Selector>,
    /// Let the patch change an object's name (otherwise it keeps its own).
    pub allow_name_change: bool,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PatchError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{field} on {object}: {message}")]
    Apply {
        field: String,
        object: String,
        message: String,
    },
}

/// Something a patch may change: an object, and the names it had before (kustomize selects
/// objects by those too).
pub trait Patchable {
    fn object(&self) -> &Value;
    fn object_mut(&mut self) -> &mut Value;
    fn earlier_names(&self) -> &[String] {
        &[]
    }
    /// A patch renamed it; `old` was its name.
    fn renamed_from(&mut self, _old: String) {}
}

impl Patchable for Manifest {
    fn object(&self) -> &Value {
        &self.object
    }
    fn object_mut(&mut self) -> &mut Value {
        &mut self.object
    }
}

/// Applies `patches` in order; their errors are named `patches[i]`.
pub fn apply_patches<T: Patchable>(
    items: &mut Vec<T>,
    patches: &[PatchSpec],
) -> Result<(), PatchError> {
    for (i, spec) in patches.iter().enumerate() {
        apply_patch(items, &format!("patches[{i}]"), spec)?;
    }
    Ok(())
}

/// Applies one patch; `field` names it in errors (like `patchesJson6902[2]`).
pub fn apply_patch<T: Patchable>(
    items: &mut Vec<T>,
    field: &str,
    spec: &PatchSpec,
) -> Result<(), PatchError> {
    let invalid = |message: String| PatchError::Invalid {
        field: field.to_string(),
        message,
    };
    let docs: Vec<Value> = crate::load::parse_yaml_documents(&spec.patch)
        .map_err(|e| invalid(format!("not YAML or JSON: {e}")))?
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let target = spec
        .target
        .as_ref()
        .map(Target::new)
        .transpose()
        .map_err(invalid)?;
    match docs.as_slice() {
        [] => Ok(()),
        [Value::Array(_)] => {
            let ops: json_patch::Patch = serde_json::from_value(docs[0].clone())
                .map_err(|e| invalid(format!("not a JSON patch (RFC 6902): {e}")))?;
            let Some(target) = target else {
                return Err(invalid("a JSON patch needs a target".into()));
            };
            for item in items.iter_mut().filter(|i| target.selects(*i)) {
                let before = identity(item.object());
                json_patch::patch(item.object_mut(), &ops).map_err(|e| PatchError::Apply {
                    field: field.to_string(),
                    object: describe(item.object()),
                    message: e.to_string(),
                })?;
                keep_identity(item, before, spec.allow_name_change);
            }
            Ok(())
        }
        docs => {
            for doc in docs {
                if !doc.is_object() {
                    return Err(invalid(
                        "a patch must be a list of operations or a mapping".into(),
                    ));
                }
                strategic(items, field, spec, target.as_ref(), doc)?;
            }
            Ok(())
        }
    }
}

/// One strategic merge patch document, applied to its target's objects or to the object it
/// names itself.
fn strategic<T: Patchable>(
    items: &mut Vec<T>,
    field: &str,
    spec: &PatchSpec,
    target: Option<&Target>,
    doc: &Value,
) -> Result<(), PatchError> {
    let chosen: Vec<usize> = match target {
        Some(t) => (0..items.len()).filter(|&i| t.selects(&items[i])).collect(),
        None => {
            let found: Vec<usize> = (0..items.len())
                .filter(|&i| names_itself(doc, &items[i]))
                .collect();
            if found.is_empty() {
                return Err(PatchError::Invalid {
                    field: field.to_string(),
                    message: format!("no object matches the patch of {}", describe(doc)),
                });
            }
            if found.len() > 1 {
                return Err(PatchError::Invalid {
                    field: field.to_string(),
                    message: format!(
                        "the patch of {} matches {} objects; give it a namespace",
                        describe(doc),
                        found.len()
                    ),
                });
            }
            found
        }
    };
    let mut deleted = Vec::new();
    for i in chosen {
        let item = &mut items[i];
        let before = identity(item.object());
        let (api_version, kind) = (before.0.clone(), before.1.clone());
        if !smp::apply(item.object_mut(), doc, &api_version, &kind) {
            deleted.push(i);
            continue;
        }
        keep_identity(item, before, spec.allow_name_change && target.is_some());
    }
    for i in deleted.into_iter().rev() {
        items.remove(i);
    }
    Ok(())
}

type Identity = (String, String, String, Value);

/// apiVersion, kind, name and namespace.
fn identity(obj: &Value) -> Identity {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&obj["apiVersion"]),
        s(&obj["kind"]),
        s(&obj["metadata"]["name"]),
        obj["metadata"]["namespace"].clone(),
    )
}

/// Puts back the name and namespace a patch changed, unless name changes are allowed (then
/// the object remembers its old name).
fn keep_identity<T: Patchable>(item: &mut T, before: Identity, allow_name_change: bool) {
    let (_, _, name, namespace) = before;
    let now = identity(item.object());
    if now.2 != name {
        if allow_name_change {
            item.renamed_from(name);
        } else {
            item.object_mut()["metadata"]["name"] = Value::String(name);
        }
    }
    if now.3 != namespace && !allow_name_change {
        match namespace {
            Value::Null => {
                if let Some(m) = item.object_mut()["metadata"].as_object_mut() {
                    m.remove("namespace");
                }
            }
            ns => item.object_mut()["metadata"]["namespace"] = ns,
        }
    }
}

/// Whether a patch document's own apiVersion, kind, name (current or earlier) and namespace
/// (when it has one) are the object's.
fn names_itself<T: Patchable>(doc: &Value, item: &T) -> bool {
    let obj = item.object();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let same_name =
        obj["metadata"]["name"] == name || item.earlier_names().iter().any(|n| n == name);
    let (pg, pv) = split_api_version(doc["apiVersion"].as_str().unwrap_or_default());
    let (og, ov) = split_api_version(obj["apiVersion"].as_str().unwrap_or_default());
    let ns = doc["metadata"]["namespace"].as_str();
    same_name
        && doc["kind"] == obj["kind"]
        && pg == og
        && (pv.is_empty() || pv == ov)
        && ns.is_none_or(|ns| obj["metadata"]["namespace"].as_str().unwrap_or_default() == ns)
}

/// `Kind/namespace/name` of an object or patch, for messages.
fn describe(obj: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    display_name(
        &s(&obj["kind"]),
        &s(&obj["metadata"]["namespace"]),
        &s(&obj["metadata"]["name"]),
    )
}

/// A compiled [`Selector`].
struct Target {
    sel: Selector,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: LabelSelector,
    annotations: LabelSelector,
}

impl Target {
    fn new(sel: &Selector) -> Result<Self, String> {
        let regex = |field: &str, v: &Option<String>| {
            v.as_deref()
                .filter(|s| !s.is_empty())
                .map(|s| {
                    Regex::new(&format!("^(?:{s})$")).map_err(|e| format!("target.{field}: {e}"))
                })
                .transpose()
        };
        Ok(Self {
            name: regex("name", &sel.name)?,
            namespace: regex("namespace", &sel.namespace)?,
            labels: LabelSelector::parse(sel.label_selector.as_deref().unwrap_or_default())
                .map_err(|e| format!("target.labelSelector: {e}"))?,
            annotations: LabelSelector::parse(
                sel.annotation_selector.as_deref().unwrap_or_default(),
            )
            .map_err(|e| format!("target.annotationSelector: {e}"))?,
            sel: sel.clone(),
        })
    }

    fn selects<T: Patchable>(&self, item: &T) -> bool {
        let obj = item.object();
        let (group, version) = split_api_version(obj["apiVersion"].as_str().unwrap_or_default());
        let eq = |want: &Option<String>, have: &str| {
            want.as_deref().is_none_or(|w| w.is_empty() || w == have)
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        eq(&self.sel.group, group)
            && eq(&self.sel.version, version)
            && eq(&self.sel.kind, obj["kind"].as_str().unwrap_or_default())
            && self.name.as_ref().is_none_or(|r| {
                r.is_match(name) || item.earlier_names().iter().any(|n| r.is_match(n))
            })
            && self
                .namespace
                .as_ref()
                .is_none_or(|r| r.is_match(namespace))
            && self.labels.matches(&obj["metadata"]["labels"])
            && self.annotations.matches(&obj["metadata"]["annotations"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy(name: &str, tier: &str) -> Manifest {
        Manifest {
            origin: "d.yaml#1".into(),
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "web", "labels": {"tier": tier}, "annotations": {"team": "a"}},
                "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}, {"name": "proxy", "image": "p:1"}]}}}}),
        }
    }

    fn spec(patch: &str, target: Option<Selector>) -> PatchSpec {
        PatchSpec {
            patch: patch.into(),
            target,
            allow_name_change: false,
        }
    }

    #[test]
    fn json_patch_on_targeted_objects() {
        let mut ms = vec![deploy("a", "front"), deploy("b", "back")];
        let target = Selector {
            kind: Some("Deployment".into()),
            label_selector: Some("tier in (front)".into()),
            annotation_selector: Some("team=a".into()),
            ..Default::default()
        };
        apply_patches(
            &mut ms,
            &[spec(
                "- op: replace\n  path: /spec/replicas\n  value: 3\n",
                Some(target),
            )],
        )
        .unwrap();
        assert_eq!(ms[0].object["spec"]["replicas"], 3);
        assert_eq!(ms[1].object["spec"]["replicas"], 1);
    }

    #[test]
    fn strategic_merge_by_own_identity_merges_containers_by_name() {
        let mut ms = vec![deploy("a", "x"), deploy("b", "x")];
        let patch = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b, labels: {tier: null}}\nspec:\n  replicas: 5\n  template: {spec: {containers: [{name: app, image: app:2}]}}\n";
        apply_patches(&mut ms, &[spec(patch, None)]).unwrap();
        let b = &ms[1].object;
        assert_eq!(b["spec"]["replicas"], 5);
        assert!(b["metadata"]["labels"].get("tier").is_none());
        let containers = b["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 2, "merged by name, not replaced");
        assert_eq!(containers[0]["image"], "app:2");
        assert_eq!(ms[0].object["spec"]["replicas"], 1);
    }

    #[test]
    fn targets_match_names_by_regular_expression_and_keep_names() {
        let mut ms = vec![
            deploy("web-a", "x"),
            deploy("web-b", "x"),
            deploy("db", "x"),
        ];
        let target = Selector {
            name: Some("web-.*".into()),
            ..Default::default()
        };
        let patch = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: whatever}\nspec: {replicas: 2}\n";
        apply_patches(&mut ms, &[spec(patch, Some(target))]).unwrap();
        let replicas: Vec<&Value> = ms.iter().map(|m| &m.object["spec"]["replicas"]).collect();
        assert_eq!(replicas, [&json!(2), &json!(2), &json!(1)]);
        assert_eq!(
            ms[0].object["metadata"]["name"], "web-a",
            "the patch's name is not taken"
        );
    }

    #[test]
    fn errors_name_the_patch_and_object() {
        let mut ms = vec![deploy("a", "x")];
        let target = Some(Selector {
            name: Some("a".into()),
            ..Default::default()
        });
        let err = apply_patches(
            &mut ms,
            &[spec(
                r#"[{"op": "remove", "path": "/spec/missing"}]"#,
                target,
            )],
        )
        .unwrap_err();
        assert!(
            matches!(&err, PatchError::Apply { object, .. } if object == "Deployment/web/a"),
            "{err}"
        );
        let err = apply_patches(&mut ms, &[spec("[]", None)]).unwrap_err();
        assert!(err.to_string().contains("needs a target"), "{err}");
        let err = apply_patches(
            &mut ms,
            &[spec(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: nope}\n",
                None,
            )],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "patches[0]: no object matches the patch of Deployment/nope"
        );
        let nothing = Some(Selector {
            kind: Some("Service".into()),
            ..Default::default()
        });
        assert_eq!(
            apply_patches(&mut ms, &[spec("[]", nothing)]),
            Ok(()),
            "a target that selects nothing is fine"
        );
    }

    #[test]
    fn a_delete_patch_removes_the_object() {
        let mut ms = vec![deploy("a", "x"), deploy("b", "x")];
        apply_patches(
            &mut ms,
            &[spec(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n$patch: delete\n",
                None,
            )],
        )
        .unwrap();
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].object["metadata"]["name"], "b");
    }
}
