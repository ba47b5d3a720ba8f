//! Reading Applications' status: waiting on it, and what it says in a line.

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use skewer_api::{Application, ApplicationStatus};
use skewer_e2e::eventually;

use super::WAIT;

pub async fn app_status(c: &kube::Client, ns: &str, name: &str) -> Result<ApplicationStatus> {
    let api: Api<Application> = Api::namespaced(c.clone(), ns);
    Ok(api.get(name).await?.status.unwrap_or_default())
}

/// Waits until Application `ns/name`'s status passes `check` (which says what is wrong).
pub async fn wait_app(
    c: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&ApplicationStatus) -> Result<()>,
) -> Result<ApplicationStatus> {
    eventually(&format!("Application {ns}/{name} {what}"), WAIT, || async {
        let st = app_status(c, ns, name).await?;
        check(&st).map(|()| Some(st.clone()))
    })
    .await
}

pub fn sync_health(st: &ApplicationStatus) -> (String, String) {
    (
        st.sync
            .as_ref()
            .map(|s| s.status.clone())
            .unwrap_or_default(),
        st.health
            .as_ref()
            .map(|h| h.status.clone())
            .unwrap_or_default(),
    )
}

pub fn synced_healthy(st: &ApplicationStatus) -> Result<()> {
    match sync_health(st) {
        (s, h) if s == "Synced" && h == "Healthy" => Ok(()),
        other => bail!("{other:?}: {:?}", st.conditions),
    }
}

pub fn ready_message(st: &ApplicationStatus) -> String {
    st.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| format!("{} {} {}", c.status, c.reason, c.message))
        .unwrap_or_default()
}

pub fn cm(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{value: '{value}'}}\n"
    )
}

pub async fn cm_value(c: &kube::Client, ns: &str, name: &str) -> Result<Option<String>> {
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), ns);
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|m| m.data)
        .and_then(|d| d.get("value").cloned()))
}
