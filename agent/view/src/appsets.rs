//! `skewer get applicationsets`: ApplicationSets as a table people read: how many
//! Applications each generated, how many are synced and healthy, where a RollingSync stands,
//! and why it is not Ready. The rows and the table are pure.

use kube::{Client, ResourceExt};
use serde::Serialize;

use skewer_api::ApplicationSet;
use skewer_api::conditions::READY;

/// One ApplicationSet, as `get applicationsets` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppSetRow {
    pub namespace: String,
    pub name: String,
    /// `True`, `False` or `Unknown`.
    pub ready: String,
    pub applications: usize,
    pub synced: usize,
    pub healthy: usize,
    /// `Progressing`, `Complete` or `Failed` under a RollingSync; empty otherwise.
    pub rollout: String,
    /// Why it is not Ready, or what a RollingSync waits for.
    pub message: String,
}

pub fn row(set: &ApplicationSet) -> AppSetRow {
    let st = set.status.clone().unwrap_or_default();
    let find = |t: &str| st.conditions.iter().find(|c| c.type_ == t);
    let ready = find(READY);
    let rollout = find("RolloutProgressing");
    let count = |f: &dyn Fn(&skewer_api::applicationset::ResourceStatus) -> bool| {
        st.resources.iter().filter(|r| f(r)).count()
    };
    let message = match (ready, rollout) {
        (Some(r), _) if r.status != "True" => r.message.clone(),
        (_, Some(p)) if p.status == "True" => p.message.clone(),
        _ => String::new(),
    };
    AppSetRow {
        namespace: set.namespace().unwrap_or_default(),
        name: set.name_any(),
        ready: ready.map_or("Unknown", |c| &c.status).into(),
        applications: st.resources.len(),
        synced: count(&|r| r.status == "Synced"),
        healthy: count(&|r| r.health.as_ref().is_some_and(|h| h.status == "Healthy")),
        rollout: match rollout {
            None => String::new(),
            Some(c) if c.status == "True" => "Progressing".into(),
            Some(c) if c.reason == "ApplicationSetRolloutComplete" => "Complete".into(),
            Some(_) => "Failed".into(),
        },
        message,
    }
}

/// The rows as an aligned table; `namespaces` adds their column.
pub fn table(rows: &[AppSetRow], namespaces: bool) -> String {
    let header = [
        "NAMESPACE",
        "NAME",
        "READY",
        "APPS",
        "SYNCED",
        "HEALTHY",
        "ROLLOUT",
        "MESSAGE",
    ];
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.namespace.clone(),
                r.name.clone(),
                r.ready.clone(),
                r.applications.to_string(),
                r.synced.to_string(),
                r.healthy.to_string(),
                r.rollout.clone(),
                super::table::short(&r.message),
            ]
        })
        .collect();
    super::table::aligned_keeping(&header, lines, &[(0, namespaces)])
}

/// The ApplicationSets of `namespace` (every namespace when `None`), sorted.
pub async fn list(client: &Client, namespace: Option<&str>) -> Result<Vec<AppSetRow>, kube::Error> {
    let mut rows = super::apps::rows_of::<ApplicationSet, _>(client, namespace, row).await?;
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewer_api::Condition;
    use skewer_api::application::HealthStatus;
    use skewer_api::applicationset::{ApplicationSetStatus, ResourceStatus};

    fn condition(t: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: t.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            ..Condition::default()
        }
    }

    fn app(name: &str, sync: &str, health: &str) -> ResourceStatus {
        ResourceStatus {
            name: name.into(),
            status: sync.into(),
            health: Some(HealthStatus {
                status: health.into(),
                message: None,
            }),
            ..ResourceStatus::default()
        }
    }

    #[test]
    fn the_table_counts_applications_and_says_where_a_rollout_stands() {
        let mut set: ApplicationSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "skewer.dev/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "fleet", "namespace": "team-a"},
            "spec": {"generators": [], "template": {"spec": {"destination": {}}}}
        }))
        .unwrap();
        set.status = Some(ApplicationSetStatus {
            conditions: vec![
                condition(
                    "Ready",
                    "True",
                    "ReconciliationSucceeded",
                    "3 Applications generated",
                ),
                condition(
                    "RolloutProgressing",
                    "True",
                    "ApplicationSetModified",
                    "RollingSync in progress: step 1: web-dev is Progressing",
                ),
            ],
            resources: vec![
                app("web-dev", "Synced", "Progressing"),
                app("web-staging", "OutOfSync", "Healthy"),
                app("web-prod", "OutOfSync", "Healthy"),
            ],
            ..ApplicationSetStatus::default()
        });
        let r = row(&set);
        assert_eq!((r.applications, r.synced, r.healthy), (3, 1, 2));
        assert_eq!(r.rollout, "Progressing");
        let t = table(&[r], false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "NAME   READY  APPS  SYNCED  HEALTHY  ROLLOUT      MESSAGE"
        );
        assert!(
            lines[1].starts_with(
                "fleet  True   3     1       2        Progressing  RollingSync in progress: step 1"
            ),
            "{}",
            lines[1]
        );
    }
}
