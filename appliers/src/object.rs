//! Object identity: the `<namespace>_<name>_<group>_<kind>` ids Flux writes in inventories,
//! and a manifest: one object as loaded from a file, remembering which file it came from.

use std::fmt;

use serde_json::Value;

/// Identifies an object in a cluster independent of its API version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    /// Empty for the core group.
    pub group: String,
    pub kind: String,
}

impl ObjectId {
    /// Parses Flux's inventory id format; `None` if it does not have four parts.
    pub fn parse(id: &str) -> Option<Self> {
        // Names and namespaces cannot contain '_' (DNS labels/subdomains), but group may
        // not either, so a plain split is exact.
        let mut parts = id.splitn(4, '_');
        Some(Self {
            namespace: parts.next()?.to_string(),
            name: parts.next()?.to_string(),
            group: parts.next()?.to_string(),
            kind: parts.next()?.to_string(),
        })
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}_{}_{}_{}",
            self.namespace, self.name, self.group, self.kind
        )
    }
}

/// One object to apply, as a JSON value, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The file (relative to the source root) and the 1-based index of the non-empty
    /// document it was read from, like `apps/web.yaml#2`.
    pub origin: String,
    pub object: Value,
}

impl Manifest {
    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or_default()
    }

    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }

    /// `(group, version)` of the apiVersion.
    pub fn group_version(&self) -> (&str, &str) {
        split_api_version(self.api_version())
    }

    pub fn id(&self) -> ObjectId {
        ObjectId {
            namespace: self.namespace().to_string(),
            name: self.name().to_string(),
            group: self.group_version().0.to_string(),
            kind: self.kind().to_string(),
        }
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.object["metadata"]["annotations"][key].as_str()
    }

    /// A human name for messages: `Kind/namespace/name` or `Kind/name`.
    pub fn display(&self) -> String {
        display_name(self.kind(), self.namespace(), self.name())
    }
}

/// `Kind/namespace/name`, or `Kind/name` for cluster-scoped objects.
pub fn display_name(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{namespace}/{name}")
    }
}

impl ObjectId {
    pub fn display(&self) -> String {
        display_name(&self.kind, &self.namespace, &self.name)
    }
}

/// A ConfigMap's id in namespace `ns`, for tests.
#[cfg(test)]
pub(crate) fn configmap_id(name: &str) -> ObjectId {
    ObjectId {
        namespace: "ns".into(),
        name: name.into(),
        group: String::new(),
        kind: "ConfigMap".into(),
    }
}

/// `apps/v1` → `("apps", "v1")`, `v1` → `("", "v1")`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_roundtrip() {
        let id = ObjectId {
            namespace: "default".into(),
            name: "cm".into(),
            group: String::new(),
            kind: "ConfigMap".into(),
        };
        assert_eq!(id.to_string(), "default_cm__ConfigMap");
        assert_eq!(ObjectId::parse("default_cm__ConfigMap"), Some(id));
        assert_eq!(ObjectId::parse("a_b_c"), None);
    }

    #[test]
    fn ids_from_manifests() {
        let m = Manifest {
            origin: "x.yaml".into(),
            object: serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "prod"}}),
        };
        assert_eq!(m.id().to_string(), "prod_web_apps_Deployment");
        assert_eq!(m.display(), "Deployment/prod/web");
    }
}
