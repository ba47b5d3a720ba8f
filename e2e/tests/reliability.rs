//! Faults found by probing skewer as a hostile user and an unlucky operator would: each test
//! here failed against skewer before the fix it names.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use skewer_e2e::{eventually, kc, kc_apply, kubectl};

/// Everything the cluster and skewer say about namespace `ns`: Kustomization and source
/// status, Events, and skewer's log.
fn everything_said(ns: &str, skewer: &skewer_e2e::Skewer) -> Result<String> {
    let status = kc(&[
        "get",
        "kustomizations,gitrepositories",
        "-n",
        ns,
        "-o",
        "yaml",
    ])?;
    let events = kc(&["get", "events", "-n", ns, "-o", "yaml"])?;
    Ok(format!("{status}\n{events}\n{}", skewer.logs()))
}

/// Fault 1: a Secret's values never reach status, Events or logs.
#[tokio::test(flavor = "multi_thread")]
async fn secret_values_never_leak_into_messages() -> Result<()> {
    let f = Fixture::new("leak").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    f.repo.write(
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {ns}\nstringData:\n  user: deployer-7731\n  pin: 987654321\n  enabled: true\n"
        ),
    )?;
    f.repo.commit("a secret with unquoted values")?;
    let skewer = f.start(&[])?;
    kustomization(&ns, "app", "src", "./", "")?;
    let st = wait_failed(&c, &ns, "app", |reason, msg| {
        reason == "BuildFailed"
            && msg.contains("stringData.enabled: expected a string, got a boolean")
    })
    .await?;
    let said = everything_said(&ns, &skewer)?;
    for value in ["987654321", "deployer-7731"] {
        assert!(!said.contains(value), "{value} leaked:\n{said}");
    }
    assert!(st.inventory.as_ref().is_none_or(|i| i.is_empty()));

    // Quoted, it applies; a later failure about it still quotes no value.
    f.repo.write(
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {ns}\nstringData:\n  user: deployer-7731\n  pin: \"987654321\"\n"
        ),
    )?;
    let commit = f.repo.commit("quoted")?;
    wait_applied(&c, &ns, "app", &commit).await?;
    let said = everything_said(&ns, &skewer)?;
    assert!(
        !said.contains("987654321") && !said.contains("deployer-7731"),
        "{said}"
    );
    Ok(())
}

/// Fault 4: a Secret written with `stringData` is healed when someone edits its `data`.
#[tokio::test(flavor = "multi_thread")]
async fn a_string_data_secret_is_healed_after_a_patch() -> Result<()> {
    let f = Fixture::new("strdata").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let files = vec![(
        "secret.yaml".to_string(),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {ns}\nstringData:\n  password: from-git\n"
        ),
    )];
    let _skewer = f.app(&files, &[], "").await?;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), &ns);
    let password = |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("password"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    assert_eq!(
        password(&secrets.get("creds").await?).as_deref(),
        Some("from-git")
    );
    kc(&[
        "patch",
        "secret",
        "creds",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"data":{"password":"aGFuZC1lZGl0ZWQ="}}"#,
    ])?;
    eventually("the hand edit to be undone", WAIT, || async {
        let s = secrets.get("creds").await?;
        Ok((password(&s).as_deref() == Some("from-git")).then_some(()))
    })
    .await?;
    Ok(())
}

/// Fault 3: ten thousand failures give a status that fits and an Event that is accepted.
#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_failures_give_a_status_that_fits() -> Result<()> {
    let f = Fixture::new("bounded").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let missing = format!("{ns}-missing");
    for file in 0..10 {
        let docs: String = (0..1000)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{file}-{i:04}, namespace: {missing}}}\n"))
            .collect();
        f.repo.write(&format!("cms/{file}.yaml"), &docs)?;
    }
    f.repo
        .commit("10,000 ConfigMaps in a namespace that does not exist")?;
    let _skewer = f.start(&[])?;
    kustomization(&ns, "app", "src", "./cms", "  timeout: 5m\n")?;
    // 10,000 applies through a debug build take most of a minute on this machine, more when
    // other tests share it: the deadline is about the status, not about speed (benches are).
    let st = eventually(
        "the 10,000 failures in Ready",
        Duration::from_secs(240),
        || async {
            let st = status(&c, &ns, "app").await?;
            let failed = ready(&st).is_some_and(|(status, reason, msg)| {
                status == "False"
                    && reason == "ReconciliationFailed"
                    && msg.starts_with("10000 objects: ConfigMap/")
            });
            Ok(failed.then_some(st))
        },
    )
    .await?;
    let (_, _, message) = ready(&st).context("Ready")?;
    assert!(message.len() <= 4096, "{} bytes", message.len());
    assert!(
        message.contains("more (each is in skewer's log)"),
        "{message}"
    );
    eventually("the failure's Event", WAIT, || async {
        let reasons = event_reasons(&ns, "involvedObject.name=app")?;
        Ok(reasons.contains("ReconciliationFailed").then_some(()))
    })
    .await?;
    Ok(())
}

/// Fault 5: an interval of zero is refused, and a failing Kustomization backs off.
#[tokio::test(flavor = "multi_thread")]
async fn zero_intervals_are_refused_and_failures_back_off() -> Result<()> {
    let f = Fixture::new("hotloop").await?;
    let ns = f.ns.clone();
    let skewer = f.app(&f.configmap(), &[], "").await?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: zero, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src}}\n  path: ./\n  interval: 0s\n"
    ))?;
    // Fails for ever: its source does not exist.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: failing, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: nowhere}}\n  path: ./\n  interval: 1s\n  retryInterval: 1s\n"
    ))?;
    let path = "jsonpath={.status.conditions[?(@.type==\"Stalled\")].message}";
    eventually("zero to be Stalled naming spec.interval", WAIT, || async {
        let m = kc(&["get", "kustomization", "zero", "-n", &ns, "-o", path])?;
        Ok(m.starts_with("spec.interval: '0s'").then_some(()))
    })
    .await?;
    wait_failed(&f.c, &ns, "failing", |reason, _| reason == "ArtifactFailed").await?;
    // Requests skewer sends about this namespace in 10 s, counted by the API server.
    // Lease renewals are leader election, not reconciles.
    let reconciling = || -> Result<usize> {
        let all = skewer_e2e::audited("skewer", &ns)?;
        Ok(all.iter().filter(|a| a.resource != "leases").count())
    };
    let before = reconciling()?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let sent = reconciling()? - before;
    assert!(
        sent < 40,
        "{sent} requests in 10 s: a reconcile loop is not backing off\n{}",
        skewer.logs()
    );
    Ok(())
}

/// Fault 6: two Kustomizations applying one object: the second is refused, both say so, and
/// deleting the second prunes nothing of the first's.
#[tokio::test(flavor = "multi_thread")]
async fn overlapping_kustomizations_do_not_fight() -> Result<()> {
    let f = Fixture::new("overlap").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let files = vec![
        (
            "sub/shared.yaml".to_string(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: {ns}\n"
            ),
        ),
        (
            "own.yaml".to_string(),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: own\n  namespace: {ns}\n"),
        ),
    ];
    let _skewer = f.app(&files, &[], "  prune: true\n").await?;
    kustomization(&ns, "second", "src", "./sub", "  prune: true\n")?;
    let st = wait_failed(&c, &ns, "second", |reason, msg| {
        reason == "OwnershipConflict"
            && msg.contains(&format!(
                "ConfigMap/{ns}/shared is applied by Kustomization/{ns}/app"
            ))
    })
    .await?;
    assert!(st.inventory.as_ref().is_none_or(|i| i.is_empty()));
    // The holder hears of it too.
    eventually("a Warning Event on the holder", WAIT, || async {
        let reasons = event_reasons(&ns, "involvedObject.name=app,type=Warning")?;
        Ok(reasons.contains("OwnershipConflict").then_some(()))
    })
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    let labels = cms.get("shared").await?.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("skewer.dev/name").map(String::as_str),
        Some("app")
    );

    // Deleting the refused one prunes nothing.
    let ks: Api<skewer_api::Kustomization> = Api::namespaced(c.clone(), &ns);
    ks.delete("second", &DeleteParams::default()).await?;
    eventually("second to be gone", WAIT, || async {
        Ok(ks.get_opt("second").await?.is_none().then_some(()))
    })
    .await?;
    assert!(
        cms.get_opt("shared").await?.is_some(),
        "the shared object was pruned"
    );
    let st = status(&c, &ns, "app").await?;
    assert_eq!(ready(&st).map(|r| r.0), Some("True"));
    assert!(inventory_ids(&st).iter().any(|id| id.contains("_shared_")));
    Ok(())
}

/// Fault 7: a file of 20,000 documents of generated manifests loads and applies.
#[tokio::test(flavor = "multi_thread")]
async fn a_twenty_thousand_document_file_applies() -> Result<()> {
    let f = Fixture::new("many").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let docs: String = (0..20_000)
        .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: m{i}}}\n"))
        .collect();
    f.repo.write("generated.yaml", &docs)?;
    let commit = f.repo.commit("20,000 documents in one file")?;
    let _skewer = f.start(&["--concurrency", "32"])?;
    kustomization(
        &ns,
        "app",
        "src",
        "./",
        &format!("  targetNamespace: {ns}\n  timeout: 10m\n"),
    )?;
    let st = eventually(
        "20,000 objects applied",
        Duration::from_secs(300),
        || async {
            let st = status(&c, &ns, "app").await?;
            let at = st
                .last_applied_revision
                .as_deref()
                .is_some_and(|r| r.ends_with(&commit));
            Ok(at.then_some(st))
        },
    )
    .await?;
    assert_eq!(inventory_ids(&st).len(), 20_000);
    Ok(())
}

/// Fault 8: a GitRepository cannot read skewer's own cache of another namespace's source.
#[tokio::test(flavor = "multi_thread")]
async fn skewers_own_cache_is_not_a_source() -> Result<()> {
    let f = Fixture::new("cache").await?;
    let ns = f.ns.clone();
    let skewer = f.app(&f.configmap(), &[], "").await?;
    let cache = skewer
        .data_dir
        .path()
        .join(format!("git/gitrepository/{ns}/src"));
    assert!(
        cache.join("HEAD").exists(),
        "the cache is where this test expects it"
    );
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: peek, namespace: {ns}}}\nspec:\n  url: file://{}\n  interval: 1m\n  ref: {{name: refs/skewer/fetched}}\n",
        cache.display()
    ))?;
    let path = "jsonpath={.status.conditions[?(@.type==\"Stalled\")].message}";
    let message = eventually("peek to be refused", WAIT, || async {
        let m = kc(&["get", "gitrepository", "peek", "-n", &ns, "-o", path])?;
        Ok(m.contains("inside skewer's data directory").then_some(m))
    })
    .await?;
    assert!(message.starts_with("spec.url: "), "{message}");
    let artifact = kc(&[
        "get",
        "gitrepository",
        "peek",
        "-n",
        &ns,
        "-o",
        "jsonpath={.status.artifact}",
    ])?;
    assert!(
        artifact.is_empty(),
        "stored an artifact from the cache: {artifact}"
    );
    Ok(())
}

/// Fault 2: objects deleted while skewer's watches are broken (an API server restart) come
/// back as soon as the watches re-list; a reconcile request is handled.
#[tokio::test(flavor = "multi_thread")]
async fn deletions_during_an_outage_are_healed_when_the_watch_recovers() -> Result<()> {
    let cluster = "outage";
    let admin = skewer_e2e::cluster(cluster)?;
    skewer_e2e::install_crds(&admin)?;
    let c = skewer_e2e::client(&admin).await?;
    let ns = skewer_e2e::unique("outage");
    let run = |args: &[&str]| -> Result<String> {
        let out = kubectl(&admin).args(args).output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(&["create", "namespace", &ns])?;
    let git = skewer_e2e::GitServer::start()?;
    let repo = git.repo("app")?;
    for name in ["a", "b", "c"] {
        repo.write(
            &format!("{name}.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
            ),
        )?;
    }
    let commit = repo.commit("three")?;

    // skewer reaches this API server through a proxy the test can cut.
    let proxy = skewer_e2e::Proxy::start(skewer_e2e::server_addr(&admin)?).await?;
    let via_proxy = skewer_e2e::skewer_kubeconfig_of(&admin, Some(proxy.addr))?;
    let skewer = skewer_e2e::Skewer::start_on(&via_proxy, &ns, &["--leader-elect=false"])?;
    let manifests = format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1h\n  ref: {{branch: main}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src}}\n  path: ./\n  interval: 1h\n",
        repo.url
    );
    let file = skewer.data_dir.path().join("sync.yaml");
    std::fs::write(&file, manifests)?;
    run(&["apply", "-f", &file.display().to_string()])?;
    wait_applied(&c, &ns, "app", &commit).await?;

    // The outage: skewer is cut off, the API server restarts (its watch cache starts afresh,
    // so skewer's watches must re-list), and two objects are deleted meanwhile.
    proxy.cut();
    skewer_e2e::restart_cluster(cluster)?;
    let c = skewer_e2e::client(&admin).await?;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    for name in ["a", "b"] {
        cms.delete(name, &DeleteParams::default()).await?;
    }
    proxy.restore();
    let restored = Instant::now();
    eventually("a and b recreated", Duration::from_secs(90), || async {
        let back = cms.get_opt("a").await?.is_some() && cms.get_opt("b").await?.is_some();
        Ok(back.then_some(()))
    })
    .await?;
    eprintln!(
        "healed {:?} after the proxy was restored",
        restored.elapsed()
    );
    let logs = skewer.logs();
    assert!(logs.contains("deleted while the watch was down"), "{logs}");

    // A reconcile request after the outage is handled.
    let ks: Api<skewer_api::Kustomization> = Api::namespaced(c.clone(), &ns);
    let asked = "after-the-outage";
    let patch = serde_json::json!({"metadata": {"annotations": {"skewer.dev/reconcile-requested-at": asked}}});
    ks.patch("app", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually(
        "the request to be handled",
        Duration::from_secs(90),
        || async {
            let st = ks.get("app").await?.status.unwrap_or_default();
            Ok((st.last_handled_reconcile_at.as_deref() == Some(asked)).then_some(()))
        },
    )
    .await?;
    drop(skewer);
    skewer_e2e::stop_cluster(cluster)?;
    Ok(())
}
