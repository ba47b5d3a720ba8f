//! The Leases behind [`Shards`]: each replica renews a Lease of its own
//! (`<group>-replica-…`, how replicas find each other), and one Lease per shard it holds
//! (`<group>-shard-<n>`), all labeled `skewer.dev/shards: <group>` so one list reads them.
//! Each turn of the loop lists them, renews what it holds, takes a shard [`assign`] gives it
//! once the Lease is free or expired, and gives up a shard assigned elsewhere only after its
//! reconciles are over (the holder releases; the newcomer waits). Every write carries the
//! listed resourceVersion, so two replicas never both win a shard.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use kube::api::{ListParams, PostParams};
use tracing::{info, warn};

use super::{Shards, assign};
use crate::leader::{Decision, decide, spec_for};

use skewer_view::shards::{GROUP_LABEL as LABEL, ROLE_LABEL as ROLE};

/// How the loop runs.
pub struct Settings {
    /// Where the number of shards held is shown.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Leases are named and labeled after it (`skewer` by default).
    pub group: String,
    /// This replica's identity, as written in `holderIdentity`.
    pub me: String,
    pub duration: Duration,
}

/// The name of `shard`'s Lease.
pub fn shard_lease(group: &str, shard: u32) -> String {
    format!("{group}-shard-{shard}")
}

/// The name of replica `me`'s own Lease: a DNS label however `me` is spelled.
pub fn replica_lease(group: &str, me: &str) -> String {
    let clean: String = me
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = format!("{group}-replica-{}", clean.trim_matches('-'));
    if name.len() <= 63 {
        return name;
    }
    let hash = super::fnv(&[me.as_bytes()]);
    format!("{}-{hash:016x}", &name[..46].trim_end_matches('-'))
}

/// The replicas alive among `leases` (those whose own Lease is unexpired), with `me`.
pub fn members(leases: &[Lease], me: &str, now: Timestamp) -> Vec<String> {
    let mut alive: Vec<String> = leases
        .iter()
        .filter(|l| role(l) == Some("replica"))
        .filter_map(|l| match decide(l.spec.as_ref(), "", now) {
            Decision::Wait { holder, .. } => Some(holder),
            _ => None,
        })
        .collect();
    alive.push(me.to_string());
    alive.sort();
    alive.dedup();
    alive
}

fn role(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()?
        .get(ROLE)
        .map(String::as_str)
}

fn holder(lease: Option<&Lease>) -> Option<&str> {
    lease?.spec.as_ref()?.holder_identity.as_deref()
}

/// Keeps this replica's Leases until the process ends. `forget` is called with the owners of
/// a shard given up, once their reconciles are over and before its Lease is released.
pub async fn run(
    api: Api<Lease>,
    shards: Arc<Shards>,
    settings: Settings,
    forget: impl Fn(Vec<String>) + Send + Sync,
) {
    let Settings {
        metrics,
        group,
        me,
        duration,
    } = settings;
    let tick = duration / 4;
    // The first turn only announces this replica, so that replicas started together see
    // each other before any takes a shard (and none takes all of them only to hand most back).
    let mut announced = false;
    let mut last_share: Vec<u32> = Vec::new();
    loop {
        let started = Instant::now();
        let now = Timestamp::now();
        let until = started + duration - duration / 8;
        match api
            .list(&ListParams::default().labels(&format!("{LABEL}={group}")))
            .await
        {
            Err(e) => warn!(error = %e, "shards: cannot list the Leases"),
            Ok(list) => {
                let leases = list.items;
                let by_name: BTreeMap<&str, &Lease> = leases
                    .iter()
                    .filter_map(|l| Some((l.metadata.name.as_deref()?, l)))
                    .collect();
                let mine = replica_lease(&group, &me);
                if let Err(e) = put(
                    &api,
                    &mine,
                    &group,
                    "replica",
                    by_name.get(mine.as_str()).copied(),
                    &me,
                    duration,
                    now,
                )
                .await
                {
                    warn!(error = %e, "shards: cannot renew this replica's Lease");
                }
                if announced {
                    let members = members(&leases, &me, now);
                    let current: Vec<Option<String>> = (0..shards.count())
                        .map(|shard| {
                            let lease = by_name.get(shard_lease(&group, shard).as_str()).copied();
                            let alive = !matches!(
                                decide(lease.and_then(|l| l.spec.as_ref()), "", now),
                                Decision::Acquire
                            );
                            holder(lease).filter(|_| alive).map(str::to_string)
                        })
                        .collect();
                    let wanted = assign(&members, shards.count(), &current);
                    let mut acquired = false;
                    for (shard, owner) in (0u32..).zip(&wanted) {
                        let name = shard_lease(&group, shard);
                        let current = by_name.get(name.as_str()).copied();
                        let ours = holder(current) == Some(me.as_str());
                        if *owner == me {
                            let take = matches!(
                                decide(current.and_then(|l| l.spec.as_ref()), &me, now),
                                Decision::Renew | Decision::Acquire
                            );
                            if take {
                                match put(&api, &name, &group, "shard", current, &me, duration, now)
                                    .await
                                {
                                    Ok(true) => acquired |= shards.hold(shard, until),
                                    Ok(false) => shards.drop_shard(shard),
                                    Err(e) => warn!(shard, error = %e, "shards: cannot renew"),
                                }
                            } else {
                                shards.drop_shard(shard);
                            }
                        } else if ours || shards.holds(shard) {
                            give_up(
                                &api, &shards, shard, &name, &group, current, &me, duration, now,
                                until, &forget,
                            )
                            .await;
                        }
                    }
                    let share = shards.held();
                    metrics
                        .shards_held
                        .set(i64::try_from(share.len()).unwrap_or(i64::MAX));
                    if share != last_share {
                        info!(
                            replicas = members.len(),
                            shards = ?share,
                            held = share.len(),
                            of = shards.count(),
                            "shards: this replica's share"
                        );
                        last_share = share;
                    }
                    if acquired {
                        shards.announce();
                    }
                }
                announced = true;
            }
        }
        tokio::time::sleep_until((started + tick).into()).await;
    }
}

/// Releases every Lease `me` holds in `group` (its shards and its own), once its controllers
/// have stopped: on a clean shutdown (a rolling update) the other replicas take its shards at
/// their next turn instead of after the lease duration.
pub async fn release_all(api: &Api<Lease>, group: &str, me: &str) {
    let list = match api
        .list(&ListParams::default().labels(&format!("{LABEL}={group}")))
        .await
    {
        Ok(list) => list,
        Err(e) => return warn!(error = %e, "shards: cannot list the Leases to release them"),
    };
    let mut released = 0;
    for lease in list.items {
        if holder(Some(&lease)) != Some(me) {
            continue;
        }
        match release(api, &lease).await {
            Ok(()) => released += 1,
            Err(e) => warn!(lease = ?lease.metadata.name, error = %e, "shards: cannot release"),
        }
    }
    info!(released, "shards: released this replica's Leases");
}

/// Releases `lease` (holder and renewal cleared), compare-and-swap on its resourceVersion.
async fn release(api: &Api<Lease>, lease: &Lease) -> Result<(), kube::Error> {
    let mut lease = lease.clone();
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.renew_time = None;
    }
    let name = lease.metadata.name.clone().unwrap_or_default();
    api.replace(&name, &PostParams::default(), &lease)
        .await
        .map(|_| ())
}

/// Gives up `shard`, assigned to another replica: once its reconciles are over, its owners are
/// forgotten and its Lease released; until then it is renewed, so it cannot expire mid-turn.
#[allow(clippy::too_many_arguments)]
async fn give_up(
    api: &Api<Lease>,
    shards: &Shards,
    shard: u32,
    name: &str,
    group: &str,
    current: Option<&Lease>,
    me: &str,
    duration: Duration,
    now: Timestamp,
    until: Instant,
    forget: &(impl Fn(Vec<String>) + Send + Sync),
) {
    let ours = holder(current) == Some(me);
    match shards.drained(shard) {
        Some(owners) => {
            forget(owners);
            if ours
                && let Some(lease) = current
                && let Err(e) = release(api, lease).await
            {
                warn!(shard, error = %e, "shards: cannot release");
                return;
            }
            shards.drop_shard(shard);
        }
        None if ours => {
            if let Ok(true) = put(api, name, group, "shard", current, me, duration, now).await {
                shards.hold(shard, until);
            }
        }
        None => {}
    }
}

/// Creates or renews Lease `name` as `me`, compare-and-swap on `current`'s resourceVersion.
/// `Ok(false)`: another replica wrote it first.
#[allow(clippy::too_many_arguments)]
async fn put(
    api: &Api<Lease>,
    name: &str,
    group: &str,
    role: &str,
    current: Option<&Lease>,
    me: &str,
    duration: Duration,
    now: Timestamp,
) -> Result<bool, kube::Error> {
    let spec: LeaseSpec = spec_for(me, duration, current.and_then(|l| l.spec.as_ref()), now);
    let labels = [(LABEL, group), (ROLE, role)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    crate::leader::put(api, name, Some(labels), current, spec).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    fn lease(name: &str, role: &str, holder: &str, age_secs: i64, now: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(ROLE.to_string(), role.to_string())].into_iter().collect()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(now - jiff::SignedDuration::from_secs(age_secs))),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn members_are_the_replicas_whose_lease_is_alive() {
        let now = Timestamp::now();
        let leases = [
            lease("skewer-replica-a", "replica", "a", 2, now),
            lease("skewer-replica-b", "replica", "b", 60, now),
            lease("skewer-shard-0", "shard", "c", 1, now),
        ];
        assert_eq!(members(&leases, "me", now), ["a", "me"]);
    }

    #[test]
    fn replica_lease_names_are_dns_labels() {
        assert_eq!(
            replica_lease("skewer", "Pod_7.x-123"),
            "skewer-replica-pod-7-x-123"
        );
        let long = replica_lease("skewer", &"x".repeat(100));
        assert!(long.len() <= 63, "{long}");
        assert_ne!(long, replica_lease("skewer", &"x".repeat(99)));
    }
}
