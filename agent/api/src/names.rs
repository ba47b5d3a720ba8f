//! Names every layer shares: skewer's field manager and finalizer, the annotations it reads
//! and writes, and how an owner (a deploy object) is keyed in its tables.

use std::fmt;

/// The field manager of every server-side apply skewer makes.
pub const FIELD_MANAGER: &str = "skewer";
/// The finalizer deploy kinds carry, so that deleting them can prune.
pub const FINALIZER: &str = "finalizers.skewer.dev";
/// `status.artifact.metadata` keys of a Git artifact: who made the commit, and its message.
pub const COMMIT_AUTHOR: &str = "skewer.dev/commit-author";
pub const COMMIT_MESSAGE: &str = "skewer.dev/commit-message";

/// The field manager with which ApplicationSets write the Applications they generate.
pub const APPSET_FIELD_MANAGER: &str = "skewer-applicationset";
/// The label on every Application an ApplicationSet generated (its value: the set's name when
/// that fits a label value), so that only those are watched and cached for sets.
pub const APPSET_LABEL: &str = "skewer.dev/applicationset";
/// The field manager with which a RollingSync asks its Applications to sync or refresh.
pub const ROLLOUT_FIELD_MANAGER: &str = "skewer-rollout";
/// On an Application an ApplicationSet's RollingSync generated: it compares but never syncs by
/// itself (`syncPolicy.automated` still says how a sync prunes and heals); the ApplicationSet
/// asks it to sync when its step opens.
pub const ROLLOUT_HOLD: &str = "skewer.dev/rollout-hold";
/// On an Application an ApplicationSet with `preserveResourcesOnDeletion` generated: deleting
/// it leaves what it applied.
pub const PRESERVE_RESOURCES: &str = "skewer.dev/preserve-resources-on-deletion";

/// A deploy object as the drift and ownership tables know it: `Kind/namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerKey {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl OwnerKey {
    pub fn new(kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key [`fmt::Display`] wrote; `None` for anything else. Names and namespaces hold no
    /// `/`, so the first two split it.
    pub fn parse(key: &str) -> Option<Self> {
        let mut parts = key.splitn(3, '/');
        let (kind, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
        if [kind, namespace, name].iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(Self::new(kind, namespace, name))
    }
}

impl fmt::Display for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_keys_round_trip_and_refuse_what_is_not_one() {
        let key = OwnerKey::new("Application", "argocd", "web");
        assert_eq!(key.to_string(), "Application/argocd/web");
        assert_eq!(OwnerKey::parse(&key.to_string()), Some(key));
        for bad in [
            "",
            "Kustomization",
            "Kustomization/ns",
            "Kustomization//x",
            "/ns/x",
        ] {
            assert_eq!(OwnerKey::parse(bad), None, "{bad:?}");
        }
    }
}
