//! `skewer get applications` and `skewer sync`: Applications as a table people read (the rows
//! and the table are pure, tested without a cluster), and a sync asked for and, with `--wait`,
//! followed until it is done.

use std::time::Duration;

use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde_json::json;

use crate::api::conditions::READY;
use crate::api::{Application, Kustomization, RECONCILE_REQUESTED_AT, SYNC_REQUESTED_AT};

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
            .map(|r| short_revision(&r))
            .unwrap_or_default(),
        message: ready
            .filter(|c| c.status != "True")
            .map(|c| c.message.clone())
            .unwrap_or_default(),
    }
}

/// `main@sha1:0123456789abcdef…` as `main@0123456`.
fn short_revision(r: &str) -> String {
    match r.rsplit_once("sha1:") {
        Some((name, hex)) => format!("{name}{}", hex.get(..7).unwrap_or(hex)),
        None => r.to_string(),
    }
}

/// The rows as an aligned table; `namespaces` adds their column.
pub fn table(rows: &[AppRow], namespaces: bool) -> String {
    let mut header = vec!["NAMESPACE", "NAME", "SYNC", "HEALTH", "REVISION", "MESSAGE"];
    let mut lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.namespace.clone(),
                r.name.clone(),
                r.sync.clone(),
                r.health.clone(),
                r.revision.clone(),
                crate::get::short(&r.message),
            ]
        })
        .collect();
    if !namespaces {
        header.remove(0);
        for l in &mut lines {
            l.remove(0);
        }
    }
    crate::get::aligned(&header, lines)
}

/// The Applications of `namespace` (every namespace when `None`), sorted.
pub async fn list(client: &Client, namespace: Option<&str>) -> Result<Vec<AppRow>, kube::Error> {
    let api: Api<Application> = crate::runtime::scoped(client, namespace);
    let mut rows: Vec<AppRow> = api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(row)
        .collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(rows)
}

/// What `skewer sync` names: `app/<name>` (or `application/`, `applications/`) or
/// `ks/<name>` (or `kustomization/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Application(String),
    Kustomization(String),
}

impl std::str::FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, name) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}': name it as app/<name> or ks/<name>"))?;
        if name.is_empty() {
            return Err(format!("'{s}': the name is missing"));
        }
        match kind.to_ascii_lowercase().as_str() {
            "app" | "apps" | "application" | "applications" => Ok(Target::Application(name.into())),
            "ks" | "kustomization" | "kustomizations" => Ok(Target::Kustomization(name.into())),
            other => Err(format!(
                "'{other}' is not a kind skewer syncs (app/<name>, ks/<name>)"
            )),
        }
    }
}

/// Why a sync did not end well.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Failed(String),
    #[error("not done after {0:?}: {1}")]
    Timeout(Duration, String),
}

/// Asks for a sync of `target` (an Application syncs even without automation; a Kustomization
/// reconciles in full) and, with `wait`, waits until it was handled and ended: returns the
/// final line to print.
pub async fn sync(
    client: &Client,
    namespace: &str,
    target: &Target,
    wait: Option<Duration>,
) -> Result<String, SyncError> {
    let token = jiff::Timestamp::now().to_string();
    let params = PatchParams::default();
    match target {
        Target::Application(name) => {
            let api: Api<Application> = Api::namespaced(client.clone(), namespace);
            let patch = json!({"metadata": {"annotations": {SYNC_REQUESTED_AT: &token}}});
            api.patch(name, &params, &Patch::Merge(&patch)).await?;
            let Some(wait) = wait else {
                return Ok(format!("sync of application/{name} requested"));
            };
            poll(wait, || async {
                let app = api.get(name).await?;
                let st = app.status.clone().unwrap_or_default();
                if st.last_handled_sync_at.as_deref() != Some(token.as_str()) {
                    return Ok(Err("not picked up yet".to_string()));
                }
                let r = row(&app);
                let op = st.operation_state.unwrap_or_default();
                match op.phase.as_str() {
                    "Failed" | "Error" => Err(SyncError::Failed(op.message)),
                    "Running" => Ok(Err(op.message)),
                    _ if r.sync == "Synced" && r.health == "Healthy" => Ok(Ok(format!(
                        "application/{name}: Synced, Healthy at {}",
                        r.revision
                    ))),
                    _ => Ok(Err(format!("{}, {}: {}", r.sync, r.health, r.message))),
                }
            })
            .await
        }
        Target::Kustomization(name) => {
            let api: Api<Kustomization> = Api::namespaced(client.clone(), namespace);
            let patch = json!({"metadata": {"annotations": {RECONCILE_REQUESTED_AT: &token}}});
            api.patch(name, &params, &Patch::Merge(&patch)).await?;
            let Some(wait) = wait else {
                return Ok(format!("reconcile of kustomization/{name} requested"));
            };
            poll(wait, || async {
                let ks = api.get(name).await?;
                let st = ks.status.clone().unwrap_or_default();
                if st.last_handled_reconcile_at.as_deref() != Some(token.as_str()) {
                    return Ok(Err("not picked up yet".to_string()));
                }
                match st.conditions.iter().find(|c| c.type_ == READY) {
                    Some(c) if c.status == "True" => {
                        Ok(Ok(format!("kustomization/{name}: {}", c.message)))
                    }
                    Some(c) if c.reason != "Progressing" => {
                        Err(SyncError::Failed(format!("{}: {}", c.reason, c.message)))
                    }
                    other => Ok(Err(format!("{other:?}"))),
                }
            })
            .await
        }
    }
}

/// Polls `check` every half second until it is done (`Ok(Ok(line))`), fails, or `wait` passes
/// (then the last `Ok(Err(state))` says where it stood).
async fn poll<F, Fut>(wait: Duration, mut check: F) -> Result<String, SyncError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Result<String, String>, SyncError>>,
{
    let deadline = skewer_appliers::wait::deadline_after(wait);
    loop {
        let state = match check().await? {
            Ok(done) => return Ok(done),
            Err(state) => state,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(SyncError::Timeout(wait, state));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApplicationSpec;
    use crate::api::application::{HealthStatus, SyncStatus};

    fn app(name: &str, sync: &str, health: &str) -> Application {
        let mut a = Application::new(name, ApplicationSpec::default());
        a.metadata.namespace = Some("argocd".into());
        a.status = Some(crate::api::ApplicationStatus {
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

    #[test]
    fn sync_targets_name_their_kind() {
        assert_eq!("app/web".parse(), Ok(Target::Application("web".into())));
        assert_eq!(
            "Kustomization/infra".parse(),
            Ok(Target::Kustomization("infra".into()))
        );
        assert!("web".parse::<Target>().is_err());
        assert!("deploy/web".parse::<Target>().is_err());
        assert!("app/".parse::<Target>().is_err());
    }
}
