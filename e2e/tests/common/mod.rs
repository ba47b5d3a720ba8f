//! Helpers shared by the e2e test files: creating sources and Kustomizations, reading status.

#![allow(dead_code)]

pub mod apps;
pub mod spokes;

use std::time::Duration;

use std::collections::BTreeMap;

use anyhow::Result;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use skewer_api::{GitRepository, Kustomization, KustomizationStatus, SourceStatus};
use skewer_controller::artifacts::Source;
use skewer_e2e::{eventually, hub, kc_apply};

pub const WAIT: Duration = Duration::from_secs(60);

pub async fn client() -> kube::Client {
    skewer_e2e::client(hub()).await.expect("client")
}

/// A GitRepository polling `url` every second.
pub fn git_repository(ns: &str, name: &str, url: &str) -> Result<()> {
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  url: {url}\n  interval: 1s\n  ref: {{branch: main}}\n"
    ))
}

/// A Kustomization; `extra` is more spec fields as YAML, indented by two spaces.
pub fn kustomization(ns: &str, name: &str, source: &str, path: &str, extra: &str) -> Result<()> {
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: {source}}}\n  path: {path}\n  interval: 1m\n  retryInterval: 2s\n{extra}"
    ))
}

pub async fn status(c: &kube::Client, ns: &str, name: &str) -> Result<KustomizationStatus> {
    let api: Api<Kustomization> = Api::namespaced(c.clone(), ns);
    Ok(api.get(name).await?.status.unwrap_or_default())
}

pub fn ready(st: &KustomizationStatus) -> Option<(&str, &str, &str)> {
    st.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// Waits until the Kustomization is Ready at `revision` (a commit id suffix).
pub async fn wait_applied(
    c: &kube::Client,
    ns: &str,
    name: &str,
    commit: &str,
) -> Result<KustomizationStatus> {
    eventually(
        &format!("Kustomization {ns}/{name} Ready at {commit}"),
        WAIT,
        || async {
            let st = status(c, ns, name).await?;
            let at = st
                .last_applied_revision
                .as_deref()
                .is_some_and(|r| r.ends_with(commit));
            if at && ready(&st).map(|r| r.0) == Some("True") {
                Ok(Some(st))
            } else {
                anyhow::bail!(
                    "status: {:?} revision {:?}",
                    ready(&st),
                    st.last_applied_revision
                )
            }
        },
    )
    .await
}

/// Waits until Ready=False with a message satisfying `pred`.
pub async fn wait_failed(
    c: &kube::Client,
    ns: &str,
    name: &str,
    pred: impl Fn(&str, &str) -> bool,
) -> Result<KustomizationStatus> {
    eventually(
        &format!("Kustomization {ns}/{name} to fail as expected"),
        WAIT,
        || async {
            let st = status(c, ns, name).await?;
            match ready(&st) {
                Some(("False", reason, msg)) if pred(reason, msg) => Ok(Some(st.clone())),
                other => anyhow::bail!("status: {other:?}"),
            }
        },
    )
    .await
}

/// The reasons of the Events in `ns` that `field_selector` selects (like
/// `involvedObject.name=app,type=Warning`), space-separated.
pub fn event_reasons(ns: &str, field_selector: &str) -> Result<String> {
    skewer_e2e::kc(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        field_selector,
        "-o",
        "jsonpath={.items[*].reason}",
    ])
}

pub fn inventory_ids(st: &KustomizationStatus) -> Vec<String> {
    let mut ids: Vec<String> = st
        .inventory
        .iter()
        .flat_map(|i| i.iter().map(|(id, _)| id.to_string()))
        .collect();
    ids.sort();
    ids
}

pub async fn exists(
    c: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<Option<DynamicObject>> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(c, &gvk).await?;
    let api: Api<DynamicObject> = if ns.is_empty() {
        Api::all_with(c.clone(), &ar)
    } else {
        Api::namespaced_with(c.clone(), ns, &ar)
    };
    Ok(api.get_opt(name).await?)
}

/// Names of ConfigMaps in `ns` labelled as owned by Kustomization `owner`.
pub async fn owned_configmaps(c: &kube::Client, ns: &str, owner: &str) -> Result<Vec<String>> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(c.clone(), ns);
    let list = api
        .list_metadata(&ListParams::default().labels(&format!("skewer.dev/name={owner}")))
        .await?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

pub async fn git_revision(c: &kube::Client, ns: &str, name: &str) -> Result<Option<String>> {
    let api: Api<GitRepository> = Api::namespaced(c.clone(), ns);
    Ok(api
        .get(name)
        .await?
        .status
        .and_then(|s| s.artifact)
        .map(|a| a.revision))
}

/// One test's world: its namespace, a git daemon serving repo `app`, and an API client.
pub struct Fixture {
    pub ns: String,
    pub repo: skewer_e2e::Repo,
    pub c: kube::Client,
    _git: skewer_e2e::GitServer,
}

impl Fixture {
    pub async fn new(prefix: &str) -> Result<Self> {
        let ns = skewer_e2e::namespace(prefix)?;
        let git = skewer_e2e::GitServer::start()?;
        let repo = git.repo("app")?;
        Ok(Self {
            ns,
            repo,
            c: client().await,
            _git: git,
        })
    }

    /// Starts skewer on this namespace (with extra flags) and a GitRepository `src` for `app`.
    pub fn start(&self, flags: &[&str]) -> Result<skewer_e2e::Skewer> {
        let skewer = skewer_e2e::Skewer::start_with(&self.ns, flags)?;
        git_repository(&self.ns, "src", &self.repo.url)?;
        Ok(skewer)
    }
}

impl Fixture {
    /// Commits `files` (path, content), starts skewer with `flags`, and waits until a
    /// Kustomization `app` of the repository root (with `extra` spec lines) is applied.
    pub async fn app(
        &self,
        files: &[(String, String)],
        flags: &[&str],
        extra: &str,
    ) -> Result<skewer_e2e::Skewer> {
        for (path, content) in files {
            self.repo.write(path, content)?;
        }
        let commit = self.repo.commit("app")?;
        let skewer = self.start(flags)?;
        kustomization(&self.ns, "app", "src", "./", extra)?;
        wait_applied(&self.c, &self.ns, "app", &commit).await?;
        Ok(skewer)
    }

    /// One ConfigMap `cfg` in the test's namespace.
    pub fn configmap(&self) -> Vec<(String, String)> {
        vec![(
            "cm.yaml".into(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: {}\n",
                self.ns
            ),
        )]
    }
}

/// Creates or replaces Secret `name` with `data` (as stringData).
/// Applications in `ns` reach the registry of `url` (`oci://…`, a plain-HTTP registry on
/// loopback) through Argo CD's key for it, on a credential template.
pub async fn plain_http_registry(c: &kube::Client, ns: &str, url: &str) -> Result<()> {
    put_secret(
        c,
        ns,
        "registry",
        &[
            ("url", url),
            ("type", "oci"),
            ("insecureOCIForceHttp", "true"),
        ],
    )
    .await?;
    skewer_e2e::kc(&[
        "label",
        "secret",
        "registry",
        "-n",
        ns,
        "argocd.argoproj.io/secret-type=repo-creds",
    ])?;
    Ok(())
}

pub async fn put_secret(
    c: &kube::Client,
    ns: &str,
    name: &str,
    data: &[(&str, &str)],
) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(c.clone(), ns);
    let string_data: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "stringData": string_data,
    });
    api.patch(
        name,
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&secret),
    )
    .await?;
    Ok(())
}

/// The status of source `name` of kind `S`.
pub async fn source_status<S: Source>(
    c: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<SourceStatus> {
    let api: Api<S> = Api::namespaced(c.clone(), ns);
    Ok(api.get(name).await?.status().cloned().unwrap_or_default())
}

/// Waits until source `name` of kind `S` is `SourceVerified=True`; returns the message (who
/// signed).
pub async fn wait_source_verified<S: Source>(
    c: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<String> {
    let (_, message) =
        wait_source_condition_of::<S>(c, ns, name, "SourceVerified", "True", |_, _| true).await?;
    Ok(message)
}

/// Waits until condition `type_` of source `name` of kind `S` has `status` and a reason and message passing `pred`.
pub async fn wait_source_condition_of<S: Source>(
    c: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    pred: impl Fn(&str, &str) -> bool,
) -> Result<(String, String)> {
    eventually(
        &format!("{} {ns}/{name} {type_}={status}", S::KIND),
        WAIT,
        || async {
            let st = source_status::<S>(c, ns, name).await?;
            match st.conditions.iter().find(|c| c.type_ == type_) {
                Some(cond) if cond.status == status && pred(&cond.reason, &cond.message) => {
                    Ok(Some((cond.reason.clone(), cond.message.clone())))
                }
                other => anyhow::bail!("{type_}: {other:?}"),
            }
        },
    )
    .await
}

/// Runs the `skewer` command line against the hub; its standard output, or its error.
pub fn skewer_cli(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(skewer_e2e::skewer_bin())
        .env("KUBECONFIG", hub())
        .args(args)
        .output()?;
    if !out.status.success() {
        anyhow::bail!("skewer {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The names of the first `n` objects skewer deleted in `ns`, in the order the API server's
/// audit log recorded the deletions (waiting until there are `n`).
pub async fn deletions(ns: &str, n: usize) -> Result<Vec<String>> {
    eventually(&format!("{n} deletions in {ns}"), WAIT, || async {
        let deletes: Vec<String> = skewer_e2e::audited("skewer", ns)?
            .into_iter()
            .filter(|a| a.verb == "delete")
            .map(|a| a.name)
            .collect();
        Ok((deletes.len() >= n).then_some(deletes))
    })
    .await
}
