//! Shards: how several `skewer run --shards` replicas split the work. Every object falls in one
//! of a fixed number of shards (a hash of its key: `namespace/name`, or the cluster a deploy
//! object applies to when that is a registered cluster, so one replica holds a spoke's clients
//! and watches); a replica reconciles an object only while it holds the Lease of its shard
//! ([`lease`] keeps them). Which replica should hold which shard is a pure function of the
//! replicas alive ([`assign`]): rendezvous hashing, capped so that no replica holds more than
//! its even share, so a replica joining or leaving moves few shards.
//!
//! The gate is [`Shards::enter`]: a reconcile starts only in a shard held, and unexpired, and
//! holds a [`Turn`] until it ends. A shard is given up only once its turns are over
//! ([`Shards::drained`]), so no object is reconciled by two replicas at once.

pub mod lease;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::broadcast;

/// FNV-1a, 64 bits: stable across processes, builds and versions (unlike std's hashers).
pub fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            h ^= 0xff;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The shard of `key` among `count` (at least 1).
pub fn shard_of(key: &str, count: u32) -> u32 {
    (fnv(&[key.as_bytes()]) % u64::from(count.max(1))) as u32
}

/// Which of `members` should hold each of `count` shards, given who holds them now
/// (`current[shard]`, `None` when free): every member gets an even share (`count / members`,
/// one more for the members holding most now); a shard stays with its live holder while that
/// holder is within its share; the others go, in order, to the member under its share that
/// ranks the shard highest (rendezvous hashing). So a replica joining takes only its share,
/// and one leaving hands over only its own. Deterministic: every replica computes the same
/// from the same Leases. Empty when there are no members.
pub fn assign(members: &[String], count: u32, current: &[Option<String>]) -> Vec<String> {
    let mut members: Vec<&String> = members.iter().collect();
    members.sort();
    members.dedup();
    if members.is_empty() {
        return Vec::new();
    }
    let holding = |m: &str| current.iter().filter(|c| c.as_deref() == Some(m)).count();
    let mut by_holding = members.clone();
    by_holding.sort_by_key(|m| std::cmp::Reverse(holding(m)));
    let (base, extra) = (
        count as usize / members.len(),
        count as usize % members.len(),
    );
    let quota: HashMap<&str, usize> = by_holding
        .iter()
        .enumerate()
        .map(|(rank, m)| (m.as_str(), base + usize::from(rank < extra)))
        .collect();
    let mut load: HashMap<&str, usize> = HashMap::new();
    let mut chosen: Vec<Option<&String>> = vec![None; count as usize];
    for (shard, slot) in chosen.iter_mut().enumerate() {
        let Some(holder) = current.get(shard).and_then(Option::as_ref) else {
            continue;
        };
        if let Some(m) = members.iter().find(|m| **m == holder)
            && load.get(m.as_str()).copied().unwrap_or(0) < quota[m.as_str()]
        {
            *load.entry(m.as_str()).or_default() += 1;
            *slot = Some(m);
        }
    }
    for (shard, slot) in (0u32..).zip(chosen.iter_mut()) {
        if slot.is_some() {
            continue;
        }
        let index = shard.to_be_bytes();
        let best = members
            .iter()
            .filter(|m| load.get(m.as_str()).copied().unwrap_or(0) < quota[m.as_str()])
            .max_by_key(|m| fnv(&[m.as_bytes(), &index]))
            .copied()
            .unwrap_or(members[0]);
        *load.entry(best.as_str()).or_default() += 1;
        *slot = Some(best);
    }
    chosen
        .into_iter()
        .map(|m| m.cloned().unwrap_or_default())
        .collect()
}

/// A shard this replica holds.
struct Held {
    /// The Lease is ours until then (its last renewal, plus its duration, less a margin).
    until: Instant,
    /// Being given up: no new turns.
    releasing: bool,
    turns: usize,
    /// The owners (`Kind/namespace/name`) reconciled in it, forgotten when it is given up.
    owners: std::collections::HashSet<String>,
}

/// The shards this replica holds, and the gate every reconcile passes.
pub struct Shards {
    /// `0`: not sharded, every object is this replica's.
    count: u32,
    held: Mutex<HashMap<u32, Held>>,
    acquired: broadcast::Sender<()>,
}

impl Shards {
    /// One replica doing everything.
    pub fn unsharded() -> Arc<Self> {
        Self::new(0)
    }

    /// `count` shards, none held yet.
    pub fn new(count: u32) -> Arc<Self> {
        Arc::new(Self {
            count,
            held: Mutex::new(HashMap::new()),
            acquired: broadcast::channel(16).0,
        })
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn to reconcile `owner` (`Kind/namespace/name`), whose shard key is `key`, if this
    /// replica holds its shard; `None` otherwise.
    pub fn enter(self: &Arc<Self>, key: &str, owner: &str) -> Option<Turn> {
        if self.count == 0 {
            return Some(Turn(None));
        }
        let shard = shard_of(key, self.count);
        let mut held = self.lock();
        let h = held.get_mut(&shard)?;
        if h.releasing || h.until <= Instant::now() {
            return None;
        }
        h.turns += 1;
        if !h.owners.contains(owner) {
            h.owners.insert(owner.to_string());
        }
        Some(Turn(Some((self.clone(), shard))))
    }

    /// Records that this replica holds `shard` until `until`; `true` if it did not before.
    pub fn hold(&self, shard: u32, until: Instant) -> bool {
        let mut held = self.lock();
        match held.get_mut(&shard) {
            Some(h) => {
                h.until = until;
                false
            }
            None => {
                held.insert(
                    shard,
                    Held {
                        until,
                        releasing: false,
                        turns: 0,
                        owners: Default::default(),
                    },
                );
                true
            }
        }
    }

    /// Stops new turns in `shard`; once none is left, the owners reconciled in it (to forget:
    /// no drift of theirs may be healed here any more). `None` while turns are still running.
    pub fn drained(&self, shard: u32) -> Option<Vec<String>> {
        let mut held = self.lock();
        let Some(h) = held.get_mut(&shard) else {
            return Some(Vec::new());
        };
        h.releasing = true;
        (h.turns == 0).then(|| h.owners.drain().collect())
    }

    /// Forgets `shard` (given up, or its Lease lost).
    pub fn drop_shard(&self, shard: u32) {
        self.lock().remove(&shard);
    }

    /// The shards held now, sorted.
    pub fn held(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.lock().keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Whether `shard` is held (whatever its state).
    pub fn holds(&self, shard: u32) -> bool {
        self.lock().contains_key(&shard)
    }

    /// Tells every controller that shards were acquired: they reconcile all their objects
    /// (those of other shards pass the gate at once).
    pub fn announce(&self) {
        let _ = self.acquired.send(());
    }

    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.acquired.subscribe()
    }
}

/// The values `rx` announces, lagging ones skipped, until its sender goes.
pub fn announced<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(v) => return Some((v, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// A reconcile running in a shard; the shard is not given up while it lives.
pub struct Turn(Option<(Arc<Shards>, u32)>);

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some((shards, shard)) = self.0.take()
            && let Some(h) = shards.lock().get_mut(&shard)
        {
            h.turns = h.turns.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("skewer-{i}")).collect()
    }

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(shard_of("team-a/web", 16), shard_of("team-a/web", 16));
        // Pinned: a change of hash would move every object on upgrade.
        assert_eq!(fnv(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        let mut counts = [0usize; 16];
        for i in 0..1600 {
            counts[shard_of(&format!("ns/k{i}"), 16) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (60..=140).contains(c)), "{counts:?}");
    }

    fn held(assigned: &[String]) -> Vec<Option<String>> {
        assigned.iter().cloned().map(Some).collect()
    }

    #[test]
    fn assignment_is_even_and_order_free() {
        let members = names(3);
        let a = assign(&members, 16, &[]);
        let mut reversed = members.clone();
        reversed.reverse();
        assert_eq!(a, assign(&reversed, 16, &[]));
        for m in &members {
            let n = a.iter().filter(|o| *o == m).count();
            assert!((5..=6).contains(&n), "{m}: {n} of 16");
        }
        assert!(assign(&[], 16, &[]).is_empty());
        assert_eq!(assign(&names(1), 4, &[]), vec!["skewer-0"; 4]);
        // Stable: what is held evenly stays where it is.
        assert_eq!(assign(&members, 16, &held(&a)), a);
    }

    #[test]
    fn a_member_joining_or_leaving_moves_only_its_share() {
        let three = assign(&names(3), 32, &[]);
        let four = assign(&names(4), 32, &held(&three));
        let moved = three.iter().zip(&four).filter(|(a, b)| a != b).count();
        assert_eq!(moved, 8, "the newcomer's share, nothing else");
        assert!(
            four.iter()
                .zip(&three)
                .all(|(now, was)| now == was || now == "skewer-3")
        );
        // skewer-1 leaves: only its shards move, and evenly.
        let mut left: Vec<Option<String>> = held(&four);
        for slot in left.iter_mut() {
            if slot.as_deref() == Some("skewer-1") {
                *slot = None;
            }
        }
        let survivors: Vec<String> = ["skewer-0", "skewer-2", "skewer-3"]
            .map(String::from)
            .to_vec();
        let after = assign(&survivors, 32, &left);
        assert!(
            after
                .iter()
                .zip(&four)
                .all(|(now, was)| now == was || was == "skewer-1")
        );
        for m in &survivors {
            let n = after.iter().filter(|o| *o == m).count();
            assert!((10..=11).contains(&n), "{m}: {n} of 32");
        }
        // A holder no longer alive counts for nothing.
        let ghost = vec![Some("gone".to_string()); 4];
        assert_eq!(assign(&names(1), 4, &ghost), vec!["skewer-0"; 4]);
    }

    #[test]
    fn turns_gate_and_drain() {
        let shards = Shards::new(1);
        assert!(shards.enter("ns/a", "Kustomization/ns/a").is_none());
        let later = Instant::now() + Duration::from_secs(60);
        assert!(shards.hold(0, later));
        assert!(!shards.hold(0, later));
        let turn = shards
            .enter("ns/a", "Kustomization/ns/a")
            .expect("held shard");
        assert_eq!(shards.drained(0), None, "a turn is running");
        assert!(
            shards.enter("ns/b", "Kustomization/ns/b").is_none(),
            "no new turn once releasing"
        );
        drop(turn);
        assert_eq!(
            shards.drained(0),
            Some(vec!["Kustomization/ns/a".to_string()])
        );
        shards.drop_shard(0);
        assert!(shards.held().is_empty());
        // An expired hold admits nobody.
        shards.hold(0, Instant::now());
        assert!(shards.enter("ns/a", "Kustomization/ns/a").is_none());
        assert!(Shards::unsharded().enter("x", "y").is_some());
    }
}
