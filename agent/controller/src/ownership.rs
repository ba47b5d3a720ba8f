//! Who holds which object, so that two deploy objects (two Kustomizations whose paths overlap,
//! say) never fight over one object, and one's deletion never prunes the other's.
//!
//! An object on a cluster belongs to one owner (`Kind/namespace/name`). Claims made by this
//! process are kept in a table, checked and taken under one lock, so two owners reconciled at
//! the same moment cannot both win. Objects this process has not seen claimed yet (after a
//! restart) are looked up in the inventories other owners recorded, read from the
//! controllers' caches: no API requests.
//!
//! The table holds a 64-bit fingerprint of each (cluster, object) and a shared owner name:
//! about 40 bytes an object, where the ids themselves would take hundreds (they are in the
//! inventories already). Two objects sharing a fingerprint (odds about 1 in 10^11 among ten
//! thousand) would show as a conflict, never as a silent takeover.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

use skewer_appliers::{Inventory, ObjectId};

use crate::targets::ClusterRef;

/// The fingerprint of an object on a cluster.
fn key(cluster: &ClusterRef, id: &ObjectId) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cluster.hash(&mut h);
    id.hash(&mut h);
    h.finish()
}

/// The inventories other owners recorded: for each of `wanted` that an owner other than
/// `except` holds on `cluster`, the object and its owner key.
pub trait Recorded: Send + Sync {
    fn held(
        &self,
        cluster: &ClusterRef,
        wanted: &HashSet<String>,
        except: &str,
    ) -> Vec<(String, String)>;
}

#[derive(Default)]
pub struct Ownership {
    claims: Mutex<HashMap<u64, Arc<str>>>,
    /// By kind: a kind's controller started again (leadership regained) replaces its own.
    recorded: RwLock<Vec<(&'static str, Arc<dyn Recorded>)>>,
}

impl Ownership {
    /// Adds `kind`'s recorded inventories (its controller's cache) to what claims are checked
    /// against, in place of any it had.
    pub fn watch(&self, kind: &'static str, recorded: Arc<dyn Recorded>) {
        let mut all = self.recorded.write().unwrap_or_else(|e| e.into_inner());
        all.retain(|(k, _)| *k != kind);
        all.push((kind, recorded));
    }

    /// Claims `planned` on `cluster` for `owner`. Objects in `takeover` may be taken whoever
    /// holds them, but are not taken yet: the holder keeps them until [`Ownership::settle`]
    /// says the taker's apply wrote them (a taker without the right to write never displaces
    /// anyone). If any other object is held by someone else, nothing is claimed and those
    /// objects come back with their holder.
    pub fn claim(
        &self,
        cluster: &ClusterRef,
        owner: &str,
        planned: &Inventory,
        takeover: &BTreeSet<ObjectId>,
    ) -> Result<(), Vec<(ObjectId, String)>> {
        let wanted: HashSet<String> = planned
            .entries
            .keys()
            .filter(|id| !takeover.contains(*id))
            .map(ToString::to_string)
            .collect();
        let mut recorded: HashMap<String, String> = HashMap::new();
        for (_, source) in self
            .recorded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            recorded.extend(source.held(cluster, &wanted, owner));
        }
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = Vec::new();
        for id in planned.entries.keys().filter(|id| !takeover.contains(*id)) {
            let holder = match claims.get(&key(cluster, id)) {
                Some(h) => Some(h.to_string()),
                None => recorded.get(&id.to_string()).cloned(),
            };
            if let Some(h) = holder.filter(|h| h != owner) {
                held.push((id.clone(), h));
            }
        }
        if !held.is_empty() {
            return Err(held);
        }
        let owner: Arc<str> = Arc::from(owner);
        for id in planned.entries.keys() {
            let k = key(cluster, id);
            if !takeover.contains(id) || !claims.contains_key(&k) {
                claims.insert(k, owner.clone());
            }
        }
        Ok(())
    }

    /// After a sync: `owner` holds what its inventory says and no more (it let go of what it
    /// pruned, and of what the server refused it), and takes over the objects of `taken`
    /// (takeovers its apply wrote).
    pub fn settle<'i>(
        &self,
        cluster: &ClusterRef,
        owner: &str,
        inventory: &Inventory,
        taken: impl IntoIterator<Item = &'i ObjectId>,
    ) {
        let kept: HashSet<u64> = inventory
            .entries
            .keys()
            .map(|id| key(cluster, id))
            .collect();
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        claims.retain(|k, holder| &**holder != owner || kept.contains(k));
        let owner: Arc<str> = Arc::from(owner);
        for id in taken {
            claims.insert(key(cluster, id), owner.clone());
        }
    }

    /// `owner` is gone: it holds nothing.
    pub fn forget(&self, owner: &str) {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        claims.retain(|_, holder| &**holder != owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(names: &[&str]) -> Inventory {
        Inventory {
            entries: names
                .iter()
                .map(|n| {
                    (
                        ObjectId::parse(&format!("ns_{n}__ConfigMap")).unwrap(),
                        "v1".into(),
                    )
                })
                .collect(),
        }
    }

    const A: &str = "Kustomization/ns/a";
    const B: &str = "Kustomization/ns/b";
    const HUB: ClusterRef = ClusterRef::Hub;

    /// Inventories recorded before this process started.
    struct Before(Vec<(String, String)>);

    impl Recorded for Before {
        fn held(
            &self,
            _: &ClusterRef,
            wanted: &HashSet<String>,
            except: &str,
        ) -> Vec<(String, String)> {
            self.0
                .iter()
                .filter(|(id, owner)| wanted.contains(id) && owner != except)
                .cloned()
                .collect()
        }
    }

    #[test]
    fn the_first_owner_keeps_what_it_claimed() {
        let o = Ownership::default();
        assert_eq!(
            o.claim(&HUB, A, &inv(&["shared", "x"]), &BTreeSet::new()),
            Ok(())
        );
        let refused = o
            .claim(&HUB, B, &inv(&["shared", "y"]), &BTreeSet::new())
            .unwrap_err();
        assert_eq!(refused.len(), 1);
        assert_eq!(
            (refused[0].0.name.as_str(), refused[0].1.as_str()),
            ("shared", A)
        );
        assert_eq!(
            o.claim(&HUB, A, &inv(&["shared"]), &BTreeSet::new()),
            Ok(()),
            "again"
        );
        // B claimed nothing: y is free.
        assert_eq!(o.claim(&HUB, A, &inv(&["y"]), &BTreeSet::new()), Ok(()));
        // The same object on another cluster is another object.
        assert_eq!(
            o.claim(
                &ClusterRef::Registered("spoke".into()),
                B,
                &inv(&["shared"]),
                &BTreeSet::new()
            ),
            Ok(())
        );
    }

    #[test]
    fn takeover_settle_and_forget_hand_objects_on() {
        let o = Ownership::default();
        o.claim(&HUB, A, &inv(&["shared", "x"]), &BTreeSet::new())
            .unwrap();
        let takeover: BTreeSet<ObjectId> = inv(&["shared"]).entries.into_keys().collect();
        assert_eq!(o.claim(&HUB, B, &inv(&["shared"]), &takeover), Ok(()));
        assert_eq!(
            o.claim(&HUB, A, &inv(&["shared"]), &BTreeSet::new()),
            Ok(()),
            "A keeps it until B's apply wrote it"
        );
        o.settle(&HUB, B, &inv(&["shared"]), &takeover);
        assert!(
            o.claim(&HUB, A, &inv(&["shared"]), &BTreeSet::new())
                .is_err(),
            "B has it now"
        );
        o.settle(&HUB, A, &inv(&[]), []);
        assert_eq!(
            o.claim(&HUB, B, &inv(&["x"]), &BTreeSet::new()),
            Ok(()),
            "A let go of x"
        );
        o.forget(B);
        assert_eq!(
            o.claim(&HUB, A, &inv(&["shared", "x"]), &BTreeSet::new()),
            Ok(())
        );
    }

    #[test]
    fn a_claim_the_server_refused_blocks_no_one() {
        let o = Ownership::default();
        o.claim(&HUB, A, &inv(&["platform"]), &BTreeSet::new())
            .unwrap();
        // A tenant without the right: its takeover claim is made, its apply refused, and its
        // inventory after the sync does not hold the object.
        let takeover: BTreeSet<ObjectId> = inv(&["platform"]).entries.into_keys().collect();
        assert_eq!(o.claim(&HUB, B, &inv(&["platform"]), &takeover), Ok(()));
        o.settle(&HUB, B, &inv(&[]), []);
        assert_eq!(
            o.claim(&HUB, A, &inv(&["platform"]), &BTreeSet::new()),
            Ok(())
        );
        // Naming an object nobody holds yet: claimed, refused, let go.
        assert_eq!(o.claim(&HUB, B, &inv(&["later"]), &BTreeSet::new()), Ok(()));
        o.settle(&HUB, B, &inv(&[]), []);
        assert_eq!(o.claim(&HUB, A, &inv(&["later"]), &BTreeSet::new()), Ok(()));
    }

    #[test]
    fn inventories_recorded_before_a_restart_count() {
        let o = Ownership::default();
        o.watch(
            "Kustomization",
            Arc::new(Before(vec![("ns_shared__ConfigMap".into(), A.into())])),
        );
        assert!(
            o.claim(&HUB, B, &inv(&["shared"]), &BTreeSet::new())
                .is_err()
        );
        assert_eq!(
            o.claim(&HUB, A, &inv(&["shared"]), &BTreeSet::new()),
            Ok(())
        );
    }
}
