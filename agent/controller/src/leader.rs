//! Leader election through a `coordination.k8s.io/v1` Lease, so that of several `skewer run`
//! replicas only one writes. The decision is a pure function of the Lease and the clock; the
//! loop around it uses the Lease's resourceVersion, so two candidates can never both win.
//! A leader that cannot renew before its lease runs out must not write any more: [`lead`] hands
//! back a future that ends when leadership is lost; the binary then stops its controllers and
//! campaigns again (an API server that was away for a while is no reason to exit).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tracing::{info, warn};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it.
    Acquire,
    /// Someone else holds it until about then.
    Wait { holder: String, until: Timestamp },
}

/// What `me` should do about `spec` at `now`.
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::Acquire;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Acquire;
    }
    let renewed = spec
        .renew_time
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let until =
        renewed + jiff::SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(0).into());
    if until <= now {
        Decision::Acquire
    } else {
        Decision::Wait { holder, until }
    }
}

pub(crate) fn spec_for(
    me: &str,
    duration: Duration,
    previous: Option<&LeaseSpec>,
    now: Timestamp,
) -> LeaseSpec {
    let renewing = previous.and_then(|p| p.holder_identity.as_deref()) == Some(me);
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.into()),
        lease_duration_seconds: Some(i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)),
        acquire_time: if renewing {
            previous.and_then(|p| p.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if renewing || previous.is_none() {
            transitions
        } else {
            transitions + 1
        }),
        ..Default::default()
    }
}

/// One attempt to acquire or renew. `Ok(true)`: we are the leader now.
async fn attempt(
    api: &Api<Lease>,
    name: &str,
    me: &str,
    duration: Duration,
) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let current = api.get_opt(name).await?;
    match decide(current.as_ref().and_then(|l| l.spec.as_ref()), me, now) {
        Decision::Wait { .. } => Ok(false),
        Decision::Renew | Decision::Acquire => {
            let spec = spec_for(
                me,
                duration,
                current.as_ref().and_then(|l| l.spec.as_ref()),
                now,
            );
            put(api, name, None, current.as_ref(), spec).await
        }
    }
}

/// Writes Lease `name` with `spec`: replaces `current` (a compare-and-swap on its
/// resourceVersion), or creates it with `labels`. `Ok(false)`: another writer came first.
pub(crate) async fn put(
    api: &Api<Lease>,
    name: &str,
    labels: Option<std::collections::BTreeMap<String, String>>,
    current: Option<&Lease>,
    spec: LeaseSpec,
) -> Result<bool, kube::Error> {
    let result = match current {
        Some(lease) => {
            let mut lease = lease.clone();
            lease.spec = Some(spec);
            api.replace(name, &PostParams::default(), &lease).await
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    labels,
                    ..Default::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await
        }
    };
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Why this process is no longer the leader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error("lost lease '{0}' to another replica")]
    Taken(String),
    #[error("lease '{0}' expired without renewal")]
    Expired(String),
}

/// Waits until this process holds the lease; then returns the renewal loop, a future that
/// keeps the lease and ends only when it is lost. The caller stops writing when it ends.
pub async fn lead(
    api: Api<Lease>,
    name: String,
    me: String,
    duration: Duration,
) -> impl std::future::Future<Output = Lost> + Send {
    let retry = duration / 4;
    let mut waiting_logged = false;
    loop {
        match attempt(&api, &name, &me, duration).await {
            Ok(true) => break,
            Ok(false) => {
                if !waiting_logged {
                    info!(lease = %name, identity = %me, "waiting to become the leader");
                    waiting_logged = true;
                }
            }
            Err(e) => warn!(lease = %name, error = %e, "leader election"),
        }
        tokio::time::sleep(retry).await;
    }
    info!(lease = %name, identity = %me, "became the leader");
    async move {
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(retry).await;
            match attempt(&api, &name, &me, duration).await {
                Ok(true) => last_renewed = tokio::time::Instant::now(),
                Ok(false) => return Lost::Taken(name),
                Err(e) => warn!(lease = %name, error = %e, "cannot renew the lease"),
            }
            if last_renewed.elapsed() >= duration {
                return Lost::Expired(name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed_secs_ago: i64, duration: i32, now: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(
                now - jiff::SignedDuration::from_secs(renewed_secs_ago),
            )),
            lease_duration_seconds: Some(duration),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        let now = Timestamp::now();
        assert_eq!(decide(None, "a", now), Decision::Acquire);
        assert_eq!(
            decide(Some(&lease("a", 100, 15, now)), "a", now),
            Decision::Renew
        );
        assert!(
            matches!(decide(Some(&lease("b", 5, 15, now)), "a", now), Decision::Wait { holder, .. } if holder == "b")
        );
        assert_eq!(
            decide(Some(&lease("b", 16, 15, now)), "a", now),
            Decision::Acquire,
            "expired"
        );
        assert_eq!(
            decide(Some(&lease("", 0, 15, now)), "a", now),
            Decision::Acquire,
            "released"
        );
    }

    #[test]
    fn takeover_counts_a_transition_and_renewal_keeps_acquire_time() {
        let now = Timestamp::now();
        let theirs = lease("b", 20, 15, now);
        let mine = spec_for("a", Duration::from_secs(15), Some(&theirs), now);
        assert_eq!(mine.lease_transitions, Some(1));
        assert_eq!(mine.holder_identity.as_deref(), Some("a"));
        let later = now + jiff::SignedDuration::from_secs(5);
        let renewed = spec_for("a", Duration::from_secs(15), Some(&mine), later);
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, mine.acquire_time);
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
    }
}
