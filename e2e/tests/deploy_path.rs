//! Issue 24 acceptance: Kustomizations and Applications share one deploy path, so Applications
//! have what only Kustomizations had: they reconcile when their cluster's Secret changes, the
//! holder of an object they are refused hears of it, and one reconcile is bounded by the
//! outer timeout. Against the real hub, a real spoke, a real Git server and a real admission
//! webhook that never answers.

mod common;

use std::net::TcpListener;

use anyhow::{Result, bail};
use common::apps::*;
use common::spokes::*;
use common::*;
use skewer_e2e::git::GitServer;
use skewer_e2e::{Skewer, eventually, kc, kc_apply, unique};

/// An Application `name` in `ns` of `path` of `repo`, with `extra` spec lines (indented two).
fn application(ns: &str, name: &str, repo: &str, path: &str, extra: &str) -> Result<()> {
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: \"{repo}\", targetRevision: main, path: {path}}}\n{extra}"
    ))
}

fn ready_reason(st: &skewer_api::ApplicationStatus) -> (String, String) {
    st.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_application_follows_its_clusters_secret() -> Result<()> {
    let (spoke, _) = spokes();
    let on_spoke = skewer_e2e::client(spoke).await?;
    let c = client().await;
    let ns = skewer_e2e::namespace("app-secret")?;
    let there = unique("app-secret");
    let git = GitServer::start()?;
    let repo = git.repo("fleet")?;
    repo.write("apps/all.yaml", &namespace_and_configmap(&there, "one"))?;
    repo.commit("one")?;
    let _skewer = Skewer::start(&ns)?;
    let account = unique("app-rotator");
    let old_token = admin_token(spoke, &account).await?;
    let cluster = unique("spoke");
    token_secret_allowing(&ns, &cluster, spoke, &old_token, Some(&ns))?;
    // An hour between looks: only the Secret's changes can make it look sooner.
    application(
        &ns,
        "fleet",
        &repo.url,
        "apps",
        &format!(
            "  destination: {{name: {cluster}}}\n  interval: 1h\n  syncPolicy: {{automated: {{prune: true}}}}\n"
        ),
    )?;
    wait_app(&c, &ns, "fleet", "synced", synced_healthy).await?;
    assert_eq!(
        cm_value(&on_spoke, &there, "cfg").await?.as_deref(),
        Some("one")
    );

    // The Secret stops allowing this namespace: the Application hears of it now.
    token_secret_allowing(&ns, &cluster, spoke, &old_token, Some("elsewhere"))?;
    let st = wait_app(&c, &ns, "fleet", "refused", |st| match ready_reason(st) {
        (reason, _) if reason == "AccessDenied" => Ok(()),
        other => bail!("{other:?}"),
    })
    .await?;
    assert!(ready_reason(&st).1.contains(&format!("namespace '{ns}'")));

    // Allowed again, with a rotated token (the old one refused by the spoke): the next commit
    // is applied with it, without a restart.
    let new_token = rotate(spoke, &account, &old_token).await?;
    token_secret_allowing(&ns, &cluster, spoke, &new_token, Some(&ns))?;
    wait_app(&c, &ns, "fleet", "synced again", synced_healthy).await?;
    repo.write("apps/all.yaml", &namespace_and_configmap(&there, "two"))?;
    let two = repo.commit("two")?;
    kc(&[
        "annotate",
        "--overwrite",
        "application",
        "fleet",
        "-n",
        &ns,
        &format!("skewer.dev/reconcile-requested-at={two}"),
    ])?;
    eventually("the next commit on the spoke", WAIT, || async {
        let v = cm_value(&on_spoke, &there, "cfg").await?;
        Ok((v.as_deref() == Some("two")).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_applications_conflict_is_told_to_the_holder() -> Result<()> {
    let c = client().await;
    let ns = skewer_e2e::namespace("app-conflict")?;
    let git = GitServer::start()?;
    let repo = git.repo("shared")?;
    repo.write("holder/cm.yaml", &cm("shared", "holder"))?;
    repo.write("claimant/cm.yaml", &cm("shared", "claimant"))?;
    repo.commit("both")?;
    let _skewer = Skewer::start(&ns)?;
    let extra = format!(
        "  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  syncPolicy: {{automated: {{prune: true}}}}\n"
    );
    application(&ns, "holder", &repo.url, "holder", &extra)?;
    wait_app(&c, &ns, "holder", "synced", synced_healthy).await?;
    application(&ns, "claimant", &repo.url, "claimant", &extra)?;
    let st = wait_app(&c, &ns, "claimant", "refused", |st| {
        let op = st.operation_state.clone().unwrap_or_default();
        if op
            .message
            .contains(&format!("applied by Application/{ns}/holder"))
        {
            return Ok(());
        }
        bail!("{}: {}", op.phase, op.message)
    })
    .await?;
    assert!(
        st.inventory.as_ref().is_none_or(|i| i.is_empty()),
        "the claimant holds nothing: {:?}",
        st.inventory
    );
    // The holder hears of it, and keeps its object.
    eventually("a Warning Event on the holder", WAIT, || async {
        let reasons = event_reasons(&ns, "involvedObject.name=holder,type=Warning")?;
        Ok(reasons.contains("OwnershipConflict").then_some(()))
    })
    .await?;
    assert_eq!(
        cm_value(&c, &ns, "shared").await?.as_deref(),
        Some("holder")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_applications_reconcile_ends_at_its_timeout() -> Result<()> {
    let c = client().await;
    let ns = skewer_e2e::namespace("app-timeout")?;
    // An admission webhook that accepts connections and never answers: every ConfigMap write
    // in this namespace hangs until the API server gives up on it (30 s).
    let silent = TcpListener::bind("127.0.0.1:0")?;
    let webhook = unique("silent");
    kc(&["label", "namespace", &ns, &format!("silent={webhook}")])?;
    kc_apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: {webhook}}}\nwebhooks:\n- name: silent.skewer.dev\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Fail\n  timeoutSeconds: 30\n  clientConfig: {{url: \"https://{}/\", caBundle: {}}}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps], scope: Namespaced}}]\n  namespaceSelector: {{matchLabels: {{silent: {webhook}}}}}\n",
        silent.local_addr()?,
        skewer_e2e::server_ca(skewer_e2e::hub())?
    ))?;
    let result = async {
        let git = GitServer::start()?;
        let repo = git.repo("slow")?;
        repo.write("apps/cm.yaml", &cm("stuck", "x"))?;
        repo.commit("one")?;
        let _skewer = Skewer::start(&ns)?;
        application(
            &ns,
            "slow",
            &repo.url,
            "apps",
            &format!(
                "  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  timeout: 3s\n  syncPolicy: {{automated: {{}}}}\n"
            ),
        )?;
        let st = wait_app(&c, &ns, "slow", "timed out", |st| match ready_reason(st) {
            (reason, message) if message.contains("timed out after 3s (spec.timeout)") => {
                anyhow::ensure!(reason == "ReconciliationFailed", "{reason}: {message}");
                Ok(())
            }
            other => bail!("{other:?}"),
        })
        .await?;
        // Cut short mid-apply, it still holds what it may have written.
        let ids: Vec<String> = st
            .inventory
            .iter()
            .flat_map(|i| i.iter())
            .map(|(id, _)| id.to_string())
            .collect();
        assert_eq!(ids, [format!("{ns}_stuck__ConfigMap")]);
        Ok(())
    }
    .await;
    kc(&["delete", "validatingwebhookconfiguration", &webhook])?;
    drop(silent);
    result
}
