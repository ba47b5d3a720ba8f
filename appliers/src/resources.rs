//! Which API resource serves a kind, and whether it is namespaced: discovery against the
//! cluster, cached per group/version/kind, plus the CRDs of the set being applied (so a
//! custom resource can be planned before its CRD exists on the server).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};
use thiserror::Error;

use crate::object::{Manifest, split_api_version};

#[derive(Debug, Error)]
pub enum ResourceError {
    #[error("the server has no kind {kind} in {api_version}, and no CRD in the source defines it")]
    Unknown { api_version: String, kind: String },
    #[error("discovery of {api_version} {kind} failed: {source}")]
    Discovery {
        api_version: String,
        kind: String,
        source: kube::Error,
    },
}

#[derive(Debug, Clone)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

impl Resolved {
    /// An `Api` for objects of this kind: in `namespace` if the kind is namespaced.
    pub fn api(&self, client: Client, namespace: &str) -> kube::Api<kube::api::DynamicObject> {
        if self.namespaced {
            kube::Api::namespaced_with(client, namespace, &self.resource)
        } else {
            kube::Api::all_with(client, &self.resource)
        }
    }
}

/// Discovery cache for one cluster (and one identity: impersonated callers see the same API).
pub struct Resources {
    client: Client,
    cache: Mutex<HashMap<(String, String, String), Resolved>>,
}

impl Resources {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn cached(&self, key: &(String, String, String)) -> Option<Resolved> {
        self.cache.lock().ok()?.get(key).cloned()
    }

    /// Resolves `apiVersion` + `kind` against the server. `pending_crds` are CRD manifests
    /// that are about to be applied; a kind they define resolves without the server.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
        pending_crds: &[&Manifest],
    ) -> Result<Resolved, ResourceError> {
        let (group, version) = split_api_version(api_version);
        let key = (group.to_string(), version.to_string(), kind.to_string());
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match pinned_kind(&self.client, &gvk).await {
            Ok((resource, caps)) => {
                let resolved = Resolved {
                    resource,
                    namespaced: caps.scope == Scope::Namespaced,
                };
                if let Ok(mut cache) = self.cache.lock() {
                    cache.insert(key, resolved.clone());
                }
                Ok(resolved)
            }
            Err(e) => {
                if let Some(r) = from_crds(group, version, kind, pending_crds) {
                    return Ok(r);
                }
                if is_not_found(&e) {
                    Err(ResourceError::Unknown {
                        api_version: api_version.into(),
                        kind: kind.into(),
                    })
                } else {
                    Err(ResourceError::Discovery {
                        api_version: api_version.into(),
                        kind: kind.into(),
                        source: e,
                    })
                }
            }
        }
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 404,
        // pinned_kind reports a kind missing from an existing group version this way.
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

/// A resource defined by one of the CRD manifests about to be applied.
fn from_crds(group: &str, version: &str, kind: &str, crds: &[&Manifest]) -> Option<Resolved> {
    crds.iter().find_map(|crd| {
        let spec = &crd.object["spec"];
        let served = spec["versions"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["name"] == version))
            || spec["version"] == version;
        if spec["group"] != group || spec["names"]["kind"] != kind || !served {
            return None;
        }
        let plural = spec["names"]["plural"].as_str()?;
        let gvk = GroupVersionKind::gvk(group, version, kind);
        Some(Resolved {
            resource: ApiResource::from_gvk_with_plural(&gvk, plural),
            namespaced: spec["scope"] != "Cluster",
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_defined_by_pending_crds() {
        let crd = Manifest {
            origin: String::new(),
            object: json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {"group": "example.com", "scope": "Cluster",
                    "names": {"kind": "Widget", "plural": "widgets"},
                    "versions": [{"name": "v1", "served": true, "storage": true}]}}),
        };
        let r = from_crds("example.com", "v1", "Widget", &[&crd]).unwrap();
        assert_eq!(r.resource.plural, "widgets");
        assert!(!r.namespaced);
        assert!(from_crds("example.com", "v2", "Widget", &[&crd]).is_none());
    }
}
