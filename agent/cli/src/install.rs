//! `skewer install` and `skewer uninstall`.
//!
//! Install applies the install manifests as skewer's own Kustomization (`skewer-system`) would,
//! so that a later `skewer bootstrap` takes them over without a conflict, and only what a dry
//! run says would change. Uninstall asks first (or takes `--yes`; without a terminal to ask
//! it refuses), stops skewer's Deployment, then orphans every Kustomization's and
//! Application's objects (their finalizers removed, so deleting them prunes nothing) unless
//! `--prune-managed` says to delete what they applied, removes skewer's objects, and the CRDs
//! last.

use std::time::Duration;

use anyhow::{Context as _, Result};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use skewer_appliers::resources::Resources;

use super::term::{Ended, Exit, Progress};
use skewer_api::manifests::{self, NAMESPACE};
use skewer_view::named::Kind;

/// `skewer install`: returns how many objects were sent.
pub async fn install(client: &Client, image: &str) -> Result<usize> {
    let progress = Progress::start("installing skewer");
    let sent = super::bootstrap::apply_changed(client, install_manifests(image)?).await?;
    progress.done(
        true,
        &format!("installed: {sent} objects applied ({image})"),
    );
    Ok(sent)
}

/// skewer's install manifests for `image`, as objects.
fn install_manifests(image: &str) -> Result<Vec<skewer_appliers::Manifest>> {
    let files: Vec<skewer_appliers::load::SourceFile> = manifests::files(image)?
        .into_iter()
        .map(|(name, content)| skewer_appliers::load::SourceFile {
            path: name.into(),
            data: content.into_bytes(),
        })
        .collect();
    skewer_appliers::sync::build(&files, "", &[], None)
        .map_err(|e| anyhow::anyhow!("the install manifests: {e}"))
}

/// What `skewer uninstall` was asked.
pub struct Uninstall {
    pub yes: bool,
    pub prune_managed: bool,
}

/// `skewer uninstall`. Returns the lines to print.
pub async fn uninstall(client: &Client, u: &Uninstall) -> Result<Vec<String>> {
    if !u.yes {
        let what = if u.prune_managed {
            "skewer, its CRDs, and EVERY object its Kustomizations and Applications applied"
        } else {
            "skewer and its CRDs (the workloads it applied stay, no longer managed)"
        };
        super::term::confirm("uninstall", &format!("This deletes {what}."))?;
    }
    let mut lines = Vec::new();
    let progress = Progress::start("stopping skewer");
    let dp = DeleteParams::default();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), NAMESPACE);
    if ignore_missing(deployments.delete("skewer", &dp).await)? {
        lines.push("deleted Deployment skewer-system/skewer".into());
    }
    // A Pod still terminating would put finalizers back, and then prune what it manages.
    progress.set("waiting for skewer's Pods to stop");
    if !pods_gone(client, Duration::from_secs(90)).await? {
        return Err(Ended::new(
            Exit::TimedOut,
            "skewer's Pods in skewer-system did not stop within 90s; nothing else was changed. \
             Run uninstall again once `kubectl -n skewer-system get pods` lists none",
        )
        .into());
    }
    let resources = Resources::new(client.clone());
    for kind in [Kind::Kustomization, Kind::Application] {
        progress.set(&format!("releasing {}s", kind.word()));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
        let owners = match api.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e).context("listing skewer's objects"),
        };
        for owner in owners {
            let ns = owner.namespace().unwrap_or_default();
            let name = owner.name_any();
            if u.prune_managed {
                let n = prune_inventory(&resources, &owner).await?;
                lines.push(format!(
                    "deleted {n} objects of {}/{ns}/{name}",
                    kind.word()
                ));
            }
            release(client, &kind.resource(), &ns, &name).await?;
            if !u.prune_managed {
                lines.push(format!(
                    "orphaned the objects of {}/{ns}/{name}",
                    kind.word()
                ));
            }
        }
    }
    for kind in [
        Kind::GitRepository,
        Kind::OCIRepository,
        Kind::Receiver,
        Kind::Provider,
        Kind::Alert,
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
        if let Ok(list) = api.list(&ListParams::default()).await {
            for obj in list.items {
                release(
                    client,
                    &kind.resource(),
                    &obj.namespace().unwrap_or_default(),
                    &obj.name_any(),
                )
                .await?;
            }
        }
    }
    progress.set("deleting skewer's objects and CRDs");
    // CRDs last (their objects go with them), the namespace just before.
    let mut objects = install_manifests(manifests::DEFAULT_IMAGE)?;
    objects.sort_by_key(|m| match m.kind() {
        "CustomResourceDefinition" => 2,
        "Namespace" => 1,
        _ => 0,
    });
    for m in objects {
        let resolved = resources
            .resolve(m.api_version(), m.kind(), &[])
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", m.display()))?;
        let api = resolved.api(client.clone(), m.namespace());
        if ignore_missing(api.delete(m.name(), &dp).await)? {
            lines.push(format!("deleted {}", m.display()));
        }
    }
    progress.done(true, "uninstalled");
    Ok(lines)
}

/// Waits until no Pod of skewer's Deployment is left; `false` when `limit` passed first.
async fn pods_gone(client: &Client, limit: Duration) -> Result<bool> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selected = ListParams::default().labels("app.kubernetes.io/name=skewer");
    let deadline = skewer_appliers::wait::deadline_after(limit);
    loop {
        if pods.list_metadata(&selected).await?.items.is_empty() {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Removes the finalizers of one object and deletes it: nothing it applied is pruned.
async fn release(client: &Client, ar: &ApiResource, ns: &str, name: &str) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let patch = json!({"metadata": {"finalizers": null}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("removing the finalizers of {ns}/{name}")),
    }
    ignore_missing(api.delete(name, &DeleteParams::default()).await)
        .with_context(|| format!("deleting {ns}/{name}"))?;
    Ok(())
}

/// Deletes what `owner`'s recorded inventory lists; returns how many.
async fn prune_inventory(resources: &Resources, owner: &DynamicObject) -> Result<usize> {
    let owner = serde_json::to_value(owner).unwrap_or_default();
    let mut n = 0;
    for (id, api_version) in skewer_view::tree::inventory(&owner) {
        let Ok(resolved) = resources.resolve(&api_version, &id.kind, &[]).await else {
            continue;
        };
        let api = resolved.api(resources.client().clone(), &id.namespace);
        if ignore_missing(api.delete(&id.name, &DeleteParams::background()).await)
            .with_context(|| format!("deleting {}", id.display()))?
        {
            n += 1;
        }
    }
    Ok(n)
}

/// `Ok(true)` when deleted, `Ok(false)` when it was already gone.
fn ignore_missing<T>(r: Result<T, kube::Error>) -> Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(anyhow::anyhow!(skewer_appliers::apply::api_message(&e))),
    }
}
