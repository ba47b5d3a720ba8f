//! Patches from a Kustomization's `patches`: a JSON patch (RFC 6902, a YAML/JSON list of
//! operations) or a merge patch (RFC 7386, a mapping), applied to the objects a target selects.
//! A mapping patch without a target selects the object its own apiVersion, kind and name name.

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

use crate::object::{Manifest, split_api_version};

/// Which objects a patch applies to. Empty fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// Equality-based: `a=b,c!=d,e,!f`.
    pub label_selector: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchSpec {
    pub patch: String,
    pub target: Option<Selector>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PatchError {
    #[error("patches[{index}]: {message}")]
    Invalid { index: usize, message: String },
    #[error("patches[{index}] on {object}: {message}")]
    Apply {
        index: usize,
        object: String,
        message: String,
    },
}

enum Parsed {
    Json(json_patch::Patch),
    Merge(Value),
}

/// Applies every patch, in order, to the objects its target selects.
pub fn apply_patches(manifests: &mut [Manifest], patches: &[PatchSpec]) -> Result<(), PatchError> {
    for (index, spec) in patches.iter().enumerate() {
        let invalid = |message: String| PatchError::Invalid { index, message };
        let value: Value = serde_saphyr::from_str(&spec.patch).map_err(|e| {
            invalid(format!(
                "not YAML or JSON: {}",
                e.to_string().lines().next().unwrap_or_default()
            ))
        })?;
        let (parsed, implied) = match value {
            Value::Array(_) => {
                let p: json_patch::Patch = serde_json::from_value(value)
                    .map_err(|e| invalid(format!("not a JSON patch (RFC 6902): {e}")))?;
                (Parsed::Json(p), None)
            }
            Value::Object(_) => {
                let implied = implied_selector(&value);
                (Parsed::Merge(value), implied)
            }
            _ => {
                return Err(invalid(
                    "a patch must be a list of operations or a mapping".into(),
                ));
            }
        };
        let selector = match (&spec.target, implied) {
            (Some(t), _) => t.clone(),
            (None, Some(s)) => s,
            (None, None) => {
                return Err(invalid(
                    "has no target: a JSON patch needs `target`, a merge patch needs `target` or apiVersion, kind and metadata.name".into(),
                ));
            }
        };
        let labels = parse_label_selector(selector.label_selector.as_deref().unwrap_or_default())
            .map_err(&invalid)?;
        for m in manifests.iter_mut() {
            if !matches(&selector, &labels, m) {
                continue;
            }
            let object = m.display();
            let apply_err = |message: String| PatchError::Apply {
                index,
                object,
                message,
            };
            match &parsed {
                Parsed::Json(p) => {
                    json_patch::patch(&mut m.object, p).map_err(|e| apply_err(e.to_string()))?
                }
                Parsed::Merge(v) => json_patch::merge(&mut m.object, v),
            }
        }
    }
    Ok(())
}

fn implied_selector(patch: &Value) -> Option<Selector> {
    let api_version = patch["apiVersion"].as_str()?;
    let (group, version) = split_api_version(api_version);
    Some(Selector {
        group: Some(group.to_string()),
        version: Some(version.to_string()),
        kind: Some(patch["kind"].as_str()?.to_string()),
        name: Some(patch["metadata"]["name"].as_str()?.to_string()),
        namespace: patch["metadata"]["namespace"].as_str().map(str::to_string),
        label_selector: None,
    })
}

#[derive(Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

fn parse_label_selector(s: &str) -> Result<Vec<Requirement>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|part| {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if part.contains([' ', '(']) {
                return Err(format!(
                    "labelSelector '{s}': set-based selectors are not supported"
                ));
            } else {
                Requirement::Exists(part.into())
            };
            Ok(req)
        })
        .collect()
}

fn labels_of(m: &Manifest) -> BTreeMap<&str, &str> {
    m.object["metadata"]["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn matches(sel: &Selector, labels: &[Requirement], m: &Manifest) -> bool {
    let (group, version) = m.group_version();
    let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    if !(eq(&sel.group, group)
        && eq(&sel.version, version)
        && eq(&sel.kind, m.kind())
        && eq(&sel.name, m.name())
        && eq(&sel.namespace, m.namespace()))
    {
        return false;
    }
    let have = labels_of(m);
    labels.iter().all(|r| match r {
        Requirement::Equals(k, v) => have.get(k.as_str()) == Some(&v.as_str()),
        Requirement::NotEquals(k, v) => have.get(k.as_str()) != Some(&v.as_str()),
        Requirement::Exists(k) => have.contains_key(k.as_str()),
        Requirement::NotExists(k) => !have.contains_key(k.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy(name: &str, tier: &str) -> Manifest {
        Manifest {
            origin: "d.yaml#1".into(),
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "web", "labels": {"tier": tier}},
                "spec": {"replicas": 1}}),
        }
    }

    #[test]
    fn json_patch_on_targeted_objects() {
        let mut ms = vec![deploy("a", "front"), deploy("b", "back")];
        let spec = PatchSpec {
            patch: "- op: replace\n  path: /spec/replicas\n  value: 3\n".into(),
            target: Some(Selector {
                kind: Some("Deployment".into()),
                label_selector: Some("tier=front".into()),
                ..Default::default()
            }),
        };
        apply_patches(&mut ms, &[spec]).unwrap();
        assert_eq!(ms[0].object["spec"]["replicas"], 3);
        assert_eq!(ms[1].object["spec"]["replicas"], 1);
    }

    #[test]
    fn merge_patch_selects_by_its_own_identity() {
        let mut ms = vec![deploy("a", "x"), deploy("b", "x")];
        let spec = PatchSpec {
            patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b, labels: {tier: null}}\nspec: {replicas: 5}\n".into(),
            target: None,
        };
        apply_patches(&mut ms, &[spec]).unwrap();
        assert_eq!(ms[1].object["spec"]["replicas"], 5);
        assert!(ms[1].object["metadata"]["labels"].get("tier").is_none());
        assert_eq!(ms[0].object["spec"]["replicas"], 1);
    }

    #[test]
    fn failing_operation_names_patch_and_object() {
        let mut ms = vec![deploy("a", "x")];
        let spec = PatchSpec {
            patch: r#"[{"op": "remove", "path": "/spec/missing"}]"#.into(),
            target: Some(Selector {
                name: Some("a".into()),
                ..Default::default()
            }),
        };
        let err = apply_patches(&mut ms, &[spec]).unwrap_err();
        assert!(
            matches!(&err, PatchError::Apply { index: 0, object, .. } if object == "Deployment/web/a"),
            "{err}"
        );
    }

    #[test]
    fn untargeted_json_patch_is_refused() {
        let mut ms = vec![deploy("a", "x")];
        let spec = PatchSpec {
            patch: "[]".into(),
            target: None,
        };
        assert!(
            apply_patches(&mut ms, &[spec])
                .unwrap_err()
                .to_string()
                .contains("no target")
        );
    }

    #[test]
    fn label_selector_forms() {
        assert_eq!(
            parse_label_selector("a=b, c!=d,e,!f").unwrap(),
            vec![
                Requirement::Equals("a".into(), "b".into()),
                Requirement::NotEquals("c".into(), "d".into()),
                Requirement::Exists("e".into()),
                Requirement::NotExists("f".into()),
            ]
        );
        assert!(parse_label_selector("a in (b)").is_err());
    }
}
