//! Issue 2 acceptance: a Git directory reconciled into a real API server.

mod common;

use std::time::Duration;

use anyhow::Result;
use common::*;
use skewer_e2e::{eventually, kc, kc_apply};

fn app_files(app_ns: &str, group: &str) -> Vec<(String, String)> {
    vec![
        (
            "apps/namespace.yaml".into(),
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {app_ns}\n"),
        ),
        (
            "apps/crd.yaml".into(),
            format!(
                "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: Widget, plural: widgets, singular: widget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"
            ),
        ),
        (
            "apps/widget.yaml".into(),
            format!(
                "apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: {app_ns}\nspec:\n  size: 3\n"
            ),
        ),
        (
            "apps/deployment.yaml".into(),
            format!(
                "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {app_ns}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 80
        resources:
          requests:
            cpu: 1
"
            ),
        ),
        (
            "apps/service.yaml".into(),
            format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {app_ns}\nspec:\n  selector: {{app: web}}\n  ports:\n  - port: 80\n    targetPort: 80\n"
            ),
        ),
        (
            "apps/config.yaml".into(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {app_ns}\ndata:\n  mode: \"on\"\n"
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn applies_in_order_prunes_and_survives_broken_commits() -> Result<()> {
    let f = Fixture::new("core").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let app_ns = format!("{ns}-app");
    let group = format!("{ns}.e2e.skewer.dev");
    for (path, content) in app_files(&app_ns, &group) {
        repo.write(&path, &content)?;
    }
    let first = repo.commit("app")?;
    let _skewer = f.start(&[])?;

    git_repository(&ns, "app", &repo.url)?;
    let patch = "  prune: true\n  patches:\n  - target: {kind: Deployment, name: web}\n    patch: |\n      - op: replace\n        path: /spec/replicas\n        value: 3\n";
    kustomization(&ns, "app", "src", "./apps", patch)?;

    let st = wait_applied(c, &ns, "app", &first).await?;
    let mut want = vec![
        format!("_{app_ns}__Namespace"),
        format!("_widgets.{group}_apiextensions.k8s.io_CustomResourceDefinition"),
        format!("{app_ns}_w1_{group}_Widget"),
        format!("{app_ns}_web_apps_Deployment"),
        format!("{app_ns}_web__Service"),
        format!("{app_ns}_settings__ConfigMap"),
    ];
    want.sort();
    assert_eq!(inventory_ids(&st), want);

    // The JSON patch, the old-server port fix, field manager and owner labels.
    let deploy: serde_json::Value = serde_json::from_str(&kc(&[
        "get",
        "deployment",
        "web",
        "-n",
        &app_ns,
        "-o",
        "json",
        "--show-managed-fields",
    ])?)?;
    assert_eq!(deploy["spec"]["replicas"], 3);
    assert_eq!(deploy["metadata"]["labels"]["skewer.dev/name"], "app");
    assert_eq!(
        deploy["metadata"]["labels"]["skewer.dev/namespace"],
        ns.as_str()
    );
    let managers: Vec<&str> = deploy["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["operation"] == "Apply")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["skewer"]);
    let svc: serde_json::Value = serde_json::from_str(&kc(&[
        "get", "service", "web", "-n", &app_ns, "-o", "json",
    ])?)?;
    assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
    assert!(
        exists(c, &format!("{group}/v1"), "Widget", &app_ns, "w1")
            .await?
            .is_some()
    );
    let revision = git_revision(c, &ns, "src").await?.unwrap();
    assert_eq!(revision, format!("main@sha1:{first}"));

    // Removing a file prunes its object.
    repo.remove("apps/config.yaml")?;
    let second = repo.commit("drop config")?;
    let st = wait_applied(c, &ns, "app", &second).await?;
    assert!(
        exists(c, "v1", "ConfigMap", &app_ns, "settings")
            .await?
            .is_none(),
        "ConfigMap was not pruned"
    );
    assert!(!inventory_ids(&st).iter().any(|id| id.contains("settings")));

    // A broken file fails the build, names file and line, and prunes nothing, even though
    // the same commit removed the Service.
    repo.write(
        "apps/broken.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n",
    )?;
    repo.remove("apps/service.yaml")?;
    let broken = repo.commit("broken")?;
    let st = wait_failed(c, &ns, "app", |reason, msg| {
        reason == "BuildFailed" && msg.contains("apps/broken.yaml") && msg.contains("line")
    })
    .await?;
    assert!(
        st.last_attempted_revision
            .as_deref()
            .unwrap()
            .ends_with(&broken)
    );
    assert!(
        st.last_applied_revision
            .as_deref()
            .unwrap()
            .ends_with(&second)
    );
    assert!(
        exists(c, "v1", "Service", &app_ns, "web").await?.is_some(),
        "a broken source pruned"
    );
    assert!(
        inventory_ids(&st)
            .iter()
            .any(|id| id.ends_with("_web__Service"))
    );

    // The next good commit recovers, and only now is the Service pruned.
    repo.remove("apps/broken.yaml")?;
    let fixed = repo.commit("fixed")?;
    wait_applied(c, &ns, "app", &fixed).await?;
    assert!(exists(c, "v1", "Service", &app_ns, "web").await?.is_none());
    assert!(
        exists(c, "apps/v1", "Deployment", &app_ns, "web")
            .await?
            .is_some()
    );
    Ok(())
}

/// The metadata line asking skewer to recreate an object on an immutable-field change.
fn force_annotation(force: bool) -> &'static str {
    if force {
        "  annotations: {skewer.dev/force: enabled}\n"
    } else {
        ""
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn prune_opt_out_and_immutable_fields() -> Result<()> {
    let f = Fixture::new("immut").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let ip = |n: u32| format!("10.96.{}.{}", 200 + std::process::id() % 50, n);
    let service = |ip: &str, force: bool| {
        let ann = force_annotation(force);
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: fixed\n  namespace: {ns}\n{ann}spec:\n  clusterIP: {ip}\n  ports:\n  - port: 80\n"
        )
    };
    let job = |cmd: &str, force: bool| {
        let ann = force_annotation(force);
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: once\n  namespace: {ns}\n{ann}spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: c\n        image: busybox\n        command: [\"{cmd}\"]\n"
        )
    };
    repo.write("keep.yaml", &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep\n  namespace: {ns}\n  annotations: {{skewer.dev/prune: disabled}}\n"))?;
    repo.write("service.yaml", &service(&ip(10), false))?;
    repo.write("job.yaml", &job("true", false))?;
    let first = repo.commit("one")?;
    let _skewer = f.start(&[])?;
    kustomization(&ns, "app", "src", "./", "  prune: true\n")?;
    wait_applied(c, &ns, "app", &first).await?;

    // prune: disabled keeps the object when it leaves Git.
    repo.remove("keep.yaml")?;
    let second = repo.commit("drop keep")?;
    let st = wait_applied(c, &ns, "app", &second).await?;
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "keep").await?.is_some(),
        "prune: disabled object was deleted"
    );
    assert!(!inventory_ids(&st).iter().any(|id| id.contains("_keep_")));

    // Immutable changes fail with the object and field named.
    let old_uid = exists(c, "batch/v1", "Job", &ns, "once")
        .await?
        .unwrap()
        .metadata
        .uid;
    repo.write("service.yaml", &service(&ip(11), false))?;
    repo.write("job.yaml", &job("false", false))?;
    repo.commit("immutable change")?;
    wait_failed(c, &ns, "app", |_, msg| {
        msg.contains(&format!("Service/{ns}/fixed"))
            && msg.contains("spec.clusterIP")
            && msg.contains(&format!("Job/{ns}/once"))
            && msg.contains("spec.template")
    })
    .await?;

    // With skewer.dev/force: enabled both are recreated.
    repo.write("service.yaml", &service(&ip(11), true))?;
    repo.write("job.yaml", &job("false", true))?;
    let forced = repo.commit("force")?;
    wait_applied(c, &ns, "app", &forced).await?;
    let svc = exists(c, "v1", "Service", &ns, "fixed").await?.unwrap();
    assert_eq!(svc.data["spec"]["clusterIP"], ip(11));
    let new_job = exists(c, "batch/v1", "Job", &ns, "once").await?.unwrap();
    assert_ne!(new_job.metadata.uid, old_uid, "Job was not recreated");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn depends_on_suspend_and_health_timeout() -> Result<()> {
    let f = Fixture::new("deps").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let cm = |name: &str, v: u32| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n  v: \"{v}\"\n"
        )
    };
    repo.write("a/cm.yaml", &cm("a", 1))?;
    repo.write("b/cm.yaml", &cm("b", 1))?;
    repo.write(
        "slow/deploy.yaml",
        &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: slow\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: slow}}\n  template:\n    metadata:\n      labels: {{app: slow}}\n    spec:\n      containers:\n      - name: c\n        image: nginx\n"),
    )?;
    let first = repo.commit("one")?;
    let _skewer = f.start(&[])?;

    // b depends on a, which does not exist yet.
    kustomization(&ns, "b", "src", "./b", "  dependsOn:\n  - name: a\n")?;
    wait_failed(c, &ns, "b", |reason, msg| {
        reason == "DependencyNotReady" && msg.contains("/a")
    })
    .await?;
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "b").await?.is_none(),
        "b applied before its dependency"
    );
    kustomization(&ns, "a", "src", "./a", "")?;
    wait_applied(c, &ns, "a", &first).await?;
    wait_applied(c, &ns, "b", &first).await?;

    // Suspended: a new revision is applied by a but not by b.
    let suspend_b = |suspend: bool| {
        let patch = format!(r#"{{"spec":{{"suspend":{suspend}}}}}"#);
        kc(&[
            "patch",
            "kustomization",
            "b",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            &patch,
        ])
    };
    suspend_b(true)?;
    repo.write("a/cm.yaml", &cm("a", 2))?;
    repo.write("b/cm.yaml", &cm("b", 2))?;
    let second = repo.commit("two")?;
    wait_applied(c, &ns, "a", &second).await?;
    // b would have applied within milliseconds of a; give it a generous window to misbehave.
    let changed = eventually(
        "suspended b to change (it must not)",
        Duration::from_secs(3),
        || async {
            let b = exists(c, "v1", "ConfigMap", &ns, "b").await?.unwrap();
            Ok((b.data["data"]["v"] == "2").then_some(()))
        },
    )
    .await;
    assert!(
        changed.is_err(),
        "a suspended Kustomization applied a new revision"
    );
    suspend_b(false)?;
    wait_applied(c, &ns, "b", &second).await?;

    // Health checks that outlast the timeout fail, naming the unhealthy object. (This cluster
    // has no kubelet, so the Deployment never becomes available.)
    kustomization(
        &ns,
        "slow",
        "src",
        "./slow",
        "  wait: true\n  timeout: 3s\n",
    )?;
    let st = wait_failed(c, &ns, "slow", |reason, msg| {
        reason == "HealthCheckFailed" && msg.contains(&format!("Deployment/{ns}/slow"))
    })
    .await?;
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Healthy" && c.status == "False")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_apply_converges_without_orphans() -> Result<()> {
    let f = Fixture::new("kill").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let doc = |i: u32| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:03}\n  namespace: {ns}\ndata:\n  i: \"{i}\"\n"
        )
    };
    let all: String = (0..500).map(|i| format!("---\n{}", doc(i))).collect();
    repo.write("cms.yaml", &all)?;
    let first = repo.commit("500")?;
    // One request in flight, so that a kill lands mid-apply.
    let mut skewer = f.start(&["--concurrency", "1"])?;
    kustomization(&ns, "app", "src", "./", "  prune: true\n")?;

    let seen = eventually("some ConfigMaps applied", WAIT, || async {
        let n = owned_configmaps(c, &ns, "app").await?.len();
        Ok((n >= 20).then_some(n))
    })
    .await?;
    skewer.kill()?;
    let at_kill = owned_configmaps(c, &ns, "app").await?.len();
    assert!(
        at_kill < 500,
        "the apply finished before the kill ({seen} seen); the test proves nothing"
    );
    // The inventory was widened before applying, so everything in flight is tracked.
    let st = status(c, &ns, "app").await?;
    assert_eq!(
        inventory_ids(&st).len(),
        500,
        "inventory not recorded before applying"
    );

    skewer.restart()?;
    let st = wait_applied(c, &ns, "app", &first).await?;
    assert_eq!(inventory_ids(&st).len(), 500);
    assert_eq!(owned_configmaps(c, &ns, "app").await?.len(), 500);

    // Dropping 200 prunes exactly those; nothing else goes.
    let kept: String = (0..300).map(|i| format!("---\n{}", doc(i))).collect();
    repo.write("cms.yaml", &kept)?;
    let second = repo.commit("300")?;
    let st = wait_applied(c, &ns, "app", &second).await?;
    let live = owned_configmaps(c, &ns, "app").await?;
    let expected: Vec<String> = (0..300).map(|i| format!("cm-{i:03}")).collect();
    assert_eq!(live, expected);
    let inv: Vec<String> = inventory_ids(&st)
        .iter()
        .map(|id| id.split('_').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(inv, expected);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_kustomization_follows_its_deletion_policy() -> Result<()> {
    let f = Fixture::new("delete").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let cm = |name: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n")
    };
    repo.write("pruned/cm.yaml", &cm("pruned"))?;
    repo.write("orphaned/cm.yaml", &cm("orphaned"))?;
    let first = repo.commit("one")?;
    let _skewer = f.start(&[])?;
    kustomization(&ns, "pruned", "src", "./pruned", "  prune: true\n")?;
    kustomization(
        &ns,
        "orphaned",
        "src",
        "./orphaned",
        "  prune: true\n  deletionPolicy: Orphan\n",
    )?;
    wait_applied(c, &ns, "pruned", &first).await?;
    wait_applied(c, &ns, "orphaned", &first).await?;

    // Success is reported as an Event too.
    let events = event_reasons(&ns, "involvedObject.name=pruned")?;
    assert!(
        events.contains("ReconciliationSucceeded"),
        "events: {events}"
    );

    // kubectl delete waits for the finalizer, so the objects are gone (or kept) when it returns.
    kc(&[
        "delete",
        "kustomization",
        "pruned",
        "orphaned",
        "-n",
        &ns,
        "--timeout=60s",
    ])?;
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "pruned").await?.is_none(),
        "prune: true did not delete on deletion"
    );
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "orphaned")
            .await?
            .is_some(),
        "deletionPolicy: Orphan deleted"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_secrets_are_named_and_a_tenant_without_rights_applies_nothing() -> Result<()> {
    let f = Fixture::new("refuse").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    repo.write(
        "cm.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: {ns}\n"),
    )?;
    repo.commit("one")?;
    let _skewer = f.start(&[])?;
    skewer_e2e::kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: private, namespace: {ns}}}\nspec:\n  url: {}\n  secretRef: {{name: creds}}\n",
        repo.url
    ))?;
    kustomization(&ns, "tenant", "src", "./", "  serviceAccountName: tenant\n")?;
    let condition = |kind: &'static str, name: &'static str, type_: &'static str, want: String| {
        let ns = ns.clone();
        async move {
            eventually(
                &format!("{kind}/{name} {type_} saying {want}"),
                WAIT,
                || async {
                    let path =
                        format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].message}}");
                    let out = kc(&["get", kind, name, "-n", &ns, "-o", &path])?;
                    Ok(out.contains(&want).then_some(()))
                },
            )
            .await
        }
    };
    // A Secret that does not exist (yet) is named, and retried on the interval.
    let missing = format!("spec.secretRef: secret '{ns}/creds' not found");
    condition("gitrepository", "private", "Ready", missing).await?;
    // Its ServiceAccount has no rights: the server refuses, naming it.
    condition(
        "kustomization",
        "tenant",
        "Ready",
        format!("User \"system:serviceaccount:{ns}:tenant\" cannot patch resource \"configmaps\""),
    )
    .await?;
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "x").await?.is_none(),
        "applied without the tenant's identity"
    );
    Ok(())
}

/// skewer's own install manifests (generated into deploy/) are accepted by the API server.
#[test]
fn install_manifests_are_valid_for_the_server() -> Result<()> {
    let deploy = skewer_e2e::root().join("deploy");
    kc(&[
        "apply",
        "-f",
        &deploy.join("rbac.yaml").display().to_string(),
    ])?;
    let out = kc(&[
        "apply",
        "--dry-run=server",
        "-f",
        &deploy.join("deployment.yaml").display().to_string(),
    ])?;
    assert!(out.contains("deployment.apps/skewer"), "{out}");
    Ok(())
}

/// An inventory an older skewer recorded in Flux's format (`entries`) still prunes what left
/// Git, and the sync's writes leave only skewer's `objects`.
#[tokio::test(flavor = "multi_thread")]
async fn an_inventory_in_fluxs_format_still_prunes() -> Result<()> {
    let f = Fixture::new("oldinv").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let configmap = |name: &str, labels: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n{labels}"
        )
    };
    repo.write("kept.yaml", &configmap("kept", ""))?;
    let commit = repo.commit("kept only")?;
    // What the older skewer applied, recorded, and has since left Git.
    kc_apply(&configmap(
        "gone",
        &format!("  labels: {{skewer.dev/name: app, skewer.dev/namespace: {ns}}}\n"),
    ))?;
    kustomization(&ns, "app", "src", "./", "  prune: true\n")?;
    let old = serde_json::json!({"status": {"inventory": {"entries": [
        {"id": format!("{ns}_gone__ConfigMap"), "v": "v1"}
    ]}}});
    kc(&[
        "patch",
        "kustomization",
        "app",
        "-n",
        &ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &old.to_string(),
    ])?;

    let _skewer = f.start(&[])?;
    let st = wait_applied(c, &ns, "app", &commit).await?;
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "gone").await?.is_none(),
        "the object recorded in `entries` was not pruned"
    );
    assert_eq!(inventory_ids(&st), [format!("{ns}_kept__ConfigMap")]);
    let raw: serde_json::Value = serde_json::from_str(&kc(&[
        "get",
        "kustomization",
        "app",
        "-n",
        &ns,
        "-o",
        "json",
    ])?)?;
    assert_eq!(
        raw["status"]["inventory"],
        serde_json::json!({"objects": [format!("{ns}_kept__ConfigMap v1")]}),
        "`entries` is cleared"
    );
    Ok(())
}
