//! Waiting on the cluster with deadlines: for an object to satisfy a predicate, for an object
//! to be gone, for a set of objects to be healthy.

use std::time::Duration;

use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tokio::time::{Instant, sleep};

use crate::health::{HealthReport, Observed, health};
use crate::object::ObjectId;
use crate::resources::Resources;

const POLL: Duration = Duration::from_millis(200);

/// `timeout` from now. Timeouts come from users' specs: one too large for the clock is a
/// deadline a century away, never an overflow.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Polls `name` until `check` says true (or errors), or the deadline passes.
pub async fn until<F>(
    api: &Api<DynamicObject>,
    name: &str,
    timeout: Duration,
    mut check: F,
) -> Result<(), String>
where
    F: FnMut(&Value) -> Result<bool, String>,
{
    let deadline = deadline_after(timeout);
    let mut last = String::from("not found");
    loop {
        match api.get_opt(name).await {
            Ok(Some(obj)) => {
                let value = serde_json::to_value(&obj).map_err(|e| e.to_string())?;
                if check(&value)? {
                    return Ok(());
                }
                last = "condition not met".into();
            }
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {timeout:?}: {last}"));
        }
        sleep(POLL).await;
    }
}

/// Polls until `name` no longer exists.
pub async fn until_gone(
    api: &Api<DynamicObject>,
    name: &str,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = deadline_after(timeout);
    loop {
        match api.get_metadata_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => {}
            Err(e) => return Err(e.to_string()),
        }
        if Instant::now() >= deadline {
            return Err(format!("still present after {timeout:?}"));
        }
        sleep(POLL).await;
    }
}

/// Waits until every object is healthy (kstatus Current), or the deadline passes; returns
/// what was last observed of each.
pub async fn healthy(
    resources: &Resources,
    objects: &[(ObjectId, String)],
    timeout: Duration,
) -> HealthReport {
    let deadline = deadline_after(timeout);
    loop {
        let observed: Vec<(ObjectId, Observed)> = stream::iter(0..objects.len())
            .map(|i| async move {
                let (id, version) = &objects[i];
                (id.clone(), observe(resources, id, version).await)
            })
            .buffered(16)
            .collect()
            .await;
        let report = HealthReport { objects: observed };
        if report.is_healthy() || Instant::now() >= deadline {
            return report;
        }
        sleep(Duration::from_millis(500)).await;
    }
}

async fn observe(resources: &Resources, id: &ObjectId, version: &str) -> Observed {
    let resolved = match resources.resolve(version, &id.kind, &[]).await {
        Ok(r) => r,
        Err(e) => return Observed::Unreadable(e.to_string()),
    };
    let api = resolved.api(resources.client().clone(), &id.namespace);
    match api.get_opt(&id.name).await {
        Ok(Some(obj)) => match serde_json::to_value(&obj) {
            Ok(v) => Observed::Judged(health(&v)),
            Err(e) => Observed::Unreadable(e.to_string()),
        },
        Ok(None) => Observed::Missing,
        Err(e) => Observed::Unreadable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_timeouts_make_a_distant_deadline_not_a_panic() {
        let far = deadline_after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(50 * 365 * 24 * 3600));
        let soon = deadline_after(Duration::from_secs(1));
        assert!(soon <= Instant::now() + Duration::from_secs(1));
    }
}
