//! Waiting on the cluster with deadlines: for an object to satisfy a predicate, for an object
//! to be gone, for a set of objects to be healthy.

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tokio::time::{Instant, sleep};

const POLL: Duration = Duration::from_millis(200);

/// Polls `name` until `check` says true (or errors), or the deadline passes.
pub async fn until<F>(api: &Api<DynamicObject>, name: &str, timeout: Duration, mut check: F) -> Result<(), String>
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
pub async fn until_gone(api: &Api<DynamicObject>, name: &str, timeout: Duration) -> Result<(), String> {
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
