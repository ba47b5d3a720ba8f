//! Waiting on the cluster with deadlines: for an object to satisfy a predicate, for an object
//! to be gone, for a set of objects to be healthy.

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tokio::time::{Instant, sleep};

const POLL: Duration = Duration::from_millis(200);

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
    let deadline = Instant::now() + timeout;
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
    let deadline = Instant::now() + timeout;
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

/// Waits until every object is healthy (kstatus Current). On timeout or failure, returns one
/// line per object that is not, like `Deployment/web/app: available replicas: 0/1`.
pub async fn all_healthy(
    resources: &crate::resources::Resources,
    objects: &[(crate::ObjectId, String)],
    timeout: Duration,
) -> Result<(), Vec<String>> {
    use crate::health::{Health, health};
    use futures::{StreamExt, stream};
    let deadline = Instant::now() + timeout;
    loop {
        let verdicts: Vec<Option<String>> = stream::iter(0..objects.len())
            .map(|i| async move {
                let (id, version) = &objects[i];
                let verdict = match resources.resolve(version, &id.kind, &[]).await {
                    Err(e) => Some(e.to_string()),
                    Ok(r) => {
                        let api = r.api(resources.client().clone(), &id.namespace);
                        match api.get_opt(&id.name).await {
                            Ok(Some(obj)) => match serde_json::to_value(&obj).map(|v| health(&v)) {
                                Ok(Health::Current) => None,
                                Ok(Health::InProgress(m)) => Some(format!("in progress: {m}")),
                                Ok(Health::Failed(m)) => Some(format!("failed: {m}")),
                                Err(e) => Some(e.to_string()),
                            },
                            Ok(None) => Some("not found".into()),
                            Err(e) => Some(e.to_string()),
                        }
                    }
                };
                verdict.map(|v| format!("{}: {v}", id.display()))
            })
            .buffered(16)
            .collect()
            .await;
        let unhealthy: Vec<String> = verdicts.into_iter().flatten().collect();
        if unhealthy.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(unhealthy);
        }
        sleep(Duration::from_millis(500)).await;
    }
}
