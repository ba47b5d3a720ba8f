//! `skewer get applications`: Applications as a table people read (the rows and the table are
//! pure, tested without a cluster).

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use skewer_api::Application;
use skewer_api::conditions::READY;

/// One Application, as `get applications` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppRow {
    pub namespace: String,
    pub name: String,
    pub sync: String,
    pub health: String,
    pub revision: String,
    /// Why it is not Ready, when it is not.
    pub message: String,
}

pub fn row(app: &Application) -> AppRow {
    let st = app.status.clone().unwrap_or_default();
    let ready = st.conditions.iter().find(|c| c.type_ == READY);
    AppRow {
        namespace: app.namespace().unwrap_or_default(),
        name: app.name_any(),
        sync: st.sync.as_ref().map_or("Unknown", |s| &s.status).into(),
        health: st.health.as_ref().map_or("Unknown", |h| &h.status).into(),
        revision: st
            .sync
            .as_ref()
            .and_then(|s| s.revision.clone())
            .map(|r| crate::table::short_revision(&r))
            .unwrap_or_default(),
        message: ready
            .filter(|c| c.status != "True")
            .map(|c| c.message.clone())
            .unwrap_or_default(),
    }
}

/// The rows as an aligned table; `namespaces` adds their column.
pub fn table(rows: &[AppRow], namespaces: bool) -> String {
    let header = ["NAMESPACE", "NAME", "SYNC", "HEALTH", "REVISION", "MESSAGE"];
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.namespace.clone(),
                r.name.clone(),
                r.sync.clone(),
                r.health.clone(),
                r.revision.clone(),
                super::table::short(&r.message),
            ]
        })
        .collect();
    super::table::aligned_keeping(&header, lines, &[(0, namespaces)])
}

/// The Applications of `namespace` (every namespace when `None`), sorted.
pub async fn list(client: &Client, namespace: Option<&str>) -> Result<Vec<AppRow>, kube::Error> {
    let mut rows = rows_of::<Application, _>(client, namespace, row).await?;
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(rows)
}

/// Each object of kind `K` in `namespace` (every namespace when `None`) as a row.
pub async fn rows_of<K, R>(
    client: &Client,
    namespace: Option<&str>,
    row: impl Fn(&K) -> R,
) -> Result<Vec<R>, kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = skewer_api::scoped(client, namespace);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(row)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewer_api::ApplicationSpec;
    use skewer_api::application::{HealthStatus, SyncStatus};

    fn app(name: &str, sync: &str, health: &str) -> Application {
        let mut a = Application::new(name, ApplicationSpec::default());
        a.metadata.namespace = Some("argocd".into());
        a.status = Some(skewer_api::ApplicationStatus {
            sync: Some(SyncStatus {
                status: sync.into(),
                revision: Some(format!("main@sha1:{}", "ab".repeat(20))),
            }),
            health: Some(HealthStatus {
                status: health.into(),
                message: None,
            }),
            ..Default::default()
        });
        a
    }

    #[test]
    fn the_table_reads_like_argo_cds_app_list() {
        let rows = [
            app("web", "Synced", "Healthy"),
            app("api", "OutOfSync", "Missing"),
        ]
        .iter()
        .map(row)
        .collect::<Vec<_>>();
        assert_eq!(rows[0].revision, "main@abababa");
        let t = table(&rows, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME  SYNC       HEALTH   REVISION      MESSAGE");
        assert_eq!(lines[1], "web   Synced     Healthy  main@abababa");
        assert!(table(&rows, true).starts_with("NAMESPACE  NAME"));
    }
}
