//! Issue 9 acceptance: a hub and two spokes (three API servers on one etcd), clusters
//! registered by Secrets in skewer's and Argo CD's formats, credential rotation, a cluster that
//! leaves and comes back, a three-layer hop applied as the tenant, lockdown flags, and a spoke
//! whose API server stops.

mod common;

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use common::spokes::*;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use skewer_e2e::{Skewer, audited, eventually, kc, kc_apply, kc_on, unique};

/// `skewer get clusters -n ns -o json`, as the hub's admin.
fn get_clusters(ns: &str) -> Result<Vec<serde_json::Value>> {
    let out = std::process::Command::new(skewer_e2e::skewer_bin())
        .args(["get", "clusters", "-n", ns, "-o", "json"])
        .env("KUBECONFIG", skewer_e2e::hub())
        .output()?;
    if !out.status.success() {
        bail!(
            "skewer get clusters: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn row<'a>(rows: &'a [serde_json::Value], name: &str) -> Result<&'a serde_json::Value> {
    rows.iter()
        .find(|r| r["name"] == name)
        .with_context(|| format!("no row {name} in {rows:?}"))
}

/// A cluster Secret exactly as policy engines generate them for virtual clusters.
fn certificate_secret(ns: &str, name: &str, spoke: &Path) -> Result<()> {
    vcluster_secret(ns, name, spoke, "clusterType: vcluster, team: team-a", None)
}

async fn configmap(c: &kube::Client, ns: &str, name: &str) -> Result<Option<ConfigMap>> {
    Ok(Api::<ConfigMap>::namespaced(c.clone(), ns)
        .get_opt(name)
        .await?)
}

async fn value_of(c: &kube::Client, ns: &str, name: &str) -> Result<Option<String>> {
    Ok(configmap(c, ns, name)
        .await?
        .and_then(|cm| cm.data)
        .and_then(|d| d.get("value").cloned()))
}

/// Waits until `c` has ConfigMap `ns/name` with `value`.
async fn has_value(c: &kube::Client, ns: &str, name: &str, value: &str) -> Result<()> {
    eventually(
        &format!("ConfigMap {ns}/{name} = {value}"),
        WAIT,
        || async { Ok((value_of(c, ns, name).await?.as_deref() == Some(value)).then_some(())) },
    )
    .await
}

#[tokio::test]
async fn spokes_registered_both_ways_are_applied_to_and_healed() -> Result<()> {
    let (a, b) = spokes();
    let f = Fixture::new("spokes").await?;
    let (ca, cb) = (skewer_e2e::client(a).await?, skewer_e2e::client(b).await?);
    let app = unique("app");
    let viakc = unique("viakc");
    f.repo
        .write("app/all.yaml", &namespace_and_configmap(&app, "one"))?;
    f.repo
        .write("kc/all.yaml", &namespace_and_configmap(&viakc, "kc"))?;
    let commit = f.repo.commit("app")?;
    let _skewer = f.start(&[])?;
    // Names of their own: `get clusters` counts the Kustomizations of every namespace.
    let (name_a, name_b) = (unique("spoke-a"), unique("spoke-b"));
    let token = admin_token(a, &unique("skewer")).await?;
    token_secret(&f.ns, &name_a, a, &token)?;
    certificate_secret(&f.ns, &name_b, b)?;
    // Flux's kubeConfig: the spoke's own kubeconfig in a Secret, registered nowhere.
    kc(&[
        "create",
        "secret",
        "generic",
        "spoke-a-kubeconfig",
        "-n",
        &f.ns,
        &format!("--from-file=value={}", a.display()),
    ])?;
    kustomization(
        &f.ns,
        "to-a",
        "src",
        "./app",
        &format!("  prune: true\n  cluster: {name_a}\n"),
    )?;
    kustomization(
        &f.ns,
        "to-b",
        "src",
        "./app",
        &format!("  prune: true\n  cluster: {name_b}\n"),
    )?;
    kustomization(
        &f.ns,
        "via-kubeconfig",
        "src",
        "./kc",
        "  kubeConfig:\n    secretRef: {name: spoke-a-kubeconfig}\n",
    )?;
    for name in ["to-a", "to-b", "via-kubeconfig"] {
        wait_applied(&f.c, &f.ns, name, &commit).await?;
    }
    assert_eq!(value_of(&ca, &app, "cfg").await?.as_deref(), Some("one"));
    assert_eq!(value_of(&cb, &app, "cfg").await?.as_deref(), Some("one"));
    assert_eq!(value_of(&ca, &viakc, "cfg").await?.as_deref(), Some("kc"));
    assert!(
        kc(&["get", "namespace", &app, "--ignore-not-found", "-o", "name"])?.is_empty(),
        "nothing on the hub"
    );
    assert!(
        configmap(&cb, &viakc, "cfg").await?.is_none(),
        "nothing on the other spoke"
    );

    // Both listed, probed live.
    let rows = get_clusters(&f.ns)?;
    for name in [&name_a, &name_b] {
        let r = row(&rows, name)?;
        assert_eq!(r["reachable"], true, "{r}");
        assert!(
            r["version"].as_str().is_some_and(|v| v.starts_with("v1.")),
            "{r}"
        );
        assert_eq!(r["kustomizations"], 1, "{r}");
    }
    assert_eq!(
        row(&rows, &name_b)?["secret"],
        format!("{}/vcluster-{name_b}", f.ns)
    );
    assert_eq!(row(&rows, "(hub)")?["reachable"], true);

    // Self-heal on both spokes: a deletion on A, an edit on B.
    kc_on(a, &["delete", "configmap", "cfg", "-n", &app])?;
    has_value(&ca, &app, "cfg", "one").await?;
    kc_on(
        b,
        &[
            "patch",
            "configmap",
            "cfg",
            "-n",
            &app,
            "-p",
            r#"{"data":{"value":"drifted"}}"#,
        ],
    )?;
    has_value(&cb, &app, "cfg", "one").await?;
    Ok(())
}

#[tokio::test]
async fn rotated_credentials_work_and_a_cluster_that_leaves_prunes_nothing() -> Result<()> {
    let (a, b) = spokes();
    let f = Fixture::new("rotate").await?;
    let (ca, cb) = (skewer_e2e::client(a).await?, skewer_e2e::client(b).await?);
    let app = unique("rot");
    f.repo
        .write("all.yaml", &namespace_and_configmap(&app, "one"))?;
    f.repo.write(
        "extra.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: extra, namespace: {app}}}\n"),
    )?;
    let first = f.repo.commit("one")?;
    let _skewer = f.start(&[])?;
    let account = unique("rotator");
    let old_token = admin_token(a, &account).await?;
    token_secret(&f.ns, "spoke-a", a, &old_token)?;
    certificate_secret(&f.ns, "spoke-b", b)?;
    kustomization(
        &f.ns,
        "to-a",
        "src",
        "./",
        "  prune: true\n  cluster: spoke-a\n",
    )?;
    kustomization(
        &f.ns,
        "to-b",
        "src",
        "./",
        "  prune: true\n  cluster: spoke-b\n",
    )?;
    wait_applied(&f.c, &f.ns, "to-a", &first).await?;
    wait_applied(&f.c, &f.ns, "to-b", &first).await?;

    // Rotation: a new token, the old one revoked on the server, the cluster Secret updated.
    let new_token = rotate(a, &account, &old_token).await?;
    token_secret(&f.ns, "spoke-a", a, &new_token)?;
    f.repo
        .write("all.yaml", &namespace_and_configmap(&app, "two"))?;
    let second = f.repo.commit("two")?;
    wait_applied(&f.c, &f.ns, "to-a", &second).await?;
    assert_eq!(value_of(&ca, &app, "cfg").await?.as_deref(), Some("two"));
    // The rebuilt client watches for drift too.
    kc_on(a, &["delete", "configmap", "cfg", "-n", &app])?;
    has_value(&ca, &app, "cfg", "two").await?;

    // Spoke B leaves: a clear condition, and nothing pruned there.
    wait_applied(&f.c, &f.ns, "to-b", &second).await?;
    kc(&["delete", "secret", "vcluster-spoke-b", "-n", &f.ns])?;
    wait_failed(&f.c, &f.ns, "to-b", |reason, msg| {
        reason == "ClusterUnavailable" && msg.contains("cluster 'spoke-b' is not registered")
    })
    .await?;
    f.repo.remove("extra.yaml")?;
    let third = f.repo.commit("three: extra leaves the source")?;
    wait_applied(&f.c, &f.ns, "to-a", &third).await?;
    assert!(
        configmap(&ca, &app, "extra").await?.is_none(),
        "pruned on A"
    );
    // A reconcile requested now still cannot reach B, and prunes nothing there.
    kc(&[
        "annotate",
        "--overwrite",
        "kustomization",
        "to-b",
        "-n",
        &f.ns,
        &format!("skewer.dev/reconcile-requested-at={third}"),
    ])?;
    wait_failed(&f.c, &f.ns, "to-b", |reason, _| {
        reason == "ClusterUnavailable"
    })
    .await?;
    assert!(
        configmap(&cb, &app, "extra").await?.is_some(),
        "nothing pruned on B"
    );
    assert!(
        event_reasons(&f.ns, "involvedObject.name=to-b,type=Warning")?
            .contains("ClusterUnavailable")
    );

    // Back: reconciliation resumes, and the prune it held back happens now.
    certificate_secret(&f.ns, "spoke-b", b)?;
    wait_applied(&f.c, &f.ns, "to-b", &third).await?;
    assert!(
        configmap(&cb, &app, "extra").await?.is_none(),
        "pruned on B once it is back"
    );
    Ok(())
}

#[tokio::test]
async fn a_three_layer_hop_applies_the_tenant_layer_as_the_tenant() -> Result<()> {
    let c = client().await;
    let home = skewer_e2e::namespace("hop")?;
    let shard = format!("shard={home}");
    let (team_a, team_b) = (unique("team-a"), unique("team-b"));
    kc(&["create", "namespace", &team_b])?;
    let git = skewer_e2e::GitServer::start()?;
    let (platform, tenant) = (git.repo("platform")?, git.repo("tenant")?);
    let cluster_role = unique("tenant-escalation");
    tenant.write(
        "app.yaml",
        &format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {team_a}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: nginx:1.25}}]}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg, namespace: {team_a}}}
data: {{value: tenant}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {cluster_role}}}
rules: [{{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: intruder, namespace: {team_b}}}
data: {{value: tenant}}
"#
        ),
    )?;
    tenant.commit("tenant")?;
    platform.write(
        "tenant.yaml",
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata: {{name: {team_a}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: deployer, namespace: {team_a}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: deployer, namespace: {team_a}}}
rules:
- apiGroups: ["", "apps"]
  resources: [configmaps, deployments]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: deployer, namespace: {team_a}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: deployer}}
subjects: [{{kind: ServiceAccount, name: deployer, namespace: {team_a}}}]
---
apiVersion: skewer.dev/v1alpha1
kind: GitRepository
metadata: {{name: tenant, namespace: {team_a}, labels: {{shard: {home}}}}}
spec: {{url: "{url}", interval: 1s, ref: {{branch: main}}}}
---
apiVersion: skewer.dev/v1alpha1
kind: Kustomization
metadata: {{name: tenant, namespace: {team_a}, labels: {{shard: {home}}}}}
spec:
  sourceRef: {{kind: GitRepository, name: tenant}}
  serviceAccountName: deployer
  interval: 1m
  retryInterval: 2s
  prune: true
"#,
            url = tenant.url
        ),
    )?;
    let platform_commit = platform.commit("platform")?;
    let _skewer = Skewer::start_cluster_wide(&shard, &home, &[])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: platform, namespace: {home}, labels: {{shard: {home}}}}}\nspec: {{url: \"{}\", interval: 1s, ref: {{branch: main}}}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: platform, namespace: {home}, labels: {{shard: {home}}}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: platform}}\n  interval: 1m\n  retryInterval: 2s\n  prune: true\n",
        platform.url
    ))?;
    wait_applied(&c, &home, "platform", &platform_commit).await?;

    // The tenant's layer: what its Role allows is applied, the rest refused by the server.
    let st = wait_failed(&c, &team_a, "tenant", |_, msg| {
        msg.contains("forbidden") && msg.contains(&cluster_role) && msg.contains("intruder")
    })
    .await?;
    let (_, reason, message) = ready(&st).context("Ready")?;
    assert_eq!(reason, "ReconciliationFailed");
    assert!(
        message.contains(&format!("system:serviceaccount:{team_a}:deployer")),
        "the server's message names the tenant: {message}"
    );
    assert!(
        exists(&c, "apps/v1", "Deployment", &team_a, "web")
            .await?
            .is_some()
    );
    assert_eq!(
        value_of(&c, &team_a, "cfg").await?.as_deref(),
        Some("tenant")
    );
    assert!(
        exists(
            &c,
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "",
            &cluster_role
        )
        .await?
        .is_none()
    );
    assert!(configmap(&c, &team_b, "intruder").await?.is_none());
    let ids = inventory_ids(&st);
    assert!(
        ids.iter().any(|i| i.ends_with("_cfg__ConfigMap"))
            && ids.iter().any(|i| i.ends_with("_web_apps_Deployment")),
        "what was applied stays in the inventory: {ids:?}"
    );

    // Drift the tenant may see is healed, through a watch of its own namespace.
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &team_a);
    cms.patch(
        "cfg",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"value": "drifted"}})),
    )
    .await?;
    has_value(&c, &team_a, "cfg", "tenant").await?;

    // The server saw the tenant's requests as the tenant.
    let tenant_user = format!("system:serviceaccount:{team_a}:deployer");
    let seen = audited(&tenant_user, &team_a)?;
    for (verb, resource) in [
        ("patch", "configmaps"),
        ("patch", "deployments"),
        ("list", "configmaps"),
    ] {
        assert!(
            seen.iter()
                .any(|r| r.verb == verb && r.resource == resource),
            "no {verb} {resource} as {tenant_user}: {seen:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn lockdown_impersonates_the_default_account_and_refuses_cross_namespace_sources()
-> Result<()> {
    let f = Fixture::new("lockdown").await?;
    f.repo.write(
        "cm.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: locked, namespace: {}}}\n",
            f.ns
        ),
    )?;
    f.repo.commit("cm")?;
    let other = skewer_e2e::namespace("elsewhere")?;
    let _skewer = f.start(&[
        "--default-service-account=default",
        "--no-cross-namespace-refs",
    ])?;
    kustomization(&f.ns, "locked", "src", "./", "")?;
    let st = wait_failed(&f.c, &f.ns, "locked", |_, msg| msg.contains("forbidden")).await?;
    let (_, _, message) = ready(&st).context("Ready")?;
    assert!(
        message.contains(&format!("system:serviceaccount:{}:default", f.ns)),
        "{message}"
    );
    assert!(
        configmap(&f.c, &f.ns, "locked").await?.is_none(),
        "nothing created"
    );

    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: cross, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src, namespace: {other}}}\n  interval: 1m\n",
        ns = f.ns
    ))?;
    let st = wait_failed(&f.c, &f.ns, "cross", |reason, _| reason == "InvalidSpec").await?;
    let (_, _, message) = ready(&st).context("Ready")?;
    assert!(
        message.contains(&format!("'{other}'")) && message.contains(&format!("'{}'", f.ns)),
        "names both namespaces: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn an_unreachable_spoke_fails_only_its_own_kustomizations() -> Result<()> {
    let _ = spokes();
    let down = skewer_e2e::cluster("spoke-down")?;
    let f = Fixture::new("unreachable").await?;
    let on_spoke = unique("far");
    f.repo
        .write("far/all.yaml", &namespace_and_configmap(&on_spoke, "one"))?;
    f.repo.write("near/cm.yaml", &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: near, namespace: {}}}\ndata: {{value: one}}\n", f.ns))?;
    let first = f.repo.commit("one")?;
    let _skewer = f.start(&[])?;
    let token = std::fs::read_to_string(down.with_file_name("admin.token"))?;
    let name = unique("spoke-down");
    token_secret(&f.ns, &name, &down, token.trim())?;
    kustomization(
        &f.ns,
        "far",
        "src",
        "./far",
        &format!("  prune: true\n  cluster: {name}\n"),
    )?;
    kustomization(&f.ns, "near", "src", "./near", "")?;
    wait_applied(&f.c, &f.ns, "far", &first).await?;
    wait_applied(&f.c, &f.ns, "near", &first).await?;

    skewer_e2e::stop_cluster("spoke-down")?;
    let addr = skewer_e2e::server_addr(&down)?;
    eventually("spoke-down's API server to stop", WAIT, || async {
        Ok(std::net::TcpStream::connect(addr).is_err().then_some(()))
    })
    .await?;
    f.repo
        .write("far/all.yaml", &namespace_and_configmap(&on_spoke, "two"))?;
    f.repo.write("near/cm.yaml", &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: near, namespace: {}}}\ndata: {{value: two}}\n", f.ns))?;
    let second = f.repo.commit("two")?;
    wait_applied(&f.c, &f.ns, "near", &second).await?;
    assert_eq!(value_of(&f.c, &f.ns, "near").await?.as_deref(), Some("two"));
    let st = wait_failed(&f.c, &f.ns, "far", |reason, msg| {
        msg.contains(&format!("cluster '{name}'")) && reason == "ClusterUnavailable"
    })
    .await?;
    let (_, _, message) = ready(&st).context("Ready")?;
    if !message.to_lowercase().contains("connect") {
        bail!("the error is in the message: {message}");
    }
    let rows = get_clusters(&f.ns)?;
    let r = row(&rows, &name)?;
    assert_eq!(r["reachable"], false, "{r}");
    assert_eq!(r["kustomizations"], 1, "{r}");
    assert!(
        r["lastError"].as_str().is_some_and(|e| !e.is_empty()),
        "{r}"
    );

    // Deleting Kustomizations whose cluster cannot be reached, or was never registered, ends
    // their finalizers at once, and says what was not pruned.
    kustomization(
        &f.ns,
        "nowhere",
        "src",
        "./far",
        "  prune: true\n  cluster: nowhere\n",
    )?;
    wait_failed(&f.c, &f.ns, "nowhere", |reason, _| {
        reason == "ClusterUnavailable"
    })
    .await?;
    for name in ["far", "nowhere"] {
        kc(&["delete", "kustomization", name, "-n", &f.ns, "--wait=false"])?;
    }
    let ks: Api<skewer_api::Kustomization> = Api::namespaced(f.c.clone(), &f.ns);
    for name in ["far", "nowhere"] {
        eventually(&format!("Kustomization {name} gone"), WAIT, || async {
            Ok(ks.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
    }
    let messages = |name: &str| {
        kc(&[
            "get",
            "events",
            "-n",
            &f.ns,
            "--field-selector",
            &format!("involvedObject.name={name},type=Warning"),
            "-o",
            "jsonpath={.items[*].message}",
        ])
    };
    let far = messages("far")?;
    assert!(far.contains("could not be pruned on cluster"), "{far}");
    let nowhere = messages("nowhere")?;
    assert!(
        nowhere.contains("nothing was pruned on its cluster"),
        "{nowhere}"
    );
    Ok(())
}
