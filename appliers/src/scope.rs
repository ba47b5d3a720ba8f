//! Where on a cluster a sync may act: the namespaces a cluster's registration allows (Argo CD's
//! `namespaces` and `clusterResources`). Pure: checked after planning, before anything is
//! sent, and again before pruning.

use std::collections::BTreeSet;
use std::fmt;

use crate::object::ObjectId;

/// The namespaces a sync may touch, and whether cluster-scoped objects are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// `None`: every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    pub cluster_resources: bool,
}

impl Default for Scope {
    /// The whole cluster.
    fn default() -> Self {
        Self {
            namespaces: None,
            cluster_resources: true,
        }
    }
}

impl Scope {
    /// Argo CD's rule: a list of namespaces hides cluster-scoped objects unless
    /// `clusterResources` is true; no list allows everything.
    pub fn new(namespaces: BTreeSet<String>, cluster_resources: bool) -> Self {
        if namespaces.is_empty() {
            return Self::default();
        }
        Self {
            namespaces: Some(namespaces),
            cluster_resources,
        }
    }

    pub fn is_whole_cluster(&self) -> bool {
        self.namespaces.is_none()
    }

    /// Why `id` is out of scope, or `None` when it is in.
    pub fn refuses(&self, id: &ObjectId) -> Option<String> {
        let Some(allowed) = &self.namespaces else {
            return None;
        };
        if id.namespace.is_empty() {
            return (!self.cluster_resources).then(|| {
                format!("cluster-scoped objects are not allowed on this cluster ({self})")
            });
        }
        (!allowed.contains(&id.namespace)).then(|| {
            format!(
                "namespace {} is not allowed on this cluster ({self})",
                id.namespace
            )
        })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespaces {
            None => f.write_str("all namespaces"),
            Some(ns) => {
                let list: Vec<&str> = ns.iter().map(String::as_str).collect();
                write!(f, "namespaces: {}", list.join(", "))?;
                if self.cluster_resources {
                    f.write_str("; cluster-scoped objects allowed")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(namespace: &str, kind: &str) -> ObjectId {
        ObjectId {
            namespace: namespace.into(),
            name: "x".into(),
            group: String::new(),
            kind: kind.into(),
        }
    }

    #[test]
    fn no_list_allows_everything() {
        let s = Scope::new(BTreeSet::new(), false);
        assert!(s.is_whole_cluster());
        assert_eq!(s.refuses(&id("", "Namespace")), None);
        assert_eq!(s.refuses(&id("any", "ConfigMap")), None);
    }

    #[test]
    fn a_list_allows_its_namespaces_and_cluster_objects_only_when_asked() {
        let ns: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let s = Scope::new(ns.clone(), false);
        assert_eq!(s.refuses(&id("a", "ConfigMap")), None);
        assert_eq!(
            s.refuses(&id("c", "ConfigMap")).as_deref(),
            Some("namespace c is not allowed on this cluster (namespaces: a, b)")
        );
        assert!(s.refuses(&id("", "ClusterRole")).is_some());
        let with = Scope::new(ns, true);
        assert_eq!(with.refuses(&id("", "ClusterRole")), None);
    }
}
