//! The inventory: the sorted set of objects a Kustomization applied, as ids and API versions.
//! Prune candidates are exactly the ids in the old inventory that the new one lacks.

use std::collections::BTreeMap;

use crate::object::{Manifest, ObjectId};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// id → API version (`v1`, `apps/v1`) it was applied with.
    pub entries: BTreeMap<ObjectId, String>,
}

impl Inventory {
    pub fn from_manifests<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> Self {
        Self {
            entries: manifests
                .into_iter()
                .map(|m| (m.id(), m.api_version().to_string()))
                .collect(),
        }
    }

    /// Objects in `self` that `next` no longer has, in reverse apply order is up to the caller.
    pub fn stale(&self, next: &Inventory) -> Vec<(ObjectId, String)> {
        self.entries
            .iter()
            .filter(|(id, _)| !next.entries.contains_key(id))
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect()
    }

    /// Adds entries from `other` (used to keep objects whose prune failed).
    pub fn extend(&mut self, other: impl IntoIterator<Item = (ObjectId, String)>) {
        self.entries.extend(other);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::configmap_id as id;

    #[test]
    fn stale_is_old_minus_new() {
        let old = Inventory {
            entries: [(id("a"), "v1".into()), (id("b"), "v1".into())].into(),
        };
        let new = Inventory {
            entries: [(id("b"), "v1".into()), (id("c"), "v1".into())].into(),
        };
        assert_eq!(old.stale(&new), vec![(id("a"), "v1".to_string())]);
        assert!(new.stale(&new).is_empty());
    }
}
