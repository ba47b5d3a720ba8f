//! `skewer history`: what a Kustomization or Application deployed (`status.history`), newest
//! last, and which entry a rollback pinned. Pure.

use serde_json::Value;

use skewer_api::ApplicationSpec;
use skewer_api::history::Deployment;
use skewer_api::pin::{Pin, ROLLBACK};

use crate::table::{age, aligned, short, short_revision};

/// The deployments an object's status records (none when it records none, or not in this
/// shape).
pub fn of(obj: &Value) -> Vec<Deployment> {
    serde_json::from_value(obj["status"]["history"].clone()).unwrap_or_default()
}

/// The pin a rollback left on an Application, if still in force: its source and sync policy
/// have not changed since.
pub fn pin(obj: &Value) -> Option<Pin> {
    let annotation = obj["metadata"]["annotations"][ROLLBACK].as_str()?;
    let spec: ApplicationSpec = serde_json::from_value(obj["spec"].clone()).ok()?;
    Pin::read(Some(annotation), &spec).ok().flatten()
}

/// The deployments as a table, newest last; `pinned` marks the entry a rollback holds.
pub fn table(history: &[Deployment], pinned: Option<i64>, now: jiff::Timestamp) -> String {
    let header = ["ID", "REVISION", "DIGEST", "DEPLOYED", "OUTCOME", "MESSAGE"];
    let rows = history
        .iter()
        .map(|d| {
            let at = d.deployed_at.parse::<jiff::Timestamp>().ok();
            let message = if pinned == Some(d.id) {
                "rollback: pinned until spec.source or spec.syncPolicy changes".to_string()
            } else {
                short(&d.message)
            };
            vec![
                d.id.to_string(),
                short_revision(&d.revision),
                short_revision(&d.digest),
                format!("{} ago", age(at, now)),
                d.outcome.clone(),
                message,
            ]
        })
        .collect();
    aligned(&header, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn history_reads_as_a_table_with_the_pin_marked() {
        let commit = |c: char| c.to_string().repeat(40);
        let obj = json!({
            "metadata": {"annotations": {}},
            "spec": {"source": {"repoURL": "https://git.example/a.git"},
                     "destination": {"name": "in-cluster"}},
            "status": {"history": [
                {"id": 1, "revision": format!("main@sha1:{}", commit('a')),
                 "digest": format!("sha256:{}", "1".repeat(64)),
                 "deployedAt": "2026-11-26T10:00:00Z", "outcome": "Succeeded"},
                {"id": 2, "revision": format!("main@sha1:{}", commit('b')),
                 "digest": format!("sha256:{}", "2".repeat(64)),
                 "deployedAt": "2026-11-26T11:00:00Z", "outcome": "Failed",
                 "message": "ConfigMap/web/settings: data.replicas: expected string, got number"},
                {"id": 3, "revision": format!("main@sha1:{}", commit('a')),
                 "digest": format!("sha256:{}", "1".repeat(64)),
                 "deployedAt": "2026-11-26T11:58:00Z", "outcome": "Succeeded"},
            ]},
        });
        let history = of(&obj);
        assert_eq!(history.len(), 3);
        assert_eq!(pin(&obj), None, "no rollback annotation");
        let mut pinned = obj.clone();
        let spec: ApplicationSpec = serde_json::from_value(obj["spec"].clone()).unwrap();
        let p = Pin::to(&history[0], &spec).unwrap();
        pinned["metadata"]["annotations"][ROLLBACK] = json!(serde_json::to_string(&p).unwrap());
        assert_eq!(pin(&pinned), Some(p));
        let now: jiff::Timestamp = "2026-11-26T12:00:00Z".parse().unwrap();
        crate::golden!("history.txt", &table(&history, Some(1), now));
        assert!(of(&json!({"status": {}})).is_empty());
    }
}
