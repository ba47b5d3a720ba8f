//! Creating skewer's objects and waiting on them, for benchmarks: a GitRepository with its
//! artifact, Kustomizations applied or deleted, awaited with watches.

use std::time::Duration;

use anyhow::{Context as _, Result};
use kube::{Api, Client};
use serde_json::json;
use skewer_api::{GitRepository, Kustomization};

/// Creates GitRepository `src` for `url` (interval 1h) and waits for its artifact.
pub async fn create_source(c: &Client, ns: &str, url: &str) -> Result<()> {
    let repos = add_source(c, ns, url).await?;
    let stored = |o: Option<&GitRepository>| {
        o.and_then(|r| r.status.as_ref())
            .is_some_and(|s| s.artifact.is_some())
    };
    tokio::time::timeout(
        Duration::from_secs(120),
        kube::runtime::wait::await_condition(repos, "src", stored),
    )
    .await
    .context("no artifact in 120 s")??;
    Ok(())
}

/// Creates GitRepository `src` for `url` (interval 1h), not waiting for anything.
pub async fn add_source(c: &Client, ns: &str, url: &str) -> Result<Api<GitRepository>> {
    let repos: Api<GitRepository> = Api::namespaced(c.clone(), ns);
    let repo: GitRepository = serde_json::from_value(json!({
        "apiVersion": "skewer.dev/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "src", "namespace": ns},
        "spec": {"url": url, "interval": "1h"}
    }))?;
    repos.create(&Default::default(), &repo).await?;
    Ok(repos)
}

/// Creates Kustomization `name` of `path` in `src`, applied into `ns`; returns its uid.
pub async fn create_kustomization(
    ks: &Api<Kustomization>,
    ns: &str,
    name: &str,
    path: &str,
    interval: &str,
) -> Result<String> {
    create_kustomization_with(ks, ns, name, path, interval, json!({})).await
}

/// [`create_kustomization`] with more spec fields (`extra`, a JSON object), like `cluster` or
/// `serviceAccountName`.
pub async fn create_kustomization_with(
    ks: &Api<Kustomization>,
    ns: &str,
    name: &str,
    path: &str,
    interval: &str,
    extra: serde_json::Value,
) -> Result<String> {
    let mut spec = json!({"sourceRef": {"kind": "GitRepository", "name": "src"}, "path": path, "interval": interval, "targetNamespace": ns});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let obj: Kustomization = serde_json::from_value(json!({
        "apiVersion": "skewer.dev/v1alpha1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    }))?;
    Ok(ks
        .create(&Default::default(), &obj)
        .await?
        .metadata
        .uid
        .unwrap_or_default())
}

/// Waits on a watch until Kustomization `name` has applied a revision.
pub async fn until_applied(ks: &Api<Kustomization>, name: &str) -> Result<()> {
    let applied = |o: Option<&Kustomization>| {
        o.and_then(|k| k.status.as_ref())
            .is_some_and(|s| s.last_applied_revision.is_some())
    };
    tokio::time::timeout(
        Duration::from_secs(120),
        kube::runtime::wait::await_condition(ks.clone(), name, applied),
    )
    .await
    .with_context(|| format!("Kustomization {name} not Ready in 120 s"))??;
    Ok(())
}

/// Deletes Kustomization `name` while skewer still runs (so its finalizer goes) and waits.
pub async fn delete_kustomization(ks: &Api<Kustomization>, name: &str, uid: &str) -> Result<()> {
    ks.delete(name, &Default::default()).await?;
    let gone = kube::runtime::wait::conditions::is_deleted(uid);
    tokio::time::timeout(
        Duration::from_secs(60),
        kube::runtime::wait::await_condition(ks.clone(), name, gone),
    )
    .await
    .context("Kustomization not deleted in 60 s")??;
    Ok(())
}

/// Waits through a watch until ConfigMap `name` holds `want` under `key` (with `want` `None`:
/// until it is gone); returns the moment the watch saw it.
pub async fn configmap_value(
    api: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    name: &str,
    key: &str,
    want: Option<&str>,
    limit: Duration,
) -> Result<std::time::Instant> {
    let holds = |cm: Option<&k8s_openapi::api::core::v1::ConfigMap>| {
        cm.and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(key))
            .map(String::as_str)
            == want
            && (want.is_some() || cm.is_none())
    };
    tokio::time::timeout(
        limit,
        kube::runtime::wait::await_condition(api.clone(), name, holds),
    )
    .await
    .with_context(|| format!("ConfigMap {name}: {key} not {want:?} within {limit:?}"))??;
    Ok(std::time::Instant::now())
}

/// ConfigMaps `<prefix>-00`… as one YAML stream (no namespace: the Application's).
pub fn configmaps(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {prefix}-{i:02}\ndata:\n  index: \"{i}\"\n  payload: \"{}\"\n",
                "x".repeat(64)
            )
        })
        .collect()
}

/// `apps` Applications in `ns`, each of `objects` ConfigMaps in a directory of its own,
/// spread over `repos` repositories of `git`, automated with prune and self-heal.
pub fn application_fleet(
    git: &crate::GitServer,
    ns: &str,
    apps: usize,
    repos: usize,
    objects: usize,
) -> Result<()> {
    let repos = repos.max(1);
    let per_repo = apps.div_ceil(repos);
    let mut urls = Vec::new();
    for r in 0..repos {
        let repo = git.repo(&format!("r{r:02}"))?;
        for a in 0..per_repo {
            repo.write(
                &format!("apps/a{a:04}/cms.yaml"),
                &configmaps(&format!("r{r:02}-a{a:04}"), objects),
            )?;
        }
        repo.commit("apps")?;
        urls.push(repo.url.clone());
    }
    let mut yaml = String::new();
    for i in 0..apps {
        let (r, a) = (i % repos, i / repos);
        yaml.push_str(&format!(
            "---\napiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: app-{i:04}, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps/a{a:04}, targetRevision: main}}\n  syncPolicy: {{automated: {{prune: true, selfHeal: true}}}}\n",
            urls[r]
        ));
    }
    crate::kc_apply(&yaml)
}

/// Waits until `n` Applications of `ns` are Synced and Healthy (at most `limit`).
pub async fn applications_synced(c: &Client, ns: &str, n: usize, limit: Duration) -> Result<()> {
    use skewer_api::Application;
    let api: Api<Application> = Api::namespaced(c.clone(), ns);
    let deadline = std::time::Instant::now() + limit;
    loop {
        let list = api.list(&kube::api::ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|a| {
                a.status.as_ref().is_some_and(|s| {
                    s.sync.as_ref().is_some_and(|x| x.status == "Synced")
                        && s.health.as_ref().is_some_and(|h| h.status == "Healthy")
                })
            })
            .count();
        if done == n {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!("only {done} of {n} Applications Synced and Healthy after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A `github` Provider `provider` at `address` (its token in Secret `token`) and Alert
/// `statuses` sending it the commit statuses of Kustomization `name` (`*`: every one) in `ns`;
/// returns once skewer has registered both (each `Ready`).
pub async fn statuses_to(ns: &str, provider: &str, address: &str, name: &str) -> Result<()> {
    crate::kc_apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: token, namespace: {ns}}}\nstringData: {{token: bench}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Provider\nmetadata: {{name: {provider}, namespace: {ns}}}\nspec: {{type: github, address: '{address}', secretRef: {{name: token}}}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Alert\nmetadata: {{name: statuses, namespace: {ns}}}\nspec:\n  providerRef: {{name: {provider}}}\n  eventSources: [{{kind: Kustomization, name: '{name}'}}]\n"
    ))?;
    for kind in [format!("provider/{provider}"), "alert/statuses".to_string()] {
        crate::eventually(
            &format!("{kind} ready"),
            Duration::from_secs(30),
            || async {
                let ready = crate::kc(&[
                    "get",
                    &kind,
                    "-n",
                    ns,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ])?;
                Ok((ready == "True").then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}
